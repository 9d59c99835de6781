"""Did a run converge? A table row is only read at face value when its runs did.

A run has converged when, over its last evaluations (the `window`: the last quarter of them, at
least 2), both have stopped moving:

- accuracy: every evaluation's test accuracy (the consensus model's, `test/acc`) is within
  `acc_tol` (0.02, about six digits of the 300-image test split) of the best the run reached;
- training loss: it fell over the window (from the window's first evaluation to its last) by
  no more than `loss_frac` (10%) of the run's whole fall, from its first evaluation to its last
  (a loss that rises over the window has stopped falling). Relative to the whole fall, not
  to its last value: a loss of 0.09 going to 0.08 at the end of a run that started at 1.4 has
  converged, and one going from 0.9 to 0.5 has not.

A diverged run has not converged; a run with fewer than 3 evaluations cannot show it (not
converged). "Converged" says that more of the same training would not change the row, not that
its accuracy is good: a method at a poor learning rate can converge to a poor accuracy, which is
what `make tune` is for. The tables show per row how many of its runs converged ("yes", "no",
"2/3"), and a claim that compares a row whose runs did not all converge cannot tell
(`analysis.claims`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd

ACC, LOSS = "test/acc", "train/loss"


@dataclass(frozen=True)
class Criterion:
    window: float = 0.25  # the last quarter of the evaluations ...
    min_window: int = 2  # ... at least two of them
    acc_tol: float = 0.02  # every accuracy in the window within this of the run's best
    loss_frac: float = 0.1  # the window's fall of the training loss, at most this of the whole


CRITERION = Criterion()


def converged(
    acc: Sequence[float], loss: Sequence[float], criterion: Criterion = CRITERION
) -> bool:
    """Whether a run with these per-evaluation test accuracies and training losses (in step
    order) has converged by `criterion` (module docstring)."""
    acc = [float(a) for a in acc]
    loss = [float(v) for v in loss]
    if len(acc) < 3 or len(loss) != len(acc) or any(math.isnan(v) for v in [*acc, *loss]):
        return False
    k = min(max(criterion.min_window, math.ceil(criterion.window * len(acc))), len(acc) - 1)
    best = max(acc)
    if any(best - a > criterion.acc_tol for a in acc[-k:]):
        return False
    whole = loss[0] - loss[-1]
    fall = loss[-k] - loss[-1]  # from the window's first evaluation to its last
    if fall <= 0:
        return True  # not falling any more (flat or rising)
    return whole > 0 and fall <= criterion.loss_frac * whole


def run_convergence(metrics: pd.DataFrame, criterion: Criterion = CRITERION) -> pd.Series:
    """Per run (index `run_dir`): whether it converged, from the metric rows of `metrics` (one
    row per evaluation; `summary.status` diverged: not converged)."""
    if metrics.empty or "run_dir" not in metrics.columns:
        return pd.Series(dtype=bool, index=pd.Index([], name="run_dir"))
    order = [c for c in ("step", "epoch") if c in metrics.columns]
    data = metrics.sort_values(order, kind="stable") if order else metrics
    result = {}
    for run_dir, rows in data.groupby("run_dir", sort=False):
        status = rows["summary.status"].iloc[0] if "summary.status" in rows else "completed"
        if status == "diverged" or ACC not in rows or LOSS not in rows:
            result[run_dir] = False
            continue
        rows = rows.dropna(subset=[ACC])
        acc = pd.to_numeric(rows[ACC], errors="coerce").tolist()
        loss = pd.to_numeric(rows[LOSS], errors="coerce").tolist()
        result[run_dir] = converged(acc, loss, criterion)
    series = pd.Series(result, dtype=bool)
    series.index.name = "run_dir"
    return series


def converged_cell(converged_runs: int, runs: int) -> str:
    """ "yes" (every run), "no" (none), "2/3"; "—" for no run."""
    if runs == 0:
        return "—"
    if converged_runs == runs:
        return "yes"
    return "no" if converged_runs == 0 else f"{converged_runs}/{runs}"


DEFINITION = (
    f"converged: over its last quarter of evaluations (at least {CRITERION.min_window}) every "
    f"test accuracy is within {CRITERION.acc_tol:g} of the run's best and the training loss fell "
    f"by at most {CRITERION.loss_frac:.0%} of its whole fall (analysis/convergence.py)"
)
