"""Runs on disk -> the final-accuracy table and the test-accuracy figure.

    python -m analysis.report RUNS_ROOT [RUNS_ROOT ...] --out OUT_DIR [--name NAME]

Writes `<NAME>.md` and `<NAME>.csv` (NAME defaults to `table`) and `test_acc.png` / `.pdf` into
OUT_DIR, then prints the Markdown table and the figure paths. Only completed and diverged runs
count: a failed or still-running run has no final accuracy to report.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from analysis.figures import accuracy_curves
from analysis.load import DEFAULT_STATUSES, find_runs, load_runs
from analysis.tables import final_accuracy_table, to_markdown, write_table
from experiments.errors import UserError

FIGURE_NAME = "test_acc"


def report(
    roots: Sequence[str | os.PathLike], out_dir: str | os.PathLike, name: str = "table"
) -> dict[str, Any]:
    """Write the table and figure for the runs under `roots` into `out_dir`.

    Returns `table` (the DataFrame), `markdown`, `table_md`, `table_csv`, `figure_png`,
    `figure_pdf` (None when no run logged an evaluation yet) and `num_runs`.
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
    table = final_accuracy_table(summaries)
    table_md, table_csv = write_table(table, out_dir, name)
    figure_png = figure_pdf = None
    if "test/acc" in frame.columns and frame["test/acc"].notna().any():
        figure_png, figure_pdf = accuracy_curves(frame, out_dir, name=FIGURE_NAME)
    return {
        "table": table,
        "markdown": to_markdown(table),
        "table_md": table_md,
        "table_csv": table_csv,
        "figure_png": figure_png,
        "figure_pdf": figure_pdf,
        "num_runs": len(summaries),
    }


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
        print(result["figure_png"])
        print(result["figure_pdf"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
