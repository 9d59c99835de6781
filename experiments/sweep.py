"""Run a preset's sweep, only the points without a finished record, then write its report.

    python -m experiments.sweep table1 --scale cpu [--cluster local] [key=value ...]

is what `make table1`, `make table2`, `make figures`, `make report` and `make demo` call. It runs
`python run.py -m experiment=<name> scale=<scale> cluster=<cluster>` into
`<out-root>/<name>/runs`: every point of the preset's grids (hydra_plugins/commsgd_sweeper); a
point whose directory holds a finished run of the same config is skipped, so an interrupted
sweep resumes where it stopped and no finished result is recomputed or overwritten; a point
that fails is recorded and the others run. Then it writes the report of what finished,
`python -m analysis.reports.report --experiment <name> --scale <scale>`, into
`<results>/<name>/<scale>/`, and ends with one `error:` line per reason its points failed for
(naming the points) and a non-zero exit code when any failed. A stop (Ctrl-C, SIGTERM, SIGHUP,
SIGUSR1/2) is passed on to the command running (run.py checkpoints its run and stops; the report
leaves the previous one), and the sweep ends without a report, in one `error:` line (exit code 3,
130 for Ctrl-C); a command that has not ended GRACE_S seconds later (a second stop:
AGAIN_GRACE_S) is killed with every process it started. A run.py killed from outside (the
out-of-memory killer's SIGKILL: a share holds a lock-step group of seeds in memory) ends the
sweep the same way, its line naming the share and the signal (exit code 128 + the signal), once
the other shares ended. Finished runs stay as they are, an unfinished one
resumes when the same command is given again.

Every refusal that needs no work comes before any: the preset, scale and cluster, the tuning
files its runs read (experiments/config/tuned.py `check_tuned`: an empty or damaged file, a
directory in its place, a rate that is not a finite number > 0, named with its path and key),
`--publish`'s
clean checkout and its runs made from a modified one, where the report goes (`--check`: those
checks alone, what `make demo PUBLISH=1` runs before its first point).

Where things go: everything under `--out-root` (default `outputs`, relative to the directory
the command is given in): the runs in `<out-root>/<name>/runs`, the reports in
`<out-root>/results/<name>/<scale>`. The checkout's committed `results/` is written only when
asked for: `--publish` (`make table1 PUBLISH=1`), or `--results results`
(`make table1 RESULTS=results`). `--publish` refuses a checkout with modified tracked files
(before any run), and the report refuses runs made from one: a published result names a commit
that holds its code.
"""

from __future__ import annotations

import os
import signal
import sys

if __name__ == "__main__":  # a stop while the sweep starts: one line (main() then takes over)

    def _stop_early(signum: int, frame) -> None:
        name = signal.Signals(signum).name
        how = "interrupted by Ctrl-C" if name == "SIGINT" else f"stopped by {name}"
        print(f"error: the sweep {how} before it started: nothing was run", file=sys.stderr)
        os._exit(130 if name == "SIGINT" else 3)

    for _sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(_sig, _stop_early)
    # the runs it starts inherit the allocator's settings (experiments/workers/allocator.py)
    from experiments.workers.allocator import configure

    configure()

import argparse  # noqa: E402 - after the handlers above
import subprocess  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

from experiments.errors import one_line_errors, said_once  # noqa: E402 - torch-free
from experiments.store.provenance import REPO, command_line  # noqa: E402 - torch-free

CONF = REPO / "conf"


# After a stop, how long the running command has to checkpoint and end before it is killed with
# everything it started: a run.py stops at its next safe step, which for a lock-step group of 8
# seeds x 8 workers at scale=fmnist on a loaded machine came about a minute later (8 s killed
# one before its checkpoint, and half a group's work was lost). A second stop shortens the wait
# to AGAIN_GRACE_S: a second Ctrl-C stops run.py at once, without a checkpoint.
GRACE_S = 180.0
AGAIN_GRACE_S = 8.0
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)


def fail(message: str) -> None:
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


class Stop(Exception):
    """The sweep was stopped by signal `signum`."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _own_group_dying_with_parent() -> None:
    """In the child, before it runs: a process group of its own (the sweep passes each stop on
    once; a Ctrl-C at the terminal reaches the sweep alone), and SIGTERM when the sweep dies
    (Linux; a SIGKILL of the sweep too), so that no run goes on alone."""
    os.setpgid(0, 0)
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def run_child(command: list[str]) -> int:
    """Run `command` (from the checkout) in a process group of its own, the sweep's stop
    signals passed on to it; its exit code. A stop: raised as `Stop` once the command ended
    (GRACE_S at most, AGAIN_GRACE_S after a second stop: then its process group is killed)."""
    return run_children([command])[0]


def run_children(
    commands: list[list[str]], ctrl_c_as: int = signal.SIGINT, say_wait: bool = True
) -> list[int]:
    """`run_child` for several commands at once (`--jobs`): each in a process group of its own,
    every stop passed on to each (Ctrl-C as `ctrl_c_as`), their groups killed GRACE_S after the
    first stop or AGAIN_GRACE_S after a second (`say_wait`: said at the first stop; off where the
    command is itself a sweep that says it); their exit codes once all ended, or `Stop` after
    a stop. The handlers are in place before the first child starts: a stop between a start and
    them would end this process with the child still running (issue 50)."""
    stops: list[tuple[int, float]] = []  # (signal, when)
    children: list[subprocess.Popen] = []

    def passed(signum: int) -> int:
        return ctrl_c_as if signum == signal.SIGINT else signum

    def forward(signum: int, frame) -> None:
        stops.append((signum, time.monotonic()))
        for child in children:
            try:
                child.send_signal(passed(signum))
            except OSError:
                pass

    previous = {sig: signal.signal(sig, forward) for sig in STOP_SIGNALS}
    try:
        for command in commands:
            if stops:  # a stop came before this one started: it does not start
                break
            child = subprocess.Popen(command, cwd=REPO, preexec_fn=_own_group_dying_with_parent)
            children.append(child)
            if stops:  # came while it started: passed on now
                child.send_signal(passed(stops[0][0]))
        told = not say_wait
        while any(child.poll() is None for child in children):
            time.sleep(0.25)  # (a blocking wait would not see a stop)
            if stops and not told:
                told = True
                print(
                    f"the sweep: waiting for the running command to checkpoint and stop (at "
                    f"most {GRACE_S:.0f} s, then it is killed); a second stop ends it within "
                    f"{AGAIN_GRACE_S:.0f} s",
                    file=sys.stderr,
                    flush=True,
                )
            if killing_time(stops, time.monotonic()):  # end it all
                for child in children:
                    kill_group(child)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for child in children:
            kill_group(child, only_left=True)
    if stops:
        raise Stop(stops[0][0])
    return [child.wait() for child in children]


def killing_time(stops: list[tuple[int, float]], now: float) -> bool:
    """Whether the running commands are to be killed now, given the stops so far (signal, when):
    GRACE_S after the first, AGAIN_GRACE_S after the second."""
    return bool(stops) and (
        now - stops[0][1] > GRACE_S or (len(stops) > 1 and now - stops[1][1] > AGAIN_GRACE_S)
    )


def shares(command: list[str], jobs: int, overrides: list[str]) -> list[list[str]]:
    """`command` (`run.py -m ...`) as `jobs` concurrent sweeps: share k of N runs every N-th of
    the sweep's units of work (a lock-step group of seeds, or a run alone:
    hydra_plugins/commsgd_sweeper, `hydra.sweeper.shard`), with the cores divided among them
    (`threads_per_worker`, unless the overrides set it). Why: two processes of one thread each
    keep both cores busy where one process's two OpenMP threads wait for each other when the
    cores are shared, and runs whose seeds cannot train in lock-step run two at a time
    (docs/cluster.md, "Sweeps in parallel", the measurements)."""
    if jobs == 1:
        return [command]
    threads = (
        []
        if any(o.startswith("threads_per_worker=") for o in overrides)
        else [f"threads_per_worker={max(1, (os.cpu_count() or 1) // jobs)}"]
    )
    return [[*command, *threads, f"hydra.sweeper.shard={k}/{jobs}"] for k in range(jobs)]


def kill_group(child: subprocess.Popen, only_left: bool = False) -> None:
    """SIGKILL the child's process group (the command and what it started that stayed in it);
    `only_left`: only what is left once the command itself ended."""
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except OSError:  # none left
        return
    if not only_left:
        child.wait()


def stopped_line(experiment: str, stop: Stop, what: str) -> int:
    """The one line of a sweep that was stopped; its exit code."""
    ctrl_c = stop.signum == signal.SIGINT
    how = "interrupted by Ctrl-C" if ctrl_c else f"stopped by {signal.Signals(stop.signum).name}"
    print(
        f"error: the sweep of {experiment} {how}{' ' + what if what else ''}: finished runs are "
        "kept, no report was "
        "written; rerun the same command to resume",
        file=sys.stderr,
        flush=True,
    )
    return 130 if ctrl_c else 3


def killed_line(experiment: str, share: int, signum: int, shares: int) -> int:
    """The one line of a sweep whose run.py (share `share` of `shares`, 0-based) was killed by
    `signum` from outside; its exit code, 128 + the signal. SIGKILL is most often the kernel's
    out-of-memory killer: a share holds its lock-step group in memory (at scale=fmnist a group
    of 8 seeds x 8 workers held 8.8 GB), so two shares can need twice that."""
    try:
        name = signal.Signals(signum).name
    except ValueError:  # a number with no name here
        name = f"signal {signum}"
    which = f"share {share + 1} of {shares}" if shares > 1 else "its run.py"
    why = (
        " (the kernel's out-of-memory killer sends it: each share holds a lock-step group of "
        "seeds in memory; fewer --jobs, or a smaller cluster.lockstep_seeds, need less)"
        if signum == signal.SIGKILL
        else ""
    )
    print(
        f"error: the sweep of {experiment}: {which} was killed by {name}{why}; finished runs "
        "are kept, no report was written; rerun the same command to resume",
        file=sys.stderr,
        flush=True,
    )
    return 128 + signum


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
    parser.add_argument(
        "--check",
        action="store_true",
        help="only the checks that need no work (what make demo PUBLISH=1 runs first): nothing "
        "is run or written",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="run the sweep as this many concurrent sweeps, each a share of its seeds' lock-step "
        "groups and single runs, with the cores shared among them (default 1; docs/cluster.md)",
    )
    parser.add_argument("overrides", nargs="*", help="extra key=value overrides for every run")
    one_line_errors(parser)
    previous = {sig: signal.signal(sig, _raise_stop) for sig in STOP_SIGNALS}
    args = None
    try:
        args = parser.parse_intermixed_args(argv)
        return _main(args, argv)
    except Stop as stop:  # between two commands: none runs
        return stopped_line(args.experiment if args else "?", stop, "")
    finally:
        # the sweep's own process ends next: a stop then has nothing left to stop
        program = __name__ == "__main__"
        for sig, handler in previous.items():
            signal.signal(sig, signal.SIG_IGN if program else handler)


def _raise_stop(signum: int, frame) -> None:
    raise Stop(signum)


def _main(args: argparse.Namespace, argv: list[str] | None) -> int:
    presets = sorted(p.stem for p in (CONF / "experiment").glob("*.yaml"))
    if args.experiment not in presets:
        fail(f"unknown experiment {args.experiment!r}; presets: {', '.join(presets)}")
    scales = sorted(p.stem for p in (CONF / "scale").glob("*.yaml"))
    if args.scale not in scales:
        fail(f"unknown scale {args.scale!r}; choose from {', '.join(scales)}")
    clusters = sorted(p.stem for p in (CONF / "cluster").glob("*.yaml"))
    if args.cluster not in clusters:
        fail(f"unknown cluster {args.cluster!r}; choose from {', '.join(clusters)}")

    if args.jobs < 1:
        fail(f"--jobs must be a whole number >= 1, got {args.jobs}")
    if args.publish and args.results:
        fail("give --publish (the checkout's results/) or --results DIR, not both")
    if args.publish:
        from experiments.store.records import (
            git_commit,  # not analysis.reports.report's: pandas, scipy
        )

        if git_commit(REPO).endswith("-dirty"):
            fail(
                "--publish (PUBLISH=1) needs a clean checkout: tracked files are modified (git "
                "status); a published result must come from a commit"
            )
    check_tuning(args.experiment, args.scale, args.overrides)
    # Resolved here, against the directory the command was given in: the commands below run
    # from the checkout.
    out_root = _resolve(args.out_root, "--out-root")
    if args.publish:
        results = REPO / "results"
    else:
        results = _resolve(args.results, "--results") if args.results else out_root / "results"
    runs_root = out_root / args.experiment
    out = results / args.experiment / args.scale
    # What the report would refuse after the sweep, refused before it
    check_report_folder(out)
    if args.publish:
        dirty = dirty_runs(runs_root / "runs", args.experiment, args.scale)
        if dirty:
            fail(
                f"--publish: {len(dirty)} finished run(s) of {args.experiment} at scale "
                f"{args.scale} in {runs_root / 'runs'} ran (in part) on a modified checkout "
                f"({dirty[0]}): rerun them from a commit (rerun=true), or move them away"
            )
    if args.check:
        print(f"check: {args.experiment} at scale {args.scale} may run (nothing was run)")
        return 0
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
        commands = shares(command, args.jobs, args.overrides)
        for each in commands:
            print("$ " + " ".join(each[1:]), flush=True)
        started = time.time()
        try:
            codes = run_children(commands)
        except Stop as stop:
            return stopped_line(args.experiment, stop, "while its runs ran")
        killed = [(k, -c) for k, c in enumerate(codes) if c < 0]
        if killed:  # by a signal it could not handle: no stop of ours (those end with a code)
            return killed_line(args.experiment, *killed[0], len(codes))
        # a stop first, then a failed run, then bad input only (run.py's codes)
        stopped = [c for c in codes if c not in (0, 1, 2)]
        sweep_code = stopped[0] if stopped else 1 if 1 in codes else max(codes)
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
    report = [
        sys.executable,
        "-m",
        "analysis.reports.report",
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
    try:
        code = run_child(report)
    except Stop as stop:
        return stopped_line(args.experiment, stop, "while its report was written")
    provenance = out / "provenance.txt"
    if code == 0 and provenance.exists():
        # The report records its own command; add the one that ran the sweep (paths in it
        # relative to the checkout or $OUT, as the report's), the file replaced whole.
        from experiments.errors import OutputError
        from experiments.store.records import write_text_atomic

        sweep = command_line(
            argv if argv is not None else sys.argv[1:], out_root, module="experiments.sweep"
        )
        try:
            text = provenance.read_text()
            write_text_atomic(provenance, f"{text}sweep command: {sweep}\n")
        except (OSError, OutputError) as e:
            print(f"warning: cannot write {provenance}: {e}", file=sys.stderr)
    if code == 0:
        print(f"report: {out}", flush=True)
    for line in said_once(failed):  # at the very end, after the report's output
        print(f"error: {line}", file=sys.stderr)
    if sweep_code:
        print(
            f"error: {len(failed) or 'some'} point(s) of {args.experiment} failed (above); the "
            "report covers the runs that finished; rerun the same command to retry the others",
            file=sys.stderr,
        )
    return sweep_code or code


def check_tuning(experiment: str, scale: str, overrides: list[str]) -> None:
    """The tuning files the preset's runs read at `scale` (its own, or that of the preset its
    `report.tuned_from` names, and the scale's) can be used: one `error:` line naming the file
    and key otherwise, before any run (a run would refuse it at every point)."""
    import yaml

    from experiments.config.tuned import check_tuned, tuning_preset
    from experiments.errors import UserError

    preset_file = CONF / "experiment" / f"{experiment}.yaml"
    try:
        preset = yaml.safe_load(preset_file.read_text()) or {}
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        fail(f"cannot read the preset {preset_file}: {str(e).splitlines()[0]}")
    preset = preset if isinstance(preset, dict) else {}
    report = preset.get("report") if isinstance(preset.get("report"), dict) else {}
    named = tuning_preset(report, preset.get("experiment_name")) or experiment
    for override in overrides:  # (the command line wins, as in the run's config)
        key, _, value = override.lstrip("+").partition("=")
        if key in ("experiment_name", "report.tuned_from") and value:
            named = value
    try:
        check_tuned(scale, str(named))
    except UserError as e:
        fail(str(e))


def check_report_folder(out: Path) -> None:
    """The report's folder can be written: not a file, its nearest existing folder writable."""
    if out.exists() and not out.is_dir():
        fail(f"the report's folder {out} is a file: move it away, or give --results DIR")
    import tempfile

    path = out
    while not path.exists() and path != path.parent:
        path = path.parent
    try:  # a file made there and removed at once (os.access says yes to root on /proc)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".write-test-"):
            pass
    except OSError as e:
        fail(f"the report's folder {out} cannot be written ({path}: {e.strerror or e})")


def dirty_runs(runs: Path, experiment: str, scale: str) -> list[str]:
    """The commits with `-dirty` of the finished runs of `experiment` at `scale` under `runs`,
    one per run that ran any of its steps on a modified checkout (its summary's `git_commits`
    and `git_sha`): the runs `--publish` would refuse in the report, after the sweep."""
    import yaml

    from experiments.store.records import FINISHED, read_summary, run_commits

    found = []
    for summary_path in sorted(runs.glob("*/summary.json")) if runs.is_dir() else []:
        run = summary_path.parent
        try:
            summary = read_summary(run) or {}
            if summary.get("status") not in FINISHED:
                continue
            config = yaml.safe_load((run / "config.yaml").read_text()) or {}
        except Exception:  # noqa: BLE001 - a damaged record: the report's to name
            continue
        if config.get("experiment_name") != experiment:
            continue
        if (config.get("scale") or {}).get("name") != scale:
            continue
        dirty = [c for c in run_commits(summary) if c.endswith("-dirty")]
        if dirty:
            found.append(dirty[0])
    return found


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


def failed_points(sweeps: Path, since: float) -> list[tuple[str, str]]:
    """(point, reason) for each failed point of the sweeps recorded under `sweeps` since
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
                lines.append((str(label), str(point.get("error"))))
    return lines


if __name__ == "__main__":
    sys.exit(main())
