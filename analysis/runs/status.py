"""How the runs of a sweep stand, from their records alone (not from the launcher's job states,
which Hydra's submitit launcher reports wrongly at times: hydra#1928).

    python -m analysis.runs.status ROOT [--experiment NAME [--scale S]] [--stale-after MIN]
        [--check]

Each run directory under ROOT (one holding `summary.json`, or a Hydra job directory without one)
gets one line:

- `completed`, `diverged`: finished results, never recomputed;
- `running`: its summary says running and its heartbeat (`heartbeat.json`, rewritten every 30 s
  while it trains) is fresh, with the step reached;
- `failed`: its summary says failed (the error, and for a run interrupted by a signal the step of
  its checkpoint: a rerun resumes it), or it says running but its heartbeat is older than
  `--stale-after` minutes (the job died without a word: node failure, SIGKILL, out of memory),
  or the job never wrote a summary (it stopped before its first record);

and with `--experiment` (a preset of conf/experiment/), the preset's grid points that have no run
directory at all are listed as `missing`. `--check` exits 1 unless every run (and point) is
completed or diverged; with `--check`, a root holding no run at all (nothing checked) is one
`error:` line and exit code 1 too.

It only reads: nothing is written or deleted. Exit codes: 0 (listed; with `--check`, every run
finished), 1 (`--check`: a run unfinished, a point missing, or no run at all), 2 (bad input: a
root that is not a directory, an unknown preset; one `error:` line), 128 + N for a stop (130
for Ctrl-C, 143 for SIGTERM: one `error:` line, analysis/stops.py). A damaged record is never
an error of the command: its run is listed `failed` with the file and why.
"""

from __future__ import annotations

import sys

if __name__ == "__main__":  # a stop while pandas imports (seconds): one line
    from analysis.stops import stop_early

    stop_early("status")

import argparse  # noqa: E402 - after the stop handlers above
import math  # noqa: E402
import os  # noqa: E402
import stat  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from collections import Counter  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

from analysis.runs.load import RecordWarning, one_line_warnings  # noqa: E402
from analysis.stops import stoppable  # noqa: E402
from experiments.errors import UserError, one_line_errors, refuse_inert_flags  # noqa: E402
from experiments.store.records import DamagedRecord, read_json_object  # noqa: E402

STATUSES = ("completed", "diverged", "running", "failed", "missing")


def run_dirs(root: Path) -> list[Path]:
    """Directories holding a run record or a Hydra job's config (skipping .submitit etc.)."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if not d.startswith(".") and d != "checkpoint"]
        here = Path(dirpath)
        if "summary.json" in filenames or (here / ".hydra" / "config.yaml").is_file():
            out.append(here)
            dirnames[:] = []
    return sorted(out)


def _json(path: Path) -> dict:
    """A record file that must hold a JSON object: the records' own validated reader
    (experiments/store/records.py); a DamagedRecord saying what is wrong."""
    _regular(path)
    return read_json_object(path)


def _regular(path: Path) -> None:
    """A DamagedRecord unless `path` is a regular file: a FIFO or a device in a record's place
    would block the reader (or never end), a directory is not a record."""
    mode = path.stat().st_mode  # FileNotFoundError: the caller's (no such record)
    if stat.S_ISDIR(mode):
        raise DamagedRecord(path, "a directory, not a file")
    if not stat.S_ISREG(mode):
        raise DamagedRecord(path, "not a regular file")


def _heartbeat(run_dir: Path) -> tuple[dict | None, str]:
    """The heartbeat's time (a finite number) and step text, or None and why not."""
    path = run_dir / "heartbeat.json"
    if not path.exists():
        return None, ""
    try:
        beat = _json(path)
    except (OSError, DamagedRecord) as error:
        return None, f"heartbeat.json unreadable: {_why(error)}"
    last = beat.get("time")
    if not _is_number(last) or not math.isfinite(last):
        return None, f"heartbeat.json has no time (time: {str(last)[:40]!r})"
    step, total = beat.get("step"), beat.get("total_steps")
    where = f"step {step}/{total}" if _is_number(step) and _is_number(total) else "step unknown"
    return {"time": float(last), "where": where}, ""


def run_status(run_dir: Path, stale_after_s: float, now: float | None = None) -> dict[str, Any]:
    """One run's status and the detail that explains it. Never raises on a damaged record: a
    summary that cannot be read is `failed` with the reason, a damaged heartbeat counts as no
    heartbeat (the summary's own age decides) and is named in the detail."""
    now = time.time() if now is None else now
    path = run_dir / "summary.json"
    if not path.exists():
        return {"status": "failed", "detail": "no summary: the job stopped before its record"}
    try:
        summary = _json(path)
    except FileNotFoundError:  # gone since the check above (a rerun=true moved it)
        return {"status": "failed", "detail": "no summary: the job stopped before its record"}
    except (OSError, DamagedRecord) as error:
        return {"status": "failed", "detail": f"summary.json is unreadable: {_why(error)}"}
    status = summary.get("status")
    if status == "completed" and _blank(run_dir / "metrics.jsonl"):
        return {
            "status": "failed",
            "detail": "completed, but its metrics.jsonl is empty (its evaluations were lost): "
            "rerun=true recomputes it",
        }
    if status in ("completed", "diverged"):
        acc = summary.get("final/test_acc")
        detail = f"final/test_acc {acc:.4f}" if _is_number(acc) else ""
        if status == "diverged":
            detail = f"diverged at step {summary.get('diverged_at_step')}"
        return {"status": status, "detail": detail}
    if status == "running":
        beat, problem = _heartbeat(run_dir)
        if beat is not None:
            last = beat["time"]
        else:  # no (usable) heartbeat yet: the summary's own age
            try:
                last = path.stat().st_mtime
            except OSError:
                last = now
        age = now - last
        note = f"; {problem}" if problem else ""
        if age > stale_after_s:
            return {
                "status": "failed",
                "detail": f"stale: no heartbeat for {age / 60:.0f} min (the job died); "
                f"a rerun resumes from its checkpoint if it has one{note}",
            }
        where = beat["where"] if beat else "starting"
        return {"status": "running", "detail": f"{where}, heartbeat {age:.0f} s ago{note}"}
    if status == "failed":
        return {"status": "failed", "detail": " ".join(str(summary.get("error", "")).split())[:200]}
    return {"status": "failed", "detail": f"unknown status {str(status)[:40]!r} in summary.json"}


def _blank(path: Path) -> bool:
    """Whether `path` exists without a line (0 bytes, or blank)."""
    try:
        _regular(path)
        return not path.read_bytes().strip()
    except (OSError, DamagedRecord):
        return False


def _why(error: BaseException) -> str:
    if isinstance(error, DamagedRecord):
        return error.why
    return getattr(error, "strerror", None) or type(error).__name__


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def missing_points(root: Path, experiment: str, scale: str | None, runs: list[Path]) -> list[str]:
    """The preset's grid points with no run directory (each as its overrides)."""
    from analysis.runs.grid import GROUPS, canonical, compose_preset, expand_sweeps
    from analysis.runs.load import _flatten, read_config

    preset = compose_preset(experiment, scale)
    points = expand_sweeps(preset.sweeps, GROUPS)
    configs = []
    for run in runs:
        try:
            configs.append(_flatten(read_config(run)))
        except Exception as error:  # noqa: BLE001 - any damage: this run matches no point
            reason = error.why if isinstance(error, DamagedRecord) else type(error).__name__
            warnings.warn(f"{run}: unreadable config skipped ({reason})", RecordWarning, 2)
    out = []
    for point in points:
        if not any(
            all(canonical(c.get(k)) == canonical(v) for k, v in point.items()) for c in configs
        ):
            out.append(",".join(f"{k.removesuffix('.name')}={v}" for k, v in point.items()))
    return out


@stoppable("status", "it only reads: nothing was written")
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m analysis.runs.status", description=__doc__)
    parser.add_argument("root", help="a runs root, e.g. outputs/runs or outputs/table1/runs")
    parser.add_argument("--experiment", help="a preset: also list its points without a run")
    parser.add_argument("--scale", help="the preset's scale (smoke | cpu | paper)")
    parser.add_argument(
        "--stale-after", type=float, default=10.0, help="minutes without heartbeat (default 10)"
    )
    parser.add_argument("--check", action="store_true", help="exit 1 unless all finished")
    one_line_errors(parser)
    args = parser.parse_args(argv)
    refuse_inert_flags(
        parser,
        [
            ("--scale", args.scale is not None and not args.experiment,
             "without --experiment NAME (the scale of the preset's points it lists)"),
        ],
    )  # fmt: skip
    if not args.stale_after > 0:
        parser.error(f"--stale-after must be a number of minutes > 0, got {args.stale_after:g}")
    root = Path(args.root)
    try:
        if not root.is_dir():
            raise UserError(f"runs root is not a directory: {root}")
        runs = run_dirs(root)
        lines = []
        for run in runs:
            s = run_status(run, args.stale_after * 60)
            lines.append((s["status"], str(run.relative_to(root)), s["detail"]))
        if args.experiment:
            with one_line_warnings():
                for point in missing_points(root, args.experiment, args.scale, runs):
                    lines.append(("missing", point, "no run directory"))
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.check and not lines:  # a check of nothing passes nothing
        print(f"error: no runs under {root}: --check checked nothing", file=sys.stderr)
        return 1
    width = max((len(name) for _, name, _ in lines), default=0)
    for status, name, detail in sorted(lines, key=lambda x: (STATUSES.index(x[0]), x[1])):
        print(f"{status:<10} {name:<{width}}  {detail}".rstrip())
    counts = Counter(status for status, _, _ in lines)
    print(", ".join(f"{counts[s]} {s}" for s in STATUSES if counts[s]) or "no runs")
    unfinished = sum(counts[s] for s in ("running", "failed", "missing"))
    return 1 if args.check and unfinished else 0


if __name__ == "__main__":
    sys.exit(main())
