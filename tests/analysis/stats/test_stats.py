"""analysis/stats/ against numbers computed here independently: scipy's one-sample t-test
on the per-seed differences, the t distribution's quantiles for power, sign patterns
enumerated by hand, Holm's procedure by hand."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as st

from analysis.claims import CLAIMS, cells, per_run
from analysis.stats import (
    ALPHA,
    MAX_N,
    Side,
    compare,
    corrected,
    equivalent,
    holm,
    ratio_below,
    welch,
)

# Eight seeds of two methods; b is a's accuracy minus a difference that varies by seed.
A = [0.913, 0.921, 0.905, 0.930, 0.917, 0.909, 0.925, 0.915]
GAPS = [0.010, 0.006, 0.012, 0.004, 0.009, 0.011, 0.005, 0.008]
B = [a - g for a, g in zip(A, GAPS, strict=True)]


def side(values, seeds=None, column: str = "acc", method: str = "") -> Side:
    """A side with its seeds (0, 1, ... unless given) and column."""
    seeds = list(range(len(values))) if seeds is None else list(seeds)
    return Side.of(values, method, seeds=seeds, column=column)


def p_text(p: float) -> str:
    return "< 0.001" if p < 0.001 else f"= {p:.3f}"


def mdd_by_hand(sd: float, n: int) -> float:
    """(t_{0.975, n-1} + t_{0.8, n-1}) sd / sqrt(n): the paired test's minimum detectable
    difference at 80% power and two-sided alpha 0.05."""
    return (st.t.ppf(0.975, n - 1) + st.t.ppf(0.8, n - 1)) * sd / math.sqrt(n)


def sign_flip_by_hand(d: list[float]) -> float:
    """Two-sided p of the sign-flip test of mean(d) = 0: every sign pattern enumerated."""
    observed = abs(sum(d))
    patterns = list(itertools.product((-1, 1), repeat=len(d)))
    extreme = sum(
        1 for s in patterns if abs(sum(x * y for x, y in zip(s, d, strict=True))) >= observed
    )
    return extreme / len(patterns)


# --- the paired t-test ----------------------------------------------------------------------------


def test_paired_t_is_the_one_sample_t_of_the_per_seed_differences() -> None:
    c = compare("a", side(A), "b", side(B))
    d = np.array(A) - np.array(B)
    ref = st.ttest_1samp(d, 0.0)
    ci = ref.confidence_interval(0.95)
    assert (c.test, c.n, c.paired) == ("paired t", 8, True)
    assert c.estimate == pytest.approx(d.mean())
    assert (c.low, c.high) == pytest.approx((ci.low, ci.high))
    assert c.p == pytest.approx(ref.pvalue)
    # the interval by its formula as well
    half = st.t.ppf(0.975, 7) * d.std(ddof=1) / math.sqrt(8)
    assert (c.low, c.high) == pytest.approx((d.mean() - half, d.mean() + half))
    assert c.holds is True and c.low > 0
    mdd = mdd_by_hand(d.std(ddof=1), 8)
    assert c.mdd == pytest.approx(mdd)
    assert c.text() == (
        f"a {np.mean(A):.3f} vs b {np.mean(B):.3f} (paired, n=8): difference "
        f"{d.mean():+.3f}, 95% CI [{ci.low:+.3f}, {ci.high:+.3f}], paired t p "
        f"{p_text(ref.pvalue)}; MDD {mdd:.3f}"
    )
    assert c.verdict_text() == "holds: " + c.text()


def test_paired_t_against_a_threshold_and_below_it() -> None:
    d = np.array(A) - np.array(B)
    above = compare("a", side(A), "b", side(B), threshold=0.008)
    ref = st.ttest_1samp(d, 0.008)
    assert above.p == pytest.approx(ref.pvalue) and above.holds is None  # mean 0.008125
    below = compare("a", side(A), "b", side(B), threshold=0.02, direction=-1)
    assert below.holds is True and below.high < 0.02
    assert below.p == pytest.approx(st.ttest_1samp(d, 0.02).pvalue)


def test_pairing_follows_the_seeds_not_the_order() -> None:
    c = compare("a", side(A), "b", side(B))
    order = [5, 2, 7, 0, 3, 6, 1, 4]
    shuffled = compare(
        "a", side([A[i] for i in order], seeds=order), "b", side(B[::-1], range(7, -1, -1))
    )
    assert (shuffled.estimate, shuffled.low, shuffled.high, shuffled.p) == pytest.approx(
        (c.estimate, c.low, c.high, c.p)
    )
    assert shuffled.n == 8 and shuffled.holds is True
    # in list order without the seeds, the shuffled side would pair the wrong runs
    wrong = np.array([A[i] for i in order]) - np.array(B[::-1])
    assert st.ttest_1samp(wrong, 0.0).pvalue != pytest.approx(c.p)


def test_seeds_on_one_side_only_are_dropped() -> None:
    # a at seeds 0..7, b at seeds 2..9: the test is on the 6 common seeds
    b_values = [*B[2:], 0.5, 0.99]
    c = compare("a", side(A), "b", side(b_values, seeds=range(2, 10)))
    d = np.array(A[2:]) - np.array(B[2:])
    ref = st.ttest_1samp(d, 0.0)
    ci = ref.confidence_interval(0.95)
    assert c.n == 6 and c.test == "paired t"
    assert (c.low, c.high) == pytest.approx((ci.low, ci.high))
    assert c.p == pytest.approx(ref.pvalue)
    assert c.mdd == pytest.approx(mdd_by_hand(d.std(ddof=1), 6))
    assert "(paired, n=6)" in c.text()


def test_the_estimate_is_the_tested_mean_difference_when_seeds_do_not_all_match() -> None:
    b_values = [*B[2:], 0.5, 0.99]
    c = compare("a", side(A), "b", side(b_values, seeds=range(2, 10)))
    d = np.array(A[2:]) - np.array(B[2:])
    assert c.low <= c.estimate <= c.high
    assert c.estimate == pytest.approx(d.mean())


def test_a_seed_twice_on_a_side_does_not_pair_and_welch_decides() -> None:
    c = compare("a", side(A, seeds=[0, 0, 1, 2, 3, 4, 5, 6]), "b", side(B))
    assert c.test == "Welch" and not c.paired
    assert c.p == pytest.approx(st.ttest_ind(A, B, equal_var=False).pvalue)


def test_pairing_is_more_powerful_when_the_seed_effect_is_shared() -> None:
    """Each seed moves both methods by the same amount (sd 0.07); the methods differ by 0.01
    with their own noise of 0.002. Paired, that gap is clear; unpaired, it drowns."""
    luck = 0.03 * (np.arange(8) - 3.5)
    own_a = np.array([0.3, -0.5, 0.8, -0.2, 0.1, -0.9, 0.6, -0.2])
    own_b = np.array([-0.4, 0.2, 0.5, -0.7, 0.9, 0.1, -0.3, -0.3])
    a = 0.90 + luck + 0.002 * own_a
    b = 0.89 + luck + 0.002 * own_b
    paired = compare("a", side(a), "b", side(b))
    unpaired = welch("a", side(a), "b", side(b))
    assert paired.holds is True and paired.test == "paired t" and paired.p < 0.001
    assert paired.p == pytest.approx(st.ttest_1samp(a - b, 0.0).pvalue)
    assert unpaired.holds is None and unpaired.test == "Welch" and not unpaired.paired
    assert unpaired.p == pytest.approx(st.ttest_ind(a, b, equal_var=False).pvalue)
    assert unpaired.p > 0.5 and unpaired.mdd > 10 * paired.mdd


# --- no spread ------------------------------------------------------------------------------------

# Binary fractions: every difference is exactly 0.125, with no rounding.
BASE = [0.5, 0.625, 0.75, 0.875, 0.5625, 0.6875]
UP = [x + 0.125 for x in BASE]


def test_no_spread_at_3_seeds_cannot_tell() -> None:
    c = compare("a", side(UP[:3]), "b", side(BASE[:3]))
    assert c.test == "sign-flip" and c.n == 3
    assert c.p == pytest.approx(sign_flip_by_hand([0.125] * 3)) == 0.25
    assert c.holds is None and c.low == c.high == pytest.approx(0.125)
    # a constant difference says nothing of its spread: n = 6 is the exact test's floor
    assert c.text() == (
        f"a {np.mean(UP[:3]):.3f} vs b {np.mean(BASE[:3]):.3f} (paired, n=3): difference "
        "+0.125, 95% CI [+0.125, +0.125], sign-flip p = 0.250; MDD 0.000; cannot tell at "
        "n = 3 (n = 6 needed for MDD ≤ 0.010)"
    )


def test_no_spread_at_6_seeds_holds_and_reversed_does_not() -> None:
    c = compare("a", side(UP), "b", side(BASE))
    assert c.test == "sign-flip" and c.n == 6
    assert c.p == pytest.approx(sign_flip_by_hand([0.125] * 6)) == pytest.approx(2 / 64)
    assert c.holds is True and c.verdict == "holds"
    reversed_ = compare("b", side(BASE), "a", side(UP))
    assert reversed_.holds is False and reversed_.p == pytest.approx(2 / 64)
    assert reversed_.p_against == pytest.approx(2 / 64)
    # 5 seeds: 2 / 32 = 0.0625, still above alpha
    five = compare("a", side(UP[:5]), "b", side(BASE[:5]))
    assert five.holds is None and five.p == pytest.approx(2 / 32)


def test_differences_equal_but_for_rounding_have_no_spread() -> None:
    c = compare("a", side([0.86, 0.84]), "b", side([0.95, 0.93]))
    assert c.test == "sign-flip" and c.holds is None and c.p == pytest.approx(0.5)


# --- power ----------------------------------------------------------------------------------------


def test_mdd_and_the_n_needed_in_a_noisy_case() -> None:
    a, b = [0.905, 0.921, 0.913], [0.900, 0.910, 0.915]
    c = compare("a", side(a), "b", side(b))
    d = np.array(a) - np.array(b)
    sd = d.std(ddof=1)
    assert c.holds is None and c.p > ALPHA
    assert c.p == pytest.approx(st.ttest_1samp(d, 0.0).pvalue)
    mdd = mdd_by_hand(sd, 3)
    assert c.mdd == pytest.approx(mdd) and mdd > 0.01
    needed = next(n for n in range(2, MAX_N + 1) if mdd_by_hand(sd, n) <= 0.01)
    assert c.n_needed == needed
    assert mdd_by_hand(sd, needed - 1) > 0.01 >= mdd_by_hand(sd, needed)
    assert c.text().endswith(
        f"; MDD {mdd:.3f}; cannot tell at n = 3 (n = {needed} needed for MDD ≤ 0.010)"
    )


def test_a_hopeless_n_needed_is_said_to_be_above_the_search() -> None:
    a, b = [0.95, 0.80, 0.99], [0.88, 0.97, 0.79]
    c = compare("a", side(a), "b", side(b))
    sd = float(np.std(np.array(a) - np.array(b), ddof=1))
    assert mdd_by_hand(sd, MAX_N) > 0.01
    assert c.n_needed == MAX_N + 1
    assert c.text().endswith(f"; cannot tell at n = 3 (n = >{MAX_N} needed for MDD ≤ 0.010)")


def test_a_time_comparison_margin_is_5_percent_of_the_reference() -> None:
    slow = side([10.2, 9.7, 10.4], column="time_to_target")
    fast = side([10.0, 10.1, 9.9], column="time_to_target")
    c = compare("slow", slow, "fast", fast)
    assert c.margin == pytest.approx(0.05 * 10.0)
    sd = float(np.std(np.array(slow) - np.array(fast), ddof=1))
    needed = next(n for n in range(2, MAX_N + 1) if mdd_by_hand(sd, n) <= 0.5)
    assert c.holds is None and c.n_needed == needed
    assert f"(n = {needed} needed for MDD ≤ 0.5 s)" in c.text()


# --- equivalence ----------------------------------------------------------------------------------

MARGIN = 0.015


def tost_by_hand(d: np.ndarray) -> tuple[float, float, float]:
    """TOST's p (the larger one-sided p of "above -margin" and "below +margin") and the 90%
    interval of mean(d)."""
    above = st.ttest_1samp(d, -MARGIN, alternative="greater").pvalue
    below = st.ttest_1samp(d, MARGIN, alternative="less").pvalue
    ci = st.ttest_1samp(d, 0.0).confidence_interval(0.90)
    return max(above, below), ci.low, ci.high


@pytest.mark.parametrize(
    "shift, scale, holds",
    [(0.002, 0.002, True), (0.05, 0.002, False), (0.012, 0.01, None)],
    ids=["inside", "outside", "straddling"],
)
def test_paired_tost(shift, scale, holds) -> None:
    wiggle = np.array([0.3, -1.2, 0.8, 0.5, -0.4, 1.1, -0.9, -0.2])
    d = shift + scale * wiggle
    b = np.array(B)
    c = equivalent("a", side(b + d), "b", side(b), MARGIN)
    p, low, high = tost_by_hand(d)
    assert c.holds is holds and c.kind == "equivalence" and c.n == 8
    assert c.p == pytest.approx(p)
    assert (c.low, c.high) == pytest.approx((low, high))
    assert c.level == pytest.approx(0.90)
    sd = d.std(ddof=1)
    smallest = (st.t.ppf(0.95, 7) + st.t.ppf(0.9, 7)) * sd / math.sqrt(8)
    assert c.mdd == pytest.approx(smallest)
    assert f"vs margin ±0.015, TOST p {p_text(p)};" in c.text()
    assert "; smallest provable margin" in c.text()
    if holds is None:
        assert low < MARGIN < high
        # the difference itself is significant (every seed's above 0): its direction is said
        ci = st.t.interval(0.95, 7, loc=d.mean(), scale=st.sem(d))
        assert ci[0] > 0 and c.sign.startswith("above 0 (95% CI [")
        assert "; the difference itself above 0 (95% CI" in c.text()
    else:
        assert c.sign == ""


# --- by the model ---------------------------------------------------------------------------------


def test_a_modeled_ratio_equal_on_every_seed_is_by_the_model() -> None:
    low, high = side([0.05] * 3, column="ratio"), side([0.5] * 3, column="ratio")
    c = ratio_below("overlap", low, "sync", high, 0.2)
    assert c.test == "model" and c.holds is True and c.verdict == "holds (by the model)"
    assert c.estimate == pytest.approx(0.1)
    assert "ratio 0.1 vs 0.2, by the model" in c.text()
    assert ratio_below("overlap", high, "sync", high, 0.2).verdict == "does not hold (by the model)"
    # accuracies are never the model's: equal on every seed, there is nothing to resample
    plain = ratio_below("overlap", side([0.05] * 3), "sync", side([0.5] * 3), 0.2)
    assert plain.test != "model" and plain.holds is None


def test_a_modeled_time_equal_on_every_seed_is_by_the_model() -> None:
    slow = side([3.0] * 3, column="train_per_epoch")
    fast = side([2.0] * 3, column="train_per_epoch")
    c = compare("slow", slow, "fast", fast)
    assert c.test == "model" and c.verdict == "holds (by the model)"
    assert "difference +1 s, by the model" in c.text()
    # the same numbers as accuracies are sampled: the sign-flip test, which 3 seeds cannot pass
    acc = compare("slow", side([3.0] * 3), "fast", side([2.0] * 3))
    assert acc.test == "sign-flip" and acc.verdict == "cannot tell"
    six = compare("slow", side([3.0] * 6), "fast", side([2.0] * 6))
    assert six.test == "sign-flip" and six.verdict == "holds"  # not "(by the model)"
    # a modeled column that varies between seeds is tested
    varying = compare("slow", side([3.0, 3.1, 2.9], column="train_per_epoch"), "fast", fast)
    assert varying.test == "paired t"


# --- Holm -----------------------------------------------------------------------------------------


def test_holm_by_hand() -> None:
    # 0.01 <= 0.05/3; then 0.03 > 0.05/2: stop
    assert holm([0.01, 0.04, 0.03]) == [True, False, False]
    # 0.001 <= 0.05/3, 0.02 <= 0.05/2, 0.04 <= 0.05
    assert holm([0.001, 0.02, 0.04]) == [True, True, True]
    assert holm([0.04, 0.04]) == [False, False]
    assert holm([0.02, 0.04]) == [True, True]
    assert holm([0.03]) == [True]
    assert holm([]) == []


def differences_with_p(p: float, n: int = 8, sd: float = 0.01) -> np.ndarray:
    """n differences of standard deviation `sd` whose mean lies below 0 with two-sided
    one-sample t p-value `p`."""
    z = np.array([0.3, -1.2, 0.8, 0.5, -0.4, 1.1, -0.9, -0.2])[:n]
    z = (z - z.mean()) / z.std(ddof=1)
    return -st.t.ppf(1 - p / 2, n - 1) * sd / math.sqrt(n) + sd * z


def test_holm_over_a_claims_comparisons_demotes_a_lone_does_not_hold() -> None:
    b = np.array(B)
    against = b + differences_with_p(0.04)  # "does not hold" at p = 0.04 alone
    clear = b + 0.02 + 0.002 * np.array([0.3, -1.2, 0.8, 0.5, -0.4, 1.1, -0.9, -0.2])
    alone = compare("x", side(against), "b", side(b))
    assert alone.holds is False and alone.p_against == pytest.approx(0.04)

    def claim() -> list:
        return [compare("x", side(against), "b", side(b)), compare("y", side(clear), "b", side(b))]

    (x, y), made = corrected(claim)
    assert len(made) == 2
    # 0.04 > 0.05 / 2: not after Holm over 2
    assert x.holds is None and y.holds is True
    assert x.note == "; does not hold alone, not after Holm over 2 tests"
    assert x.verdict_text().startswith("cannot tell: ")
    assert x.text().endswith("not after Holm over 2 tests")
    # at p = 0.01 <= 0.05 / 2 it stands
    strong = b + differences_with_p(0.01)

    def claim_strong() -> list:
        return [compare("x", side(strong), "b", side(b)), compare("y", side(clear), "b", side(b))]

    (x, _), _ = corrected(claim_strong)
    assert x.holds is False and x.note == ""


def test_a_claim_is_holm_corrected_over_its_cells() -> None:
    """losp_beats_osp at two slowdowns: one holds clearly, the other is reversed at p = 0.04,
    which does not stand after Holm over the claim's 2 comparisons."""
    osp = np.array(B)
    losp = {
        "one_slow": osp + 0.02 + 0.002 * np.linspace(-1, 1, 8),
        "lognormal": osp + differences_with_p(0.04),
    }
    rows = []
    for slowdown in losp:
        for name, values in (("losp", losp[slowdown]), ("osp", osp)):
            for seed, acc in enumerate(values):
                rows.append(
                    {
                        "run_dir": f"{name}-{slowdown}-{seed}",
                        "algorithm.name": name,
                        "tau": 2,
                        "seed": seed,
                        "compute.slowdown": slowdown,
                        "summary.status": "completed",
                        "summary.final/test_acc": float(acc),
                    }
                )
    result = CLAIMS["losp_beats_osp"](pd.DataFrame(rows), {})
    assert result.holds is None, result.details
    assert result.evidence == "2 cells: holds 1, cannot tell 1"
    lognormal = next(line for line in result.details if line.startswith("slowdown=lognormal"))
    assert lognormal.startswith("slowdown=lognormal, tau=2: cannot tell: losp ")
    assert lognormal.endswith("; does not hold alone, not after Holm over 2 tests")


# --- no pseudo-replication ------------------------------------------------------------------------


def test_a_tau_less_method_at_several_taus_counts_once_per_seed() -> None:
    """sync_sgd ignores tau: its runs at tau 1, 2 and 4 of one seed are one run three times."""
    rows = []
    for tau in (1, 2, 4):
        for seed in range(3):
            rows.append(("sync_sgd", tau, seed, 0.90 + 0.01 * seed))
    for seed, acc in enumerate((0.93, 0.945, 0.951)):
        rows.append(("local_sgd", 2, seed, acc))
    frame = pd.DataFrame(
        [
            {
                "run_dir": f"r{i}",
                "algorithm.name": algorithm,
                "tau": tau,
                "seed": seed,
                "summary.status": "completed",
                "summary.final/test_acc": acc,
            }
            for i, (algorithm, tau, seed, acc) in enumerate(rows)
        ]
    )
    runs = per_run(frame)
    assert (runs["algorithm"] == "sync_sgd").sum() == 3  # of 9 rows
    assert runs.loc[runs["algorithm"] == "sync_sgd", "tau"].isna().all()
    (cell,) = cells(runs)
    assert cell.name == "tau=2"
    syncs = cell.values("sync_sgd", "acc")
    assert len(syncs) == 3 and sorted(syncs.seeds) == [0.0, 1.0, 2.0]
    c = compare("local_sgd", cell.values("local_sgd", "acc"), "sync_sgd", syncs)
    assert c.n == 3 and (c.n_a, c.n_b) == (3, 3)
    d = np.array([0.93, 0.945, 0.951]) - np.array([0.90, 0.91, 0.92])
    assert c.p == pytest.approx(st.ttest_1samp(d, 0.0).pvalue)


def test_a_tau_less_method_under_two_conditions_is_two_sides() -> None:
    """Once per seed and condition: runs that differ in a key it does not ignore stay apart."""
    frame = pd.DataFrame(
        [
            {
                "run_dir": f"r{i}",
                "algorithm.name": "sync_sgd",
                "tau": tau,
                "workers": workers,
                "seed": seed,
                "summary.status": "completed",
                "summary.final/test_acc": 0.9,
            }
            for i, (tau, workers, seed) in enumerate(itertools.product((1, 2), (2, 4), range(3)))
        ]
    )
    runs = per_run(frame)
    assert len(runs) == 6
    assert sorted(runs["condition"].value_counts().tolist()) == [3, 3]
