"""Runs on disk -> tables, figures and, for a preset, its claims and provenance.

    python -m analysis.reports.report RUNS_ROOT [RUNS_ROOT ...] --out OUT_DIR [--name NAME]
    python -m analysis.reports.report --experiment NAME [--scale SCALE] RUNS_ROOT --out OUT_DIR

Plain use writes `<NAME>.md` and `<NAME>.csv` (NAME defaults to `table`), `test_acc.png` / `.pdf`,
and, when the runs log the time ledger (timing.md), `time.png` / `.pdf` (accuracy and loss against
training time) and `time_breakdown.png` / `.pdf` (per-epoch compute vs exposed communication) into
OUT_DIR, then prints the Markdown table and the figure paths. The table gains the communication-to-
computation ratio and the training time when the summaries carry them. Only completed and
diverged runs count: a failed or still-running run has no final accuracy to report.

Like with like: runs are pooled only over seeds. Rows are keyed by algorithm and tau and by every
other configuration key that varies among the runs loaded (`analysis.runs.compare.split_rows`; keys
outside a run's identity, such as `out_root` or W&B settings, excepted); each such key becomes a
row column, a note under the table names the keys the runs differ in, and the figures split
their series and panels by the same keys. The tau-less methods pool over `tau`.

With `--experiment` it reports one preset (`conf/experiment/<NAME>.yaml`): the runs whose
`experiment_name` is NAME (and whose `scale.name` is SCALE), grouped by the preset's `report.rows`,
with time to `report.target_acc`, bytes communicated and the comm/compute ratio; every point of
the preset's sweep grid without a completed or diverged run is listed under the table. Runs that
differ in a key `report.rows` does not name (a hand run with other epochs among the preset's) are
not pooled either: the key is added as a row column, with one `warning:` line on stderr and a
footnote naming it (adding, not refusing: the report still shows every result, apart). It writes
`<NAME>.md`, `.tex`, `.csv` (and `scaling.*` for `report.kind: scaling`), `runs.jsonl.gz` (the
records of its runs, from which `make recompute` rebuilds the rest: analysis/runs/records.py), the
figures named in `report.figures` (accuracy, time, breakdown, utilization:
analysis/reports/report_figures.py), `claims.md` (the checks named in `report.claims`, each with n,
a confidence interval and its test: `analysis.claims`) and
`provenance.txt` (the command, paths relative to the checkout or `$OUT`; the git commit, the
date, torch's version and the device of the runs, their commits, their platform fingerprints),
then prints the table, the claims and the paths. Each row says how many of its runs converged
(`analysis.runs.convergence`); a column equal in every row is left out with one line saying why
(`analysis.reports.tables.informative_cells`). A RUNS_ROOT may be a result's `runs.jsonl.gz` instead
of a runs directory: the report is then made from the committed records. `--require-clean` refuses
a modified checkout and runs made from one, with or without `--experiment`.

A damaged run record (summary, config or metrics that cannot be read, a completed run whose
metrics.jsonl is empty) is left out with one `warning:` line naming the file; the rest is reported.
A flag that acts only with another (`--scale`, `--set`, `--out-root`, `--conf` without
`--experiment`) is refused in one line.

All at once: the report is written into a new folder beside OUT_DIR, which replaces OUT_DIR only
once it is complete (`staged_report`); a failure meanwhile (a full disk, an OUT_DIR that is a
file, a signal) leaves the previous report, or nothing, and says so in one line (exit code 2;
for a signal 128 + N: 130 for Ctrl-C, 143 for SIGTERM). An OUT_DIR holding more than a report
keeps its other files. Refused in one line before any work (exit code 2): an OUT_DIR that is a
file, is or lies in a RUNS_ROOT or holds one (the report would replace its own input), and for
a plain report a folder holding a preset's result (claims.json, provenance.txt: replaced
whole by a report without them, the result would be lost), and for a preset's report a folder
holding another preset's or scale's result (its provenance.txt says which).
"""

from __future__ import annotations

import os
import signal as _signal
import sys

if __name__ == "__main__":  # a stop while the analysis imports (seconds): one line, nothing written

    def _stop_early(signum: int, frame) -> None:
        name = _signal.Signals(signum).name
        what = "interrupted by Ctrl-C" if name == "SIGINT" else f"stopped by {name}"
        print(f"error: {what} before the report started: nothing written", file=sys.stderr)
        os._exit(128 + signum)  # the shell's code of the signal: 130 for Ctrl-C

    for _name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGUSR1", "SIGUSR2"):
        _signal.signal(getattr(_signal, _name), _stop_early)

import argparse  # noqa: E402 - after the handlers above
import datetime
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from analysis.claims import check_claims, validate_claims, write_claims
from analysis.reports.report_figures import FIGURE_KEYS, FIGURES, draw_figures, on_time_budget
from analysis.reports.staging import (
    ReportStopped,
    _Signalled,
    check_out,
    moved,
    out_folder,
    staged_report,
    stops_raised,
)
from analysis.reports.tables import (
    DEFAULT_ROWS,
    FINISHED,
    experiment_latex,
    experiment_markdown,
    experiment_table,
    final_accuracy_table,
    scaling_markdown,
    scaling_table,
    time_to_target,
    to_markdown,
    write_experiment_table,
    write_scaling_table,
    write_table,
)
from analysis.runs.compare import one_run_per_configuration, repeat_note, split_rows
from analysis.runs.convergence import run_convergence
from analysis.runs.grid import (
    CONF_DIR,
    GROUPS,
    PointConfigs,
    Preset,
    add_preset_arguments,
    compose_preset,
    expand_sweeps,
    grid_column,
)
from analysis.runs.load import (
    DEFAULT_STATUSES,
    RecordWarning,
    find_runs,
    load_runs,
    load_summaries,
    one_line_warnings,
    read_config,
)
from analysis.runs.rates import rate_lines
from analysis.runs.records import RECORDS, materialized, write_records
from experiments.errors import UserError, one_line_errors, refuse_inert_flags
from experiments.store.fingerprint import describe
from experiments.store.provenance import command_line, public_path
from experiments.store.records import git_commit

# Summary columns the table shows, when the runs carry them, after the accuracy.
TABLE_EXTRA = ("summary.comm/ratio", "summary.time/train_s")
KINDS = ("table", "scaling")


def report(
    roots: Sequence[str | os.PathLike],
    out_dir: str | os.PathLike,
    name: str = "table",
    require_clean: bool = False,
) -> dict[str, Any]:
    """Write the table and figure for the runs under `roots` into `out_dir`.

    Returns `table` (the DataFrame), `markdown`, `table_md`, `table_csv`, `figure_png`,
    `figure_pdf` (None when no run logged an evaluation yet), `time_png`, `time_pdf`,
    `breakdown_png`, `breakdown_pdf` (None when no evaluation or the time ledger is missing, the
    latter said on stderr) and `num_runs`.
    """
    if isinstance(roots, (str, os.PathLike)):
        roots = [roots]
    with materialized(roots) as dirs:
        return _report(dirs, out_dir, name, require_clean)


def _report(
    roots: Sequence[Path], out_dir: str | os.PathLike, name: str, require_clean: bool
) -> dict[str, Any]:
    frame = load_runs(*roots, statuses=DEFAULT_STATUSES)
    if frame.empty:
        found = sum(len(find_runs(root)) for root in roots)
        where = ", ".join(str(r) for r in roots)
        if found:
            raise UserError(f"none of the {found} runs under {where} is completed or diverged")
        raise UserError(f"no runs (directories with summary.json) under {where}")
    # The summaries are repeated on every metric row; one row per run is what the table counts.
    summaries = frame.drop_duplicates("run_dir")
    if require_clean:  # as with --experiment: refused before anything is written
        _check_clean(summaries)
    extra = [c for c in TABLE_EXTRA if c in summaries.columns]
    # Every configuration key that varies among the runs splits them: never pooled.
    split = split_rows(summaries, DEFAULT_ROWS)
    table = final_accuracy_table(summaries, rows=split.rows, extra=extra)
    table.attrs["note"] = split.note()
    table_md, table_csv = write_table(table, out_dir, name)
    # every figure the runs can give: the utilization figure for time-budget runs only
    wanted = tuple(f for f in FIGURES if f != "utilization" or on_time_budget(frame))
    figures = draw_figures(frame, out_dir, wanted, rows=split.rows)
    records, _ = write_records(list(summaries["run_dir"]), roots, out_dir)
    return {
        "table": table,
        "markdown": to_markdown(table),
        "table_md": table_md,
        "table_csv": table_csv,
        **figures,
        "records": records,
        "num_runs": len(summaries),
    }


# --- a preset ---------------------------------------------------------------------------------


def report_experiment(
    roots: Sequence[str | os.PathLike] | str | os.PathLike,
    out_dir: str | os.PathLike,
    experiment: str,
    scale: str | None = None,
    *,
    name: str = "table",
    grid: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None,
    report_node: Mapping[str, Any] | None = None,
    conf_dir: str | os.PathLike = CONF_DIR,
    command: str | None = None,
    overrides: Sequence[str] = (),
    out_root: str | os.PathLike | None = None,
    require_clean: bool = False,
) -> dict[str, Any]:
    """Report the preset `experiment` from its runs under `roots` into `out_dir`.

    The runs are those whose `experiment_name` is `experiment` and, when `scale` is given, whose
    `scale.name` is `scale` (runs at several scales need one chosen). `grid` is the sweep as
    `hydra.sweeper.params` writes it (override key -> "a,b,c" or a list of values), or a list of
    such sweeps; None composes the preset from `conf_dir` and takes its sweep and extra sweeps
    (a preset that cannot be composed leaves the grid empty, with a note on stderr); an empty
    mapping checks no grid. `report_node` replaces the preset's
    `report:` node, which is otherwise read from the runs' config, else from the composed preset;
    its `claims` are the composed preset's own list where it has one (claims are analysis: a
    claim added to a preset is checked on the runs it already has).
    `command` goes to `provenance.txt` (default: this process's command line). `overrides` are
    the ones the sweep was given on top of the preset (`cluster=sim`, which sets the clock): the
    grid's points are composed with them. `out_root` is the sweep's output root, which
    `provenance.txt` calls `$OUT` (`public_path`). `require_clean` (what `--publish` asks for)
    refuses, before anything is written, a checkout with modified tracked files and runs made
    from one (a `-dirty` commit in their records): a published result must come from a commit.

    Returns `table` (the `experiment_table` DataFrame), `markdown`, `table_md`, `table_tex`,
    `table_csv`, `scaling` / `scaling_markdown` / `scaling_md` / `scaling_tex` / `scaling_csv`
    (None unless `report.kind` is scaling), the figure keys of `FIGURE_KEYS`, `claims` (a list of
    `ClaimResult`), `claims_md`, `provenance`, `report` (the node used), `grid` (the grid points),
    `scale`, `num_runs` (completed + diverged) and `num_unresolved` (grid points without one).
    """
    roots = [roots] if isinstance(roots, (str, os.PathLike)) else list(roots)
    shown = ", ".join(public_path(os.path.abspath(r), out_root) for r in roots)
    with materialized(roots) as dirs:
        return _report_experiment(
            dirs,
            out_dir,
            experiment,
            scale,
            where=", ".join(str(r) for r in roots),
            shown_roots=shown,
            name=name,
            grid=grid,
            report_node=report_node,
            conf_dir=conf_dir,
            command=command,
            overrides=overrides,
            out_root=out_root,
            require_clean=require_clean,
        )


def _report_experiment(
    roots: list[Path],
    out_dir: str | os.PathLike,
    experiment: str,
    scale: str | None,
    *,
    where: str,
    shown_roots: str,
    name: str,
    grid: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None,
    report_node: Mapping[str, Any] | None,
    conf_dir: str | os.PathLike,
    command: str | None,
    overrides: Sequence[str],
    out_root: str | os.PathLike | None,
    require_clean: bool,
) -> dict[str, Any]:
    everything = load_summaries(*roots, statuses=None)
    if everything.empty:
        raise UserError(f"no runs (directories with summary.json) under {where}")
    runs, scale = _select(everything, experiment, scale, where)
    if require_clean:
        _check_clean(runs)

    status = runs["summary.status"] if "summary.status" in runs.columns else None
    finished = runs if status is None else runs[status.isin(FINISHED)]
    if finished.empty:
        counts = ", ".join(f"{k} {s}" for s, k in runs["summary.status"].value_counts().items())
        raise UserError(
            f"no completed or diverged run of experiment {experiment}{_at(scale)} under {where} "
            f"({counts})"
        )

    preset = None
    if grid is None:
        try:
            preset = compose_preset(experiment, scale, conf_dir, overrides)
        except UserError as error:
            print(f"note: {error}; grid points without a run are not listed", file=sys.stderr)
        sweeps = preset.sweeps if preset else []
    else:
        sweeps = [grid] if isinstance(grid, Mapping) else list(grid)
    node = dict(report_node) if report_node is not None else _node_from_runs(runs, preset)
    if report_node is None and preset is not None and "claims" in preset.report:
        # the claims are analysis, not training: the preset's own list as it stands, so that a
        # claim added to a preset is checked on its committed runs (`make recompute --update`)
        node["claims"] = list(preset.report["claims"])
    kind, figure_names, rows, title = _check_node(node, runs)
    conf = Path(conf_dir)
    groups = set(GROUPS) | (
        {p.name for p in conf.iterdir() if p.is_dir()} if conf.is_dir() else set()
    )
    points = expand_sweeps(sweeps, groups)

    finished, repeated = one_run_per_configuration(finished)
    if repeated:
        print(f"warning: {experiment}{_at(scale)}: {repeat_note(repeated)}", file=sys.stderr)
        runs = runs[~runs["run_dir"].isin(repeated)]
    # Runs that differ in a key the preset's rows do not name are never pooled: the key becomes
    # a row column too, and the reader is told (stderr and a footnote).
    split = split_rows(finished, rows)
    if split.added:
        print(f"warning: {experiment}{_at(scale)}: {split.note()}", file=sys.stderr)
    rows = split.rows
    target = _target_acc(node, runs)
    with warnings.catch_warnings():
        # The same files again: each damaged one was already named once, by load_summaries.
        warnings.simplefilter("ignore", RecordWarning)
        frame = load_runs(*roots, statuses=FINISHED)
    frame = frame[frame["run_dir"].isin(set(finished["run_dir"]))]
    point_config = PointConfigs(experiment, scale, conf_dir, groups, overrides) if preset else None
    table = experiment_table(
        runs, rows, grid=points, metrics=frame, target_acc=target, point_config=point_config
    )
    table.attrs["note"] = split.note() if split.added else None
    # the preset's lines under the table, then at which base LR the rows ran
    # (analysis/runs/rates.py)
    table.attrs["notes"] = [
        *_as_list(node.get("notes"), ()),
        *rate_lines(finished, rows),
        *_platform_note(finished),
    ]
    table.attrs["why_not_converged"] = dict(node.get("why_not_converged") or {})
    # Computed before anything is written, so a run record it cannot use stops the report whole.
    scaling = scaling_table(finished, rows) if kind == "scaling" else None
    markdown = experiment_markdown(table, title)
    table_md, table_tex, table_csv = write_experiment_table(
        table, out_dir, name, title, markdown, experiment_latex(table, title, f"tab:{experiment}")
    )
    result: dict[str, Any] = {
        "table": table,
        "markdown": markdown,
        "table_md": table_md,
        "table_tex": table_tex,
        "table_csv": table_csv,
        **dict.fromkeys(("scaling", "scaling_markdown", "scaling_md", "scaling_tex")),
        "scaling_csv": None,
    }
    if scaling is not None:
        scaling_title = f"{title}: weak-scaling efficiency" if title else "weak-scaling efficiency"
        result["scaling"] = scaling
        result["scaling_markdown"] = scaling_markdown(scaling, scaling_title)
        result["scaling_md"], result["scaling_tex"], result["scaling_csv"] = write_scaling_table(
            scaling, out_dir, "scaling", scaling_title
        )
    result.update(draw_figures(frame, out_dir, figure_names, rows=rows))
    claims = check_claims(_with_metric_columns(finished, frame, target), node)
    result["claims"] = claims
    result["claims_md"] = write_claims(claims, out_dir, title)
    # The runs themselves, so that the table and claims recompute without them (records.py).
    result["records"], records = write_records(list(runs["run_dir"]), roots, out_dir, out_root)
    num_unresolved = int(table[["failed", "running", "missing"]].to_numpy().sum())
    result["provenance"] = write_provenance(
        out_dir,
        command,
        {
            "experiment": experiment,
            "scale": scale or "(not recorded)",
            "runs root": shown_roots,
            "runs": _run_counts(runs),
            "torch": _run_values(finished, "summary.torch_version"),
            "device": _run_values(finished, "summary.device"),
            "grid points": f"{len(points)}, {num_unresolved} without a completed or diverged run"
            if points
            else "none checked",
            "run commits": _run_commits(finished),
            "platform": _platforms(records),
            "records": f"{RECORDS} ({len(records)} runs: config, overrides, summary, metrics)",
        },
    )
    result.update(
        {
            "report": node,
            "grid": points,
            "scale": scale,
            "num_runs": len(finished),
            "num_unresolved": num_unresolved,
        }
    )
    return result


def _with_metric_columns(runs: Any, metrics: Any, target: float | None) -> Any:
    """`runs` with, per run, `metrics.converged` (`analysis.runs.convergence`: a claim comparing a
    row whose runs did not all converge cannot tell) and `metrics.reached_target` and
    `metrics.time_to_target_s` (the table's time to `target`, from the metric rows), for the
    claims; unchanged without evaluations, and without the time columns without a target."""
    if "test/acc" not in metrics.columns:
        return runs
    dirs = runs["run_dir"]
    runs = runs.assign(**{"metrics.converged": dirs.map(run_convergence(metrics)).astype(object)})
    if target is None:
        return runs
    reached = time_to_target(metrics, target)
    return runs.assign(
        **{
            "metrics.reached_target": dirs.map(reached["reached"]).astype(object),
            "metrics.time_to_target_s": dirs.map(reached["time_s"]).astype(float),
        }
    )


def write_provenance(
    out_dir: str | os.PathLike, command: str | None = None, details: Mapping[str, Any] = ()
) -> Path:
    """Write `provenance.txt`: the command that made the results, the suite's git commit
    (`-dirty` when tracked files are modified), the date (UTC), then `details` as `key: value`.
    A stranger must be able to check it, so it names no path of the machine it was made on:
    paths in `command` and `details` are given by `public_path` (relative to the checkout, or
    to `$OUT`, the sweep's output root), the commands are run from the checkout's root."""
    path = Path(out_dir) / "provenance.txt"
    path.parent.mkdir(parents=True, exist_ok=True)
    if command is None:
        command = command_line(sys.argv[1:])
    now = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
    lines = [
        f"command: {command}",
        f"git commit: {git_commit()}",
        f"date: {now.isoformat().replace('+00:00', 'Z')}",
        *(f"{key}: {value}" for key, value in dict(details).items()),
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def _select(everything: Any, experiment: str, scale: str | None, where: str) -> tuple[Any, Any]:
    """The runs of `experiment` (at `scale`), and the scale they are at."""
    names = everything.get("experiment_name")
    runs = everything[names == experiment] if names is not None else everything.iloc[0:0]
    if runs.empty:
        have = "none has an experiment_name"
        if names is not None:
            counts = names.fillna("(none)").value_counts()
            have = ", ".join(f"{n} ({k})" for n, k in counts.items())
        raise UserError(f"no runs of experiment {experiment} under {where} (runs there: {have})")
    scales = runs["scale.name"] if "scale.name" in runs.columns else None
    if scale is not None:
        at = runs[scales == scale] if scales is not None else runs.iloc[0:0]
        if at.empty:
            have = "none recorded"
            if scales is not None:
                have = ", ".join(f"{n} ({k})" for n, k in scales.value_counts().items())
            raise UserError(f"no runs of experiment {experiment} at scale {scale} (scales: {have})")
        return at, scale
    present = sorted(scales.dropna().unique()) if scales is not None else []
    if len(present) > 1:
        counts = ", ".join(f"{n} ({k})" for n, k in scales.value_counts().sort_index().items())
        raise UserError(
            f"runs of experiment {experiment} at several scales: {counts}; choose one with --scale"
        )
    return runs, (present[0] if present else None)


def _node_from_runs(runs: Any, preset: Preset | None) -> dict[str, Any]:
    """The `report:` node of the runs' config (completed runs first), else the preset's."""
    status = runs.get("summary.status")
    order = runs
    if status is not None:
        order = runs.iloc[(~status.isin(FINISHED)).to_numpy().argsort(kind="stable")]
    for run_dir in order["run_dir"]:
        try:
            node = read_config(run_dir).get("report")
        except Exception:  # noqa: BLE001 - damaged since it was loaded: the next run has one
            continue
        if isinstance(node, Mapping):
            return dict(node)
    return dict(preset.report) if preset is not None else {}


def _check_node(node: Mapping[str, Any], runs: Any) -> tuple[str, tuple[str, ...], list[str], Any]:
    """Validate a report node: its kind, figures, claims and rows (before anything is written)."""
    kind = node.get("kind") or "table"
    if kind not in KINDS:
        raise UserError(f"unknown report.kind {kind!r} (known: {', '.join(KINDS)})")
    figures = tuple(_as_list(node.get("figures"), FIGURES))
    unknown = [f for f in figures if f not in FIGURES]
    if unknown:
        raise UserError(
            f"unknown figure(s) in report.figures: {', '.join(map(str, unknown))} "
            f"(known: {', '.join(FIGURES)})"
        )
    validate_claims(_as_list(node.get("claims"), ()))
    rows = _as_list(node.get("rows") or None, DEFAULT_ROWS)
    # `algorithm` (a group, as in the sweep) means its name.
    rows = [r if r in runs.columns else grid_column(r) for r in rows]
    if "algorithm.rank" not in rows and "algorithm.name" in rows and _powersgd_ranks(runs) > 1:
        # Runs of different ranks are different methods; never average them into one row.
        rows.insert(rows.index("algorithm.name") + 1, "algorithm.rank")
    title = node.get("title")
    return kind, figures, rows, title


def _as_list(value: Any, default: Sequence[str]) -> list:
    """A node entry that may be one name or a list of them; `default` when absent."""
    if value is None:
        return list(default)
    return [value] if isinstance(value, str) else list(value)


def _powersgd_ranks(runs: Any) -> int:
    if "algorithm.rank" not in runs.columns or "algorithm.name" not in runs.columns:
        return 0
    return runs.loc[runs["algorithm.name"] == "powersgd", "algorithm.rank"].nunique()


def _target_acc(node: Mapping[str, Any], runs: Any) -> float | None:
    """`report.target_acc`, else the runs' `scale.target_acc` when they agree, else None."""
    target = node.get("target_acc")
    if target is None and "scale.target_acc" in runs.columns:
        values = runs["scale.target_acc"].dropna().unique()
        target = values[0] if len(values) == 1 else None
    try:
        return None if target is None else float(target)
    except (TypeError, ValueError) as error:
        raise UserError(f"report.target_acc is not a number: {target!r}") from error


def _at(scale: str | None) -> str:
    return f" at scale {scale}" if scale else ""


def _run_counts(runs: Any) -> str:
    if "summary.status" not in runs.columns:
        return str(len(runs))
    counts = runs["summary.status"].value_counts()
    return f"{len(runs)} (" + ", ".join(f"{k} {s}" for s, k in counts.items()) + ")"


def _run_values(runs: Any, column: str) -> str:
    """ "2.14.1+cpu (30 runs)": each value of `column` over the runs with its count."""
    if column not in runs.columns:
        return "(not recorded)"
    counts = runs[column].fillna("(not recorded)").astype(str).value_counts()
    return ", ".join(f"{value} ({k} runs)" for value, k in sorted(counts.items()))


def _check_clean(runs: Any) -> None:
    """The refusal of `require_clean` (`report_experiment`), in one line."""
    commit = git_commit()
    if commit.endswith("-dirty"):
        raise UserError(
            "the checkout has uncommitted changes to tracked files: a published result must come "
            "from a commit (commit or stash them, see git status)"
        )
    shas = runs["summary.git_sha"] if "summary.git_sha" in runs.columns else [None] * len(runs)
    dirty = [  # a segment, or the summary's own commit (marked when any segment was)
        [c for c in [*commits, sha] if isinstance(c, str) and c.endswith("-dirty")]
        for commits, sha in zip(_commits_of_runs(runs), shas, strict=True)
    ]
    dirty = [d for d in dirty if d]
    if dirty:
        raise UserError(
            f"{len(dirty)} of the {len(runs)} runs made from a modified checkout, in all or part "
            f"of their steps ({sorted({d[0] for d in dirty})[0]}): rerun them from a commit "
            "(rerun=true) before publishing"
        )


def _commits_of_runs(runs: Any) -> list[list[str]]:
    """Per run (a row of `runs`), every commit its steps ran on: its `git_commits` segments
    (a run resumed on another commit has several), else its `git_sha`
    (experiments/store/records.py, `run_commits`)."""
    from experiments.store.records import run_commits

    out = []
    for _, row in runs.iterrows():
        summary = {}
        for key in ("git_sha", "git_commits"):
            value = row.get(f"summary.{key}")
            if isinstance(value, str | list):
                summary[key] = value
        out.append(run_commits(summary))
    return out


def _platform_note(finished: Any) -> list[str]:
    """A line under the table when its runs were computed on more than one platform (issue 50:
    `cluster.lockstep_seeds=1`, another thread count or image layout gives a float32 run other
    last digits under the same run identity, which names what is computed, not how)."""
    column = "summary.platform.key"
    keys = finished[column].dropna().unique() if column in finished.columns else ()
    if len(keys) <= 1:
        return []
    return [
        f"The runs were computed on {len(keys)} platforms (provenance.txt, `platform`: thread "
        "counts, image layouts): a float32 run's last digits may differ from one to another "
        '(docs/cluster.md, "Seeds in lock-step").'
    ]


def _platforms(records: Sequence[Mapping[str, Any]]) -> str:
    """ "[key] CPU; ATen ...; ... (30 runs)": each platform fingerprint of the finished runs
    among `records` (experiments/store/fingerprint.py), with its count."""
    counts: dict[str, int] = {}
    for record in records:
        if record["summary"].get("status") in FINISHED:
            line = describe(record["summary"].get("platform"))
            counts[line] = counts.get(line, 0) + 1
    return "; ".join(f"{line} ({k} runs)" for line, k in sorted(counts.items())) or "none"


def _run_commits(runs: Any) -> str:
    """ "<sha> (30 runs)": each commit the runs' steps ran on, with how many runs ran on it (a
    run resumed on another commit counts under each)."""
    if "summary.git_sha" not in runs.columns:
        return "not recorded"
    each = _commits_of_runs(runs)
    if all(len(commits) <= 1 for commits in each):  # one commit a run: as always said
        counts = runs["summary.git_sha"].fillna("unknown").value_counts()
        return ", ".join(f"{sha} ({k} runs)" for sha, k in counts.items())
    counts: dict[str, int] = {}
    for commits in each:
        for sha in commits or ["unknown"]:
            counts[sha] = counts.get(sha, 0) + 1
    order = sorted(counts.items(), key=lambda item: (-item[1], list(counts).index(item[0])))
    return ", ".join(f"{sha} ({k} runs)" for sha, k in order)


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry: 0 on success, 2 with a one-line `error: ...` on stderr for a user error or a
    full disk, 128 + N for a stop signal N (130 for Ctrl-C); the report in --out is then the
    previous one, or none (`staged_report`)."""
    try:
        with stops_raised(program=__name__ == "__main__"):
            return _main(argv)
    except (_Signalled, KeyboardInterrupt) as stop:  # before the report began, or after it
        name = getattr(stop, "name", "SIGINT")
        what = "interrupted by Ctrl-C" if name == "SIGINT" else f"stopped by {name}"
        print(f"error: {what} (no report was being written)", file=sys.stderr)
        return 128 + int(getattr(_signal, name))


def _main(argv: Sequence[str] | None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m analysis.reports.report",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("roots", nargs="+", type=Path, metavar="RUNS_ROOT")
    parser.add_argument("--out", required=True, type=out_folder, metavar="OUT_DIR")
    parser.add_argument("--name", default="table", help="stem of the table files")
    add_preset_arguments(parser, "report the preset NAME: its runs, grid and claims")
    parser.add_argument(
        "--out-root",
        type=Path,
        metavar="DIR",
        help="the sweep's output root: provenance.txt names the paths under it $OUT/...",
    )
    parser.add_argument(
        "--require-clean",
        action="store_true",
        help="refuse a checkout with modified tracked files, and runs made from one (--publish)",
    )
    parser.add_argument(
        "--conf",
        type=Path,
        default=None,
        metavar="DIR",
        help="config directory to compose the preset from (default: the suite's conf/)",
    )
    one_line_errors(parser)
    args = parser.parse_args(argv)
    plain = args.experiment is None
    without = "without --experiment NAME"
    refuse_inert_flags(
        parser,
        [
            ("--scale", plain and args.scale is not None,
             f"{without} (it selects a preset's runs)"),
            ("--set", plain and bool(args.set), f"{without} (it composes a preset's grid points)"),
            ("--out-root", plain and args.out_root is not None,
             f"{without} (it names the paths in a preset's provenance.txt)"),
            ("--conf", plain and args.conf is not None,
             f"{without} (the preset is composed from it)"),
        ],
    )  # fmt: skip
    if args.conf is None:
        args.conf = CONF_DIR
    command = command_line(list(argv) if argv is not None else sys.argv[1:], args.out_root)
    try:
        check_out(args.out, args.roots, not plain, args.experiment, args.scale)
    except UserError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    try:
        # A damaged run record is left out with one `warning:` line naming its file. The report
        # is written into a folder of its own beside --out, which replaces --out once complete.
        with one_line_warnings(), staged_report(args.out, args.name) as work:
            if args.experiment is None:
                result = report(args.roots, work, args.name, require_clean=args.require_clean)
            else:
                result = report_experiment(
                    args.roots,
                    work,
                    args.experiment,
                    args.scale,
                    name=args.name,
                    conf_dir=args.conf,
                    command=command,
                    overrides=args.set,
                    out_root=args.out_root,
                    require_clean=args.require_clean,
                )
    except UserError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except ReportStopped as stop:
        print(f"error: {stop}", file=sys.stderr)
        return stop.code
    result = {k: moved(v, work, args.out) for k, v in result.items()}
    if args.experiment is None:
        return _said_plain(result)
    print(result["markdown"])
    if result["scaling_markdown"] is not None:
        print()
        print(result["scaling_markdown"])
    if result["claims"]:
        print()
        for claim in result["claims"]:
            print(claim.line())
            for detail in claim.details:
                print(f"  - {detail}")
    print()
    paths = ["table_md", "table_tex", "table_csv", "scaling_md", "scaling_tex", "scaling_csv"]
    paths += [*FIGURE_KEYS, "claims_md", "records", "provenance"]
    for key in paths:
        if result[key] is not None:
            print(result[key])
    return 0


def _said_plain(result: dict[str, Any]) -> int:
    print(result["markdown"])
    if result["figure_png"] is None:
        print("note: no evaluations logged yet, so no figure", file=sys.stderr)
    else:
        print()
        for key in FIGURE_KEYS:
            if result[key] is not None:
                print(result[key])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
