"""`cluster=sim`: the m workers of a run as threads of this one process.

Each worker thread runs exactly what a worker process runs (`runner.train_worker`): its own
model replica, optimizer, data shard, random streams (experiments/data/datasets.py) and algorithm
instance, every algorithm unchanged. Their collectives go through `algorithms.group.ThreadGroup`
instead of gloo: matched by sequence number, reduced in rank order by the last worker to
arrive, so a run's numbers do not depend on how the threads are scheduled. The suite's own
agreements (stop requests, checkpoint digests) use a second in-process group, as a worker
process uses a second gloo group. Time is the virtual clock (timing.md): threads sharing cores
have no meaningful wall-clock, so `timing=real` is refused.

What stays as with worker processes: the run directory and its records, W&B (rank 0), exact
checkpoints and resume, divergence, the exit codes. Differences:
- signals reach the main thread only; it passes each stop request to every worker's `Stopper`
  (what the launcher's forwarding does for processes), and a hard Ctrl-C makes every worker's
  next collective raise;
- a worker thread that raises makes every other worker's next wait raise at once, naming the
  failing rank; the run ends as a failed worker process ends it (`WorkerFailed`, exit code 1,
  `status: failed`); a collective that waits `dist_timeout_s` names the ranks that did not
  arrive. A thread cannot be killed: one stuck outside any collective is left behind (a daemon
  thread, gone when the process exits) once the others have stopped;
- `COMMSGD_INJECT_FAULT` kinds `exit` and `kill` end the whole process (there is one);
- data-loader worker processes are not used (forking a process with running threads can
  deadlock); the data are the same, since the sampler carries the random numbers;
- one device for every worker (`cluster.device`), no NCCL; torch's intra-op threads are shared
  by the process: `threads_per_worker` (default cores / workers, at least 1) is set once.

Design note: threads or a batched model (grouped, or vmap)? Both; threads by default. Measured
on this project's 2-core machine (ResNet-18 width 8 on digits, batch 32 per worker; `python -m
benchmarks --only sim` reruns it): the compute of m small models is dominated by per-operator
overhead (a width-8 convolution's backward costs ~0.3 ms whatever its batch), so one model on
the global batch of m x 32 runs ~2x (m = 4) to ~3x (m = 16) faster than m models one after the
other. Threads keep every algorithm, its tests and its checkpoints exactly as they are, and
reach ~0.8 of the one-model speed at m = 4 but ~0.3 at m = 16. `cluster.batched=true`
(experiments/workers/batched.py) keeps each worker's module, optimizer, algorithm and data in
its thread but computes the m forward and backward passes as one pass over stacked replicas (one
grouped kernel per operator), and the m SGD steps as one update of the stacked tensors: ~0.65 at
m = 16 on this CPU (0.5 with the m optimizer steps one per worker; the data loaders and hooks,
still one per worker, are most of the rest), ~0.7 at m = 4, where the threads' two cores do
better. It needs the workers in lock-step, so OSP and LOSP (collectives at rank-dependent steps)
run with threads only. On a GPU, where m threads would queue m small kernels per operator
through one interpreter, batched is the way to run the papers' 16 workers.
`cluster.batched=auto` (the default) therefore batches on a GPU and, on a CPU, from
AUTO_MIN_WORKERS_CPU workers, where the algorithm allows it.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from algorithms.group import PeerFailed, ThreadGroup, use
from experiments.errors import Cancelled, OneLine, UserError, WorkerFailed

# After the first failure: the other workers' time to reach a collective and stop, before the
# run is reported failed without them (a process would be sent SIGTERM, then SIGKILL).
GRACE_S = 3.0


def device_of(cfg: dict[str, Any]) -> torch.device:
    """The device of every worker: `cluster.device` (auto: the first GPU, else the CPU)."""
    spec = str(cfg["cluster"].get("device") or "auto")
    if spec == "auto":
        return torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
    try:
        device = torch.device(spec)
    except (RuntimeError, ValueError):
        raise UserError(f"cluster.device must be auto, cpu, cuda or cuda:N, got {spec!r}") from None
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        index = 0 if device.index is None else device.index
        if index >= count:
            raise UserError(f"cluster.device={spec}: this machine has {count} CUDA device(s)")
        return torch.device("cuda", index)
    if device.type != "cpu":
        raise UserError(f"cluster.device must be auto, cpu, cuda or cuda:N, got {spec!r}")
    return device


def check_in_process(cfg: dict[str, Any]) -> None:
    """One-line errors for a configuration the in-process workers cannot run."""
    c = cfg["cluster"]
    device_of(cfg)
    if c.get("name") == "slurm" and (c.get("nodes") != 1 or c.get("tasks_per_node") != 1):
        raise UserError(
            "cluster.in_process=true runs a run's workers in one SLURM task: set "
            "cluster.nodes=1 cluster.tasks_per_node=1 (and cluster.gpus_per_node=1 for a GPU)"
        )


def run(cfg: dict[str, Any], run_dir: Path, bundle, train_worker: Callable) -> bool:
    """Train the run in `cfg` with its workers as threads of this process, each thread running
    `train_worker` (experiments/runner.py's, passed in: this room sits below the runner); rank
    0 writes the records. Returns whether a Ctrl-C came (as `dist.spawn`). Raises `WorkerFailed`
    when a worker failed, `Cancelled` on a hard Ctrl-C."""
    from experiments.store.checkpoint import Stopper
    from experiments.workers.dist import CONTROL_TIMEOUT_S, Worker
    from experiments.workers.startup import defer_dynamo

    defer_dynamo()  # no torch._dynamo import on the optimizer path (experiments/workers/startup.py)
    m = cfg["workers"]
    device = device_of(cfg)
    timeout = float(cfg["dist_timeout_s"])
    groups = ThreadGroup.create(m, timeout, device, name="collectives")
    from algorithms import REGISTRY
    from experiments.workers.batched import BatchedSteps, wanted

    batched = None
    if wanted(cfg, REGISTRY[cfg["algorithm"]["name"]], device):  # workers/batched.py
        batched = BatchedSteps(m, timeout)
    controls = ThreadGroup.create(m, max(timeout, CONTROL_TIMEOUT_S), "cpu", name="control")
    stoppers = [
        Stopper(
            rank=r,
            world_size=m,
            group=controls[r],
            poll_steps=cfg["checkpoint"]["poll_steps"],
            anywhere=True,
            simulate_at_step=cfg["checkpoint"].get("simulate_signal_at_step"),
            checkpoint_on_interrupt=cfg["checkpoint_every"] > 0,
            timeout_s=timeout,
        )
        for r in range(m)
    ]
    failures: list[tuple[int, BaseException, str]] = []
    lock = threading.Lock()

    def abort(message: str, error: type[BaseException] = PeerFailed) -> None:
        groups[0].abort(message, error)
        controls[0].abort(message, error)
        if batched is not None:  # workers waiting for a batched pass stop too
            batched.abort(message, error)

    def worker(rank: int) -> None:
        use(groups[rank])  # a `Comm()` made in this thread talks to the other threads
        clean = False
        try:
            worker_id = Worker(rank, m, rank, m, external=False)
            train_worker(
                cfg,
                run_dir,
                worker_id,
                "sim",
                bundle,
                stoppers[rank],
                groups[rank],
                device,
                batched=batched,
            )
            clean = True
        except BaseException as e:
            with lock:
                failures.append((rank, e, traceback.format_exc()))
            if not isinstance(e, PeerFailed | KeyboardInterrupt):
                abort(f"rank {rank} failed: {type(e).__name__}: {e}")
        finally:
            try:
                stoppers[rank].close(clean)
            except Exception:  # a peer gone at the last poll: the failure is reported above
                pass
            use(None)

    threads = [
        threading.Thread(target=worker, args=(r,), name=f"commsgd-worker-{r}", daemon=True)
        for r in range(m)
    ]
    interrupted: list[int] = []

    def forward(signum: int, frame) -> None:
        # What the launcher does for worker processes: each worker's Stopper hears the signal.
        if signum == signal.SIGINT:
            interrupted.append(signum)
        hard = False
        for stopper in stoppers:
            try:
                stopper._handler(signum, frame)
            except KeyboardInterrupt:  # a second Ctrl-C, or one without checkpointing
                hard = True
        if hard:
            raise KeyboardInterrupt

    from experiments.store.checkpoint import STOP_SIGNALS

    in_main = threading.current_thread() is threading.main_thread()
    previous = {}
    if in_main and cfg["checkpoint"]["on_signal"]:
        previous = {sig: signal.signal(sig, forward) for sig in STOP_SIGNALS}
    threads_before = torch.get_num_threads()
    # batched: one thread at a time runs the heavy pass (all m workers'), on every core
    share = (os.cpu_count() or 1) // (1 if batched is not None else m)
    torch.set_num_threads(cfg.get("threads_per_worker") or max(1, share))
    try:
        for t in threads:
            t.start()
        _join(threads, failures)
    except KeyboardInterrupt:
        abort("the run was stopped by Ctrl-C", KeyboardInterrupt)
        _join(threads, failures, grace_s=GRACE_S)
        raise Cancelled("interrupted by Ctrl-C (no checkpoint: checkpoint_every=0)") from None
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        torch.set_num_threads(threads_before)
    if failures:
        rank, error, trace = _root_cause(failures)
        if isinstance(error, KeyboardInterrupt) and interrupted:
            raise Cancelled("interrupted by Ctrl-C (no checkpoint: checkpoint_every=0)")
        if isinstance(error, OneLine):  # its message is all the user needs (a full disk)
            raise error
        cause = f"{type(error).__name__}: {error}".splitlines()[0]
        raise WorkerFailed(f"worker {rank} (rank {rank}) failed: {cause}", trace.rstrip())
    return bool(interrupted)


def _join(threads: list[threading.Thread], failures: list, grace_s: float | None = None) -> None:
    """Wait for every thread; after the first failure, at most GRACE_S more (`grace_s`: at
    most that long from now)."""
    deadline = None if grace_s is None else time.monotonic() + grace_s
    while any(t.is_alive() for t in threads):
        if failures and deadline is None:
            deadline = time.monotonic() + GRACE_S
        if deadline is not None and time.monotonic() > deadline:
            return
        for t in threads:
            t.join(timeout=0.05)


def _root_cause(failures: list[tuple[int, BaseException, str]]):
    """The failure that ended the run: the first that is not a consequence of another's."""
    for failure in failures:
        if not isinstance(failure[1], PeerFailed):
            return failure
    return failures[0]
