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
from analysis.load import load_runs, load_summaries
from analysis.stats import compare

MAX_PAIRS = 12  # pairwise lines printed; the full report has every one


def sweep_comparison(
    run_dirs: Sequence[str | Path], target: float | None, report_command: str
) -> list[str]:
    """The lines that end an ad-hoc sweep over these runs (module docstring); [] when fewer
    than two methods finished."""
    from analysis.load import RecordWarning
    from analysis.report import _with_metric_columns

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
    lines += _by_construction(summaries)
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
    return table.to_markdown(index=False)


def _by_construction(summaries: pd.DataFrame) -> list[str]:
    """A line when OSP and LOSP ran on an ideal network with equal workers, where both are
    Local SGD (tests/test_identities.py)."""
    algorithms = set(summaries.get("algorithm.name", pd.Series(dtype=object)).dropna())
    if not {OSP, LOSP} <= algorithms:
        return []
    network = summaries.get("network.name", pd.Series("ideal", index=summaries.index))
    slowdown = summaries.get("compute.slowdown", pd.Series("none", index=summaries.index))
    ideal = network.astype(str).eq("ideal") & slowdown.astype(str).isin(("none", "None", "nan"))
    if not ideal.any():
        return []
    return [
        "note: osp = losp by construction on the ideal network with equal workers (the overlap "
        "window is empty: no staleness for LOSP to compensate); the preset that can tell them "
        "apart, heterogeneous workers on a modeled network: python -m experiments.sweep losp"
    ]
