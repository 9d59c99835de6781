"""A run's directory on disk: the source of truth (docs/records.md, "Run records").

    config.yaml      the resolved config (Hydra's own copy, with interpolations, is in .hydra/)
    metrics.jsonl    one JSON object per evaluation
    summary.json     status (running | completed | diverged | failed) and the final numbers
    data_card.json   per-worker label histogram
    identity.json    the configuration the run's identity digest is computed from
                     (experiments/config/identity.py); summary.json's `identity` holds the digest
    heartbeat.json   the step and the time, rewritten every 30 s while training (rank 0)
    checkpoint/      the latest checkpoint while the run is unfinished
    (experiments/store/checkpoint.py) .hydra/          Hydra's config.yaml (unresolved), hydra.yaml,
    overrides.yaml

Writes are atomic (temporary file + rename), so a reader never sees half a summary, and the
status `completed` is written last, after everything else is on disk. Files get the mode the
user's umask gives new files (a lab sharing a project folder can read each other's records).
A finished record is never overwritten: `rerun=true` moves it to
`<out_root>/runs/.superseded/<name>-<time>/` first (`supersede`).

Failures: a write that fails (a full disk, an I/O error) removes its temporary file and raises
an OutputError naming the file (`disk full writing <file>`); `.reserve`, a small file made when
the run starts, is released so that the run's final summary (`failed` and why) still fits on a
full disk (`reserve`). Reading: each file has one validated reader (`read_summary`,
`read_json_object`); a file that is not what the suite writes is a DamagedRecord naming it,
never a traceback, and a finished run whose record is damaged is never recomputed over
(`finished_status`).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import platform
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from experiments.config.identity import current_digest
from experiments.errors import OutputError, UserError
from experiments.store.provenance import REPO

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
    disk, then renamed over it. A crash (or a full disk) leaves the previous file intact and no
    temporary behind; a failed write is an OutputError naming `path` (`disk full writing ...`)."""
    write_bytes_atomic(path, text.encode("utf-8"))


def write_bytes_atomic(path: Path, data: bytes | None = None, writer=None) -> None:
    """`write_text_atomic` for bytes, or for what `writer(file)` writes (torch.save)."""
    path = Path(path)
    tmp = staged(path, data, writer)
    try:
        os.replace(tmp, path)
    except OSError as error:
        Path(tmp).unlink(missing_ok=True)
        raise OutputError(path, error) from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def staged(path: Path, data: bytes | None = None, writer=None) -> str:
    """A temporary file beside `path` holding `data` (or what `writer(file)` writes), flushed
    to disk: what `write_bytes_atomic` renames over `path`, or a caller renames with others
    (analysis/reproduce/recompute.py: several files of one result). An OutputError naming `path`
    when it cannot be written, no temporary left."""
    path = Path(path)
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        os.fchmod(fd, file_mode())
        with os.fdopen(fd, "wb") as f:
            if writer is None:
                f.write(data or b"")
            else:
                recording = _Recording(f)
                try:
                    writer(recording)
                except RuntimeError:
                    # torch.save turns the OSError of a write into an opaque RuntimeError
                    if recording.error is not None:
                        raise recording.error from None
                    raise
            f.flush()
            os.fsync(f.fileno())
        return tmp
    except OSError as error:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        raise OutputError(path, error) from None
    except BaseException:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        raise


class _Recording:
    """A file that remembers the OSError of a failed write (for `write_bytes_atomic`)."""

    def __init__(self, f):
        self.f, self.error = f, None

    def write(self, data) -> int:
        try:
            return self.f.write(data)
        except OSError as error:
            self.error = error
            raise

    def flush(self) -> None:
        self.f.flush()


def write_json_atomic(path: Path, obj: Any) -> None:
    write_text_atomic(path, json.dumps(obj, indent=2, sort_keys=True, default=_jsonable) + "\n")


def _jsonable(x: Any) -> Any:
    if hasattr(x, "item"):  # numpy / torch scalars
        return x.item()
    if hasattr(x, "tolist"):
        return x.tolist()
    raise TypeError(f"not JSON serialisable: {type(x).__name__}")


# --- reading: one validated reader per file ---------------------------------------------------


class DamagedRecord(UserError, ValueError):
    """A record file that cannot be used: `path`, and `why` in a few words. A UserError: run.py
    refuses to go on over it (one line, exit code 2); the analysis skips its run with a
    warning (analysis/runs/load.py)."""

    def __init__(self, path: str | os.PathLike, why: str) -> None:
        super().__init__(f"{path}: {why}")
        self.path, self.why = Path(path), why

    def __reduce__(self):
        return (type(self), (str(self.path), self.why))


def read_text(path: Path) -> str:
    """A record file's text; a DamagedRecord when it is not UTF-8 (binary garbage, a disk
    error's zeros) or is not a readable file (a directory in its place)."""
    path = Path(path)
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise DamagedRecord(path, f"not UTF-8 text (byte {error.start})") from None
    except IsADirectoryError:
        raise DamagedRecord(path, "a directory, not a file") from None
    except OSError as error:
        if isinstance(error, FileNotFoundError):
            raise
        raise DamagedRecord(path, f"unreadable ({error.strerror or error})") from None


def read_json_object(path: Path) -> dict:
    """A record file that must hold one JSON object; a DamagedRecord saying what is wrong."""
    text = read_text(path)
    if not text.strip():
        raise DamagedRecord(path, "empty")
    try:
        value = json.loads(text)
    except ValueError as error:
        raise DamagedRecord(path, f"not JSON ({error})") from None
    if not isinstance(value, dict):
        raise DamagedRecord(path, f"not a JSON object but {kind(value)}")
    return value


def kind(value: Any) -> str:
    """How a message names the type of a JSON value."""
    if isinstance(value, bool):
        return "a boolean"
    if value is None:
        return "null"
    if isinstance(value, int | float):
        return "a number"
    return {list: "a list", str: "a string", dict: "an object"}.get(
        type(value), type(value).__name__
    )


STATUSES = ("running", "completed", "diverged", "failed")


def read_summary(run_dir: Path) -> dict | None:
    """The run's `summary.json`: None when there is none, else a JSON object with a `status`
    among STATUSES; a DamagedRecord naming the file otherwise."""
    path = Path(run_dir) / SUMMARY
    try:
        summary = read_json_object(path)
    except FileNotFoundError:
        return None
    status = summary.get("status")
    if status not in STATUSES:
        raise DamagedRecord(path, f"no status among {', '.join(STATUSES)} (status: {status!r})")
    return summary


def is_finished(run_dir: Path) -> bool:
    """True when the run ended with a result that must not be recomputed or overwritten."""
    try:
        summary = read_summary(run_dir)
    except DamagedRecord:
        return False
    return bool(summary) and summary.get("status") in FINISHED


def finished_status(run_dir: Path, digest: str, rerun: bool = False) -> str | None:
    """The status of the finished run in `run_dir` when it is the run of identity `digest` (its
    summary's, or, for a run recorded under an earlier identity rule, the `current_digest` of
    its identity.json);
    None when the directory holds no finished run. A finished record of another identity (a
    digest collision, or a record edited by hand) is a UserError: it is never reused nor
    overwritten. So is a damaged record (a summary that cannot be read, or run files without a
    summary): its run may have finished, so it is never silently recomputed over; with
    `rerun` it counts as finished (`supersede` keeps it aside)."""
    run_dir = Path(run_dir)
    try:
        summary = read_summary(run_dir)
        if summary is None and _has_results(run_dir):
            raise DamagedRecord(run_dir / SUMMARY, "missing, but the run's other records exist")
    except DamagedRecord as error:
        if rerun:
            return "damaged"
        raise UserError(
            f"{error} (the run it records may have finished): rerun=true recomputes it, keeping "
            f"the damaged record in {run_dir.parent / SUPERSEDED}/"
        ) from None
    if not summary or summary.get("status") not in FINISHED:
        return None
    recorded = summary.get("identity")
    if recorded != digest and current_digest(run_dir, recorded) != digest:
        raise UserError(
            f"run directory {run_dir} holds a finished run of another configuration (identity "
            f"{summary.get('identity')!r}, this one {digest!r}); move it away to run this one"
        )
    return summary["status"]


def _has_results(run_dir: Path) -> bool:
    """Whether `run_dir` holds evaluations (a non-empty metrics.jsonl): written only after its
    summary, so without one the summary was lost."""
    try:
        return (run_dir / METRICS).stat().st_size > 0
    except OSError:
        return False


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


def now() -> str:
    """The time stamp a run's record holds (summary.json's `started_at`, `finished_at`, a resume's
    and an interruption's `at`): local time with its UTC offset."""
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def update_summary(
    run_dir: Path, drop: tuple[str, ...] = (), final: bool = False, **fields: Any
) -> dict:
    """Merge `fields` into summary.json (atomically), removing the keys in `drop`. Only the
    run that holds the directory's lock writes it: a summary damaged meanwhile is replaced.
    `final`: the run's last record (its outcome): on a full disk the space reserved for it
    (`reserve`) is released and the write tried again."""
    try:
        summary = read_summary(run_dir) or {}
    except DamagedRecord:
        summary = {}
    for key in drop:
        summary.pop(key, None)
    summary.update(fields)
    path = Path(run_dir) / SUMMARY
    try:
        write_json_atomic(path, summary)
    except OutputError as error:
        if not final or not release_reserve(run_dir):
            raise
        del error
        write_json_atomic(path, summary)
    return summary


# --- the space the final record needs ---------------------------------------------------------

RESERVE = ".reserve"
RESERVE_BYTES = 256 * 1024  # many times a summary.json (a few kB) and its temporary copy


def reserve(run_dir: Path) -> None:
    """Set aside RESERVE_BYTES in the run directory (`.reserve`), released when the run's final
    record is written (`update_summary(final=True)`) on a disk that filled up meanwhile, so that
    a run on a full disk still ends with an honest summary (`failed`, `disk full writing
    <file>`), never one stuck at `running`."""
    path = Path(run_dir) / RESERVE
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            try:
                os.posix_fallocate(fd, 0, RESERVE_BYTES)
            except OSError as error:  # a file system without fallocate: write it
                if error.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
                    raise
                os.pwrite(fd, b"\0" * RESERVE_BYTES, 0)
        finally:
            os.close(fd)
    except OSError as error:
        path.unlink(missing_ok=True)
        raise OutputError(path, error) from None


def release_reserve(run_dir: Path) -> bool:
    """Give the reserved space back; whether there was any."""
    try:
        (Path(run_dir) / RESERVE).unlink()
    except OSError:
        return False
    return True


def git_commit(repo: str | os.PathLike = REPO) -> str:
    """`git rev-parse HEAD` of the checkout holding `repo` (by default the suite's), with
    `-dirty` when tracked files differ from it; "unknown" when git or the repository is not
    there. Changes under `results/` do not count: they are the suite's own published outputs
    (`PUBLISH=1`), and a report that has just written its tables must not make the next run,
    or its own provenance, look as if made from modified code."""

    def git(*args: str) -> str:
        done = subprocess.run(
            ["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=30, check=True
        )
        return done.stdout.strip()

    try:
        sha = git("rev-parse", "HEAD")
        # the whole checkout (`:(top)`, wherever `repo` lies in it) but its results/
        dirty = git(
            "status", "--porcelain", "--untracked-files=no", "--", ":(top)",
            ":(top,exclude)results",
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    if not sha:
        return "unknown"
    return f"{sha}-dirty" if dirty else sha


def git_sha() -> str:
    """The commit of the code that made the run (`git_commit` of the suite's checkout)."""
    return git_commit(REPO)


# A run's provenance across resumes: summary.json's `git_commits` lists each segment of its steps,
# `{"git_sha": <commit, -dirty where tracked files were modified>, "from_step": <first step>}`,
# one per start (the first from step 0, each resume from its checkpoint's step: the steps a
# checkpoint holds ran on the segments before it, which latest.json's own `git_commits` names).
# `git_sha` is the last start's commit, marked `-dirty` when any segment was.


def commit_segments(segments: Any) -> list[dict[str, Any]]:
    """The well-formed entries of a `git_commits` list (anything else: none)."""
    if not isinstance(segments, list):
        return []
    return [
        {"git_sha": s["git_sha"], "from_step": s["from_step"]}
        for s in segments
        if isinstance(s, dict)
        and isinstance(s.get("git_sha"), str)
        and isinstance(s.get("from_step"), int)
        and not isinstance(s.get("from_step"), bool)
    ]


def resumed_segments(
    checkpoint: dict[str, Any] | None, previous: dict[str, Any], sha: str
) -> list[dict[str, Any]]:
    """The `git_commits` of a run starting now on commit `sha`: from step 0, or, resumed from
    `checkpoint` (its latest.json), the segments that computed the checkpoint's steps (its own
    list; for a checkpoint written before they were recorded, the `previous` summary's segments
    before its step, else that summary's `git_sha`), then this one."""
    if checkpoint is None:
        return [{"git_sha": sha, "from_step": 0}]
    step = checkpoint["step"]
    kept = commit_segments(checkpoint.get("git_commits"))
    if not kept:
        before = commit_segments(previous.get("git_commits"))
        kept = [s for s in before if s["from_step"] < step] or before[:1]
    if not kept:
        kept = [{"git_sha": str(previous.get("git_sha") or "unknown"), "from_step": 0}]
    return [*kept, {"git_sha": sha, "from_step": step}]


def summary_commit(segments: list[dict[str, Any]]) -> str:
    """`git_sha` of a run made of `segments`: the last one's commit, `-dirty` when any was."""
    sha = segments[-1]["git_sha"]
    if any(s["git_sha"].endswith("-dirty") for s in segments) and not sha.endswith("-dirty"):
        sha += "-dirty"
    return sha


def run_commits(summary: dict[str, Any]) -> list[str]:
    """Every commit a run's steps ran on, each once: its `git_commits`, or for a record made
    before they were recorded its `git_sha`."""
    shas = [s["git_sha"] for s in commit_segments(summary.get("git_commits"))]
    if not shas and isinstance(summary.get("git_sha"), str):
        shas.append(summary["git_sha"])
    return list(dict.fromkeys(shas))


HOLDER_WAIT_S = 2.0  # RunLock: how long a refused command waits for the holder's line


def _dead_here(holder: str) -> bool:
    """Whether `holder` ("pid N on HOST") names a process of this host that is gone."""
    parts = holder.split()
    if len(parts) != 4 or parts[0] != "pid" or parts[2] != "on" or not parts[1].isdigit():
        return False
    if parts[3] != platform.node():
        return False
    try:
        os.kill(int(parts[1]), 0)
    except ProcessLookupError:
        return True
    except OSError:  # alive, another user's
        return False
    return False


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
            holder = self._holder() or "another process"
            raise UserError(
                f"run directory {self.path.parent} is in use by {holder}; wait for that run to "
                "end, or choose another out_root"
            ) from None
        self._lock = lock
        write_text_atomic(self.holder, f"pid {os.getpid()} on {platform.node()}")

    def _holder(self) -> str:
        """Who holds the lock, as that process wrote it (printable, one line; "" unknown). The
        holder writes its file just after it took the lock, so a second command that comes in
        between finds no file, or the file of a run on this host that was killed (never
        removed): it waits up to HOLDER_WAIT_S for the holder's own line (seen in the suite: two
        identical commands, the second refused with "another process")."""
        deadline = time.monotonic() + HOLDER_WAIT_S
        while True:
            try:
                text = self.holder.read_bytes()[:200].decode("utf-8", errors="replace")
                holder = " ".join("".join(c if c.isprintable() else "?" for c in text).split())
            except OSError:
                holder = ""
            if (holder and not _dead_here(holder)) or time.monotonic() >= deadline:
                return holder
            time.sleep(0.02)

    def release(self) -> None:
        if self._lock is not None:
            # the holder's file goes first, while the lock is still held: a file there names
            # the current holder, or one that was killed
            with contextlib.suppress(OSError):
                self.holder.unlink()
            self._lock.release()
            self._lock = None

    def __enter__(self) -> RunLock:
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def detach_closed_terminal() -> None:
    """After SIGHUP: the terminal is gone and writing to it fails (EIO), so the process's
    stdout and stderr that were that terminal now go to /dev/null; a file or a pipe stays.
    Here, torch-free (not in checkpoint.py, beside the stop signals), so that run.py's SIGHUP
    handler imports nothing: an import in a handler runs in the middle of whatever the main
    thread was importing (numpy, while Hydra composes: torch's import in the handler then
    failed on "partially initialized module 'numpy'", tests/test_torch_free.py)."""
    for fd in (1, 2):
        try:
            if os.isatty(fd):
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, fd)
                os.close(devnull)
        except OSError:
            pass
