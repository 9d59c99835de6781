"""Each method's learning rate, chosen on a validation split: experiment=tune -> conf/tuned/.

    python -m analysis.tuning.tune RUNS_ROOT --scale cpu [--out conf/tuned/cpu.yaml]

reads the finished runs of experiment=tune at the scale (their `test/*` metrics are on the
validation split held out of the training data: `dataset.validation_fraction`), and writes, per
algorithm, every grid point's mean, std and n of the final validation accuracy and the chosen
base LR, by the rule below (docs/tuning.md). `make tune` runs the sweep, then this. The
file is committed: the cpu scale's `lr` reads it (experiments/config/tuned.py), so a retune is
a diff a reviewer sees, and the runs it changes are new runs, never changed records.

The rule (RULE, written into the file): the grid point with the best mean final validation
accuracy; the points whose mean lies within the seeds' spread of it (the larger of the two
sample stds) are ties, broken by the earlier mean time to the target accuracy (a point whose
runs did not all reach it comes after those that did), then by the smaller learning rate. A
time to target is known only to the evaluation at which it was reached, so two ties whose times
lie within one evaluation interval of each other (the larger of their mean intervals) are tied
in time too: among them the better mean accuracy wins. Without this a 0.07 s difference of the
virtual clock at the same epoch picked the lowest LR of a flat grid (LOSP at fmnist). A
diverged run counts as accuracy 0, as in the claims. A choice at the grid's edge is flagged
(`edge: true`): a wider grid might do better there.

What it writes: the one tuning file (`--out`, default conf/tuned/<scale>.yaml), whole and at
once (a temporary file renamed over it: a stop or a full disk leaves the previous file). An
`--out` that is a directory, not a .yaml file, inside the runs it reads, inside the checkout's
committed results/, or an existing file that is not a tuning file is refused in one line before
any work (`check_out`). Exit codes: 0 written; 2 bad input (no finished runs, runs of two
settings, a bad `--out`); 130 Ctrl-C, 128 + N signal N (analysis/stops.py), nothing written.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from analysis.reports.report import git_commit
from analysis.reports.tables import ACC as EVAL_ACC
from analysis.reports.tables import TIME, time_to_target
from analysis.runs.compare import run_values, varying_columns
from analysis.runs.load import TAU_LESS, load_runs, load_summaries
from analysis.stops import stoppable
from experiments.config.tuned import TUNED_DIR, tuned_path
from experiments.errors import OutputError, UserError, one_line_errors
from experiments.store.provenance import REPO, command_line, relative_path

RULE = (
    "best mean final validation accuracy; grid points within the seeds' spread of it (mean "
    "within the larger of the two sample stds) are ties, broken by the earlier mean time to "
    "the target accuracy (points whose runs did not all reach it last; times within one "
    "evaluation interval of the earliest are equal, and among those the better mean accuracy "
    "wins), then by the smaller LR; a diverged run counts as accuracy 0"
)
ACC = "summary.final/test_acc"


def grid_points(runs: pd.DataFrame, target: float | None) -> pd.DataFrame:
    """One row per (algorithm, lr) of the tune runs `runs` (one row per run, with the metric
    columns `reached` and `time_s` of `time_to_target` when `target` is given): `mean`, `std`,
    `n` of the final validation accuracy, `diverged`, `reached` (runs that reached the target)
    and `time_to_target_s` (their mean time to it); with a column `interval_s` (a run's time
    between two evaluations), `interval_s`, its mean: the resolution of `time_to_target_s`."""
    rows = []
    # load_summaries calls the config's `lr` `config.lr` (the metric rows log an `lr` too)
    lr_column = "config.lr" if "config.lr" in runs.columns else "lr"
    for (algorithm, lr), group in runs.groupby(["algorithm.name", lr_column], sort=True):
        diverged = group["summary.status"].eq("diverged")
        acc = pd.to_numeric(group[ACC], errors="coerce").where(~diverged, 0.0).dropna()
        reached = group["reached"].eq(True) if "reached" in group else pd.Series(False)
        times = pd.to_numeric(group.get("time_s", pd.Series(dtype=float)), errors="coerce")
        rows.append(
            {
                "algorithm": algorithm,
                "lr": float(lr),
                "mean": float(acc.mean()) if len(acc) else math.nan,
                "std": float(acc.std()) if len(acc) > 1 else 0.0,
                "n": int(len(acc)),
                "diverged": int(diverged.sum()),
                "reached": int(reached.sum()),
                "time_to_target_s": float(times[reached.to_numpy()].mean())
                if reached.any()
                else math.nan,
                "interval_s": float(pd.to_numeric(group["interval_s"], errors="coerce").mean())
                if "interval_s" in group
                else 0.0,
            }
        )
    return pd.DataFrame(rows)


def eval_intervals(metrics: pd.DataFrame) -> pd.Series:
    """Per run (index `run_dir`): `interval_s`, the median training time between two of its
    evaluations (the resolution of its time to target; NaN with fewer than two)."""
    if metrics.empty or TIME not in metrics.columns or EVAL_ACC not in metrics.columns:
        return pd.Series(dtype=float, name="interval_s", index=pd.Index([], name="run_dir"))
    order = [c for c in ("step", "epoch") if c in metrics.columns]
    data = metrics[pd.to_numeric(metrics[EVAL_ACC], errors="coerce").notna()]
    data = data.sort_values(order, kind="stable") if order else data
    times = pd.to_numeric(data[TIME], errors="coerce")
    gaps = times.groupby(data["run_dir"], sort=False).diff()
    return gaps[gaps > 0].groupby(data["run_dir"]).median().rename("interval_s")


def choose(points: pd.DataFrame) -> float:
    """The chosen LR among one algorithm's grid `points` (rows of `grid_points`), by RULE."""
    points = points.dropna(subset=["mean"]).reset_index(drop=True)
    if points.empty:
        raise UserError("no grid point with a finished run")
    best = points.loc[points["mean"].idxmax()]
    spread = points["std"].clip(lower=best["std"])
    ties = points[points["mean"] >= best["mean"] - spread]

    ties = ties.assign(
        all_reached=(ties["n"] > 0) & ties["reached"].eq(ties["n"]),
        interval=ties["interval_s"].fillna(0.0) if "interval_s" in ties else 0.0,
    )
    reached = ties[ties["all_reached"]]
    if not reached.empty:
        first = reached.loc[reached["time_to_target_s"].idxmin()]
        # a time is known to one evaluation interval: those within it of the earliest tie
        resolution = reached["interval"].clip(lower=first["interval"])
        ties = reached[reached["time_to_target_s"] <= first["time_to_target_s"] + resolution]
    return float(
        min((row for _, row in ties.iterrows()), key=lambda r: (-r["mean"], r["lr"]))["lr"]
    )


def tuned_document(
    points: pd.DataFrame, setting: dict[str, Any], command: str, commit: str
) -> dict[str, Any]:
    """The content of conf/tuned/<scale>.yaml."""
    grid = sorted(points["lr"].unique().tolist())
    lr: dict[str, Any] = {}
    for algorithm, mine in points.groupby("algorithm", sort=True):
        chosen = choose(mine)
        present = sorted(mine["lr"].tolist())
        lr[str(algorithm)] = {
            "chosen": chosen,
            "edge": bool(len(present) > 1 and chosen in (present[0], present[-1])),
            "points": {
                float(row["lr"]): {
                    "mean": round(float(row["mean"]), 4),
                    "std": round(float(row["std"]), 4),
                    "n": int(row["n"]),
                    "diverged": int(row["diverged"]),
                    "reached_target": int(row["reached"]),
                    "time_to_target_s": None
                    if math.isnan(row["time_to_target_s"])
                    else round(float(row["time_to_target_s"]), 3),
                    **(
                        {"eval_interval_s": round(float(row["interval_s"]), 3)}
                        if row.get("interval_s", 0.0) > 0
                        else {}
                    ),
                }
                for _, row in mine.sort_values("lr").iterrows()
            },
        }
    return {
        "setting": setting,
        "grid": [float(v) for v in grid],
        "rule": RULE,
        "not_tuned": "momentum, Nesterov, weight decay, the schedule, tau and each method's own "
        "knobs keep their defaults; one LR per method for every tau",
        "command": command,
        "commit": commit,
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "lr": lr,
    }


HEADER = """\
# Base learning rates chosen per algorithm on a validation split (never the test set): written
# by `make tune` (python -m analysis.tuning.tune or, for a preset's own setting,
# analysis.tuning.tune_preset; the rule below); read by the scale's `lr`
# (experiments/config/tuned.py). Per algorithm: the chosen base LR (per 128 samples, scaled linearly
# by the global batch as every LR of the suite), `edge` when it lies at the grid's edge, and per
# grid point the final validation accuracy's mean, std and n over the seeds.
"""


def write_tuned(document: dict[str, Any], path: str | Path) -> Path:
    """Write the tuning `document` to `path` whole and at once (a reader, or a run composing its
    config meanwhile, sees the previous file or the new one, never a torn one); a UserError
    (one line) when it cannot be written."""
    from experiments.store.records import write_text_atomic

    path = Path(path)
    body = yaml.safe_dump(document, sort_keys=False, default_flow_style=False, width=100)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, HEADER + body)
    except OSError as e:
        raise UserError(f"cannot write {path}: {e.strerror or e}") from None
    except OutputError as e:
        raise UserError(str(e)) from None
    return path


def is_tuning_file(path: Path) -> bool:
    """Whether the existing file `path` is a tuning file this suite wrote (a YAML mapping with
    its `lr` and `rule`), so that overwriting it is a retune."""
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return False
    return isinstance(data, dict) and isinstance(data.get("lr"), dict) and "rule" in data


def check_out(out: str | Path, inputs: Sequence[str | Path] = ()) -> Path:
    """The tuning file `out` may be written: a UserError (one line) before any work when it is
    a directory, not a .yaml file, inside one of `inputs` (the runs it is chosen from), inside
    the checkout's committed results/, an existing file that is not a tuning file (a damaged
    one in conf/tuned/ may be replaced: that is a retune), or in a folder that cannot be
    written. The path, absolute."""
    path = Path(out).expanduser().absolute()
    if path.is_dir():
        raise UserError(f"--out {out} is a directory: name the tuning file (.yaml) to write")
    if path.suffix not in (".yaml", ".yml"):
        raise UserError(f"--out {out} is not a .yaml file: the tuning file is YAML")
    for root in inputs:
        root = Path(root).absolute()
        if path == root or root in path.parents:
            raise UserError(f"--out {out} is inside the runs it reads ({root}): write it elsewhere")
    results = REPO / "results"
    if results in path.resolve().parents:
        raise UserError(f"--out {out} is inside the checkout's committed results/: not a result")
    tuned = path.resolve().parent == TUNED_DIR or TUNED_DIR in path.resolve().parents
    if (path.exists() or path.is_symlink()) and not (tuned or is_tuning_file(path)):
        raise UserError(f"--out {out} exists and is not a tuning file: it is not overwritten")
    folder = path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise UserError(f"--out {out}: {folder} is a file, not a folder")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise UserError(f"--out {out}: {folder} cannot be written")
    return path


def tune(
    roots: Sequence[str | Path],
    scale: str,
    out: str | Path | None,
    command: str,
    preset: str | None = None,
    tuned_at: dict[str, Any] | None = None,
) -> tuple[Path, dict[str, Any]]:
    """Choose each algorithm's LR from the finished tune runs under `roots` at `scale` (those of
    `experiment=tune`, or with `preset` those of analysis.tuning.tune_preset: `experiment_name`
    tune_<preset>, its grid fixed at `tuned_at`) and write the file (`out`, default the scale's
    or the preset's tuning file)."""
    summaries = load_summaries(*roots, statuses=("completed", "diverged"))
    if summaries.empty or "experiment_name" not in summaries:
        raise UserError(f"no finished runs under {', '.join(map(str, roots))}")
    name = f"tune_{preset}" if preset else "tune"
    runs = summaries[
        summaries["experiment_name"].eq(name) & summaries["scale.name"].eq(scale)
    ].drop_duplicates("run_dir")
    if runs.empty:
        raise UserError(f"no finished runs of experiment_name={name} at scale {scale}")
    _check_one_setting(runs)
    validation = pd.to_numeric(runs.get("dataset.validation_fraction"), errors="coerce")
    if not (validation > 0).all():
        raise UserError("tune runs without a validation split (dataset.validation_fraction=0)")
    target = float(runs["scale.target_acc"].iloc[0]) if "scale.target_acc" in runs else None
    if target is not None:
        metrics = load_runs(*roots, statuses=("completed", "diverged"))
        mine = metrics[metrics["run_dir"].isin(runs["run_dir"])]
        runs = runs.join(time_to_target(mine, target), on="run_dir")
        runs = runs.join(eval_intervals(mine), on="run_dir")
    first = runs.iloc[0]

    def number(key: str) -> int | None:
        value = pd.to_numeric(first.get(key), errors="coerce")
        return None if pd.isna(value) else int(value)

    setting = {
        **({"preset": preset, "tuned_at": dict(tuned_at or {})} if preset else {}),
        "scale": scale,
        "dataset": str(first.get("dataset.name")),
        "validation_fraction": float(first["dataset.validation_fraction"]),
        **{key: number(key) for key in ("workers", "epochs", "tau", "batch_size")},
        **{
            key.split(".", 1)[0] if key == "partition.name" else key: str(first[key])
            for key in ("partition.name", "compute.slowdown", "network.name", "timing")
            if key in runs and not pd.isna(first[key])
        },
        "seeds": sorted(int(s) for s in runs["seed"].unique()),
        "target_acc": target,
    }
    document = tuned_document(grid_points(runs, target), setting, command, git_commit())
    if preset:
        at = ", ".join(f"{k} = {v}" for k, v in (tuned_at or {}).items()) or "its one setting"
        document["not_tuned"] = (
            "momentum, Nesterov, weight decay, the schedule and each method's own knobs keep "
            f"their defaults; one LR per method for every point of the preset (tuned at {at}), "
            "as the seed papers use one LR for every tau"
        )
    shas = runs["summary.git_sha"].fillna("(not recorded)").astype(str).value_counts()
    document["run_commits"] = {sha: int(k) for sha, k in sorted(shas.items())}
    path = write_tuned(document, out or tuned_path(scale, preset))
    return path, document


# What tuning varies besides the algorithm and its knobs: the LR (a config key named like the
# metric, hence the column `config.lr`) and the seed. Anything else that differs is another setting.
TUNED_COLUMNS = ("config.lr", "seed")


def _check_one_setting(runs: pd.DataFrame) -> None:
    """A UserError naming the configuration keys (other than the LR, the seed and the algorithm)
    whose values differ among `runs`: runs of two settings (epochs 1 and 2) would be pooled into
    one choice with a `setting:` that names one of them. The identity columns that vary are
    `analysis.runs.compare.varying_columns`'; tau, which the tau-less methods do not read, is
    compared among the others."""
    differ = [
        c
        for c in varying_columns(runs, exclude=(*TUNED_COLUMNS, "tau"))
        if not c.startswith("algorithm")
    ]
    with_tau = runs[~runs["algorithm.name"].isin(TAU_LESS)]
    differ += [c for c in varying_columns(with_tau, exclude=TUNED_COLUMNS) if c == "tau"]
    if differ:
        shown = [
            f"{c} ({', '.join(sorted({str(v) for v in run_values(runs, c)})[:3])})" for c in differ
        ]
        raise UserError(
            f"the tune runs differ in {'; '.join(shown)}: tune one setting at a time "
            "(runs that differ only in the LR, the seed and the algorithm)"
        )


def print_choices(document: dict[str, Any], path: Path) -> None:
    """One line per algorithm of a written tuning `document` (its choice, whether at the grid's
    edge, and that point's validation accuracy), then where it was written."""
    for algorithm, entry in document["lr"].items():
        edge = " (at the grid's edge)" if entry["edge"] else ""
        point = entry["points"][entry["chosen"]]
        print(
            f"{algorithm:18s} lr {entry['chosen']:g}{edge}: validation acc "
            f"{point['mean']:.3f} ± {point['std']:.3f} (n={point['n']})"
        )
    print(f"wrote {relative_path(path, REPO)}")


@stoppable("analysis.tuning.tune", "nothing was written")
def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m analysis.tuning.tune", description=__doc__)
    parser.add_argument("roots", nargs="+", help="folders holding the tune runs")
    parser.add_argument("--scale", default="cpu")
    parser.add_argument("--out", help="default: conf/tuned/<scale>.yaml")
    parser.add_argument("--command", help="the command recorded in the file (default: this one)")
    one_line_errors(parser)
    args = parser.parse_args(argv)
    try:
        for root in args.roots:
            if not Path(root).is_dir():
                raise UserError(f"{root}: no such folder of tune runs")
        out = check_out(args.out or tuned_path(args.scale), args.roots)
        command = args.command or command_line(sys.argv[1:], module="analysis.tuning.tune")
        path, document = tune(args.roots, args.scale, out, command)
    except UserError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print_choices(document, path)
    return 0


if __name__ == "__main__":
    from analysis.stops import stop_early

    stop_early("analysis.tuning.tune")  # (pandas imports for seconds; set before main)
    sys.exit(main())
