"""Fashion-MNIST (Zalando: 60,000 training and 10,000 test 28x28 grayscale images of clothing,
10 balanced classes) from its four idx files, offline.

Where the files are: `<root>/FashionMNIST/raw/`, uncompressed, under the names of the original
release without `.gz` (`train-images-idx3-ubyte`, ...): torchvision's layout, so that
`torchvision.datasets.FashionMNIST(root, download=False)` reads the same folder. When files are
missing there and `source` holds them gzipped (Debian's `dataset-fashion-mnist` package installs
them in /usr/share/datasets/fashion-mnist), they are decompressed into it first, each through a
temporary file renamed into place, so that a half-written file is never taken for a complete one
(and two processes placing the same file at once both leave the whole file). Neither: a one-line
UserError saying how to get them.

Read with numpy (the idx format is a big-endian header and raw bytes), not torchvision: importing
torchvision costs seconds, and the images fit in memory like digits' (the runner hands them to
the workers instead of every worker reading them again).

Preprocessing, as digits': pixels / 255; `downsample` k > 1 averages k x k blocks (2: 14x14);
then standardised with one scalar mean and std of the training images in use (`train_size` of
them, drawn stratified by class with `split_seed`; null = all). `test_size`: as many of the
10,000 test images, drawn the same way (null = all; fewer test images evaluate faster and
resolve less: 2,000 resolve 0.0005 of accuracy).
"""

from __future__ import annotations

import contextlib
import gzip
import os
import zlib
from collections.abc import Mapping

import numpy as np
import torch

from experiments.data import params  # the values and the files' presence, torch-free (pre-flight)
from experiments.data.bundle import DataBundle, TensorImageDataset, one_line
from experiments.data.params import fashion_mnist_params as _params
from experiments.errors import OutputError, UserError

FASHION_MNIST_HOME = "https://github.com/zalandoresearch/fashion-mnist"
DEBIAN_SOURCE = "/usr/share/datasets/fashion-mnist"  # apt-get install dataset-fashion-mnist
RAW_FOLDER = os.path.join("FashionMNIST", "raw")  # under root: torchvision's layout
NUM_CLASSES = 10
IMAGE_MAGIC, LABEL_MAGIC = 2051, 2049  # idx: 0x0803 = unsigned bytes, 3 dims; 0x0801 = 1 dim
# (images, labels) file of each split, uncompressed; the gzipped copies add ".gz"
FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}
ALL_FILES = [name for pair in FILES.values() for name in pair]


def fashion_mnist_root(cfg: Mapping) -> str:
    root = cfg.get("root") or os.environ.get("FASHION_MNIST_ROOT") or "./data"
    return os.path.abspath(os.path.expanduser(str(root)))


def raw_folder(cfg: Mapping) -> str:
    return os.path.join(fashion_mnist_root(cfg), RAW_FOLDER)


def _source(cfg: Mapping) -> str | None:
    source = cfg.get("source", DEBIAN_SOURCE)
    return os.path.abspath(os.path.expanduser(str(source))) if source else None


# ---------------------------------------------------------------------------------------------
# the files


def place(cfg: Mapping) -> str:
    """The folder of the four uncompressed idx files: decompress from `source` what is missing
    there; a one-line UserError when a file is in neither place."""
    folder, source = raw_folder(cfg), _source(cfg)
    missing = [f for f in ALL_FILES if not os.path.isfile(os.path.join(folder, f))]
    for name in missing:
        gz = os.path.join(source, name + ".gz") if source else None
        if gz and os.path.isfile(gz):
            _decompress(gz, os.path.join(folder, name))
    error = params.fashion_mnist_missing(cfg, placing=True)
    if error is not None:
        raise error
    return folder


def _write_atomic(path: str, data: bytes) -> None:
    """`data` into `path` through a temporary file renamed into place: a reader never sees a
    half-written file. (By hand: experiments/store's helper lies above this room.)"""
    import tempfile

    folder, name = os.path.split(path)
    fd, tmp = tempfile.mkstemp(dir=folder or ".", prefix=f".{name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _decompress(gz: str, path: str) -> None:
    """`gz` decompressed to `path`, checked as an idx file first, written atomically."""
    try:
        with gzip.open(gz, "rb") as f:
            data = f.read()
    except (OSError, EOFError, zlib.error) as e:
        raise UserError(
            f"cannot decompress {gz} ({type(e).__name__}: {one_line(e, 100)}): reinstall"
            " dataset-fashion-mnist, or place the uncompressed idx files in"
            f" {os.path.dirname(path)}"
        ) from None
    _parse_idx(data, gz, IMAGE_MAGIC if "images" in os.path.basename(path) else LABEL_MAGIC)
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        _write_atomic(path, data)
    except (OSError, OutputError) as e:
        reason = e if isinstance(e, OutputError) else f"{e.strerror or e}"
        raise UserError(
            f"cannot place Fashion-MNIST in {os.path.dirname(path)} ({one_line(reason, 100)}):"
            " point dataset.root at a writable folder"
        ) from None


def _parse_idx(data: bytes, path: str, magic: int) -> np.ndarray:
    """The array of an idx file of unsigned bytes: a big-endian magic number (0x08 << 8 |
    number of dimensions), the dimensions (big-endian uint32 each), then the values."""
    ndim = magic & 0xFF
    header = 4 * (1 + ndim)
    found = int.from_bytes(data[:4], "big") if len(data) >= 4 else None
    if found != magic:
        raise UserError(
            f"{path} is not an idx file of {'images' if ndim == 3 else 'labels'} (magic number"
            f" {found}, expected {magic}): replace it with the file from {FASHION_MNIST_HOME}"
        )
    dims = (
        tuple(int(d) for d in np.frombuffer(data, ">u4", count=ndim, offset=4))
        if len(data) >= header
        else ()
    )
    if len(data) != header + int(np.prod(dims, dtype=np.int64)) or not dims:
        raise UserError(
            f"{path} is truncated or too long: {len(data)} bytes, its header says"
            f" {' x '.join(map(str, dims)) or 'nothing'}; replace it with the file from"
            f" {FASHION_MNIST_HOME}"
        )
    return np.frombuffer(data, np.uint8, offset=header).reshape(dims)


def _read(path: str, magic: int) -> np.ndarray:
    with open(path, "rb") as f:
        return _parse_idx(f.read(), path, magic)


def _read_split(folder: str, split: str) -> tuple[np.ndarray, np.ndarray]:
    """uint8 images [N, H, W] and int64 labels [N] of `split`, checked against each other."""
    images_name, labels_name = FILES[split]
    images = _read(os.path.join(folder, images_name), IMAGE_MAGIC)
    labels = _read(os.path.join(folder, labels_name), LABEL_MAGIC).astype(np.int64)
    if len(images) != len(labels) or images.shape[1] != images.shape[2] or len(labels) == 0:
        raise UserError(
            f"Fashion-MNIST {split} files in {folder} disagree: {len(labels)} labels for"
            f" {' x '.join(map(str, images.shape))} images (expected N x 28 x 28 and N labels)"
        )
    if labels.max() >= NUM_CLASSES:
        raise UserError(
            f"{os.path.join(folder, labels_name)} holds label {labels.max()}: Fashion-MNIST has"
            f" {NUM_CLASSES} classes (0-9)"
        )
    return images, labels


def _train_indices(
    labels: np.ndarray, size: int | None, seed: int, key: str = "train_size"
) -> np.ndarray:
    """The images in use of a split, in dataset order: all, or `size` of them drawn stratified
    by class (each class keeps its share) with `seed` (`key`: train_size or test_size)."""
    from sklearn.model_selection import train_test_split

    n = len(labels)
    what = "training" if key == "train_size" else "test"
    if size is None or size == n:
        return np.arange(n)
    if size > n:
        raise UserError(f"dataset.{key}={size} exceeds the {n} {what} images")
    try:
        chosen, _ = train_test_split(
            np.arange(n), train_size=size, stratify=labels, random_state=seed
        )
    except ValueError as e:
        raise UserError(
            f"fashion_mnist: cannot draw {key}={size} of {n} {what} images"
            f" stratified by class: {one_line(e)}"
        ) from None
    return np.sort(chosen)


# ---------------------------------------------------------------------------------------------
# the entry points (experiments.data.datasets.prepare_dataset / load_dataset)


def prepare(cfg: Mapping) -> None:
    """Check the keys, place the files (decompressing Debian's copy when needed) and check
    what they hold against the keys: every problem before any worker starts."""
    p = _params(cfg)
    (_, train_labels), (_, test_labels) = _read_files(place(cfg), p["downsample"])
    _train_indices(train_labels, p["train_size"], p["split_seed"])
    _train_indices(test_labels, p["test_size"], p["split_seed"], "test_size")


def load(cfg: Mapping) -> DataBundle:
    """Train and test sets as standardised float32 [N, 1, H, W] tensors in memory."""
    p = _params(cfg)
    k = p["downsample"]
    (train_images, train_labels), (test_images, test_labels) = _read_files(place(cfg), k)
    chosen = _train_indices(train_labels, p["train_size"], p["split_seed"])
    x_train, y_train = _pixels(train_images[chosen], k), train_labels[chosen]
    kept = _train_indices(test_labels, p["test_size"], p["split_seed"], "test_size")
    x_test, test_labels = _pixels(test_images[kept], k), test_labels[kept]
    # one scalar mean and std of the training images in use (as digits'), in float64
    mean, std = float(x_train.mean(dtype=np.float64)), float(x_train.std(dtype=np.float64))

    def tensors(images: np.ndarray, labels: np.ndarray) -> TensorImageDataset:
        scaled = ((images - np.float32(mean)) / np.float32(std)).astype(np.float32)
        return TensorImageDataset(torch.from_numpy(scaled[:, None]), torch.from_numpy(labels))

    return DataBundle(
        name="fashion_mnist",
        train=tensors(x_train, y_train),
        test=tensors(x_test, test_labels),
        train_labels=np.ascontiguousarray(y_train),
        num_classes=NUM_CLASSES,
        in_channels=1,
        image_size=train_images.shape[1] // k,
    )


def _read_files(folder: str, k: int) -> tuple[tuple[np.ndarray, np.ndarray], ...]:
    """(images, labels) of the training and the test split, checked against each other and
    against `downsample` k."""
    train, test = _read_split(folder, "train"), _read_split(folder, "test")
    size = train[0].shape[1]
    if test[0].shape[1:] != train[0].shape[1:]:
        raise UserError(
            f"Fashion-MNIST files in {folder} disagree: test images are"
            f" {test[0].shape[1]}x{test[0].shape[2]}, training images {size}x{size}"
        )
    if size % k:
        raise UserError(
            f"dataset.downsample={k} does not divide the {size}x{size} images"
            " (1, 2, 4, 7, 14 or 28 for Fashion-MNIST)"
        )
    return train, test


def _pixels(images: np.ndarray, k: int) -> np.ndarray:
    """uint8 [N, H, W] -> float32 [N, H/k, W/k] in [0, 1]: the mean of each k x k block."""
    x = images.astype(np.float32)
    if k > 1:
        n, h, w = x.shape
        x = x.reshape(n, h // k, k, w // k, k).mean(axis=(2, 4), dtype=np.float32)
    return x / np.float32(255)
