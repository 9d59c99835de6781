"""A run's directory on disk: the source of truth (contract.md, "A run's directory").

    config.yaml      the resolved config (Hydra's own copy, with interpolations, is in .hydra/)
    metrics.jsonl    one JSON object per evaluation
    summary.json     status (running | completed | diverged | failed) and the final numbers
    data_card.json   per-worker label histogram
    heartbeat.json   the step and the time, rewritten every 30 s while training (rank 0)
    checkpoint/      the latest checkpoint while the run is unfinished (experiments/checkpoint.py)

Writes are atomic (temporary file + rename), so a reader never sees half a summary, and the
status `completed` is written last, after everything else is on disk.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from experiments.errors import UserError

SUMMARY = "summary.json"
METRICS = "metrics.jsonl"
CONFIG = "config.yaml"
DATA_CARD = "data_card.json"
HEARTBEAT = "heartbeat.json"  # step and time, rewritten every 30 s while the run trains
FINISHED = ("completed", "diverged")


def write_text_atomic(path: Path, text: str) -> None:
    """Replace `path` by `text` all at once: a temporary file in the same directory, flushed to
    disk, then renamed over it. A crash (or a full disk) leaves the previous file intact."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json_atomic(path: Path, obj: Any) -> None:
    write_text_atomic(path, json.dumps(obj, indent=2, sort_keys=True, default=_jsonable) + "\n")


def _jsonable(x: Any) -> Any:
    if hasattr(x, "item"):  # numpy / torch scalars
        return x.item()
    if hasattr(x, "tolist"):
        return x.tolist()
    raise TypeError(f"not JSON serialisable: {type(x).__name__}")


def read_summary(run_dir: Path) -> dict | None:
    path = Path(run_dir) / SUMMARY
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError:
        return None


def is_finished(run_dir: Path) -> bool:
    """True when the run ended with a result that must not be recomputed or overwritten."""
    summary = read_summary(run_dir)
    return bool(summary) and summary.get("status") in FINISHED


def update_summary(run_dir: Path, drop: tuple[str, ...] = (), **fields: Any) -> dict:
    """Merge `fields` into summary.json (atomically), removing the keys in `drop`."""
    summary = read_summary(run_dir) or {}
    for key in drop:
        summary.pop(key, None)
    summary.update(fields)
    write_json_atomic(Path(run_dir) / SUMMARY, summary)
    return summary


def git_sha() -> str:
    """The commit of the code that made the run, with `-dirty` when it had local changes."""
    here = Path(__file__).resolve().parent
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=10
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=here,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    if not sha:
        return "unknown"
    return sha + ("-dirty" if dirty else "")


class RunLock:
    """One process writes a run directory at a time: an exclusive `flock` on `<run>/.lock`,
    held from the start of the run to its end (released by the kernel if the process dies, so a
    killed or requeued job never leaves a stale lock). A second run of the same directory, e.g.
    from a second sweep started into the same folder, stops with a clear message instead of
    mixing two runs' records."""

    def __init__(self, run_dir: Path):
        self.path = Path(run_dir) / ".lock"
        self._f = None

    def acquire(self) -> None:
        import fcntl
        import platform

        f = self.path.open("a+")
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            f.seek(0)
            holder = f.read().strip() or "another process"
            f.close()
            raise UserError(
                f"run directory {self.path.parent} is in use by {holder}; wait for that run to "
                "end, or choose another out_root"
            ) from None
        f.seek(0)
        f.truncate()
        f.write(f"pid {os.getpid()} on {platform.node()}")
        f.flush()
        self._f = f

    def release(self) -> None:
        if self._f is not None:
            self._f.close()  # closing releases the flock
            self._f = None

    def __enter__(self) -> RunLock:
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()
