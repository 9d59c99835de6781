"""Figures for a paper: learning curves, metrics against training time (the error-runtime
trade-off of Overlap-Local-SGD's Figure 4) and the per-epoch breakdown of training time into
compute, exposed communication, data loading and the rest.

Small multiples, never one crowded axis. The runs are cut into series exactly as the tables cut
them into rows (`analysis.compare.split_rows`: every configuration key that varies, never pooled),
then laid out (`facets`): one panel per `tau` when several are present (the tau-less methods,
which do not depend on it, drawn in every panel), one panel row per other varying setting
(`compute.slowdown`, `network.name`, `workers`, `scale.name`, ...), and within a panel one line
per method and knob (PowerSGD's ranks are separate series). Panels share their axes.

Colour = algorithm, from one fixed colour-blind-safe map (seaborn's "colorblind" palette, its
yellow replaced by black for the sync-SGD baseline, and four colours of Paul Tol's "muted" scheme
for BMUF, SlowMo, DiLoCo and Streaming DiLoCo), so a method looks the same in every figure;
line dash = the knob setting within an algorithm. Lines are the mean over seeds and bands ±1
sample standard deviation; the legend says so with the number of seeds. Sizes are for print: a
panel is 1.75 in wide, two panels fill one column (3.5 in), fonts are 7-8 pt, the legend sits
below the panels.

Figures are built as plain `matplotlib.figure.Figure` objects, never through pyplot: saving renders
with Agg (PNG) and the PDF backend, no display is needed or touched, the caller's pyplot backend is
left alone, and no global figure is left open to leak.
"""

from __future__ import annotations

import math
import os
import sys
import zlib
from collections.abc import Iterator, Sequence
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
from matplotlib.patches import Patch

from analysis.compare import (
    NO_TAU,
    display,
    order_key,
    run_values,
    series_label,
    short_names,
    split_rows,
)
from analysis.load import ALGORITHMS
from experiments.errors import UserError

# seaborn's "colorblind" palette (Okabe-Ito-like, safe for the common colour-vision deficiencies),
# written out so colours do not move with a seaborn release; its pale yellow is replaced by black,
# which marks the baseline. The pale pink goes to the method seen least often with many others.
# Four more from Paul Tol's "muted" scheme (also colour-blind safe) for the later methods.
ALGORITHM_COLOURS: dict[str, str] = {
    "sync_sgd": "#000000",
    "local_sgd": "#0173b2",
    "powersgd": "#ca9161",
    "easgd": "#029e73",
    "eamsgd": "#de8f05",
    "cocod_sgd": "#cc78bc",
    "overlap_local_sgd": "#d55e00",
    "pseudo_sync": "#fbafe4",
    "osp": "#949494",
    "losp": "#56b4e9",
    # The outer-optimizer family (issue 17), from Paul Tol's colour-blind-safe "muted" scheme:
    # hues and lightness apart from the ten above (the dark indigo and wine of the DiLoCo pair
    # stand out beside Local SGD's blue and Overlap-Local-SGD's orange in experiment=low_comm).
    "bmuf": "#cc6677",
    "slowmo": "#999933",
    "diloco": "#332288",
    "streaming_diloco": "#882255",
}
# Names outside the contract (a new method under development) get a colour from their name's
# hash: stable across figures and runs, unlike an index into whatever happens to be plotted.
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
    if name in ALGORITHM_COLOURS:
        return ALGORITHM_COLOURS[name]
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


# --- learning curves ----------------------------------------------------------------------------


def curves_figure(
    frame: pd.DataFrame, x: str = "epoch", y: str = "test/acc", rows: Sequence[str] | None = None
) -> Figure:
    """`y` against `x` from a `load_runs` frame, in small multiples (`facets`): per series the
    mean over its seeds at each `x` and a band of ±1 sd where two or more seeds share it. Seeds
    that never share an `x` (wall-clock, bytes) are drawn one thin line per run instead."""
    for column in (x, y):
        if column not in frame.columns:
            raise UserError(f"no column {column!r} in the runs to plot")
    data = frame[_finite(frame[x]) & _finite(frame[y])]
    if data.empty:
        raise UserError(f"no metric rows with both {x!r} and {y!r} to plot")
    data, layout = _prepare(data, rows)
    order, palette, dashes = _styles(data)
    grid = _wrap(_panels(data, layout))
    units = "run_dir" if "run_dir" in data.columns else "_series"
    counts = []
    with _paper_style():
        fig, axes = _grid_figure(grid)
        for r, line in enumerate(grid):
            for c, panel in enumerate(line):
                if panel is None:
                    continue
                ax = axes[r, c]
                rows_here = _in_panel(data, panel, layout)
                for series in order:
                    part = rows_here[rows_here["_series"] == series]
                    if part.empty:
                        continue
                    counts.append(part[units].nunique())
                    _draw_mean_and_band(ax, part, x, y, units, palette[series], dashes[series])
                ax.grid(alpha=0.3, lw=0.4)
        for ax in _bottom_axes(grid, axes):
            ax.set_xlabel(AXIS_LABELS.get(x, x))
        fig.supylabel(AXIS_LABELS.get(y, y))
        _title(fig, data, layout)
        _legend(fig, order, palette, dashes, _seeds_note(counts), fig.get_figwidth())
    return fig


def _draw_mean_and_band(
    ax: Axes, part: pd.DataFrame, x: str, y: str, units: str, colour: str, dash: object
) -> None:
    style = {"color": colour, **_dash_style(dash)}
    numbers = part.assign(_x=_numbers(part[x]), _y=_numbers(part[y]))
    runs = numbers[units].nunique()
    shared = numbers.groupby("_x")[units].nunique().max()
    if runs > 1 and shared == 1:
        # Seeds that never share an x value (wall-clock, bytes) cannot be averaged pointwise;
        # drawing each run keeps the spread visible without inventing an interpolation.
        for unit, run in numbers.groupby(units, sort=True):
            run = run.sort_values("_x", kind="stable")
            ax.plot(run["_x"], run["_y"], lw=0.9, alpha=0.8, gid=f"run:{unit}", **style)
        return
    stats = numbers.groupby("_x")["_y"].agg(["mean", "std", "count"]).sort_index()
    ax.plot(stats.index, stats["mean"], gid=f"mean:{part['_series'].iat[0]}", **style)
    banded = stats["count"] >= 2
    if banded.any():
        ax.fill_between(
            stats.index[banded],
            (stats["mean"] - stats["std"])[banded],
            (stats["mean"] + stats["std"])[banded],
            color=colour,
            alpha=0.15,
            lw=0,
        )


def accuracy_curves(
    frame: pd.DataFrame,
    out_dir: str | os.PathLike,
    name: str = "test_acc",
    x: str = "epoch",
    y: str = "test/acc",
    rows: Sequence[str] | None = None,
) -> tuple[Path, Path]:
    """Write the curves of `curves_figure` to `<out_dir>/<name>.png` and `.pdf`."""
    return _save(curves_figure(frame, x, y, rows), out_dir, name)


# --- time -------------------------------------------------------------------------------------

TIME = "time/train_s"
# What a breakdown needs; `time/data_s` is optional (older runs did not log it).
BREAKDOWN_COLUMNS = ("epoch", TIME, "time/compute_s", "time/comm_exposed_s")
# Breakdown segments, left to right: (key in `time_per_epoch`, legend text, colour). Neutral
# greys for compute and the rest, so the eye goes to the communication that was not hidden.
_SEGMENTS = (
    ("compute_s", "compute", "#8c96a6"),
    ("comm_exposed_s", "exposed communication", "#c44e52"),
    ("data_s", "data loading", "#e5ae38"),
    ("other_s", "other", "#d9d9d9"),
)


def clock_of(frame: pd.DataFrame) -> str:
    """Which clock timed the runs of `frame`: "virtual", "real" or "mixed".

    Read from the config's `timing`; a run without that key predates the virtual clock and was
    timed by the wall clock (the config default is `real`).
    """
    column = frame["timing"] if "timing" in frame.columns else pd.Series("real", frame.index)
    clocks = {"real" if _missing(v) else str(v).strip().lower() for v in column}
    if clocks <= {"virtual"} and clocks:
        return "virtual"
    if clocks <= {"real"}:
        return "real"
    return "mixed"


def time_axis_label(clock: str, what: str = "training time") -> str:
    """The axis label naming the clock: "training time, virtual (s)", "..., wall-clock (s)", or
    "training time (s; mixed clocks)"."""
    if clock == "virtual":
        return f"{what}, virtual (s)"
    if clock == "real":
        return f"{what}, wall-clock (s)"
    return f"{what} (s; mixed clocks)"


def time_figure(
    frame: pd.DataFrame,
    y: Sequence[str] | str = ("test/acc", "train/loss"),
    rows: Sequence[str] | None = None,
) -> Figure:
    """Each metric in `y` against `time/train_s` (the error-runtime trade-off): one panel
    column per metric, one panel row per facet (`facets`: per tau, per setting).

    Seeds of one series are evaluated at the same epochs but reach them at different times, so
    they cannot be averaged at one x. Each run is drawn as a thin line (gid `run:<run_dir>`);
    when a series has several runs, a bold mean line (gid `mean:<series>`) joins, per epoch that
    every one of its runs evaluated, the mean training time to the mean metric: seeds are
    aligned by epoch, not by an interpolation in time. A series with one run is one normal line.

    The x-axis label names the clock (`clock_of`); runs timed by different clocks are still
    drawn, with a one-line warning on stderr, since their times do not compare.
    """
    metrics = (y,) if isinstance(y, str) else tuple(y)
    if not metrics:
        raise UserError("no metric to plot against training time")
    for column in (TIME, *metrics):
        if column not in frame.columns:
            raise UserError(f"no column {column!r} in the runs to plot")
    data = frame[_finite(frame[TIME])]
    if not any(_finite(data[m]).any() for m in metrics):
        raise UserError(f"no metric rows with both {TIME!r} and one of {list(metrics)} to plot")
    data, layout = _prepare(data, rows)
    units = "run_dir" if "run_dir" in data.columns else "_series"
    order, palette, dashes = _styles(data)
    clock = clock_of(data.drop_duplicates(units))
    if clock == "mixed":
        print(
            "warning: runs timed by different clocks (timing: real and virtual) share one time "
            "axis; their times do not compare",
            file=sys.stderr,
        )
    panels = [p for line in _panels(data, layout) for p in line]
    counts = []
    with _paper_style():
        ncols = len(metrics)
        width = max(COLUMN_WIDTH_IN, PANEL_WIDTH_IN * ncols)
        height = PANEL_HEIGHT_IN * len(panels) + 0.9 if panels[0].title else 2.9
        fig = Figure(figsize=(width, height), layout="constrained")
        axes = fig.subplots(len(panels), ncols, sharex=True, sharey="col", squeeze=False)
        for r, panel in enumerate(panels):
            here = _in_panel(data, panel, layout)
            for c, metric in enumerate(metrics):
                ax = axes[r, c]
                rows_here = here[_finite(here[metric])]
                for series in order:
                    part = rows_here[rows_here["_series"] == series]
                    if part.empty:
                        continue
                    if c == 0:
                        counts.append(part[units].nunique())
                    _draw_runs_and_mean(ax, part, units, metric, palette[series], dashes[series])
                ax.grid(alpha=0.3, lw=0.4)
                if r == 0:
                    ax.set_title(AXIS_LABELS.get(metric, metric), pad=3)
                if c == 0 and panel.title:
                    ax.set_ylabel(panel.title)
                if r == len(panels) - 1:
                    ax.set_xlabel(time_axis_label(clock))
        _title(fig, data.drop_duplicates(units), layout, with_network=True)
        note = _seeds_note(
            counts, "thin: each run; bold: mean over seeds per epoch", single="no mean at n = 1"
        )
        _legend(fig, order, palette, dashes, note, width)
    return fig


def _draw_runs_and_mean(
    ax: Axes, part: pd.DataFrame, units: str, metric: str, colour: str, dash: object
) -> None:
    style = {"color": colour, **_dash_style(dash)}
    runs = list(part.groupby(units, sort=True))
    mean = _mean_by_epoch(part, units, metric) if len(runs) > 1 else None
    for unit, run in runs:
        run = run.sort_values(TIME, kind="stable")
        width, alpha = (0.6, 0.35) if mean is not None else (1.2, 1.0)
        ax.plot(
            _numbers(run[TIME]),
            _numbers(run[metric]),
            lw=width,
            alpha=alpha,
            gid=f"run:{unit}",
            **style,
        )
    if mean is not None:
        ax.plot(mean[TIME], mean[metric], lw=1.4, gid=f"mean:{part['_series'].iat[0]}", **style)


def time_curves(
    frame: pd.DataFrame,
    out_dir: str | os.PathLike,
    name: str = "time",
    y: Sequence[str] | str = ("test/acc", "train/loss"),
    rows: Sequence[str] | None = None,
) -> tuple[Path, Path]:
    """Write `time_figure` to `<out_dir>/<name>.png` and `.pdf`."""
    return _save(time_figure(frame, y, rows), out_dir, name)


def time_per_epoch(frame: pd.DataFrame, rows: Sequence[str] | None = None) -> pd.DataFrame:
    """Training time per epoch by part, one row per series (the tables' label, legend order),
    mean over seeds.

    Each run's last evaluation (largest `epoch`) holds its cumulative ledger; each part is divided
    by that `epoch`, then averaged over the series' runs. Columns: `compute_s`, `comm_exposed_s`,
    `data_s` (only when logged), `other_s` = train - compute - exposed - data, clipped at 0 per
    run (a real clock's parts can add up to a hair more than the total), `train_s`, `comm_ratio`
    (mean of the runs' final `comm/ratio`, or exposed / compute where that is not logged), `runs`,
    and the layout keys `_series`, `_algorithm`, `_col`, `_row` (see `facets`).
    """
    for column in BREAKDOWN_COLUMNS:
        if column not in frame.columns:
            raise UserError(f"no column {column!r} in the runs for a time breakdown")
    data = frame
    for column in BREAKDOWN_COLUMNS:
        data = data[_finite(data[column])]
    data = data[_numbers(data["epoch"]) > 0]
    if data.empty:
        raise UserError("no evaluation rows with a time ledger for a time breakdown")
    data, layout = _prepare(data, rows, copy_tau_less=False)
    table = _per_epoch(data)
    table.attrs["facets"] = layout
    return table


def _per_epoch(data: pd.DataFrame) -> pd.DataFrame:
    units = "run_dir" if "run_dir" in data.columns else "label"
    keys = [units, "_col", "_row"]
    last = (
        data.assign(_epoch=_numbers(data["epoch"]))
        .sort_values("_epoch", kind="stable")
        .groupby(keys, sort=False, dropna=False)
        .tail(1)
    )

    def column(name: str) -> pd.Series:
        return _numbers(last[name])

    epochs = column("epoch")
    compute, exposed, train = column("time/compute_s"), column("time/comm_exposed_s"), column(TIME)
    has_data = "time/data_s" in last.columns and last["time/data_s"].notna().any()
    data_s = column("time/data_s").fillna(0.0) if has_data else pd.Series(0.0, last.index)
    ratio = (exposed / compute).where(compute > 0)
    if "comm/ratio" in last.columns:
        ratio = column("comm/ratio").fillna(ratio)
    per_run = pd.DataFrame(
        {
            "label": last["label"],
            "_series": last["_series"],
            "_algorithm": last["_algorithm"],
            "_col": last["_col"],
            "_row": last["_row"],
            "compute_s": compute / epochs,
            "comm_exposed_s": exposed / epochs,
            "data_s": data_s / epochs,
            "other_s": (train - compute - exposed - data_s).clip(lower=0.0) / epochs,
            "train_s": train / epochs,
            "comm_ratio": ratio,
        }
    )
    if not has_data:
        per_run = per_run.drop(columns="data_s")
    keys = ["label", "_series", "_algorithm", "_col", "_row"]
    group = per_run.groupby("label", sort=False)
    table = group[[c for c in per_run.columns if c not in keys]].mean()
    table["runs"] = group.size()
    for key in keys:
        table[key] = group[key].first()
    order, _, _ = _styles(per_run)
    rank = {s: i for i, s in enumerate(order)}
    table = table.iloc[
        sorted(
            range(len(table)),
            key=lambda i: (
                _algorithm_rank(table["_algorithm"].iat[i]),
                _order_key(table["_col"].iat[i]),
                _order_key(table["_row"].iat[i]),
                rank[table["_series"].iat[i]],
            ),
        )
    ]
    return table.rename_axis(None)


def breakdown_figure(frame: pd.DataFrame, rows: Sequence[str] | None = None) -> Figure:
    """Stacked horizontal bars of `time_per_epoch`, one per series, in one panel per facet
    (stacked vertically, shared x), each bar annotated with its communication-to-computation
    ratio in percent (exposed communication / compute)."""
    table = time_per_epoch(frame, rows)
    layout: Facets = table.attrs["facets"]
    _, palette, _ = _styles(table)
    panels = [p for line in _panels(table[~_tau_less_rows(table, layout)], layout) for p in line]
    per_panel = [table[_panel_mask(table, p, layout)] for p in panels]
    runs = frame.drop_duplicates("run_dir") if "run_dir" in frame.columns else frame
    bars = sum(len(p) for p in per_panel)
    with _paper_style():
        height = 0.17 * bars + 0.35 * len(panels) + 1.1
        fig = Figure(figsize=(COLUMN_WIDTH_IN, height), layout="constrained")
        ratios = [max(len(p), 1) for p in per_panel]
        axes = fig.subplots(len(panels), 1, sharex=True, squeeze=False, height_ratios=ratios)[:, 0]
        right = float(np.nanmax(table["train_s"].to_numpy(dtype=float))) if len(table) else 1.0
        for ax, panel, rows_here in zip(axes, panels, per_panel, strict=True):
            _bars(ax, rows_here, palette)
            if panel.title:
                ax.set_title(panel.title, pad=3)
        axes[-1].set_xlim(0, (right if right > 0 else 1.0) * 1.25)
        axes[-1].set_xlabel(time_axis_label(clock_of(runs), "training time per epoch"))
        handles = [
            Patch(color=colour, label=_segment_text(key, text, table))
            for key, text, colour in _SEGMENTS
            if key in table.columns
        ]
        fig.legend(
            handles=handles,
            loc="outside lower center",
            ncol=2,
            frameon=False,
            title=_seeds_note(list(table["runs"]), "per epoch, mean over seeds", "bar", "")
            + "\n% = exposed communication / compute",
        )
        _title(fig, runs, layout, with_network=True)
    return fig


def _segment_text(key: str, text: str, table: pd.DataFrame) -> str:
    if key == "other_s" and "data_s" not in table.columns:
        return "other (incl. data loading)"
    return text


def _bars(ax: Axes, rows: pd.DataFrame, palette: dict[str, str]) -> None:
    positions = np.arange(len(rows))
    left = np.zeros(len(rows))
    for key, text, colour in _SEGMENTS:
        if key not in rows.columns:
            continue
        values = rows[key].to_numpy(dtype=float)
        ax.barh(
            positions,
            values,
            left=left,
            height=0.7,
            color=colour,
            label=_segment_text(key, text, rows),
        )
        left = left + values
    for position, total, ratio in zip(positions, left, rows["comm_ratio"], strict=True):
        ax.annotate(
            _percent(ratio),
            xy=(total, position),
            xytext=(3, 0),
            textcoords="offset points",
            va="center",
            ha="left",
            fontsize=7,
        )
    labels = list(rows["_series"])
    ax.set_yticks(positions, labels=labels)
    for tick, series in zip(ax.get_yticklabels(), labels, strict=True):
        tick.set_color(_readable(palette[series]))
    ax.set_ylim(len(rows) - 0.5, -0.5)  # first series on top
    ax.grid(axis="x", alpha=0.3, lw=0.4)
    ax.set_axisbelow(True)


def _tau_less_rows(table: pd.DataFrame, layout: Facets) -> np.ndarray:
    """Rows of the methods that do not depend on tau, in a layout with a panel per tau."""
    if layout.col != "tau":
        return np.zeros(len(table), dtype=bool)
    return np.array([v in (None, NO_TAU) for v in table["_col"]], dtype=bool)


def _panel_mask(table: pd.DataFrame, panel: _Panel, layout: Facets) -> np.ndarray:
    """The rows drawn in `panel`: its own, and the tau-less methods' in every tau panel."""
    mask = np.ones(len(table), dtype=bool)
    if layout.col:
        mask &= np.array([v == panel.col for v in table["_col"]], dtype=bool)
        mask |= _tau_less_rows(table, layout)
    if layout.row:
        mask &= np.array([v == panel.row for v in table["_row"]], dtype=bool)
    return mask


def time_breakdown(
    frame: pd.DataFrame,
    out_dir: str | os.PathLike,
    name: str = "time_breakdown",
    rows: Sequence[str] | None = None,
) -> tuple[Path, Path]:
    """Write `breakdown_figure` to `<out_dir>/<name>.png` and `.pdf`."""
    return _save(breakdown_figure(frame, rows), out_dir, name)


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


def _mean_by_epoch(rows: pd.DataFrame, units: str, metric: str) -> pd.DataFrame | None:
    """Mean (time, metric) per epoch over the runs in `rows`, at the epochs all of them logged;
    None when there is no epoch to align on."""
    if "epoch" not in rows.columns:
        return None
    rows = rows[_finite(rows["epoch"])].drop_duplicates([units, "epoch"], keep="last")
    runs = rows[units].nunique()
    shared = rows.groupby("epoch")[units].nunique()
    shared = shared[shared == runs].index
    if len(shared) == 0:
        return None
    rows = rows[rows["epoch"].isin(shared)]
    means = rows.groupby("epoch")[[TIME, metric]].agg(lambda v: pd.to_numeric(v).mean())
    return means.sort_index()


def _order_key(value: Any) -> tuple:
    """Numbers in order, then the network presets fastest first, then other text; none first
    (`analysis.compare.order_key`, as the tables)."""
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
