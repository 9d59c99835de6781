"""How the tables write their values: numbers, mean ± std, times, bytes and percentages as
cells, the headers of the value columns, a row's label, and LaTeX. Apart from
analysis/reports/tables.py, which builds the tables, so that what a cell looks like is read in one
place."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pandas as pd

from analysis.runs.compare import NO_TAU, display, short_names
from analysis.stats.units import human_bytes

EMPTY = "—"  # a group without a completed or diverged run
DIVERGED = "div."  # a group all of whose runs diverged

# Markdown headers of the usual `extra` columns; others are named like the value column.
_EXTRA_HEADERS = {
    "summary.comm/ratio": "comm/compute",
    "summary.time/train_s": "train time (s)",
}


def _number(cell: Any) -> float | None:
    if isinstance(cell, bool):
        return None
    try:
        number = float(cell)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(number) else number


def _as_int_if_integral(value: Any) -> Any:
    number = _number(value)
    return int(number) if number is not None and number.is_integer() else value


def _mean_std(mean: float, std: float, digits: int) -> str:
    if math.isnan(mean):
        return "–"
    spread = "–" if math.isnan(std) else f"{std:.{digits}f}"
    return f"{mean:.{digits}f} ± {spread}"


def _value_header(value: str) -> str:
    # "summary.final/test_acc" -> "final test acc"
    return value.removeprefix("summary.").replace("/", " ").replace("_", " ")


def _extra_header(column: str) -> str:
    return _EXTRA_HEADERS.get(column, _value_header(column))


def _extra_cell(column: str, value: Any, digits: int) -> str:
    number = _number(value)
    if number is None:
        return "–"
    if column.endswith("ratio"):
        return f"{100 * number:.1f}%"
    if column.endswith("_s"):
        # three significant digits, whole seconds from 1000 s on
        return f"{number:.3g}" if abs(number) < 1000 else f"{number:.0f}"
    return f"{number:.{digits}g}"


def _row_headers(columns: Sequence[str]) -> dict[str, str]:
    # "algorithm.name" -> "algorithm", "algorithm.rank" -> "rank": what the labels call them.
    return short_names(columns)


def _group_label(row: pd.Series, rows: Sequence[str]) -> str:
    # "local_sgd tau=8": the keys of `series_label`, spelled to run on into "seeds 0,1".
    names = short_names(list(rows))
    parts = []
    for column in rows:
        value = row[column]
        if value == NO_TAU or value is None:
            continue
        parts.append(
            display(value) if column == "algorithm.name" else f"{names[column]}={display(value)}"
        )
    return " ".join(parts) or "all runs"


def _short(column: str) -> str:
    # "algorithm.name" -> "algorithm", "algorithm.rank" -> "rank", "compute.slowdown" -> "slowdown"
    return short_names([column])[column]


def _display(value: Any) -> str:
    return display(value)


def _accuracy_cell(mean: float, std: float, n: int, diverged: int, digits: int) -> str:
    if n == 0:
        return DIVERGED if diverged else EMPTY
    cell = _mean_std(mean, std, digits)
    return f"{cell} ({diverged} div.)" if diverged else cell


def _target_cell(time_s: float, reached: int, runs: int) -> str:
    if not runs:
        return EMPTY
    if not reached:
        return f"{EMPTY} (0/{runs})"
    number = _number(time_s)
    cell = f"{_seconds(number)} s" if number is not None else "? s"
    return cell if reached == runs else f"{cell} ({reached}/{runs})"


def _summary_cell(column: str, value: Any) -> str:
    number = _number(value)
    if number is None:
        return EMPTY
    if column in ("comm_bytes", "comm_peak_bytes"):
        return human_bytes(number)
    if column == "comm_ratio":
        return f"{100 * number:.1f}%"
    return _seconds(number)


def _seconds(number: float) -> str:
    # three significant digits, whole seconds from 1000 s on
    return f"{number:.3g}" if abs(number) < 1000 else f"{number:.0f}"


_LATEX_SPECIAL = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "±": r"$\pm$",
    "≥": r"$\geq$",
    "—": "---",
    "–": "--",
}


def latex_escape(text: str) -> str:
    """Text for a LaTeX document: special characters escaped, ± and ≥ as math, dashes as TeX's."""
    return "".join(_LATEX_SPECIAL.get(ch, ch) for ch in str(text))


def _latex(
    cells: pd.DataFrame,
    num_rows: int,
    title: str | None,
    label: str | None,
    notes: Sequence[str] = (),
) -> str:
    align = "l" * num_rows + "r" * (len(cells.columns) - num_rows)
    lines = [r"\begin{table}[htbp]", r"  \centering"]
    if title:
        lines.append(rf"  \caption{{{latex_escape(title)}}}")
    if label:
        lines.append(rf"  \label{{{label}}}")
    lines += [rf"  \begin{{tabular}}{{{align}}}", r"    \toprule"]
    lines.append("    " + " & ".join(latex_escape(c) for c in cells.columns) + r" \\")
    lines.append(r"    \midrule")
    for _, row in cells.iterrows():
        lines.append("    " + " & ".join(latex_escape(v) for v in row) + r" \\")
    lines += [r"    \bottomrule", r"  \end{tabular}"]
    if notes:
        lines.append(r"  \par\smallskip\footnotesize")
        lines += [f"  {latex_escape(note)}\\par" for note in notes]
    lines.append(r"\end{table}")
    return "\n".join(lines) + "\n"
