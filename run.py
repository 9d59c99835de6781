"""One run, or a sweep of runs: `python run.py key=value ...`, `python run.py -m ...`.

Hydra composes the config against its schema (experiments/config/schema.py); every error of the
command line or of a value is one `error: ...` line and exit code 2 before any run directory
exists (experiments/preflight.py). Each run then starts `workers` processes (or is one worker,
under torchrun/srun), trains, and leaves its record in `<out_root>/runs/<name>-<digest>`, named
by its resolved config (experiments/config/identity.py): a rerun finds and skips a finished run of
the same config, a changed config gets a new directory. A sweep (`-m`) runs every point through
hydra_plugins/commsgd_sweeper: a failing point is recorded and the others run; the sweep exits
non-zero at the end with one line per failed point. See README.md and docs/config.md.

Exit codes (experiments/errors.py): 0 completed or diverged; 1 the run failed (a worker crashed
or hung, its records could not be written); 2 bad input or a damaged record, before any worker
starts; 3 stopped by a signal (a rerun resumes from its checkpoint, or starts over when there
was none yet); 130 Ctrl-C without a checkpoint to resume from.
"""

from __future__ import annotations

import gc
import os
import signal
import sys


def _is_the_program() -> bool:
    """Is this process `python [options] run.py ...`, run.py its own program (not run.py run by
    another program in its process, as the tests' `runpy` does)? Only then may run.py change
    the process's garbage collection and end it without the interpreter's teardown."""
    args = iter(getattr(sys, "orig_argv", [])[1:])
    for arg in args:
        if arg in ("-m", "-c"):
            return False
        if arg in ("-W", "-X"):  # options with a separate value
            next(args, None)
        elif not arg.startswith("-"):
            return os.path.realpath(arg) == os.path.realpath(__file__)
    return False


# Start-up cost (issue 16, benchmarks' `sim` family): the cyclic garbage collector runs many
# times while torch and Hydra import and compose, collecting nothing (0.15-0.2 s of a ~2.5 s
# smoke run on 2 cores, measured). Off until the job starts (`main`), then on again with what
# the imports made frozen out of its way (`gc.freeze`).
_PROGRAM = __name__ == "__main__" and _is_the_program()
_GC_DEFERRED = _PROGRAM and gc.isenabled()
if _GC_DEFERRED:
    gc.disable()

# A stop signal while Python imports the suite (seconds: torch) ends the program at once, in one
# line: nothing has been started yet. cli() then puts the launcher's own handlers in place.
_STOPPED_EARLY = "error: {} before the run started: nothing was run; rerun the same command"


def _stop_early(signum: int, frame) -> None:
    if signum == signal.SIGINT:
        print(_STOPPED_EARLY.format("interrupted by Ctrl-C"), file=sys.stderr, flush=True)
        os._exit(130)
    name = signal.Signals(signum).name
    print(_STOPPED_EARLY.format(f"stopped by {name}"), file=sys.stderr, flush=True)
    os._exit(3)


if __name__ == "__main__":
    for _sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(_sig, _stop_early)
    # before torch allocates: freed tensors stay with the process (and its workers' processes)
    from experiments.workers.allocator import configure

    configure()

import traceback  # noqa: E402 - after the handlers above
from typing import Any  # noqa: E402

import hydra  # noqa: E402
from hydra.core.hydra_config import HydraConfig  # noqa: E402
from hydra.types import RunMode  # noqa: E402
from omegaconf import DictConfig, OmegaConf  # noqa: E402

import experiments  # noqa: E402, F401 - registers the schema and the resolvers
from experiments.errors import (  # noqa: E402
    EXIT_CANCELLED,
    EXIT_FAILED,
    EXIT_STOPPED,
    EXIT_USER,
    Cancelled,
    Interrupted,
    OneLine,
    Stopped,
    UserError,
    WorkerFailed,
)
from experiments.store.records import detach_closed_terminal  # noqa: E402

EXIT_INTERRUPTED = EXIT_STOPPED  # the name of issue 9's code 3


def hydra_files(cfg: DictConfig) -> dict[str, str]:
    """Hydra's record of the job (`.hydra/`: config.yaml unresolved, hydra.yaml,
    overrides.yaml), written by the runner once the run directory is its to write."""
    hydra_cfg = HydraConfig.instance().cfg
    return {
        "config.yaml": OmegaConf.to_yaml(cfg),
        "hydra.yaml": OmegaConf.to_yaml(hydra_cfg),
        "overrides.yaml": OmegaConf.to_yaml(hydra_cfg.hydra.overrides.task),
    }


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> dict[str, Any]:
    """One Hydra job: run the configuration. A single run exits with its code. In a sweep a
    failure is the point's outcome, returned to the sweeper, so that the other points run;
    a stop on a signal or Ctrl-C ends the sweep too (SystemExit)."""
    from experiments.runner import run

    global _GC_DEFERRED
    if _GC_DEFERRED:  # (run.py's start-up, the top of this file)
        _GC_DEFERRED = False
        gc.freeze()
        gc.enable()
    hc = HydraConfig.get()
    in_sweep = hc.mode == RunMode.MULTIRUN
    run_dir = hc.runtime.output_dir
    try:
        return {"status": run(cfg, run_dir, hydra_files(cfg)), "run_dir": run_dir}
    except OneLine as e:  # bad input (2), a full disk, a hung worker (1): the line says it all
        code, message = e.exit_code, str(e)
    except WorkerFailed as e:
        if e.details:
            print(e.details, file=sys.stderr)
        code, message = e.exit_code, str(e)
    except Interrupted as e:
        if not e.said:  # else rank 0 has said why, and that a rerun resumes
            _say(str(e))
        sys.exit(EXIT_STOPPED)
    except Cancelled as e:
        _say(f"error: {e}")
        sys.exit(EXIT_CANCELLED)
    except Exception as e:  # a bug: its traceback, then in a sweep the next point
        if not in_sweep:
            raise
        traceback.print_exc()
        code, message = EXIT_FAILED, f"{type(e).__name__}: {e}".splitlines()[0]
    if not in_sweep:
        _say(f"error: {message}")
        sys.exit(code)
    _say(f"{run_dir}: failed: {message}")
    return {"status": "failed", "error": message, "exit_code": code, "run_dir": run_dir}


def _say(line: str) -> None:
    """One line on stderr, unless there is no console any more (a closed terminal or pipe)."""
    try:
        print(line, file=sys.stderr, flush=True)
    except OSError:
        pass


def _raise_stop(signum: int, frame) -> None:
    """run.py's stop signals while no worker runs (experiments/store/checkpoint.py, STOPS): stop
    now; the runner records it (experiments/runner.py) and run.py exits with code 3. While workers
    run, experiments/workers/dist.py forwards the signals to them instead."""
    if signum == signal.SIGHUP:
        detach_closed_terminal()  # (imported above: a handler imports nothing)
    raise Stopped(signum)


def normalized_argv(argv: list[str]) -> list[str]:
    """The command line as Hydra's parser accepts it, or a UserError in one line: argparse
    cannot take an option between two overrides (`python run.py scale=smoke -m tau=1,2`), so
    `-m`/`--multirun` moves to the front; an unknown option is refused here (argparse would
    print its usage, many lines)."""
    import argparse

    from hydra._internal.utils import get_args_parser

    parser = get_args_parser()

    def refuse(message: str) -> None:
        raise UserError(f"{message} (python run.py --help)")

    parser.error = refuse  # type: ignore[method-assign]
    flags = [a for a in argv if a in ("-m", "--multirun")]
    rest = [a for a in argv if a not in ("-m", "--multirun")]
    argv = flags + rest
    try:
        args = parser.parse_intermixed_args(argv)
    except argparse.ArgumentError as e:
        refuse(str(e))
    # Hydra allows one mode (it raises a ValueError, a traceback, on `-m --cfg job`)
    modes = [
        flag
        for flag, given in (
            ("-m", args.multirun),
            ("--run", getattr(args, "run", False)),
            ("--cfg", args.cfg),
            ("--info", args.info),
            ("--shell-completion", getattr(args, "shell_completion", False)),
        )
        if given
    ]
    if len(modes) > 1:
        refuse(f"{' and '.join(modes)} cannot be given together: one of -m, --cfg, --info")
    # Hydra's flags that act only with another (Hydra raises on --resolve alone, a traceback,
    # and ignores --package without --cfg or --info)
    if args.resolve and not (args.cfg or args.help):
        refuse("--resolve has no effect here: it resolves what --cfg shows")
    if args.package and not (args.cfg or args.info):
        refuse("--package has no effect here: it picks the package --cfg or --info shows")
    return argv


def _compose_once() -> None:
    """Hydra composes the whole config twice per command: once only to read `hydra.mode`
    (`Hydra.get_mode`, its errors swallowed), then again to run. conf/ never sets `hydra.mode`
    (tests/test_run_exit.py), so unless the command line does, the mode is the flag's (`-m` or
    not), which is what Hydra falls back to when `get_mode` answers None: answered so here,
    saving a composition (~0.12 s of a smoke run's ~2 s fixed cost, issue 16). Hydra's own
    `get_mode` when an override names `hydra.mode`, or when Hydra has no such method."""
    from hydra._internal.hydra import Hydra

    original = getattr(Hydra, "get_mode", None)
    if original is None or getattr(original, "composes_once", False):
        return

    def get_mode(self, config_name, overrides):
        if any(o.lstrip("~+").startswith("hydra.mode") for o in overrides):
            return original(self, config_name=config_name, overrides=overrides)
        return None

    get_mode.composes_once = True
    Hydra.get_mode = get_mode


def cli() -> None:
    """run.py's entry: Hydra's own errors (composition, overrides, interpolation) as one line
    and exit code 2. HYDRA_FULL_ERROR makes Hydra raise them instead of printing several
    lines and exiting 1; the job's own errors are handled in `main`. A stop signal before any
    worker runs stops the program with exit code 3 (Ctrl-C: 130)."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from experiments.preflight import describe
    from experiments.workers import startup

    # checkpoint.py's STOPS, as startup.py names them without torch (bad input answers without
    # importing it: tests/test_torch_free.py)
    for sig in startup.STOP_SIGNALS:
        if sig != signal.SIGINT:
            signal.signal(sig, _raise_stop)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    os.environ["HYDRA_FULL_ERROR"] = "1"
    if _PROGRAM:  # (not in another program's process: it would patch that program's Hydra)
        _compose_once()
    if startup.starts_processes(sys.argv[1:]):
        startup.warm()  # the workers' forkserver imports torch while Hydra composes the config
    try:
        sys.argv[1:] = normalized_argv(sys.argv[1:])
        main()
    except SystemExit as e:
        if e.code == EXIT_USER:  # refused (the pre-flight, a run's own check): nothing started
            startup.stop_server()
        raise
    except (UserError, HydraException, OmegaConfBaseException) as e:
        _say(f"error: {describe(e)}")
        startup.stop_server()
        sys.exit(EXIT_USER)
    except OneLine as e:  # not a run's: e.g. the sweeper could not write its record
        _say(f"error: {e}")
        sys.exit(e.exit_code)
    except Stopped as e:  # before any run started (a run's own stop ends in main)
        _say(_STOPPED_EARLY.format(f"stopped by {signal.Signals(e.signum).name}"))
        sys.exit(EXIT_STOPPED)
    except KeyboardInterrupt:
        _say(_STOPPED_EARLY.format("interrupted by Ctrl-C"))
        sys.exit(EXIT_CANCELLED)


def _exit(code) -> None:
    """Exit with `code` (as `sys.exit` reads it) without the interpreter's teardown.

    Why by hand: once torch is imported, freeing its modules and running its C++ static
    destructors at exit takes ~0.45 s on 2 cores (measured: `python -c "import torch"` 1.9 s,
    1.46 s when it ends in `os._exit`), a fifth of a smoke run's fixed cost. Everything an exit
    owes its user still happens, in the same order: the atexit handlers (W&B, logging's flush,
    multiprocessing's and tempfile's clean-up), then the standard streams are flushed. Only
    when no other non-daemon thread is alive (else the normal exit, which waits for them)."""
    import atexit
    import threading

    if code is None:
        code = 0
    elif not isinstance(code, int):  # sys.exit("message"): the message on stderr, exit 1
        _say(str(code))
        code = 1
    if any(
        t.is_alive() and not t.daemon
        for t in threading.enumerate()
        if t is not threading.main_thread()
    ):
        sys.exit(code)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


if __name__ == "__main__":
    if not _PROGRAM:  # run by another program (the tests' runpy): a plain call
        cli()
    else:
        try:
            cli()
        except SystemExit as e:
            _exit(e.code)
        _exit(0)
