"""CIFAR-10 through torchvision, in its own python-pickle format (algorithms.md section 9).

Training: RandomCrop(32, padding 4) + horizontal flip, then normalisation with the reference
mean/std; test: normalisation only. The crop and flip are
`experiments.data.datasets.CropFlip`, applied by the worker's `Augmented` shard with random
numbers from its sampler's generator (not torchvision's transforms, which draw from torch's
global generator). Kept apart from experiments/data/datasets.py because importing torchvision
costs seconds in every worker process, and only this dataset needs it.
"""

import os
import pickle
from collections.abc import Mapping

import numpy as np
import torch
from torchvision import datasets, transforms
from torchvision.datasets.utils import check_integrity, download_and_extract_archive

from experiments.data.bundle import CropFlip, DataBundle, one_line
from experiments.data.params import cifar10_not_found, cifar10_root
from experiments.errors import UserError

CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2023, 0.1994, 0.2010)
CIFAR10_HOME = "https://www.cs.toronto.edu/~kriz/cifar.html"


class _CIFAR10Files(datasets.CIFAR10):
    """torchvision's CIFAR10 with the md5 checks reduced to "the files exist".

    Why: repacked copies of CIFAR-10 and the tests' small fixtures in CIFAR-10's own format are
    valid data with other md5s. When `verify_checksums` is true, `_check_cifar10` hashes the
    files itself, once, before this class reads them, so torchvision need not hash them again.
    """

    def _check_integrity(self) -> bool:
        return not _missing_cifar10_files(os.path.join(self.root, self.base_folder))

    def _load_meta(self) -> None:
        path = os.path.join(self.root, self.base_folder, self.meta["filename"])
        with open(path, "rb") as f:
            self.classes = pickle.load(f, encoding="latin1")[self.meta["key"]]
        self.class_to_idx = {c: i for i, c in enumerate(self.classes)}


def _cifar10_checksums() -> dict[str, str]:
    """File name -> md5 of the official archive's contents, as torchvision lists them."""
    base = datasets.CIFAR10
    files = dict(base.train_list + base.test_list)
    files[base.meta["filename"]] = base.meta["md5"]
    return files


def _missing_cifar10_files(folder: str) -> list[str]:
    return [f for f in _cifar10_checksums() if not os.path.isfile(os.path.join(folder, f))]


_cifar10_root = cifar10_root


def _not_found(root: str, folder: str, missing: list[str], reason: str) -> UserError:
    return cifar10_not_found(root, folder, missing, reason)  # (the pre-flight's line too)


def _check_cifar10(root: str, verify_checksums: bool, download_reason: str) -> None:
    """Raise a one-line UserError unless all six batches and the meta file are usable."""
    folder = os.path.join(root, datasets.CIFAR10.base_folder)
    missing = _missing_cifar10_files(folder)
    if missing:
        raise _not_found(root, folder, missing, download_reason)
    if verify_checksums:
        bad = [
            f
            for f, md5 in _cifar10_checksums().items()
            if not check_integrity(os.path.join(folder, f), md5)
        ]
        if bad:
            raise UserError(
                f"CIFAR-10 in {folder} fails the md5 check ({', '.join(bad)}): re-extract"
                f" cifar-10-python.tar.gz from {CIFAR10_HOME} under {root}, or set"
                " dataset.verify_checksums=false if it is a repacked copy you trust"
            )


def prepare(cfg: Mapping) -> None:
    """Make sure the files are there, downloading them when missing and allowed."""
    root = _cifar10_root(cfg)
    folder = os.path.join(root, datasets.CIFAR10.base_folder)
    reason = "dataset.download is false"
    # Download only when files are missing: files that are present but fail the md5 check may be
    # the user's own repacked copy, and re-extracting the archive would overwrite them.
    if _missing_cifar10_files(folder) and cfg.get("download", False):
        base = datasets.CIFAR10
        try:
            download_and_extract_archive(base.url, root, filename=base.filename, md5=base.tgz_md5)
            reason = "the downloaded archive lacks them"
        except Exception as e:  # no network, proxy, disk full, bad archive: all one message
            reason = f"download failed: {type(e).__name__}: {one_line(e, 120)}"
    _check_cifar10(root, cfg.get("verify_checksums", True), reason)


def load(cfg: Mapping) -> DataBundle:
    """Train (augmented) and test sets from the files; never downloads."""
    root = _cifar10_root(cfg)
    _check_cifar10(root, cfg.get("verify_checksums", True), "load_dataset does not download")
    normalize = transforms.Compose(
        [transforms.ToTensor(), transforms.Normalize(CIFAR10_MEAN, CIFAR10_STD)]
    )
    augment = None
    if cfg.get("augment", True):
        # the value Normalize gives a black pixel (the padding of RandomCrop), in float32
        fill = (torch.zeros(3) - torch.tensor(CIFAR10_MEAN)) / torch.tensor(CIFAR10_STD)
        augment = CropFlip(padding=4, fill=tuple(fill.tolist()))
    try:
        train = _CIFAR10Files(root, train=True, transform=normalize, download=False)
        test = _CIFAR10Files(root, train=False, transform=normalize, download=False)
    except (pickle.UnpicklingError, EOFError, KeyError, ValueError) as e:
        folder = os.path.join(root, datasets.CIFAR10.base_folder)
        raise UserError(
            f"CIFAR-10 files in {folder} are not in CIFAR-10's python format"
            f" ({type(e).__name__}: {one_line(e, 120)})"
        ) from None
    return DataBundle(
        name="cifar10",
        train=train,
        test=test,
        train_labels=np.asarray(train.targets, dtype=np.int64),
        num_classes=len(train.classes),
        in_channels=3,
        image_size=32,
        augment=augment,
    )
