"""Writing a report all at once: the report is made in a folder of its own beside its
destination and swapped in whole when it completes (`staged_report`), so that a report stopped
half-way (a signal, a full disk) leaves the previous one unchanged; the stop signals become an
exception while it is written (`stops_raised`). Apart from analysis/reports/report.py, which decides
what a report holds; the names are importable from there too."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Any

from analysis.runs.records import RECORDS
from experiments.errors import UserError
from experiments.workers.startup import STOP_SIGNALS, stops_held

FIGURE_NAME = "test_acc"
TIME_FIGURE_NAME = "time"
BREAKDOWN_FIGURE_NAME = "time_breakdown"
UTILIZATION_FIGURE_NAME = "utilization"


def report_files(name: str = "table") -> set[str]:
    """The names of the files a report writes (its table's stem `name`): an --out holding any
    other entry is not replaced whole, its other entries are someone else's (a W&B report spec,
    notes)."""
    tables = {f"{stem}{ext}" for stem in (name, "scaling") for ext in (".md", ".tex", ".csv")}
    figures = {
        f"{stem}{ext}"
        for stem in (FIGURE_NAME, TIME_FIGURE_NAME, BREAKDOWN_FIGURE_NAME, UTILIZATION_FIGURE_NAME)
        for ext in (".png", ".pdf")
    }
    return tables | figures | {"claims.md", "claims.json", RECORDS, "provenance.txt"}


class ReportStopped(Exception):
    """A report ended before it was complete (a signal, a full disk): nothing of it is left,
    and the previous report in --out stays. `code`: the exit code (2 for a full disk; for a
    stop the shell's code of its signal, 128 + N: 130 for Ctrl-C, 143 for SIGTERM)."""

    def __init__(self, message: str, code: int = 2):
        super().__init__(message)
        self.code = code


# What a preset's report writes and a plain one does not: a folder holding one is a preset's
# result, which a plain report, replacing the folder whole, would delete.
PRESET_FILES = ("claims.json", "provenance.txt")


def out_folder(text: str) -> Path:
    """An --out folder argument (argparse `type`): an empty one is refused, not read as `.`
    (the current folder, where the report's files would land among someone else's)."""
    import argparse

    if not text.strip():
        raise argparse.ArgumentTypeError("is empty: name a folder")
    return Path(text)


def _check_out(out: Path) -> None:
    """--out must name a folder (or nothing yet)."""
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out} is a file, not a folder: name a folder for the report")


def check_out(
    out: Path,
    roots: list[Path],
    preset: bool,
    experiment: str | None = None,
    scale: str | None = None,
) -> None:
    """Refuse, before any work, an --out the report would destroy its input or a result with
    (class 1 of issue 50): one that is or lies in a RUNS_ROOT, or holds one (a result's
    `runs.jsonl.gz`: the report, replacing --out, would delete the records it reads); for a
    plain report (`preset` False), a folder holding a preset's result (`PRESET_FILES`), which it
    would replace by a report without them; for the report of preset `experiment` at `scale`,
    a folder holding another preset's or scale's result (its provenance.txt says which)."""
    _check_out(out)
    here = out.resolve()
    for root in roots:
        there = root.resolve()
        if here == there or here.is_relative_to(there) or there.is_relative_to(here):
            raise UserError(
                f"--out {out} holds or lies in the runs root {root} the report reads: the report "
                "would replace its own input; name another folder"
            )
    if preset and experiment and (out / "provenance.txt").is_file():
        held = _provenance_of(out / "provenance.txt")
        mine = {"experiment": experiment, **({"scale": scale} if scale else {})}
        other = {k: held.get(k) for k in mine if held.get(k) != mine[k]}
        if other:
            said = ", ".join(f"{k} {v or '(none)'}" for k, v in other.items())
            raise UserError(
                f"--out {out} holds the result of {said} (its provenance.txt): a report of "
                f"{experiment} would replace it; name that result's own folder or another"
            )
    if not preset and out.is_dir():
        held = [name for name in PRESET_FILES if (out / name).exists()]
        if held:
            raise UserError(
                f"--out {out} holds a preset's result ({', '.join(held)}): a plain report would "
                "replace it without them; name another folder (or report the preset: "
                "--experiment NAME)"
            )


def provenance_fields(text: str) -> dict[str, str]:
    """A provenance.txt's `key: value` lines (analysis/reports/report.py `write_provenance`) as a
    dict."""
    return {key: value for key, _, value in (line.partition(": ") for line in text.splitlines())}


def _provenance_of(path: Path) -> dict[str, str]:
    """A result's provenance.txt (`provenance_fields`; {} when it cannot be read)."""
    try:
        return provenance_fields(path.read_text())
    except (OSError, UnicodeDecodeError):
        return {}


def _report_folder(out: Path, name: str) -> bool:
    """Whether `out` holds nothing but what a report writes (it may then be replaced whole)."""
    names = report_files(name)
    return all(p.is_file() and not p.is_symlink() and p.name in names for p in out.iterdir())


@contextlib.contextmanager
def staged_report(out: str | os.PathLike, name: str = "table"):
    """A new, empty folder beside `out` to write the report into; once the block completes it
    replaces `out` in one step (its previous report, if any, is then removed). A failure (a
    full disk, a signal: SIGINT is Ctrl-C, the others stop it as one) removes it and leaves
    `out` as it was: the previous report, or nothing. Raises UserError for an `out` that
    cannot be a report's folder (before anything is written), ReportStopped for a stop or an
    OSError meanwhile."""
    import errno
    import signal

    out = Path(out)
    _check_out(out)
    parent = out.absolute().parent
    kept = f"the previous report in {out} is unchanged" if out.exists() else "nothing written"
    work, published = None, False
    try:
        try:
            # held by their handlers, not pthread_sigmask: the kernel hands a signal blocked in
            # this thread to OpenBLAS's, and the handler ran between mkdtemp and `work =`,
            # leaving the folder behind (CI at 4cc98ad: recompute-term-after-the-first-result)
            with stops_held():  # the folder made and known before a stop can be taken
                try:
                    parent.mkdir(parents=True, exist_ok=True)
                    work = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=parent))
                    os.chmod(work, 0o777 & ~_umask())
                except OSError as error:
                    why = error.strerror or error
                    raise UserError(f"cannot write the report into {out}: {why}") from None
            yield work
            with stops_held():  # complete: into place in one step, no stop taken meanwhile
                _replace_folder(work, out, name)
                published = True
        except (KeyboardInterrupt, _Signalled) as stop:
            name_ = getattr(stop, "name", "SIGINT")
            code = 128 + int(getattr(signal, name_))  # the shell's code: 130 for Ctrl-C
            what = "interrupted by Ctrl-C" if name_ == "SIGINT" else f"stopped by {name_}"
            if published:
                raise ReportStopped(f"{what} once the report was in {out}", code) from None
            raise ReportStopped(f"{what}: {kept}", code) from None
        except OSError as error:
            what = "disk full" if error.errno in (errno.ENOSPC, errno.EDQUOT) else "cannot write"
            why = "" if what == "disk full" else f": {error.strerror or error}"
            raise ReportStopped(f"{what} writing the report{why}: {kept}") from None
    finally:
        if work is not None:
            shutil.rmtree(work, ignore_errors=True)


@contextlib.contextmanager
def stops_raised(program: bool = False):
    """Around a command: each stop signal (run.py's STOP_SIGNALS) raises `_Signalled` in the main
    thread (`staged_report` turns it into a ReportStopped); the previous handlers after, or,
    for the command's own process (`program`), the stops ignored: it ends next, and a stop
    then has nothing left to stop (an in-process caller, recompute, keeps its handlers)."""
    import signal

    if not threading_main():
        yield
        return

    def stop(signum: int, frame: Any) -> None:
        raise _Signalled(signum)

    previous = {sig: signal.signal(sig, stop) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, signal.SIG_IGN if program else handler)


class _Signalled(BaseException):
    def __init__(self, signum: int):
        import signal

        self.name = signal.Signals(signum).name
        super().__init__(self.name)


def threading_main() -> bool:

    return threading.current_thread() is threading.main_thread()


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _replace_folder(new: Path, out: Path, name: str = "table") -> None:
    """`new` becomes `out` in one step (Linux renameat2 RENAME_EXCHANGE when `out` exists: the
    two swap, and the old report, now at `new`, is removed by the caller); elsewhere the old
    folder is moved aside first. An `out` that holds more than a report (someone's folder)
    keeps it: the report's files are moved into it one by one (renames: nothing left to fail
    for want of space), each replacing its namesake."""
    if not out.exists():
        os.rename(new, out)
        return
    if not _report_folder(out, name):
        for made in sorted(new.iterdir()):
            os.replace(made, out / made.name)
        return
    swap_folder(new, out)


def swap_folder(new: Path, out: Path) -> None:
    """The existing folder `out` replaced by `new` whole, in one step where Linux's renameat2
    can swap them (elsewhere the old folder is moved aside first); the old one is left at
    `new`, for the caller to remove."""
    if not _exchange(new, out):
        aside = new.with_name(new.name + ".old")
        os.rename(out, aside)
        os.rename(new, out)
        os.rename(aside, new)


def _exchange(a: Path, b: Path) -> bool:
    """Swap the folders `a` and `b` atomically; False where the system cannot."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    done = renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange)
    return done == 0


def moved(value: Any, work: Path, out: Path) -> Any:
    """A result's path under `work` as it is now, under `out`; anything else as it is."""
    if isinstance(value, Path) and (value == work or work in value.parents):
        return Path(out) / value.relative_to(work)
    return value
