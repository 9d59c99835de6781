"""W&B comparison reports of the suite's sweeps, built with W&B's own library (wandb-workspaces).

    python -m analysis.reports.wandb_report RUNS_ROOT [RUNS_ROOT ...] --out DIR
        [--experiment NAME] [--scale SCALE] [--set KEY=VALUE ...] [--conf DIR]
        [--mode offline|online] [--entity ENTITY] [--project PROJECT]

`make wandb-report PRESET=<name>` runs it on `$(OUT)/<name>/runs` at `SCALE`, writing beside the
preset's results (`$(OUT)/results/<name>/<scale>`). One W&B Report per sweep: a preset at one
scale, or a `run.py -m` sweep (each its own W&B group, experiments/store/log.py), holding

- a run set of the sweep's runs: its W&B group, the commits its records name (config `git_sha`),
  its scale and the finished runs (summary `status` completed or diverged, the runs a table
  counts), grouped by the rows of its table (the preset's `report.rows`, plus every key that
  separates its runs: `analysis.runs.compare.split_rows`), so that its seeds collapse into one line,
  the mean, with a band of +-1 standard deviation;
- line plots of the test accuracy against the epochs and against the training time (named
  virtual or wall-clock, as the runs' `timing`: `analysis.reports.figures.time_axis_label`), of the
  training loss and of the bytes communicated; a bar plot of the final accuracy (mean and
  standard deviation); of the time to the target accuracy, when there is a target; and of the
  compute against the exposed communication when the runs model a network;
- the table and, for a preset, its claims (each verdict with its interval) as Markdown, made by
  the functions that write `table.md` and `claims.md` (`analysis.reports.report`), and the
  provenance: the commits, this command, the checkout's commit.

Offline (`--mode offline`, the default unless WANDB_MODE=online), nothing leaves the machine:
every report's full spec, the viewspec wandb-workspaces saves (its pydantic model,
`Report._to_model()`, as JSON), is written to `DIR/wandb_report.json`, and the commands that
publish it are printed: `wandb sync` of the runs' offline W&B records, then this command online.
Online (`--mode online`, WANDB_API_KEY or `wandb login`), the reports are saved to W&B and their
URLs printed. A missing or refused key, or no W&B reachable, is one `error:` line and exit code 2
within seconds (the pre-flight's own check, experiments/preflight.py), as is a save that W&B
does not complete within SAVE_TIMEOUT_S.

What it writes: `DIR/wandb_report.json` alone, all at once (a temporary file renamed over it),
and the folder DIR if it is missing; it deletes nothing. An --out that is a file, is or lies in
a RUNS_ROOT (the run records it reads), or whose `wandb_report.json` is not a file, is refused
in one line before any work. Exit codes: 0; 2 for bad input, a write that failed or a refused
W&B (one `error:` line, the previous spec left); 128 + N for a stop (130 for Ctrl-C, 143 for
SIGTERM; analysis/stops.py), nothing written.
"""

from __future__ import annotations

import sys

if __name__ == "__main__":  # a stop while pandas and W&B import (seconds): one line
    from analysis.stops import stop_early

    stop_early("wandb_report")

import argparse  # noqa: E402 - after the stop handlers above
import json  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
import shlex  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
from collections.abc import Sequence  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

from analysis.stops import stoppable  # noqa: E402
from experiments.errors import UserError, one_line_errors, refuse_inert_flags  # noqa: E402

SPEC_NAME = "wandb_report.json"
DEFAULT_PROJECT = "commsgd-bench"  # conf/config.yaml wandb.project
SAVE_TIMEOUT_S = 20.0  # saving the reports, after the login check (<= 8 s): 30 s at most
FINISHED = ("completed", "diverged")
BAND = {"groupby_aggfunc": "mean", "groupby_rangefunc": "stddev"}  # the figures' mean and band
WIDTH, HEIGHT = 12, 8  # a panel: half of the report's 24 columns
# The runs table's columns a reader wants first (`summary:<key>`: experiments/store/log.py).
PINNED = ("final/test_acc", "converged", "time_to_target_s", "comm/bytes", "status")
LATER = "(or build the report offline, the default, and publish it later)"
_abandoned = False  # a save left running past its deadline: the process ends without waiting


@dataclass
class Sweep:
    """The finished runs of one W&B group at one scale, and what their report says."""

    group: str
    scale: str | None
    runs: Any  # one row per finished run (analysis.runs.load.load_summaries columns)
    experiment: str | None = None  # the preset, when the sweep is one
    rows: list[str] = field(default_factory=list)
    title: str = ""
    table_md: str = ""
    claims_md: str = ""
    provenance: str = ""
    project: str = DEFAULT_PROJECT
    entity: str | None = None

    @property
    def name(self) -> str:
        return f"{self.group} ({self.scale})" if self.scale else self.group

    @property
    def commits(self) -> list[str]:
        return sorted({_text(v) for v in _column(self.runs, "summary.git_sha") if _text(v)})


# --- which sweeps -----------------------------------------------------------------------------


def find_sweeps(
    roots: Sequence[str | os.PathLike],
    *,
    experiment: str | None = None,
    scale: str | None = None,
    conf_dir: str | os.PathLike | None = None,
    overrides: Sequence[str] = (),
    command: str = "",
) -> list[Sweep]:
    """The sweeps of the finished runs under `roots` (only preset `experiment`'s at `scale`
    when given), each with its table, claims and provenance."""
    from analysis.reports.report import _select
    from analysis.runs.grid import CONF_DIR
    from analysis.runs.load import load_summaries, one_line_warnings
    from analysis.runs.records import materialized

    conf = Path(conf_dir) if conf_dir is not None else CONF_DIR
    where = ", ".join(str(r) for r in roots)
    with one_line_warnings(), materialized(list(roots)) as dirs:
        everything = load_summaries(*dirs, statuses=None)
        if everything.empty:
            raise UserError(f"no runs (directories with summary.json) under {where}")
        if experiment is not None:
            everything, scale = _select(everything, experiment, scale, where)
        elif scale is not None:
            everything = everything[_column(everything, "scale.name") == scale]
            if everything.empty:
                raise UserError(f"no runs at scale {scale} under {where}")
        status = _column(everything, "summary.status")
        finished = everything[status.isin(FINISHED)]
        if finished.empty:
            raise UserError(
                f"none of the {len(everything)} runs under {where} is completed or diverged"
            )
        groups = finished.assign(
            _group=[_group_of(row) for _, row in finished.iterrows()],
            _scale=[_text(v) or None for v in _column(finished, "scale.name")],
        )
        sweeps = []
        for (group, at), runs in groups.groupby(["_group", "_scale"], sort=True, dropna=False):
            at = None if isinstance(at, float) and math.isnan(at) else at
            runs = runs.drop(columns=["_group", "_scale"])
            names = {_text(v) for v in _column(runs, "experiment_name")}
            preset = (
                group
                if names == {group} and (conf / "experiment" / f"{group}.yaml").is_file()
                else None
            )
            sweep = Sweep(group=group, scale=at, runs=runs, experiment=preset)
            sweep.project = _one(runs, "wandb.project") or DEFAULT_PROJECT
            sweep.entity = _one(runs, "wandb.entity")
            if preset is not None:
                _preset_parts(sweep, dirs, conf, overrides, command)
            else:
                _sweep_parts(sweep, command)
            sweeps.append(sweep)
    return sweeps


def _preset_parts(
    sweep: Sweep, roots: Sequence[Path], conf: Path, overrides: Sequence[str], command: str
) -> None:
    """A preset's table, claims and provenance, by `analysis.reports.report.report_experiment` (its
    figures left out: the report's panels draw them), and the rows its table has."""
    from analysis.reports.report import _node_from_runs, report_experiment
    from analysis.runs.grid import compose_preset

    node = _node_from_runs(sweep.runs, None)
    if not node:
        node = dict(compose_preset(sweep.group, sweep.scale, conf, overrides).report or {})
    with tempfile.TemporaryDirectory(prefix="wandb-report-") as work:
        result = report_experiment(
            roots,
            work,
            sweep.group,
            sweep.scale,
            report_node={**node, "figures": []},
            conf_dir=conf,
            command=command,
            overrides=overrides,
        )
        sweep.claims_md = Path(result["claims_md"]).read_text() if result["claims"] else ""
        sweep.provenance = Path(result["provenance"]).read_text()
    sweep.table_md = result["markdown"]
    sweep.rows = list(result["table"].attrs["rows"])
    sweep.title = str(node.get("title") or sweep.group)


def _sweep_parts(sweep: Sweep, command: str) -> None:
    """An ad-hoc sweep's table (`analysis.reports.report.report`'s: rows split by every varying key)
    and provenance."""
    from analysis.reports.report import TABLE_EXTRA, _run_commits, git_commit
    from analysis.reports.tables import DEFAULT_ROWS, final_accuracy_table, to_markdown
    from analysis.runs.compare import split_rows

    split = split_rows(sweep.runs, DEFAULT_ROWS)
    extra = [c for c in TABLE_EXTRA if c in sweep.runs.columns]
    table = final_accuracy_table(sweep.runs, rows=split.rows, extra=extra)
    note = split.note()
    sweep.table_md = to_markdown(table) + (f"\n\n{note}" if note else "")
    sweep.rows = list(split.rows)
    sweep.title = sweep.group
    sweep.provenance = "\n".join(
        [
            f"command: {command}",
            f"git commit: {git_commit()}",
            f"runs: {len(sweep.runs)} (completed and diverged)",
            f"run commits: {_run_commits(sweep.runs)}",
        ]
    )


def _group_of(row: Any) -> str:
    """The W&B group a run was logged under (experiments/store/log.py `wandb_group`)."""
    return _text(row.get("wandb.group")) or _text(row.get("experiment_name")) or "default"


# --- the report -------------------------------------------------------------------------------


def config_key(column: str) -> str:
    """The W&B key of a config column (`algorithm.name` -> `algorithm.value.name`: W&B wraps
    each top-level config key's value in `{"value": ...}`; analysis' `config.lr` is `lr`)."""
    name = column.removeprefix("config.")
    first, _, rest = name.partition(".")
    return f"{first}.value" + (f".{rest}" if rest else "")


def build_report(sweep: Sweep, *, entity: str | None = None, online: bool = False) -> Any:
    """The wandb-workspaces Report of `sweep`. Offline its run set names no project (which would
    be looked up on W&B); the report's project is the runs' `wandb.project`."""
    import wandb_workspaces.reports.v2 as wr
    from wandb_workspaces import expr

    from analysis.reports.figures import clock_of, time_axis_label

    filters = [expr.Metric("Group") == sweep.group]
    if sweep.commits:
        filters.append(expr.Config(config_key("git_sha")).isin(sweep.commits))
    if sweep.scale:
        filters.append(expr.Config(config_key("scale.name")) == sweep.scale)
    filters.append(expr.Summary("status").isin(list(FINISHED)))
    entity = entity if entity is not None else (sweep.entity or "")
    where = {"entity": entity, "project": sweep.project} if online else {}
    runset = wr.Runset(
        name=sweep.name,
        filters=expr.And(*filters),
        groupby=[f"config.{config_key(r)}" for r in sweep.rows],
        pinned_columns=[f"summary:{k}" for k in PINNED],
        **where,
    )
    time_label = time_axis_label(clock_of(sweep.runs))
    panels = [
        wr.LinePlot(title="test accuracy", x="epoch", y=["test/acc"], title_x="epoch", **BAND),
        wr.LinePlot(
            title=f"test accuracy against {time_label}",
            x="time/train_s",
            y=["test/acc"],
            title_x=time_label,
            **BAND,
        ),
        wr.LinePlot(title="training loss", x="epoch", y=["train/loss"], title_x="epoch", **BAND),
        wr.LinePlot(
            title="bytes communicated (per worker, cumulative)",
            x="epoch",
            y=["comm/bytes"],
            title_x="epoch",
            **BAND,
        ),
        wr.BarPlot(
            title="final test accuracy (mean ± std over seeds)",
            metrics=["final/test_acc"],
            **BAND,
        ),
    ]
    target = _one_number(sweep.runs, "report.target_acc") or _one_number(
        sweep.runs, "scale.target_acc"
    )
    if target is not None:
        panels.append(
            wr.BarPlot(
                title=f"time to test accuracy ≥ {target:g}: {time_label}",
                metrics=["time_to_target_s"],
                **BAND,
            )
        )
    networks = {_text(v) for v in _column(sweep.runs, "network.name")} - {"", "ideal"}
    if networks:
        panels.append(
            wr.BarPlot(
                title=f"compute against exposed communication ({time_label}, whole run)",
                metrics=["time/compute_s", "time/comm_exposed_s"],
                **BAND,
            )
        )
    for i, panel in enumerate(panels):
        panel.layout = wr.Layout(x=WIDTH * (i % 2), y=HEIGHT * (i // 2), w=WIDTH, h=HEIGHT)
    rows = ", ".join(sweep.rows) or "nothing"
    intro = (
        f"**{sweep.title}**: {len(sweep.runs)} finished runs of W&B group `{sweep.group}`"
        + (f" at scale `{sweep.scale}`" if sweep.scale else "")
        + f", grouped by {rows}: each line is the mean over seeds, its band ±1 standard "
        f"deviation. Time is the runs' {time_label}. Built by commsgd-bench "
        "(`analysis/reports/wandb_report.py`) from the runs' records; the tables below are theirs."
    )
    blocks = [
        wr.MarkdownBlock(text=intro),
        wr.PanelGrid(runsets=[runset], panels=panels),
        wr.MarkdownBlock(text=sweep.table_md),
    ]
    if sweep.claims_md:
        blocks.append(wr.MarkdownBlock(text=sweep.claims_md))
    blocks.append(wr.MarkdownBlock(text=f"**Provenance**\n\n```text\n{sweep.provenance}\n```"))
    title = f"{sweep.title} ({sweep.scale})" if sweep.scale else sweep.title
    return wr.Report(
        project=sweep.project,
        entity=entity,
        title=title[:128],
        description=f"commsgd-bench: {sweep.name}, {len(sweep.runs)} runs",
        blocks=blocks,
    )


def report_spec(report: Any) -> dict[str, Any]:
    """The report's viewspec as wandb-workspaces saves it (its pydantic model), as JSON data."""
    return report._to_model().model_dump(mode="json", by_alias=True, exclude_none=True)


def write_spec(sweeps: Sequence[Sweep], reports: Sequence[Any], out: Path) -> Path:
    """`out/wandb_report.json`: per report, what it is of and its full viewspec."""
    from importlib.metadata import version

    from experiments.errors import OutputError
    from experiments.store.records import write_text_atomic

    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out} is a file, not a folder")
    data = {
        "wandb_workspaces": version("wandb-workspaces"),
        "reports": [
            {
                "group": sweep.group,
                "scale": sweep.scale,
                "experiment": sweep.experiment,
                "runs": len(sweep.runs),
                "commits": sweep.commits,
                "rows": sweep.rows,
                "viewspec": report_spec(report),
            }
            for sweep, report in zip(sweeps, reports, strict=True)
        ],
    }
    path = out / SPEC_NAME
    try:
        out.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    except OutputError as error:  # `disk full writing <path>`: the previous spec stays
        raise UserError(f"{error}: nothing written") from None
    except OSError as error:  # the folder could not be made
        raise UserError(f"cannot write {path}: {error.strerror or error}") from None
    return path


# --- publishing -------------------------------------------------------------------------------


def publish_lines(sweeps: Sequence[Sweep], roots: Sequence[Path], argv: Sequence[str]) -> list[str]:
    """What to type to publish the reports: `wandb sync` of the runs' offline W&B records, then
    this command online (`make wandb-report ... WANDB_MODE=online` for a preset's make target)."""
    from experiments.store.provenance import relative_path

    runs = [Path(d) for s in sweeps for d in s.runs["run_dir"]]
    offline = [r for r in runs if any((r / "wandb").glob("offline-run-*"))]
    lines = []
    if offline:
        parents = sorted({relative_path(r.parent) for r in offline})
        dirs = [f"{p}/*/wandb/offline-run-*" for p in parents]
        lines.append(
            f"to publish: wandb sync {' '.join(dirs)}   ({len(offline)} runs' offline W&B records)"
        )
    online = _online_command(sweeps, roots, argv)
    lines.append(f"{'then' if offline else 'to publish'}: {online}")
    return lines


def _online_command(sweeps: Sequence[Sweep], roots: Sequence[Path], argv: Sequence[str]) -> str:
    presets = {s.experiment for s in sweeps}
    if len(sweeps) == 1 and len(roots) == 1 and None not in presets:
        sweep, root = sweeps[0], Path(roots[0])
        if root.name == "runs" and root.parent.name == sweep.experiment:
            out = os.path.normpath(root.parent.parent)
            shown = "" if out == "outputs" else f" OUT={shlex.quote(out)}"
            scale = f" SCALE={sweep.scale}" if sweep.scale else ""
            return f"make wandb-report PRESET={sweep.experiment}{scale}{shown} WANDB_MODE=online"
    kept = [a for a in argv if not a.startswith("--mode")]
    return shlex.join(["python", "-m", "analysis.reports.wandb_report", *kept, "--mode", "online"])


def check_online() -> None:
    """Online needs credentials and a W&B that answers and accepts them, checked as the
    pre-flight of a run checks them (experiments/preflight.py: seconds at most); a UserError
    (one line) otherwise."""
    from experiments.preflight import has_wandb_credentials, wandb_login_problem

    if not has_wandb_credentials():
        raise UserError(
            f"--mode online needs W&B credentials: set WANDB_API_KEY or run `wandb login` {LATER}"
        )
    problem = wandb_login_problem()
    if problem is not None:
        raise UserError(f"--mode online: {problem} {LATER}")


def publish(
    sweeps: Sequence[Sweep], entity: str | None, timeout_s: float | None = None
) -> list[str]:
    """Save each sweep's report to W&B (`check_online` first); their URLs. A save that fails or
    does not end within `timeout_s` (default SAVE_TIMEOUT_S) is a UserError (one line)."""
    global _abandoned

    timeout_s = SAVE_TIMEOUT_S if timeout_s is None else timeout_s
    os.environ.setdefault("WANDB_SILENT", "true")
    outcome: dict[str, Any] = {}

    def save() -> None:
        try:
            from wandb_workspaces.reports.v2 import interface

            urls, default = [], None
            for sweep in sweeps:
                who = entity or sweep.entity
                if not who:  # the account's default entity
                    default = default or interface._get_api().default_entity
                    who = default
                report = build_report(sweep, entity=who, online=True)
                report.save()
                urls.append(report.url)
            outcome["urls"] = urls
        except BaseException as error:  # noqa: BLE001 - said in one line by the caller
            outcome["error"] = error

    saving = threading.Thread(target=save, name="commsgd-wandb-report", daemon=True)
    saving.start()
    saving.join(timeout_s)
    if saving.is_alive():
        _abandoned = True
        raise UserError(f"W&B did not save the report within {timeout_s:g} s: try again later")
    if "error" in outcome:
        raise UserError(f"W&B did not save the report: {_why(outcome['error'])}")
    return outcome["urls"]


# --- the command ------------------------------------------------------------------------------


def check_out(out: Path, roots: Sequence[Path]) -> None:
    """Refuse (UserError, before any work) an --out the spec cannot go to: a file, a folder
    that is or lies in a RUNS_ROOT (the records read), a `wandb_report.json` there that is not
    a file (a directory would be found only once the report is built)."""
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out} is a file, not a folder")
    here = out.resolve()
    for root in roots:
        if root.is_dir() and here.is_relative_to(root.resolve()):
            raise UserError(
                f"--out {out} is in the runs root {root} it reads: name a folder outside it "
                "(a preset's results folder)"
            )
    spec = out / SPEC_NAME
    if (spec.exists() or spec.is_symlink()) and not spec.is_file():
        raise UserError(f"--out {out}: its {SPEC_NAME} is not a file (a directory?)")


@stoppable("wandb_report", "nothing was written (a previous wandb_report.json is unchanged)")
def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry: 0 on success; a user error, a refused key or an unreachable W&B is one
    `error:` line and exit code 2."""
    from analysis.reports.staging import out_folder
    from analysis.runs.grid import add_preset_arguments
    from experiments.errors import OutputError

    parser = argparse.ArgumentParser(
        prog="python -m analysis.reports.wandb_report",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("roots", nargs="+", type=Path, metavar="RUNS_ROOT")
    parser.add_argument(
        "--out",
        required=True,
        type=out_folder,
        metavar="DIR",
        help=f"where {SPEC_NAME} goes (a preset's results folder)",
    )
    add_preset_arguments(parser, "only the preset NAME's runs")
    parser.add_argument(
        "--conf",
        type=Path,
        default=None,
        metavar="DIR",
        help="config directory to compose presets from (default: conf/)",
    )
    default_mode = "online" if os.environ.get("WANDB_MODE", "").strip() == "online" else "offline"
    parser.add_argument(
        "--mode",
        choices=("offline", "online"),
        default=default_mode,
        help="offline: write the spec (default; WANDB_MODE=online: online); "
        "online: save the reports to W&B",
    )
    parser.add_argument(
        "--entity", help="W&B entity (default: the runs' wandb.entity, else the account's)"
    )
    parser.add_argument("--project", help="W&B project (default: the runs' wandb.project)")
    one_line_errors(parser)
    args = parser.parse_args(argv)
    refuse_inert_flags(
        parser,
        [("--set", args.experiment is None and bool(args.set),
          "without --experiment NAME (it composes a preset's grid points)")],
    )  # fmt: skip
    argv = list(argv) if argv is not None else sys.argv[1:]
    from experiments.store.provenance import command_line

    try:
        check_out(args.out, args.roots)  # before the W&B library's import (seconds)
        try:
            import wandb_workspaces.reports.v2  # noqa: F401
        except ImportError:
            raise UserError(
                "W&B reports need wandb-workspaces: pip install 'wandb-workspaces>=0.4' "
                "(or make install)"
            ) from None
        if args.mode == "online":  # before any work
            check_online()
        sweeps = find_sweeps(
            args.roots,
            experiment=args.experiment,
            scale=args.scale,
            conf_dir=args.conf,
            overrides=args.set,
            command=command_line(argv, module="analysis.reports.wandb_report"),
        )
        for sweep in sweeps:
            sweep.project = args.project or sweep.project
        try:
            reports = [build_report(sweep, entity=args.entity) for sweep in sweeps]
        except ValueError as error:  # a filter W&B's expressions cannot hold
            raise UserError(f"cannot build the W&B report: {_why(error)}") from None
        path = write_spec(sweeps, reports, args.out)
        for sweep in sweeps:
            print(
                f"W&B report of {sweep.name}: {len(sweep.runs)} runs of group {sweep.group}, "
                f"grouped by {', '.join(sweep.rows)}"
            )
        print(f"wrote {path}")
        _say_unmirrored(sweeps)
        if args.mode == "offline":
            for line in publish_lines(sweeps, args.roots, argv):
                print(line)
            return 0
        for url in publish(sweeps, args.entity):
            print(f"W&B report: {url}")
    except UserError as error:
        print(f"error: {error}", file=sys.stderr, flush=True)
        return 2
    except OutputError as error:  # a full disk while the report's parts were made (a temp dir)
        print(f"error: {error}: nothing written", file=sys.stderr, flush=True)
        return 2
    return 0


def _say_unmirrored(sweeps: Sequence[Sweep]) -> None:
    """One `note:` line when some runs ran with wandb.mode=disabled: W&B has nothing of them."""
    total = sum(len(s.runs) for s in sweeps)
    disabled = sum(int((_column(s.runs, "wandb.mode") == "disabled").sum()) for s in sweeps)
    if disabled:
        print(
            f"note: {disabled} of the {total} runs ran with wandb.mode=disabled: W&B has none "
            "of them, so the report's panels leave them out (the tables hold them)",
            file=sys.stderr,
        )


# --- small helpers ----------------------------------------------------------------------------


def _column(frame: Any, name: str) -> Any:
    import pandas as pd

    if name in frame.columns:
        return frame[name]
    return pd.Series([None] * len(frame), index=frame.index, dtype=object)


def _text(value: Any) -> str:
    """A cell as text; "" for a missing one."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return str(value)


def _one(frame: Any, name: str) -> str | None:
    """The value of column `name` that most runs have, or None."""
    values = [_text(v) for v in _column(frame, name) if _text(v)]
    return max(sorted(set(values)), key=values.count) if values else None


def _one_number(frame: Any, name: str) -> float | None:
    values = {
        float(v) for v in _column(frame, name) if isinstance(v, int | float) and not math.isnan(v)
    }
    return values.pop() if len(values) == 1 else None


def _why(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return (f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__)[:300]


if __name__ == "__main__":
    code = main()
    if _abandoned:  # a save that W&B left hanging: no wait for it at exit
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    raise SystemExit(code)
