"""Fashion-MNIST (`dataset=fashion_mnist`) on small files written in its own idx format, laid out
as Debian's dataset-fashion-mnist installs them (gzipped, in a source folder): loading through
the composed config, downsampling, the stratified train_size draw, the validation split, the
decompression into dataset.root, the one-line errors, and one run of run.py. None of it needs
the real files installed."""

from __future__ import annotations

import gzip
import json
import os
import re
import struct

import numpy as np
import pytest
import torch

from experiments.data import fashion_mnist as fm
from experiments.data.datasets import load_dataset, prepare_dataset
from experiments.errors import UserError
from tests.cli import run_py_here, run_py_with_workers_here
from tests.compose import resolved

TRAIN_PER_CLASS, TEST_PER_CLASS = 12, 3  # 120 training and 30 test images


def idx_bytes(array: np.ndarray) -> bytes:
    """`array` (uint8) in the idx format: magic 0x0000_08_<ndim> and the dimensions, big-endian,
    then the values (2051 for images [N, H, W], 2049 for labels [N])."""
    header = struct.pack(">I", 0x0800 | array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
    return header + np.ascontiguousarray(array, dtype=np.uint8).tobytes()


def write_source(folder, size: int = 28, seed: int = 0) -> dict[str, np.ndarray]:
    """The four gzipped idx files in `folder`, as /usr/share/datasets/fashion-mnist holds them:
    random images, labels balanced and shuffled. Returns the arrays by file name."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    arrays = {}
    for split, per_class in (("train", TRAIN_PER_CLASS), ("t10k", TEST_PER_CLASS)):
        labels = rng.permutation(np.repeat(np.arange(10), per_class)).astype(np.uint8)
        images = rng.integers(0, 256, size=(len(labels), size, size), dtype=np.uint8)
        arrays[f"{split}-images-idx3-ubyte"] = images
        arrays[f"{split}-labels-idx1-ubyte"] = labels
    for name, array in arrays.items():
        (folder / f"{name}.gz").write_bytes(gzip.compress(idx_bytes(array)))
    return arrays


@pytest.fixture
def data(tmp_path):
    """(source folder with Debian's gzipped files, empty root, the arrays written)."""
    source, root = tmp_path / "usr-share-datasets" / "fashion-mnist", tmp_path / "root"
    return source, root, write_source(source)


def config(source, root, *overrides: str) -> dict:
    """The dataset node of the composed config `dataset=fashion_mnist ...`."""
    cfg = resolved("dataset=fashion_mnist", f"dataset.root={root}", f"dataset.source={source}",
                   *overrides)  # fmt: skip
    return cfg["dataset"]


def standardised(pixels: np.ndarray) -> torch.Tensor:
    """Digits' preprocessing: [0, 1] pixels standardised by their scalar mean and std."""
    x = pixels.astype(np.float32)
    mean, std = x.mean(dtype=np.float64), x.std(dtype=np.float64)
    return torch.from_numpy(((x - np.float32(mean)) / np.float32(std)).astype(np.float32))


def test_the_config_defaults():
    cfg = resolved("dataset=fashion_mnist")["dataset"]
    assert cfg == {
        "name": "fashion_mnist",
        "validation_fraction": 0.0,
        "root": None,
        "source": "/usr/share/datasets/fashion-mnist",
        "downsample": 1,
        "train_size": None,
        "test_size": None,
        "split_seed": 0,
    }


def test_loads_through_the_config_at_28x28(data):
    source, root, arrays = data
    cfg = config(source, root)
    prepare_dataset(cfg)
    bundle = load_dataset(cfg)
    assert bundle.name == "fashion_mnist"
    assert (bundle.num_classes, bundle.in_channels, bundle.image_size) == (10, 1, 28)
    assert (len(bundle.train), len(bundle.test)) == (120, 30)
    x, y = bundle.train[0]
    assert x.shape == (1, 28, 28) and x.dtype == torch.float32 and isinstance(y, int)
    train_labels = arrays["train-labels-idx1-ubyte"]
    assert bundle.train_labels.dtype == np.int64
    assert bundle.train_labels.tolist() == train_labels.tolist()  # all of them, in file order
    assert bundle.test.labels.tolist() == arrays["t10k-labels-idx1-ubyte"].tolist()
    # pixels / 255, standardised with the training images' scalar mean and std
    train_pixels = arrays["train-images-idx3-ubyte"] / np.float32(255)
    expected = standardised(train_pixels)
    torch.testing.assert_close(bundle.train.images[:, 0], expected)
    mean, std = train_pixels.mean(dtype=np.float64), train_pixels.std(dtype=np.float64)
    test_pixels = arrays["t10k-images-idx3-ubyte"] / np.float32(255)
    torch.testing.assert_close(
        bundle.test.images[:, 0], torch.from_numpy(((test_pixels - mean) / std).astype(np.float32))
    )


def test_downsample_2_averages_2x2_blocks_to_14x14(data):
    source, root, arrays = data
    bundle = load_dataset(config(source, root, "dataset.downsample=2"))
    assert bundle.image_size == 14 and bundle.train[0][0].shape == (1, 14, 14)
    assert bundle.test[0][0].shape == (1, 14, 14)
    images = arrays["train-images-idx3-ubyte"].astype(np.float32) / 255
    pooled = torch.nn.functional.avg_pool2d(torch.from_numpy(images)[:, None], 2)[:, 0]
    torch.testing.assert_close(bundle.train.images[:, 0], standardised(pooled.numpy()))


def test_train_size_is_a_fixed_stratified_draw(data):
    source, root, arrays = data
    a = load_dataset(config(source, root, "dataset.train_size=50"))
    b = load_dataset(config(source, root, "dataset.train_size=50"))
    other = load_dataset(config(source, root, "dataset.train_size=50", "dataset.split_seed=1"))
    assert len(a.train) == len(a.train_labels) == 50 and len(a.test) == 30  # the test set whole
    assert np.bincount(a.train_labels, minlength=10).tolist() == [5] * 10  # stratified
    assert torch.equal(a.train.images, b.train.images)  # deterministic
    assert np.array_equal(a.train_labels, b.train_labels)
    assert not torch.equal(a.train.images, other.train.images)  # split_seed draws another
    # the images drawn are the files' own, in file order, with their own labels
    labels = arrays["train-labels-idx1-ubyte"]
    chosen = fm._train_indices(labels.astype(np.int64), 50, 0)
    assert chosen.tolist() == sorted(set(chosen.tolist())) and len(chosen) == 50
    assert a.train_labels.tolist() == labels[chosen].tolist()
    pixels = arrays["train-images-idx3-ubyte"][chosen] / np.float32(255)
    torch.testing.assert_close(a.train.images[:, 0], standardised(pixels))


def test_test_size_is_a_fixed_stratified_draw_of_the_test_images(data):
    source, root, arrays = data
    a = load_dataset(config(source, root, "dataset.test_size=20"))
    b = load_dataset(config(source, root, "dataset.test_size=20"))
    assert len(a.test) == 20 and len(a.train) == 120  # the training set whole
    labels = arrays["t10k-labels-idx1-ubyte"].astype(np.int64)
    chosen = fm._train_indices(labels, 20, 0, "test_size")
    assert np.bincount(labels[chosen], minlength=10).tolist() == [2] * 10  # stratified
    assert torch.equal(a.test.images, b.test.images)
    assert a.test.labels.tolist() == labels[chosen].tolist()
    with pytest.raises(UserError, match="dataset.test_size=31 exceeds the 30 test images"):
        load_dataset(config(source, root, "dataset.test_size=31"))


def test_validation_split_is_held_out_of_the_drawn_training_images(data):
    source, root, _ = data
    cfg = config(source, root, "dataset.train_size=100", "dataset.validation_fraction=0.2")
    bundle = load_dataset(cfg)
    assert (len(bundle.train), len(bundle.test)) == (80, 20)
    assert len(bundle.train_labels) == 80
    assert np.bincount(bundle.train_labels, minlength=10).tolist() == [8] * 10
    assert sorted(set(bundle.train.indices) | set(bundle.test.indices)) == list(range(100))
    assert bundle.test.dataset is bundle.train.dataset  # the validation images are training's


def test_decompresses_debians_files_into_root_once(data):
    source, root, arrays = data
    raw = root / "FashionMNIST" / "raw"
    assert not raw.exists()
    prepare_dataset(config(source, root))
    assert sorted(p.name for p in raw.iterdir()) == sorted(arrays)  # no temporary left
    for name, array in arrays.items():
        assert (raw / name).read_bytes() == idx_bytes(array)
        assert (raw / name).read_bytes() == gzip.decompress((source / f"{name}.gz").read_bytes())
    stamps = {p.name: p.stat().st_mtime_ns for p in raw.iterdir()}
    load_dataset(config(source, root))
    assert {p.name: p.stat().st_mtime_ns for p in raw.iterdir()} == stamps  # not rewritten
    # what is placed there is torchvision's layout: its FashionMNIST reads it as it is
    from torchvision.datasets import FashionMNIST

    train = FashionMNIST(str(root), train=True, download=False)
    assert len(train) == 120 and int(train.targets[0]) == arrays["train-labels-idx1-ubyte"][0]


def test_files_already_in_root_need_no_source(data, tmp_path):
    source, root, arrays = data
    prepare_dataset(config(source, root))
    bundle = load_dataset(config(tmp_path / "no-source", root))
    assert len(bundle.train) == 120
    assert len(load_dataset({**config(source, root), "source": None}).train) == 120


def test_only_the_missing_file_is_placed_and_a_half_written_one_never_counts(data):
    source, root, arrays = data
    prepare_dataset(config(source, root))
    raw = root / "FashionMNIST" / "raw"
    (raw / "t10k-labels-idx1-ubyte").unlink()
    # a temporary left by a process killed mid-write: never taken for the file
    (raw / ".t10k-labels-idx1-ubyte.abc123.tmp").write_bytes(b"\x00\x00\x08")
    stamp = (raw / "train-images-idx3-ubyte").stat().st_mtime_ns
    bundle = load_dataset(config(source, root))
    assert bundle.test.labels.tolist() == arrays["t10k-labels-idx1-ubyte"].tolist()
    assert (raw / "train-images-idx3-ubyte").stat().st_mtime_ns == stamp


def test_a_damaged_source_file_is_a_user_error_and_never_placed(data):
    source, root, _ = data
    gz = source / "train-images-idx3-ubyte.gz"
    gz.write_bytes(gz.read_bytes()[:200])  # truncated download
    with pytest.raises(UserError) as info:
        prepare_dataset(config(source, root))
    message = str(info.value)
    assert "\n" not in message and str(gz) in message and "cannot decompress" in message
    assert not (root / "FashionMNIST" / "raw" / "train-images-idx3-ubyte").exists()
    assert not list((root / "FashionMNIST" / "raw").glob("*.tmp"))


def test_a_root_that_cannot_be_written_is_a_user_error(data, tmp_path):
    source, _, _ = data
    root = tmp_path / "a-file"
    root.write_text("not a folder")
    with pytest.raises(UserError) as info:
        prepare_dataset(config(source, root))
    message = str(info.value)
    assert "\n" not in message and message.startswith("cannot place Fashion-MNIST in ")
    assert "dataset.root" in message


def test_a_file_not_in_idx_format_is_a_user_error(data):
    source, root, arrays = data
    prepare_dataset(config(source, root))
    labels = root / "FashionMNIST" / "raw" / "train-labels-idx1-ubyte"
    labels.write_bytes(idx_bytes(arrays["train-images-idx3-ubyte"]))  # images where labels go
    with pytest.raises(UserError, match="magic number 2051, expected 2049"):
        load_dataset(config(source, root))
    labels.write_bytes(idx_bytes(arrays["train-labels-idx1-ubyte"])[:-5])
    with pytest.raises(UserError, match="truncated"):
        prepare_dataset(config(source, root))


def test_missing_everywhere_says_how_to_get_it(tmp_path):
    root, source = tmp_path / "nowhere", tmp_path / "no-package"
    for call in (prepare_dataset, load_dataset):
        with pytest.raises(UserError) as info:
            call(config(source, root))
        message = str(info.value)
        assert "\n" not in message
        assert message.startswith(f"Fashion-MNIST not found in {root / 'FashionMNIST' / 'raw'}")
        assert str(source) in message
        assert "apt-get install dataset-fashion-mnist" in message
        assert "https://github.com/zalandoresearch/fashion-mnist" in message
    assert not root.exists()


def test_missing_data_is_refused_before_any_worker_starts(tmp_path):
    root, source = tmp_path / "nowhere", tmp_path / "no-package"
    proc = run_py_here("scale=smoke", "wandb.mode=disabled", "dataset=fashion_mnist",
                       f"dataset.root={root}", f"dataset.source={source}",
                       f"out_root={tmp_path / 'out'}")  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("error: Fashion-MNIST not found in ")
    assert "apt-get install dataset-fashion-mnist" in line
    assert not list(tmp_path.rglob("summary.json"))


@pytest.mark.parametrize(
    "key, value, fragment",
    [
        ("downsample", 3, "dataset.downsample=3 does not divide the 28x28 images"),
        ("downsample", 0, "dataset.downsample must be an integer >= 1"),
        ("train_size", 121, "dataset.train_size=121 exceeds the 120 training images"),
        ("train_size", 5, "dataset.train_size must be an integer >= 10"),
        ("train_size", 115, "cannot draw train_size=115"),  # 5 left out: fewer than 10 classes
        ("split_seed", -1, "dataset.split_seed must be an integer >= 0"),
    ],
)
def test_bad_values_are_user_errors(data, key, value, fragment):
    source, root, _ = data
    with pytest.raises(UserError, match=re.escape(fragment)):
        prepare_dataset({**config(source, root), key: value})


@pytest.mark.parametrize("size", [28, 14])
def test_resnet18_takes_both_sizes(size):
    from experiments.training.models import build_model

    model = build_model({"name": "resnet18", "width": 4}, in_channels=1, num_classes=10)
    assert model(torch.zeros(3, 1, size, size)).shape == (3, 10)


@pytest.mark.e2e
def test_a_short_run_trains_on_it_end_to_end(data, tmp_path):
    """run.py with real worker processes (cluster=local: the in-memory data handed to them),
    ResNet-18 on 14x14 images, one epoch."""
    source, root, _ = data
    out = tmp_path / "out"
    proc = run_py_with_workers_here(
        "scale=smoke", "wandb.mode=disabled", "progress=false", "dataset=fashion_mnist",
        f"dataset.root={root}", f"dataset.source={source}", "dataset.downsample=2",
        "dataset.train_size=80", "model=resnet18", "model.width=2", "epochs=1",
        "batch_size=8", f"out_root={out}",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (run_dir,) = (out / "runs").iterdir()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "completed"
    assert summary["data_card"]["dataset"] == "fashion_mnist"
    assert [w["num_samples"] for w in summary["data_card"]["workers"]] == [40, 40]
    assert summary["steps"] == 5  # 40 samples per worker, batch 8
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in rows] == [1] and 0 <= rows[0]["test/acc"] <= 1


def test_source_and_root_are_not_part_of_a_runs_identity():
    from experiments.config.identity import identity_config

    a = resolved("dataset=fashion_mnist", "dataset.root=/a", "dataset.source=/x")
    b = resolved("dataset=fashion_mnist", "dataset.root=/b", "dataset.source=null")
    c = resolved("dataset=fashion_mnist", "dataset.train_size=100")
    assert identity_config(a) == identity_config(b) != identity_config(c)


def test_environment_root(data, monkeypatch):
    source, root, _ = data
    monkeypatch.setenv("FASHION_MNIST_ROOT", str(root))
    cfg = {**config(source, root), "root": None}
    assert fm.raw_folder(cfg) == os.path.join(str(root), "FashionMNIST", "raw")
    assert len(load_dataset(cfg).train) == 120
