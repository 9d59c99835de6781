"""`cluster=sim`: the m workers of a run as threads of this one process.

Each worker thread runs exactly what a worker process runs (`worker.train_worker`): its own
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
better. It needs the workers in lock-step, so a run of OSP or LOSP (collectives at
rank-dependent steps) batches nothing within itself; their seeds train rank by rank (below).
On a GPU, where m threads would queue m small kernels per operator through one interpreter,
batched is the way to run the papers' 16 workers.
`cluster.batched=auto` (the default) therefore batches on a GPU and, on a CPU, from
AUTO_MIN_WORKERS_CPU workers, where the algorithm allows it, and whenever seeds may train in
lock-step (`cluster.lockstep_seeds` > 1, the default), so that a seed run alone computes what it
computes among the others.

Seeds in lock-step (`run_lockstep`, issue 34): a sweep's points that differ only in their seed
(hydra_plugins/commsgd_sweeper, up to `cluster.lockstep_seeds` at a time) train in this process
as S x m worker threads whose forward and backward passes, SGD steps and evaluations are one
batched pass over S x m stacked replicas (batched.py). Each run keeps its own collectives, stop
requests, data order, initial model, stragglers, virtual clock and records; its numbers are
those of the run alone (float64 bit for bit). The runs share one calibration of the virtual
clock (`SharedCalibration`: the first run's workers measure, the others take its values: the
same config measured on the same machine) and one copy of the data. A run that diverges or
fails leaves the pass (`BatchedSteps.leave`); the others go on, their records intact. Why: at
the cpu scale a run's step is mostly per-operator overhead, so S runs in one pass cost far less
than S runs (measured: 8 seeds of the demo config in ~2.7x the wall time of one,
benchmarks/RESULTS-quick.md).

OSP and LOSP, whose ranks do not step together, train seeds in lock-step rank by rank (`by_rank`):
one batched pass per rank over that rank's S replicas, the m ranks' passes apart. It holds where
the runs' clocks are the same for every seed (no modeled speed drawn from the seed), so that
rank r of every seed pushes, waits and evaluates at the same steps; seeds resumed from
different steps train in waves. Measured (fmnist, 8 OSP seeds of the losp preset, 2 epochs, 2
idle cores): 106.6 s rank by rank against 122.9 s one at a time (docs/cluster.md).
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
    `train_worker` (experiments/worker.py's, passed in by the runner: this room sits below
    both); rank 0 writes the records. Returns whether a Ctrl-C came (as `dist.spawn`). Raises
    `WorkerFailed` when a worker failed, `Cancelled` on a hard Ctrl-C."""
    (outcome,) = run_lockstep([(cfg, run_dir, bundle)], train_worker)
    if isinstance(outcome, BaseException):
        raise outcome
    return outcome


def load_cuda_linalg(device: torch.device) -> None:
    """Load CUDA's linear-algebra library from this thread, before the workers' threads start.
    Its lazy loader is not thread-safe: two threads' first `torch.linalg` call on a GPU raise
    "lazy wrapper should be called at most once" (pytorch/pytorch#90613, seen in `make
    gpu-check`: PowerSGD's `torch.linalg.qr` in 4 worker threads). Nothing on the CPU."""
    if device.type == "cuda":
        torch.linalg.qr(torch.eye(2, device=device))


def lockstep(cfg: dict[str, Any], device: torch.device | None = None) -> bool:
    """Whether the runs of `cfg` and of its other seeds can train in lock-step (`run_lockstep`):
    for an algorithm whose workers compute every step together, one batched pass for all where
    the workers' batched passes are wanted (batched.py); for one whose collectives start at
    rank-dependent steps (OSP, LOSP), rank by rank (`by_rank`)."""
    from algorithms import REGISTRY
    from experiments.workers.batched import wanted

    if not cfg["cluster"].get("in_process"):
        return False
    if (cfg.get("budget") or {}).get("name") == "time" and speeds_vary_by_seed(cfg):
        # on a time budget a run stops, and scores its points, at the steps its clocks say
        # (experiments/training/budget.py): seeds whose clocks differ cannot share one pass
        return False
    algorithm = REGISTRY[cfg["algorithm"]["name"]]
    if not algorithm.checkpoint_anywhere:
        return by_rank(cfg)
    return wanted(cfg, algorithm, device or device_of(cfg))


def by_rank(cfg: dict[str, Any]) -> bool:
    """Whether seeds of `cfg`, an algorithm whose collectives start at rank-dependent steps
    (OSP, LOSP: `checkpoint_anywhere` false), train in lock-step rank by rank: worker r of
    every seed in one batched pass (a `BatchedSteps` per rank, `run_lockstep`), the m ranks'
    passes apart. Its workers do not step together, but each rank's steps, pushes, waits and
    evaluations follow the run's clocks, which are the same for every seed where the modeled
    speeds are not drawn from the seed (`speeds_vary_by_seed`): rank r of every seed then makes
    the same calls in the same order, and a pass of rank r never waits for a step that another
    seed's rank r makes later. Asked for by `cluster.batched=auto` with `cluster.lockstep_seeds`
    > 1 (a seed alone then computes rank by rank too, as among the others); a run's numbers are
    those of the seed alone (float64 bit for bit: tests/test_lockstep.py)."""
    from algorithms import REGISTRY
    from experiments.workers.options import choice, lockstep_seeds

    if REGISTRY[cfg["algorithm"]["name"]].checkpoint_anywhere or not cfg["cluster"].get(
        "in_process"
    ):
        return False
    if choice(cfg) != "auto" or lockstep_seeds(cfg) < 2 or cfg["workers"] < 2:
        return False
    return not speeds_vary_by_seed(cfg)


def speeds_vary_by_seed(cfg: dict[str, Any]) -> bool:
    """Whether the workers' modeled speeds are drawn from the seed (lognormal factors, per-step
    draws, stragglers), so that runs of one config with other seeds keep other clocks."""
    compute = cfg["compute"]
    drawn = compute["slowdown"] in ("lognormal", "lognormal_steps")
    return drawn or float(compute["straggler_prob"]) > 0


def run_lockstep(
    runs: list[tuple[dict[str, Any], Path, Any]],
    train_worker: Callable,
    starts: list[int] | None = None,
) -> list[bool | BaseException]:
    """Train S runs of one config that differ only in their seed, S x m worker threads, their
    forward and backward passes (and SGD steps) one batched pass over S x m stacked replicas
    (`BatchedSteps` with a block per run), or, for OSP and LOSP (`by_rank`), m passes, one per
    rank, each over that rank's S replicas (`runs`: each one's config, directory and data;
    `starts`: each one's first step, a resumed run's checkpoint step; seeds trained rank by
    rank that start at different steps train in waves): each run with its own collectives,
    stop requests, data, random streams, clock and records, its numbers bit for bit those of
    the run alone (batched.py). With one run, the run as `run` trains it. Returns per run
    whether a Ctrl-C came, or the error that ended it (`WorkerFailed`, `Cancelled`); a run that
    fails or diverges leaves the batched passes, the others go on."""
    from experiments.store.checkpoint import STOP_SIGNALS, Stopper
    from experiments.workers.dist import CONTROL_TIMEOUT_S, Worker
    from experiments.workers.startup import defer_dynamo

    defer_dynamo()  # no torch._dynamo import on the optimizer path (experiments/workers/startup.py)
    first = runs[0][0]
    m = first["workers"]
    device = device_of(first)
    load_cuda_linalg(device)
    timeout = float(first["dist_timeout_s"])
    if any(cfg["workers"] != m for cfg, _, _ in runs):
        raise ValueError("runs in lock-step have the same number of workers")
    together, ranked = lockstep(first, device), by_rank(first)
    if not together and len(runs) > 1:
        raise ValueError("these runs cannot train in lock-step (sim.lockstep)")

    class Seed:
        """One run's workers: their groups, stop requests and failures."""

        def __init__(self, index: int, cfg: dict[str, Any], run_dir: Path, bundle):
            self.index, self.cfg, self.run_dir, self.bundle = index, cfg, run_dir, bundle
            self.groups = ThreadGroup.create(m, timeout, device, name="collectives")
            self.controls = ThreadGroup.create(
                m, max(timeout, CONTROL_TIMEOUT_S), "cpu", name="control"
            )
            self.stoppers = [
                Stopper(
                    rank=r,
                    world_size=m,
                    group=self.controls[r],
                    poll_steps=cfg["checkpoint"]["poll_steps"],
                    anywhere=True,
                    simulate_at_step=cfg["checkpoint"].get("simulate_signal_at_step"),
                    checkpoint_on_interrupt=cfg["checkpoint_every"] > 0,
                    timeout_s=timeout,
                )
                for r in range(m)
            ]
            self.failures: list[tuple[int, BaseException, str]] = []
            # the batched passes worker r takes part in (`passes[r]`) and its row there
            self.passes: list[Any] = [None] * m
            self.rows: list[int | None] = [None] * m

            self.threads: list[threading.Thread] = []

        def abort(self, message: str, error: type[BaseException] = PeerFailed) -> None:
            self.groups[0].abort(message, error)
            self.controls[0].abort(message, error)

        def give_up(self) -> None:
            """Its threads still alive after the grace: the other runs' passes go on
            without them (a run alone has no other)."""
            for steps, row in zip(self.passes, self.rows, strict=True):
                if steps is not None:
                    steps.leave(row)

    seeds = [Seed(i, *run) for i, run in enumerate(runs)]
    waves = [seeds]  # the seeds whose threads start together
    if together:  # workers/batched.py
        from experiments.workers.batched import BatchedSteps

        if ranked:
            # Rank by rank, the seeds of one pass start at one step: a stop can leave them
            # checkpointed at different evaluation points, where their ranks' passes would no
            # longer line up (rank r's pass could wait for a step that another seed's rank r
            # makes only after a collective with a rank that waits for ours). Such seeds
            # train in waves, one per starting step, each seed still rank by rank.
            keys = list(starts) if starts is not None else [0] * len(seeds)
            waves = [[s for s in seeds if keys[s.index] == k] for k in dict.fromkeys(keys)]
            for wave in waves:
                per_rank = [BatchedSteps(len(wave), timeout, block=1) for _ in range(m)]
                for row, seed in enumerate(wave):
                    seed.passes, seed.rows = per_rank, [row] * m
        else:
            steps = BatchedSteps(m * len(seeds), timeout, block=m)
            for seed in seeds:
                seed.passes = [steps] * m
                seed.rows = [seed.index * m + r for r in range(m)]
    batched = seeds[0].passes[0]
    shared = SharedCalibration() if len(seeds) > 1 else None
    lock = threading.Lock()

    def abort_all(message: str, error: type[BaseException] = PeerFailed) -> None:
        for seed in seeds:
            seed.abort(message, error)
        # workers waiting for a batched pass stop too
        every = {id(p): p for seed in seeds for p in seed.passes if p is not None}
        for steps in every.values():
            steps.abort(message, error)

    def worker(seed: Seed, rank: int) -> None:
        use(seed.groups[rank])  # a `Comm()` made in this thread talks to the other threads
        clean = False
        try:
            worker_id = Worker(rank, m, rank, m, external=False)
            train_worker(
                seed.cfg,
                seed.run_dir,
                worker_id,
                "sim",
                seed.bundle,
                seed.stoppers[rank],
                seed.groups[rank],
                device,
                batched=seed.passes[rank],
                batched_rank=seed.rows[rank],
                shared_calibration=None if shared is None else shared.for_run(seed.index),
                # one progress line for the lock-step (the first seed's), not S interleaved
                progress=None if seed.index == 0 else False,
            )
            clean = True
        except BaseException as e:
            with lock:
                seed.failures.append((rank, e, traceback.format_exc()))
            if not isinstance(e, PeerFailed | KeyboardInterrupt):
                seed.abort(f"rank {rank} failed: {type(e).__name__}: {e}")
        finally:
            if seed.passes[rank] is not None:  # the other runs' passes go on without it
                seed.passes[rank].leave(seed.rows[rank])
            if shared is not None and seed.index == 0:
                shared.release()
            try:
                seed.stoppers[rank].close(clean)
            except Exception:  # a peer gone at the last poll: the failure is reported above
                pass
            use(None)

    for seed in seeds:
        seed.threads = [
            threading.Thread(
                target=worker,
                args=(seed, r),
                name=f"commsgd-worker-{r}" + (f"-run-{seed.index}" if len(seeds) > 1 else ""),
                daemon=True,
            )
            for r in range(m)
        ]
    interrupted: list[int] = []

    def forward(signum: int, frame) -> None:
        # What the launcher does for worker processes: each worker's Stopper hears the signal.
        if signum == signal.SIGINT:
            interrupted.append(signum)
        hard = False
        for seed in seeds:
            for stopper in seed.stoppers:
                try:
                    stopper._handler(signum, frame)
                except KeyboardInterrupt:  # a second Ctrl-C, or one without checkpointing
                    hard = True
        if hard:
            raise KeyboardInterrupt

    in_main = threading.current_thread() is threading.main_thread()
    previous = {}
    if in_main and first["checkpoint"]["on_signal"]:
        previous = {sig: signal.signal(sig, forward) for sig in STOP_SIGNALS}
    threads_before = torch.get_num_threads()
    # batched: one thread at a time runs the heavy pass (all m workers'), on every core; rank
    # by rank, the m ranks' passes may run at once, as the threads of a run alone
    share = (os.cpu_count() or 1) // (1 if batched is not None and not ranked else m)
    torch.set_num_threads(first.get("threads_per_worker") or max(1, share))
    try:
        for wave in waves:
            for seed in wave:
                for t in seed.threads:
                    t.start()
            _join(wave)
    except KeyboardInterrupt:
        abort_all("the run was stopped by Ctrl-C", KeyboardInterrupt)
        _join(seeds, grace_s=GRACE_S)
        cancelled = Cancelled("interrupted by Ctrl-C (no checkpoint: checkpoint_every=0)")
        return [cancelled for _ in seeds]
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        torch.set_num_threads(threads_before)
    return [_outcome(seed.failures, bool(interrupted)) for seed in seeds]


def _outcome(failures: list[tuple[int, BaseException, str]], interrupted: bool):
    """What `run` returns (whether a Ctrl-C came) or raises for one run's failures."""
    if not failures:
        return interrupted
    rank, error, trace = _root_cause(failures)
    if isinstance(error, KeyboardInterrupt) and interrupted:
        return Cancelled("interrupted by Ctrl-C (no checkpoint: checkpoint_every=0)")
    if isinstance(error, OneLine):  # its message is all the user needs (a full disk)
        return error
    cause = f"{type(error).__name__}: {error}".splitlines()[0]
    return WorkerFailed(f"worker {rank} (rank {rank}) failed: {cause}", trace.rstrip())


class SharedCalibration:
    """The virtual clock's calibration of seeds in lock-step, measured once: the first run's
    workers measure (experiments/training/calibrate.py, their agreed result), the other runs'
    workers wait for it and take it. Why: each run's calibration steps are unbatched copies of
    its workers' steps, S times the work for a number that measures the same config on the same
    machine (as two runs alone measure it, to the noise). Should the first run fail before it
    has a result, each other run measures its own."""

    def __init__(self) -> None:
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._result: Any = None

    def for_run(self, index: int) -> Callable[[Callable[[], Any]], Any]:
        """What run `index`'s workers call with their own measurement."""

        def calibration(measure: Callable[[], Any]) -> Any:
            if index == 0:
                try:
                    result = measure()
                except BaseException:
                    self._publish(None)
                    raise
                self._publish(result)
                return result
            self._done.wait()
            return self._result if self._result is not None else measure()

        return calibration

    def _publish(self, result: Any) -> None:
        with self._lock:
            if not self._done.is_set():
                self._result = result
                self._done.set()

    def release(self) -> None:
        """The first run's workers have all ended: nobody waits for a result that won't come."""
        self._publish(None)


def _join(runs: list, grace_s: float | None = None) -> None:
    """Wait for every run's threads (`runs`: each with `threads`, `failures` and `give_up()`);
    after a run's first failure, at most GRACE_S more for its threads (`grace_s`: every run's,
    at most that long from now), then `give_up()` on those still alive: a thread stuck outside
    any collective cannot be killed, so the others go on without it."""
    now = time.monotonic()
    deadlines = {id(r): now + grace_s for r in runs} if grace_s is not None else {}
    while True:
        waiting = []
        for r in runs:
            if not any(t.is_alive() for t in r.threads):
                continue
            if r.failures and id(r) not in deadlines:
                deadlines[id(r)] = time.monotonic() + GRACE_S
            if id(r) in deadlines and time.monotonic() > deadlines[id(r)]:
                r.give_up()
                continue
            waiting.append(r)
        if not waiting:
            return
        for r in waiting:
            for t in r.threads:
                t.join(timeout=0.05 / len(waiting))


def _root_cause(failures: list[tuple[int, BaseException, str]]):
    """The failure that ended the run: the first that is not a consequence of another's."""
    for failure in failures:
        if not isinstance(failure[1], PeerFailed):
            return failure
    return failures[0]
