"""Learning curves: a metric against epoch (or steps, seconds, bytes), one curve per label.

Colour = algorithm, from one fixed map, so a method looks the same in every figure; line dash =
its tau, when one algorithm appears with several. The band is ±1 std over seeds.

Figures are built as plain `matplotlib.figure.Figure` objects, never through pyplot: saving renders
with Agg (PNG) and the PDF backend, no display is needed or touched, the caller's pyplot backend is
left alone, and no global figure is left open to leak.
"""

from __future__ import annotations

import os
import zlib
from pathlib import Path

import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure

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
    fig = curves_figure(frame, x, y)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    png, pdf = out_dir / f"{name}.png", out_dir / f"{name}.pdf"
    fig.savefig(png, dpi=150, bbox_inches="tight")
    # No creation date: a regenerated figure from the same runs is then byte-identical in git.
    fig.savefig(pdf, bbox_inches="tight", metadata={"CreationDate": None})
    return png, pdf


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
    context = []
    for column, unit in (("dataset.name", ""), ("model.name", ""), ("workers", " workers")):
        if column in data.columns and data[column].nunique() == 1:
            context.append(f"{data[column].iloc[0]}{unit}")
    return f"{title}\n{', '.join(context)}" if context else title
