"""The claims of analysis/claims/verdicts.py (the controls, LOSP and pseudo-sync) and OSP/LOSP
against sync SGD under heterogeneity (analysis/claims/), on hand-made summaries frames: for each
claim a case that holds, one that does not (or cannot tell, where "does not hold" is impossible) and
its missing-data message, the statistics checked against numbers computed here (scipy's t
quantiles, sign patterns counted by hand); then ClaimResult.as_dict and claims.json."""

from __future__ import annotations

import json
import math
import re
import statistics
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats as st

from analysis.claims import CLAIMS, ClaimResult, write_claims
from analysis.claims.verdicts import EQUIVALENT_IDENTICAL
from tests.analysis.reports.test_report import noise, runs_frame, seed_effect

SEEDS = 8


def verdict(name: str, frame: pd.DataFrame) -> ClaimResult:
    return CLAIMS[name](frame, {})


def values(key: str, mean: float, shared: float, own: float, n: int = SEEDS) -> list[float]:
    """Per seed: `mean` + `shared` x the seed's luck (every method alike) + `own` x this
    side's own noise (`key`); the mean is `mean` exactly."""
    return [float(v) for v in mean + shared * seed_effect(n) + own * noise(key, n)]


def paired_by_hand(a: list[float], b: list[float], level: float = 0.95) -> dict:
    """The paired t-test of mean(a - b) = 0 from its formula: estimate, interval, two-sided p
    and the MDD at 80% power, (t_{0.975, n-1} + t_{0.8, n-1}) sd / sqrt(n)."""
    d = [x - y for x, y in zip(a, b, strict=True)]
    n, mean, sd = len(d), statistics.mean(d), statistics.stdev(d)
    se = sd / math.sqrt(n)
    half = st.t.ppf(0.5 + level / 2, n - 1) * se
    return {
        "estimate": mean,
        "low": mean - half,
        "high": mean + half,
        "p": 2 * st.t.sf(abs(mean / se), n - 1),
        "sd": sd,
        "mdd": (st.t.ppf(0.975, n - 1) + st.t.ppf(0.8, n - 1)) * se,
    }


def n_needed_by_hand(sd: float, margin: float) -> int:
    """The fewest pairs whose paired MDD at the observed sd is at most `margin`."""
    k = 2
    while (st.t.ppf(0.975, k - 1) + st.t.ppf(0.8, k - 1)) * sd / math.sqrt(k) > margin:
        k += 1
    return k


def p_text(p: float) -> str:
    return "< 0.001" if p < 0.001 else f"= {p:.3f}"


def assert_paired(c, a: list[float], b: list[float], level: float = 0.95) -> None:
    """Comparison `c` is the paired t-test of a - b, numbers as computed by hand."""
    hand = paired_by_hand(a, b, level)
    assert c.test == "paired t" and c.n == len(a)
    assert c.estimate == pytest.approx(hand["estimate"], abs=1e-12)
    assert (c.low, c.high) == pytest.approx((hand["low"], hand["high"]), rel=1e-9)
    assert c.p == pytest.approx(hand["p"], rel=1e-6)
    assert c.mdd == pytest.approx(hand["mdd"], rel=1e-9)


# --- frames -------------------------------------------------------------------------------------


def assert_undecided(result: ClaimResult, evidence: str) -> None:
    """The claim cannot be told (holds None), for the reason `evidence`."""
    assert (result.holds, result.evidence) == (None, evidence)


def cfg(config: dict) -> tuple:
    """A run's extra config keys as a hashable key part."""
    return tuple(sorted(config.items()))


def acc_frame(sides: dict[tuple, list[float]], **common) -> pd.DataFrame:
    """{(algorithm, tau, cfg({key: value})): per-seed accuracies} -> summaries, seed i the
    i-th value."""
    runs = []
    for (algorithm, tau, config), accs in sides.items():
        for seed, acc in enumerate(accs):
            runs.append(
                dict(algorithm=algorithm, tau=tau, seed=seed, acc=acc, **common, **dict(config))
            )
    return runs_frame(*runs)


NEVER = "never"


def target_frame(sides: dict[tuple, list], **common) -> pd.DataFrame:
    """{(algorithm, tau, cfg({key: value})): per seed a time to the target, or (NEVER,
    training time) for a run that never reached it} -> summaries with the report's metric
    columns (a run that reached it trained 10 s beyond)."""
    runs = []
    for (algorithm, tau, config), times in sides.items():
        for seed, time in enumerate(times):
            missed = isinstance(time, tuple)
            run = dict(algorithm=algorithm, tau=tau, seed=seed, **common, **dict(config))
            run["train"] = time[1] if missed else time + 10.0
            run["metrics.reached_target"] = not missed
            run["metrics.time_to_target_s"] = math.nan if missed else time
            runs.append(run)
    return runs_frame(*runs)


def joined(times: list) -> list[float]:
    """The per-seed values a comparison sees: a time to target, or the training time of a run
    that never reached it (a lower bound)."""
    return [t[1] if isinstance(t, tuple) else t for t in times]


# --- control_local_sgd_loses_accuracy_at_large_tau ----------------------------------------------

LOSES = "control_local_sgd_loses_accuracy_at_large_tau"


def local_taus(small: float, large: float, own: float = 0.005, **config) -> tuple:
    """Local SGD at tau 1 and 32, 8 seeds: a shared seed effect (0.005 a seed) plus each
    side's own noise."""
    a = values("local_sgd|1", small, 0.005, own)
    b = values("local_sgd|32", large, 0.005, own)
    iid = cfg({"partition.name": "iid", **config})
    return acc_frame({("local_sgd", 1, iid): a, ("local_sgd", 32, iid): b}), a, b


def test_local_sgd_control_holds_on_a_clear_drop_with_the_paired_test() -> None:
    frame, a, b = local_taus(0.90, 0.85)
    result = verdict(LOSES, frame)
    assert result.holds is True and result.verdict == "holds"
    assert result.evidence == "1 partition: holds 1"
    (c,) = result.comparisons
    assert_paired(c, a, b)
    hand = paired_by_hand(a, b)
    assert result.details == (
        f"partition=iid: holds: local_sgd tau=1 0.900 vs local_sgd tau=32 0.850 (paired, n=8): "
        f"difference +0.050, 95% CI [{hand['low']:+.3f}, {hand['high']:+.3f}], paired t p "
        f"{p_text(hand['p'])}; MDD {hand['mdd']:.3f}",
    )


def test_local_sgd_control_without_a_drop_cannot_tell_and_says_the_n_it_needs() -> None:
    frame, a, b = local_taus(0.90, 0.90, own=0.01)
    result = verdict(LOSES, frame)
    assert result.holds is None
    (c,) = result.comparisons
    assert_paired(c, a, b)
    hand = paired_by_hand(a, b)
    assert hand["mdd"] > 0.01  # the noise is above what 8 seeds resolve at one point
    needed = n_needed_by_hand(hand["sd"], 0.01)
    assert needed > 8 and c.n_needed == needed
    assert result.details[0].endswith(
        f"; MDD {hand['mdd']:.3f}; cannot tell at n = 8 (n = {needed} needed for MDD ≤ 0.010)"
    )


def test_local_sgd_control_on_a_rise_does_not_hold() -> None:
    frame, a, b = local_taus(0.85, 0.90)
    result = verdict(LOSES, frame)
    assert result.holds is False
    assert result.details[0].startswith("partition=iid: does not hold: local_sgd tau=1 0.850 vs")
    assert_paired(result.comparisons[0], a, b)


def test_local_sgd_control_is_about_the_step_budget_converged_or_not() -> None:
    """At a fixed step budget: runs that did not converge still count (other accuracy claims
    cannot tell on them)."""
    frame, _, _ = local_taus(0.90, 0.85, **{"metrics.converged": False})
    assert verdict(LOSES, frame).holds is True


def test_local_sgd_control_is_per_partition() -> None:
    iid = cfg({"partition.name": "iid"})
    noniid = cfg({"partition.name": "noniid"})
    frame = acc_frame(
        {
            ("local_sgd", 1, iid): values("iid|1", 0.90, 0.005, 0.005),
            ("local_sgd", 32, iid): values("iid|32", 0.85, 0.005, 0.005),
            ("local_sgd", 1, noniid): values("noniid|1", 0.70, 0.005, 0.005),
            ("local_sgd", 32, noniid): values("noniid|32", 0.80, 0.005, 0.005),
        }
    )
    result = verdict(LOSES, frame)
    assert result.holds is False  # a clear rise on noniid stands after Holm over 2 tests
    assert result.evidence == "2 partitions: holds 1, does not hold 1"
    assert [line.split(": ")[:2] for line in result.details] == [
        ["partition=iid", "holds"],
        ["partition=noniid", "does not hold"],
    ]


@pytest.mark.parametrize(
    "sides",
    [
        {("local_sgd", 4, cfg({})): [0.9, 0.91], ("sync_sgd", 1, cfg({})): [0.9, 0.91]},
        {("sync_sgd", 1, cfg({})): [0.9, 0.91], ("sync_sgd", 2, cfg({})): [0.9, 0.91]},
    ],
)
def test_local_sgd_control_without_two_taus_says_so(sides) -> None:
    result = verdict(LOSES, acc_frame(sides))
    assert (result.holds, result.evidence, result.details) == (
        None,
        "no Local SGD runs at two taus",
        (),
    )


# --- control_noniid_below_iid -------------------------------------------------------------------

NONIID = "control_noniid_below_iid"


def partitions(iid_8: float, noniid_8: float) -> tuple:
    """Local SGD at tau 2 (non-IID well above IID: not the largest tau, not looked at) and at
    tau 8 with the given means."""
    iid, noniid = cfg({"partition.name": "iid"}), cfg({"partition.name": "noniid"})
    a = values("iid|8", iid_8, 0.005, 0.005)
    b = values("noniid|8", noniid_8, 0.005, 0.005)
    frame = acc_frame(
        {
            ("local_sgd", 2, iid): values("iid|2", 0.70, 0.005, 0.005),
            ("local_sgd", 2, noniid): values("noniid|2", 0.95, 0.005, 0.005),
            ("local_sgd", 8, iid): a,
            ("local_sgd", 8, noniid): b,
        }
    )
    return frame, a, b


def test_noniid_control_holds_at_the_largest_tau() -> None:
    frame, a, b = partitions(0.90, 0.80)
    result = verdict(NONIID, frame)
    assert result.holds is True and result.evidence == "tau=8"
    (c,) = result.comparisons
    assert_paired(c, a, b)
    (line,) = result.details
    assert line.startswith(
        "tau=8: holds: local_sgd iid 0.900 vs local_sgd noniid 0.800 (paired, n=8): "
        "difference +0.100, 95% CI ["
    )


def test_noniid_control_does_not_hold_when_noniid_is_above() -> None:
    frame, a, b = partitions(0.80, 0.90)
    result = verdict(NONIID, frame)
    assert result.holds is False
    assert_paired(result.comparisons[0], a, b)


def test_noniid_control_missing_data() -> None:
    no_local = acc_frame({("sync_sgd", 1, cfg({"partition.name": "iid"})): [0.9, 0.91]})
    result = verdict(NONIID, no_local)
    assert_undecided(result, "no completed or diverged local_sgd run")
    # both partitions, but only at a smaller tau than the largest
    one = acc_frame(
        {
            ("local_sgd", 2, cfg({"partition.name": "iid"})): [0.9, 0.91],
            ("local_sgd", 2, cfg({"partition.name": "noniid"})): [0.8, 0.81],
            ("local_sgd", 8, cfg({"partition.name": "iid"})): [0.9, 0.91],
        }
    )
    result = verdict(NONIID, one)
    assert_undecided(result, "no Local SGD runs on both partitions at tau=8")


# --- control_sync_slower_on_a_modeled_network ---------------------------------------------------

SYNC_SLOWER = "control_sync_slower_on_a_modeled_network"


def networks(local_4: float) -> tuple:
    """Times to target, 8 seeds, partition iid: on ethernet1g sync SGD 100 s, Local SGD at tau
    1 (not looked at: tau > 1 only) 100 s, at tau 4 `local_4` and at tau 8 far slower (not
    looked at: the smallest tau > 1 only); on the ideal network (not looked at) Local SGD at
    tau 4 far slower than sync SGD."""
    slow, ideal = cfg({"network.name": "ethernet1g"}), cfg({"network.name": "ideal"})
    sync = values("sync|1g", 100.0, 1.0, 2.0)
    local = values("local|4|1g", local_4, 1.0, 2.0)
    frame = target_frame(
        {
            ("sync_sgd", 1, slow): sync,
            ("local_sgd", 1, slow): values("local|1|1g", 100.0, 1.0, 2.0),
            ("local_sgd", 4, slow): local,
            ("local_sgd", 8, slow): values("local|8|1g", 300.0, 1.0, 2.0),
            ("sync_sgd", 1, ideal): values("sync|ideal", 50.0, 1.0, 2.0),
            ("local_sgd", 4, ideal): values("local|ideal", 90.0, 1.0, 2.0),
        },
        **{"partition.name": "iid"},
    )
    return frame, sync, local


def test_sync_slower_control_holds_on_the_modeled_network_only() -> None:
    frame, sync, local = networks(60.0)
    result = verdict(SYNC_SLOWER, frame)
    assert result.holds is True, result.details
    assert result.evidence == "tau=4; 1 cell: holds 1"
    (c,) = result.comparisons
    assert_paired(c, sync, local)
    (line,) = result.details  # the ideal network's runs, tau 1 and tau 8 are not compared
    hand = paired_by_hand(sync, local)
    assert line.startswith(
        f"network=ethernet1g, tau=4: holds: sync_sgd 100 s vs local_sgd 60 s (paired, n=8): "
        f"difference +40 s, 95% CI [{hand['low']:+.3g} s, {hand['high']:+.3g} s]"
    )


def test_sync_slower_control_does_not_hold_when_local_sgd_is_later() -> None:
    frame, sync, local = networks(120.0)
    result = verdict(SYNC_SLOWER, frame)
    assert result.holds is False
    assert_paired(result.comparisons[0], sync, local)


def test_sync_slower_control_without_sync_on_a_modeled_network() -> None:
    frame = target_frame(
        {
            ("sync_sgd", 1, cfg({"network.name": "ideal"})): [100.0, 101.0],
            ("local_sgd", 4, cfg({"network.name": "ethernet1g"})): [60.0, 61.0],
        }
    )
    result = verdict(SYNC_SLOWER, frame)
    assert_undecided(result, "no completed or diverged sync_sgd run")
    slow = cfg({"network.name": "ethernet1g", "partition.name": "iid"})
    frame = target_frame(
        {("sync_sgd", 1, slow): [100.0, 101.0], ("local_sgd", 1, slow): [60.0, 61.0]}
    )
    result = verdict(SYNC_SLOWER, frame)
    assert_undecided(result, "no Local SGD run at a tau > 1 on a modeled network")


# --- overlap_sooner_than_sync_and_local ----------------------------------------------------------

TRADE_OFF = "overlap_sooner_than_sync_and_local"


def trade_off(overlap_2: float) -> tuple:
    """Times to target, 8 seeds, on the calibrated network: sync SGD 100 s, Local SGD at tau 2
    90 s, Overlap-Local-SGD at tau 2 `overlap_2`; on the ideal network (not looked at)
    Overlap-Local-SGD far slower."""
    slow, ideal = cfg({"network.name": "calibrated"}), cfg({"network.name": "ideal"})
    sync = values("sync|cal", 100.0, 1.0, 2.0)
    local = values("local|2|cal", 90.0, 1.0, 2.0)
    overlap = values("overlap|2|cal", overlap_2, 1.0, 2.0)
    frame = target_frame(
        {
            ("sync_sgd", 1, slow): sync,
            ("local_sgd", 2, slow): local,
            ("overlap_local_sgd", 2, slow): overlap,
            ("overlap_local_sgd", 2, ideal): values("overlap|ideal", 300.0, 1.0, 2.0),
        }
    )
    return frame, sync, local, overlap


def test_overlap_trade_off_holds_when_sooner_than_both_on_the_modeled_network() -> None:
    frame, sync, local, overlap = trade_off(70.0)
    result = verdict(TRADE_OFF, frame)
    assert result.holds is True, result.details
    assert len(result.comparisons) == 2  # against sync SGD and Local SGD; the ideal run not
    by_rival = {round(c.estimate): c for c in result.comparisons}
    assert_paired(by_rival[30], sync, overlap)
    assert_paired(by_rival[20], local, overlap)


def test_overlap_trade_off_does_not_hold_when_local_sgd_is_sooner() -> None:
    frame, _, _, _ = trade_off(120.0)
    assert verdict(TRADE_OFF, frame).holds is False
    frame, _, _, _ = trade_off(90.0)  # before sync SGD, level with Local SGD: undecided
    assert verdict(TRADE_OFF, frame).holds is None


def test_overlap_trade_off_on_the_ideal_network_alone_cannot_tell() -> None:
    ideal = cfg({"network.name": "ideal"})
    frame = target_frame(
        {
            ("sync_sgd", 1, ideal): [100.0, 101.0],
            ("local_sgd", 2, ideal): [90.0, 91.0],
            ("overlap_local_sgd", 2, ideal): [60.0, 61.0],
        }
    )
    assert_undecided(
        verdict(TRADE_OFF, frame),
        "no completed run on a modeled network (every run's network is ideal)",
    )


# --- control_osp_equals_losp_on_ideal_network ---------------------------------------------------

EQUALS = "control_osp_equals_losp_on_ideal_network"


def ideal_pair(gap: float, seeds: int = SEEDS) -> pd.DataFrame:
    """OSP and LOSP at tau 2 on the ideal network, equal workers: per seed LOSP = OSP + gap
    (the accuracies vary by seed); and with one slow worker LOSP far above (not looked at)."""
    osp = [float(v) for v in 0.90 + 0.005 * seed_effect(seeds)]
    equal = cfg({"network.name": "ideal", "slowdown": "none"})
    slow = cfg({"network.name": "ideal", "slowdown": "one_slow"})
    return acc_frame(
        {
            ("osp", 2, equal): osp,
            ("losp", 2, equal): [v + gap for v in osp],
            ("osp", 2, slow): osp,
            ("losp", 2, slow): [v + 0.05 for v in osp],
        }
    )


def test_osp_equals_losp_holds_on_identical_runs_by_the_exact_test() -> None:
    result = verdict(EQUALS, ideal_pair(0.0))
    assert result.holds is True, result.details
    assert result.evidence == "1 tau: holds 1; equivalent = within 0.005"
    (c,) = result.comparisons  # the one_slow runs are not compared
    assert (c.kind, c.test, c.n, c.threshold) == ("equivalence", "sign-flip", 8, 0.005)
    # no spread: TOST by sign flips; of the 2^8 patterns of d - (-0.005) = +0.005 only the
    # all-plus one has a mean as high: p = 1/256 for each side
    assert c.p == pytest.approx(2**-8)
    assert (c.estimate, c.low, c.high) == (0.0, 0.0, 0.0)
    assert result.details == (
        "slowdown=none, tau=2: holds: losp 0.900 vs osp 0.900 (paired, n=8): difference "
        "+0.000, 90% CI [+0.000, +0.000] vs margin ±0.005, TOST p = 0.004; smallest provable "
        "margin 0.000",
    )


@pytest.mark.parametrize("seeds, holds", [(4, None), (5, True)])
def test_osp_equals_losp_needs_enough_seeds_for_the_exact_test(seeds, holds) -> None:
    """One-sided sign-flip p = 2^-n: 1/16 > 0.05 at 4 seeds, 1/32 < 0.05 at 5."""
    result = verdict(EQUALS, ideal_pair(0.0, seeds))
    assert result.holds is holds
    assert result.comparisons[0].p == pytest.approx(2.0**-seeds)


def test_osp_equals_losp_does_not_hold_on_a_gap_of_two_points() -> None:
    result = verdict(EQUALS, ideal_pair(0.02))
    assert result.holds is False
    (c,) = result.comparisons
    assert c.estimate == pytest.approx(0.02)
    # wholly outside: every seed's d - 0.005 = +0.015, only the all-plus pattern as high (the
    # one-sided p of "above +margin", at alpha as TOST's own sides)
    assert c.p_against == pytest.approx(2**-8)
    # TOST's p, the larger of its one-sided ones: "below +margin" has every pattern's mean at
    # most +0.015, so p = 1
    assert c.p == pytest.approx(1.0)


def test_osp_equals_losp_with_noise_is_the_90_percent_interval() -> None:
    osp = values("osp|eq", 0.90, 0.005, 0.001)
    losp = values("losp|eq", 0.901, 0.005, 0.001)
    equal = cfg({"network.name": "ideal", "slowdown": "none"})
    result = verdict(EQUALS, acc_frame({("osp", 2, equal): osp, ("losp", 2, equal): losp}))
    (c,) = result.comparisons
    hand = paired_by_hand(losp, osp, level=0.90)
    assert (c.low, c.high) == pytest.approx((hand["low"], hand["high"]), rel=1e-9)
    inside = -EQUIVALENT_IDENTICAL < hand["low"] and hand["high"] < EQUIVALENT_IDENTICAL
    assert inside and result.holds is True


def test_osp_equals_losp_missing_data() -> None:
    only_osp = acc_frame(
        {("osp", 2, cfg({"network.name": "ideal", "slowdown": "none"})): [0.9, 0.9]}
    )
    result = verdict(EQUALS, only_osp)
    assert_undecided(result, "no losp run on the ideal network with equal workers")
    slow = cfg({"network.name": "ideal", "slowdown": "one_slow"})
    only_slow = acc_frame({("osp", 2, slow): [0.9, 0.9], ("losp", 2, slow): [0.9, 0.9]})
    assert verdict(EQUALS, only_slow).evidence == (
        "no osp run on the ideal network with equal workers"
    )


# --- losp_sooner_than_osp -----------------------------------------------------------------------

SOONER = "losp_sooner_than_osp"
ONE_SLOW = cfg({"slowdown": "one_slow"})


def losp_osp(losp: list, osp: list) -> pd.DataFrame:
    """LOSP and OSP at tau 2 with one slow worker; and without slowdown LOSP far later (not
    looked at)."""
    none = cfg({"slowdown": "none"})
    return target_frame(
        {
            ("losp", 2, ONE_SLOW): losp,
            ("osp", 2, ONE_SLOW): osp,
            ("losp", 2, none): values("losp|none", 200.0, 1.0, 2.0),
            ("osp", 2, none): values("osp|none", 80.0, 1.0, 2.0),
        }
    )


def test_losp_sooner_holds_with_heterogeneous_workers_only() -> None:
    losp, osp = values("losp|1", 60.0, 1.0, 2.0), values("osp|1", 80.0, 1.0, 2.0)
    result = verdict(SOONER, losp_osp(losp, osp))
    assert result.holds is True, result.details
    assert result.evidence == "1 cell: holds 1"
    (c,) = result.comparisons
    assert_paired(c, osp, losp)  # OSP's time minus LOSP's, above 0
    (line,) = result.details
    assert line.startswith("slowdown=one_slow, tau=2: holds: osp 80 s vs losp 60 s (paired, n=8)")


def test_losp_sooner_does_not_hold_when_later() -> None:
    losp, osp = values("losp|1", 100.0, 1.0, 2.0), values("osp|1", 80.0, 1.0, 2.0)
    result = verdict(SOONER, losp_osp(losp, osp))
    assert result.holds is False
    assert_paired(result.comparisons[0], osp, losp)


def never_from(times: list[float], seeds: range, bound: float) -> list:
    """`times` with the runs of `seeds` never reaching the target, trained `bound` s (about)."""
    return [(NEVER, bound + 0.1 * i) if i in seeds else t for i, t in enumerate(times)]


LATER = range(4, 8)  # the seeds whose runs never reach the target


@pytest.mark.parametrize(
    "case, losp, osp, holds",
    [
        # OSP's never-reached runs at their training time only make "holds" harder: it stands
        ("late bounds, holds", 60.0, (80.0, 90.0), True),
        # ... but a "does not hold" on them does not: OSP's true times may be later
        ("late bounds, open", 60.0, (40.0, 30.0), None),
        # LOSP's never-reached runs as lower bounds only make "does not hold" harder: it stands
        ("early bounds, does not hold", (100.0, 120.0), 80.0, False),
        # ... but a "holds" on them does not: LOSP's true times may be later
        ("early bounds, open", (60.0, 50.0), 80.0, None),
        # bounds on both sides: any order is open
        ("both bounds", (60.0, 70.0), (80.0, 90.0), None),
    ],
)
def test_losp_sooner_counts_never_reached_runs_only_where_conservative(
    case, losp, osp, holds
) -> None:
    def side(key: str, spec) -> list:
        if isinstance(spec, tuple):
            return never_from(values(key, spec[0], 1.0, 2.0), LATER, spec[1])
        return values(key, spec, 1.0, 2.0)

    losp_times, osp_times = side("losp|c", losp), side("osp|c", osp)
    result = verdict(SOONER, losp_osp(losp_times, osp_times))
    assert result.holds is holds, (case, result.details)
    (c,) = result.comparisons
    # the test made: OSP minus LOSP per seed, a never-reached run at its training time
    assert_paired(c, joined(osp_times), joined(losp_times))
    (line,) = result.details
    note = "(4/8 never reached it: training time, a lower bound)"
    assert bool(re.search(rf"\bosp {re.escape(note)}", line)) == isinstance(osp, tuple)
    assert bool(re.search(rf"\blosp {re.escape(note)}", line)) == isinstance(losp, tuple)
    assert line.endswith("(runs that never reached the target leave the order open)") == (
        holds is None
    )


def test_losp_sooner_when_no_run_reached_the_target() -> None:
    never = [(NEVER, 100.0 + s) for s in range(SEEDS)]
    result = verdict(SOONER, losp_osp(never, never))
    assert result.holds is None
    assert result.details == (
        "slowdown=one_slow, tau=2: cannot tell: no run of losp or osp reached the target",
    )


def test_losp_sooner_missing_data() -> None:
    none = cfg({"slowdown": "none"})
    frame = target_frame({("losp", 2, none): [60.0, 61.0], ("osp", 2, none): [80.0, 81.0]})
    result = verdict(SOONER, frame)
    assert_undecided(result, "no osp run with heterogeneous workers")


# --- osp_losp_faster_than_sync_under_heterogeneity ----------------------------------------------

FASTER = "osp_losp_faster_than_sync_under_heterogeneity"


def hetero(osp: float, losp: float) -> tuple:
    """Times to target with one slow worker: sync SGD 100 s, OSP and LOSP at tau 2; without
    slowdown sync SGD far sooner (not looked at)."""
    sides = {
        "sync": values("sync|h", 100.0, 1.0, 2.0),
        "osp": values("osp|h", osp, 1.0, 2.0),
        "losp": values("losp|h", losp, 1.0, 2.0),
    }
    frame = target_frame(
        {
            ("sync_sgd", 1, ONE_SLOW): sides["sync"],
            ("osp", 2, ONE_SLOW): sides["osp"],
            ("losp", 2, ONE_SLOW): sides["losp"],
            ("sync_sgd", 1, cfg({"slowdown": "none"})): values("sync|none", 10.0, 1.0, 2.0),
        }
    )
    return frame, sides


def test_osp_losp_faster_than_sync_holds_per_method() -> None:
    frame, sides = hetero(60.0, 90.0)
    result = verdict(FASTER, frame)
    assert result.holds is True, result.details
    by_method = {c.b.split(" ")[0]: c for c in result.comparisons}
    assert sorted(by_method) == ["losp", "osp"]
    for name in ("osp", "losp"):
        assert_paired(by_method[name], sides["sync"], sides[name])
    assert [line.split(": ")[:2] for line in result.details] == [
        ["slowdown=one_slow, tau=2", "holds"],
        ["slowdown=one_slow, tau=2", "holds"],
    ]


def test_osp_losp_faster_than_sync_does_not_hold_when_one_is_later() -> None:
    frame, sides = hetero(60.0, 120.0)
    result = verdict(FASTER, frame)
    assert result.holds is False  # a clear loss stands after Holm over the 2 tests
    losp = next(c for c in result.comparisons if c.b == "losp")
    assert losp.holds is False
    assert_paired(losp, sides["sync"], sides["losp"])


def test_osp_losp_faster_than_sync_missing_data() -> None:
    none = cfg({"slowdown": "none"})
    frame = target_frame({("sync_sgd", 1, none): [100.0, 101.0], ("osp", 2, none): [60.0, 61.0]})
    result = verdict(FASTER, frame)
    assert_undecided(
        result, "no completed run with heterogeneous workers (compute.slowdown other than none)"
    )


# --- osp_losp_fast_workers_do_not_wait, overlap_stragglers_do_not_wait --------------------------

IDLE = "osp_losp_fast_workers_do_not_wait"
STRAGGLERS = "overlap_stragglers_do_not_wait"


def budget_frame(sides: dict[tuple, list[float]]) -> pd.DataFrame:
    """{(algorithm, tau, cfg): per seed the fast workers' idle share} -> summaries of time-budget
    runs: 4 workers, the last slow (3x busy time per step), its idle share 0.05."""
    runs = []
    for (algorithm, tau, config), shares in sides.items():
        for seed, share in enumerate(shares):
            run = dict(algorithm=algorithm, tau=tau, seed=seed, train=24.0, **dict(config))
            run["summary.workers/idle_share"] = [share, share, share, 0.05]
            run["summary.workers/busy_s"] = [24 * (1 - share)] * 3 + [22.8]
            run["summary.workers/steps"] = [int(960 * (1 - share))] * 3 + [300]
            run["summary.workers/samples"] = [32 * int(960 * (1 - share))] * 3 + [9600]
            runs.append(run)
    return runs_frame(*runs)


def test_fast_workers_idle_less_holds_against_sync_for_osp_and_losp() -> None:
    sync, osp = values("sync|idle", 0.66, 0.01, 0.01), values("osp|idle", 0.02, 0.01, 0.01)
    losp = values("losp|idle", 0.03, 0.01, 0.01)
    frame = budget_frame(
        {("sync_sgd", 1, ONE_SLOW): sync, ("osp", 2, ONE_SLOW): osp, ("losp", 2, ONE_SLOW): losp}
    )
    result = verdict(IDLE, frame)
    assert result.holds is True, result.details
    by_method = {c.b: c for c in result.comparisons}
    assert sorted(by_method) == ["losp", "osp"]
    assert_paired(by_method["osp"], sync, osp)  # sync's share minus OSP's, paired by seed
    assert_paired(by_method["losp"], sync, losp)


def test_fast_workers_idle_less_does_not_hold_when_osp_waits_more() -> None:
    sync, osp = values("sync|idle", 0.3, 0.01, 0.01), values("osp|idle", 0.6, 0.01, 0.01)
    losp = values("losp|idle", 0.03, 0.01, 0.01)
    frame = budget_frame(
        {("sync_sgd", 1, ONE_SLOW): sync, ("osp", 2, ONE_SLOW): osp, ("losp", 2, ONE_SLOW): losp}
    )
    result = verdict(IDLE, frame)
    assert result.holds is False
    assert next(c for c in result.comparisons if c.b == "osp").holds is False


def test_fast_workers_idle_less_needs_a_time_budget() -> None:
    # the steps budget's summaries carry no per-worker accounts
    frame = target_frame(
        {("sync_sgd", 1, ONE_SLOW): [100.0, 101.0], ("osp", 2, ONE_SLOW): [60.0, 61.0]}
    )
    assert_undecided(
        verdict(IDLE, frame),
        "no completed run on a time budget (budget=time: the workers' idle time at T) with "
        "heterogeneous workers",
    )


def test_fast_workers_are_every_worker_but_the_slowest_by_its_pace() -> None:
    from analysis.claims.runs import per_run

    frame = budget_frame({("osp", 2, ONE_SLOW): [0.1]})
    frame["summary.workers/idle_share"] = [[0.1, 0.2, 0.3, 0.9]]  # the slow one waits most here
    (row,) = per_run(frame).to_dict("records")
    assert row["fast_idle"] == pytest.approx(0.2)  # ranks 0-2: rank 3 has the slowest pace
    assert row["slow_samples"] == 9600 and row["fast_samples"] == 32 * 864


def test_overlap_stragglers_idle_less_than_local_and_sync() -> None:
    random = cfg({"slowdown": "lognormal_steps"})
    sync, local = values("sync|s", 0.4, 0.01, 0.01), values("local|s", 0.25, 0.01, 0.01)
    overlap = values("overlap|s", 0.05, 0.01, 0.01)
    frame = budget_frame(
        {("sync_sgd", 1, random): sync, ("local_sgd", 2, random): local,
         ("overlap_local_sgd", 2, random): overlap}
    )  # fmt: skip
    result = verdict(STRAGGLERS, frame)
    assert result.holds is True, result.details
    by_rival = {c.a: c for c in result.comparisons}
    assert sorted(by_rival) == ["local_sgd", "sync_sgd"]
    assert_paired(by_rival["local_sgd"], local, overlap)


# --- pseudo_sync_faster_than_sync ---------------------------------------------------------------

PSEUDO_FASTER = "pseudo_sync_faster_than_sync"


def pseudo_times(at_4: float) -> tuple:
    """Times to target at 2 and 4 workers: sync SGD 100 s; pseudo-sync 60 s at 2 workers and
    `at_4` at 4."""
    sides = {}
    for m, pseudo in ((2, 60.0), (4, at_4)):
        sides[("sync_sgd", m)] = values(f"sync|{m}", 100.0, 1.0, 2.0)
        sides[("pseudo_sync", m)] = values(f"pseudo|{m}", pseudo, 1.0, 2.0)
    frame = target_frame({(a, 1, cfg({"workers": m})): v for (a, m), v in sides.items()})
    return frame, sides


def test_pseudo_sync_faster_holds_per_worker_count() -> None:
    frame, sides = pseudo_times(70.0)
    result = verdict(PSEUDO_FASTER, frame)
    assert result.holds is True, result.details
    assert result.evidence == "2 conditions: holds 2"
    for c, m in zip(result.comparisons, (2, 4), strict=True):
        assert_paired(c, sides[("sync_sgd", m)], sides[("pseudo_sync", m)])
    assert [line.split(": ")[0] for line in result.details] == ["workers=2", "workers=4"]


def test_pseudo_sync_faster_does_not_hold_when_later_at_one_worker_count() -> None:
    frame, _ = pseudo_times(120.0)
    result = verdict(PSEUDO_FASTER, frame)
    assert result.holds is False
    assert result.evidence == "2 conditions: holds 1, does not hold 1"


def test_pseudo_sync_faster_missing_data() -> None:
    frame = target_frame({("sync_sgd", 1, cfg({})): [100.0, 101.0]})
    result = verdict(PSEUDO_FASTER, frame)
    assert_undecided(result, "no completed or diverged pseudo_sync run")


# --- pseudo_sync_scales_better ------------------------------------------------------------------

SCALES = "pseudo_sync_scales_better"


def scaling_frame(train: dict[tuple[str, int], list[float]], steps: int = 100) -> pd.DataFrame:
    """{(algorithm, workers): per-seed training time} -> summaries, `steps` steps each."""
    runs = []
    for (algorithm, workers), times in train.items():
        for seed, t in enumerate(times):
            runs.append(
                {
                    **dict(algorithm=algorithm, tau=1, seed=seed, workers=workers, train=t),
                    "summary.steps": steps,
                }
            )
    return runs_frame(*runs)


def test_pseudo_sync_scales_better_identical_on_every_seed_is_by_the_model() -> None:
    train = {
        ("sync_sgd", 2): [100.0] * SEEDS,  # 1 s a step
        ("sync_sgd", 8): [125.0] * SEEDS,  # 1.25 s a step: efficiency 0.8
        ("pseudo_sync", 2): [100.0] * SEEDS,
        ("pseudo_sync", 8): [105.0] * SEEDS,  # efficiency 100/105
    }
    result = verdict(SCALES, scaling_frame(train))
    assert result.holds is True and result.verdict == "holds (by the model)"
    assert result.evidence == "2 to 8 workers"
    (c,) = result.comparisons
    assert c.test == "model" and c.estimate == pytest.approx(100 / 105 - 0.8)
    (line,) = result.details
    assert line.startswith("efficiency, 2 to 8 workers: holds (by the model): pseudo_sync 95.2%")
    assert "by the model (the same value on every seed of both sides" in line
    reverse = {**train, ("pseudo_sync", 8): [150.0] * SEEDS}  # efficiency 2/3 < 0.8
    result = verdict(SCALES, scaling_frame(reverse))
    assert result.holds is False and result.verdict == "does not hold (by the model)"


def noisy_scaling(pseudo_8: float) -> dict[tuple[str, int], list[float]]:
    return {
        ("sync_sgd", 2): values("sync|2", 100.0, 1.0, 1.0),
        ("sync_sgd", 8): values("sync|8", 125.0, 1.0, 3.0),
        ("pseudo_sync", 2): values("pseudo|2", 100.0, 1.0, 1.0),
        ("pseudo_sync", 8): values("pseudo|8", pseudo_8, 1.0, 3.0),
    }


def efficiency(train: dict, algorithm: str) -> list[float]:
    """Per seed: time per step at 2 workers over time per step at 8 (100 steps each)."""
    return [
        (low / 100) / (high / 100)
        for low, high in zip(train[(algorithm, 2)], train[(algorithm, 8)], strict=True)
    ]


def test_pseudo_sync_scales_better_with_noise_is_a_paired_t_test_on_the_efficiencies() -> None:
    train = noisy_scaling(105.0)
    result = verdict(SCALES, scaling_frame(train))
    assert result.holds is True and result.verdict == "holds"
    (c,) = result.comparisons
    pseudo, sync = efficiency(train, "pseudo_sync"), efficiency(train, "sync_sgd")
    assert_paired(c, pseudo, sync)
    hand = paired_by_hand(pseudo, sync)
    assert 0.14 < hand["estimate"] < 0.16  # about 100/105 - 100/125
    (line,) = result.details
    assert line.startswith(
        f"efficiency, 2 to 8 workers: holds: pseudo_sync {100 * statistics.mean(pseudo):.1f}% vs "
        f"sync_sgd {100 * statistics.mean(sync):.1f}% (paired, n=8): difference "
        f"{100 * hand['estimate']:+.1f} points, 95% CI [{100 * hand['low']:+.1f} points, "
        f"{100 * hand['high']:+.1f} points]"
    )


def test_pseudo_sync_scales_better_does_not_hold_when_it_scales_worse() -> None:
    train = noisy_scaling(150.0)
    result = verdict(SCALES, scaling_frame(train))
    assert result.holds is False
    pseudo, sync = efficiency(train, "pseudo_sync"), efficiency(train, "sync_sgd")
    assert_paired(result.comparisons[0], pseudo, sync)


def test_pseudo_sync_scales_better_missing_data() -> None:
    train = {("sync_sgd", 2): [100.0, 100.0], ("sync_sgd", 8): [125.0, 125.0]}
    train[("pseudo_sync", 2)] = [100.0, 100.0]
    result = verdict(SCALES, scaling_frame(train))
    assert_undecided(result, "no pseudo_sync runs at two worker counts")


# --- ClaimResult.as_dict and claims.json --------------------------------------------------------

KEYS = {"name", "text", "verdict", "evidence", "test", "comparisons"}
DECIDING = {"line", "a", "b", "kind", "unit", "test", "paired", "n", "estimate", "low", "high"}
DECIDING |= {"level", "threshold", "mdd", "margin", "n_needed", "why", "sign"}


def test_as_dict_of_a_holding_claim_rests_on_its_weakest_comparison() -> None:
    frame, sides = hetero(60.0, 95.0)
    result = verdict(FASTER, frame)
    assert result.holds is True
    out = result.as_dict()
    assert set(out) == KEYS | {"deciding"} and set(out["deciding"]) == DECIDING
    assert (out["name"], out["verdict"], out["comparisons"]) == (FASTER, "holds", 2)
    assert (out["text"], out["evidence"], out["test"]) == (
        result.text,
        result.evidence,
        result.test,
    )
    weakest = max(result.comparisons, key=lambda c: c.p)
    assert weakest.b == "losp"  # 5 s sooner is a weaker case than 40 s
    d = out["deciding"]
    hand = paired_by_hand(sides["sync"], sides["losp"])
    assert (d["a"], d["b"], d["kind"], d["unit"], d["test"]) == (
        "sync_sgd",
        "losp",
        "diff",
        "s",
        "paired t",
    )
    assert (d["paired"], d["n"], d["level"], d["threshold"]) == (True, 8, 0.95, 0.0)
    assert d["estimate"] == pytest.approx(hand["estimate"])
    assert (d["low"], d["high"]) == pytest.approx((hand["low"], hand["high"]))
    assert d["mdd"] == pytest.approx(hand["mdd"])
    assert d["margin"] == pytest.approx(0.05 * statistics.mean(sides["losp"]))
    assert d["line"] == weakest.verdict_text() and d["line"].startswith("holds: sync_sgd 100 s")
    assert d["why"] == ""
    json.dumps(out, allow_nan=False)


def test_as_dict_of_a_claim_that_cannot_tell_shows_the_first_test_made() -> None:
    """Workers 2: one pseudo-sync seed (no test made); workers 4: a test made that cannot tell:
    that one is shown, though it comes second."""
    sync2, sync4 = values("sync|2", 100.0, 1.0, 2.0), values("sync|4", 100.0, 1.0, 2.0)
    pseudo4 = values("pseudo|4", 100.0, 1.0, 2.0)
    frame = target_frame(
        {
            ("sync_sgd", 1, cfg({"workers": 2})): sync2,
            ("pseudo_sync", 1, cfg({"workers": 2})): [60.0],
            ("sync_sgd", 1, cfg({"workers": 4})): sync4,
            ("pseudo_sync", 1, cfg({"workers": 4})): pseudo4,
        }
    )
    result = verdict(PSEUDO_FASTER, frame)
    assert result.holds is None
    first, second = result.comparisons
    assert first.why == "fewer than 2 seeds on both sides" and second.why == ""
    d = result.as_dict()["deciding"]
    assert d["line"] == second.verdict_text() and d["n"] == 8 and d["why"] == ""
    hand = paired_by_hand(sync4, pseudo4)
    assert d["n_needed"] == n_needed_by_hand(hand["sd"], 0.05 * statistics.mean(pseudo4))
    assert d["line"].startswith("cannot tell: ")
    json.dumps(result.as_dict(), allow_nan=False)


def test_as_dict_without_a_test_made_has_no_nan() -> None:
    frame = target_frame(
        {("sync_sgd", 1, cfg({})): [100.0, 101.0, 99.0], ("pseudo_sync", 1, cfg({})): [60.0]}
    )
    result = verdict(PSEUDO_FASTER, frame)
    d = result.as_dict()["deciding"]
    assert d["why"] == "fewer than 2 seeds on both sides"
    assert (d["low"], d["high"], d["mdd"]) == (None, None, None)
    assert d["estimate"] == pytest.approx(100.0 - 60.0)
    assert "NaN" not in json.dumps(result.as_dict(), allow_nan=False)


def test_as_dict_of_a_claim_that_does_not_hold_shows_the_first_that_does_not() -> None:
    frame, _ = pseudo_times(120.0)
    result = verdict(PSEUDO_FASTER, frame)
    d = result.as_dict()["deciding"]
    assert result.holds is False
    assert d["line"].startswith("does not hold: sync_sgd 100 s vs pseudo_sync 120 s")


def test_as_dict_of_missing_data_has_no_deciding_comparison() -> None:
    result = verdict(SCALES, scaling_frame({("sync_sgd", 2): [1.0, 1.0]}))
    out = result.as_dict()
    assert set(out) == KEYS and out["comparisons"] == 0 and out["verdict"] == "cannot tell"


def test_as_dict_of_a_modeled_claim_says_by_the_model() -> None:
    train = {(a, m): [100.0 + (m == 8) * extra] * 4 for a, extra in (("sync_sgd", 25),
             ("pseudo_sync", 5)) for m in (2, 8)}  # fmt: skip
    out = verdict(SCALES, scaling_frame(train)).as_dict()
    assert out["verdict"] == "holds (by the model)"
    d = out["deciding"]
    assert d["test"] == "model" and d["low"] == d["high"] == d["estimate"]
    json.dumps(out, allow_nan=False)


def test_write_claims_writes_claims_json_beside_claims_md(tmp_path: Path) -> None:
    results = [
        verdict(FASTER, hetero(60.0, 90.0)[0]),
        verdict(SCALES, scaling_frame({("sync_sgd", 2): [1.0, 1.0]})),
        verdict(PSEUDO_FASTER, pseudo_times(120.0)[0]),
    ]
    path = write_claims(results, tmp_path / "out", "T")
    assert path == tmp_path / "out" / "claims.md"
    assert path.read_text().startswith("# Claims: T\n")
    data = json.loads((tmp_path / "out" / "claims.json").read_text())
    assert data == {"title": "T", "claims": [r.as_dict() for r in results]}
    assert [c["verdict"] for c in data["claims"]] == ["holds", "cannot tell", "does not hold"]


def test_every_comparison_of_these_claims_is_json_safe() -> None:
    """Whatever the comparison shown, claims.json can be written (no NaN reaches it)."""
    frames = [
        (LOSES, local_taus(0.90, 0.90, own=0.01)[0]),
        (EQUALS, ideal_pair(0.0)),
        (SOONER, losp_osp([(NEVER, 1.0)] * SEEDS, [(NEVER, 1.0)] * SEEDS)),
        (NONIID, partitions(0.9, 0.8)[0]),
    ]
    for name, frame in frames:
        out = verdict(name, frame).as_dict()
        text = json.dumps(out, allow_nan=False)
        assert json.loads(text) == out
        assert not any(
            isinstance(v, float) and np.isnan(v) for v in out.get("deciding", {}).values()
        )


# --- runs that do not record a key the claims filter on -----------------------------------------

# A run without compute.slowdown / partition.name (per_run: NaN) counts as equal workers / iid.


def test_losp_sooner_does_not_count_runs_without_a_slowdown_as_heterogeneous() -> None:
    frame = target_frame(
        {
            ("losp", 2, cfg({})): values("losp|1", 60.0, 1.0, 2.0),
            ("osp", 2, cfg({})): values("osp|1", 80.0, 1.0, 2.0),
        }
    )
    result = verdict(SOONER, frame)
    assert_undecided(result, "no osp run with heterogeneous workers")


def test_osp_equals_losp_takes_runs_without_a_slowdown_as_equal_workers() -> None:
    osp = [float(v) for v in 0.90 + 0.005 * seed_effect(SEEDS)]
    ideal = cfg({"network.name": "ideal"})
    result = verdict(EQUALS, acc_frame({("osp", 2, ideal): osp, ("losp", 2, ideal): osp}))
    assert result.holds is True, result.evidence


def test_sync_slower_control_takes_runs_without_a_partition() -> None:
    slow = cfg({"network.name": "ethernet1g"})
    frame = target_frame(
        {
            ("sync_sgd", 1, slow): values("sync|1g", 100.0, 1.0, 2.0),
            ("local_sgd", 4, slow): values("local|4|1g", 60.0, 1.0, 2.0),
        }
    )
    result = verdict(SYNC_SLOWER, frame)
    assert result.holds is True, result.evidence


# --- overlap_above_sync_at_small_tau --------------------------------------------------------------

ABOVE_SYNC = "overlap_above_sync_at_small_tau"


def overlap_and_sync(gaps: dict[tuple[str, int], float]) -> tuple[pd.DataFrame, dict]:
    """Overlap-Local-SGD at (partition, tau) `gaps`' keys, `gap` above sync SGD (0.80 on each
    partition), 8 seeds with a shared seed effect and each side's own noise."""
    sides, seen = {}, {}
    for (partition, tau), gap in gaps.items():
        where = cfg({"partition.name": partition})
        sync = values(f"sync|{partition}", 0.80, 0.005, 0.003)
        sides[("sync_sgd", 1, where)] = sync
        ours = values(f"overlap|{partition}|{tau}", 0.80 + gap, 0.005, 0.003)
        sides[("overlap_local_sgd", tau, where)] = ours
        seen[(partition, tau)] = (ours, sync)
    return acc_frame(sides), seen


def test_overlap_above_sync_holds_in_every_partition_and_small_tau() -> None:
    frame, seen = overlap_and_sync(
        {("iid", 1): 0.02, ("iid", 2): 0.02, ("noniid", 1): 0.03, ("noniid", 2): 0.03}
    )
    result = verdict(ABOVE_SYNC, frame)
    assert result.holds is True and len(result.comparisons) == 4
    for c, (ours, sync) in zip(result.comparisons, seen.values(), strict=True):
        assert_paired(c, ours, sync)
    assert result.details[0].startswith("partition=iid, tau=1: holds: overlap_local_sgd 0.820")
    assert all("vs sync_sgd 0.800 (paired, n=8)" in line for line in result.details)


def test_overlap_above_sync_does_not_hold_when_below_in_one_cell() -> None:
    frame, _ = overlap_and_sync(
        {("iid", 1): 0.02, ("iid", 2): 0.02, ("noniid", 1): -0.03, ("noniid", 2): 0.03}
    )
    result = verdict(ABOVE_SYNC, frame)
    assert result.holds is False
    assert any(line.startswith("partition=noniid, tau=1: does not hold") for line in result.details)


def test_overlap_above_sync_looks_at_tau_1_and_2_only() -> None:
    frame, _ = overlap_and_sync({("iid", 1): 0.02, ("iid", 2): 0.02, ("iid", 4): -0.05})
    result = verdict(ABOVE_SYNC, frame)
    assert result.holds is True and len(result.comparisons) == 2
    assert not any("tau=4" in line for line in result.details)


def test_overlap_above_sync_missing_data() -> None:
    frame, _ = overlap_and_sync({("iid", 4): 0.02})
    result = verdict(ABOVE_SYNC, frame)
    assert result.holds is None and result.evidence == "no overlap_local_sgd run at tau <= 2"
    no_sync = acc_frame({("overlap_local_sgd", 1, cfg({"partition.name": "iid"})): [0.9, 0.91]})
    assert verdict(ABOVE_SYNC, no_sync).holds is None
    assert verdict(ABOVE_SYNC, no_sync).evidence == "no completed or diverged sync_sgd run"
