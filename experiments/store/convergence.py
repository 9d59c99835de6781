"""Did a run converge? A table row is only read at face value when its runs did.

The plateau rule (`plateaued`) asks whether a curve has stopped moving over its last
evaluations (the `window`: the last quarter of them, at least 2):

- accuracy: every evaluation's test accuracy (the consensus model's, `test/acc`) is within
  `acc_tol` (0.02, about six digits of the 300-image test split) of the best of the curve;
- training loss: it fell over the window (from the window's first evaluation to its last) by
  no more than `loss_frac` (10%) of the curve's whole fall, from its first evaluation to its
  last (a loss that rises over the window has stopped falling). Relative to the whole fall, not
  to its last value: a loss of 0.09 going to 0.08 at the end of a run that started at 1.4 has
  converged, and one going from 0.9 to 0.5 has not.

A plateau at the end of a run is not enough when its LR schedule decayed the LR
(experiments/training/schedule.py: by `lr_decay` at the fractions `lr_decay_at` of the epochs):
after a decay the steps are a tenth as long and the curves flatten because the LR is small, not
because the method is done. By the end-window rule alone every run of the 5-epoch demo had
converged, and 20 epochs took EASGD and EAMSGD (seed 0) from 0.84 and 0.89 to 0.97. So a run
whose LR decayed has converged only when

1. the end: the plateau rule holds on all its evaluations (no late jump or drop);
2. before the final decay: it holds on the evaluations made before the final decay (each trained
   entirely at the LRs before it), taken as a curve of their own (their window, their best,
   their whole fall), and there are at least 3 of them: the method had stopped improving while
   the LR could still move it;
3. before each earlier decay with at least 3 evaluations before it: the loss part holds on
   those evaluations (the training loss had stopped falling at that LR). Otherwise a phase at a
   tenth of the LR, slow for a method still far from done, passes 2: on the smoke scale's
   synthetic data a 6-epoch EASGD run ended flat at 0.47 after its first decay cut a curve
   rising 0.08 an epoch, and 24 epochs reached 0.74. The loss only: at the full LR the test
   accuracy moves by more than `acc_tol` from one evaluation to the next, and the accuracy
   rule there marked 15 of table1's 60 runs not converged, although two such runs of the demo
   gained at most 0.01 when trained 4 times longer (80 epochs).

The decays are read off the run's per-evaluation LR (the `lr` metric, the LR of the evaluated
epoch's last step, experiments/training/loop.py): a decay came just before each evaluation whose
LR is lower than the one before it (a warm-up's rise is none). Without an `lr` column, from the
config as schedule.py applies it: each epoch of `decay_epochs(lr_decay_at, epochs)` inside the
run, not before the warm-up's end, and the evaluations of `epoch` at most that epoch before it.
A run without a decay (`lr_decay_at` empty, `lr_decay` 1 or more, a constant LR) is judged by 1
alone.

Measured, each short run against the same run trained 4 times longer (the demo preset: 17 runs
at 5 epochs against 20, 4 at 20 against 80; the smoke scale: 13 runs of 4 to 16 epochs): every
run the rule marks converged gained at most 0.027, every run that gained more than 0.03 is marked
not converged (17 runs; the end-window rule alone marked all 17 converged), and 1 run that
gained at most 0.02 is marked not converged. On 10 more smoke-scale pairs, measured after the
rule was fixed: one miss, OSP at 12 epochs on digits, converged by the rule and 0.040 higher at
48 (its loss fell 9.7% of its whole fall over the window before its first decay, just within
10%); 6 of the other 6 that gained more than 0.03 are marked not converged.

A diverged run has not converged; a run with fewer than 3 evaluations (before its final decay,
when its LR decayed) cannot show it (not converged). "Converged" says that more of the same
training would not change the row's accuracy by more than about `acc_tol`, not that its accuracy
is good: a method at a poor learning rate can converge to a poor accuracy, which is what
`make tune` is for. The tables show per row how many of its runs converged ("yes", "no", "2/3"),
and a claim that compares a row whose runs did not all converge cannot tell (`analysis.claims`).

The rule lives here, below the analysis, because the metrics log (experiments/store/log.py)
judges a run by it as the run closes, as the tables do; analysis/runs/convergence.py applies it to a
frame of many runs' metric rows.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

ACC, LOSS, LR = "test/acc", "train/loss", "lr"


@dataclass(frozen=True)
class Criterion:
    window: float = 0.25  # the last quarter of the evaluations ...
    min_window: int = 2  # ... at least two of them
    acc_tol: float = 0.02  # every accuracy in the window within this of the run's best
    loss_frac: float = 0.1  # the window's fall of the training loss, at most this of the whole


CRITERION = Criterion()
# "Within acc_tol" includes acc_tol itself: 296/300 - 290/300 is 0.020000000000000018 in floats.
_EPS = 1e-9


def decay_epochs(lr_decay_at: Sequence[float], epochs: int) -> list[int]:
    """The epochs at whose start the LR decays: `round(f * epochs)` for f in `lr_decay_at`.
    experiments/training/schedule.py applies the LR with this function and the convergence rule
    reads it, so the two cannot disagree."""
    return sorted(round(f * epochs) for f in lr_decay_at)


def plateaued(
    acc: Sequence[float], loss: Sequence[float], criterion: Criterion = CRITERION
) -> bool:
    """The plateau rule (module docstring) on these per-evaluation test accuracies and training
    losses (in step order): both flat over their last quarter. The whole rule for a run without
    an LR decay."""
    acc, loss = _floats(acc), _floats(loss)
    if len(loss) != len(acc) or any(math.isnan(v) for v in acc):
        return False
    if not _loss_stopped(loss, criterion):
        return False
    k = _window(len(acc), criterion)
    best = max(acc)
    return all(best - a <= criterion.acc_tol + _EPS for a in acc[-k:])


def converged(
    acc: Sequence[float],
    loss: Sequence[float],
    criterion: Criterion = CRITERION,
    *,
    decays: Sequence[int] = (),
) -> bool:
    """Whether a run with these per-evaluation test accuracies and training losses (in step
    order) has converged by `criterion` (module docstring). `decays`: for each LR decay of its
    schedule, how many of its evaluations came before it (`evaluations_before_decays`); none for
    a run without a decay (the plateau rule alone)."""
    acc, loss = _floats(acc), _floats(loss)
    if not plateaued(acc, loss, criterion):
        return False
    cuts = sorted({int(c) for c in decays if 0 < c < len(acc)})
    if not cuts:
        return True
    *earlier, final = cuts
    if not plateaued(acc[:final], loss[:final], criterion):
        return False
    return all(_loss_stopped(loss[:c], criterion) for c in earlier if c >= 3)


def evaluations_before_decays(lrs: Sequence[float]) -> list[int]:
    """From a run's per-evaluation LR (in step order): for each LR decay, how many of its
    evaluations came before it: the index of each evaluation whose LR is lower than the one
    before it. A constant LR, or a warm-up's rise, has none; so has a run whose LR is unknown
    (a NaN)."""
    lrs = _floats(lrs)
    if any(math.isnan(v) for v in lrs):
        return []
    return [i for i in range(1, len(lrs)) if lrs[i] < lrs[i - 1] * (1 - 1e-9)]


def decay_starts(
    epochs: Any, lr_decay_at: Any, lr_decay: Any = 0.1, warmup_epochs: Any = 0
) -> list[float]:
    """The epochs (0-based, from whose start they apply) of the config's LR decays inside the
    run, as experiments/training/schedule.py applies them (none inside the warm-up); [] for a
    schedule without a decay, or a config this cannot read."""
    try:
        epochs, lr_decay = int(epochs), float(lr_decay)
        warmup = float(warmup_epochs or 0)
        fractions = [float(f) for f in lr_decay_at]
    except (TypeError, ValueError):
        return []
    if not lr_decay < 1:  # 1: no decay; above: a rise, which the LR column shows as none either
        return []
    warmup = 0.0 if math.isnan(warmup) else warmup
    starts = sorted({max(float(e), warmup) for e in decay_epochs(fractions, epochs)})
    return [s for s in starts if 0 < s < epochs]


def _floats(values: Sequence[float]) -> list[float]:
    return [float(v) for v in values]


def _window(n: int, criterion: Criterion) -> int:
    """The window of a curve of `n` evaluations: its last quarter, at least `min_window`, and
    short of the whole curve."""
    return min(max(criterion.min_window, math.ceil(criterion.window * n)), n - 1)


def _loss_stopped(loss: list[float], criterion: Criterion) -> bool:
    """The loss part of the plateau rule; False for fewer than 3 evaluations or a NaN."""
    if len(loss) < 3 or any(math.isnan(v) for v in loss):
        return False
    k = _window(len(loss), criterion)
    whole = loss[0] - loss[-1]
    fall = loss[-k] - loss[-1]  # from the window's first evaluation to its last
    if fall <= 0:
        return True  # not falling any more (flat or rising)
    return whole > 0 and fall <= criterion.loss_frac * whole
