"""A run's directory on disk: the source of truth (contract.md, "A run's directory").

    config.yaml      the resolved config (Hydra's own copy, with interpolations, is in .hydra/)
    metrics.jsonl    one JSON object per evaluation
    summary.json     status (running | completed | diverged | failed) and the final numbers
    data_card.json   per-worker label histogram
    identity.json    the configuration the run's identity digest is computed from
                     (experiments/identity.py); summary.json's `identity` holds the digest
    heartbeat.json   the step and the time, rewritten every 30 s while training (rank 0)
    checkpoint/      the latest checkpoint while the run is unfinished (experiments/checkpoint.py)
    .hydra/          Hydra's config.yaml (unresolved), hydra.yaml, overrides.yaml

Writes are atomic (temporary file + rename), so a reader never sees half a summary, and the
status `completed` is written last, after everything else is on disk. Files get the mode the
user's umask gives new files (a lab sharing a project folder can read each other's records).
A finished record is never overwritten: `rerun=true` moves it to
`<out_root>/runs/.superseded/<name>-<time>/` first (`supersede`).
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from experiments.errors import UserError

SUMMARY = "summary.json"
METRICS = "metrics.jsonl"
CONFIG = "config.yaml"
DATA_CARD = "data_card.json"
HEARTBEAT = "heartbeat.json"  # step and time, rewritten every 30 s while the run trains
IDENTITY = "identity.json"
SUPERSEDED = ".superseded"  # <runs>/.superseded/: records replaced by rerun=true (a dot-dir:
# the analysis skips it)
FINISHED = ("completed", "diverged")


def file_mode() -> int:
    """The mode a new file gets under the process's umask (0o666 & ~umask): tempfile.mkstemp
    makes 0600 files, which a lab sharing a project folder could not read. Linux says the umask
    in /proc/self/status; elsewhere it can only be read by setting it (and restoring it)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return 0o666 & ~int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


def write_text_atomic(path: Path, text: str) -> None:
    """Replace `path` by `text` all at once: a temporary file in the same directory, flushed to
    disk, then renamed over it. A crash (or a full disk) leaves the previous file intact."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, file_mode())
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


def finished_status(run_dir: Path, digest: str) -> str | None:
    """The status of the finished run in `run_dir` when it is the run of identity `digest`;
    None when the directory holds no finished run. A finished record of another identity (a
    digest collision, or a record edited by hand) is a UserError: it is never reused nor
    overwritten."""
    summary = read_summary(run_dir)
    if not summary or summary.get("status") not in FINISHED:
        return None
    if summary.get("identity") != digest:
        raise UserError(
            f"run directory {run_dir} holds a finished run of another configuration (identity "
            f"{summary.get('identity')!r}, this one {digest!r}); move it away to run this one"
        )
    return summary["status"]


def supersede(run_dir: Path) -> Path:
    """Move the record in `run_dir` (all but its lock files) to
    `<runs>/.superseded/<name>-<time>/`, for `rerun=true`; return where it went."""
    run_dir = Path(run_dir)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    target = run_dir.parent / SUPERSEDED / f"{run_dir.name}-{stamp}"
    n = 1
    while target.exists():
        n += 1
        target = run_dir.parent / SUPERSEDED / f"{run_dir.name}-{stamp}-{n}"
    target.mkdir(parents=True)
    for entry in run_dir.iterdir():
        if not entry.name.startswith(".lock"):
            shutil.move(str(entry), str(target / entry.name))
    return target


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
    """One process writes a run directory at a time: `filelock.FileLock` on `<run>/.lock`, held
    from the start of the run to its end. It is an flock, released by the kernel when the
    process dies, so a killed or requeued job never leaves a stale lock. On a file system
    without flock (some network mounts), filelock falls back to a soft lock (`SoftFileLock`
    semantics: a marker file holding the owner's pid and host, reclaimed by the next run on the
    same host when that process is gone; a marker left by a process on another host that died
    must be removed by hand: `<run>/.lock`). A second run of the same directory, e.g. from a
    second sweep started into the same folder, stops with a one-line message naming the holder
    instead of mixing two runs' records."""

    def __init__(self, run_dir: Path):
        self.path = Path(run_dir) / ".lock"
        self.holder = Path(run_dir) / ".lock.holder"  # who holds it, for the message
        self._lock = None

    def acquire(self) -> None:
        from filelock import FileLock, Timeout

        lock = FileLock(self.path, timeout=0, fallback_to_soft=True)
        try:
            lock.acquire()
        except Timeout:
            try:
                holder = self.holder.read_text().strip() or "another process"
            except OSError:
                holder = "another process"
            raise UserError(
                f"run directory {self.path.parent} is in use by {holder}; wait for that run to "
                "end, or choose another out_root"
            ) from None
        self._lock = lock
        write_text_atomic(self.holder, f"pid {os.getpid()} on {platform.node()}")

    def release(self) -> None:
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def __enter__(self) -> RunLock:
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()
