"""Which figures a report draws, and drawing them: `report.figures` names (accuracy, time,
breakdown, utilization) -> the files, each skipped with one `note:` line where the runs lack
what it needs (analysis/reports/figures.py and analysis/reports/utilization.py draw them)."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from analysis.reports.figures import (
    BREAKDOWN_COLUMNS,
    TIME,
    accuracy_curves,
    time_breakdown,
    time_curves,
)
from analysis.reports.staging import (
    BREAKDOWN_FIGURE_NAME,
    FIGURE_NAME,
    TIME_FIGURE_NAME,
    UTILIZATION_FIGURE_NAME,
)
from analysis.reports.utilization import utilization

# The time figure's panels, those of them the runs log.
TIME_METRICS = ("test/acc", "train/loss")
# The figure keys of `report()`'s result, in the order `main` prints the paths.
FIGURE_KEYS = (
    "figure_png",
    "figure_pdf",
    "time_png",
    "time_pdf",
    "breakdown_png",
    "breakdown_pdf",
    "utilization_png",
    "utilization_pdf",
)
# `report.figures` names -> the figure keys they produce.
FIGURES = {
    "accuracy": ("figure_png", "figure_pdf"),
    "time": ("time_png", "time_pdf"),
    "breakdown": ("breakdown_png", "breakdown_pdf"),
    # a time budget's workers at T (analysis/reports/utilization.py)
    "utilization": ("utilization_png", "utilization_pdf"),
}


def draw_figures(
    frame: Any,
    out_dir: str | os.PathLike,
    wanted: Sequence[str] = tuple(FIGURES),
    rows: Sequence[str] | None = None,
) -> dict[str, Path | None]:
    """Draw the figures named in `wanted` (keys of `FIGURES`) from a `load_runs` frame, its
    series cut by `rows` (the table's rows; default: `split_rows` of the frame).

    Returns every key of `FIGURE_KEYS`, None for a figure not drawn: none at all before the first
    evaluation; no time figures without `time/train_s`, no breakdown without the rest of the
    ledger (each said in one `note:` line on stderr).
    """
    figures: dict[str, Path | None] = dict.fromkeys(FIGURE_KEYS)
    if "test/acc" not in frame.columns or frame["test/acc"].isna().all():
        return figures
    if "accuracy" in wanted:
        figures["figure_png"], figures["figure_pdf"] = accuracy_curves(
            frame, out_dir, name=FIGURE_NAME, rows=rows
        )
    if not {"time", "breakdown", "utilization"} & set(wanted):
        return figures
    missing = _first_missing(frame, [TIME])
    if missing is not None:
        print(f"note: no {missing} in the runs, so no time figures", file=sys.stderr)
        return figures
    if "time" in wanted:
        metrics = [m for m in TIME_METRICS if _first_missing(frame, [m]) is None]
        figures["time_png"], figures["time_pdf"] = time_curves(
            frame, out_dir, name=TIME_FIGURE_NAME, y=metrics, rows=rows
        )
    if "utilization" in wanted:
        if on_time_budget(frame):
            figures["utilization_png"], figures["utilization_pdf"] = utilization(
                frame, out_dir, name=UTILIZATION_FIGURE_NAME, rows=rows
            )
        else:
            print("note: no run on a time budget, so no utilization figure", file=sys.stderr)
    if "breakdown" in wanted:
        missing = _first_missing(frame, BREAKDOWN_COLUMNS)
        if missing is None:
            figures["breakdown_png"], figures["breakdown_pdf"] = time_breakdown(
                frame, out_dir, name=BREAKDOWN_FIGURE_NAME, rows=rows
            )
        else:
            print(f"note: no {missing} in the runs, so no time breakdown", file=sys.stderr)
    return figures


def on_time_budget(frame: Any) -> bool:
    """Whether a run of the frame holds a time budget's per-worker accounts (the utilization
    figure's data)."""
    return "workers/busy_s" in frame.columns and bool(frame["workers/busy_s"].notna().any())


def _first_missing(frame: Any, columns: Sequence[str]) -> str | None:
    """The first of `columns` that no run logs, or None."""
    for column in columns:
        if column not in frame.columns or frame[column].isna().all():
            return column
    return None
