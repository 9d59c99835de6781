"""Ctrl-C and the stop signals in the results commands (recompute, verify, verdict_page,
wandb_report, tune_preset, replicate, status): one `error:` line on stderr, no traceback, and
the exit code a shell gives a process that signal ended: 130 for Ctrl-C, 128 + N for signal N
(143 for SIGTERM, 129 for SIGHUP). A reader that went away (`python -m analysis.runs.status |
head`) ends the command quietly with 141, as SIGPIPE would. What the command had finished before
the stop stays; what it was doing is not recorded as a result (each command's files are written
atomically: a stop leaves the previous file, or none). analysis/reports/report.py keeps its own
stops (its report is staged whole, analysis/reports/staging.py) and the sweep driver its own
(experiments/sweep.py: it passes the stop on to its runs).

    @stoppable("recompute")
    def main(argv=None) -> int: ...

A stop while the command still imports its libraries (pandas, torch: seconds) is said the same
way when its module calls `stop_early(command)` first, under `if __name__ == "__main__":`.

Written by hand: Python turns only SIGINT into an exception (KeyboardInterrupt, with a
traceback); SIGTERM, SIGHUP and SIGUSR1/2 end the process with no word and no clean-up.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator

from experiments.errors import Stopped
from experiments.workers.startup import STOP_SIGNALS  # run.py's: the same five

UNFINISHED = "what it had finished is kept, nothing of the interrupted work was written"


def exit_code(signum: int) -> int:
    """The shell's code for a process ended by signal `signum` (130 for Ctrl-C)."""
    return 128 + signum


def said(command: str, signum: int, unfinished: str = UNFINISHED) -> str:
    """The one line that says a stop: `error: <command>: interrupted by Ctrl-C; <unfinished>`."""
    name = signal.Signals(signum).name
    what = "interrupted by Ctrl-C" if signum == signal.SIGINT else f"stopped by {name}"
    return f"error: {command}: {what}; {unfinished}"


def _raise(signum: int, frame) -> None:
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise Stopped(signum)


@contextlib.contextmanager
def stops_raised() -> Iterator[None]:
    """Within: each stop signal raises in the main thread (KeyboardInterrupt for Ctrl-C,
    experiments.errors.Stopped for the others: BaseExceptions, which no `except Exception`
    swallows). Outside the main thread (a test calling main() from a thread): nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, _raise) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def stoppable(command: str, unfinished: str = UNFINISHED) -> Callable:
    """`main(argv) -> int` with the stops said in one line (`said`) and returned as their exit
    code (`exit_code`)."""

    def wrap(main: Callable[..., int]) -> Callable[..., int]:
        @functools.wraps(main)
        def wrapper(*args, **kwargs) -> int:
            try:
                with stops_raised():
                    return main(*args, **kwargs)
            except KeyboardInterrupt:
                signum = signal.SIGINT
            except Stopped as stop:
                signum = stop.signum
            except BrokenPipeError:  # the reader went away (`| head`): no traceback, no word
                _quiet_stdout()
                return exit_code(signal.SIGPIPE)
            except Exception as error:
                signum = _stop_behind(error)
                if signum is None:
                    raise
            print(said(command, signum, unfinished), file=sys.stderr, flush=True)
            return exit_code(signum)

        return wrapper

    return wrap


def _stop_behind(error: BaseException) -> int | None:
    """The stop that `error` was raised while handling, if any: a library's clean-up can fail
    on the state a stop left it in and hide the stop (a SIGTERM inside argparse's
    parse_intermixed_args: its `finally` raised AttributeError 'save_nargs', the catalogue's
    tune_preset-sigterm-while-importing once in 10 runs under load)."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, KeyboardInterrupt):
            return signal.SIGINT
        if isinstance(error, Stopped):
            return error.signum
        error = error.__context__
    return None


def _quiet_stdout() -> None:
    """stdout onto /dev/null: Python's flush at exit would raise BrokenPipeError again (the
    recipe of Python's signal documentation, "Note on SIGPIPE")."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # no file descriptor (a test's captured stdout)
        pass


def stop_early(command: str) -> None:
    """A stop before `main` runs (the command still imports): said in one line, nothing
    written, the process ends with the stop's code at once. `stoppable` takes over in main."""

    def now(signum: int, frame) -> None:
        print(said(command, signum, "nothing was written"), file=sys.stderr, flush=True)
        os._exit(exit_code(signum))

    for sig in STOP_SIGNALS:
        signal.signal(sig, now)


def run_sweep(cmd: list[str]) -> int:
    """Run the sweep `cmd` (tune_preset's tune sweeps, replicate's sweep) as the sweep driver runs
    its commands (experiments/sweep.py `run_children`: a process group of its own that gets
    SIGTERM when this process dies, every stop passed on to it, its group killed GRACE_S
    after the first stop, AGAIN_GRACE_S after a second); its exit code. A stop is raised again
    (KeyboardInterrupt, Stopped) once the sweep ended, so that `stoppable` says it last, in one
    line with its code. Ctrl-C is passed on as SIGTERM: a run.py still in Python's start-up (before
    its handlers) prints a KeyboardInterrupt traceback for SIGINT and ends silently for SIGTERM;
    once started, SIGTERM checkpoints its run (a rerun resumes)."""
    from experiments.errors import Stopped
    from experiments.sweep import Stop, run_children

    try:
        return run_children([cmd], ctrl_c_as=signal.SIGTERM, say_wait=False)[0]  # it says it
    except Stop as stop:
        if stop.signum == signal.SIGINT:
            raise KeyboardInterrupt from None
        raise Stopped(stop.signum) from None
