"""Cheap process starts: what a worker process must not pay for again and again.

Measured on this project's 2-core machine (`python -X importtime`, one smoke run with 2 worker
processes): each spawned worker re-imported torch and the suite (~2.9 CPU-s), its first
optimizer step imported `torch._dynamo` (~2 CPU-s; torch's optimizers import it lazily to mark
their steps as not to be compiled), and rank 0 started W&B on the critical path. So:

- `context()`: worker processes are forked from a forkserver that has imported torch and the
  suite once (`PRELOAD`); in a sweep (one Hydra process, many runs) the server outlives the
  runs, so later runs start their workers without importing anything. A forkserver rather than
  a plain fork of the launcher: the server is a clean single-threaded process, the launcher may
  hold threads (W&B, a progress bar) and locks a fork would copy mid-use. `warm()` starts it
  while the launcher still validates and loads the data.
- `defer_dynamo()`: until something asks for more, `torch._dynamo` is a stand-in whose
  `graph_break()` and `disable(fn)` are what they are in eager mode (nothing, and `fn`): the
  only two things the optimizers' eager path uses (and `init_process_group` clears the
  trace-rule caches of an imported dynamo: the stand-in has none to clear). Any other
  attribute imports the real module and hands over to it, so `torch.compile` still works (it
  loads dynamo on first use); the attributes a scan of `sys.modules` probes (`__file__`:
  `inspect.getmodule`, which pydantic and so `import wandb` run) do not.
  `COMMSGD_EAGER_DYNAMO=0` turns the stand-in off.
- W&B: rank 0 only, and started in a thread of its own (experiments/store/log.py) while the training
  runs.
"""

from __future__ import annotations

import contextlib
import importlib
import multiprocessing
import os
import signal
import sys
import threading
import types
from collections.abc import Callable, Iterator
from typing import Any

#: What the forkserver imports once: the launcher's main module (run.py: without it each worker
#: would run it again, as spawn does), torch and everything a worker runs (not W&B: rank 0
#: only, and only when it is wanted; not torchvision: CIFAR-10 only).
PRELOAD = [
    "__main__",
    "torch",
    "torch.distributed",
    "torch.utils.data",
    "algorithms",
    "experiments",
    "experiments.worker",
    "experiments.training.loop",
    "experiments.data.datasets",
    "experiments.data.partition",
    "experiments.training.models",
    "experiments.training.evaluate",
    "experiments.store.log",
]


def start_method() -> str:
    """How run.py starts worker processes: `forkserver`, or what `COMMSGD_START_METHOD` says
    (`spawn`: a fresh interpreter per worker, as before; for the benchmarks' comparison)."""
    method = os.environ.get("COMMSGD_START_METHOD", "forkserver")
    if method not in ("forkserver", "spawn"):
        raise ValueError(f"COMMSGD_START_METHOD must be forkserver or spawn, got {method!r}")
    return method


def context() -> multiprocessing.context.BaseContext:
    """The multiprocessing context worker processes are started with: a forkserver with
    `PRELOAD` imported (module doc)."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    return ctx


#: The stop signals of experiments/store/checkpoint.py (STOPS; tests/test_sim.py checks they agree),
#: named here so that `warm` need not import torch.
STOP_SIGNALS = (
    signal.SIGUSR1,
    signal.SIGUSR2,
    signal.SIGTERM,
    signal.SIGHUP,
    signal.SIGINT,
)


def warm() -> None:
    """Start the forkserver now, so that it imports `PRELOAD` while this process goes on. It
    starts with the stop signals blocked, as experiments/workers/dist.py `spawn` starts workers: the
    workers it forks inherit the mask and unblock the signals once their handlers are in place
    (a stop during a worker's start-up waits for it, never kills it mid-import)."""
    from multiprocessing import forkserver, resource_tracker

    if start_method() != "forkserver":
        return
    context()
    # The resource tracker first: starting it unblocks SIGINT and SIGTERM in this thread
    # afterwards (multiprocessing/resource_tracker.py), which would undo the mask below.
    resource_tracker.ensure_running()
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        forkserver.ensure_running()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)


def import_torch() -> None:
    """Import torch in this process with the stop signals held (`stops_held`), once the config
    has passed its torch-free checks (experiments/preflight.py `check_machine`, the first to
    need it). run.py's handlers raise on a stop signal; one raised in the middle of
    `import torch` (seconds) would leave torch half imported, and the run's own stop handling,
    which uses torch, would fail on it ("partially initialized module 'torch'":
    tests/test_catalogue.py's signals:hup-while-workers-start). Held, the signal is delivered
    as soon as the import is done, and stops the run as any other. Only the main thread holds
    signals (a thread's import is not interrupted by them)."""
    if "torch" in sys.modules or threading.current_thread() is not threading.main_thread():
        import torch  # noqa: F401

        return
    with stops_held():
        import torch  # noqa: F401


@contextlib.contextmanager
def stops_held() -> Iterator[None]:
    """Hold this process's stop signals while the block runs (main thread only): their handlers
    only note them meanwhile; afterwards the handlers are back and a noted signal is raised
    again, to be handled as it would have been, now.

    By their Python handlers, not by blocking them in this thread (`pthread_sigmask`, as before):
    the kernel hands a process's signal to any thread that does not block it, and Python then
    runs the handler in the main thread all the same. Once numpy is imported there is such a
    thread (OpenBLAS's pool: 2 threads in run.py's process by the time it imports torch), so the
    blocked signal was not held: SIGHUP 0.3-3 s into a smoke run ended it with exit 2 and
    "partially initialized module 'torch'" 10 times in 40 (signals:hup-while-workers-start,
    under load). A signal with no Python handler (None: set outside Python) is left alone.
    Outside the main thread (a test calling a command's main() from a thread) nothing is held:
    only the main thread may set handlers."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    noted: list[int] = []

    def note(signum: int, frame: Any) -> None:
        noted.append(signum)

    previous = {}
    for sig in STOP_SIGNALS:
        if signal.getsignal(sig) is not None:
            previous[sig] = signal.signal(sig, note)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for signum in dict.fromkeys(noted):  # in the order they came; a handler that
            signal.raise_signal(signum)  # raises (run.py's do) ends it, as it would have


def stop_server() -> None:
    """Stop the forkserver that `warm` started, for a command that ends before any worker
    started (bad input, exit code 2). Left alone it would go on importing torch for nothing
    (~2 CPU-s on a shared machine) with the command's stdout and stderr open, which a caller
    that reads them (a test, a script, the benchmarks) waits for: `python run.py tau=0` read
    that way took as long as `import torch`. multiprocessing has no public stop: its own tests'
    `_stop` (close the server's alive pipe, reap it), after SIGKILL, which the stop signals
    blocked in the server (`warm`) do not hold back. No worker is lost: none was forked."""
    from multiprocessing import forkserver

    server = forkserver._forkserver
    pid = getattr(server, "_forkserver_pid", None)
    if pid is None:
        return
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    server._stop()


def starts_processes(argv: list[str]) -> bool:
    """Whether `run.py ARGV` will likely start worker processes on this machine (a guess from
    the command line, so that `warm()` can start before the config is composed; the runner
    warms again, a no-op, once it knows): not under torchrun/srun, not with in-process
    workers, not when the jobs go to SLURM."""
    env = os.environ
    if "RANK" in env or int(env.get("SLURM_NTASKS", "1") or 1) > 1:
        return False
    if env.get("COMMSGD_START_METHOD", "forkserver") != "forkserver":
        return False
    elsewhere = ("cluster=sim", "cluster=slurm", "cluster.in_process=true")
    return not any(arg.replace(" ", "").lower() in elsewhere for arg in argv)


class _EagerDynamo(types.ModuleType):
    """`torch._dynamo` as eager code sees it, until something needs the real one."""

    def __init__(self) -> None:
        super().__init__("torch._dynamo")
        # `init_process_group` clears dynamo's trace-rule caches when dynamo is imported: a
        # dynamo that never ran has none.
        self.trace_rules = types.SimpleNamespace(clear_lru_cache=lambda: None)

    @staticmethod
    def graph_break() -> None:
        """Eager mode: nothing to break."""

    @staticmethod
    def disable(fn: Callable | None = None, recursive: bool = True, **kwargs: Any):
        """Eager mode: the function itself (as a decorator too)."""
        if fn is None:
            return lambda f: f
        return fn

    def __getattr__(self, name: str) -> Any:
        if name == "__file__":
            # Not a use of dynamo but a scan of sys.modules: `inspect.getmodule` (run by
            # pydantic for each model class it builds, so by `import wandb`) asks every module
            # for its file. That imported the real dynamo on rank 0's W&B thread (~6% of a demo
            # run's samples, py-spy). A stand-in has no file. (`__path__` still hands over:
            # importing a submodule, `import torch._dynamo.config`, needs the real one.)
            raise AttributeError(name)
        return getattr(_real_dynamo(), name)


def _real_dynamo() -> types.ModuleType:
    import torch

    if isinstance(sys.modules.get("torch._dynamo"), _EagerDynamo):
        del sys.modules["torch._dynamo"]
        torch.__dict__.pop("_dynamo", None)
    return importlib.import_module("torch._dynamo")


def defer_dynamo() -> None:
    """Install the eager stand-in for `torch._dynamo` (module doc), unless the real one is
    already imported or `COMMSGD_EAGER_DYNAMO=0`."""
    if os.environ.get("COMMSGD_EAGER_DYNAMO", "1") == "0" or "torch._dynamo" in sys.modules:
        return
    import torch

    stand_in = _EagerDynamo()
    sys.modules["torch._dynamo"] = stand_in
    torch._dynamo = stand_in
