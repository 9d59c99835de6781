"""The convergence rule, case by case (issue 49 item 4; docs/statistics.md "Convergence"): a
comparison of accuracies or of times to an accuracy cannot tell on convergence only where more
than one run in eight of a side was flagged; the test is then made all the same and shown beside
the verdict, outside the claim's Holm family; fewer flags are named under a test that decides."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from analysis.claims.runs import Cell, per_run
from analysis.stats import (
    GATE_SHARE,
    Side,
    compare,
    convergence_gate,
    corrected,
    equivalent,
    ratio_below,
)

SEEDS = list(range(8))
A = [0.90, 0.91, 0.92, 0.90, 0.91, 0.93, 0.92, 0.91]
B = [0.88, 0.89, 0.90, 0.88, 0.89, 0.90, 0.90, 0.89]


def side(values, method: str, flagged: int, column: str = "acc") -> Side:
    return Side.of(values, method, flagged, len(values), SEEDS[: len(values)], column)


def test_the_share_is_one_run_in_eight():
    assert GATE_SHARE == 1 / 8
    assert convergence_gate(side(A, "a", 0), side(B, "b", 0)) == ("", "")
    gate, flagged = convergence_gate(side(A, "a", 1), side(B, "b", 0))
    assert (
        gate == "" and flagged == "; not converged: a 1 of 8 runs (one in eight or fewer: tested)"
    )
    gate, flagged = convergence_gate(side(A, "a", 2), side(B, "b", 1))
    assert gate == "not converged: cannot tell (a: 2 of 8 runs)"
    assert flagged.startswith("; not converged: b 1 of 8 runs")
    # at n = 3 one flagged run is a third of the side: over the share
    assert convergence_gate(side(A[:3], "a", 1), side(B[:3], "b", 0))[0]


def test_no_flag_decides_and_says_nothing_of_convergence():
    made = compare("a", side(A, "a", 0), "b", side(B, "b", 0))
    assert made.holds is True and made.why == "" and made.note == ""


def test_one_flag_in_eight_is_named_and_the_test_decides():
    plain = compare("a", side(A, "a", 0), "b", side(B, "b", 0))
    made = compare("a", side(A, "a", 1), "b", side(B, "b", 0))
    assert made.holds is True and made.why == ""
    assert (made.estimate, made.low, made.high, made.p) == (
        plain.estimate,
        plain.low,
        plain.high,
        plain.p,
    )
    assert made.verdict_text().endswith(
        "not converged: a 1 of 8 runs (one in eight or fewer: tested)"
    )


@pytest.mark.parametrize("column", ["acc", "time_to_target"])
def test_two_flags_in_eight_cannot_tell_and_show_the_test_beside(column):
    plain = compare("a", side(A, "a", 0, column), "b", side(B, "b", 0, column))
    gated = compare("a", side(A, "a", 2, column), "b", side(B, "b", 0, column))
    assert gated.holds is None and gated.p_against is None  # no verdict rests on it
    assert gated.why == "not converged: cannot tell (a: 2 of 8 runs); tested regardless: holds"
    assert (gated.estimate, gated.low, gated.high, gated.p) == (
        plain.estimate,
        plain.low,
        plain.high,
        plain.p,
    )
    text = gated.verdict_text()
    assert text.startswith("cannot tell: a ")
    assert "tested regardless: holds: difference" in text and "paired t p" in text


def test_equivalence_and_ratio_follow_the_same_rule():
    gated = equivalent("a", side(A, "a", 3), "b", side(B, "b", 0), margin=0.015)
    assert gated.holds is None and gated.why.endswith("tested regardless: does not hold")
    tested = equivalent("a", side(A, "a", 1), "b", side(B, "b", 0), margin=0.015)
    assert tested.holds is False and "one in eight or fewer" in tested.note
    times = ratio_below("a", side(A, "a", 2, "time_to_target"), "b", side(B, "b", 0), 1.2)
    assert times.holds is None and times.why.endswith("tested regardless: holds")
    assert not math.isnan(times.low)
    named = ratio_below("a", side(A, "a", 1, "time_to_target"), "b", side(B, "b", 0), 1.2)
    assert named.holds is True and named.verdict_text().endswith(
        "not converged: a 1 of 8 runs (one in eight or fewer: tested)"
    )


def test_a_gated_comparison_is_outside_the_claims_holm_family():
    """A claim of two comparisons: one that holds and one that does not (p of "does not hold"
    0.037). Holm over both demotes the second (0.037 > 0.05 / 2); with the first gated, the
    family is the second alone and its "does not hold" stands."""
    worse = [0.871, 0.871, 0.906, 0.866, 0.886, 0.891, 0.901, 0.879]

    def check(flagged: int):
        return lambda: [
            compare("a", side(A, "a", flagged), "b", side(B, "b", 0)),
            compare("c", side(worse, "c", 0), "b", side(B, "b", 0)),
        ]

    (held, demoted), _ = corrected(check(0))
    assert held.holds is True and 0.025 < demoted.p_against < 0.05
    assert demoted.holds is None and "not after Holm over 2 tests" in demoted.note
    (gated, against), made = corrected(check(4))
    assert gated.holds is None and gated.why.startswith("not converged")
    assert against.holds is False and "Holm" not in against.note
    assert len(made) == 2


def frame(flags: list[bool], budget: str = "steps") -> pd.DataFrame:
    n = len(flags)
    return pd.DataFrame(
        {
            "run_dir": [f"r{i}" for i in range(2 * n)],
            "summary.status": "completed",
            "algorithm.name": ["local_sgd"] * n + ["sync_sgd"] * n,
            "tau": 2,
            "seed": list(range(n)) * 2,
            "budget.kind": budget,
            "summary.final/test_acc": [0.9] * n + [0.8] * n,
            "metrics.converged": flags + [True] * n,
        }
    )


def test_the_sides_of_accuracies_and_times_carry_their_flags_unless_at_a_budget():
    cell = Cell("tau=2", per_run(frame([False, False, True, True, True, True, True, True])))
    acc = cell.values("local_sgd", "acc")
    assert (acc.unconverged, acc.runs) == (2, 8)
    assert cell.values("local_sgd", "acc", at_budget=True).unconverged == 0
    assert cell.values("local_sgd", "train_s").unconverged == 0  # not bound to convergence


def test_a_ratio_of_bytes_is_said_in_bytes_and_of_ratios_in_percent():
    """The deciding line of a ratio (claims.json's `line`, the replication's table) in the
    sides' own unit: bytes per step as bytes, not as a percentage of one."""
    sent = ratio_below(
        "losp",
        side([1.4e5, 1.5e5, 1.45e5], "losp", 0, "bytes_per_step"),
        "sync",
        side([7.0e5, 7.05e5, 7.1e5], "sync", 0, "bytes_per_step"),
        1.0,
    )
    assert sent.unit == "bytes" and sent.verdict_text().startswith("holds: losp 145 kB vs sync")
    shares = ratio_below("a", side([0.01, 0.02, 0.015], "a", 0, "ratio"), "b",
                         side([0.3, 0.35, 0.32], "b", 0, "ratio"), 0.5)  # fmt: skip
    assert shares.unit == "ratio" and "a 1.5% vs b" in shares.verdict_text()
    assert ratio_below("a", [1.0, 1.1], "b", [2.0, 2.1], 1.0).unit == "ratio"  # plain lists


def timed_frame(flags: list[bool], budget: str = "steps") -> pd.DataFrame:
    """Local SGD reaching the target at 2.0-2.7 s, Overlap-Local-SGD at 1.0-1.7 s (every run
    reached it), Local SGD's runs flagged not converged where `flags` is False."""
    n = len(flags)
    return pd.DataFrame(
        {
            "run_dir": [f"r{i}" for i in range(2 * n)],
            "summary.status": "completed",
            "algorithm.name": ["local_sgd"] * n + ["overlap_local_sgd"] * n,
            "tau": 2,
            "seed": list(range(n)) * 2,
            "budget.name": budget,
            "summary.final/test_acc": [0.9] * (2 * n),
            "summary.time/train_s": [5.0] * (2 * n),
            "summary.steps": 100,
            "metrics.converged": flags + [True] * n,
            "metrics.reached_target": [True] * (2 * n),
            "metrics.time_to_target_s": [2.0 + 0.1 * i for i in range(n)]
            + [1.0 + 0.1 * i + 0.01 * (i % 3) for i in range(n)],
        }
    )


@pytest.mark.parametrize(
    "flagged, budget, gated",
    [(0, "steps", False), (1, "steps", False), (3, "steps", True), (3, "time", False)],
)
def test_a_time_to_the_target_follows_the_rule_as_an_accuracy_does(flagged, budget, gated):
    """The pair claims' time test (`sooner`: Overlap-Local-SGD sooner than Local SGD): more than
    one run in eight of a side flagged -> cannot tell, the test shown beside it; one flag ->
    the test decides and names it; on a time budget no flag counts. Before, the time test built
    its sides without the flags and decided whatever they were (Figure 5 at fmnist: Local SGD
    with 3 of 8 runs flagged)."""
    from analysis.claims.rules import sooner

    flags = [False] * flagged + [True] * (8 - flagged)
    cell = Cell("tau=2", per_run(timed_frame(flags, budget)))
    verdict, line = sooner(cell, "overlap_local_sgd", "local_sgd")
    if gated:
        assert verdict is None, line
        assert "not converged: cannot tell (local_sgd: 3 of 8 runs); tested regardless: holds" in (
            line
        )
    else:
        assert verdict is True, line
        assert ("1 of 8 runs (one in eight or fewer: tested)" in line) == (flagged == 1), line
