"""The statistics behind every claim: paired by seed, with power, corrected where one claim
makes several comparisons.

Every method of a preset runs the same seeds, and a seed fixes a run's data order, partition
draw and initial model whatever the algorithm (tests/test_pairing.py checks it), so two methods'
runs of one seed share their luck. A comparison of two sides is therefore made on the per-seed
differences d_i = a_i - b_i (`Side.seeds` says which run is which seed):

- **Paired t-test** of mean(d) against the claim's threshold (`scipy.stats.ttest_1samp`), with
  its 95% interval; holds when the interval lies wholly on the claimed side, does not hold when
  it lies wholly on the other, cannot tell otherwise (a two-sided test at `ALPHA`).
- **No spread is no evidence.** When the differences have no spread (every seed the same
  difference: small n on a coarse test set), the t-test is 0/0; the exact sign-flip
  permutation test of d decides instead (all 2^n sign patterns), whose smallest two-sided
  p-value is 2/2^n: below 0.05 only from n = 6 seeds.
- **Unpaired fallback.** Where the sides do not pair (no seeds, or a seed on a side twice),
  Welch's t-test (`scipy.stats.ttest_ind(equal_var=False)`); with no spread on a side, the
  exact two-sample permutation test (`scipy.stats.permutation_test`) decides.
- **Power.** With each test its minimum detectable difference (MDD): the true difference the
  test finds with 80% power (`POWER`) at `ALPHA`, (t_{1-alpha/2, n-1} + t_{power, n-1}) s/sqrt(n)
  for s the standard deviation of the differences. Where a comparison cannot tell and its MDD
  is above the claim's margin (`EFFECT_ACC` for accuracies, `EFFECT_REL` of the reference's
  mean for times, bytes and ratios, the equivalence margin for "comparable"), the text says
  "cannot tell at n = k (n = N needed for MDD <= margin)", N from the same formula at the
  observed s.
- **Equivalence** ("comparable"): TOST at ALPHA, the 90% interval of mean(d) inside
  +-margin; its power figure is the smallest margin TOST would show at 80% power when the
  methods are equal.
- **Ratios** of means: a percentile bootstrap (paired: the seeds resampled jointly), 95%.
- **By the model.** A quantity the timing model fixes (`MODELED`: comm/compute ratio, exposed
  and training time per epoch, bytes, peaks) that takes one value on every seed of both sides
  is not sampled: it is reported "by the model" with its value, not tested.
- **Several comparisons, one claim** (every tau, every condition): the claim holds when every
  comparison holds, each at ALPHA (an intersection-union test, which needs no correction); a
  "does not hold" of one comparison stands only after Holm's step-down correction over all the
  claim's comparisons (`holm`), else that comparison cannot tell.
"""

from __future__ import annotations

import contextvars
import math
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from scipy import stats

from analysis.tables import human_bytes

ALPHA = 0.05  # every claim's level
POWER = 0.8  # the power at which the minimum detectable difference is stated
EFFECT_ACC = 0.01  # smallest accuracy difference of interest: one point
EFFECT_REL = 0.05  # for times, bytes and ratios: 5% of the reference side's mean
MAX_N = 1000  # the largest n a "n needed" is searched to
EXACT_MAX = 16  # up to 2^16 sign patterns enumerated; above, as many drawn at random
BOOTSTRAP_RESAMPLES = 9999
BOOTSTRAP_SEED = 0  # a report regenerated from the same runs prints the same intervals
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
        "fast_idle",  # a time budget's fast workers' idle share (analysis/claim_runs.py)
    }
)

VERDICTS = {True: "holds", False: "does not hold", None: "cannot tell"}


class Side(np.ndarray):
    """A side's values with where they come from: `seeds` (one per value, or None), the
    `column` they are of, and what `analysis.convergence` found: `unconverged` runs of `runs`."""

    method: str = ""
    unconverged: int = 0
    runs: int = 0
    seeds: tuple | None = None
    column: str = ""

    @classmethod
    def of(
        cls,
        values: Sequence[float],
        method: str = "",
        unconverged: int = 0,
        runs: int = 0,
        seeds: Sequence[float] | None = None,
        column: str = "",
    ) -> Side:
        side = np.asarray(values, dtype=float).view(cls)
        side.method, side.unconverged, side.runs, side.column = method, unconverged, runs, column
        side.seeds = None if seeds is None else tuple(float(s) for s in seeds)
        if side.seeds is not None and len(side.seeds) != len(side):
            raise ValueError(f"{len(side.seeds)} seeds for {len(side)} values")
        return side

    def __array_finalize__(self, obj: Any) -> None:
        self.method = getattr(obj, "method", "")
        self.unconverged = getattr(obj, "unconverged", 0)
        self.runs = getattr(obj, "runs", 0)
        self.seeds = getattr(obj, "seeds", None)
        self.column = getattr(obj, "column", "")


@dataclass(frozen=True)
class Comparison:
    """One test: side a against side b, `estimate` (mean a - b, or a / b for a ratio) with its
    interval [`low`, `high`] at `level`, `p` (None for a bootstrap), `holds` against
    `threshold` in the claimed `direction` (+1: above it, -1: below it, 0: within +-threshold).
    `test` names the test made; `n` the pairs of a paired test; `mdd` its minimum detectable
    difference at POWER and `n_needed` the n at which it would reach `margin`; `p_against` the
    p-value of "does not hold" (what Holm corrects); `note` a correction's word."""

    a: str
    b: str
    a_values: tuple[float, ...]
    b_values: tuple[float, ...]
    estimate: float
    low: float
    high: float
    level: float
    p: float | None
    threshold: float
    direction: int
    kind: str  # "diff" | "ratio" | "equivalence"
    holds: bool | None
    why: str = ""
    test: str = ""  # "paired t" | "sign-flip" | "Welch" | "permutation" | "bootstrap" | "model"
    n: int = 0  # pairs (paired tests), else 0
    mdd: float = math.nan
    margin: float = math.nan
    n_needed: int | None = None
    p_against: float | None = None
    note: str = ""
    unit: str = "acc"  # of the sides' column: acc, s, ratio or bytes (`_unit`)

    @property
    def n_a(self) -> int:
        return len(self.a_values)

    @property
    def n_b(self) -> int:
        return len(self.b_values)

    @property
    def paired(self) -> bool:
        return self.n > 0

    @property
    def key(self) -> tuple:
        return (self.kind, self.a, self.b, self.a_values, self.b_values, self.threshold)

    @property
    def verdict(self) -> str:
        return VERDICTS[self.holds] + (" (by the model)" if self.test == "model" else "")

    def text(self, unit: str | None = None) -> str:
        """ "losp 0.913 vs osp 0.905 (paired, n=8): difference +0.008, 95% CI [+0.002,
        +0.014], paired t p = 0.020; MDD 0.006" (`unit`: acc, ratio, s or bytes; default the
        sides' own)."""
        unit = unit or self.unit
        if self.paired:
            head = (
                f"{self.a} {_value(_mean(self.a_values), unit)} vs {self.b} "
                f"{_value(_mean(self.b_values), unit)} (paired, n={self.n})"
            )
        else:
            head = (
                f"{self.a} {_value(_mean(self.a_values), unit)} (n={self.n_a}) vs "
                f"{self.b} {_value(_mean(self.b_values), unit)} (n={self.n_b})"
            )
        if self.why:
            return f"{head}: {self.why}"
        percent = f"{100 * self.level:g}%"
        if self.test == "model":
            what = "ratio" if self.kind == "ratio" else "difference"
            shown = f"{self.estimate:.3g}" if self.kind == "ratio" else _signed(self.estimate, unit)
            against = f"{self.threshold:g}" if self.kind == "ratio" else ""
            against = f" vs {against}" if against else ""
            return (
                f"{head}: {what} {shown}{against}, by the model (the same value on every seed "
                "of both sides: set by the timing model, not sampled)"
            )
        if self.kind == "ratio":
            body = (
                f"ratio {self.estimate:.3g}, {percent} bootstrap CI [{self.low:.3g}, "
                f"{self.high:.3g}] vs {self.threshold:g}"
            )
        else:
            body = (
                f"difference {_signed(self.estimate, unit)}, {percent} CI "
                f"[{_signed(self.low, unit)}, {_signed(self.high, unit)}]"
            )
            if self.kind == "equivalence":
                body += f" vs margin ±{_value(self.threshold, unit)}, TOST p {_p(self.p)}"
            else:
                against = f" vs {_signed(self.threshold, unit)}" if self.threshold else ""
                body += f"{against}, {self.test} p {_p(self.p)}"
        return f"{head}: {body}{self._power(unit)}{self.note}"

    def _power(self, unit: str) -> str:
        if math.isnan(self.mdd):
            return ""
        what = "smallest provable margin" if self.kind == "equivalence" else "MDD"
        out = f"; {what} {_magnitude(self.mdd, unit)}"
        n = self.n or min(self.n_a, self.n_b)
        if self.holds is None and self.n_needed is not None and self.n_needed > n:
            need = ">" + str(MAX_N) if self.n_needed > MAX_N else str(self.n_needed)
            out += (
                f"; cannot tell at n = {n} (n = {need} needed for MDD ≤ "
                f"{_magnitude(self.margin, unit)})"
            )
        return out

    def verdict_text(self, unit: str | None = None) -> str:
        """ "cannot tell: <text>"."""
        return f"{self.verdict}: {self.text(unit)}"


# --- the tests --------------------------------------------------------------------------------


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
    where the sides pair, else Welch (module docstring). `margin`: the smallest difference of
    interest (default: EFFECT_ACC for accuracies, EFFECT_REL of b's mean otherwise)."""
    unconverged = _not_converged(a_values, b_values)
    pairs = _pairs(a_values, b_values)
    x, y = _floats(a_values), _floats(b_values)
    base = dict(a=a, b=b, a_values=x, b_values=y, threshold=threshold, direction=direction)
    base |= dict(kind="diff", level=1 - ALPHA, margin=_margin(margin, a_values, b_values))
    base["unit"] = _unit(a_values, b_values)
    estimate = _diff(x, y)
    why = _untestable(pairs, x, y) or unconverged
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
    base["n_needed"] = _n_needed(result["sd"], base["margin"], base.get("n", 0))
    return _holm(Comparison(**base, estimate=estimate, low=low, high=high, holds=holds))


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
    unconverged = _not_converged(a_values, b_values)
    pairs = _pairs(a_values, b_values)
    x, y = _floats(a_values), _floats(b_values)
    base = dict(a=a, b=b, a_values=x, b_values=y, threshold=margin, direction=0)
    base |= dict(kind="equivalence", level=1 - 2 * ALPHA, margin=margin)
    base["unit"] = _unit(a_values, b_values)
    estimate = _diff(x, y)
    why = _untestable(pairs, x, y) or unconverged
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
    mdd = _tost_margin(sd, df_n, paired=bool(n))
    need = _n_needed(sd, margin, n, tost=True)
    return _holm(
        Comparison(
            **base,
            estimate=estimate,
            low=low,
            high=high,
            p=p_in,
            holds=holds,
            test=above["test"],
            mdd=mdd,
            n_needed=need,
            p_against=p_out,
        )
    )


def ratio_below(
    a: str, a_values: Sequence[float], b: str, b_values: Sequence[float], threshold: float
) -> Comparison:
    """Is mean(a) / mean(b) below `threshold`? A percentile bootstrap of the ratio of means
    (seeds resampled jointly where the sides pair, else each side on its own), its 95%
    interval, and the verdict; "by the model" where neither side varies."""
    unconverged = _not_converged(a_values, b_values)
    pairs = _pairs(a_values, b_values)
    x, y = _floats(a_values), _floats(b_values)
    base = dict(a=a, b=b, a_values=x, b_values=y, threshold=threshold)
    base |= dict(direction=-1, kind="ratio", level=1 - ALPHA, p=None, test="bootstrap")
    base["unit"] = "ratio"
    mean_b = _mean(y)
    estimate = _mean(x) / mean_b if mean_b else math.nan
    if len(x) < 2 or len(y) < 2:
        return _undecided(base, estimate, "n < 2 on a side")
    if unconverged:
        return _undecided(base, estimate, unconverged)
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
    return _holm(
        Comparison(
            **base,
            estimate=estimate,
            low=low,
            high=high,
            holds=_side(low, high, threshold, -1),
            p_against=p_against,
        )
    )


def combine(verdicts: Iterable[bool | None]) -> bool | None:
    """Holds if every one holds, does not hold if one does not, cannot tell otherwise (and
    cannot tell for none at all)."""
    verdicts = list(verdicts)
    if any(v is False for v in verdicts):
        return False
    return True if verdicts and all(v is True for v in verdicts) else None


# --- Holm over one claim's comparisons ----------------------------------------------------------

# A claim is checked twice (`corrected`): the first pass collects its comparisons' p-values of
# "does not hold", the second makes every comparison again with Holm's decision for its own.
_SEEN: contextvars.ContextVar[list | None] = contextvars.ContextVar("seen", default=None)
_DECIDED: contextvars.ContextVar[dict | None] = contextvars.ContextVar("decided", default=None)


def holm(p_values: Sequence[float], alpha: float = ALPHA) -> list[bool]:
    """Holm's step-down: which of the hypotheses with these p-values are rejected at family-wise
    level `alpha` (the i-th smallest against alpha / (k - i), stopping at the first kept)."""
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    rejected = [False] * len(p_values)
    for rank, i in enumerate(order):
        if p_values[i] > alpha / (len(p_values) - rank):
            break
        rejected[i] = True
    return rejected


def corrected(check: Callable[[], Any]) -> tuple[Any, list[Comparison]]:
    """Run `check` with Holm's correction of every "does not hold" it finds (module docstring):
    once to collect its comparisons, once more to decide. Returns what `check` returned the
    second time and the comparisons it made then (the corrected ones)."""
    token = _SEEN.set([])
    try:
        check()
        seen = _SEEN.get()
    finally:
        _SEEN.reset(token)
    tests = {c.key: c for c in seen if c.p_against is not None}
    keys = list(tests)
    rejected = holm([tests[k].p_against for k in keys])
    token = _DECIDED.set({"k": len(keys), **dict(zip(keys, rejected, strict=True))})
    again = _SEEN.set([])
    try:
        return check(), list(_SEEN.get())
    finally:
        _SEEN.reset(again)
        _DECIDED.reset(token)


def deciding(comparisons: Sequence[Comparison], holds: bool | None) -> Comparison | None:
    """The comparison a claim's verdict rests on, for a one-line summary: for "holds" the
    weakest of those that hold (the largest p), for "does not hold" the first that does not,
    for "cannot tell" the first that cannot (a test made, before one that was not)."""
    if not comparisons:
        return None
    if holds is True:
        held = [c for c in comparisons if c.holds is True]
        return max(held, key=lambda c: -1.0 if c.p is None else c.p) if held else None
    wanted = [c for c in comparisons if c.holds is holds]
    made = [c for c in wanted if not c.why]
    return (made or wanted or [None])[0]


def _holm(c: Comparison) -> Comparison:
    seen, decided = _SEEN.get(), _DECIDED.get()
    if seen is not None:
        seen.append(c)
    if decided is None or c.holds is not False or c.p_against is None:
        return c
    k = decided["k"]
    if decided.get(c.key, True) or k < 2:
        return c
    return replace(c, holds=None, note=f"; does not hold alone, not after Holm over {k} tests")


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
    return _holm(Comparison(
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
        greater, less = _sign_flip(x, +1), _sign_flip(x, -1)
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
        mdd=_mdd(sd, n), test="paired t",
    )  # fmt: skip


def _two_sample(
    x: np.ndarray, y: np.ndarray, threshold: float, level: float, direction: int
) -> dict:
    """Welch's t of mean(x) - mean(y) against `threshold`; the exact permutation test when a
    side has no spread (the keys of `_one_sample`)."""
    if _flat(x) or _flat(y):
        greater = _permutation(x, y + threshold, "greater")
        less = _permutation(x, y + threshold, "less")
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


def _sign_flip(x: np.ndarray, direction: int) -> float:
    """One-sided p of the sign-flip permutation test of mean(x) = 0: the share of sign patterns
    whose mean is at least as far on `direction`'s side as the observed one (exact up to
    EXACT_MAX values, else as many patterns drawn with a fixed seed)."""
    n = len(x)
    if n <= EXACT_MAX:
        signs = ((np.arange(2**n)[:, None] >> np.arange(n)) & 1) * 2 - 1
    else:
        rng = np.random.default_rng(BOOTSTRAP_SEED)
        signs = rng.choice([-1, 1], size=(2**EXACT_MAX, n))
        signs[0] = 1
    means = (signs * x).mean(axis=1)
    observed, tol = float(x.mean()), 1e-12 * max(1.0, float(np.abs(x).max()))
    share = means >= observed - tol if direction > 0 else means <= observed + tol
    return float(np.mean(share))


def _permutation(x: np.ndarray, y: np.ndarray, alternative: str) -> float:
    """One-sided p of the two-sample permutation test of mean(x) - mean(y) (exact for small
    samples)."""
    result = stats.permutation_test(
        (x, y),
        lambda u, v, axis=-1: np.mean(u, axis=axis) - np.mean(v, axis=axis),
        permutation_type="independent",
        vectorized=True,
        alternative=alternative,
        n_resamples=BOOTSTRAP_RESAMPLES,
        rng=np.random.default_rng(BOOTSTRAP_SEED),
    )
    return float(result.pvalue)


def _flat(x: Sequence[float]) -> bool:
    """No spread: every value the same, but for float rounding (a difference of accuracies
    such as 0.86 - 0.95 and 0.84 - 0.93 differs in its last bits)."""
    x = np.asarray(x, float)
    return len(x) > 0 and float(np.ptp(x)) <= 1e-9 * max(1.0, float(np.abs(x).max()))


def _pooled_sd(x: np.ndarray, y: np.ndarray) -> float:
    return float(math.sqrt((np.var(x, ddof=1) + np.var(y, ddof=1)) / 2))


def _mdd(sd: float, n: int, paired: bool = True) -> float:
    """Minimum detectable difference at POWER and two-sided ALPHA (paired: n pairs; else n per
    side with pooled sd)."""
    if n < 2 or math.isnan(sd):
        return math.nan
    df = n - 1 if paired else 2 * n - 2
    scale = sd * math.sqrt((1 if paired else 2) / n)
    return float((stats.t.ppf(1 - ALPHA / 2, df) + stats.t.ppf(POWER, df)) * scale)


def _tost_margin(sd: float, n: int, paired: bool = True) -> float:
    """The smallest margin TOST shows at POWER when the true difference is 0."""
    if n < 2 or math.isnan(sd):
        return math.nan
    df = n - 1 if paired else 2 * n - 2
    scale = sd * math.sqrt((1 if paired else 2) / n)
    return float((stats.t.ppf(1 - ALPHA, df) + stats.t.ppf(0.5 + POWER / 2, df)) * scale)


# The fewest seeds at which an exact sign-flip test can reach ALPHA (2 / 2^n < ALPHA).
MIN_EXACT_N = math.ceil(math.log2(2 / ALPHA))


def _n_needed(sd: float, margin: float, n: int, tost: bool = False) -> int | None:
    """The smallest n whose power figure reaches `margin` at the observed `sd` (paired when
    `n`, else per side); None when unknown. No spread: the exact test's own floor."""
    if math.isnan(sd) or math.isnan(margin) or margin <= 0:
        return None
    if sd == 0:
        return MIN_EXACT_N
    paired = n > 0
    figure = _tost_margin if tost else _mdd
    for k in range(2, MAX_N + 1):
        if figure(sd, k, paired) <= margin:
            return k
    return MAX_N + 1


UNITS = {"acc": "acc", "ratio": "ratio", "efficiency": "ratio", "peak": "bytes"}
UNITS["bytes_per_step"] = "bytes"
UNITS["fast_idle"] = "ratio"  # a share of the budget, shown in percent


def _unit(a: Sequence[float], b: Sequence[float]) -> str:
    """The unit of the sides' column: accuracies, ratios, bytes, else seconds; "acc" when the
    sides do not say (plain lists)."""
    column = getattr(b, "column", "") or getattr(a, "column", "")
    return UNITS.get(column, "s") if column else "acc"


def _margin(margin: float | None, a: Sequence[float], b: Sequence[float]) -> float:
    if margin is not None:
        return margin
    column = getattr(b, "column", "") or getattr(a, "column", "")
    if column in ("", "acc"):
        return EFFECT_ACC
    return EFFECT_REL * abs(_mean(_floats(b)))


def _not_converged(*sides: Sequence[float]) -> str:
    """ "not converged: cannot tell (eamsgd: 3 of 3 runs)" when a side's runs did not all
    converge; "" otherwise (or when it is not known)."""
    which = [
        f"{side.method}: {side.unconverged} of {side.runs} runs"
        for side in sides
        if isinstance(side, Side) and side.unconverged
    ]
    return f"not converged: cannot tell ({'; '.join(which)})" if which else ""


def _undecided(base: dict, estimate: float, why: str) -> Comparison:
    return _holm(
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


def _mean(values: Sequence[float]) -> float:
    return float(np.mean(values)) if len(values) else math.nan


def _diff(a: Sequence[float], b: Sequence[float]) -> float:
    return _mean(a) - _mean(b)


def _value(value: float, unit: str) -> str:
    if value is None or math.isnan(value):
        return "–"
    if unit == "acc":
        return f"{value:.3f}"
    if unit == "ratio":
        return f"{100 * value:.1f}%"
    if unit == "bytes":
        return human_bytes(value)
    return f"{value:.3g} s"


def _magnitude(value: float, unit: str) -> str:
    """A difference's size in its unit (a ratio's in points of percent)."""
    if unit == "ratio":
        return f"{100 * value:.2g} points"
    if unit in ("acc",):
        return f"{value:.3f}"
    return _value(value, unit)


def _signed(value: float, unit: str) -> str:
    if value is None or math.isnan(value):
        return "–"
    if unit == "acc":
        return f"{value:+.3f}"
    if unit == "ratio":  # a difference of two ratios: in points of percent
        return f"{100 * value:+.1f} points"
    return f"{value:+.3g}" + (" s" if unit == "s" else "")


def _p(p: float | None) -> str:
    if p is None or math.isnan(p):
        return "–"
    return "< 0.001" if p < 0.001 else f"= {p:.3f}"
