"""What the figures of analysis/reports/figures.py share: each algorithm's colour (from the
registry), the print sizes and fonts, the layout in small multiples (`facets`: panels per tau and
setting, series per method and knob, legend and title) and the small helpers of drawing and saving.

A module of its own so that figures.py reads as the figures themselves (learning curves, time,
the breakdown of time) within the size of one reading; figures.py re-exports the public names
here (`ALGORITHM_COLOURS`, `algorithm_colour`, `Facets`, `facets`, the sizes), and its sibling
uses the underscored helpers, which are this package's, not a public interface.
"""

from __future__ import annotations

import math
import os
import zlib
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib as mpl
import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

import algorithms
from analysis.runs.compare import (
    NO_TAU,
    display,
    order_key,
    run_values,
    series_label,
    short_names,
    split_rows,
)
from analysis.runs.load import ALGORITHMS


class _Colours(Mapping[str, str]):
    """Algorithm name -> its fixed colour (hex): the registry's (algorithms.TABLE, where the
    palette is chosen and why), read when used, so that a method registered after this module
    was imported is drawn in its own colour too."""

    def __getitem__(self, name: str) -> str:
        return algorithms.TABLE[name].colour

    def __iter__(self) -> Iterator[str]:
        return iter(tuple(algorithms.TABLE))

    def __len__(self) -> int:
        return len(algorithms.TABLE)


ALGORITHM_COLOURS: Mapping[str, str] = _Colours()
# Names outside the registry (the records of a method under development elsewhere) get a colour
# from their name's hash: stable across figures and runs, unlike an index into whatever happens
# to be plotted.
_FALLBACK_COLOURS = ("#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173", "#3182bd", "#31a354")
# Solid for an algorithm's first setting, then increasingly broken lines.
_DASHES = ("", (4, 1.5), (1, 1.2), (5, 1.5, 1, 1.5), (2, 1.5), (7, 1.5, 2, 1.5))

# Print sizes (inches) and fonts (points): two panels per column of a two-column paper.
PANEL_WIDTH_IN = 1.75
PANEL_HEIGHT_IN = 1.45
COLUMN_WIDTH_IN = 3.5
PAPER_RC = {
    "font.size": 7.5,
    "axes.titlesize": 8,
    "axes.labelsize": 7.5,
    "xtick.labelsize": 7,
    "ytick.labelsize": 7,
    "legend.fontsize": 7,
    "legend.title_fontsize": 7,
    "figure.titlesize": 8,
    "figure.labelsize": 7.5,
    "axes.linewidth": 0.6,
    "lines.linewidth": 1.2,
    "xtick.major.width": 0.6,
    "ytick.major.width": 0.6,
    "xtick.major.size": 2.5,
    "ytick.major.size": 2.5,
}
DPI = 300  # PNG resolution: the print size stays in inches, the pixels are for the eye

AXIS_LABELS = {
    "epoch": "epoch",
    "step": "step",
    "test/acc": "test accuracy",
    "test/acc_local": "test accuracy (local models)",
    "train/loss": "training loss",
    "test/loss": "test loss",
    "lr": "learning rate",
    "time/train_s": "training time [s]",
    "time/compute_s": "compute time [s]",
    "time/comm_exposed_s": "exposed communication time [s]",
    "comm/bytes": "bytes communicated",
}


def algorithm_colour(name: str) -> str:
    """The fixed colour of an algorithm name (hex)."""
    if name in algorithms.TABLE:
        return algorithms.TABLE[name].colour
    return _FALLBACK_COLOURS[zlib.crc32(str(name).encode()) % len(_FALLBACK_COLOURS)]


# --- layout -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Facets:
    """How a figure is laid out: `col` (panel columns, e.g. `tau`), `row` (panel rows, another
    setting), `series` (the knobs named in the legend besides the algorithm: `algorithm.rank`),
    `rows` (every column that tells runs apart) and `fixed` (row columns with one value, said
    in the title)."""

    col: str | None
    row: str | None
    series: tuple[str, ...]
    rows: tuple[str, ...]
    fixed: tuple[str, ...]


def facets(runs: pd.DataFrame, rows: Sequence[str] | None = None) -> Facets:
    """The layout of `runs` (one row per run or per evaluation): `rows` default to
    `split_rows(runs).rows`; `tau` gets the panel columns when it takes several values among the
    round-based methods, the first other varying setting that is not an algorithm's own knob
    the panel rows (or the columns, without several taus); the rest are series."""
    per_run = runs.drop_duplicates("run_dir") if "run_dir" in runs.columns else runs
    rows = tuple(split_rows(per_run).rows if rows is None else rows)
    varying, fixed = [], []
    for column in rows:
        if column == "algorithm.name":
            continue
        values = {v for v in run_values(per_run, column) if v not in (None, NO_TAU)}
        (varying if len(values) > 1 else fixed).append(column)
    col = "tau" if "tau" in varying else None
    settings = [c for c in varying if c != "tau" and not c.startswith("algorithm.")]
    row = None
    if settings:
        if col is None:
            col = settings[0]
        else:
            row = settings[0]
    series = tuple(c for c in varying if c not in (col, row))
    return Facets(col, row, series, rows, tuple(fixed))


@dataclass(frozen=True)
class _Panel:
    title: str
    col: Any
    row: Any


def _prepare(
    frame: pd.DataFrame, rows: Sequence[str] | None, copy_tau_less: bool = True
) -> tuple[pd.DataFrame, Facets]:
    """`frame` with `_algorithm`, `_series` (legend label), `label` (the full label, as the
    tables'), `_col` / `_row` (panel keys); with `copy_tau_less`, runs of tau-less methods
    copied into every tau panel."""
    layout = facets(frame, rows)
    data = frame.copy()
    algorithm = run_values(data, "algorithm.name")
    data["_algorithm"] = ["unknown" if a is None else str(a) for a in algorithm]
    values = {c: run_values(data, c) for c in layout.rows}

    def labels(columns: Sequence[str]) -> list[str]:
        keep = [c for c in columns if c in values]
        return [
            series_label(
                {"algorithm.name": data["_algorithm"].iat[i], **{c: values[c][i] for c in keep}},
                ["algorithm.name", *keep],
            )
            for i in range(len(data))
        ]

    data["label"] = labels([c for c in layout.rows if c not in layout.fixed])
    data["_series"] = labels(layout.series)
    data["_col"] = values[layout.col] if layout.col else None
    data["_row"] = values[layout.row] if layout.row else None
    if layout.col == "tau" and copy_tau_less:
        taus = sorted({v for v in data["_col"] if v not in (None, NO_TAU)}, key=_order_key)
        tau_less = data["_col"].isin([NO_TAU, None])
        copies = [data[tau_less].assign(_col=tau) for tau in taus]
        data = pd.concat([data[~tau_less], *copies], ignore_index=True)
    return data, layout


def _panels(data: pd.DataFrame, layout: Facets) -> list[list[_Panel]]:
    """The panels as a grid (list of rows), in order of their keys."""
    names = short_names([c for c in (layout.col, layout.row) if c])
    cols = sorted(set(data["_col"]), key=_order_key) if layout.col else [None]
    rows = sorted(set(data["_row"]), key=_order_key) if layout.row else [None]

    def title(col: Any, row: Any) -> str:
        parts = []
        if layout.col:
            parts.append(f"{names[layout.col]}={display(col)}")
        if layout.row:
            parts.append(f"{names[layout.row]}={display(row)}")
        return ", ".join(parts)

    return [[_Panel(title(c, r), c, r) for c in cols] for r in rows]


def _wrap(grid: list[list[_Panel]], width: int = 2) -> list[list[_Panel | None]]:
    """A single row of panels wrapped `width` to a row, so one column of a paper holds them."""
    if len(grid) != 1 or len(grid[0]) <= width:
        return grid  # type: ignore[return-value]
    flat = grid[0]
    wrapped: list[list[_Panel | None]] = [
        list(flat[i : i + width]) for i in range(0, len(flat), width)
    ]
    wrapped[-1] += [None] * (width - len(wrapped[-1]))
    return wrapped


def _in_panel(data: pd.DataFrame, panel: _Panel, layout: Facets) -> pd.DataFrame:
    mask = pd.Series(True, index=data.index)
    if layout.col:
        mask &= data["_col"].map(lambda v: v == panel.col)
    if layout.row:
        mask &= data["_row"].map(lambda v: v == panel.row)
    return data[mask]


def _styles(data: pd.DataFrame) -> tuple[list[str], dict[str, str], dict[str, object]]:
    """Series order (contract order of algorithms, then their settings in order), colour per
    algorithm, dash per setting within an algorithm."""
    first = data.drop_duplicates("_series")
    algorithm = dict(zip(first["_series"], first["_algorithm"], strict=True))

    def key(series: str) -> tuple:
        name = algorithm[series]
        rank = ALGORITHMS.index(name) if name in ALGORITHMS else len(ALGORITHMS)
        return (rank, name, _label_order(series))

    order = sorted(algorithm, key=key)
    palette = {s: algorithm_colour(algorithm[s]) for s in order}
    dashes, seen = {}, {}
    for series in order:
        index = seen.get(algorithm[series], 0)
        seen[algorithm[series]] = index + 1
        dashes[series] = _DASHES[index % len(_DASHES)]
    return order, palette, dashes


@contextmanager
def _paper_style() -> Iterator[None]:
    with mpl.rc_context(PAPER_RC):
        yield


def _grid_figure(
    grid: list[list[_Panel | None]], width_in: float | None = None, height_in: float | None = None
) -> tuple[Figure, np.ndarray]:
    nrows, ncols = len(grid), len(grid[0])
    width = width_in or max(COLUMN_WIDTH_IN, PANEL_WIDTH_IN * ncols)
    height = height_in or (PANEL_HEIGHT_IN * nrows + 0.9)
    if ncols == 1 and nrows == 1 and width_in is None:
        height = 2.4 + 0.5
    fig = Figure(figsize=(width, height), layout="constrained")
    axes = fig.subplots(nrows, ncols, sharex=True, sharey=True, squeeze=False)
    for r, line in enumerate(grid):
        for c, panel in enumerate(line):
            if panel is None:
                axes[r, c].set_visible(False)
                if r > 0:  # the panel above is the bottom of its column: it keeps its x ticks
                    axes[r - 1, c].xaxis.set_tick_params(labelbottom=True)
            elif panel.title:
                axes[r, c].set_title(panel.title, pad=3)
    return fig, axes


def _bottom_axes(grid: list[list[_Panel | None]], axes: np.ndarray) -> list[Axes]:
    """The lowest visible panel of each column (where the x label goes)."""
    bottom = []
    for c in range(len(grid[0])):
        rows = [r for r in range(len(grid)) if grid[r][c] is not None]
        if rows:
            bottom.append(axes[rows[-1], c])
    return bottom


def _legend(
    fig: Figure, order: Sequence[str], palette: dict, dashes: dict, title: str, width_in: float
) -> None:
    handles = [Line2D([], [], color=palette[s], lw=1.4, **_dash_style(dashes[s])) for s in order]
    longest = max((len(s) for s in order), default=10)
    # about 0.055 in per character at 7 pt, plus the handle
    per_entry = 0.45 + 0.055 * longest
    ncol = max(1, min(len(order), int(width_in // per_entry)))
    fig.legend(
        handles,
        list(order),
        loc="outside lower center",
        ncol=ncol,
        frameon=False,
        title=title,
        handlelength=2.2,
        columnspacing=1.2,
    )


def _seeds_note(
    counts: Sequence[int],
    what: str = "mean over seeds, band ±1 sd",
    unit: str = "line",
    single: str = "no band at n = 1",
) -> str:
    """ "mean over seeds, band ±1 sd (n = 3 seeds per line)"; "(n = 1–3 seeds per line; no
    band at n = 1)" when the counts differ; "one run per line (n = 1)" when every one is 1."""
    counts = [c for c in counts if c > 0]
    if not counts:
        return what
    low, high = min(counts), max(counts)
    if high == 1:
        return f"one run per {unit} (n = 1)"
    n = f"n = {low}" if low == high else f"n = {low}–{high}"
    tail = f"; {single}" if low == 1 < high and single else ""
    return f"{what} ({n} seeds per {unit}{tail})"


# --- helpers ------------------------------------------------------------------------------------


def _title(fig: Figure, data: pd.DataFrame, layout: Facets, with_network: bool = False) -> None:
    """What every panel shares, as the figure's title: "digits, resnet18, 4 workers, tau=2"."""
    runs = data.drop_duplicates("run_dir") if "run_dir" in data.columns else data
    parts = [("dataset.name", "{}"), ("model.name", "{}"), ("workers", "{} workers")]
    if with_network:
        parts.append(("network.name", "network {}"))
    context = []
    for column, text in parts:
        if column in runs.columns and runs[column].nunique() == 1 and runs[column].notna().all():
            context.append(text.format(display(runs[column].iloc[0])))
    names = short_names(list(layout.fixed))
    for column in layout.fixed:
        if column in ("workers", "network.name") and any(c == column for c, _ in parts):
            continue
        values = {v for v in run_values(runs, column) if v not in (None, NO_TAU)}
        if len(values) == 1:
            context.append(f"{names[column]}={display(next(iter(values)))}")
    if context:
        fig.suptitle(", ".join(context))


def _save(fig: Figure, out_dir: str | os.PathLike, name: str) -> tuple[Path, Path]:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    png, pdf = out_dir / f"{name}.png", out_dir / f"{name}.pdf"
    with _paper_style():
        # The print size is the figure's size: no tight bounding box that would shrink or grow
        # it (constrained layout already keeps every label inside).
        fig.savefig(png, dpi=DPI)
        # No creation date: a regenerated figure from the same runs is then byte-identical in git.
        fig.savefig(pdf, metadata={"CreationDate": None})
    return png, pdf


def _numbers(values: pd.Series) -> pd.Series:
    return pd.to_numeric(values, errors="coerce").astype(float)


def _finite(values: pd.Series) -> pd.Series:
    """True where `values` is a finite number (a diverged run logs inf/NaN losses)."""
    numbers = _numbers(values)
    return pd.Series(np.isfinite(numbers.to_numpy()), index=values.index)


def _order_key(value: Any) -> tuple:
    """Numbers in order, then the network presets fastest first, then other text; none first
    (`analysis.runs.compare.order_key`, as the tables)."""
    return order_key(value)


def _algorithm_rank(name: str) -> int:
    return ALGORITHMS.index(name) if name in ALGORITHMS else len(ALGORITHMS)


def _label_order(label: str) -> tuple:
    """Order of the settings of one algorithm: by the numbers in its label, then its text."""
    import re

    numbers = tuple(float(n) for n in re.findall(r"=(-?\d+(?:\.\d+)?)", label))
    return (numbers, label)


def _dash_style(dash: object) -> dict[str, object]:
    return {"linestyle": "-"} if not dash else {"dashes": dash}


def _readable(colour: str) -> str:
    """A colour dark enough for text on white: pale palette entries are darkened for tick
    labels (lines and bars keep the palette's colour)."""
    r, g, b = mpl.colors.to_rgb(colour)
    luminance = 0.2126 * r + 0.7152 * g + 0.0722 * b
    if luminance <= 0.7:
        return mpl.colors.to_hex((r, g, b))
    scale = 0.6 / luminance
    return mpl.colors.to_hex((r * scale, g * scale, b * scale))


def _percent(ratio: float) -> str:
    return "–" if ratio is None or not np.isfinite(ratio) else f"{100 * ratio:.1f}%"


def _missing(value: object) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))
