"""When a run reached the target accuracy, and a time budget's many points read per pass.

Time to target (docs/statistics.md, "Time to target"): the training time at which the test
accuracy first reached the target.

- On the steps budget the evaluations are a pass apart and the time is the first evaluation's
  at or above the target (an evaluation's time is what the record knows).
- On a time budget (experiments/training/budget.py) the points are `budget.eval_every_s` apart,
  each scored on a subset of the test images, and the crossing is read on the curve's monotone
  (isotonic) fit, interpolated linearly between the last fitted point below the target and the
  first at or above it: t = t_0 + (target - a_0) / (a_1 - a_0) x (t_1 - t_0). Why
  interpolate: the first point's time is late by up to a whole interval (on average half of
  one) whatever the curve, where a straight line between the two points around the crossing
  errs only by the curve's bend inside one interval. Why the monotone fit: a point scored on
  500 images has a standard error of about 0.02, so a noisy curve first touches the target
  earlier the more often it is looked at; the fit pools a point that is up by chance with the
  points after it, so the estimate does not depend on how densely the curve was sampled
  (tests/test_budget.py checks it on curves whose crossing is known, and
  benchmarks/crossing.py against evaluation six times denser). A run that starts at or above
  the target crossed it at its first point.

`per_pass` gives the convergence rule (convergence.py) a time budget's points as it reads the
steps budget's evaluations: one row per pass of the schedule (T / epochs), the training loss and
the test accuracy averaged over the points it stands for.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any


def crossing_time(
    times: Sequence[float], accs: Sequence[float], target: float, interpolate: bool
) -> float | None:
    """The time at which the curve (`times`, `accs`: in time order) first reached `target`;
    None if it never did. `interpolate`: on the curve's monotone fit, between the points around
    the crossing (the time budget), else the first point's time (module docstring)."""
    points = [(float(t), float(a)) for t, a in zip(times, accs, strict=True) if math.isfinite(a)]
    if not points:
        return None
    if not interpolate:
        return next((t for t, a in points if a >= target), None)
    fitted = monotone_fit([a for _, a in points])
    previous: tuple[float, float] | None = None
    for (t, _), a in zip(points, fitted, strict=True):
        if a >= target:
            if previous is None or not math.isfinite(t):
                return t
            t0, a0 = previous
            return t0 + (target - a0) / (a - a0) * (t - t0)
        previous = (t, a)
    return None


def monotone_fit(values: Sequence[float]) -> list[float]:
    """The non-decreasing least-squares fit of `values` (isotonic regression, scikit-learn's):
    a noisy point above its neighbours before the crossing is pooled with the points after it
    instead of crossing the target by chance. Where the curve rises it is the curve."""
    from sklearn.isotonic import IsotonicRegression

    if len(values) < 2:
        return [float(v) for v in values]
    fit = IsotonicRegression(increasing=True).fit_transform(range(len(values)), list(values))
    return [float(v) for v in fit]


def on_time_budget(rows: Sequence[dict[str, Any]]) -> bool:
    """Whether metric rows come from a time budget (its points say how many images scored)."""
    return any("test/images" in r for r in rows)


def per_pass(rows: Sequence[dict[str, Any]], epochs: int) -> list[dict[str, Any]]:
    """A time budget's rows (in time order) thinned to the first at or past each pass boundary
    k x T / epochs (T: the last row's time), each with the mean training loss and the mean test
    accuracy of the rows since the one kept before it (itself included); other rows as they
    are. The means: a point before T is scored on a subset of the test images (500 by default:
    a standard error of about 0.02 at 0.8), too noisy a curve for the plateau rule point by
    point; a pass's mean is as steady as the steps budget's one evaluation a pass."""
    if not rows or not on_time_budget(rows) or epochs < 1:
        return list(rows)
    budget = float(rows[-1]["time/train_s"])

    def reached(t: float, k: int) -> bool:  # at or past boundary k (to rounding)
        return t >= k * budget / epochs - 1e-9 * budget

    kept, k = [], 1
    since: dict[str, list[float]] = {"train/loss": [], "test/acc": []}
    for row in rows:
        for key, values in since.items():
            value = row.get(key)
            if isinstance(value, int | float) and math.isfinite(value):
                values.append(float(value))
        t = float(row["time/train_s"])
        if reached(t, k):
            means = {key: sum(v) / len(v) if v else math.nan for key, v in since.items()}
            kept.append({**row, **means})
            since = {key: [] for key in since}
            while k <= epochs and reached(t, k):
                k += 1
    return kept
