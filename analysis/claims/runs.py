"""The runs a claim reads, per side: `per_run` turns a report's summaries into one row per
finished run in the few columns the claims use, and `cells` cuts them into the conditions and
taus a claim compares within (analysis/claims/ states the rules)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from analysis.runs.compare import order_key, run_values, series_label, split_rows
from analysis.runs.load import TAU_LESS
from analysis.stats import Side

FINISHED = ("completed", "diverged")

# The statistics that mean little unless the runs converged: a run stopped while still
# improving would have ended elsewhere. Bytes, peaks and time per step do not depend on it.
CONVERGENCE_BOUND = ("acc", "time_to_target")


def _tau(tau: float) -> str:
    return f"tau={int(tau)}" if float(tau).is_integer() else f"tau={tau:g}"


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
    `analysis.reports.report` adds) and `time_to_target` (`metrics.time_to_target_s`, the training
    time at which it crossed), all NaN unless completed; `fast_idle`, `fast_samples`,
    `slow_samples` (a time budget's workers at T: `_utilization`), `time_budget` (run on
    `budget=time`); `converged`
    (`metrics.converged`, `analysis.runs.convergence`; None when not known, and for a diverged
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
            **_utilization(frame, completed),
            "time_budget": text("budget.name").eq("time"),
        }
    )
    return _one_per_seed(out).reset_index(drop=True)


def _utilization(frame: pd.DataFrame, completed: pd.Series) -> dict[str, pd.Series]:
    """A time budget's per-worker accounts at T (summary `workers/*`,
    experiments/training/budget.py) as three numbers per run: `fast_idle`, the mean idle share of
    every worker but the slowest (the one with the longest busy time per step), and
    `fast_samples` / `slow_samples`, the samples the fast workers (mean) and the slowest one
    processed; NaN for runs without them (the steps budget)."""
    fast_idle, fast_samples, slow_samples = [], [], []
    for i in range(len(frame)):
        idle, busy, steps, samples = (
            _list(frame, f"summary.workers/{k}", i)
            for k in ("idle_share", "busy_s", "steps", "samples")
        )
        m = len(idle)
        if m < 2 or not completed.iat[i] or not (len(busy) == len(steps) == len(samples) == m):
            fast_idle.append(math.nan)
            fast_samples.append(math.nan)
            slow_samples.append(math.nan)
            continue
        slow, fast = slowest_worker(busy, steps)
        fast_idle.append(float(np.mean([idle[j] for j in fast])))
        fast_samples.append(float(np.mean([samples[j] for j in fast])))
        slow_samples.append(float(samples[slow]))
    index = frame.index
    return {
        "fast_idle": pd.Series(fast_idle, index=index, dtype=float),
        "fast_samples": pd.Series(fast_samples, index=index, dtype=float),
        "slow_samples": pd.Series(slow_samples, index=index, dtype=float),
    }


def slowest_worker(busy: Sequence[float], steps: Sequence[float]) -> tuple[int, list[int]]:
    """(the slowest worker, the others) of a time budget's run: the slowest is the one with the
    longest busy time per step (the claims' `fast_idle` and the utilization figure both)."""
    pace = [b / s if s > 0 else math.inf for b, s in zip(busy, steps, strict=True)]
    slow = max(range(len(pace)), key=lambda j: pace[j])
    return slow, [j for j in range(len(pace)) if j != slow]


def _list(frame: pd.DataFrame, column: str, i: int) -> list[float]:
    """Row i's list of numbers in `column` ([] when absent or not a list of numbers)."""
    if column not in frame.columns:
        return []
    value = frame[column].iat[i]
    if not isinstance(value, list | tuple) or not all(
        isinstance(v, int | float) and not isinstance(v, bool) for v in value
    ):
        return []
    return [float(v) for v in value]


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
        runs reach in the steps they were given, converged or not) or the runs are on a time
        budget (`budget=time`: every method is compared at the same virtual time T, which is
        the comparison the straggler claims make; a run still improving at T is what it is at
        T)."""
        mine = self.runs[self.runs["method"] == method]
        known = mine[mine[column].notna()]
        values, seeds = known[column].to_numpy(float), known["seed"].to_numpy(float)
        seeds = None if np.isnan(seeds).any() else seeds
        unconverged, runs = self.flagged(method, column, at_budget) or (0, 0)
        return Side.of(values, method, unconverged, runs, seeds, column)

    def flagged(self, method: str, column: str, at_budget: bool = False) -> tuple[int, int] | None:
        """(runs flagged not converged, runs with a flag) of the method, where the rule binds
        `column` to convergence (`values`); None where no flag counts."""
        mine = self.runs[self.runs["method"] == method]
        # on a time budget every claim is at a budget: what the runs reach in the same time
        timed = bool(len(mine)) and bool(mine["time_budget"].all())
        if column not in CONVERGENCE_BOUND or at_budget or timed:
            return None
        flags = mine["converged"].dropna().astype(bool)
        return int((~flags).sum()), len(flags)

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
