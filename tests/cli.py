"""Run the suite's commands as a user would: in a subprocess, or (`run_py_here`, `in_process`)
in this process, for a test that checks what a command says, its exit code and what it leaves
on disk before any worker starts; a subprocess costs ~3 s of imports (torch) per command. A
test of what a run computes and records (its metrics, its clock, its run directory) runs
run.py here with its worker processes (`run_py_with_workers_here`): the workers are real
processes, forked by the forkserver this test process keeps (torch imported once), and what
run.py's own process says is captured; a test that reads what the workers print, or of
signals, exits, hangs and launchers, starts its own `python run.py` (`run_py`): a process of its
own, forked from the tests' zygote (tests/zygote.py), which imported torch once for this test
process, unless its environment differs in what an interpreter reads as it starts."""

from __future__ import annotations

import contextlib
import io
import logging
import os
import runpy
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]


def child_env(extra: dict | None = None) -> dict[str, str]:
    """The environment of a command under test: quiet W&B, unbuffered output, and none of a
    launcher's worker identity (a test run inside torchrun or srun must not inherit it)."""
    env = {**os.environ, "WANDB_SILENT": "true", "PYTHONUNBUFFERED": "1", **(extra or {})}
    for key in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    return env


def popen_run_py(*args: str, env_extra: dict | None = None) -> subprocess.Popen:
    """`python run.py ARGS` started in the background (for signals and timing); pipes open.
    Forked from the tests' zygote where it may be (tests/zygote.py: torch imported once)."""
    from tests import zygote

    return zygote.popen(
        ["run.py", *args],
        cwd=REPO,
        env=child_env(env_extra),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def launched_env(port: int | str) -> dict[str, str]:
    """child_env() as a one-process launcher (torchrun, srun) gives it to its one worker: RANK 0
    of WORLD_SIZE 1, its rendezvous at 127.0.0.1:`port`."""
    env = {**child_env(), "RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1"}
    env["MASTER_PORT"] = str(port)
    return env


def run_py(
    *args: str, timeout: float = 300, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """`python run.py ARGS` from the repository root; output captured (stdout not a tty). env:
    the environment, child_env() unless given (launched_env: as a launcher's worker). Forked
    from the tests' zygote where it may be (tests/zygote.py: torch imported once)."""
    from tests import zygote

    return zygote.run(
        ["run.py", *args],
        cwd=REPO,
        env=child_env() if env is None else env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


LAUNCHER_KEYS = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")  # child_env drops them


def in_process(
    call: Callable[[], Any],
    *,
    argv: list[str] | None = None,
    env: Mapping[str, str | None] | None = None,
    cwd: Path | str = REPO,
    monkeypatch: pytest.MonkeyPatch | None = None,
    workers: bool = False,
) -> subprocess.CompletedProcess:
    """`call()` as its command would run, in this process: `sys.argv` = argv, the environment
    (child_env's, plus `env`; None unsets a key) and cwd as given, stdout and stderr captured,
    SystemExit's code as the exit code (uncaught exceptions propagate). No worker may start
    unless `workers`: `experiments.workers.dist.spawn` is a trap, so only a command that stops
    before its workers belongs here. With `workers`, the command's worker processes start as
    they do for the command (its forkserver; `spawn` hands them this process's environment).
    What a command changes in the process is undone afterwards: the environment (all of it),
    cwd and argv (by `monkeypatch`, the test's when given, else one of its own), the stop
    signals' handlers (run.py's cli() installs its own) and the root logger (Hydra's job
    logging points it at the captured stdout)."""
    import experiments.workers.dist
    import experiments.workers.startup
    from experiments.workers.startup import STOP_SIGNALS  # the handlers run.py's cli() sets

    def no_workers(*args, **kwargs):
        raise AssertionError("an in-process command started workers")

    def no_forkserver() -> None:
        """`startup.warm` for a command that may start no worker: the forkserver it would
        start (a fresh interpreter that imports torch, until the refusal stops it) is ~0.2 s
        of CPU on the other core per command, a third of the quick tests' CPU when the tests
        run in two processes. That a refused command starts it and stops it is checked in
        fresh interpreters (tests/test_torch_free.py)."""

    own = pytest.MonkeyPatch() if monkeypatch is None else None
    mp = monkeypatch or own
    handlers = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    root = logging.getLogger()
    root_state = (root.level, list(root.handlers))
    out, err = io.StringIO(), io.StringIO()
    code: Any = 0
    environ = dict(os.environ)  # (spawn sets MASTER_ADDR and MASTER_PORT for its workers)
    try:
        if not workers:
            mp.setattr(experiments.workers.dist, "spawn", no_workers)
            mp.setattr(experiments.workers.startup, "warm", no_forkserver)
        mp.setenv("HYDRA_FULL_ERROR", "1")  # run.py sets it for itself: undone with the rest
        mp.setenv("WANDB_SILENT", "true")
        for key in LAUNCHER_KEYS:
            mp.delenv(key, raising=False)
        for key, value in (env or {}).items():
            if value is None:
                mp.delenv(key, raising=False)
            else:
                mp.setenv(key, value)
        mp.chdir(cwd)
        if argv is not None:
            mp.setattr(sys, "argv", list(argv))
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = call()
            except SystemExit as e:
                code = e.code
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        root.setLevel(root_state[0])
        root.handlers[:] = root_state[1]
        if own is not None:
            own.undo()
        if workers:
            os.environ.clear()
            os.environ.update(environ)
    if code is None:
        code = 0
    elif not isinstance(code, int):  # sys.exit("message"): as the interpreter, exit 1
        code = 1
    return subprocess.CompletedProcess(argv or [], code, out.getvalue(), err.getvalue())


def run_py_call() -> Callable[[], None]:
    """A call that runs run.py as `__main__` (its exit code: SystemExit's, else 0), for
    `in_process` with sys.argv = [run.py, ARGS...]. It composes the config once, as run.py
    does as its own program (`_compose_once`, which leaves another program's Hydra alone, so it
    is applied here and undone after): a composition only to read `hydra.mode` was half of an
    in-process command's time (cProfile, a refused `tau=0`)."""

    def call() -> None:
        from hydra._internal.hydra import Hydra

        import run

        original = Hydra.__dict__.get("get_mode")
        run._compose_once()
        try:
            runpy.run_path(str(REPO / "run.py"), run_name="__main__")
        finally:
            if original is not None:
                Hydra.get_mode = original

    return call


def run_py_here(
    *args: str,
    env: Mapping[str, str | None] | None = None,
    cwd: Path | str = REPO,
    workers: bool = False,
) -> subprocess.CompletedProcess:
    """`python run.py ARGS` in this process (run.py as `__main__` through runpy, as a user's
    command runs it): for bad input, refused before any worker starts (`in_process`; with
    `workers`, see `run_py_with_workers_here`)."""
    script = str(REPO / "run.py")
    return in_process(run_py_call(), argv=[script, *args], env=env, cwd=cwd, workers=workers)


def run_py_with_workers_here(
    *args: str, env: Mapping[str, str | None] | None = None, cwd: Path | str = REPO
) -> subprocess.CompletedProcess:
    """`python run.py ARGS` whose run is what the test checks (its records, its clock), not
    run.py's own process: run.py in this process as `run_py_here` runs it, its workers real
    processes, forked by the forkserver run.py starts (`experiments.workers.startup`; started
    once for this test process, with torch and the suite imported). A `python run.py` costs
    ~3 s more: its own interpreter and imports, and a forkserver that imports torch again.
    Signals, exits, hangs and launchers stay with `run_py`/`popen_run_py`: real processes."""
    return run_py_here(*args, env=env, cwd=cwd, workers=True)


def python(
    *argv: str, env: dict[str, str] | None = None, cwd: Path | str = REPO, timeout: float = 600
) -> subprocess.CompletedProcess:
    """`python ARGV` (a script, `-m NAME ...`, `-c CODE ...`), output captured; env:
    child_env() unless given. Forked from the tests' zygote where it may be (tests/zygote.py:
    torch imported once)."""
    from tests import zygote

    return zygote.run(
        list(argv),
        cwd=cwd,
        env=child_env() if env is None else env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def module(name: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """`python -m NAME ARGS` from the repository root, forked from the tests' zygote where it
    may be (tests/zygote.py: torch imported once)."""
    from tests import zygote

    return zygote.run(
        ["-m", name, *args],
        cwd=REPO,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def module_here(
    name: str, *args: str, cwd: Path | str = REPO, env: Mapping[str, str | None] | None = None
) -> subprocess.CompletedProcess:
    """`python -m NAME ARGS` in this process (`in_process`): NAME's `main()`, as its
    `__main__` block calls it (`sys.exit(main())`), with sys.argv = [NAME, *ARGS]. For a
    command's message, exit code and files; a subprocess costs ~2 s of imports per command."""
    import importlib

    entry = importlib.import_module(name)
    if not hasattr(entry, "main"):  # a package: `python -m NAME` runs NAME/__main__.py
        entry = importlib.import_module(f"{name}.__main__")
    return in_process(entry.main, argv=[name, *args], cwd=cwd, env=env)


def run_dir_of(out_root, *overrides: str) -> Path:
    """The run directory `python run.py OVERRIDES out_root=OUT_ROOT` uses (named by its
    resolved config, experiments/config/identity.py), without running it."""
    from tests.compose import composed

    cfg = composed(*overrides, f"out_root={out_root}", hydra=True)
    return Path(str(cfg.hydra.run.dir)).absolute()
