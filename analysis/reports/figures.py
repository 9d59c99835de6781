"""Figures for a paper: learning curves, metrics against training time (the error-runtime
trade-off of Overlap-Local-SGD's Figure 4) and the per-epoch breakdown of training time into
compute, exposed communication, data loading and the rest.

Small multiples, never one crowded axis. The runs are cut into series exactly as the tables cut
them into rows (`analysis.runs.compare.split_rows`: every configuration key that varies, never
pooled), then laid out (`facets`): one panel per `tau` when several are present (the tau-less
methods, which do not depend on it, drawn in every panel), one panel row per other varying setting
(`compute.slowdown`, `network.name`, `workers`, `scale.name`, ...), and within a panel one line
per method and knob (PowerSGD's ranks are separate series). Panels share their axes.

Colour = algorithm, its fixed colour-blind-safe colour in the registry (algorithms.TABLE; the
layout and colours: analysis/reports/figure_layout.py), so a method looks the same in every figure;
line dash = the knob setting within an algorithm. Lines are the mean over seeds and bands ±1
sample standard deviation; the legend says so with the number of seeds. Sizes are for print: a
panel is 1.75 in wide, two panels fill one column (3.5 in), fonts are 7-8 pt, the legend sits
below the panels.

Figures are built as plain `matplotlib.figure.Figure` objects, never through pyplot: saving renders
with Agg (PNG) and the PDF backend, no display is needed or touched, the caller's pyplot backend is
left alone, and no global figure is left open to leak.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from analysis.reports.figure_layout import (
    ALGORITHM_COLOURS,
    AXIS_LABELS,
    COLUMN_WIDTH_IN,
    DPI,
    PANEL_HEIGHT_IN,
    PANEL_WIDTH_IN,
    PAPER_RC,
    Facets,
    _algorithm_rank,
    _bottom_axes,
    _dash_style,
    _finite,
    _grid_figure,
    _in_panel,
    _legend,
    _missing,
    _numbers,
    _order_key,
    _Panel,
    _panels,
    _paper_style,
    _percent,
    _prepare,
    _readable,
    _save,
    _seeds_note,
    _styles,
    _title,
    _wrap,
    algorithm_colour,
    facets,
)
from analysis.runs.compare import NO_TAU
from experiments.errors import UserError

__all__ = [
    "ALGORITHM_COLOURS",
    "AXIS_LABELS",
    "BREAKDOWN_COLUMNS",
    "COLUMN_WIDTH_IN",
    "DPI",
    "PANEL_HEIGHT_IN",
    "PANEL_WIDTH_IN",
    "PAPER_RC",
    "TIME",
    "Facets",
    "accuracy_curves",
    "algorithm_colour",
    "breakdown_figure",
    "clock_of",
    "curves_figure",
    "facets",
    "time_axis_label",
    "time_breakdown",
    "time_curves",
    "time_figure",
    "time_per_epoch",
]


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
                rows_here = rows_here[_drawn(rows_here, units, x, y)]  # (as in `time_figure`)
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


def _drawn(rows: pd.DataFrame, units: str, x: str, y: str) -> list[str]:
    """The columns a panel's curves read (`_draw_mean_and_band`, `_draw_runs_and_mean`)."""
    wanted = (units, "_series", x, y, "epoch", TIME)
    return [c for c in dict.fromkeys(wanted) if c in rows.columns]


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
                # the columns drawn: a report's rows carry every config key, which each
                # series' selection below would copy
                rows_here = here.loc[_finite(here[metric]), _drawn(here, units, TIME, metric)]
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
