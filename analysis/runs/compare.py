"""Like with like: the configuration keys that tell a set of runs apart, and the labels made of
them.

A table row, a figure series or a side of a claim pools the seeds of one configuration and
nothing else. Two runs belong together when every key of their resolved configurations that is
part of a run's identity (`experiments.config.identity.is_identity_key`: not `out_root`, W&B, the
launcher, ...) is equal, except the seed, and except `tau` for the methods that do not use it
(`TAU_LESS`: they communicate every step, so their runs at any `tau` are one configuration).

`split_rows` finds the keys that vary among the runs loaded and chooses the few that name the
groups: the requested rows (`algorithm.name`, `tau`, or a preset's `report.rows`) and then, in
the order of `priority`, each varying key that splits a group further, until the rows separate
exactly what the full configurations separate. A key that varies but is fixed within every row
(a scale's `model.width` beside `scale.name`) is named in the note, not shown. `series_label` is
the one labelling function: tables show the chosen keys as columns and the figures' legends
show the same keys as `local_sgd (tau=2)`, `powersgd (rank=4)`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from analysis.runs.grid import canonical
from analysis.runs.load import METRIC_KEYS, NETWORKS, TAU_LESS
from experiments.config import identity

NO_TAU = "-"
DEFAULT_ROWS = ("algorithm.name", "tau")

# Keys that say at once which of several set-ups a run belongs to; shown before the keys they
# determine (a scale sets workers, epochs and the model's width).
CONTEXT_KEYS = ("scale.name", "dataset.name", "model.name")


def series_keys() -> tuple[str, ...]:
    """The series-defining keys (experiments.config.identity.SERIES_KEYS: the one list W&B's tags
    use too) as config columns; `algorithm.*` stands for every knob of the run's algorithm."""
    from analysis.runs.grid import grid_column

    return tuple(grid_column(str(key)) for key in identity.SERIES_KEYS)


def priority(column: str) -> tuple:
    """Sort key of a column among those that could name rows: the algorithm, tau, its knobs
    among the series keys, the context keys, the other series keys, the other algorithm knobs,
    then every other key alphabetically."""
    series = [k for k in series_keys() if k not in DEFAULT_ROWS]
    knobs = [k for k in series if k.startswith("algorithm.")]
    others = [k for k in series if not k.startswith("algorithm.")]
    order = [*DEFAULT_ROWS, *knobs, *CONTEXT_KEYS, *others]
    if column in order:
        return (order.index(column), "")
    if column.startswith("algorithm."):  # a knob: where `algorithm.*` stands, by name
        return (order.index("algorithm.*") if "algorithm.*" in order else len(order), column)
    return (len(order) + 1, column)


def identity_columns(runs: pd.DataFrame) -> list[str]:
    """The columns of a `load_summaries` frame that hold configuration keys of a run's identity
    (a config key that shares a metric's name, `lr`, is the column `config.lr`)."""
    out = []
    for column in runs.columns:
        column = str(column)
        if column in ("run_dir", "label") or column.startswith(("summary.", "metrics.")):
            continue
        if column in METRIC_KEYS or "/" in column:  # metric rows of a `load_runs` frame
            continue
        if identity.is_identity_key(column.removeprefix("config.")):
            out.append(column)
    return out


def run_values(runs: pd.DataFrame, column: str) -> list[Any]:
    """The canonical value of `column` per run (None where a run lacks it), `tau` as "-" for
    the tau-less methods."""
    if column not in runs.columns:
        return [None] * len(runs)
    values = [canonical(v) for v in runs[column]]
    if column == "tau" and "algorithm.name" in runs.columns:
        values = [
            NO_TAU if name in TAU_LESS else v
            for name, v in zip(runs["algorithm.name"], values, strict=True)
        ]
    return values


def varying_columns(runs: pd.DataFrame, exclude: Iterable[str] = ("seed",)) -> list[str]:
    """The identity columns that take more than one value among `runs` (one row per run), in
    `priority` order; `seed` left out."""
    runs = _one_per_run(runs)
    excluded = set(exclude)
    varying = [
        c for c in identity_columns(runs) if c not in excluded and len(set(run_values(runs, c))) > 1
    ]
    return sorted(varying, key=priority)


@dataclass(frozen=True)
class Split:
    """How a set of runs is cut into rows: `rows` (the requested ones, then `added`), `added`
    (varying keys the request lacked, each needed to keep two configurations apart) and
    `differing` (every varying key outside the requested rows, shown or not)."""

    rows: list[str]
    added: list[str] = field(default_factory=list)
    differing: list[str] = field(default_factory=list)

    def note(self) -> str | None:
        """One line for the reader when the runs differ in more than the requested rows."""
        if not self.differing:
            return None
        keys = ", ".join(self.differing)
        if not self.added:
            return f"runs also differ in {keys}, fixed within each row"
        shown = ", ".join(self.added)
        return f"runs also differ in {keys}: rows split by {shown} as well (never pooled)"


def split_rows(runs: pd.DataFrame, rows: Sequence[str] = DEFAULT_ROWS) -> Split:
    """The rows that keep every configuration of `runs` apart, starting from `rows`.

    Keys of `rows` that no run has stay (they show "-"); a varying key is added, in `priority`
    order, when it separates runs that the rows so far put together; adding stops when the rows
    separate the runs exactly as their whole configurations (minus the seed) do.
    """
    runs = _one_per_run(runs)
    rows = list(rows)
    varying = varying_columns(runs)
    values = {c: run_values(runs, c) for c in dict.fromkeys([*rows, *varying])}

    def groups(columns: Sequence[str]) -> int:
        if not columns:
            return 1
        return len(set(zip(*(values[c] for c in columns), strict=True)))

    # A key that differs only between rows already apart (an algorithm's own knobs) is no news.
    base = groups(rows)
    differing = [c for c in varying if c not in rows and groups([*rows, c]) > base]
    if runs.empty or not differing:
        return Split(rows, [], differing)

    target = groups([*dict.fromkeys([*rows, *varying])])
    chosen = list(rows)
    count = groups(chosen)
    for column in differing:
        if count >= target:
            break
        more = groups([*chosen, column])
        if more > count:
            chosen.append(column)
            count = more
    return Split(chosen, chosen[len(rows) :], differing)


def short_names(columns: Sequence[str]) -> dict[str, str]:
    """How labels and column headers name each column: the last part of its dotted name
    (`algorithm.rank` -> `rank`, `network.name` -> `network`, `config.lr` -> `lr`); the whole
    name where two columns would share one."""

    def short(column: str) -> str:
        return column.removeprefix("config.").removesuffix(".name").rsplit(".", 1)[-1]

    counts: dict[str, int] = {}
    for column in columns:
        counts[short(column)] = counts.get(short(column), 0) + 1
    return {
        c: short(c) if counts[short(c)] == 1 else c.removeprefix("config.").removesuffix(".name")
        for c in columns
    }


def display(value: Any) -> str:
    """A config value as tables and labels print it: 2.0 -> "2", [1, 3] -> "[1, 3]", none
    -> "-"."""
    value = canonical(value) if not isinstance(value, str) else value
    if isinstance(value, tuple):
        return "[" + ", ".join(display(v) for v in value) + "]"
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return NO_TAU
    return str(value)


def order_key(value: Any) -> tuple:
    """How rows, panels and claim cells order the values of one key: none ("-") first, then
    numbers in order, then the network presets fastest first, then any other text."""
    if value is None or value == NO_TAU or (isinstance(value, float) and math.isnan(value)):
        return (0, 0.0, "")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return (1, float(value), "")
    if value in NETWORKS:
        return (2, float(NETWORKS.index(value)), "")
    return (2, float(len(NETWORKS)), str(value))


def series_label(values: Mapping[str, Any], columns: Sequence[str]) -> str:
    """The label of one row or series: the algorithm, then `key=value` for each other column
    in `columns` that has a value: `local_sgd (tau=2)`, `powersgd (rank=4)`, `sync_sgd`."""
    names = short_names([c for c in columns if c != "algorithm.name"])
    algorithm = values.get("algorithm.name")
    head = display(algorithm) if algorithm is not None else ""
    parts = []
    for column, name in names.items():
        value = values.get(column)
        if value is None or value == NO_TAU or (isinstance(value, float) and math.isnan(value)):
            continue
        parts.append(f"{name}={display(value)}")
    if not head:
        return ", ".join(parts) or "all runs"
    return f"{head} ({', '.join(parts)})" if parts else head


def run_labels(runs: pd.DataFrame, columns: Sequence[str]) -> pd.Series:
    """`series_label` of every row of `runs` (per run or per evaluation), tau "-" for tau-less
    methods."""
    values = {c: run_values(runs, c) for c in dict.fromkeys(["algorithm.name", *columns])}
    labels = [series_label({c: values[c][i] for c in values}, columns) for i in range(len(runs))]
    return pd.Series(labels, index=runs.index, dtype=object)


def _one_per_run(runs: pd.DataFrame) -> pd.DataFrame:
    return runs.drop_duplicates("run_dir") if "run_dir" in runs.columns else runs


def one_run_per_configuration(runs: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """`runs` with one run per configuration (today's identity digest of its config, the seed
    included), and the run_dirs left out. Two runs of one configuration are the same point run
    twice, not two seeds: a runs folder that holds runs made under an earlier run identity (a
    key since left out of it) holds such pairs, and pooled they would count one seed twice
    (pseudo-replication). The most recently finished of each (its summary.json's mtime) is
    kept."""
    if runs.empty or "run_dir" not in runs.columns:
        return runs, []
    from analysis.runs.load import (
        read_config,  # here: analysis.runs.load imports this module's users
    )

    def key(run_dir: str) -> str:
        try:
            return identity.digest(read_config(run_dir))
        except Exception:  # noqa: BLE001 - a config that cannot be read: its own configuration
            return f"unread:{run_dir}"

    def finished_at(run_dir: str) -> float:
        try:
            return os.path.getmtime(os.path.join(run_dir, "summary.json"))
        except OSError:
            return 0.0

    order = sorted(runs["run_dir"], key=finished_at, reverse=True)
    seen: set[str] = set()
    dropped = []
    for run_dir in order:
        digest = key(run_dir)
        if digest in seen:
            dropped.append(run_dir)
        seen.add(digest)
    return runs[~runs["run_dir"].isin(dropped)], sorted(dropped)


def repeat_note(dropped: Sequence[str]) -> str:
    """The warning for the runs `one_run_per_configuration` left out."""
    names = ", ".join(os.path.basename(os.path.normpath(d)) for d in dropped[:3])
    more = f" and {len(dropped) - 3} more" if len(dropped) > 3 else ""
    return (
        f"{len(dropped)} run(s) repeat the configuration of a later run (made under an earlier "
        f"run identity): left out, not pooled as more seeds: {names}{more}"
    )
