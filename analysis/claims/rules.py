"""What every claim is made of: the registry (`CLAIMS`, `claim`), the result and how it is
written (`ClaimResult`, `claims.md`, `claims.json`), the method every claims.md states
(`METHOD`), the margins the claims' texts name, and the comparisons they are built from:
`each_pair` and its tests, times to a target with their lower bounds, and `PairClaim`, the
definition of a claim that compares two algorithms' methods pair by pair in every cell, which
one evaluator (`pairwise`) checks. The claims themselves: analysis/claims/checks.py and
analysis/claims/verdicts.py; analysis/claims/ gathers them."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from analysis.claims.runs import Cell, cells, per_run
from analysis.stats import (
    ALPHA,
    EFFECT_ACC,
    EFFECT_REL,
    POWER,
    VERDICTS,
    Comparison,
    Side,
    _mean,
    _value,
    combine,
    compare,
    corrected,
    deciding,
)
from experiments.errors import UserError

OVERLAP, COCOD, EAMSGD = "overlap_local_sgd", "cocod_sgd", "eamsgd"
SYNC, POWERSGD, PSEUDO = "sync_sgd", "powersgd", "pseudo_sync"
OSP, LOSP = "osp", "losp"
LOCAL_METHODS = ("local_sgd", OVERLAP)
LOCAL, DILOCO, STREAMING = "local_sgd", "diloco", "streaming_diloco"
# experiment=low_comm: methods whose averages overlap inner steps, and those that block on them.
OVERLAPPING = (STREAMING, OVERLAP, COCOD)
BLOCKING = (LOCAL, DILOCO)
# "much lower": CoCoD-SGD's accuracy this far below Overlap-Local-SGD's counts as a breakdown.
COLLAPSE_MARGIN = 0.1
# "far below": Overlap-Local-SGD's comm/compute ratio under this fraction of sync SGD's.
FAR_BELOW = 0.2
# "comparable": accuracies within 1.5 points. The suite's choice, set before the verdicts' runs:
# no seed paper gives a number (pseudo-synchronous SGD's abstract says "comparable accuracy"),
# so every claim that uses it also states its verdict at OTHER_MARGINS (docs/statistics.md).
COMPARABLE = 0.015
OTHER_MARGINS = (0.01, 0.02)
# "far less peak bandwidth": Streaming DiLoCo's largest collective under this fraction of
# DiLoCo's (the paper's 1/P at P = 2 fragments, with room for a split at tensor boundaries).
FAR_LESS_PEAK = 0.6
# "equal bytes per step": two methods' mean bytes per step within this fraction of each other
# (the overlapping methods' finish() sends one more average than the rounds).
EQUAL_BYTES = 0.1

METHOD = (
    f"Each claim is tested at alpha = {ALPHA:g} on the completed and diverged runs of this "
    "report, paired by seed: every method runs the same seeds, and a seed fixes the data "
    "order, the partition and the initial model, so each comparison is made on the per-seed "
    "differences (analysis/stats/). n = seeds on both sides; a side is one method under one "
    "configuration (runs that differ in anything but the seed are never pooled; a tau-less "
    "method counts once per seed and meets the others at every tau). Differences of means: "
    "the paired t-test with its 95% confidence interval; where the differences have no spread, "
    "the exact sign-flip test (it cannot reach alpha below n = 6); where the sides do not pair, "
    "Welch's t-test (an exact permutation test where a side has no spread). Each test states "
    f"its minimum detectable difference (MDD) at {POWER:.0%} power; where it cannot tell and "
    "the MDD exceeds the claim's margin (accuracy "
    f"{EFFECT_ACC:g}, times and bytes {EFFECT_REL:.0%} of the reference), it says which n "
    "would reach it. Ratios of means: percentile bootstrap (seeds resampled jointly) with its "
    "95% interval. A comparison holds when the whole interval lies on the claimed side of its "
    "threshold, does not hold when it lies wholly on the other side, and cannot tell when it "
    "straddles the threshold or a side has fewer than 2 runs. Comparable accuracy is an "
    "equivalence test (paired TOST at alpha: the 90% interval of the difference inside "
    "+-margin). A quantity the timing model fixes, the same on every seed of both sides, is "
    'reported "by the model", not tested. A diverged run counts as accuracy 0 (below every '
    "accuracy); times and ratios use completed runs only. A claim over several taus or "
    "conditions holds if every comparison holds (an intersection-union test, no correction "
    "needed), does not hold if one does not after Holm's correction over the claim's "
    "comparisons, and cannot tell otherwise. A time to a target accuracy of a run that never "
    "reached it is at least its training time: that lower bound stands in only where it makes "
    "the test conservative. A comparison of accuracies or times to accuracy cannot tell when "
    "more than one run in eight of a side did not converge (analysis/runs/convergence.py); the "
    "test is then shown beside it ('tested regardless'), outside Holm's family, and fewer "
    "flagged runs are named under a test that decides."
)


@dataclass(frozen=True)
class ClaimResult:
    """One checked claim: `holds` None means the runs cannot tell; `test` names the statistics
    used; `details` holds one line per tau or condition."""

    name: str
    text: str
    holds: bool | None
    evidence: str
    test: str = ""
    details: tuple[str, ...] = field(default_factory=tuple)
    comparisons: tuple[Comparison, ...] = field(default_factory=tuple, compare=False)

    @property
    def verdict(self) -> str:
        """ "holds", "does not hold", "cannot tell"; "(by the model)" when every comparison
        behind it was a modeled quantity's (`analysis.stats`)."""
        model = bool(self.comparisons) and all(c.test == "model" for c in self.comparisons)
        return VERDICTS[self.holds] + (" (by the model)" if model else "")

    def as_dict(self) -> dict:
        """The claim for claims.json: its verdict and the comparison it rests on
        (`analysis.stats.deciding`): effect, interval, n, MDD, the n needed."""
        shown = deciding(self.comparisons, self.holds)
        out = {
            "name": self.name,
            "text": self.text,
            "verdict": self.verdict,
            "evidence": self.evidence,
            "test": self.test,
            "comparisons": len(self.comparisons),
        }
        if shown is not None:
            n = shown.n or min(shown.n_a, shown.n_b)
            out["deciding"] = {
                "line": shown.verdict_text(),
                "a": shown.a,
                "b": shown.b,
                "kind": shown.kind,
                "unit": shown.unit,
                "test": shown.test,
                "paired": shown.paired,
                "n": n,
                "estimate": _number(shown.estimate),
                "low": _number(shown.low),
                "high": _number(shown.high),
                "level": shown.level,
                "threshold": shown.threshold,
                "mdd": _number(shown.mdd),
                "margin": _number(shown.margin),
                "n_needed": shown.n_needed,
                "why": shown.why,
                "sign": shown.sign,
            }
        return out

    def line(self) -> str:
        """ "holds: <text> (<name>). <evidence>" on one line."""
        test = f" Test: {self.test}." if self.test else ""
        return f"{self.verdict}: {self.text} ({self.name}). {self.evidence}.{test}"


Claim = Callable[[pd.DataFrame, dict], ClaimResult]
CLAIMS: dict[str, Claim] = {}
#: Claim name -> the algorithms it compares, where the claim names them (`claim(methods=...)`,
#: every PairClaim): a rate check (analysis/reproduce/robustness.py) tests a claim only at the
#: rate sets that change one of them.
CLAIM_METHODS: dict[str, frozenset[str]] = {}
#: The claims that compare an algorithm with itself under two names (OSP and LOSP on the ideal
#: network: a negative control): tested at other rates only where their methods share one.
IDENTITIES: set[str] = set()


def claim(
    name: str, text: str, test: str, methods: Sequence[str] = (), identity: bool = False
) -> Callable[[Callable], Claim]:
    """Register `check(runs, report) -> (holds, evidence, details)` as the claim `name` of
    `text`, tested by `test`; `runs` is the frame of `per_run`. `methods`: the algorithms it
    compares (CLAIM_METHODS; none given: unknown); `identity`: IDENTITIES."""
    if methods:
        CLAIM_METHODS[name] = frozenset(methods)
    if identity:
        IDENTITIES.add(name)

    def register(check: Callable[[pd.DataFrame, dict], tuple]) -> Claim:
        def run(summaries: pd.DataFrame, report: dict) -> ClaimResult:
            runs, node = per_run(summaries), dict(report or {})
            (holds, evidence, details), made = corrected(lambda: check(runs, node))
            return ClaimResult(name, text, holds, evidence, test, tuple(details), tuple(made))

        run.__name__, run.__doc__ = check.__name__, f"{text}. {check.__doc__ or ''}".strip()
        CLAIMS[name] = run
        return run

    return register


def check_claims(
    summaries: pd.DataFrame, report: Mapping[str, Any], names: Iterable[str] | None = None
) -> list[ClaimResult]:
    """Check the claims `names` (default: `report["claims"]`) in that order."""
    if names is None:
        names = report.get("claims") or ()
    names = [names] if isinstance(names, str) else list(names)
    validate_claims(names)
    return [CLAIMS[name](summaries, dict(report)) for name in names]


def validate_claims(names: Iterable[str]) -> None:
    """A UserError naming every name that is not in `CLAIMS`."""
    unknown = [name for name in names if name not in CLAIMS]
    if unknown:
        known = ", ".join(sorted(CLAIMS))
        raise UserError(f"unknown claim(s) in report.claims: {', '.join(unknown)} (known: {known})")


def claims_markdown(results: Sequence[ClaimResult], title: str | None = None) -> str:
    """`claims.md`: a heading, the method, then per claim its verdict, text, evidence and test,
    and one sub-item per tau or condition."""
    lines = [f"# Claims: {title}" if title else "# Claims", "", METHOD, ""]
    if not results:
        lines.append("No claims listed in the preset's report node.")
    for r in results:
        test = f" Test: {r.test}." if r.test else ""
        lines.append(f"- **{r.verdict}**: {r.text} (`{r.name}`). {r.evidence}.{test}")
        lines += [f"  - {detail}" for detail in r.details]
    return "\n".join(lines)


def write_claims(
    results: Sequence[ClaimResult], out_dir: str | Path, title: str | None = None
) -> Path:
    """Write `claims.md` into `out_dir`, and `claims.json` beside it (`ClaimResult.as_dict`
    per claim: what results/README.md is made of, analysis/reports/verdict_page.py)."""
    from experiments.store.records import write_text_atomic

    path = Path(out_dir) / "claims.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    # each file whole or not at all, wherever it is called from (issue 50)
    write_text_atomic(path, claims_markdown(results, title) + "\n")
    data = {"title": title, "claims": [r.as_dict() for r in results]}
    write_text_atomic(
        path.parent / "claims.json", json.dumps(data, indent=1, allow_nan=False) + "\n"
    )
    return path


def _number(value: float | None) -> float | None:
    """A float for JSON: None for NaN (JSON has no NaN)."""
    return None if value is None or math.isnan(value) else float(value)


# --- comparisons ---------------------------------------------------------------------------------


def _accuracies(cell: Cell, a: str, b: str) -> tuple[str, Side, str, Side]:
    """The first four arguments of an accuracy test of `a` against `b` in `cell`: each side's
    name (its diverged runs noted: they count as accuracy 0) and its final accuracies."""

    def named(method: str) -> str:
        diverged, runs = cell.diverged(method)
        return f"{method} ({diverged}/{runs} diverged, as 0)" if diverged else method

    return named(a), cell.values(a, "acc"), named(b), cell.values(b, "acc")


def _worst_first(comparisons: Sequence[Comparison]) -> Comparison:
    """The comparison that decides a combination: the first that does not hold, else the first
    that cannot tell, else the first."""
    for wanted in (False, None):
        for c in comparisons:
            if c.holds is wanted:
                return c
    return comparisons[0]


def _summary(verdicts: Sequence[bool | None], what: str = "taus") -> str:
    """ "4 taus: holds 3, cannot tell 1"."""
    counts = {v: sum(1 for x in verdicts if x is v) for v in (True, False, None)}
    parts = [f"{VERDICTS[v]} {counts[v]}" for v in (True, False, None) if counts[v]]
    if not verdicts:
        return f"no {what}"
    name = what.removesuffix("s") if len(verdicts) == 1 else what
    return f"{len(verdicts)} {name}: " + ", ".join(parts)


def _cell_line(
    cell: Cell, shown: Comparison, verdict: bool | None, others: str = "", unit: str = "acc"
) -> str:
    return f"{cell.name}: {VERDICTS[verdict]}: {shown.text(unit)}{others}"


def _others(comparisons: Sequence[Comparison]) -> str:
    """ " [4 comparisons: holds 3, cannot tell 1]" when a cell made more than one."""
    if len(comparisons) < 2:
        return ""
    return " [" + _summary([c.holds for c in comparisons], "comparisons") + "]"


def each_pair(
    cell_list: Sequence[Cell],
    first: str | Sequence[str],
    second: str | Sequence[str],
    test: Callable[[Cell, str, str], tuple[bool | None, str]],
    missing: bool = True,
    absent: str = "",
) -> tuple[list[bool | None], list[str]]:
    """In each cell, each method of the algorithm(s) `first` against each of `second`:
    `test(cell, a, b) -> (verdict, text)`. The verdicts, and one line per pair, "<cell>:
    <text>". A cell without one of the two: "cannot tell: no <algorithm><absent>" (`missing`),
    or nothing (not `missing`)."""
    verdicts, details = [], []
    for cell in cell_list:
        mine, theirs = cell.methods(first), cell.methods(second)
        if missing and (not mine or not theirs):
            which = first if not mine else second
            which = which if isinstance(which, str) else " or ".join(which)
            verdicts.append(None)
            details.append(f"{cell.name}: cannot tell: no {which}{absent}")
            continue
        for a in mine:
            for b in theirs:
                verdict, text = test(cell, a, b)
                verdicts.append(verdict)
                details.append(f"{cell.name}: {text}")
    return verdicts, details


def sooner(cell: Cell, early: str, late: str) -> tuple[bool | None, str]:
    """`_sooner` as an `each_pair` test: its verdict, and the line with the verdict first."""
    verdict, line = _sooner(cell, early, late)
    return verdict, f"{VERDICTS[verdict]}: {line}"


def more_accurate(cell: Cell, better: str, worse: str) -> tuple[bool | None, str]:
    """An `each_pair` test: `better`'s final accuracy above `worse`'s (paired by seed; cannot
    tell where more than one run in eight of a side did not converge)."""
    c = compare(*_accuracies(cell, better, worse))
    return c.holds, c.verdict_text()


def _missing(name: str, what: str = "run") -> tuple[None, str, list[str]]:
    return None, f"no completed or diverged {name} {what}", []


def _absent(runs: pd.DataFrame, names: Iterable[str], what: str = "run") -> str | None:
    """Why a claim over `runs` cannot tell when one of the algorithms `names` has no run there
    (the first such, in order), else None."""
    for name in names:
        if not (runs["algorithm"] == name).any():
            return _missing(name, what)[1]
    return None


# --- claims that compare pair by pair -----------------------------------------------------------


@dataclass(frozen=True)
class PairClaim:
    """A claim that, in every cell of its runs, tests each method of the algorithm(s) `first`
    against each of `second` with `pair` (an `each_pair` test) and holds when every pair holds
    (`combine`): most of the papers' claims, written as data for `pairwise` to check."""

    name: str
    text: str
    test: str  # the statistics, as claims.md names them
    why: str  # what exactly it compares (the claim's docstring)
    first: str | Sequence[str]
    second: str | Sequence[str]
    pair: Callable[[Cell, str, str], tuple[bool | None, str]]
    #: algorithms that must have a run among the report's runs, looked for in this order
    required: Sequence[str] = ()
    #: the runs it compares, or why it cannot tell (its evidence); all of them when None
    select: Callable[[pd.DataFrame], pd.DataFrame | str] | None = None
    by_tau: bool = True  # a cell per tau of the round-based methods, or per condition only
    what: str = "cells"  # what the evidence counts verdicts of
    #: the evidence's start, from the runs it compared
    prefix: Callable[[pd.DataFrame], str] | None = None
    note: str = ""  # the evidence's end: the margin in words
    missing: bool = True  # a cell without one of the two algorithms says so ...
    absent: str = ""  # ... with this after the algorithm's name
    identity: bool = False  # `first` and `second` are one algorithm by construction (IDENTITIES)


def pairwise(definition: PairClaim) -> Claim:
    """Register the claim `definition` in CLAIMS, checked by the one evaluator of them all."""
    d = definition

    def check(runs: pd.DataFrame, report: dict) -> tuple:
        why = _absent(runs, d.required)
        chosen = why or (d.select(runs) if d.select else runs)
        if isinstance(chosen, str):
            return None, chosen, []
        verdicts, details = each_pair(
            cells(chosen, d.by_tau), d.first, d.second, d.pair, d.missing, d.absent
        )
        start = d.prefix(chosen) if d.prefix else ""
        return combine(verdicts), start + _summary(verdicts, d.what) + d.note, details

    check.__name__, check.__doc__ = d.name, d.why
    methods = [*_algorithms(d.first), *_algorithms(d.second)]
    return claim(d.name, d.text, d.test, methods, d.identity)(check)


def _algorithms(value: str | Sequence[str]) -> list[str]:
    return [value] if isinstance(value, str) else list(value)


def _sooner(cell: Cell, early: str, late: str) -> tuple[bool | None, str]:
    """Does `early` reach the target before `late`? paired t-test of late's time to target
    minus early's above 0, with never-reached runs as lower bounds where that is conservative
    (see `overlapping_reach_target_sooner`)."""
    e_times, e_bounds, e_missed, e_runs = _target_times(cell, early)
    l_times, l_bounds, l_missed, l_runs = _target_times(cell, late)
    for name, runs in ((early, e_runs), (late, l_runs)):
        if not runs:
            return None, f"no completed {name} run with a time to target"
    if e_runs == e_missed and l_runs == l_missed:
        return None, f"no run of {early} or {late} reached the target"
    e_label = f"{early}{_missed_note(e_missed, e_runs)}"
    l_label = f"{late}{_missed_note(l_missed, l_runs)}"
    if not e_missed:  # early's times are exact: late's lower bounds only make "holds" harder
        c = compare(l_label, _joined(l_times, l_bounds), e_label, e_times)
        holds = c.holds if (c.holds is True or not l_missed) else None
    elif not l_missed:  # late's exact; early's lower bounds only make "does not hold" harder
        c = compare(l_label, l_times, e_label, _joined(e_times, e_bounds))
        holds = False if c.holds is False else None
    else:
        c = compare(l_label, _joined(l_times, l_bounds), e_label, _joined(e_times, e_bounds))
        holds = None
    text = c.text("s")
    if holds is None and c.holds is not None and not c.why:
        text += " (runs that never reached the target leave the order open)"
    return holds, text


def _mean_time(cell: Cell, method: str) -> float:
    """Mean time to target, never-reached runs at their training time (for ordering only)."""
    times, bounds, _, _ = _target_times(cell, method)
    return _mean(_joined(times, bounds)) if len(times) or len(bounds) else math.inf


def _target_times(cell: Cell, method: str) -> tuple[Side, Side, int, int]:
    """(times to target of the completed runs that reached it, training times of those that
    did not, how many did not, completed runs with a known outcome); the first two with their
    seeds (`Side`), so that `_joined` pairs them by seed."""
    mine = cell.runs[(cell.runs["method"] == method) & cell.runs["train_s"].notna()]
    mine = mine[mine["reached"].notna()]
    hit = mine["reached"].astype(bool)
    reached = mine[hit & mine["time_to_target"].notna()]
    missed = mine[~hit]
    # the convergence rule for times to an accuracy (docs/statistics.md "Convergence"), as
    # `Cell.values` applies it: carried by both parts so that `compare` gates on them
    unconverged, runs = cell.flagged(method, "time_to_target") or (0, 0)
    times = Side.of(reached["time_to_target"], method, unconverged, runs, _seeds(reached))
    bounds = Side.of(missed["train_s"], method, unconverged, runs, _seeds(missed))
    return times, bounds, int((~hit).sum()), len(mine)


def _seeds(rows: pd.DataFrame) -> np.ndarray | None:
    seeds = rows["seed"].to_numpy(float)
    return None if np.isnan(seeds).any() else seeds


def _joined(*sides: Side) -> Side:
    """Sides of one method joined, their seeds kept (None if any side has none)."""
    values = np.concatenate([np.asarray(s, float) for s in sides])
    seeds = None if any(s.seeds is None for s in sides) else sum((s.seeds for s in sides), ())
    first = sides[0]  # (every part carries the method's convergence flags)
    return Side.of(
        values, first.method, first.unconverged, first.runs, seeds, column="time_to_target"
    )


def _missed_note(missed: int, runs: int) -> str:
    return f" ({missed}/{runs} never reached it: training time, a lower bound)" if missed else ""


def _bytes_apart(cell: Cell, a: str, b: str) -> str | None:
    """Why `a` and `b` are not at equal bytes per step (means more than EQUAL_BYTES apart,
    relative to the larger), or None when they are, or when the runs do not say."""
    mean_a, mean_b = (
        _mean(cell.values(a, "bytes_per_step")),
        _mean(cell.values(b, "bytes_per_step")),
    )
    if math.isnan(mean_a) or math.isnan(mean_b) or max(mean_a, mean_b) <= 0:
        return None
    if abs(mean_a - mean_b) <= EQUAL_BYTES * max(mean_a, mean_b):
        return None
    return (
        f"not at equal bytes per step: {a} {_value(mean_a, 'bytes')}/step vs {b} "
        f"{_value(mean_b, 'bytes')}/step"
    )


def _exposed(cell: Cell, method: str, tau: float | None = None) -> Side:
    mine = cell.runs[cell.runs["method"] == method]
    if tau is not None:
        mine = mine[mine["tau"] == tau]
    mine = mine[mine["exposed_per_epoch"].notna()]
    seeds = mine["seed"].to_numpy(float)
    return Side.of(
        mine["exposed_per_epoch"].to_numpy(float),
        method,
        seeds=None if np.isnan(seeds).any() else seeds,
        column="exposed_per_epoch",
    )


def base_verdict(verdict: str) -> str:
    """A verdict less " (by the model)" (`ClaimResult.verdict`): at another rate set, a claim
    that holds where the timing model fixes its quantity (LOSP's bytes per step at another LOSP
    rate: no spread over the seeds) holds, the same verdict (the verdicts page, robustness)."""
    return verdict.removesuffix(" (by the model)")
