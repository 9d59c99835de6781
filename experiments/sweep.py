"""Run a preset's sweep, only the points without a finished record, then write its report.

    python -m experiments.sweep table1 --scale cpu [--cluster local] [key=value ...]

is what `make table1`, `make table2`, `make figures`, `make report` and `make demo` call. It runs
`python run.py -m experiment=<name> scale=<scale> cluster=<cluster>` into
`<out-root>/<name>/runs`: every point of the preset's grids (hydra_plugins/commsgd_sweeper); a
point whose directory holds a finished run of the same config is skipped, so an interrupted
sweep resumes where it stopped and no finished result is recomputed or overwritten; a point
that fails is recorded and the others run. Then it writes the report of what finished,
`python -m analysis.report --experiment <name> --scale <scale>`, into
`<results>/<name>/<scale>/`, and ends with one `error:` line per failed point and a non-zero
exit code when any failed. A stop (Ctrl-C, a signal) ends it at once, without a report.

Where things go: everything under `--out-root` (default `outputs`, relative to the directory
the command is given in): the runs in `<out-root>/<name>/runs`, the reports in
`<out-root>/results/<name>/<scale>`. The checkout's committed `results/` is written only when
asked for: `--publish` (`make table1 PUBLISH=1`), or `--results results`
(`make table1 RESULTS=results`). `--publish` refuses a checkout with modified tracked files
(before any run), and the report refuses runs made from one: a published result names a commit
that holds its code.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CONF = REPO / "conf"


def fail(message: str) -> None:
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.sweep", description=__doc__)
    parser.add_argument("experiment", help="a preset of conf/experiment/")
    parser.add_argument("--scale", default="cpu", help="smoke | cpu | paper (default cpu)")
    parser.add_argument("--cluster", default="local", help="local | sim | slurm (default local)")
    parser.add_argument("--out-root", default="outputs", help="run records go to OUT/<name>/runs")
    parser.add_argument(
        "--results", help="tables and figures go here (default: OUT/results; see --publish)"
    )
    parser.add_argument(
        "--publish",
        action="store_true",
        help="write the tables and figures into the checkout's results/ (the committed ones)",
    )
    parser.add_argument("--no-run", action="store_true", help="only write the report")
    parser.add_argument("overrides", nargs="*", help="extra key=value overrides for every run")
    args = parser.parse_intermixed_args(argv)

    presets = sorted(p.stem for p in (CONF / "experiment").glob("*.yaml"))
    if args.experiment not in presets:
        fail(f"unknown experiment {args.experiment!r}; presets: {', '.join(presets)}")
    scales = sorted(p.stem for p in (CONF / "scale").glob("*.yaml"))
    if args.scale not in scales:
        fail(f"unknown scale {args.scale!r}; choose from {', '.join(scales)}")
    clusters = sorted(p.stem for p in (CONF / "cluster").glob("*.yaml"))
    if args.cluster not in clusters:
        fail(f"unknown cluster {args.cluster!r}; choose from {', '.join(clusters)}")

    if args.publish and args.results:
        fail("give --publish (the checkout's results/) or --results DIR, not both")
    if args.publish:
        from experiments.store.records import git_commit  # not analysis.report's: pandas, scipy

        if git_commit(REPO).endswith("-dirty"):
            fail(
                "--publish (PUBLISH=1) needs a clean checkout: tracked files are modified (git "
                "status); a published result must come from a commit"
            )
    # Resolved here, against the directory the command was given in: the commands below run
    # from the checkout.
    out_root = _resolve(args.out_root, "--out-root")
    if args.publish:
        results = REPO / "results"
    else:
        results = _resolve(args.results, "--results") if args.results else out_root / "results"
    runs_root = out_root / args.experiment
    command = [
        sys.executable,
        str(REPO / "run.py"),
        "-m",
        f"experiment={args.experiment}",
        f"scale={args.scale}",
        f"cluster={args.cluster}",
        f"out_root={runs_root}",
        *args.overrides,
    ]
    sweep_code, failed = 0, []
    if not args.no_run:
        print("$ " + " ".join(command[1:]), flush=True)
        started = time.time()
        sweep_code = subprocess.run(command, cwd=REPO).returncode
        if sweep_code not in (0, 1, 2):  # a stop (Ctrl-C: 130, a signal: 3): no report
            print(
                f"error: the sweep of {args.experiment} stopped (exit {sweep_code}); rerun the "
                "same command to resume it",
                file=sys.stderr,
            )
            return sweep_code
        failed = failed_points(runs_root / "sweeps", started)
        if sweep_code and not failed:  # refused as a whole (its one line is above): no sweep ran
            return sweep_code
    out = results / args.experiment / args.scale
    report = [
        sys.executable,
        "-m",
        "analysis.report",
        "--experiment",
        args.experiment,
        "--scale",
        args.scale,
        str(runs_root / "runs"),
        "--out",
        str(out),
        # the grid's points as the sweep composed them (cluster=sim sets the clock)
        *(f"--set={o}" for o in [f"cluster={args.cluster}", *args.overrides]),
        "--out-root",
        str(out_root),
        *(["--require-clean"] if args.publish else []),
    ]
    code = subprocess.run(report, cwd=REPO).returncode
    provenance = out / "provenance.txt"
    if code == 0 and provenance.exists():
        # The report records its own command; add the one that ran the sweep (paths in it
        # relative to the checkout or $OUT, as the report's).
        from analysis.report import command_line

        sweep = command_line(
            argv if argv is not None else sys.argv[1:], out_root, module="experiments.sweep"
        )
        try:
            with provenance.open("a") as f:
                f.write(f"sweep command: {sweep}\n")
        except OSError as e:
            print(f"warning: cannot write {provenance}: {e.strerror}", file=sys.stderr)
    if code == 0:
        print(f"report: {out}", flush=True)
    for line in failed:  # at the very end, after the report's output
        print(f"error: {line}", file=sys.stderr)
    if sweep_code:
        print(
            f"error: {len(failed) or 'some'} point(s) of {args.experiment} failed (above); the "
            "report covers the runs that finished; rerun the same command to retry the others",
            file=sys.stderr,
        )
    return sweep_code or code


def _resolve(path: str, option: str) -> Path:
    """`path` as the suite's out_root resolver reads it (experiments/__init__.py: `~`, absolute,
    lengths), or one `error:` line."""
    from experiments import out_dir
    from experiments.errors import UserError

    try:
        return Path(out_dir(path))
    except UserError as e:
        fail(f"{option}: {e}")
        raise  # not reached


def failed_points(sweeps: Path, since: float) -> list[str]:
    """`<point>: <reason>` for each failed point of the sweeps recorded under `sweeps` since
    `since` (the sweeper's `sweep.json`, read by the records' validated reader; a damaged one
    is skipped with a warning)."""
    from experiments.store.records import read_json_object

    lines = []
    for record in sorted(sweeps.glob("*/sweep.json")):
        try:
            if record.stat().st_mtime < since:
                continue
            points = read_json_object(record).get("points")
        except (OSError, ValueError) as e:
            print(f"warning: {record}: unreadable sweep record skipped ({e})", file=sys.stderr)
            continue
        for point in points if isinstance(points, list) else []:
            if isinstance(point, dict) and point.get("status") == "failed":
                label = point.get("point") or " ".join(map(str, point.get("overrides") or []))
                lines.append(f"{label}: {point.get('error')}")
    return lines


if __name__ == "__main__":
    sys.exit(main())
