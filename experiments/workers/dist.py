"""Who am I among the workers, and how the workers come to exist.

Three ways a run gets its m workers:
- `python run.py` on a laptop: run.py spawns `workers` processes itself (`spawn` below);
- `torchrun --nproc-per-node m run.py ...`: each process already has RANK/WORLD_SIZE;
- `srun` (SLURM, also through Hydra's submitit launcher): each task is one worker; rank and
  rendezvous come from submitit's `TorchDistributedEnvironment`, which reads SLURM's variables.

Placement (`place`): one GPU per worker with NCCL by default; several workers per GPU only when
asked for (`cluster.workers_per_gpu`, gloo on CUDA tensors); the CPU with `cluster.device=cpu`,
with gloo asked for by name, or on a machine without a GPU. A placement that cannot work (fewer
GPUs than workers, a GPU asked for and absent) is a one-line error before any worker starts
(experiments/preflight.py), never a silent fallback to the CPU.
Teardown is a barrier then `destroy_process_group()`, so no rank tears down a group another rank
is still using (gloo aborts at teardown otherwise).
"""

from __future__ import annotations

import os
import re
import signal
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from experiments.errors import UserError
from experiments.store.records import detach_closed_terminal


@dataclass
class Worker:
    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    external: bool  # started by torchrun/srun rather than by run.py


def external_worker() -> Worker | None:
    """This process's identity when a launcher (torchrun, srun) started it, else None."""
    env = os.environ
    if "RANK" in env and "WORLD_SIZE" in env:  # torchrun, or env:// set up by hand
        return Worker(
            rank=int(env["RANK"]),
            world_size=int(env["WORLD_SIZE"]),
            local_rank=int(env.get("LOCAL_RANK", 0)),
            local_world_size=int(env.get("LOCAL_WORLD_SIZE", env["WORLD_SIZE"])),
            external=True,
        )
    if int(env.get("SLURM_NTASKS", "1")) > 1 and "SLURM_PROCID" in env:
        import submitit

        # submitit recognises its SLURM environment by this variable, which only its own job
        # launcher sets; a task started by `srun` in slurm/train.sbatch is in the same one.
        env.setdefault("SUBMITIT_EXECUTOR", "slurm")

        # sbatch exports the submitting shell's environment: a MASTER_ADDR/MASTER_PORT found
        # here names the submitter's host, not this job's first node (and submitit refuses to
        # overwrite them). Under SLURM the rendezvous is the job's, so they are replaced.
        inherited = {k: env.pop(k) for k in ("MASTER_ADDR", "MASTER_PORT") if k in env}
        # Sets MASTER_ADDR (first node), MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK; leaves
        # CUDA_VISIBLE_DEVICES alone because SLURM may already bind GPUs (SLURM's GPU binding).
        denv = submitit.helpers.TorchDistributedEnvironment().export(set_cuda_visible_devices=False)
        if inherited and denv.rank == 0:
            print(
                "warning: ignoring "
                + ", ".join(f"{k}={v}" for k, v in inherited.items())
                + f" inherited by the SLURM job; rendezvous at {env['MASTER_ADDR']}:"
                + f"{env['MASTER_PORT']} (the job's first node, a port from the job id)",
                file=sys.stderr,
                flush=True,
            )
        return Worker(
            rank=denv.rank,
            world_size=denv.world_size,
            local_rank=denv.local_rank,
            local_world_size=denv.local_world_size,
            external=True,
        )
    return None


DEVICES = ("auto", "cpu", "cuda")


@dataclass(frozen=True)
class Placement:
    """Where one worker computes and how it talks: backend `nccl` or `gloo`, device `cpu` or
    `cuda`, and its GPU among the visible ones (None on the CPU)."""

    backend: str
    device: str
    gpu: int | None

    def torch_device(self) -> torch.device:
        return torch.device("cpu") if self.gpu is None else torch.device("cuda", self.gpu)


def visible_gpus() -> int:
    """How many CUDA devices this process can use (0 without CUDA)."""
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def bound_by_srun(env: dict[str, str] | None = None) -> bool:
    """Whether this process is one task of a multi-task srun step: there one visible GPU is the
    task's own (`--gpus-per-task`: SLURM sets CUDA_VISIBLE_DEVICES per task), not a GPU the
    node's workers share."""
    env = os.environ if env is None else env
    return "SLURM_PROCID" in env and int(env.get("SLURM_NTASKS", "1") or 1) > 1


def place(
    backend: str,
    local_rank: int,
    local_world_size: int,
    *,
    device: str = "auto",
    workers_per_gpu: int = 1,
    visible: int | None = None,
    bound: bool | None = None,
) -> Placement:
    """The placement of worker `local_rank` of the `local_world_size` workers on this node
    (`cluster.backend`, `cluster.device`, `cluster.workers_per_gpu`), or a UserError in one
    line that says what to change. Never a silent fallback to the CPU.

    - `device=cpu`: gloo on the CPU (nccl is refused).
    - `device=cuda`: a GPU is required. `device=auto`: CUDA when a GPU is visible, unless the
      backend is gloo with one worker per GPU (the CPU, as before: gloo asked for by name is
      the CPU path; `cluster.device=cuda` puts gloo's tensors on the GPUs).
    - On CUDA, `workers_per_gpu` (k) workers share each GPU: worker r takes GPU r // k, and the
      node needs ceil(workers / k) visible GPUs; k = 1 (default) is one GPU per worker with
      NCCL, k > 1 needs gloo (NCCL refuses two ranks on one device), which `backend=auto`
      then picks. Under srun with one visible GPU the task's own GPU is GPU 0 (`bound`).
    """
    if device not in DEVICES:
        raise UserError(f"cluster.device must be one of {', '.join(DEVICES)}, got {device!r}")
    if not (isinstance(workers_per_gpu, int) and workers_per_gpu >= 1):
        raise UserError(f"cluster.workers_per_gpu must be an integer >= 1, got {workers_per_gpu!r}")
    visible = visible_gpus() if visible is None else visible
    bound = bound_by_srun() if bound is None else bound
    k = workers_per_gpu
    if device == "auto":
        if backend == "gloo" and k == 1:
            device = "cpu"
        elif visible == 0 and backend != "nccl" and k == 1:
            device = "cpu"
        else:
            device = "cuda"
    if device == "cpu":
        if backend == "nccl":
            raise UserError("cluster.backend=nccl needs GPUs: use cluster.device=cuda or gloo")
        return Placement("gloo", "cpu", None)
    if visible == 0:
        asked = "cluster.backend=nccl" if backend == "nccl" else "a GPU"
        if k > 1:
            asked = f"cluster.workers_per_gpu={k}"
        raise UserError(
            f"{asked} but no GPU is visible (CUDA_VISIBLE_DEVICES="
            f"{os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')}): run on a GPU machine or "
            "use cluster.device=cpu"
        )
    if k > 1 and backend == "nccl":
        raise UserError(
            f"cluster.workers_per_gpu={k} puts {k} workers on one GPU, which NCCL refuses: use "
            "cluster.backend=gloo (or auto)"
        )
    backend = backend if backend != "auto" else ("nccl" if k == 1 else "gloo")
    if bound and visible == 1:
        return Placement(backend, "cuda", 0)
    need = -(-local_world_size // k)
    if visible < need:
        share = -(-local_world_size // visible)
        raise UserError(
            f"{local_world_size} workers on this node need {need} GPUs at "
            f"{k} per GPU, {visible} visible: set cluster.workers_per_gpu={share} (gloo on "
            "CUDA tensors), fewer workers, or cluster.device=cpu"
        )
    return Placement(backend, "cuda", local_rank // k)


def _cluster_keys(cluster: dict | None) -> dict:
    """`place`'s keywords from the run's `cluster` node; none without one (`place`'s own
    choice: any GPU, one worker per GPU)."""
    if cluster is None:
        return {}
    return {"device": str(cluster["device"]), "workers_per_gpu": cluster["workers_per_gpu"]}


def gpu_index(local_rank: int, local_world_size: int, cluster: dict | None = None) -> int | None:
    """This worker's GPU among the visible ones (`place`), or None when it computes on the
    CPU or cannot have one."""
    try:
        return place("auto", local_rank, local_world_size, **_cluster_keys(cluster)).gpu
    except UserError:
        return None


def choose_backend(
    requested: str, local_rank: int, local_world_size: int, cluster: dict | None = None
) -> str:
    """The backend of `place` for `cluster.backend=requested` (auto: nccl with one GPU per
    worker, gloo otherwise); a placement that cannot work is a UserError."""
    return place(requested, local_rank, local_world_size, **_cluster_keys(cluster)).backend


def device_for(
    backend: str, local_rank: int, local_world_size: int, cluster: dict | None = None
) -> torch.device:
    """This worker's device (`place`), made current when it is a GPU."""
    placement = place(backend, local_rank, local_world_size, **_cluster_keys(cluster))
    if placement.gpu is not None:
        torch.cuda.set_device(placement.gpu)
    return placement.torch_device()


def init(worker: Worker, backend: str, timeout_s: float) -> dist.ProcessGroup | None:
    """Join the workers' process group; return the control group (None when alone).

    The control group is a second, gloo group for the suite's own agreements (stop requests,
    checkpoint digests: experiments/store/checkpoint.py), so they are never matched against the
    algorithm's collectives in flight, and run on the CPU even when training uses NCCL.
    """
    dist.init_process_group(
        backend=backend,
        init_method="env://",
        rank=worker.rank,
        world_size=worker.world_size,
        timeout=timedelta(seconds=timeout_s),
    )
    if worker.world_size == 1:
        return None
    # Its own agreements may wait for slow set-up (W&B) or a checkpoint being written: a longer
    # timeout than the training's collectives.
    return dist.new_group(
        backend="gloo", timeout=timedelta(seconds=max(timeout_s, CONTROL_TIMEOUT_S))
    )


def teardown(clean: bool = True) -> None:
    """Leave the process group. After a failure, skip the barrier: peers may be gone."""
    if dist.is_available() and dist.is_initialized():
        try:
            if clean:
                dist.barrier()
        finally:
            dist.destroy_process_group()


def exit_spawned_worker() -> None:
    """End a spawned worker process at once, after its clean teardown, with exit code 0.

    Why: with torch 2.14.1 a gloo process sometimes aborts while the interpreter shuts down
    ("terminate called without an active exception", SIGABRT) after all its work is done and
    the group is destroyed (a gloo behaviour; seen here about once in a few hundred process exits).
    The parent would then report a finished run as failed. Skipping the interpreter's shutdown
    (`os._exit`) after everything is written and flushed avoids that C++ teardown.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def check_rendezvous_port(worker: Worker) -> None:
    """Rank 0 of launched workers binds MASTER_PORT for the rendezvous (torch's TCPStore): a port
    already in use is a one-line error here, not a stack trace from deep inside torch. Under
    torchrun the agent holds that port itself (TORCHELASTIC_USE_AGENT_STORE), so nothing to do."""
    env = os.environ
    if worker.rank != 0 or "MASTER_PORT" not in env or env.get("TORCHELASTIC_USE_AGENT_STORE"):
        return
    port = int(env["MASTER_PORT"])
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        # As TCPStore binds: SO_REUSEADDR, so that connections of an earlier job on this port
        # still in TIME_WAIT (a requeued SLURM job gets the same port) do not count, only a
        # socket listening on it.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("", port))
        except OSError:
            raise UserError(
                f"rendezvous port {port} (MASTER_PORT) is already in use on "
                f"{socket.gethostname()}: set MASTER_PORT to a free port"
            ) from None


def free_port() -> int:
    """A TCP port on loopback that nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


CONTROL_TIMEOUT_S = 600.0  # the control group's collectives (set-up barrier, checkpoints)
GRACE_S = 3.0  # after a worker failed: the others' time to stop alone, then SIGTERM, then SIGKILL


def _entry(rank: int, nprocs: int, environ: dict[str, str], failures, fn: Callable, *args) -> None:
    """A started worker: the launcher's environment as of the start (the forkserver's is that
    of its own start), then `fn`; a failure is noted with its time in `failures` (see
    `spawn`)."""
    global _failures
    os.environ.clear()
    os.environ.update(environ)
    _failures = failures
    try:
        fn(rank, nprocs, *args)
    except BaseException:
        note_failure(rank)
        raise


_failures = None  # in a spawned worker: the launcher's queue of (time, rank) of failures


def note_failure(rank: int) -> None:
    """In a spawned worker that fails: tell the launcher when, before the teardown makes the
    peers' collectives fail too (once; outside `spawn`'s workers, nothing)."""
    global _failures
    if _failures is not None:
        _failures.put((time.time(), rank))
        _failures = None


def forwarded_signals() -> tuple[signal.Signals, ...]:
    """The signals the launcher passes on to its spawned workers: the stop signals of
    experiments/store/checkpoint.py (STOPS), which the workers act on."""
    from experiments.store.checkpoint import STOPS

    return tuple(STOPS)


def spawn(fn: Callable, nprocs: int, args: tuple) -> list[int]:
    """Run `fn(rank, nprocs, *args)` in `nprocs` fresh processes on this machine; return the
    stop signals forwarded to them, in the order they came.

    The workers run in their own process group (`become_spawned_worker`), so a Ctrl-C in the
    terminal reaches this process only, and it forwards each stop signal exactly once to every
    worker. They start with the stop signals blocked (the mask survives fork and exec) and
    unblock them once their handlers are in place (`unblock_stop_signals`): a stop that comes
    while they start up waits for them, and is a stop at their first safe step, never a worker
    killed mid-import. When a worker fails, the others get GRACE_S to stop on their own (a dead
    peer makes their collectives fail at once), then SIGTERM, then SIGKILL: none is left
    behind. A failure is raised as one exception saying what happened (`_failure`): a worker
    that stopped answering (the others timed out waiting for it: the one still alive after the
    grace), the one-line error of a worker (experiments/errors.py, OneLine), or the first
    worker's exception or signal.
    """
    from multiprocessing import resource_tracker

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(free_port())
    from experiments.workers import startup

    method = startup.start_method()
    stops = forwarded_signals()
    # multiprocessing starts its resource tracker at the first spawn, unblocking SIGINT and
    # SIGTERM in this thread afterwards: start it first.
    resource_tracker.ensure_running()
    # Which worker failed first: when a worker fails, its peers' collectives fail at once too,
    # and the forkserver may report both exits in the same poll.
    ctx = startup.context() if method == "forkserver" else mp.get_context(method)
    failures = ctx.SimpleQueue()
    interrupted: list[int] = []
    unsent: list[int] = []  # noted before the workers existed
    processes: list = []

    def forward(signum, frame) -> None:
        interrupted.append(signum)
        if signum == signal.SIGHUP:
            detach_closed_terminal()
        if processes:
            _send(processes, signum)
        else:
            unsent.append(signum)

    # The handlers first (they note and forward, never raise: a KeyboardInterrupt in the middle
    # of starting a worker would leave it half-started), then the workers, started with the
    # stop signals blocked; a stop noted before they existed is forwarded once they do. (A
    # handler runs between two Python instructions of this thread: before or after
    # `processes` is set, never during.)
    previous = {sig: signal.signal(sig, forward) for sig in stops}
    try:
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, stops)
        try:
            # (a forkserver started now inherits the mask, and so do the workers it forks;
            # startup.warm starts it under the same mask)
            context = mp.start_processes(
                _entry,
                args=(nprocs, dict(os.environ), failures, fn, *args),
                nprocs=nprocs,
                join=False,
                start_method=method,
            )
            processes[:] = context.processes
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        while unsent:
            _send(processes, unsent.pop(0))
        failed = _join(context, GRACE_S, failures)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if failed is not None:
        raise _failure(context, failed, interrupted)
    # torch's spawn wrapper ends a worker stopped by Ctrl-C with exit code 0: the caller reads
    # the run's record to tell a checkpointed stop from a cancelled run.
    return interrupted


def _send(processes: list, signum: int) -> None:
    for process in processes:
        if process.is_alive() and process.pid is not None:
            try:
                os.kill(process.pid, signum)
            except ProcessLookupError:
                pass


def unblock_stop_signals() -> None:
    """In a worker, once its stop-signal handlers are in place: let the signals `spawn` held
    back while it started come in."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, forwarded_signals())


@dataclass
class _Failed:
    index: int  # the worker that failed first
    lingering: list[int]  # the workers still alive GRACE_S after it (then ended)


def _join(context, grace: float, failures=None) -> _Failed | None:
    """Wait for every worker; at the first that fails, give the others `grace` seconds to stop,
    note which are still alive without having failed, end them (SIGTERM, then SIGKILL) and
    return what happened. (torch's ProcessContext.join does the same but forgets who lingered.)
    A worker has failed when it exited non-zero or wrote its error file: one that wrote it can
    still be stuck on its way out (gloo's destructor waits for a peer that stopped)."""
    from multiprocessing.connection import wait

    processes = context.processes
    pending = {p.sentinel: i for i, p in enumerate(processes)}

    def reported(i: int) -> bool:
        try:
            return os.path.getsize(context.error_files[i]) > 0
        except OSError:
            return False

    first = None
    batch: list[int] = []  # the workers found failed in the poll that found the first
    while pending and first is None:
        for sentinel in wait(list(pending), timeout=0.5):
            index = pending.pop(sentinel)
            processes[index].join()
            if processes[index].exitcode != 0:
                batch.append(index)
        if not batch:
            batch = [i for i in pending.values() if reported(i)]
        first = min(batch) if batch else None
    if first is None:
        return None
    deadline = time.monotonic() + grace
    for p in processes:
        p.join(max(0.0, deadline - time.monotonic()))
    lingering = [i for i, p in enumerate(processes) if p.is_alive() and not reported(i)]
    # Who failed first, when one poll found several: a worker that died without a note (killed
    # by a signal, or exited) came before the peers it brought down (they note their failure);
    # else the workers' own notes say (the forkserver may report two exits in the same poll).
    notes = _failure_notes(failures) if failures is not None else {}
    silent = [i for i in batch if i not in notes]
    if silent:
        first = silent[0]
    elif notes:
        first = min(notes, key=notes.get)
    for p in processes:
        if p.is_alive():
            p.terminate()
    deadline = time.monotonic() + grace
    for p in processes:
        p.join(max(0.0, deadline - time.monotonic()))
    for p in processes:
        if p.is_alive():
            p.kill()
        p.join()
    return _Failed(first, lingering)


TIMED_OUT = re.compile(r"timed out|timeout", re.IGNORECASE)


def _failure(context, failed: _Failed, interrupted: list[int]) -> Exception:
    """The exception that says how the workers failed (see `spawn`)."""
    import pickle

    from experiments import errors

    index = failed.index
    process = context.processes[index]
    trace = None
    try:
        with open(context.error_files[index], "rb") as f:
            trace = pickle.load(f)
    except (OSError, EOFError, pickle.UnpicklingError):
        pass
    if trace is not None:
        trace = str(trace).rstrip()
        cause = trace.splitlines()[-1] if trace else "an exception"
        if interrupted and cause.startswith("KeyboardInterrupt"):
            return errors.Cancelled("interrupted by Ctrl-C")
        if failed.lingering and TIMED_OUT.search(cause):
            hung = ", ".join(f"worker {i} (rank {i})" for i in failed.lingering)
            return errors.WorkerHung(
                f"{hung} stopped answering: rank {index} timed out waiting for it ({_short(cause)})"
            )
        one_line = _one_line(cause)
        if one_line is not None:
            return one_line
        return errors.WorkerFailed(f"worker {index} (rank {index}) failed: {cause}", trace)
    code = process.exitcode
    how = f"exited with {code}"
    if code is not None and code < 0:
        try:
            how = f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            how = f"was killed by signal {-code}"
    if signal.SIGINT in interrupted:
        return errors.Cancelled(f"interrupted by Ctrl-C (worker {index} {how})")
    if code is not None and -code in interrupted:  # the stop signal itself, not a crash
        name = signal.Signals(-code).name
        return errors.Interrupted(
            f"interrupted by {name}; no checkpoint (checkpoint.on_signal=false): a rerun "
            "starts over"
        )
    return errors.WorkerFailed(f"worker {index} (rank {index}) {how}")


def _short(text: str, limit: int = 160) -> str:
    """`text` on one line, without the C++ source location of torch's messages."""
    text = re.sub(r"\[[^\]\s]*\.(?:cc|cpp|h|hpp):\d+\] ", "", " ".join(text.split()))
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _one_line(cause: str) -> Exception | None:
    """The worker's own one-line error (a OneLine subclass of experiments/, its message all the
    user needs: a UserError, a full disk), rebuilt from the last line of its traceback
    (`<module>.<Class>: <message>`); None for anything else."""
    import importlib

    from experiments.errors import OneLine

    match = re.match(r"((?:experiments|algorithms)(?:\.\w+)+)\.(\w+): (.*)$", cause)
    if not match:
        return None
    module, name, message = match.groups()
    try:
        cls = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        return None
    if not (isinstance(cls, type) and issubclass(cls, OneLine)):
        return None
    error = OneLine.__new__(cls)
    Exception.__init__(error, message)
    return error


def _failure_notes(failures) -> dict[int, float]:
    """rank -> the time it noted its failure, from the workers' notes (`note_failure`)."""
    notes: dict[int, float] = {}
    while not failures.empty():
        when, rank = failures.get()
        notes[rank] = min(when, notes.get(rank, when))
    return notes


def become_spawned_worker() -> None:
    """First thing in a worker spawned by `spawn`: leave the launcher's process group (signals
    come forwarded, once) and die with the launcher if it is killed (Linux), so that no worker
    outlives its run."""
    parent = os.getppid()
    os.setpgid(0, 0)
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:  # the launcher died before prctl took effect
        os._exit(1)
