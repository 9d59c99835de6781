"""The comparison an ad-hoc sweep ends with (`python run.py -m algorithm=losp,osp tau=1,2,4`).

A sweep without a preset has no report of its own; the sweeper (hydra_plugins/commsgd_sweeper)
prints this instead, from the runs the sweep just finished (or found finished): one row per
method and condition (n = seeds, mean final accuracy, mean time to the scale's target
accuracy, how many runs reached it), then per tau and condition each pair of methods compared
the way the presets' claims are (`analysis.stats`: paired by seed, MDD at 80% power), then
the one command that writes the full report. Where the setting cannot show a difference by
construction (OSP and LOSP on an ideal network with equal workers: the overlap window is
empty, and both are Local SGD), it says so and names the preset that can.
"""

from __future__ import annotations

import itertools
import math
import warnings
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from analysis.claims import LOSP, OSP, cells, per_run
from analysis.runs.load import load_runs, load_summaries
from analysis.stats import compare

MAX_PAIRS = 12  # pairwise lines printed; the full report has every one


def sweep_comparison(
    run_dirs: Sequence[str | Path], target: float | None, report_command: str
) -> list[str]:
    """The lines that end an ad-hoc sweep over these runs (module docstring); [] when fewer
    than two methods finished."""
    from analysis.reports.report import _with_metric_columns
    from analysis.runs.load import RecordWarning

    dirs = sorted({str(d) for d in run_dirs if d and (Path(d) / "summary.json").is_file()})
    if not dirs:
        return []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RecordWarning)
        summaries = load_summaries(*dirs, statuses=None)
        metrics = load_runs(*dirs, statuses=None)
    if summaries.empty:
        return []
    summaries = _with_metric_columns(summaries, metrics, target)
    runs = per_run(summaries)
    if runs["method"].nunique() < 2 and runs["condition"].nunique() < 2:
        return []
    lines = [_table(runs, target), ""]
    pairs = []
    for cell in cells(runs):
        for a, b in itertools.combinations(cell.methods(sorted(runs["algorithm"].unique())), 2):
            c = compare(a, cell.values(a, "acc"), b, cell.values(b, "acc"))
            pairs.append(f"{cell.name}: accuracy: {c.verdict_text()}")
            if target is not None:
                t = compare(
                    a, cell.values(a, "time_to_target"), b, cell.values(b, "time_to_target")
                )
                if not math.isnan(t.estimate):
                    pairs.append(f"{cell.name}: time to {target:g}: {t.verdict_text('s')}")
    if pairs:
        shown = pairs[:MAX_PAIRS]
        more = f" (first {MAX_PAIRS} of {len(pairs)})" if len(pairs) > MAX_PAIRS else ""
        lines.append(f"pairwise, a above b (paired by seed, two-sided at 0.05){more}:")
        lines += [f"  {line}" for line in shown]
    lines += _few_seeds(runs) + _by_construction(summaries)
    lines.append(f"full report (tables, figures, every comparison): {report_command}")
    return lines


def _table(runs: pd.DataFrame, target: float | None) -> str:
    """A small markdown table: method, tau, condition, n, accuracy, time to target."""
    rows = []
    keys = ["method", "tau", "condition"]
    for (method, tau, condition), mine in runs.groupby(keys, dropna=False, sort=True):
        row = {
            "method": method,
            "tau": "-" if pd.isna(tau) else f"{tau:g}",
            "condition": condition or "",
            "n": int(mine["seed"].nunique()) if mine["seed"].notna().all() else len(mine),
            "final acc": f"{mine['acc'].mean():.3f}",
        }
        if target is not None:
            reached = mine["reached"].dropna().astype(bool)
            times = mine.loc[mine["reached"].eq(True), "time_to_target"].dropna()
            row[f"time to {target:g}"] = f"{times.mean():.3g} s" if len(times) else "never"
            row["reached"] = f"{int(reached.sum())}/{len(mine)}"
        rows.append(row)
    table = pd.DataFrame(rows)
    if not table["condition"].astype(bool).any():
        table = table.drop(columns="condition")
    return table.to_markdown(index=False, disable_numparse=True)


def _by_construction(summaries: pd.DataFrame) -> list[str]:
    """What an OSP/LOSP comparison here can show: on the virtual clock with equal workers on
    the ideal network the two are Local SGD (tests/test_identities.py), the same runs; on the
    real clock their overlap windows come from this machine's thread scheduling, not from a
    modeled network, so they differ by chance. Both point to the preset that can tell them
    apart."""
    algorithms = set(summaries.get("algorithm.name", pd.Series(dtype=object)).dropna())
    if not {OSP, LOSP} <= algorithms:
        return []
    index = summaries.index
    timing = summaries.get("timing", pd.Series("real", index=index)).astype(str)
    network = summaries.get("network.name", pd.Series("ideal", index=index)).astype(str)
    slowdown = summaries.get("compute.slowdown", pd.Series("none", index=index)).astype(str)
    equal = slowdown.isin(("none", "None", "nan"))
    preset = (
        "the preset that can tell them apart, one slow worker on a modeled network on the "
        "virtual clock, 8 seeds: python -m experiments.sweep losp --scale fmnist (make losp)"
    )
    if (timing.eq("virtual") & network.eq("ideal") & equal).any():
        return [
            "note: osp = losp by construction on the ideal network with equal workers (the "
            f"overlap window is empty: no staleness for LOSP to compensate); {preset}"
        ]
    if timing.eq("real").any():
        return [
            "note: on the real clock the overlap windows of osp and losp come from this "
            "machine's thread scheduling, not from a modeled network: their difference here "
            f"is chance as much as method; {preset}"
        ]
    return []


def _few_seeds(runs: pd.DataFrame) -> list[str]:
    """A line when a side has fewer than 2 seeds: no test can be made."""
    seeds = runs.groupby(["method", "tau", "condition"], dropna=False)["seed"].nunique()
    if seeds.empty or seeds.min() >= 2:
        return []
    return [
        f"note: {int(seeds.min())} seed per side: no verdict; add seed=0,1,2,3,4,5,6,7 (n = 8 "
        "paired seeds: the committed results' n, results/README.md)"
    ]
