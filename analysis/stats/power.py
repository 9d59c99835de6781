"""The power of a test: its minimum detectable difference (the true difference it finds with
probability `POWER` at two-sided `ALPHA`), the smallest margin TOST shows at that power when
the methods are equal, and the n at which either would reach the claim's margin (searched up to
`MAX_N`; `MIN_EXACT_N` for an exact sign-flip test, whose p cannot fall below 2 / 2^n)."""

from __future__ import annotations

import math

from scipy import stats

from analysis.stats.constants import ALPHA, POWER

MAX_N = 1000  # the largest n a "n needed" is searched to


def minimum_detectable(sd: float, n: int, paired: bool = True) -> float:
    """Minimum detectable difference at POWER and two-sided ALPHA (paired: n pairs; else n per
    side with pooled sd)."""
    if n < 2 or math.isnan(sd):
        return math.nan
    df = n - 1 if paired else 2 * n - 2
    scale = sd * math.sqrt((1 if paired else 2) / n)
    return float((stats.t.ppf(1 - ALPHA / 2, df) + stats.t.ppf(POWER, df)) * scale)


def tost_margin(sd: float, n: int, paired: bool = True) -> float:
    """The smallest margin TOST shows at POWER when the true difference is 0."""
    if n < 2 or math.isnan(sd):
        return math.nan
    df = n - 1 if paired else 2 * n - 2
    scale = sd * math.sqrt((1 if paired else 2) / n)
    return float((stats.t.ppf(1 - ALPHA, df) + stats.t.ppf(0.5 + POWER / 2, df)) * scale)


# The fewest seeds at which an exact sign-flip test can reach ALPHA (2 / 2^n < ALPHA).
MIN_EXACT_N = math.ceil(math.log2(2 / ALPHA))


def n_needed(sd: float, margin: float, n: int, tost: bool = False) -> int | None:
    """The smallest n whose power figure reaches `margin` at the observed `sd` (paired when
    `n`, else per side); None when unknown. No spread: the exact test's own floor."""
    if math.isnan(sd) or math.isnan(margin) or margin <= 0:
        return None
    if sd == 0:
        return MIN_EXACT_N
    paired = n > 0
    figure = tost_margin if tost else minimum_detectable
    for k in range(2, MAX_N + 1):
        if figure(sd, k, paired) <= margin:
            return k
    return MAX_N + 1
