"""Runs on disk -> the final-accuracy table, the test-accuracy figure and the time figures.

    python -m analysis.report RUNS_ROOT [RUNS_ROOT ...] --out OUT_DIR [--name NAME]

Writes `<NAME>.md` and `<NAME>.csv` (NAME defaults to `table`), `test_acc.png` / `.pdf`, and, when
the runs log the time ledger (timing.md), `time.png` / `.pdf` (accuracy and loss against training
time) and `time_breakdown.png` / `.pdf` (per-epoch compute vs exposed communication) into OUT_DIR,
then prints the Markdown table and the figure paths. The table gains the communication-to-
computation ratio and the training time when the summaries carry them. Only completed and
diverged runs count: a failed or still-running run has no final accuracy to report.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from analysis.figures import BREAKDOWN_COLUMNS, TIME, accuracy_curves, time_breakdown, time_curves
from analysis.load import DEFAULT_STATUSES, find_runs, load_runs
from analysis.tables import final_accuracy_table, to_markdown, write_table
from experiments.errors import UserError

FIGURE_NAME = "test_acc"
TIME_FIGURE_NAME = "time"
BREAKDOWN_FIGURE_NAME = "time_breakdown"
# The time figure's panels, those of them the runs log.
TIME_METRICS = ("test/acc", "train/loss")
# Summary columns the table shows, when the runs carry them, after the accuracy.
TABLE_EXTRA = ("summary.comm/ratio", "summary.time/train_s")
# The figure keys of `report()`'s result, in the order `main` prints the paths.
FIGURE_KEYS = (
    "figure_png",
    "figure_pdf",
    "time_png",
    "time_pdf",
    "breakdown_png",
    "breakdown_pdf",
)


def report(
    roots: Sequence[str | os.PathLike], out_dir: str | os.PathLike, name: str = "table"
) -> dict[str, Any]:
    """Write the table and figure for the runs under `roots` into `out_dir`.

    Returns `table` (the DataFrame), `markdown`, `table_md`, `table_csv`, `figure_png`,
    `figure_pdf` (None when no run logged an evaluation yet), `time_png`, `time_pdf`,
    `breakdown_png`, `breakdown_pdf` (None when no evaluation or the time ledger is missing, the
    latter said on stderr) and `num_runs`.
    """
    if isinstance(roots, (str, os.PathLike)):
        roots = [roots]
    frame = load_runs(*roots, statuses=DEFAULT_STATUSES)
    if frame.empty:
        found = sum(len(find_runs(root)) for root in roots)
        where = ", ".join(str(r) for r in roots)
        if found:
            raise UserError(f"none of the {found} runs under {where} is completed or diverged")
        raise UserError(f"no runs (directories with summary.json) under {where}")
    # The summaries are repeated on every metric row; one row per run is what the table counts.
    summaries = frame.drop_duplicates("run_dir")
    extra = [c for c in TABLE_EXTRA if c in summaries.columns]
    table = final_accuracy_table(summaries, extra=extra)
    table_md, table_csv = write_table(table, out_dir, name)
    figures: dict[str, Path | None] = dict.fromkeys(FIGURE_KEYS)
    if "test/acc" in frame.columns and frame["test/acc"].notna().any():
        figures["figure_png"], figures["figure_pdf"] = accuracy_curves(
            frame, out_dir, name=FIGURE_NAME
        )
        # Without an evaluation there is no time either; main's note covers both.
        missing = _first_missing(frame, [TIME])
        if missing is None:
            metrics = [m for m in TIME_METRICS if _first_missing(frame, [m]) is None]
            figures["time_png"], figures["time_pdf"] = time_curves(
                frame, out_dir, name=TIME_FIGURE_NAME, y=metrics
            )
            missing = _first_missing(frame, BREAKDOWN_COLUMNS)
            if missing is None:
                figures["breakdown_png"], figures["breakdown_pdf"] = time_breakdown(
                    frame, out_dir, name=BREAKDOWN_FIGURE_NAME
                )
            else:
                print(f"note: no {missing} in the runs, so no time breakdown", file=sys.stderr)
        else:
            print(f"note: no {missing} in the runs, so no time figures", file=sys.stderr)
    return {
        "table": table,
        "markdown": to_markdown(table),
        "table_md": table_md,
        "table_csv": table_csv,
        **figures,
        "num_runs": len(summaries),
    }


def _first_missing(frame: Any, columns: Sequence[str]) -> str | None:
    """The first of `columns` that no run logs, or None."""
    for column in columns:
        if column not in frame.columns or frame[column].isna().all():
            return column
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry: 0 on success, 2 with a one-line `error: ...` on stderr for a user error."""
    parser = argparse.ArgumentParser(prog="python -m analysis.report", description=__doc__)
    parser.add_argument("roots", nargs="+", type=Path, metavar="RUNS_ROOT")
    parser.add_argument("--out", required=True, type=Path, metavar="OUT_DIR")
    parser.add_argument("--name", default="table", help="stem of the table files")
    args = parser.parse_args(argv)
    try:
        result = report(args.roots, args.out, args.name)
    except UserError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(result["markdown"])
    if result["figure_png"] is None:
        print("note: no evaluations logged yet, so no figure", file=sys.stderr)
    else:
        print()
        for key in FIGURE_KEYS:
            if result[key] is not None:
                print(result[key])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
