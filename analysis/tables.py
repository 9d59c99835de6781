"""Final accuracy as mean ± std over seeds, one row per (algorithm, tau), as Markdown and CSV.

Accuracies stay fractions in [0, 1] as the contract writes them; the Markdown shows them that way
too, so a number in a table and the same number in `summary.json` read alike.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from analysis.load import ALGORITHMS, TAU_LESS
from experiments.errors import UserError

__all__ = ["TAU_LESS", "final_accuracy_table", "to_markdown", "write_table"]

NO_TAU = "-"

# Markdown headers of the usual `extra` columns; others are named like the value column.
_EXTRA_HEADERS = {
    "summary.comm/ratio": "comm/compute",
    "summary.time/train_s": "train time (s)",
}


def final_accuracy_table(
    summaries: pd.DataFrame,
    rows: Sequence[str] = ("algorithm.name", "tau"),
    value: str = "summary.final/test_acc",
    extra: Sequence[str] = (),
) -> pd.DataFrame:
    """Group runs by `rows` and give `mean`, `std` (sample; NaN when n=1) and `n` of `value`,
    and `diverged`, the number of runs that diverged.

    Each column in `extra` (e.g. `summary.comm/ratio`, `summary.time/train_s`) adds a column of
    that name holding its mean over the same runs as `mean` (diverged runs left out, as they
    stopped early); none by default.

    A diverged run's final accuracy is that of a non-finite model, so it is left out of the
    mean, std and n and counted apart: divergence is a result the table shows (the non-IID
    results of the papers include divergent runs).

    Tau-less methods (`TAU_LESS`) show tau as "-" so their seeds form one row whatever tau their
    configs hold. Rows are sorted by algorithm (contract order) then tau numerically.
    """
    rows = list(rows)
    extra = list(extra)
    missing = [c for c in [*rows, value, *extra] if c not in summaries.columns]
    if missing:
        raise UserError(f"no column {missing[0]!r} in the runs (have: {', '.join(summaries)})")
    frame = summaries
    if "run_dir" in frame.columns:
        # A per-evaluation frame repeats each summary on every metric row; count each run once.
        frame = frame.drop_duplicates("run_dir")
    if "tau" in rows and "algorithm.name" in frame.columns:
        frame = frame.assign(
            tau=[
                NO_TAU if name in TAU_LESS else _as_int_if_integral(tau)
                for name, tau in zip(frame["algorithm.name"], frame["tau"], strict=True)
            ]
        )
    diverged = (
        frame["summary.status"].eq("diverged")
        if "summary.status" in frame.columns
        else pd.Series(False, index=frame.index)
    )
    values = pd.to_numeric(frame[value], errors="coerce").mask(diverged)
    keys = [frame[c] for c in rows]
    table = values.groupby(keys, dropna=False, sort=False).agg(["mean", "std", "count"])
    table = table.rename(columns={"count": "n"})
    table["diverged"] = diverged.groupby(keys, dropna=False, sort=False).sum().astype(int)
    for column in extra:
        numbers = pd.to_numeric(frame[column], errors="coerce").mask(diverged)
        table[column] = numbers.groupby(keys, dropna=False, sort=False).mean()
    table = table.reset_index()
    table = table.iloc[sorted(range(len(table)), key=lambda i: _row_key(table.iloc[i], rows))]
    table = table.reset_index(drop=True)
    # to_markdown names the value column after what was aggregated.
    table.attrs["value"] = value
    table.attrs["extra"] = tuple(extra)
    return table


def to_markdown(table: pd.DataFrame, digits: int = 3) -> str:
    """A Markdown table: the row columns, `<value>` as `mean ± std` (fractions), the `extra`
    columns of `final_accuracy_table` (ratios in percent), `n`, and, when any run diverged,
    `diverged` as k/(runs)."""
    extra = [c for c in table.attrs.get("extra", ()) if c in table.columns]
    rows = [c for c in table.columns if c not in ("mean", "std", "n", "diverged", *extra)]
    header = _value_header(table.attrs.get("value", "summary.final/test_acc"))
    shown = pd.DataFrame({_row_header(c): table[c].map(_cell) for c in rows})
    diverged = table["diverged"] if "diverged" in table.columns else pd.Series(0, table.index)
    shown[header] = [
        "diverged" if n == 0 and k > 0 else _mean_std(mean, std, digits)
        for mean, std, n, k in zip(table["mean"], table["std"], table["n"], diverged, strict=True)
    ]
    for column in extra:
        shown[_extra_header(column)] = [_extra_cell(column, v, digits) for v in table[column]]
    shown["n"] = table["n"].astype(int).astype(str)
    if diverged.any():
        shown["diverged"] = [f"{k}/{k + n}" for k, n in zip(diverged, table["n"], strict=True)]
    # All cells are already text; numparse off keeps "-" and our rounding as written.
    return shown.to_markdown(index=False, disable_numparse=True)


def write_table(
    table: pd.DataFrame, out_dir: str | os.PathLike, name: str = "table"
) -> tuple[Path, Path]:
    """Write `<name>.md` (formatted) and `<name>.csv` (raw mean/std/n) into `out_dir`."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    md_path, csv_path = out_dir / f"{name}.md", out_dir / f"{name}.csv"
    md_path.write_text(to_markdown(table) + "\n")
    table.to_csv(csv_path, index=False)
    return md_path, csv_path


def _row_key(row: pd.Series, rows: list[str]) -> tuple:
    key = []
    for column in rows:
        cell = row[column]
        if column == "algorithm.name":
            known = cell in ALGORITHMS
            key.append((0 if known else 1, ALGORITHMS.index(cell) if known else 0, str(cell)))
        else:
            number = _number(cell)
            # "-" (no period) sorts first, then numbers in order, then any other text.
            if cell == NO_TAU:
                key.append((0, 0.0, ""))
            elif number is not None:
                key.append((1, number, ""))
            else:
                key.append((2, 0.0, str(cell)))
    return tuple(key)


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


def _cell(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return str(_as_int_if_integral(value))


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


def _row_header(column: str) -> str:
    # "algorithm.name" -> "algorithm": the group name is what a reader looks for.
    return column.removesuffix(".name")
