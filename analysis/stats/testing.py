"""The tests of two sides (the package's docstring says each in full): `compare` (paired t on
the per-seed differences, the exact sign-flip test where they have no spread; unpaired, Welch's
t or the exact permutation test), `welch` (the unpaired test whatever the seeds), `equivalent`
(TOST) and `ratio_below` (a bootstrap of a ratio of means), with the pieces they share: pairing
by seed, the margins of interest, what the timing model fixes, why no test can be made."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import replace

import numpy as np
from scipy import stats

from analysis.stats.comparison import Comparison, Side, mean_of
from analysis.stats.constants import ALPHA, BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED, POWER
from analysis.stats.exact import permutation, sign_flip
from analysis.stats.multiple import after_holm, aside
from analysis.stats.power import minimum_detectable, n_needed, tost_margin
from analysis.stats.units import signed_text, unit_of

EFFECT_ACC = 0.01  # smallest accuracy difference of interest: one point
# The convergence rule (`convergence_gate`): a side's flags stop a comparison only where they
# are more than one run in eight, so that one run flagged by the heuristic does not overturn
# what the test of the other seven decides (docs/statistics.md "Convergence").
GATE_SHARE = 1 / 8
EFFECT_REL = 0.05  # for times, bytes and ratios: 5% of the reference side's mean
# The columns the timing model fixes (analysis.claims.per_run): equal on every seed they are
# a property of the model, reported "by the model", not tested.
MODELED = frozenset(
    {
        "ratio",
        "exposed_per_epoch",
        "train_per_epoch",
        "peak",
        "bytes_per_step",
        "train_s",
        "efficiency",
        "fast_idle",  # a time budget's fast workers' idle share (analysis/claims/runs.py)
    }
)


def compare(
    a: str,
    a_values: Sequence[float],
    b: str,
    b_values: Sequence[float],
    threshold: float = 0.0,
    direction: int = 1,
    margin: float | None = None,
) -> Comparison:
    """Is mean(a) - mean(b) above `threshold` (`direction` +1) or below it (-1)? Paired by seed
    where the sides pair, else Welch (the package's docstring). `margin`: the smallest
    difference of interest (default: EFFECT_ACC for accuracies, EFFECT_REL of b's mean
    otherwise)."""
    gate, flagged = convergence_gate(a_values, b_values)
    if gate:
        return _gated(
            gate,
            lambda: compare(a, _plain(a_values), b, _plain(b_values), threshold, direction, margin),
        )
    pairs = _pairs(a_values, b_values)
    x, y = _floats(a_values), _floats(b_values)
    base = dict(a=a, b=b, a_values=x, b_values=y, threshold=threshold, direction=direction)
    base |= dict(kind="diff", level=1 - ALPHA, margin=_margin(margin, a_values, b_values))
    base["unit"] = unit_of(a_values, b_values)
    estimate = _diff(x, y)
    why = _untestable(pairs, x, y)
    if why:
        return _undecided(base, estimate, why)
    if _modeled(a_values, b_values):
        return _by_the_model(base, estimate)
    if pairs is not None:
        d, estimate = _paired(base, pairs)
        result = _one_sample(d, threshold, 1 - ALPHA, direction)
    else:
        result = _two_sample(np.array(x), np.array(y), threshold, 1 - ALPHA, direction)
    low, high = result["low"], result["high"]
    holds = result.get("holds", _side(low, high, threshold, direction))
    base |= {k: result[k] for k in ("p", "p_against", "mdd", "test")}
    base["n_needed"] = n_needed(result["sd"], base["margin"], base.get("n", 0))
    return after_holm(
        Comparison(**base, estimate=estimate, low=low, high=high, holds=holds, note=flagged)
    )


def welch(
    a: str, a_values: Sequence[float], b: str, b_values: Sequence[float], **test: float
) -> Comparison:
    """The unpaired test of `compare` (Welch's t; a permutation test where a side has no
    spread), whatever the sides' seeds; `test`: compare's `threshold` and `direction`."""
    return compare(a, _unpaired(a_values), b, _unpaired(b_values), **test)


def equivalent(
    a: str, a_values: Sequence[float], b: str, b_values: Sequence[float], margin: float
) -> Comparison:
    """Is |mean(a) - mean(b)| within `margin`? TOST at ALPHA on the paired differences (or
    Welch's, unpaired): the (1 - 2 alpha) interval inside (-margin, margin) holds, wholly
    outside does not, else cannot tell."""
    gate, flagged = convergence_gate(a_values, b_values)
    if gate:
        return _gated(gate, lambda: equivalent(a, _plain(a_values), b, _plain(b_values), margin))
    pairs = _pairs(a_values, b_values)
    x, y = _floats(a_values), _floats(b_values)
    base = dict(a=a, b=b, a_values=x, b_values=y, threshold=margin, direction=0)
    base |= dict(kind="equivalence", level=1 - 2 * ALPHA, margin=margin)
    base["unit"] = unit_of(a_values, b_values)
    estimate = _diff(x, y)
    why = _untestable(pairs, x, y)
    if why:
        return _undecided(base, estimate, why)
    level = 1 - 2 * ALPHA
    if pairs is not None:
        d, estimate = _paired(base, pairs)
        above = _one_sample(d, -margin, level, +1)
        below = _one_sample(d, margin, level, -1)
    else:
        xa, ya = np.array(x), np.array(y)
        above = _two_sample(xa, ya, -margin, level, +1)
        below = _two_sample(xa, ya, margin, level, -1)
    low, high, sd = above["low"], above["high"], above.get("sd", math.nan)
    # TOST's p: the larger of the one-sided p-values of "above -margin" and "below +margin";
    # "does not hold": wholly outside, the smaller of the opposite one-sided p-values.
    p_in = max(above["p_one"], below["p_one"])
    p_out = min(above["p_other"], below["p_other"])
    exact = above["test"] in ("sign-flip", "permutation")
    if exact:
        holds = True if p_in < ALPHA else False if p_out < ALPHA else None
    elif -margin < low and high < margin:
        holds = True
    elif low > margin or high < -margin:
        holds = False
    else:
        holds = None
    n = base.get("n", 0)
    df_n = n or min(len(x), len(y))
    mdd = tost_margin(sd, df_n, paired=bool(n))
    need = n_needed(sd, margin, n, tost=True)
    sign = _sign(a, a_values, b, b_values) if holds is None else ""
    return after_holm(
        Comparison(
            **base,
            sign=sign,
            estimate=estimate,
            low=low,
            high=high,
            p=p_in,
            holds=holds,
            test=above["test"],
            mdd=mdd,
            n_needed=need,
            p_against=p_out,
            note=flagged,
        )
    )


def _sign(a: str, a_values: Sequence[float], b: str, b_values: Sequence[float]) -> str:
    """Where an equivalence cannot tell, the direction of the difference when the difference
    itself is significant (`compare` against 0, two-sided at ALPHA, outside the claim's Holm
    family): "below 0 (95% CI [-0.016, -0.008], paired t)", else ""."""
    made = aside(lambda: compare(a, a_values, b, b_values))
    if made.holds is None or made.why:
        return ""
    where = "above" if made.holds else "below"
    ci = f"[{signed_text(made.low, made.unit)}, {signed_text(made.high, made.unit)}]"
    return f"{where} 0 ({100 * made.level:g}% CI {ci}, {made.test})"


def ratio_below(
    a: str, a_values: Sequence[float], b: str, b_values: Sequence[float], threshold: float
) -> Comparison:
    """Is mean(a) / mean(b) below `threshold`? A percentile bootstrap of the ratio of means
    (seeds resampled jointly where the sides pair, else each side on its own), its 95%
    interval, and the verdict; "by the model" where neither side varies."""
    gate, flagged = convergence_gate(a_values, b_values)
    pairs = _pairs(a_values, b_values)
    x, y = _floats(a_values), _floats(b_values)
    base = dict(a=a, b=b, a_values=x, b_values=y, threshold=threshold)
    base |= dict(direction=-1, kind="ratio", level=1 - ALPHA, p=None, test="bootstrap")
    # the sides' own unit (bytes per step are shown as bytes), a ratio where they do not say
    base["unit"] = unit_of(a_values, b_values, plain="ratio")
    mean_b = mean_of(y)
    estimate = mean_of(x) / mean_b if mean_b else math.nan
    if len(x) < 2 or len(y) < 2:
        return _undecided(base, estimate, "n < 2 on a side")
    if gate:
        return _gated(
            gate, lambda: ratio_below(a, _plain(a_values), b, _plain(b_values), threshold)
        )
    if not min(y) > 0:
        return _undecided(base, estimate, f"{b} has a zero value: no ratio")
    if _flat(x) and _flat(y):
        # no spread to resample: a modeled quantity, or too few distinct values to test
        if _modeled(a_values, b_values):
            return _by_the_model(base, estimate)
        return _undecided(base, estimate, "no spread on either side: nothing to resample")

    def ratio(u: np.ndarray, v: np.ndarray, axis: int = -1) -> np.ndarray:
        return np.mean(u, axis=axis) / np.mean(v, axis=axis)

    data = (pairs[0], pairs[1]) if pairs is not None else (np.array(x), np.array(y))
    if pairs is not None:
        base |= dict(n=len(pairs[0]))
    result = stats.bootstrap(
        data,
        ratio,
        paired=pairs is not None,
        vectorized=True,
        n_resamples=BOOTSTRAP_RESAMPLES,
        confidence_level=1 - ALPHA,
        method="percentile",
        rng=np.random.default_rng(BOOTSTRAP_SEED),
    )
    low, high = float(result.confidence_interval.low), float(result.confidence_interval.high)
    # "does not hold" at the bootstrap's own level: twice the share of resamples below it
    p_against = min(1.0, 2 * float(np.mean(result.bootstrap_distribution < threshold)))
    return after_holm(
        Comparison(
            **base,
            estimate=estimate,
            low=low,
            high=high,
            holds=_side(low, high, threshold, -1),
            p_against=p_against,
            note=flagged,
        )
    )


# --- pieces -----------------------------------------------------------------------------------


def _pairs(a: Sequence[float], b: Sequence[float]) -> tuple[np.ndarray, np.ndarray] | None:
    """The two sides' values at their common seeds, in seed order; None when they do not pair
    (no seeds, a seed twice on a side)."""
    seeds_a, seeds_b = getattr(a, "seeds", None), getattr(b, "seeds", None)
    if seeds_a is None or seeds_b is None:
        return None
    if len(set(seeds_a)) < len(seeds_a) or len(set(seeds_b)) < len(seeds_b):
        return None
    va = {s: float(v) for s, v in zip(seeds_a, np.asarray(a, float), strict=True)}
    vb = {s: float(v) for s, v in zip(seeds_b, np.asarray(b, float), strict=True)}
    common = sorted(s for s in va if s in vb and not (math.isnan(va[s]) or math.isnan(vb[s])))
    return np.array([va[s] for s in common]), np.array([vb[s] for s in common])


def _untestable(pairs: tuple | None, x: Sequence[float], y: Sequence[float]) -> str:
    """Why no test can be made ("" when one can): fewer than 2 runs on a side, or, for sides
    that pair, fewer than 2 common seeds."""
    if pairs is None:
        return "n < 2 on a side" if len(x) < 2 or len(y) < 2 else ""
    return "fewer than 2 seeds on both sides" if len(pairs[0]) < 2 else ""


def _paired(base: dict, pairs: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, float]:
    """The per-seed differences and their mean; `base` now shows the sides as tested (their
    common seeds) and their n."""
    d = pairs[0] - pairs[1]
    base |= dict(n=len(d), a_values=_floats(pairs[0]), b_values=_floats(pairs[1]))
    return d, float(d.mean())


def _unpaired(values: Sequence[float]) -> Sequence[float]:
    if isinstance(values, Side):
        side = values.view(Side)
        side.seeds = None
        return side
    return values


def _modeled(a: Sequence[float], b: Sequence[float]) -> bool:
    """Both sides of a `MODELED` column, each one value on every seed."""
    columns = {getattr(a, "column", ""), getattr(b, "column", "")}
    if not columns <= MODELED:
        return False
    x, y = _floats(a), _floats(b)
    return len(x) >= 2 and len(y) >= 2 and _flat(x) and _flat(y)


def _by_the_model(base: dict, estimate: float) -> Comparison:
    holds = _side(estimate, estimate, base["threshold"], base["direction"])
    return after_holm(Comparison(
        **{"p": None, **base, "test": "model"}, estimate=estimate, low=estimate, high=estimate,
        holds=holds,
    ))  # fmt: skip


def _one_sample(d: np.ndarray, threshold: float, level: float, direction: int) -> dict:
    """Mean of the differences `d` against `threshold`: paired t, or the exact sign-flip test
    when d has no spread. p (two-sided), p_one (of the claimed side), p_other (of the other),
    p_against (two-sided scale of the other side, for Holm), low/high, sd, mdd, test."""
    n, sd = len(d), float(np.std(d, ddof=1))
    if _flat(d):
        d = np.full(n, float(np.mean(d)))
        x = d - threshold
        greater, less = sign_flip(x, +1), sign_flip(x, -1)
        p_one, p_other = (greater, less) if direction >= 0 else (less, greater)
        p = min(1.0, 2 * min(greater, less))
        holds = True if 2 * p_one < 1 - level else False if 2 * p_other < 1 - level else None
        mean = float(d.mean())
        return dict(
            low=mean, high=mean, p=p, p_one=p_one, p_other=p_other,
            p_against=min(1.0, 2 * p_other), sd=0.0, mdd=0.0, test="sign-flip", holds=holds,
        )  # fmt: skip
    with warnings.catch_warnings():
        # nearly equal differences make scipy warn of precision loss; the spread is what it is
        warnings.simplefilter("ignore", RuntimeWarning)
        result = stats.ttest_1samp(d, threshold)
        interval = result.confidence_interval(level)
        greater = float(stats.ttest_1samp(d, threshold, alternative="greater").pvalue)
        less = float(stats.ttest_1samp(d, threshold, alternative="less").pvalue)
    p_one, p_other = (greater, less) if direction >= 0 else (less, greater)
    return dict(
        low=float(interval.low), high=float(interval.high), p=float(result.pvalue),
        p_one=p_one, p_other=p_other, p_against=min(1.0, 2 * p_other), sd=sd,
        mdd=minimum_detectable(sd, n), test="paired t",
    )  # fmt: skip


def _two_sample(
    x: np.ndarray, y: np.ndarray, threshold: float, level: float, direction: int
) -> dict:
    """Welch's t of mean(x) - mean(y) against `threshold`; the exact permutation test when a
    side has no spread (the keys of `_one_sample`)."""
    if _flat(x) or _flat(y):
        greater = permutation(x, y + threshold, "greater")
        less = permutation(x, y + threshold, "less")
        p_one, p_other = (greater, less) if direction >= 0 else (less, greater)
        holds = True if 2 * p_one < 1 - level else False if 2 * p_other < 1 - level else None
        low, high, _ = _welch_interval(x, y, level)
        return dict(
            low=low, high=high, p=min(1.0, 2 * min(greater, less)), p_one=p_one,
            p_other=p_other, p_against=min(1.0, 2 * p_other), sd=_pooled_sd(x, y),
            mdd=math.nan, test="permutation", holds=holds,
        )  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        result = stats.ttest_ind(x, y + threshold, equal_var=False)
        greater = float(
            stats.ttest_ind(x, y + threshold, equal_var=False, alternative="greater").pvalue
        )
        less = float(stats.ttest_ind(x, y + threshold, equal_var=False, alternative="less").pvalue)
    low, high, df = _welch_interval(x, y, level)
    p_one, p_other = (greater, less) if direction >= 0 else (less, greater)
    se = math.sqrt(np.var(x, ddof=1) / len(x) + np.var(y, ddof=1) / len(y))
    mdd = (stats.t.ppf(1 - ALPHA / 2, df) + stats.t.ppf(POWER, df)) * se
    return dict(
        low=low, high=high, p=float(result.pvalue), p_one=p_one, p_other=p_other,
        p_against=min(1.0, 2 * p_other), sd=_pooled_sd(x, y), mdd=float(mdd), test="Welch",
    )  # fmt: skip


def _welch_interval(x: np.ndarray, y: np.ndarray, level: float) -> tuple[float, float, float]:
    """The Welch interval of mean(x) - mean(y) at `level` and its degrees of freedom (the
    exact difference, df inf, when neither side varies)."""
    diff = float(x.mean() - y.mean())
    va, vb = np.var(x, ddof=1) / len(x), np.var(y, ddof=1) / len(y)
    if va + vb == 0:
        return diff, diff, math.inf
    df = (va + vb) ** 2 / (va**2 / (len(x) - 1) + vb**2 / (len(y) - 1))
    half = stats.t.ppf(0.5 + level / 2, df) * math.sqrt(va + vb)
    return diff - half, diff + half, float(df)


def _flat(x: Sequence[float]) -> bool:
    """No spread: every value the same, but for float rounding (a difference of accuracies
    such as 0.86 - 0.95 and 0.84 - 0.93 differs in its last bits)."""
    x = np.asarray(x, float)
    return len(x) > 0 and float(np.ptp(x)) <= 1e-9 * max(1.0, float(np.abs(x).max()))


def _pooled_sd(x: np.ndarray, y: np.ndarray) -> float:
    return float(math.sqrt((np.var(x, ddof=1) + np.var(y, ddof=1)) / 2))


def _margin(margin: float | None, a: Sequence[float], b: Sequence[float]) -> float:
    if margin is not None:
        return margin
    column = getattr(b, "column", "") or getattr(a, "column", "")
    if column in ("", "acc"):
        return EFFECT_ACC
    return EFFECT_REL * abs(mean_of(_floats(b)))


def convergence_gate(*sides: Sequence[float]) -> tuple[str, str]:
    """The convergence rule of a comparison of accuracies or of times to an accuracy (the sides
    marked by `Cell.values`; docs/statistics.md "Convergence"): (`gate`, `flagged`). `gate`,
    "not converged: cannot tell (pseudo_sync: 5 of 8 runs)", where a side has more than
    GATE_SHARE of its runs flagged not converged: the comparison cannot tell on that ground.
    `flagged`, "; not converged: sync_sgd 1 of 8 runs (one in eight or fewer: tested)", names
    the flags that do not reach it (the test decides). Both "" where no run is flagged."""
    marked = [side for side in sides if isinstance(side, Side) and side.unconverged]
    gating = [s for s in marked if s.unconverged > GATE_SHARE * s.runs]
    below = [s for s in marked if s.unconverged <= GATE_SHARE * s.runs]
    which = "; ".join(f"{s.method}: {s.unconverged} of {s.runs} runs" for s in gating)
    gate = f"not converged: cannot tell ({which})" if gating else ""
    flagged = "; ".join(f"{s.method} {s.unconverged} of {s.runs} runs" for s in below)
    return gate, f"; not converged: {flagged} (one in eight or fewer: tested)" if flagged else ""


def _plain(values: Sequence[float]) -> Sequence[float]:
    """A side without its convergence flags (the same values, seeds and column)."""
    if not isinstance(values, Side):
        return values
    return Side.of(values, values.method, 0, values.runs, values.seeds, values.column)


def _gated(gate: str, test: Callable[[], Comparison]) -> Comparison:
    """A comparison the convergence rule stops: "cannot tell", with the test made all the same
    on the same runs beside it ("tested regardless: holds", its effect, interval and p), outside
    the claim's Holm family (`aside`): the page and claims.md show both."""
    tested = aside(test)
    if tested.why:  # no test could be made either
        return after_holm(replace(tested, why=f"{gate}; {tested.why}"))
    why = f"{gate}; tested regardless: {tested.verdict}"
    return after_holm(replace(tested, holds=None, p_against=None, why=why, note=""))


def _undecided(base: dict, estimate: float, why: str) -> Comparison:
    return after_holm(
        Comparison(
            **{"p": None, **base},
            estimate=estimate,
            low=math.nan,
            high=math.nan,
            holds=None,
            why=why,
        )
    )


def _side(low: float, high: float, threshold: float, direction: int) -> bool | None:
    if direction > 0:
        return True if low > threshold else False if high < threshold else None
    return True if high < threshold else False if low > threshold else None


def _floats(values: Sequence[float]) -> tuple[float, ...]:
    return tuple(float(v) for v in values if v is not None and not math.isnan(float(v)))


def _diff(a: Sequence[float], b: Sequence[float]) -> float:
    return mean_of(a) - mean_of(b)
