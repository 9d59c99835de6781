"""The suite's exceptions, and the exit code each one ends run.py with (docs/records.md, "Failures,
exit codes, determinism").

A `OneLine` error is printed as a single `error: ...` line, never with a traceback: its message
is all the user needs. `UserError` is a mistake in the user's input (bad config values, missing
data, infeasible partitions, a damaged or foreign record), found before any worker starts: exit
code 2. `OutputError` is a record that could not be written (disk full, an I/O error): the run
failed, exit code 1. `WorkerHung` names the worker that stopped answering: exit code 1.
Everything else raised in a worker is a bug or an environment failure and keeps its traceback.
"""

from __future__ import annotations

import errno

EXIT_FAILED = 1  # the run failed: a worker crashed or hung, or its records could not be written
EXIT_USER = 2  # bad input (or a damaged record), before any worker starts
EXIT_STOPPED = 3  # stopped by a signal; a rerun resumes (from its checkpoint, or from the start)
EXIT_CANCELLED = 130  # Ctrl-C without a checkpoint to resume from (the shell's 128 + SIGINT)


class OneLine(Exception):
    """An error whose message says everything: one line, no traceback."""

    exit_code = EXIT_FAILED


class UserError(OneLine):
    """A problem with the user's input, reported as one line (no traceback)."""

    exit_code = EXIT_USER


class OutputError(OneLine):
    """A file of the run's record could not be written: `disk full writing <file>`, or
    `cannot write <file>: <reason>`."""

    def __init__(self, path: object, error: OSError):
        self.path, self.errno = str(path), error.errno
        if error.errno in (errno.ENOSPC, errno.EDQUOT):
            what = "disk full" if error.errno == errno.ENOSPC else "disk quota exceeded"
            super().__init__(f"{what} writing {path}")
        else:
            super().__init__(f"cannot write {path}: {error.strerror or error}")

    def __reduce__(self):  # picklable (it may cross a process boundary)
        return (_output_error, (self.path, self.errno, str(self)))


def _output_error(path: str, number: int | None, message: str) -> OutputError:
    error = OutputError.__new__(OutputError)
    Exception.__init__(error, message)
    error.path, error.errno = path, number
    return error


class WorkerHung(OneLine):
    """A worker stopped answering: the others timed out waiting for it in a collective."""


class Interrupted(Exception):
    """The run stopped on a request (a signal); its record says so and a rerun resumes it (from
    its checkpoint, or from the start when it stopped before its first step). run.py says the
    message, unless `said` (rank 0 said it already), and exits with code 3."""

    def __init__(self, message: str, said: bool = False):
        super().__init__(message)
        self.said = said


class WorkerFailed(Exception):
    """A worker process raised or died: the message names its rank and the cause; `details`
    holds the worker's traceback when it had one."""

    exit_code = EXIT_FAILED

    def __init__(self, message: str, details: str = ""):
        super().__init__(message)
        self.details = details


class Cancelled(Exception):
    """The user stopped the run (Ctrl-C) without a checkpoint to resume from, or twice: run.py
    exits with code 130."""


class Stopped(BaseException):
    """Raised by the launcher's signal handler when a stop signal (SIGTERM, SIGHUP, SIGUSR1/2)
    arrives while no worker runs yet (experiments/store/checkpoint.py, STOPS): like
    KeyboardInterrupt, a BaseException, so that no `except Exception` swallows it."""

    def __init__(self, signum: int):
        import signal

        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def one_line_errors(parser):
    """`parser` (an argparse.ArgumentParser) with its errors as one `error: ...` line and exit
    code 2, as every refusal of the suite (argparse prints its usage first, two lines or more);
    returns the parser. `parser.prog` names the command in the hint."""
    import sys

    def error(message: str):
        print(f"error: {message} ({parser.prog} --help)", file=sys.stderr, flush=True)
        sys.exit(EXIT_USER)

    parser.error = error
    return parser


def refuse_inert_flags(parser, flags: list[tuple[str, bool, str]]) -> None:
    """Refuse (one line, exit 2, `parser.error`) the first flag of `flags` given where it cannot
    act: each is (the flag, whether it was given where it cannot act, where that is and why)."""
    for flag, inert, where in flags:
        if inert:
            parser.error(f"{flag} has no effect {where}")


def said_once(failed: list[tuple[str, str]]) -> list[str]:
    """The lines of the failed points `failed` ((point, reason)): one per reason, naming its
    points (`tau=1, tau=2: <reason>`, `4 points (tau=1, ...): <reason>`), so that a refusal
    that applies to every point is said once, not once a point."""
    by_reason: dict[str, list[str]] = {}
    for point, reason in failed:
        by_reason.setdefault(reason, []).append(point)
    lines = []
    for reason, points in by_reason.items():
        if len(points) == 1:
            lines.append(f"{points[0]}: {reason}")
        elif len(points) <= 3:
            lines.append(f"{', '.join(points)}: {reason}")
        else:
            lines.append(f"{len(points)} points ({', '.join(points[:2])}, ...): {reason}")
    return lines
