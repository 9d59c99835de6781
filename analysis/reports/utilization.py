"""Where each worker's time went on a time budget: the papers' "under-utilization".

A time budget's last row (experiments/training/budget.py) holds every worker's accounts at T:
busy (compute and algorithm work), idle (waiting), steps and samples, as lists by rank. Per
series (the tables' label), mean over seeds, `utilization_table` gives the share of T that the
fast workers (every worker but the slowest: the one with the longest busy time per step, the
claims' rule, analysis/claims/runs.py `slowest_worker`) and the slowest worker spent busy and
idle, and the samples each processed; `utilization_figure` draws it as two stacked bars per
series (fast workers, slowest worker), each annotated with the samples it processed. With one
worker 3x slower, sync SGD's fast workers idle about two thirds of the budget and OSP's almost
never (results/losp)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from analysis.claims.runs import slowest_worker
from analysis.reports.figure_layout import (
    COLUMN_WIDTH_IN,
    _paper_style,
    _prepare,
    _save,
    _seeds_note,
    _styles,
    _title,
)
from experiments.errors import UserError

WORKERS = ("workers/busy_s", "workers/idle_s", "workers/steps", "workers/samples")
_SEGMENTS = (("busy", "busy (compute)", "#8c96a6"), ("idle", "idle (waiting)", "#c44e52"))


def _split(busy: list, idle: list, steps: list, samples: list) -> dict[str, float] | None:
    """One run's fast workers (mean) and slowest worker, as shares of its budget."""
    m = len(busy)
    if m < 2 or not len(idle) == len(steps) == len(samples) == m:
        return None
    total = [b + i for b, i in zip(busy, idle, strict=True)]
    slow, fast = slowest_worker(busy, steps)

    def share(values: list, j: int) -> float:
        return values[j] / total[j] if total[j] > 0 else np.nan

    return {
        "fast_busy": float(np.mean([share(busy, j) for j in fast])),
        "fast_idle": float(np.mean([share(idle, j) for j in fast])),
        "slow_busy": share(busy, slow),
        "slow_idle": share(idle, slow),
        "fast_samples": float(np.mean([samples[j] for j in fast])),
        "slow_samples": float(samples[slow]),
    }


def utilization_table(frame: pd.DataFrame, rows: Sequence[str] | None = None) -> pd.DataFrame:
    """Per series (index: the tables' label), mean over its runs: `fast_busy`, `fast_idle`,
    `slow_busy`, `slow_idle` (shares of the budget), `fast_samples`, `slow_samples`, `runs`,
    and the series' `_series` and `_algorithm`. Raises UserError when no run has the workers'
    accounts (a steps budget)."""
    if not set(WORKERS) <= set(frame.columns):
        raise UserError("no run on a time budget (budget=time): no per-worker accounts")
    last = frame[frame["workers/busy_s"].map(lambda v: isinstance(v, list))]
    if last.empty:
        raise UserError("no run on a time budget (budget=time): no per-worker accounts")
    data, _ = _prepare(last, rows, copy_tau_less=False)
    records = []
    for _, row in data.iterrows():
        split = _split(*(list(row[c]) for c in WORKERS))
        if split is not None:
            records.append({**split, "label": row["label"], "_series": row["_series"],
                            "_algorithm": row["_algorithm"]})  # fmt: skip
    if not records:
        raise UserError("no run with two or more workers' accounts on a time budget")
    per_run = pd.DataFrame(records)
    group = per_run.groupby("label", sort=False)
    numbers = [c for c in per_run.columns if c not in ("label", "_series", "_algorithm")]
    table = group[numbers].mean()
    table["runs"] = group.size()
    table["_series"] = group["_series"].first()
    table["_algorithm"] = group["_algorithm"].first()
    order, _, _ = _styles(per_run)
    rank = {s: i for i, s in enumerate(order)}
    return table.iloc[sorted(range(len(table)), key=lambda i: rank[table["_series"].iat[i]])]


def utilization_figure(frame: pd.DataFrame, rows: Sequence[str] | None = None) -> Figure:
    """Two stacked bars per series, fast workers and slowest worker: busy and idle shares of
    the budget, each annotated with its samples."""
    table = utilization_table(frame, rows)
    labels, positions = [], []
    with _paper_style():
        # one and a half columns: the series' labels and the samples beside the bars
        fig = Figure(figsize=(1.5 * COLUMN_WIDTH_IN, 0.34 * len(table) + 1.3), layout="constrained")
        ax = fig.subplots()
        for i, (label, row) in enumerate(table.iterrows()):  # the tables' label: tau too
            for k, who in enumerate(("fast", "slow")):
                y = 2.4 * i + k
                left = 0.0
                for key, _, colour in _SEGMENTS:
                    value = float(row[f"{who}_{key}"])
                    ax.barh(y, value, left=left, height=0.8, color=colour)
                    left += value
                ax.annotate(
                    f"{row[f'{who}_samples']:,.0f} samples",
                    xy=(left, y),
                    xytext=(3, 0),
                    textcoords="offset points",
                    va="center",
                    fontsize=6.5,
                )
                labels.append(f"{label}: {'fast workers' if who == 'fast' else 'slowest'}")
                positions.append(y)
        ax.set_yticks(positions, labels=labels)
        ax.set_ylim(max(positions) + 0.7, -0.7)
        ax.set_xlim(0, 1.32)
        ax.set_xticks([0, 0.25, 0.5, 0.75, 1.0])
        ax.set_xlabel("share of the time budget (virtual clock)")
        ax.grid(axis="x", alpha=0.3, lw=0.4)
        ax.set_axisbelow(True)
        fig.legend(
            handles=[Patch(color=c, label=text) for _, text, c in _SEGMENTS],
            loc="outside lower center",
            ncol=2,
            frameon=False,
            title=_seeds_note(list(table["runs"]), "at T, mean over seeds", "bar", ""),
        )
        runs = frame.drop_duplicates("run_dir") if "run_dir" in frame.columns else frame
        _title(fig, runs.assign(_series=None), _prepare(runs, rows, False)[1], with_network=True)
    return fig


def utilization(
    frame: pd.DataFrame,
    out_dir: str | os.PathLike,
    name: str = "utilization",
    rows: Sequence[str] | None = None,
) -> tuple[Path, Path]:
    """Write `utilization_figure` to `<out_dir>/<name>.png` and `.pdf`."""
    return _save(utilization_figure(frame, rows), out_dir, name)
