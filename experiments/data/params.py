"""The data's, the partition's and the model's values as the pre-flight checks them: torch-free
and numpy-free (experiments/preflight.py: bad input is answered before torch is imported,
tests/test_torch_free.py), each refusal the one-line `UserError` the loaders raise for it (the
loaders read their values through these same functions: experiments/data/datasets.py,
fashion_mnist.py, partition.py; experiments/training/models.py).

What needs the data itself (a Fashion-MNIST `train_size` beyond the files' images, a non-IID
split the labels cannot fill, a model too large for the machine's memory) stays with the
loaders, after the values are known to be sound.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import Any, NoReturn

from experiments.errors import UserError

DATASETS = ("cifar10", "digits", "fashion_mnist", "synthetic")
FASHION_MNIST_CLASSES = 10
DIGITS_SAMPLES = 1797  # scikit-learn's bundled digits
MODEL_WIDTHS = {"resnet18": 64, "tiny_cnn": 8}  # each model's default width
PARTITIONS = ("iid", "noniid", "dirichlet")
REFERENCE_SEED = 1234  # partition.seed's default (experiments/data/partition.py)
PAPER_DOMINANT_FRACTION = 2000 / 3125


def _int(cfg: Mapping, key: str, default: int, minimum: int) -> int:
    value = cfg.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise UserError(f"dataset.{key} must be an integer >= {minimum}, got {value!r}")
    return value


def _number_of(group: str, cfg: Mapping, key: str, default: float) -> float:
    """`group`.`key` of `cfg`: a number, else a one-line UserError."""
    value = cfg.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise UserError(f"{group}.{key} must be a number, got {value!r}")
    return float(value)


def _float(cfg: Mapping, key: str, default: float) -> float:
    """A dataset knob: a number, else a one-line UserError."""
    return _number_of("dataset", cfg, key, default)


def unknown_dataset(name: object) -> NoReturn:
    raise UserError(
        f"unknown dataset.name {name!r}: expected one of cifar10, digits, fashion_mnist, synthetic"
    )


def validation_fraction(cfg: Mapping) -> float:
    fraction = _float(cfg, "validation_fraction", 0.0)
    if not 0 <= fraction < 1:
        raise UserError(f"dataset.validation_fraction must be in [0, 1), got {fraction:g}")
    return fraction


def synthetic_params(cfg: Mapping) -> dict[str, Any]:
    params = {
        "num_train": _int(cfg, "num_train", 2048, minimum=1),
        "num_test": _int(cfg, "num_test", 512, minimum=1),
        "num_classes": _int(cfg, "num_classes", 10, minimum=1),
        "channels": _int(cfg, "channels", 1, minimum=1),
        "image_size": _int(cfg, "image_size", 8, minimum=1),
        "noise": _float(cfg, "noise", 1.0),
        "seed": _int(cfg, "seed", 0, minimum=0),
    }
    if params["noise"] < 0:
        raise UserError(f"dataset.noise must be >= 0, got {params['noise']}")
    return params


def digits_params(cfg: Mapping) -> dict[str, Any]:
    test_fraction = _float(cfg, "test_fraction", 1 / 6)
    split_seed = _int(cfg, "split_seed", 0, minimum=0)
    if not 0 < test_fraction < 1:
        raise UserError(f"dataset.test_fraction must be in (0, 1), got {test_fraction}")
    return {"test_fraction": test_fraction, "split_seed": split_seed}


def fashion_mnist_params(cfg: Mapping) -> dict[str, Any]:
    downsample = _int(cfg, "downsample", 1, minimum=1)
    train_size = cfg.get("train_size")
    if train_size is not None:
        train_size = _int(cfg, "train_size", 0, minimum=FASHION_MNIST_CLASSES)
    test_size = cfg.get("test_size")
    if test_size is not None:
        test_size = _int(cfg, "test_size", 0, minimum=FASHION_MNIST_CLASSES)
    return {
        "downsample": downsample,
        "train_size": train_size,
        "test_size": test_size,
        "split_seed": _int(cfg, "split_seed", 0, minimum=0),
    }


def cifar10_params(cfg: Mapping) -> dict[str, Any]:
    return {"num_workers": _int(cfg, "num_workers", 0, minimum=0)}


# --- the files (their presence; their content is the loaders') ----------------------------

CIFAR10_HOME = "https://www.cs.toronto.edu/~kriz/cifar.html"
CIFAR10_FOLDER = "cifar-10-batches-py"
CIFAR10_FILES = (
    *(f"data_batch_{i}" for i in range(1, 6)),
    "test_batch",
    "batches.meta",
)
FASHION_MNIST_HOME = "https://github.com/zalandoresearch/fashion-mnist"
FASHION_MNIST_SOURCE = "/usr/share/datasets/fashion-mnist"  # apt-get install dataset-fashion-mnist
FASHION_MNIST_RAW = os.path.join("FashionMNIST", "raw")  # under root: torchvision's layout
FASHION_MNIST_FILES = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)


def cifar10_root(cfg: Mapping) -> str:
    root = cfg.get("root") or os.environ.get("CIFAR10_ROOT") or "./data"
    return os.path.abspath(os.path.expanduser(str(root)))


def cifar10_not_found(root: str, folder: str, missing: list[str], reason: str) -> UserError:
    what = "" if len(missing) == len(CIFAR10_FILES) else f" (missing {', '.join(missing)})"
    return UserError(
        f"CIFAR-10 not found in {folder}{what} ({reason}): get cifar-10-python.tar.gz from"
        f" {CIFAR10_HOME} and extract it under {root}, or point dataset.root / CIFAR10_ROOT at"
        " the folder that holds cifar-10-batches-py"
    )


def fashion_mnist_root(cfg: Mapping) -> str:
    root = cfg.get("root") or os.environ.get("FASHION_MNIST_ROOT") or "./data"
    return os.path.abspath(os.path.expanduser(str(root)))


def fashion_mnist_source(cfg: Mapping) -> str | None:
    source = cfg.get("source", FASHION_MNIST_SOURCE)
    return os.path.abspath(os.path.expanduser(str(source))) if source else None


def fashion_mnist_missing(cfg: Mapping, placing: bool = False) -> UserError | None:
    """The one-line error for idx files in neither `root`'s FashionMNIST/raw nor (gzipped) in
    `source`; None when each is in one of them (`placing`: in the folder itself)."""
    folder = os.path.join(fashion_mnist_root(cfg), FASHION_MNIST_RAW)
    source = fashion_mnist_source(cfg)
    missing = [
        f
        for f in FASHION_MNIST_FILES
        if not os.path.isfile(os.path.join(folder, f))
        and (placing or not (source and os.path.isfile(os.path.join(source, f + ".gz"))))
    ]
    if not missing:
        return None
    what = "" if len(missing) == len(FASHION_MNIST_FILES) else f" (missing {', '.join(missing)})"
    where = f" nor gzipped in {source}" if source else ""
    return UserError(
        f"Fashion-MNIST not found in {folder}{what}{where}: apt-get install"
        f" dataset-fashion-mnist (Debian/Ubuntu; `make data`), or place the four idx files"
        f" from {FASHION_MNIST_HOME}, gunzipped, in {folder}"
    )


def check_files(cfg: Mapping) -> None:
    """The dataset's files are where its keys say (CIFAR-10 without a download allowed,
    Fashion-MNIST's idx files or their gzipped copies), else the loader's one-line error."""
    name = cfg.get("name")
    if name == "cifar10" and not cfg.get("download", False):
        root = cifar10_root(cfg)
        folder = os.path.join(root, CIFAR10_FOLDER)
        missing = [f for f in CIFAR10_FILES if not os.path.isfile(os.path.join(folder, f))]
        if missing:
            raise cifar10_not_found(root, folder, missing, "dataset.download is false")
    elif name == "fashion_mnist":
        error = fashion_mnist_missing(cfg)
        if error is not None:
            raise error


def check_dataset(cfg: Mapping) -> int | None:
    """The dataset node's values; returns its number of training samples where the values alone
    say it (synthetic: `num_train`), else None."""
    name = cfg.get("name")
    if name not in DATASETS:
        unknown_dataset(name)
    fraction = validation_fraction(cfg)
    if name == "synthetic":
        train = synthetic_params(cfg)["num_train"]
        return train - math.ceil(train * fraction) if fraction else train
    if name == "digits":
        digits_params(cfg)
    elif name == "fashion_mnist":
        fashion_mnist_params(cfg)
    else:
        cifar10_params(cfg)
    return None


def number(cfg: Mapping, key: str, default: float) -> float:
    """A partition knob: a number, else a one-line UserError."""
    return _number_of("partition", cfg, key, default)


def partition_seed(cfg: Mapping) -> int:
    seed = cfg.get("seed", REFERENCE_SEED)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise UserError(f"partition.seed must be an integer >= 0, got {seed!r}")
    return seed


def check_dominant_fraction(fraction: float) -> None:
    if not 0 < fraction <= 1:
        raise UserError(f"noniid dominant_fraction must be in (0, 1], got {fraction}")


def check_concentration(concentration: float) -> None:
    if not concentration > 0 or not math.isfinite(concentration):
        raise UserError(f"dirichlet concentration must be a finite number > 0, got {concentration}")


def check_workers(n: int, num_workers: int) -> int:
    """q, the samples per worker, after checking that every worker gets at least one."""
    if num_workers < 1 or num_workers > n:
        raise UserError(f"cannot split {n} training samples over {num_workers} workers")
    return n // num_workers


def check_partition(cfg: Mapping, workers: int, num_train: int | None) -> None:
    """The partition node's values, and, where the number of training samples is known from
    the values (`num_train`), that every worker gets one."""
    if num_train is not None:
        check_workers(num_train, workers)
    partition_seed(cfg)
    name = cfg.get("name")
    if name == "noniid":
        check_dominant_fraction(number(cfg, "dominant_fraction", PAPER_DOMINANT_FRACTION))
    elif name == "dirichlet":
        check_concentration(number(cfg, "concentration", 0.5))
    elif name != "iid":
        raise UserError(f"unknown partition.name {name!r}: expected one of iid, noniid, dirichlet")


def check_model(cfg: Mapping) -> int:
    """The model node's name and width; returns the width."""
    name = cfg.get("name")
    if name not in MODEL_WIDTHS:
        raise UserError(f"unknown model.name {name!r}: expected one of {sorted(MODEL_WIDTHS)}")
    width = cfg.get("width", MODEL_WIDTHS[name])
    if isinstance(width, bool) or not isinstance(width, int) or width < 1:
        raise UserError(f"model.width must be an integer >= 1, got {width!r}")
    return width


def check(cfg: Mapping[str, Any]) -> None:
    """Every value of the job config `cfg`'s dataset, partition and model nodes."""
    num_train = check_dataset(cfg["dataset"])
    check_partition(cfg["partition"], cfg["workers"], num_train)
    check_model(cfg["model"])
