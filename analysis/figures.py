"""Learning curves: a metric against epoch (or steps, seconds, bytes), one curve per label, and the
time figures: metrics against training time (the error-runtime trade-off of Overlap-Local-SGD's
Figure 4) and the per-epoch breakdown of training time into compute, exposed communication, data
loading and the rest.

Colour = algorithm, from one fixed map, so a method looks the same in every figure; line dash =
its tau, when one algorithm appears with several. The band is ±1 std over seeds.

Figures are built as plain `matplotlib.figure.Figure` objects, never through pyplot: saving renders
with Agg (PNG) and the PDF backend, no display is needed or touched, the caller's pyplot backend is
left alone, and no global figure is left open to leak.
"""

from __future__ import annotations

import os
import sys
import zlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from analysis.load import ALGORITHMS, run_label
from experiments.errors import UserError

# matplotlib's tab10, written out so colours do not move with a matplotlib release or style.
_TAB10 = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
)
ALGORITHM_COLOURS: dict[str, str] = dict(zip(ALGORITHMS, _TAB10, strict=True))
# Names outside the contract (a new method under development) get a colour from their name's
# hash: stable across figures and runs, unlike an index into whatever happens to be plotted.
_FALLBACK_COLOURS = ("#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173", "#3182bd", "#31a354")
# Solid for the smallest tau of an algorithm, then increasingly broken lines.
_DASHES = ("", (4, 2), (1, 1.5), (6, 2, 1, 2), (2, 2), (8, 2, 2, 2))

AXIS_LABELS = {
    "epoch": "epoch",
    "step": "step",
    "test/acc": "test accuracy (consensus model)",
    "test/acc_local": "test accuracy (local models, mean)",
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


def curves_figure(frame: pd.DataFrame, x: str = "epoch", y: str = "test/acc") -> Figure:
    """Plot `y` against `x` from a `load_runs` frame, hue = `label`, band = sd over seeds."""
    for column in (x, y):
        if column not in frame.columns:
            raise UserError(f"no column {column!r} in the runs to plot")
    data = frame.dropna(subset=[x, y])
    if data.empty:
        raise UserError(f"no metric rows with both {x!r} and {y!r} to plot")
    data = _with_labels(data)
    order, palette, dashes = _styles(data)

    fig = Figure(figsize=(6.4, 4.0))
    ax = fig.add_subplot()
    kwargs = dict(errorbar="sd")
    if _needs_per_run_lines(data, x):
        # Seeds that never share an x value (wall-clock, bytes) cannot be averaged pointwise;
        # drawing each run keeps the spread visible without inventing an interpolation.
        kwargs = dict(units="run_dir", estimator=None, errorbar=None)
    sns.lineplot(
        data=data,
        x=x,
        y=y,
        hue="label",
        hue_order=order,
        palette=palette,
        style="label",
        style_order=order,
        dashes=dashes,
        ax=ax,
        **kwargs,
    )
    ax.set_xlabel(AXIS_LABELS.get(x, x))
    ax.set_ylabel(AXIS_LABELS.get(y, y))
    ax.set_title(_title(data, x, y))
    ax.grid(alpha=0.3)
    sns.move_legend(ax, "upper left", bbox_to_anchor=(1.01, 1.0), frameon=False, title=None)
    return fig


def accuracy_curves(
    frame: pd.DataFrame,
    out_dir: str | os.PathLike,
    name: str = "test_acc",
    x: str = "epoch",
    y: str = "test/acc",
) -> tuple[Path, Path]:
    """Write the curves of `curves_figure` to `<out_dir>/<name>.png` (150 dpi) and `.pdf`."""
    return _save(curves_figure(frame, x, y), out_dir, name)


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


def time_figure(frame: pd.DataFrame, y: Sequence[str] | str = ("test/acc", "train/loss")) -> Figure:
    """One panel per metric in `y` against `time/train_s` (the error-runtime trade-off).

    Seeds of one label are evaluated at the same epochs but reach them at different times, so
    they cannot be averaged at one x. Each run is drawn as a thin line (gid `run:<run_dir>`);
    when a label has several runs, a bold mean line (gid `mean:<label>`) joins, per epoch that
    every one of its runs evaluated, the mean training time to the mean metric: seeds are
    aligned by epoch, not by an interpolation in time. A label with one run is one normal line.

    The x-axis label names the clock (`clock_of`); runs timed by different clocks are still
    drawn, with a one-line warning on stderr, since their times do not compare.
    """
    metrics = (y,) if isinstance(y, str) else tuple(y)
    if not metrics:
        raise UserError("no metric to plot against training time")
    for column in (TIME, *metrics):
        if column not in frame.columns:
            raise UserError(f"no column {column!r} in the runs to plot")
    data = _with_labels(frame[_finite(frame[TIME])])
    if not any(_finite(data[m]).any() for m in metrics):
        raise UserError(f"no metric rows with both {TIME!r} and one of {list(metrics)} to plot")
    units = "run_dir" if "run_dir" in data.columns else "label"
    order, palette, dashes = _styles(data)
    clock = clock_of(data.drop_duplicates(units))
    if clock == "mixed":
        print(
            "warning: runs timed by different clocks (timing: real and virtual) share one time "
            "axis; their times do not compare",
            file=sys.stderr,
        )

    fig = Figure(figsize=(4.6 * len(metrics), 3.8), layout="constrained")
    axes = fig.subplots(1, len(metrics), squeeze=False)[0]
    for ax, metric in zip(axes, metrics, strict=True):
        panel = data[_finite(data[metric])]
        for label in order:
            rows = panel[panel["label"] == label]
            if rows.empty:
                continue
            style = {"color": palette[label], **_dash_style(dashes[label])}
            runs = list(rows.groupby(units, sort=True))
            mean = _mean_by_epoch(rows, units, metric) if len(runs) > 1 else None
            for unit, run in runs:
                run = run.sort_values(TIME, kind="stable")
                width, alpha = (0.8, 0.35) if mean is not None else (1.4, 1.0)
                ax.plot(run[TIME], run[metric], lw=width, alpha=alpha, gid=f"run:{unit}", **style)
            if mean is not None:
                ax.plot(mean[TIME], mean[metric], lw=1.8, gid=f"mean:{label}", **style)
        ax.set_xlabel(time_axis_label(clock))
        ax.set_ylabel(AXIS_LABELS.get(metric, metric))
        ax.grid(alpha=0.3)
    present = [label for label in order if label in set(data["label"])]
    handles = [
        Line2D([], [], color=palette[label], lw=1.8, **_dash_style(dashes[label]))
        for label in present
    ]
    axes[-1].legend(handles, present, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    context = _context(data.drop_duplicates(units), with_network=True)
    if context:
        fig.suptitle(context, fontsize=10)
    return fig


def time_curves(
    frame: pd.DataFrame,
    out_dir: str | os.PathLike,
    name: str = "time",
    y: Sequence[str] | str = ("test/acc", "train/loss"),
) -> tuple[Path, Path]:
    """Write `time_figure` to `<out_dir>/<name>.png` (150 dpi) and `.pdf`."""
    return _save(time_figure(frame, y), out_dir, name)


def time_per_epoch(frame: pd.DataFrame) -> pd.DataFrame:
    """Training time per epoch by part, one row per label (legend order), mean over seeds.

    Each run's last evaluation (largest `epoch`) holds its cumulative ledger; each part is divided
    by that `epoch`, then averaged over the label's runs. Columns: `compute_s`, `comm_exposed_s`,
    `data_s` (only when logged), `other_s` = train - compute - exposed - data, clipped at 0 per
    run (a real clock's parts can add up to a hair more than the total), `train_s`, `comm_ratio`
    (mean of the runs' final `comm/ratio`, or exposed / compute where that is not logged) and
    `runs`.
    """
    for column in BREAKDOWN_COLUMNS:
        if column not in frame.columns:
            raise UserError(f"no column {column!r} in the runs for a time breakdown")
    data = frame
    for column in BREAKDOWN_COLUMNS:
        data = data[_finite(data[column])]
    data = _with_labels(data[pd.to_numeric(data["epoch"]) > 0])
    if data.empty:
        raise UserError("no evaluation rows with a time ledger for a time breakdown")
    order, _, _ = _styles(data)
    units = "run_dir" if "run_dir" in data.columns else "label"
    last = data.sort_values("epoch", kind="stable").groupby(units, sort=False).tail(1)

    def column(name: str) -> pd.Series:
        return pd.to_numeric(last[name], errors="coerce").astype(float)

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
    table = per_run.groupby("label", sort=False).mean()
    table["runs"] = per_run.groupby("label", sort=False).size()
    return table.reindex([label for label in order if label in table.index])


def breakdown_figure(frame: pd.DataFrame) -> Figure:
    """Stacked horizontal bars of `time_per_epoch`, one per label, each annotated with its
    communication-to-computation ratio in percent (exposed communication / compute)."""
    table = time_per_epoch(frame)
    data = _with_labels(frame)
    _, palette, _ = _styles(data)
    units = "run_dir" if "run_dir" in data.columns else "label"
    runs = data[data["label"].isin(table.index)].drop_duplicates(units)

    fig = Figure(figsize=(7.2, 1.4 + 0.42 * len(table)), layout="constrained")
    ax = fig.add_subplot()
    positions = np.arange(len(table))
    left = np.zeros(len(table))
    for key, text, colour in _SEGMENTS:
        if key not in table.columns:
            continue
        if key == "other_s" and "data_s" not in table.columns:
            text = "other (incl. data loading)"
        values = table[key].to_numpy(dtype=float)
        ax.barh(positions, values, left=left, height=0.62, color=colour, label=text)
        left = left + values
    for position, total, ratio in zip(positions, left, table["comm_ratio"], strict=True):
        ax.annotate(
            _percent(ratio),
            xy=(total, position),
            xytext=(4, 0),
            textcoords="offset points",
            va="center",
            ha="left",
            fontsize=8,
        )
    ax.set_yticks(positions, labels=list(table.index))
    for tick, label in zip(ax.get_yticklabels(), table.index, strict=True):
        tick.set_color(palette[label])
    ax.invert_yaxis()
    ax.set_xlim(0, (left.max() if len(left) and left.max() > 0 else 1.0) * 1.18)
    ax.set_xlabel(time_axis_label(clock_of(runs), "training time per epoch"))
    ax.grid(axis="x", alpha=0.3)
    ax.set_axisbelow(True)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    title = "training time per epoch (mean over seeds); % = exposed communication / compute"
    context = _context(runs, with_network=True)
    ax.set_title(f"{title}\n{context}" if context else title, fontsize=9)
    return fig


def time_breakdown(
    frame: pd.DataFrame, out_dir: str | os.PathLike, name: str = "time_breakdown"
) -> tuple[Path, Path]:
    """Write `breakdown_figure` to `<out_dir>/<name>.png` (150 dpi) and `.pdf`."""
    return _save(breakdown_figure(frame), out_dir, name)


def _with_labels(data: pd.DataFrame) -> pd.DataFrame:
    if "label" in data.columns:
        return data
    algorithm = data.get("algorithm.name", pd.Series(None, index=data.index))
    tau = data.get("tau", pd.Series(None, index=data.index))
    labels = [run_label(a, t) for a, t in zip(algorithm, tau, strict=True)]
    return data.assign(label=labels)


def _styles(data: pd.DataFrame) -> tuple[list[str], dict[str, str], dict[str, object]]:
    per_label = data.groupby("label", sort=False).first()
    algorithm = per_label.get("algorithm.name", pd.Series(per_label.index, index=per_label.index))
    tau = pd.to_numeric(per_label.get("tau", pd.Series(0, index=per_label.index)), errors="coerce")

    def key(label: str) -> tuple:
        name = algorithm[label]
        rank = ALGORITHMS.index(name) if name in ALGORITHMS else len(ALGORITHMS)
        return (rank, str(name), tau[label] if pd.notna(tau[label]) else -1.0, label)

    order = sorted(per_label.index, key=key)
    palette = {label: algorithm_colour(algorithm[label]) for label in order}
    dashes, seen = {}, {}
    for label in order:
        index = seen.get(algorithm[label], 0)
        seen[algorithm[label]] = index + 1
        dashes[label] = _DASHES[index % len(_DASHES)]
    return order, palette, dashes


def _needs_per_run_lines(data: pd.DataFrame, x: str) -> bool:
    if "run_dir" not in data.columns:
        return False
    runs_per_label = data.groupby("label")["run_dir"].nunique()
    runs_per_point = data.groupby(["label", x])["run_dir"].nunique().groupby(level=0).max()
    return bool(((runs_per_label > 1) & (runs_per_point == 1)).any())


def _title(data: pd.DataFrame, x: str, y: str) -> str:
    title = f"{AXIS_LABELS.get(y, y)} vs {AXIS_LABELS.get(x, x)}"
    context = _context(data)
    return f"{title}\n{context}" if context else title


def _context(data: pd.DataFrame, with_network: bool = False) -> str:
    """What all runs share: "digits, resnet18, 4 workers[, network ethernet40g]"."""
    parts = [("dataset.name", "{}"), ("model.name", "{}"), ("workers", "{} workers")]
    if with_network:
        parts.append(("network.name", "network {}"))
    context = []
    for column, text in parts:
        if column in data.columns and data[column].nunique() == 1 and data[column].notna().all():
            context.append(text.format(data[column].iloc[0]))
    return ", ".join(context)


def _save(fig: Figure, out_dir: str | os.PathLike, name: str) -> tuple[Path, Path]:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    png, pdf = out_dir / f"{name}.png", out_dir / f"{name}.pdf"
    fig.savefig(png, dpi=150, bbox_inches="tight")
    # No creation date: a regenerated figure from the same runs is then byte-identical in git.
    fig.savefig(pdf, bbox_inches="tight", metadata={"CreationDate": None})
    return png, pdf


def _finite(values: pd.Series) -> pd.Series:
    """True where `values` is a finite number (a diverged run logs inf/NaN losses)."""
    numbers = pd.to_numeric(values, errors="coerce").astype(float)
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


def _dash_style(dash: object) -> dict[str, object]:
    return {"linestyle": "-"} if not dash else {"dashes": dash}


def _percent(ratio: float) -> str:
    return "–" if ratio is None or not np.isfinite(ratio) else f"{100 * ratio:.1f}%"


def _missing(value: object) -> bool:
    return value is None or (isinstance(value, float) and np.isnan(value))
