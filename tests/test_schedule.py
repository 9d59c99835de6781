"""The LR schedule at its warm-up and decay points (algorithms.md section 9), against the
reference's `update_learning_rate` (JYWa/Overlap_Local_SGD, train_LocalSGD.py)."""

import pytest

from experiments.training.schedule import decay_epochs, lr_at, peak_lr

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


def reference_lr(epoch: int, itr: int, itr_per_epoch: int, base: float, target: float) -> float:
    """The reference's warm-up branch (epoch < 5), transcribed."""
    if target <= base:
        return target
    count = epoch * itr_per_epoch + itr + 1
    incr = (target - base) * (count / (5 * itr_per_epoch))
    return base + incr


def test_peak_scales_linearly_with_global_batch():
    assert peak_lr(0.1, 128, 16) == pytest.approx(1.6)
    assert peak_lr(0.1, 32, 4) == pytest.approx(0.1)


def test_paper_warmup_is_the_reference_formula_at_every_iteration():
    for step in range(5 * SPE):
        expected = reference_lr(step // SPE, step % SPE, SPE, 0.1, 1.6)
        assert lr_at(step, SPE, **PAPER) == pytest.approx(expected, abs=1e-15), step
    # by hand: the first iteration already takes one increment, the last one is at the peak
    assert lr_at(0, SPE, **PAPER) == pytest.approx(0.1 + 1.5 / 125)
    assert lr_at(61, SPE, **PAPER) == pytest.approx(0.1 + 1.5 * 62 / 125)
    assert lr_at(124, SPE, **PAPER) == pytest.approx(1.6)
    assert lr_at(125, SPE, **PAPER) == pytest.approx(1.6)


def test_warmup_without_headroom_starts_at_the_peak():
    # 2 workers x 32 samples: peak 0.05 < base 0.1; the reference uses the peak at once
    small = {**PAPER, "batch_size": 32, "workers": 2}
    assert peak_lr(0.1, 32, 2) == pytest.approx(0.05)
    for step in (0, 1, 60, 124, 125):
        assert lr_at(step, SPE, **small) == pytest.approx(0.05)


def test_fractional_warmup_never_overshoots():
    half = {**PAPER, "warmup_epochs": 0.5}  # 12.5 warm-up steps: 0..12
    assert lr_at(11, SPE, **half) == pytest.approx(0.1 + 1.5 * 12 / 12.5)
    assert lr_at(12, SPE, **half) == pytest.approx(1.6)
    assert lr_at(13, SPE, **half) == pytest.approx(1.6)


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
