"""Final accuracy as mean ± std over seeds, one row per configuration (algorithm, tau and any
other key that tells the runs apart: `analysis.runs.compare.split_rows`), as Markdown, LaTeX and
CSV.

Accuracies stay fractions in [0, 1] as the contract writes them; the Markdown shows them that way
too, so a number in a table and the same number in `summary.json` read alike.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from analysis.reports.table_cells import (
    EMPTY,
    _accuracy_cell,
    _as_int_if_integral,
    _display,
    _extra_cell,
    _extra_header,
    _group_label,
    _latex,
    _mean_std,
    _number,
    _row_headers,
    _short,
    _summary_cell,
    _target_cell,
    _value_header,
    human_bytes,
    latex_escape,
)
from analysis.runs.compare import NO_TAU, display, order_key, run_values
from analysis.runs.convergence import DEFINITION, converged_cell, run_convergence
from analysis.runs.load import ALGORITHMS, TAU_LESS
from experiments.errors import UserError
from experiments.store.crossing import crossing_time

__all__ = [
    "TAU_LESS",
    "experiment_cells",
    "experiment_latex",
    "experiment_markdown",
    "experiment_table",
    "final_accuracy_table",
    "footnotes",
    "human_bytes",
    "latex_escape",
    "scaling_cells",
    "scaling_markdown",
    "scaling_table",
    "time_to_target",
    "to_markdown",
    "write_experiment_table",
    "write_scaling_table",
    "write_table",
]


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
    configs hold. Rows are sorted by algorithm (contract order) then tau numerically. `rows` is
    taken as given: `analysis.runs.compare.split_rows` says which rows keep every configuration
    apart. A `note` in `table.attrs` is printed under the Markdown table.
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
    # One spelling per value (2 = 2.0, lists as tuples), tau "-" for the tau-less methods.
    frame = frame.assign(**{c: run_values(frame, c) for c in rows})
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
    table.attrs["rows"] = tuple(rows)
    return table


def to_markdown(table: pd.DataFrame, digits: int = 3) -> str:
    """A Markdown table: the row columns, `<value>` as `mean ± std` (fractions), the `extra`
    columns of `final_accuracy_table` (ratios in percent), `n`, and, when any run diverged,
    `diverged` as k/(runs)."""
    extra = [c for c in table.attrs.get("extra", ()) if c in table.columns]
    rows = [c for c in table.columns if c not in ("mean", "std", "n", "diverged", *extra)]
    header = _value_header(table.attrs.get("value", "summary.final/test_acc"))
    names = _row_headers(rows)
    shown = pd.DataFrame({names[c]: table[c].map(display) for c in rows})
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
    markdown = shown.to_markdown(index=False, disable_numparse=True)
    note = table.attrs.get("note")
    return f"{markdown}\n\nnote: {note}" if note else markdown


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
            # "-" (no period) sorts first, then numbers in order, then the network presets
            # fastest first, then any other text.
            number = _number(cell)
            key.append(order_key(cell if number is None else number))
    return tuple(key)


# --- a preset's table ---------------------------------------------------------------------------
#
# `experiment_table` is the table of a preset's `report:` node: the runs of one experiment grouped
# by `report.rows`, each cell backed by its run count, and every grid point that has no result yet
# (failed, still running or never run) listed below the table instead of leaving a silent gap.

DEFAULT_ROWS = ("algorithm.name", "tau")
FINISHED = ("completed", "diverged")
TIME = "time/train_s"
ACC = "test/acc"
# Summary columns averaged over a group's completed runs -> the table's column of that mean.
SUMMARY_EXTRA = {
    "summary.comm/bytes": "comm_bytes",
    "summary.comm/peak_bytes": "comm_peak_bytes",
    "summary.comm/ratio": "comm_ratio",
    "summary.time/train_s": "train_s",
}
_EXPERIMENT_HEADERS = {
    "comm_bytes": "communicated",
    "comm_peak_bytes": "largest collective",
    "comm_ratio": "comm/compute",
    "train_s": "train time (s)",
}
# Why a grid point has no result, in the order footnotes list them.
REASONS = ("failed", "running", "missing")


def time_to_target(
    metrics: pd.DataFrame, target: float, acc: str = ACC, time: str = TIME
) -> pd.DataFrame:
    """Per run (index `run_dir`): `reached`, whether an evaluation had `acc >= target`, and
    `time_s`, the training time (`time/train_s`, evaluation excluded) at which it crossed the
    target: the first such evaluation's, interpolated between it and the one before on a time
    budget (experiments/store/crossing.py); NaN if never reached or not logged. Evaluations are
    taken in step order."""
    columns = ["reached", "time_s"]
    if metrics.empty or "run_dir" not in metrics.columns:
        return pd.DataFrame(columns=columns, index=pd.Index([], name="run_dir"))
    order = [c for c in ("step", "epoch") if c in metrics.columns]
    data = metrics.sort_values(order, kind="stable") if order else metrics
    accuracy = (
        pd.to_numeric(data[acc], errors="coerce")
        if acc in data.columns
        else pd.Series(math.nan, index=data.index)
    )
    times = (
        pd.to_numeric(data[time], errors="coerce")
        if time in data.columns
        else pd.Series(math.nan, index=data.index)
    )
    budget = (
        data["test/images"].notna()
        if "test/images" in data.columns
        else pd.Series(False, index=data.index)
    )
    result = {}
    for run_dir, index in data.groupby("run_dir", sort=False).groups.items():
        # on a time budget interpolated between the points around the crossing
        # (experiments/store/crossing.py)
        when = crossing_time(
            times.loc[index].tolist(),
            accuracy.loc[index].tolist(),
            target,
            interpolate=bool(budget.loc[index].any()),
        )
        result[run_dir] = (False, math.nan) if when is None else (True, when)
    table = pd.DataFrame.from_dict(result, orient="index", columns=columns)
    table.index.name = "run_dir"
    return table


def experiment_table(
    runs: pd.DataFrame,
    rows: Sequence[str] = DEFAULT_ROWS,
    *,
    grid: Sequence[Mapping[str, Any]] = (),
    metrics: pd.DataFrame | None = None,
    target_acc: float | None = None,
    value: str = "summary.final/test_acc",
    point_config: Callable[[Mapping[str, Any]], Mapping[str, Any]] | None = None,
) -> pd.DataFrame:
    """The runs of one experiment grouped by `rows`, one table row per group.

    `runs` holds one row per run of any status (`load_summaries(..., statuses=None)`; a
    per-evaluation frame is reduced to its runs). Columns of the result:

    - the `rows` values: tau "-" for tau-less methods, "-" where a run has no such key (the rank
      of a method without one);
    - `mean`, `std` (sample), `n` of `value` over the group's completed runs; `diverged`, its
      diverged runs; `runs`, its completed + diverged runs;
    - `converged`: how many of `runs` converged (`analysis.runs.convergence`, from the metric rows
      of `metrics`, or of `runs` if it has them);
    - with `target_acc`: `reached_target`, how many of `runs` had an evaluation with
      `test/acc >= target_acc` (from the metric rows of `metrics`, or of `runs` if it has them),
      and `time_to_target_s`, their mean training time at the first such evaluation;
    - `comm_bytes`, `comm_peak_bytes`, `comm_ratio`, `train_s`: means of the summaries' final
      `comm/bytes`, `comm/peak_bytes` (the largest collective: the peak bandwidth a method asks
      for), `comm/ratio`, `time/train_s` over the completed runs (when the runs log them);
    - `failed`, `running`, `missing`: grid points (each a dict config column -> value, see
      `analysis.runs.grid.expand_grid`) of this group without a completed or diverged run, by why:
      only failed runs, a run still running, no run at all; `unresolved`, those points in words
      ("seeds 0,1,2"). A group of only such points is a row with `runs` = 0.

    A grid point without a run gets its row values from the point itself, else from its runs of
    other statuses, else from `point_config(point)` (the config its run would get: see
    `analysis.runs.grid.PointConfigs`), else from what the runs of its algorithm agree on.
    """
    from analysis.runs.grid import canonical

    rows = list(rows)
    frame = runs.drop_duplicates("run_dir") if "run_dir" in runs.columns else runs
    grid = [dict(point) for point in grid]
    grid_columns = list(dict.fromkeys(c for point in grid for c in point))
    for column in rows:
        if column not in frame.columns and column not in grid_columns:
            have = ", ".join(c for c in frame.columns if not c.startswith("summary."))
            raise UserError(f"no column {column!r} in the runs (have: {have})")
    if value not in frame.columns:
        raise UserError(f"no column {value!r} in the runs")
    frame = frame.reset_index(drop=True)
    status = (
        frame["summary.status"].astype(object)
        if "summary.status" in frame.columns
        else pd.Series("completed", index=frame.index, dtype=object)
    )
    finished = status.isin(FINISHED)
    diverged = status.eq("diverged")
    numbers = pd.to_numeric(frame[value], errors="coerce").astype(float)
    extras = {c: name for c, name in SUMMARY_EXTRA.items() if c in frame.columns}
    reached = None
    source = metrics if metrics is not None else runs
    if target_acc is not None:
        reached = time_to_target(source, target_acc) if ACC in source.columns else None
    convergence = run_convergence(source) if ACC in source.columns else None
    algorithms = frame["algorithm.name"] if "algorithm.name" in frame.columns else None

    def column_value(i: int, column: str) -> Any:
        return frame.at[i, column] if column in frame.columns else None

    keys = [
        _group_key(
            rows,
            {c: column_value(i, c) for c in rows},
            None if algorithms is None else algorithms.iat[i],
        )
        for i in frame.index
    ]
    groups: dict[tuple, dict[str, Any]] = {}
    for i, key in enumerate(keys):
        if finished.iat[i]:
            groups.setdefault(key, {"runs": [], "points": []})["runs"].append(i)

    # Each grid point either has a completed/diverged run or is listed under its group. So is a
    # failed or running run that no grid point covers (no grid: a run is identified by its rows
    # and seed), unless a completed or diverged run has the same identity.
    canon = {c: [canonical(column_value(i, c)) for i in frame.index] for c in grid_columns}
    candidates: list[tuple[dict, list[int]]] = []
    covered: set[int] = set()
    seen: set[tuple] = set()
    for point in grid:
        point = {c: canonical(v) for c, v in _complete(point, grid_columns, point_config).items()}
        identity_key = tuple(sorted(point.items(), key=lambda item: item[0]))
        if identity_key in seen:
            continue
        seen.add(identity_key)
        matched = [i for i in frame.index if all(canon[c][i] == v for c, v in point.items())]
        covered.update(matched)
        candidates.append((point, matched))
    identity = grid_columns or [c for c in dict.fromkeys([*rows, "seed"]) if c in frame.columns]
    done = {tuple(canonical(column_value(i, c)) for c in identity) for i in frame.index[finished]}
    outside: dict[tuple, list[int]] = {}
    for i in frame.index:
        if i not in covered and not finished.iat[i]:
            key = tuple(canonical(column_value(i, c)) for c in identity)
            if key not in done:
                outside.setdefault(key, []).append(i)
    candidates += [(dict(zip(identity, k, strict=True)), v) for k, v in outside.items()]

    all_points = [point for point, _ in candidates]
    for point, matched in candidates:
        statuses = {status.iat[i] for i in matched}
        if statuses & set(FINISHED):
            continue
        reason = "running" if "running" in statuses else "failed" if statuses else "missing"
        values = {c: _point_value(frame, point, c, matched, point_config) for c in rows}
        algorithm = point.get("algorithm.name", values.get("algorithm.name"))
        if algorithm is None:
            algorithm = _point_value(frame, point, "algorithm.name", matched, point_config)
        key = _group_key(rows, values, algorithm)
        groups.setdefault(key, {"runs": [], "points": []})["points"].append((point, reason))

    # A point is described by the columns that vary over the grid and the runs.
    spread = all_points + [
        {c: canonical(column_value(i, c)) for c in identity} for i in frame.index
    ]
    varying = [c for c in identity if len({p[c] for p in spread if c in p}) > 1]
    records = []
    for key, group in groups.items():
        members = group["runs"]
        record: dict[str, Any] = dict(zip(rows, key, strict=True))
        ok = [i for i in members if not diverged.iat[i]]
        values = numbers.iloc[ok].dropna()
        record["mean"] = float(values.mean()) if len(values) else math.nan
        record["std"] = float(values.std()) if len(values) > 1 else math.nan
        record["n"] = len(values)
        record["diverged"] = int(sum(diverged.iat[i] for i in members))
        record["runs"] = len(members)
        if convergence is not None:
            dirs = [frame.at[i, "run_dir"] for i in members]
            record["converged"] = int(convergence.reindex(dirs).eq(True).sum())
        if reached is not None:
            dirs = [frame.at[i, "run_dir"] for i in members]
            hit = reached.reindex(dirs)
            hit_mask = hit["reached"].eq(True).to_numpy()
            record["reached_target"] = int(hit_mask.sum())
            times = pd.to_numeric(hit["time_s"][hit_mask], errors="coerce").dropna()
            record["time_to_target_s"] = float(times.mean()) if len(times) else math.nan
        for column, name in extras.items():
            extra = pd.to_numeric(frame[column].iloc[ok], errors="coerce").dropna()
            record[name] = float(extra.mean()) if len(extra) else math.nan
        unresolved = group["points"]
        for reason in REASONS:
            record[reason] = sum(1 for _, r in unresolved if r == reason)
        # Describe a point by what its row does not already say (a tau-less row: its tau too).
        pinned = {c for c, v in zip(rows, key, strict=True) if v != NO_TAU}
        described = [c for c in varying if c not in pinned]
        record["unresolved"] = _describe_points([p for p, _ in unresolved], described)
        records.append(record)

    columns = [*rows, "mean", "std", "n", "diverged", "runs"]
    if convergence is not None:
        columns.append("converged")
    if reached is not None:
        columns += ["reached_target", "time_to_target_s"]
    columns += [*extras.values(), *REASONS, "unresolved"]
    table = pd.DataFrame.from_records(records, columns=columns)
    order = sorted(range(len(table)), key=lambda i: _row_key(table.iloc[i], rows))
    table = table.iloc[order].reset_index(drop=True)
    table.attrs.update({"rows": tuple(rows), "value": value, "target_acc": target_acc})
    return table


def experiment_cells(table: pd.DataFrame, digits: int = 3) -> pd.DataFrame:
    """`experiment_table` as text cells under reader-facing headers (Markdown and LaTeX share
    them): "0.912 ± 0.004", "0.912 ± 0.004 (1 div.)", "div." (all diverged), "—" (no result:
    see `footnotes`); time to target "12.3 s", "12.3 s (2/3)" (2 of 3 runs reached it),
    "— (0/3)"; bytes "12.3 MB"; the comm/compute ratio in percent."""
    rows = list(table.attrs.get("rows", DEFAULT_ROWS))
    value = table.attrs.get("value", "summary.final/test_acc")
    shown = pd.DataFrame(index=table.index)
    # "rank" for algorithm.rank, unless two row columns would share a header
    for column, header in _row_headers(rows).items():
        shown[header] = table[column].map(display)
    shown[_value_header(value)] = [
        _accuracy_cell(mean, std, n, k, digits)
        for mean, std, n, k in zip(
            table["mean"], table["std"], table["n"], table["diverged"], strict=True
        )
    ]
    if "converged" in table.columns:
        shown["converged"] = [
            converged_cell(int(k), int(r))
            for k, r in zip(table["converged"], table["runs"], strict=True)
        ]
    if "time_to_target_s" in table.columns:
        target = table.attrs.get("target_acc")
        header = f"time to acc ≥ {target:g}" if target is not None else "time to target"
        shown[header] = [
            _target_cell(t, k, n)
            for t, k, n in zip(
                table["time_to_target_s"], table["reached_target"], table["runs"], strict=True
            )
        ]
    for column, header in _EXPERIMENT_HEADERS.items():
        if column in table.columns:
            shown[header] = table[column].map(lambda v, c=column: _summary_cell(c, v))
    shown["n"] = table["n"].astype(int).astype(str)
    return shown


def informative_cells(table: pd.DataFrame, digits: int = 3) -> tuple[pd.DataFrame, list[str]]:
    """`experiment_cells` without the columns that say nothing in this table, and one line per
    column left out, saying why: a column whose cells are all equal (every row "0.0%" comm/compute
    on an ideal network, "3" runs in every row) is left out and its one value given below the
    table. The row columns, the accuracy and the convergence columns always stay; a table of one
    row keeps everything."""
    shown = experiment_cells(table, digits)
    if len(shown) < 2:
        return shown, []
    keep = {*_row_headers(list(table.attrs.get("rows", DEFAULT_ROWS))).values(), "converged"}
    keep.add(_value_header(table.attrs.get("value", "summary.final/test_acc")))
    lines = []
    for header in list(shown.columns):
        values = set(shown[header])
        if header in keep or len(values) != 1:
            continue
        (value,) = values
        lines.append(_uniform_line(header, value))
        shown = shown.drop(columns=header)
    return shown, lines


def _presented(table: pd.DataFrame, digits: int) -> tuple[pd.DataFrame, list[str]]:
    """The cells a reader sees (`informative_cells`) and the lines under them: what "converged"
    means, why a row did not converge (`report.why_not_converged`), the preset's `report.notes`,
    the columns left out, then the footnotes."""
    shown, uniform = informative_cells(table, digits)
    definition = [DEFINITION + "."] if "converged" in shown.columns else []
    preset = [str(note) for note in table.attrs.get("notes") or ()]
    return shown, [*definition, *_unconverged_lines(table), *preset, *uniform, *footnotes(table)]


def _unconverged_lines(table: pd.DataFrame) -> list[str]:
    """One line per row whose runs did not all converge and whose algorithm the preset gives a
    reason for (`report.why_not_converged`, `table.attrs["why_not_converged"]`)."""
    reasons = table.attrs.get("why_not_converged") or {}
    if "converged" not in table.columns or not reasons:
        return []
    rows = list(table.attrs.get("rows", DEFAULT_ROWS))
    lines = []
    for _, row in table.iterrows():
        reason = reasons.get(str(row.get("algorithm.name")))
        if reason and row["runs"] and row["converged"] < row["runs"]:
            lines.append(f"{_group_label(row, rows)}: not converged: {reason}")
    return lines


def _uniform_line(header: str, value: str) -> str:
    """The line under a table for a column left out because every row has `value`."""
    if header == "n":
        return f"n = {value} runs (seeds) in every row."
    if header == "comm/compute" and value == "0.0%":
        return (
            "comm/compute: 0.0% in every row (an ideal network: no communication time; the "
            "time-axis presets, fig4 and low_comm, model a network)."
        )
    return f"{header}: {value} in every row."


def footnotes(table: pd.DataFrame) -> list[str]:
    """One line per group with grid points that have no result: "— no completed run: cocod_sgd
    tau=8 seeds 0,1,2 (2 failed, 1 missing)" for a group shown as "—", "local_sgd tau=2: no
    result for seed 2 (1 missing)" for a group that has other runs."""
    rows = list(table.attrs.get("rows", DEFAULT_ROWS))
    notes = []
    if table.attrs.get("note"):
        notes.append(f"note: {table.attrs['note']}")
    for _, row in table.iterrows():
        counts = [(reason, int(row.get(reason, 0) or 0)) for reason in REASONS]
        if not any(k for _, k in counts):
            continue
        reasons = ", ".join(f"{k} {reason}" for reason, k in counts if k)
        label = _group_label(row, rows)
        points = row.get("unresolved")
        points = points if isinstance(points, str) else ""
        if row["runs"] == 0:
            notes.append(
                f"{EMPTY} no completed run: {' '.join(filter(None, [label, points]))} ({reasons})"
            )
        else:
            what = f"no result for {points}" if points else "grid points without a result"
            notes.append(f"{label}: {what} ({reasons})")
    return notes


def experiment_markdown(table: pd.DataFrame, title: str | None = None, digits: int = 3) -> str:
    """The title (bold), the Markdown table and its footnotes."""
    parts = [f"**{title}**", ""] if title else []
    shown, notes = _presented(table, digits)
    parts.append(shown.to_markdown(index=False, disable_numparse=True))
    if notes:
        parts += ["", *notes]
    return "\n".join(parts)


def experiment_latex(
    table: pd.DataFrame, title: str | None = None, label: str | None = None, digits: int = 3
) -> str:
    """A booktabs `table` environment: caption = title, the cells of `experiment_cells`, the
    footnotes below the rule in footnote size."""
    shown, notes = _presented(table, digits)
    return _latex(
        shown,
        len(table.attrs.get("rows", DEFAULT_ROWS)),
        title,
        label,
        notes,
    )


def write_experiment_table(
    table: pd.DataFrame,
    out_dir: str | os.PathLike,
    name: str = "table",
    title: str | None = None,
    markdown: str | None = None,
    latex: str | None = None,
) -> tuple[Path, Path, Path]:
    """Write `<name>.md`, `<name>.tex` and `<name>.csv` (raw numbers) into `out_dir`.

    `markdown` and `latex` default to `experiment_markdown` / `experiment_latex` of `table`."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    md, tex, csv = (out_dir / f"{name}.{ext}" for ext in ("md", "tex", "csv"))
    md.write_text((markdown or experiment_markdown(table, title)) + "\n")
    tex.write_text(latex or experiment_latex(table, title, label=f"tab:{name}"))
    table.to_csv(csv, index=False)
    return md, tex, csv


# --- weak scaling -------------------------------------------------------------------------------


def scaling_table(
    runs: pd.DataFrame, rows: Sequence[str] = ("algorithm.name",), workers: str = "workers"
) -> pd.DataFrame:
    """Weak-scaling efficiency per group of `rows` (`workers` itself left out) and worker count.

    A run's time per step is its final `time/train_s` over its `steps` (summary), for completed
    and diverged runs alike (a step's cost does not depend on where the loss went). Per group
    and worker count m: `time_per_step_s` (mean over seeds), `n`, `base_workers` (the group's
    smallest m) and `efficiency` = time per step at `base_workers` / time per step at m.
    """
    rows = [c for c in rows if c != workers] or ["algorithm.name"]
    for column in [*rows, workers, "summary.time/train_s", "summary.steps"]:
        if column not in runs.columns:
            raise UserError(f"no column {column!r} in the runs for a scaling table")
    frame = runs.drop_duplicates("run_dir") if "run_dir" in runs.columns else runs
    if "summary.status" in frame.columns:
        frame = frame[frame["summary.status"].isin(FINISHED)]
    train = pd.to_numeric(frame["summary.time/train_s"], errors="coerce")
    steps = pd.to_numeric(frame["summary.steps"], errors="coerce")
    frame = frame.assign(_per_step=train / steps)[(steps > 0) & (train > 0)]
    algorithms = frame["algorithm.name"] if "algorithm.name" in frame.columns else None
    records: dict[tuple, list[float]] = {}
    for i, (_, run) in enumerate(frame.iterrows()):
        key = _group_key(
            rows, {c: run[c] for c in rows}, None if algorithms is None else algorithms.iat[i]
        )
        m = _as_int_if_integral(run[workers])
        records.setdefault((*key, m), []).append(float(run["_per_step"]))
    table = pd.DataFrame(
        [(*key, sum(v) / len(v), len(v)) for key, v in records.items()],
        columns=[*rows, workers, "time_per_step_s", "n"],
    )
    if table.empty:
        raise UserError("no completed run with a training time and a step count to scale")
    table = table.iloc[
        sorted(range(len(table)), key=lambda i: _row_key(table.iloc[i], [*rows, workers]))
    ]
    table = table.reset_index(drop=True)
    group = table.groupby(rows, sort=False, dropna=False)
    table["base_workers"] = group[workers].transform("first")
    table["efficiency"] = group["time_per_step_s"].transform("first") / table["time_per_step_s"]
    table.attrs.update({"rows": tuple(rows), "workers": workers})
    return table


def scaling_cells(table: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """The efficiency table wide: one row per group, one column "m=<workers>" per worker count,
    efficiency in percent ("—" where the group has no run at that m); and its notes."""
    rows = list(table.attrs.get("rows", ("algorithm.name",)))
    workers = table.attrs.get("workers", "workers")
    counts = sorted(set(table[workers]), key=lambda m: (_number(m) is None, _number(m) or 0))
    smallest = counts[0] if counts else None
    shown, notes = [], []
    for key, group in table.groupby(rows, sort=False, dropna=False):
        key = key if isinstance(key, tuple) else (key,)
        cells = {_short(c): _display(v) for c, v in zip(rows, key, strict=True)}
        by_m = dict(zip(group[workers], group["efficiency"], strict=True))
        for m in counts:
            cells[f"m={m}"] = f"{100 * by_m[m]:.1f}%" if m in by_m else EMPTY
        shown.append(cells)
        base = group["base_workers"].iloc[0]
        if base != smallest:
            label = " ".join(_display(v) for v in key if v != NO_TAU)
            notes.append(f"{label}: relative to m={base} (no run at m={smallest})")
    frame = pd.DataFrame(shown)
    return frame, notes


def scaling_markdown(table: pd.DataFrame, title: str | None = None) -> str:
    """Title, the wide efficiency table of `scaling_cells` and its notes, as Markdown."""
    cells, notes = scaling_cells(table)
    parts = [f"**{title}**", ""] if title else []
    parts.append(cells.to_markdown(index=False, disable_numparse=True))
    explained = "efficiency = time per step at the smallest worker count / time per step at m"
    parts += ["", explained, *notes]
    return "\n".join(parts)


def write_scaling_table(
    table: pd.DataFrame, out_dir: str | os.PathLike, name: str = "scaling", title: str | None = None
) -> tuple[Path, Path, Path]:
    """Write `<name>.md`, `<name>.tex` and `<name>.csv` of a `scaling_table` into `out_dir`."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    md, tex, csv = (out_dir / f"{name}.{ext}" for ext in ("md", "tex", "csv"))
    md.write_text(scaling_markdown(table, title) + "\n")
    cells, notes = scaling_cells(table)
    rows = len(table.attrs.get("rows", ("algorithm.name",)))
    tex.write_text(_latex(cells, rows, title, f"tab:{name}", notes))
    table.to_csv(csv, index=False)
    return md, tex, csv


# --- helpers of the preset tables ---------------------------------------------------------------


def _group_key(rows: Sequence[str], values: Mapping[str, Any], algorithm: Any) -> tuple:
    from analysis.runs.grid import canonical

    key = []
    for column in rows:
        if column == "tau" and algorithm in TAU_LESS:
            key.append(NO_TAU)
            continue
        value = canonical(values.get(column))
        key.append(NO_TAU if value is None else value)
    return tuple(key)


def _complete(
    point: Mapping[str, Any],
    columns: Sequence[str],
    point_config: Callable[[Mapping[str, Any]], Mapping[str, Any]] | None,
) -> Mapping[str, Any]:
    """A grid point with the `columns` it does not set (another sweep of the preset sets them,
    e.g. fig4's PowerSGD ranks) taken from the config its run would get; without that config
    they stay unset and match any value."""
    lacking = [c for c in columns if c not in point]
    if not lacking or point_config is None:
        return point
    config = point_config(point)
    if len(config) <= len(point):  # not composed
        return point
    return {**point, **{c: config.get(c) for c in lacking}}


def _point_value(
    frame: pd.DataFrame,
    point: Mapping[str, Any],
    column: str,
    matched: list,
    point_config: Callable[[Mapping[str, Any]], Mapping[str, Any]] | None,
) -> Any:
    """A row column's value for a grid point without a result (see `experiment_table`)."""
    from analysis.runs.grid import canonical

    if column in point:
        return point[column]

    def agreed(indices: Sequence[int]) -> tuple[bool, Any]:
        if column not in frame.columns or not len(indices):
            return False, None
        values = {canonical(frame.at[i, column]) for i in indices}
        return len(values) == 1, next(iter(values))

    found, value = agreed(matched)
    if found:
        return value
    if point_config is not None:
        config = point_config(point)
        if len(config) > len(point):  # composed: a key it lacks is one the run would lack
            return config.get(column)
    if "algorithm.name" in point and "algorithm.name" in frame.columns:
        name = canonical(point["algorithm.name"])
        same = frame.index[frame["algorithm.name"].map(canonical) == name]
        found, value = agreed(list(same))
        if found:
            return value
    return None


def _describe_points(points: list[dict], columns: list[str]) -> str:
    """ "seeds 0,1,2", "tau=2,8 seed 1", or point by point when they are not a product."""
    if not points or not columns:
        return ""
    from analysis.runs.grid import canonical

    values = {c: list(dict.fromkeys(canonical(p.get(c)) for p in points)) for c in columns}
    size = math.prod(len(v) for v in values.values())
    distinct = {tuple(canonical(p.get(c)) for c in columns) for p in points}
    if size == len(distinct):
        return " ".join(_describe_values(c, values[c]) for c in columns)
    ordered = sorted(
        distinct, key=lambda t: [(_number(v) is None, _number(v) or 0, str(v)) for v in t]
    )
    return "; ".join(
        " ".join(_describe_values(c, [v]) for c, v in zip(columns, t, strict=True)) for t in ordered
    )


def _describe_values(column: str, values: list) -> str:
    values = sorted(values, key=lambda v: (_number(v) is None, _number(v) or 0, str(v)))
    text = ",".join(_display(v) for v in values)
    if column == "seed":
        return f"{'seeds' if len(values) > 1 else 'seed'} {text}"
    return f"{_short(column)}={text}"
