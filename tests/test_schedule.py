"""The LR schedule at its warm-up and decay points (algorithms.md section 9)."""

import pytest

from experiments.schedule import decay_epochs, lr_at, peak_lr

PAPER = dict(
    lr=0.1,
    batch_size=128,
    workers=16,
    epochs=300,
    warmup_epochs=5,
    lr_decay_at=[0.5, 5 / 6],
    lr_decay=0.1,
)
SPE = 25  # 3125 samples per worker / batch 128, last batch kept


def test_peak_scales_linearly_with_global_batch():
    assert peak_lr(0.1, 128, 16) == pytest.approx(1.6)
    assert peak_lr(0.1, 32, 4) == pytest.approx(0.1)


def test_paper_warmup_is_linear_per_iteration_from_base_to_peak():
    assert lr_at(0, SPE, **PAPER) == pytest.approx(0.1)
    # halfway through the 125 warm-up iterations
    assert lr_at(62, SPE, **PAPER) == pytest.approx(0.1 + 1.5 * 62 / 125)
    assert lr_at(124, SPE, **PAPER) == pytest.approx(0.1 + 1.5 * 124 / 125)
    assert lr_at(125, SPE, **PAPER) == pytest.approx(1.6)


def test_paper_decays_at_epochs_150_and_250():
    assert decay_epochs(PAPER["lr_decay_at"], 300) == [150, 250]
    assert lr_at(150 * SPE - 1, SPE, **PAPER) == pytest.approx(1.6)
    assert lr_at(150 * SPE, SPE, **PAPER) == pytest.approx(0.16)
    assert lr_at(250 * SPE - 1, SPE, **PAPER) == pytest.approx(0.16)
    assert lr_at(250 * SPE, SPE, **PAPER) == pytest.approx(0.016)
    assert lr_at(300 * SPE - 1, SPE, **PAPER) == pytest.approx(0.016)


def test_decay_points_scale_with_epochs():
    assert decay_epochs([0.5, 5 / 6], 30) == [15, 25]
    short = {**PAPER, "epochs": 30, "warmup_epochs": 0}
    assert lr_at(15 * SPE - 1, SPE, **short) == pytest.approx(1.6)
    assert lr_at(15 * SPE, SPE, **short) == pytest.approx(0.16)


def test_no_warmup_starts_at_peak():
    assert lr_at(0, SPE, **{**PAPER, "warmup_epochs": 0}) == pytest.approx(1.6)
