"""Datasets: digits and synthetic in memory, CIFAR-10 on small files written in its own format."""

import numpy as np
import pytest
import torch

from experiments.data import cifar10 as cifar10_module
from experiments.data.cifar10 import CIFAR10_MEAN, CIFAR10_STD
from experiments.data.datasets import load_dataset, prepare_dataset
from experiments.errors import UserError
from tests.cifar_files import write_cifar10

# ---------------------------------------------------------------------------------------------
# digits


def test_digits_shapes_split_and_standardisation():
    bundle = load_dataset({"name": "digits"})
    assert (bundle.num_classes, bundle.in_channels, bundle.image_size) == (10, 1, 8)
    assert (len(bundle.train), len(bundle.test)) == (1497, 300)
    x, y = bundle.train[0]
    assert x.shape == (1, 8, 8) and x.dtype == torch.float32 and isinstance(y, int)
    assert bundle.train_labels.dtype == np.int64 and len(bundle.train_labels) == 1497
    assert y == bundle.train_labels[0]
    train_x = bundle.train.images
    assert abs(float(train_x.mean())) < 1e-5 and abs(float(train_x.std()) - 1) < 1e-3
    # Stratified: every class keeps its share of the 1,797 digits in both splits.
    test_labels = bundle.test.labels.numpy()
    assert np.bincount(test_labels, minlength=10).min() >= 29
    assert np.bincount(bundle.train_labels, minlength=10).min() >= 145


def test_digits_split_is_fixed_by_split_seed():
    a = load_dataset({"name": "digits"})
    b = load_dataset({"name": "digits", "split_seed": 0})
    c = load_dataset({"name": "digits", "split_seed": 1})
    assert torch.equal(a.train.images, b.train.images)
    assert not torch.equal(a.train.images, c.train.images)


def test_digits_rejects_bad_split():
    with pytest.raises(UserError, match="test_fraction"):
        prepare_dataset({"name": "digits", "test_fraction": 1.5})


# ---------------------------------------------------------------------------------------------
# synthetic


SYNTHETIC = {"name": "synthetic", "num_train": 1000, "num_test": 300, "noise": 2.0, "seed": 5}


def test_synthetic_is_bit_identical_for_a_config():
    a, b = load_dataset(SYNTHETIC), load_dataset(SYNTHETIC)
    assert torch.equal(a.train.images, b.train.images) and torch.equal(a.test.images, b.test.images)
    assert np.array_equal(a.train_labels, b.train_labels)
    other = load_dataset({**SYNTHETIC, "seed": 6})
    assert not torch.equal(a.train.images, other.train.images)


def test_synthetic_shapes_and_balance():
    cfg = {**SYNTHETIC, "channels": 3, "image_size": 16, "num_classes": 4}
    bundle = load_dataset(cfg)
    x, y = bundle.test[0]
    assert x.shape == (3, 16, 16) and x.dtype == torch.float32 and 0 <= y < 4
    assert (bundle.num_classes, bundle.in_channels, bundle.image_size) == (4, 3, 16)
    assert np.bincount(bundle.train_labels).tolist() == [250] * 4
    assert not torch.equal(bundle.train.images[:300], bundle.test.images)


def test_synthetic_is_learnable_by_a_linear_model():
    bundle = load_dataset(SYNTHETIC)
    x_train, y_train = bundle.train.images.flatten(1), bundle.train.labels
    x_test, y_test = bundle.test.images.flatten(1), bundle.test.labels
    # Nearest class mean, estimated from the training split only.
    means = torch.stack([x_train[y_train == c].mean(0) for c in range(10)])
    nearest = torch.cdist(x_test, means).argmin(1)
    assert (nearest == y_test).float().mean() > 0.5
    # A few full-batch steps of logistic regression.
    torch.manual_seed(0)
    linear = torch.nn.Linear(x_train.shape[1], 10)
    opt = torch.optim.SGD(linear.parameters(), lr=0.1)
    for _ in range(30):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(linear(x_train), y_train).backward()
        opt.step()
    assert (linear(x_test).argmax(1) == y_test).float().mean() > 0.5


@pytest.mark.parametrize("key,value", [("num_train", 0), ("image_size", -1), ("noise", -1.0)])
def test_synthetic_rejects_bad_sizes(key, value):
    with pytest.raises(UserError, match=key):
        prepare_dataset({**SYNTHETIC, key: value})


def test_unknown_dataset():
    with pytest.raises(UserError, match="mnist"):
        load_dataset({"name": "mnist"})


# ---------------------------------------------------------------------------------------------
# CIFAR-10, on a few samples per batch written in CIFAR-10's own python-pickle format


def expected_tensor(row: np.ndarray) -> torch.Tensor:
    """CIFAR-10 rows are channel-major: 1024 red, then green, then blue, each 32x32 row-major."""
    x = torch.from_numpy(row.reshape(3, 32, 32).astype(np.float32) / 255)
    return (x - torch.tensor(CIFAR10_MEAN)[:, None, None]) / torch.tensor(CIFAR10_STD)[
        :, None, None
    ]


def cifar_cfg(root, **overrides) -> dict:
    root = None if root is None else str(root)
    cfg = {"name": "cifar10", "root": root, "download": False, "verify_checksums": False}
    return {**cfg, **overrides}


def test_cifar10_loads_own_format_without_checksums(tmp_path):
    batches = write_cifar10(tmp_path)
    prepare_dataset(cifar_cfg(tmp_path))
    bundle = load_dataset(cifar_cfg(tmp_path))
    assert (bundle.num_classes, bundle.in_channels, bundle.image_size) == (10, 3, 32)
    assert (len(bundle.train), len(bundle.test)) == (15, 3)
    train_labels = [y for i in range(1, 6) for y in batches[f"data_batch_{i}"][1]]
    assert bundle.train_labels.tolist() == train_labels and bundle.train_labels.dtype == np.int64
    assert bundle.train.classes[0] == "airplane"

    # Test items: normalised only, so deterministic and equal to the raw pixels' closed form.
    test_images, test_labels = batches["test_batch"]
    for i in range(3):
        x, y = bundle.test[i]
        assert x.shape == (3, 32, 32) and y == test_labels[i]
        torch.testing.assert_close(x, expected_tensor(test_images[i]))

    # Train items: random crop + flip drawn from the sampler's generator
    # (experiments/data/datasets.py, Augmented), so repeated draws for one image differ, and the
    # same generator state gives the same views.
    from experiments.data.datasets import Augmented

    assert bundle.augment is not None
    shard = Augmented(bundle.train, bundle.augment)

    def views(seed: int) -> list[torch.Tensor]:
        keys = shard.keys([0] * 8, torch.Generator().manual_seed(seed))
        return [shard[key][0] for key in keys]

    first = views(0)
    assert all(v.shape == (3, 32, 32) for v in first)
    assert any(not torch.equal(first[0], v) for v in first[1:])
    assert all(torch.equal(a, b) for a, b in zip(first, views(0), strict=True))

    plain = load_dataset(cifar_cfg(tmp_path, augment=False))
    assert plain.augment is None
    torch.testing.assert_close(plain.train[0][0], expected_tensor(batches["data_batch_1"][0][0]))


def assert_one_line_naming(message: str, root) -> None:
    assert "\n" not in message
    assert str(root) in message


def test_cifar10_md5_mismatch_is_a_user_error(tmp_path):
    write_cifar10(tmp_path)
    with pytest.raises(UserError) as info:
        prepare_dataset(cifar_cfg(tmp_path, verify_checksums=True))
    assert_one_line_naming(str(info.value), tmp_path)
    assert "md5" in str(info.value) and "verify_checksums" in str(info.value)
    with pytest.raises(UserError):
        load_dataset(cifar_cfg(tmp_path, verify_checksums=True))


def test_cifar10_missing_without_download_is_a_user_error(tmp_path):
    root = tmp_path / "nowhere"
    with pytest.raises(UserError) as info:
        prepare_dataset(cifar_cfg(root, verify_checksums=True))
    assert_one_line_naming(str(info.value), root)
    assert "cifar-10-batches-py" in str(info.value)


def test_cifar10_failed_download_is_a_user_error(tmp_path, monkeypatch):
    def no_network(*args, **kwargs):
        raise OSError("[Errno -3] Temporary failure\nin name resolution")

    monkeypatch.setattr(cifar10_module, "download_and_extract_archive", no_network)
    with pytest.raises(UserError) as info:
        prepare_dataset(cifar_cfg(tmp_path, download=True))
    assert_one_line_naming(str(info.value), tmp_path)
    assert "download failed: OSError" in str(info.value)


def test_cifar10_root_from_environment(tmp_path, monkeypatch):
    write_cifar10(tmp_path)
    monkeypatch.setenv("CIFAR10_ROOT", str(tmp_path))
    bundle = load_dataset(cifar_cfg(None))
    assert len(bundle.train) == 15
