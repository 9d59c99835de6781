"""The papers' claims, checked on the runs of a preset, with statistics.

A preset's `report.claims` lists names from `CLAIMS`. Each check takes the runs (one row per run:
`load_summaries` output, config + `summary.*` columns) and the report node, and returns a
`ClaimResult`: holds (True), does not hold (False) or cannot tell (None), one line of evidence
and one line per comparison it made (`details`).

The rules, written into every `claims.md` (`METHOD`):

- Sides. Only completed and diverged runs count. A side of a comparison is one method (the
  algorithm and the knobs that vary within it, e.g. `powersgd (rank=4)`) under one condition:
  like with like, so runs that differ in any other configuration key (`tau`, `compute.slowdown`,
  `workers`, `network.name`, ...: `analysis.compare`) are never compared or pooled across it. A
  tau-less method (`TAU_LESS`: sync SGD, PowerSGD, pseudo-sync) does not depend on `tau`, so its
  runs meet the round-based methods at every tau. n = the runs on a side.
- Tests (`analysis.stats`, which says each in full): paired by seed, since a seed gives every
  method the same data order, partition draw and initial model (tests/test_pairing.py): the
  paired t-test of the per-seed differences and its 95% interval; the exact sign-flip test
  where the differences have no spread (so that no "holds" rests on zero spread: it needs
  n >= 6); Welch's t-test (or an exact permutation test) where the sides do not pair. Each
  test states its minimum detectable difference at 80% power, and where it cannot tell, the n
  that would reach the claim's margin. Ratios of means: a percentile bootstrap (paired where
  the sides pair). A comparison holds when its interval lies wholly on the claimed side of its
  threshold, does not hold when wholly on the other, cannot tell otherwise (alpha = 0.05).
- Equivalence ("comparable accuracy"): paired TOST at alpha (the 90% interval of the
  difference inside +-margin).
- A quantity the timing model fixes, equal on every seed of both sides, is reported "by the
  model", not tested.
- Diverged runs rank below every accuracy: in an accuracy comparison a diverged run counts as
  accuracy 0 (so a method that diverges on some seeds has a low mean and a wide interval, and
  one whose runs all diverged loses to any that completed). Time and communication statistics
  use completed runs only (a diverged run stopped early). Divergence itself is an event, not a
  mean: "X diverges" is an observation (at least one run diverged), stated as such.
- Convergence. A comparison of accuracies (or of times to an accuracy) cannot tell ("not
  converged: cannot tell") when the runs of a side did not all converge
  (`analysis.convergence`): a run stopped while still improving says nothing about where the
  method ends. Bytes, peaks and time per step do not depend on it.
- No pseudo-replication: a tau-less method run at several taus (the same configuration but for
  a key it ignores) counts once per seed (`per_run` keeps one run per method, condition and
  seed).
- "At every tau" (and every condition): each cell as above, then combined: holds if every cell
  holds (an intersection-union test at alpha, which needs no correction), does not hold if one
  does not after Holm's correction over the claim's comparisons, cannot tell otherwise.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from analysis.compare import order_key, run_values, series_label, split_rows
from analysis.load import TAU_LESS
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
    equivalent,
    ratio_below,
    welch,
)
from experiments.errors import UserError

__all__ = ["ALPHA", "Comparison", "Side", "combine", "compare", "equivalent", "ratio_below"]
__all__ += ["welch", "CLAIMS", "ClaimResult", "check_claims", "per_run", "Cell", "cells"]

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
# "comparable": accuracies within 1.5 points (algorithms.md section 8, pseudo-synchronous SGD).
COMPARABLE = 0.015
# "far less peak bandwidth": Streaming DiLoCo's largest collective under this fraction of
# DiLoCo's (the paper's 1/P at P = 2 fragments, with room for a split at tensor boundaries).
FAR_LESS_PEAK = 0.6
# "equal bytes per step": two methods' mean bytes per step within this fraction of each other
# (the overlapping methods' finish() sends one more average than the rounds).
EQUAL_BYTES = 0.1
FINISHED = ("completed", "diverged")

METHOD = (
    f"Each claim is tested at alpha = {ALPHA:g} on the completed and diverged runs of this "
    "report, paired by seed: every method runs the same seeds, and a seed fixes the data "
    "order, the partition and the initial model, so each comparison is made on the per-seed "
    "differences (analysis/stats.py). n = seeds on both sides; a side is one method under one "
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
    "the test conservative. A comparison of accuracies or times to accuracy cannot tell when a "
    "side's runs did not all converge (analysis/convergence.py)."
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
            }
        return out

    def line(self) -> str:
        """ "holds: <text> (<name>). <evidence>" on one line."""
        test = f" Test: {self.test}." if self.test else ""
        return f"{self.verdict}: {self.text} ({self.name}). {self.evidence}.{test}"


Claim = Callable[[pd.DataFrame, dict], ClaimResult]
CLAIMS: dict[str, Claim] = {}


def claim(name: str, text: str, test: str) -> Callable[[Callable], Claim]:
    """Register `check(runs, report) -> (holds, evidence, details)` as the claim `name` of
    `text`, tested by `test`; `runs` is the frame of `per_run`."""

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
    per claim: what results/README.md is made of, analysis/verdict_page.py)."""
    path = Path(out_dir) / "claims.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(claims_markdown(results, title) + "\n")
    data = {"title": title, "claims": [r.as_dict() for r in results]}
    (path.parent / "claims.json").write_text(json.dumps(data, indent=1, allow_nan=False) + "\n")
    return path


def _number(value: float | None) -> float | None:
    """A float for JSON: None for NaN (JSON has no NaN)."""
    return None if value is None or math.isnan(value) else float(value)


# --- the runs, per side -------------------------------------------------------------------------


def per_run(summaries: pd.DataFrame) -> pd.DataFrame:
    """The finished runs in the few columns the claims use: `method` (the algorithm and its
    knobs that vary among the runs: `powersgd (rank=4)`), `algorithm`, `tau` (NaN for tau-less
    methods), `condition` (the other configuration keys that vary, `slowdown=one_slow`; "" when
    none) and `condition_order` (its sort key: networks fastest first), `seed`, `workers`,
    `slowdown` (`compute.slowdown` as text), `diverged`, `acc` (final
    test accuracy of completed runs, 0 for diverged ones: see the module docstring), `ratio`
    (comm/compute), `exposed_per_epoch`, `train_per_epoch` (NaN unless completed); `network`
    (`network.name`) and `bandwidth` (`network.bandwidth_gbps`); `peak` (bytes of the largest
    collective), `bytes_per_step`, `train_s` (final training time), `reached` (an evaluation at
    the report's target accuracy: the column `metrics.reached_target` that
    `analysis.report` adds) and `time_to_target` (`metrics.time_to_target_s`, the training
    time at the first such evaluation), all NaN unless completed; `converged`
    (`metrics.converged`, `analysis.convergence`; None when not known, and for a diverged
    run: its divergence decides)."""
    frame = summaries.drop_duplicates("run_dir") if "run_dir" in summaries.columns else summaries
    frame = frame.reset_index(drop=True)
    status = frame.get("summary.status", pd.Series("completed", index=frame.index))
    keep = status.isin(FINISHED).to_numpy()
    frame, status = frame[keep].reset_index(drop=True), status[keep].reset_index(drop=True)
    completed = status.eq("completed")

    def number(column: str) -> pd.Series:
        if column not in frame.columns:
            return pd.Series(math.nan, index=frame.index, dtype=float)
        return pd.to_numeric(frame[column], errors="coerce").astype(float)

    def text(column: str) -> pd.Series:
        if column not in frame.columns:
            return pd.Series(None, index=frame.index, dtype=object)
        return frame[column].map(_text)

    algorithm = text("algorithm.name")
    # The keys that keep the runs' configurations apart beyond (algorithm, tau), as the tables'
    # rows: a knob of one algorithm that varies names a method, any other key a condition.
    varying = split_rows(frame, ("algorithm.name", "tau")).added if len(frame) else []
    knobs = [c for c in varying if c.startswith("algorithm.")]
    conditions = [c for c in varying if not c.startswith("algorithm.")]
    values = {c: run_values(frame, c) for c in [*knobs, *conditions]}
    method = [
        None
        if a is None
        else series_label({"algorithm.name": a, **{c: values[c][i] for c in knobs}}, knobs)
        for i, a in enumerate(algorithm)
    ]
    condition = [
        series_label({c: values[c][i] for c in conditions}, conditions) if conditions else ""
        for i in range(len(frame))
    ]
    # conditions in the tables' order (numbers by value, networks fastest first), then by name
    condition_order = [
        (tuple(order_key(values[c][i]) for c in conditions), condition[i])
        for i in range(len(frame))
    ]
    epochs = number("summary.epochs").fillna(number("epochs"))
    epochs = epochs.where(epochs > 0)
    compute, exposed = number("summary.time/compute_s"), number("summary.time/comm_exposed_s")
    ratio = number("summary.comm/ratio").fillna((exposed / compute).where(compute > 0))
    acc = number("summary.final/test_acc").where(completed)
    steps = number("summary.steps")
    reached = frame.get("metrics.reached_target", pd.Series(None, index=frame.index, dtype=object))
    converged = frame.get("metrics.converged", pd.Series(None, index=frame.index, dtype=object))
    out = pd.DataFrame(
        {
            "method": method,
            "algorithm": algorithm,
            "tau": number("tau").where(~algorithm.isin(TAU_LESS)),
            "condition": condition,
            "condition_order": condition_order,
            "seed": number("seed"),
            "workers": number("workers"),
            "slowdown": text("compute.slowdown"),
            "diverged": status.eq("diverged"),
            "acc": acc.where(completed, 0.0),
            "ratio": ratio.where(completed),
            "exposed_per_epoch": (exposed / epochs).where(completed),
            "train_per_epoch": (number("summary.time/train_s") / epochs).where(completed),
            "network": text("network.name"),
            "partition": text("partition.name"),
            # a step's modeled or measured cost, for diverged runs too
            "step_time": (number("summary.time/train_s") / steps.where(steps > 0)),
            "bandwidth": number("network.bandwidth_gbps"),
            "peak": number("summary.comm/peak_bytes").where(completed),
            "bytes_per_step": (number("summary.comm/bytes") / steps.where(steps > 0)).where(
                completed
            ),
            "train_s": number("summary.time/train_s").where(completed),
            "reached": reached.map(_flag).where(completed),
            # None: not known (no evaluations), or diverged: a divergence is a result of its
            # own (accuracy 0 above), which a comparison can decide on
            "converged": converged.map(_flag).where(completed, None),
            "time_to_target": number("metrics.time_to_target_s").where(completed),
        }
    )
    return _one_per_seed(out).reset_index(drop=True)


def _one_per_seed(runs: pd.DataFrame) -> pd.DataFrame:
    """No pseudo-replication: a tau-less method's runs that differ only in `tau` (which it
    ignores: the same run again) count once per seed, the first kept."""
    tau_less = runs["tau"].isna() & runs["algorithm"].notna() & runs["seed"].notna()
    keys = runs[["method", "condition", "seed"]].astype(str).agg("|".join, axis=1)
    repeated = tau_less & keys.where(tau_less).duplicated(keep="first") & tau_less
    return runs[~repeated]


@dataclass(frozen=True)
class Cell:
    """The runs of one condition at one tau (`tau` None: every tau together), tau-less methods'
    runs included."""

    name: str
    runs: pd.DataFrame

    def methods(self, algorithms: str | Sequence[str]) -> list[str]:
        """The methods of these algorithms with runs here, in order."""
        wanted = {algorithms} if isinstance(algorithms, str) else set(algorithms)
        present = self.runs[self.runs["algorithm"].isin(wanted)]
        return sorted(present["method"].dropna().unique())

    def others(self, algorithms: str | Sequence[str]) -> list[str]:
        wanted = {algorithms} if isinstance(algorithms, str) else set(algorithms)
        rest = self.runs[~self.runs["algorithm"].isin(wanted)]
        return sorted(rest["method"].dropna().unique())

    def values(self, method: str, column: str, at_budget: bool = False) -> np.ndarray:
        """The method's values of `column` here, with their seeds (`Side`); for an accuracy or
        a time to it, marked with the runs that did not converge, so that a comparison of them
        cannot tell, unless the claim is about a fixed step budget (`at_budget`: what the
        runs reach in the steps they were given, converged or not)."""
        mine = self.runs[self.runs["method"] == method]
        known = mine[mine[column].notna()]
        values, seeds = known[column].to_numpy(float), known["seed"].to_numpy(float)
        seeds = None if np.isnan(seeds).any() else seeds
        if column not in CONVERGENCE_BOUND or at_budget:
            return Side.of(values, method, seeds=seeds, column=column)
        flags = mine["converged"].dropna().astype(bool)
        return Side.of(values, method, int((~flags).sum()), len(flags), seeds, column)

    def diverged(self, method: str) -> tuple[int, int]:
        """(diverged runs, runs) of a method here."""
        mine = self.runs[self.runs["method"] == method]
        return int(mine["diverged"].sum()), len(mine)


def cells(runs: pd.DataFrame, by_tau: bool = True) -> list[Cell]:
    """One cell per condition (and per tau of the round-based methods, when `by_tau`), in
    order. Without round-based runs, a condition is one cell."""
    out = []
    order = runs.groupby("condition")["condition_order"].first()
    for condition in sorted(runs["condition"].unique(), key=lambda c: order[c]):
        here = runs[runs["condition"] == condition]
        taus = sorted(here["tau"].dropna().unique()) if by_tau else []
        if not taus:
            out.append(Cell(condition or "all runs", here))
            continue
        for tau in taus:
            at = here[(here["tau"] == tau) | here["tau"].isna()]
            name = ", ".join(p for p in (condition, _tau(tau)) if p)
            out.append(Cell(name, at))
    return out


# --- statistics ---------------------------------------------------------------------------------


# The statistics that mean little unless the runs converged: a run stopped while still
# improving would have ended elsewhere. Bytes, peaks and time per step do not depend on it.
CONVERGENCE_BOUND = ("acc", "time_to_target")


def _tau(tau: float) -> str:
    return f"tau={int(tau)}" if float(tau).is_integer() else f"tau={tau:g}"


def _diverged_note(cell: Cell, method: str) -> str:
    diverged, runs = cell.diverged(method)
    return f" ({diverged}/{runs} diverged, as 0)" if diverged else ""


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
) -> tuple[list[bool | None], list[str]]:
    """In each cell, each method of the algorithm(s) `first` against each of `second`:
    `test(cell, a, b) -> (verdict, text)`. The verdicts, and one line per pair, "<cell>:
    <text>". A cell without one of the two: "cannot tell: no <algorithm>" (`missing`), or
    nothing (not `missing`)."""
    verdicts, details = [], []
    for cell in cell_list:
        mine, theirs = cell.methods(first), cell.methods(second)
        if missing and (not mine or not theirs):
            absent = first if not mine else second
            absent = absent if isinstance(absent, str) else " or ".join(absent)
            verdicts.append(None)
            details.append(f"{cell.name}: cannot tell: no {absent}")
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
    tell unless their runs converged)."""
    c = compare(
        f"{better}{_diverged_note(cell, better)}",
        cell.values(better, "acc"),
        f"{worse}{_diverged_note(cell, worse)}",
        cell.values(worse, "acc"),
    )
    return c.holds, c.verdict_text()


def _missing(name: str, what: str = "run") -> tuple[None, str, list[str]]:
    return None, f"no completed or diverged {name} {what}", []


# --- the claims ---------------------------------------------------------------------------------


def _best_or_worst(runs: pd.DataFrame, subject: str, best: bool) -> tuple:
    """Per cell: the subject's methods against every other method (subject above each for
    `best`, below each otherwise); the line shows the closest rival by mean."""
    if not (runs["algorithm"] == subject).any():
        return _missing(subject)
    verdicts, details = [], []
    for cell in cells(runs):
        mine, rivals = cell.methods(subject), cell.others(subject)
        if not mine or not rivals:
            verdicts.append(None)
            what = subject if not mine else "other method"
            details.append(f"{cell.name}: cannot tell: no {what}")
            continue
        comparisons = []
        for method in mine:
            # the closest rival first: the highest mean for "best", the lowest for "worst"
            ordered = sorted(rivals, key=lambda o: _mean(cell.values(o, "acc")), reverse=best)
            for other in ordered:
                sides = [
                    (f"{m}{_diverged_note(cell, m)}", cell.values(m, "acc"))
                    for m in ((method, other) if best else (other, method))
                ]
                comparisons.append(compare(*sides[0], *sides[1]))
        verdict = combine(c.holds for c in comparisons)
        shown = _worst_first(comparisons) if verdict is not True else comparisons[0]
        tail = _others(comparisons)
        verdicts.append(verdict)
        details.append(_cell_line(cell, shown, verdict, tail))
    return combine(verdicts), _summary(verdicts), details


@claim(
    "overlap_best_at_every_tau",
    "Overlap-Local-SGD has the best accuracy at every tau",
    "paired t-test of the accuracy difference to each other method, per tau",
)
def overlap_best_at_every_tau(runs: pd.DataFrame, report: dict) -> tuple:
    """At each tau, Overlap-Local-SGD's mean final accuracy above every other method's."""
    return _best_or_worst(runs, OVERLAP, best=True)


@claim(
    "eamsgd_worst",
    "EAMSGD is the worst method",
    "paired t-test of each other method's accuracy above EAMSGD's, per tau",
)
def eamsgd_worst(runs: pd.DataFrame, report: dict) -> tuple:
    """At each tau, EAMSGD's mean final accuracy below every other method's."""
    return _best_or_worst(runs, EAMSGD, best=False)


@claim(
    "cocod_diverges_at_large_tau_overlap_does_not",
    "CoCoD-SGD diverges at large tau in non-IID while Overlap-Local-SGD does not",
    "divergence observed (an event, not a mean); otherwise paired t-test of Overlap-Local-SGD's "
    f"accuracy more than {COLLAPSE_MARGIN:g} above CoCoD-SGD's",
)
def cocod_diverges_at_large_tau(runs: pd.DataFrame, report: dict) -> tuple:
    """At the largest tau of the round-based runs, per condition: Overlap-Local-SGD diverged on
    no run and CoCoD-SGD diverged on at least one, or (no divergence) its accuracy lies more
    than COLLAPSE_MARGIN below Overlap-Local-SGD's."""
    local = runs[runs["tau"].notna()]
    if local.empty:
        return None, "no round-based run with a tau", []
    tau = float(local["tau"].max())
    verdicts, details = [], []
    for cell in cells(runs[(runs["tau"] == tau) | runs["tau"].isna()]):
        cocods, overlaps = cell.methods(COCOD), cell.methods(OVERLAP)
        if not cocods or not overlaps:
            missing = COCOD if not cocods else OVERLAP
            verdicts.append(None)
            details.append(f"{cell.name}: cannot tell: no {missing} run at the largest tau")
            continue
        for cocod in cocods:
            for overlap in overlaps:
                verdict, line = _collapse(cell, cocod, overlap)
                verdicts.append(verdict)
                details.append(f"{cell.name}: {VERDICTS[verdict]}: {line}")
    if not verdicts:
        return None, f"no {COCOD} or {OVERLAP} run at the largest {_tau(tau)}", []
    return combine(verdicts), f"largest {_tau(tau)}; " + _summary(verdicts, "cells"), details


def _collapse(cell: Cell, cocod: str, overlap: str) -> tuple[bool | None, str]:
    (c_div, c_runs), (o_div, o_runs) = cell.diverged(cocod), cell.diverged(overlap)
    said = f"{cocod} {c_div}/{c_runs} diverged, {overlap} {o_div}/{o_runs} diverged"
    if c_runs < 2 or o_runs < 2:
        return None, f"{said}; n < 2 on a side"
    if o_div:
        return False, f"{said} (observed)"
    if c_div:
        return True, f"{said} (observed)"
    c = compare(
        overlap,
        cell.values(overlap, "acc"),
        cocod,
        cell.values(cocod, "acc"),
        threshold=COLLAPSE_MARGIN,
    )
    return c.holds, f"{said}; accuracy gap: {c.text()}"


@claim(
    "overlap_ratio_far_below_sync",
    "Overlap-Local-SGD's communication-to-computation ratio is far below sync SGD's",
    f"bootstrap of the ratio of mean comm/compute ratios against {FAR_BELOW:g}, per tau",
)
def overlap_ratio_far_below_sync(runs: pd.DataFrame, report: dict) -> tuple:
    """At every tau, Overlap-Local-SGD's mean final comm/ratio under FAR_BELOW x sync SGD's."""
    timed = runs[runs["ratio"].notna()]
    if not (timed["algorithm"] == SYNC).any():
        return _missing(SYNC, "run with a comm/compute ratio")
    if not (timed["algorithm"] == OVERLAP).any():
        return _missing(OVERLAP, "run with a comm/compute ratio")

    def far_below(cell: Cell, sync: str, overlap: str) -> tuple[bool | None, str]:
        c = ratio_below(
            overlap, cell.values(overlap, "ratio"), sync, cell.values(sync, "ratio"), FAR_BELOW
        )
        return c.holds, c.verdict_text("ratio")

    verdicts, details = each_pair(cells(timed), SYNC, OVERLAP, far_below)
    evidence = _summary(verdicts, "cells") + f"; far below = under {FAR_BELOW:g}x"
    return combine(verdicts), evidence, details


@claim(
    "powersgd_exposed_above_local_methods",
    "PowerSGD's exposed communication stays above the Local-SGD methods'",
    "paired t-test of each PowerSGD rank's exposed communication per epoch above each "
    "Local-SGD method's at each tau",
)
def powersgd_exposed_above_local(runs: pd.DataFrame, report: dict) -> tuple:
    """Exposed communication per epoch: every PowerSGD rank above every Local SGD and
    Overlap-Local-SGD setting, per condition."""
    timed = runs[runs["exposed_per_epoch"].notna()]
    if not (timed["algorithm"] == POWERSGD).any():
        return _missing(POWERSGD, "run with exposed communication")
    if not timed["algorithm"].isin(LOCAL_METHODS).any():
        return _missing(" or ".join(LOCAL_METHODS), "run with exposed communication")
    verdicts, details = [], []
    for cell in cells(timed, by_tau=False):
        powers = cell.methods(POWERSGD)
        locals_ = [
            (m, tau)
            for (m, tau), _ in cell.runs[cell.runs["algorithm"].isin(LOCAL_METHODS)].groupby(
                ["method", "tau"], dropna=False
            )
        ]
        if not powers or not locals_:
            verdicts.append(None)
            details.append(f"{cell.name}: cannot tell: no {POWERSGD if not powers else 'local'}")
            continue

        comparisons = []
        powers = sorted(powers, key=lambda p: _mean(_exposed(cell, p)))
        locals_ = sorted(locals_, key=lambda mt: -_mean(_exposed(cell, *mt)))
        for power in powers:
            for method, tau in locals_:
                name = f"{method} {_tau(tau)}" if pd.notna(tau) else method
                comparisons.append(
                    compare(power, _exposed(cell, power), name, _exposed(cell, method, tau))
                )
        verdict = combine(c.holds for c in comparisons)
        shown = _worst_first(comparisons) if verdict is not True else comparisons[0]
        tail = _others(comparisons)
        verdicts.append(verdict)
        details.append(_cell_line(cell, shown, verdict, tail, "s"))
    return combine(verdicts), _summary(verdicts, "conditions"), details


@claim(
    "losp_beats_osp",
    "LOSP reaches higher accuracy than OSP",
    "paired t-test of the accuracy difference, per tau and slowdown",
)
def losp_beats_osp(runs: pd.DataFrame, report: dict) -> tuple:
    """At every tau and condition (slowdown) where both ran, LOSP's mean final accuracy above
    OSP's."""
    for name in (OSP, LOSP):
        if not (runs["algorithm"] == name).any():
            return _missing(name)

    def higher(cell: Cell, losp: str, osp: str) -> tuple[bool | None, str]:
        c = compare(
            f"{losp}{_diverged_note(cell, losp)}",
            cell.values(losp, "acc"),
            f"{osp}{_diverged_note(cell, osp)}",
            cell.values(osp, "acc"),
        )
        return c.holds, c.verdict_text()

    verdicts, details = each_pair(cells(runs), LOSP, OSP, higher)
    return combine(verdicts), _summary(verdicts, "cells"), details


@claim(
    "osp_losp_faster_than_sync_under_heterogeneity",
    "OSP/LOSP reach the target accuracy sooner than sync SGD with heterogeneous workers (fast "
    "workers need not idle for slow ones)",
    "paired t-test of sync SGD's time to target above OSP's and LOSP's, per slowdown and tau; a "
    "run that never reached the target counts with its training time where that is "
    "conservative",
)
def osp_losp_faster_than_sync(runs: pd.DataFrame, report: dict) -> tuple:
    """Per heterogeneous `compute.slowdown` (anything but none) and tau: OSP's and LOSP's time
    to the target accuracy below sync SGD's (time per epoch alone would credit a method that
    trains fast to a worse model)."""
    timed = runs[runs["train_s"].notna() & runs["slowdown"].notna()]
    hetero = timed[~timed["slowdown"].isin(("none", "None"))]
    if hetero.empty:
        return (
            None,
            "no completed run with heterogeneous workers (compute.slowdown other than none)",
            [],
        )
    verdicts, details = each_pair(
        cells(hetero), SYNC, (OSP, LOSP), lambda cell, sync, fast: sooner(cell, fast, sync)
    )
    return combine(verdicts), _summary(verdicts, "cells"), details


@claim(
    "pseudo_sync_matches_sync",
    "Pseudo-synchronous SGD reaches accuracy comparable to synchronous SGD",
    f"equivalence (TOST, 90% CI within ±{COMPARABLE:g}) of the accuracy difference, per worker "
    "count",
)
def pseudo_sync_matches_sync(runs: pd.DataFrame, report: dict) -> tuple:
    """Mean final accuracies within COMPARABLE of each other (an equivalence test), at every
    condition (worker count) where both ran."""
    for name in (PSEUDO, SYNC):
        if not (runs["algorithm"] == name).any():
            return _missing(name)

    def comparable(cell: Cell, pseudo: str, sync: str) -> tuple[bool | None, str]:
        c = equivalent(
            f"{pseudo}{_diverged_note(cell, pseudo)}",
            cell.values(pseudo, "acc"),
            f"{sync}{_diverged_note(cell, sync)}",
            cell.values(sync, "acc"),
            COMPARABLE,
        )
        return c.holds, c.verdict_text()

    verdicts, details = each_pair(cells(runs, by_tau=False), PSEUDO, SYNC, comparable)
    evidence = _summary(verdicts, "conditions") + f"; comparable = within {COMPARABLE:g}"
    return combine(verdicts), evidence, details


# --- low-communication methods (experiment=low_comm) ---------------------------------------------
#
# The DiLoCo paper (Douillard et al. 2023, arXiv 2311.08105) and the Streaming DiLoCo paper
# (Douillard et al. 2025, arXiv 2501.18512). Section references marked [M] are recalled, not
# checked against the papers' text here (algorithms.md's convention).


@claim(
    "streaming_diloco_less_peak_same_accuracy",
    "Streaming DiLoCo needs far less peak bandwidth (bytes per collective) than DiLoCo for about "
    "the same final accuracy (Douillard et al. 2025, Streaming DiLoCo: one fragment synced at a "
    "time divides the peak by the number of fragments at similar loss [M])",
    f"equivalence (TOST, 90% CI within ±{COMPARABLE:g}) of the accuracy difference and a "
    f"bootstrap of the ratio of mean peak bytes per collective against {FAR_LESS_PEAK:g}, per "
    "condition",
)
def streaming_diloco_less_peak_same_accuracy(runs: pd.DataFrame, report: dict) -> tuple:
    """Per condition (network) and tau, every Streaming DiLoCo setting against DiLoCo: final
    accuracies within COMPARABLE (an equivalence test) and mean peak bytes of one collective
    under FAR_LESS_PEAK x DiLoCo's; a cell holds when both hold."""
    for name in (STREAMING, DILOCO):
        if not (runs["algorithm"] == name).any():
            return _missing(name)
    verdicts, details = [], []
    for cell in cells(runs):
        streams, dilocos = cell.methods(STREAMING), cell.methods(DILOCO)
        if not streams or not dilocos:
            verdicts.append(None)
            details.append(f"{cell.name}: cannot tell: no {STREAMING if not streams else DILOCO}")
            continue
        for stream in streams:
            for diloco in dilocos:
                same = equivalent(
                    f"{stream}{_diverged_note(cell, stream)}",
                    cell.values(stream, "acc"),
                    f"{diloco}{_diverged_note(cell, diloco)}",
                    cell.values(diloco, "acc"),
                    COMPARABLE,
                )
                peak = ratio_below(
                    stream,
                    cell.values(stream, "peak"),
                    diloco,
                    cell.values(diloco, "peak"),
                    FAR_LESS_PEAK,
                )
                verdict = combine([same.holds, peak.holds])
                verdicts.append(verdict)
                details.append(
                    f"{cell.name}: {VERDICTS[verdict]}: accuracy {same.verdict_text()}; "
                    f"peak bytes per collective {peak.verdict_text('bytes')}"
                )
    evidence = (
        _summary(verdicts, "cells")
        + f"; about the same = within {COMPARABLE:g}, far less = under {FAR_LESS_PEAK:g}x"
    )
    return combine(verdicts), evidence, details


@claim(
    "diloco_not_worse_than_local_sgd",
    "DiLoCo's outer Nesterov step reaches final accuracy comparable to or better than plain "
    "Local SGD at the same communication (Douillard et al. 2023, DiLoCo, ablation of the outer "
    "optimizer: Nesterov beats outer SGD with LR 1, i.e. FedAvg / Local SGD [M]; a difference "
    "in the paper, tested here as non-inferiority)",
    f"paired t-test of DiLoCo's accuracy minus Local SGD's above -{COMPARABLE:g} "
    f"(non-inferiority), per condition, at equal bytes per step (within {EQUAL_BYTES:g})",
)
def diloco_not_worse_than_local_sgd(runs: pd.DataFrame, report: dict) -> tuple:
    """Per condition and tau, at equal bytes per step: DiLoCo's mean final accuracy minus Local
    SGD's above -COMPARABLE (the 95% interval wholly above it holds, wholly below does not)."""
    for name in (DILOCO, LOCAL):
        if not (runs["algorithm"] == name).any():
            return _missing(name)
    verdicts, details = [], []
    for cell in cells(runs):
        dilocos, locals_ = cell.methods(DILOCO), cell.methods(LOCAL)
        if not dilocos or not locals_:
            verdicts.append(None)
            details.append(f"{cell.name}: cannot tell: no {DILOCO if not dilocos else LOCAL}")
            continue
        for diloco in dilocos:
            for local in locals_:
                apart = _bytes_apart(cell, diloco, local)
                if apart:
                    verdicts.append(None)
                    details.append(f"{cell.name}: cannot tell: {apart}")
                    continue
                c = compare(
                    f"{diloco}{_diverged_note(cell, diloco)}",
                    cell.values(diloco, "acc"),
                    f"{local}{_diverged_note(cell, local)}",
                    cell.values(local, "acc"),
                    threshold=-COMPARABLE,
                )
                verdicts.append(c.holds)
                details.append(f"{cell.name}: {c.verdict_text()}")
    evidence = _summary(verdicts, "cells") + f"; comparable = not more than {COMPARABLE:g} below"
    return combine(verdicts), evidence, details


@claim(
    "overlapping_methods_reach_target_sooner_on_slow_network",
    "On the slowest network, the methods that overlap their averages with computation "
    "(Streaming DiLoCo, Overlap-Local-SGD, CoCoD-SGD) reach the target accuracy sooner in "
    "training time than the blocking ones (Local SGD, DiLoCo) at equal bytes per step "
    "(Douillard et al. 2025: overlapping each fragment's sync with inner steps hides latency "
    "and bandwidth [M]; Overlap-Local-SGD and CoCoD-SGD: algorithms.md sections 3 and 5 [A])",
    "paired t-test of each blocking method's time to the target accuracy minus each overlapping "
    "method's above 0, on the network with the lowest bandwidth_gbps; a run that never reached "
    "the target counts with its whole training time (a lower bound of its time to target)",
)
def overlapping_reach_target_sooner(runs: pd.DataFrame, report: dict) -> tuple:
    """On the slowest network among the runs (lowest `network.bandwidth_gbps`), per remaining
    condition and tau: every overlapping method's time to target below every blocking method's,
    at equal bytes per step. Censoring: a completed run that never reached the target has a
    time to target of at least its training time; that lower bound stands in for it only where
    it makes the test conservative (the blocking side for "holds", the overlapping side for
    "does not hold")."""
    for names in (OVERLAPPING, BLOCKING):
        if not runs["algorithm"].isin(names).any():
            return _missing(" or ".join(names))
    timed = runs[runs["train_s"].notna()]
    if timed.empty or timed["bandwidth"].isna().all():
        return None, "no completed run with a training time and a network bandwidth", []
    slowest = float(timed["bandwidth"].min())
    network = ", ".join(sorted(set(timed.loc[timed["bandwidth"] == slowest, "network"].dropna())))
    slow = timed[timed["bandwidth"] == slowest]
    verdicts, details = [], []
    for cell in cells(slow):
        overlapping, blocking = cell.methods(OVERLAPPING), cell.methods(BLOCKING)
        if not overlapping or not blocking:
            verdicts.append(None)
            missing = "overlapping" if not overlapping else "blocking"
            details.append(f"{cell.name}: cannot tell: no {missing} method")
            continue
        # the closest pair first: the slowest overlapping method against the fastest blocking one
        overlapping = sorted(overlapping, key=lambda m: -_mean_time(cell, m))
        blocking = sorted(blocking, key=lambda m: _mean_time(cell, m))
        pairs = []
        for late in blocking:
            for early in overlapping:
                apart = _bytes_apart(cell, late, early)
                pairs.append((None, apart) if apart else _sooner(cell, early, late))
        comparisons = [v for v, _ in pairs]
        verdict = combine(comparisons)
        # the pair that decides: the first that does not hold, else the first that cannot tell
        shown = next((line for v, line in pairs if v is False), None)
        shown = shown or next((line for v, line in pairs if v is None), pairs[0][1])
        tail = "" if len(pairs) < 2 else " [" + _summary(comparisons, "comparisons") + "]"
        verdicts.append(verdict)
        details.append(f"{cell.name}: {VERDICTS[verdict]}: {shown}{tail}")
    target = report.get("target_acc")
    at = f"target acc ≥ {float(target):g}; " if target is not None else ""
    evidence = f"network {network} ({slowest:g} Gbps); {at}" + _summary(verdicts, "cells")
    return combine(verdicts), evidence, details


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
    times = Side.of(reached["time_to_target"], method, seeds=_seeds(reached))
    bounds = Side.of(missed["train_s"], method, seeds=_seeds(missed))
    return times, bounds, int((~hit).sum()), len(mine)


def _seeds(rows: pd.DataFrame) -> np.ndarray | None:
    seeds = rows["seed"].to_numpy(float)
    return None if np.isnan(seeds).any() else seeds


def _joined(*sides: Side) -> Side:
    """Sides of one method joined, their seeds kept (None if any side has none)."""
    values = np.concatenate([np.asarray(s, float) for s in sides])
    seeds = None if any(s.seeds is None for s in sides) else sum((s.seeds for s in sides), ())
    return Side.of(values, sides[0].method, seeds=seeds, column="time_to_target")


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


def _flag(value: Any) -> bool | None:
    """A yes/no column read back from a frame: True, False, or None when unknown."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return bool(value)


def _text(value: Any) -> str | None:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(str(v) for v in value) + "]"
    return str(value)


# The seed papers' other claims and the controls register themselves in CLAIMS.
import analysis.verdicts  # noqa: E402, F401
