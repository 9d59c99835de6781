"""From a resolved config to a finished run directory.

`run(cfg, run_dir)` is what run.py calls in the Hydra job:
1. check that a launcher (torchrun/srun) started as many workers as the config says;
2. skip the run when its directory holds a finished run of the same identity (its digest,
   experiments/config/identity.py), checked again once the directory is locked, so that two
   identical commands never both train; with `rerun=true`, move that record aside instead
   (records.supersede) and run again;
3. validate every value and the data (one-line `UserError`s, before any worker starts);
4. write the resolved config, Hydra's `.hydra/` files, the identity, the data card and
   `status: running`;
5. start the workers (processes; threads of this process with `cluster.in_process`,
   experiments/workers/sim.py; or become one, under torchrun/srun) and train;
6. rank 0 writes the final summary; a crash leaves `status: failed`, never `completed`.
"""

from __future__ import annotations

import math
import os
import platform
import signal
import sys
import threading
import time
import traceback
import uuid
from contextlib import contextmanager
from dataclasses import asdict
from functools import partial
from pathlib import Path
from signal import SIG_DFL
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

import algorithms
from experiments.checks.machine import check_data, launcher_env
from experiments.config.identity import canonical_json, digest, identity_config, readable_name
from experiments.config.schema import Cifar10, Config, from_record, record, typed
from experiments.errors import (
    EXIT_CANCELLED,
    EXIT_FAILED,
    Cancelled,
    Interrupted,
    OneLine,
    OutputError,
    Stopped,
    UserError,
    WorkerFailed,
)
from experiments.preflight import check_job, describe
from experiments.store import checkpoint as ckpt
from experiments.store.checkpoint import Stopper
from experiments.store.fingerprint import platform_fingerprint
from experiments.store.records import (
    CONFIG,
    DATA_CARD,
    HEARTBEAT,
    IDENTITY,
    METRICS,
    DamagedRecord,
    RunLock,
    finished_status,
    git_sha,
    read_summary,
    read_text,
    release_reserve,
    reserve,
    resumed_segments,
    summary_commit,
    supersede,
    update_summary,
    write_json_atomic,
    write_text_atomic,
)
from experiments.training.clock import make_clock
from experiments.training.schedule import Schedule
from experiments.workers import dist as d
from experiments.workers import startup

DTYPES = {"float32": torch.float32, "float64": torch.float64}


def run(cfg: DictConfig, run_dir: str | Path, hydra_files: dict[str, str] | None = None) -> str:
    """Run one configuration into `run_dir`; return the final status. A run directory with a
    checkpoint and no finished result is resumed (experiments/store/checkpoint.py). `hydra_files`:
    Hydra's record of the job, written to `.hydra/` when the run starts (never over a finished
    record)."""
    run_dir = Path(run_dir)
    job = typed(cfg)
    plain = record(job)  # what the run writes and the pre-flight checks, value by value
    rerun = job.rerun  # a request, not part of the record
    ident = digest(plain)
    # Every value again, and what the launcher (torchrun/srun) decided against the config (a
    # 2-process torchrun of `workers=4` would record 2 workers under the 4-worker run's
    # identity): a job that runs elsewhere (a SLURM array task) was checked on another machine.
    # In the process that ran the pre-flight this costs nothing (the data is cached).
    check_job(plain, launcher_env())
    worker = d.external_worker()
    is_main = worker is None or worker.rank == 0
    status = finished_status(run_dir, ident, rerun)
    if status is not None and not rerun:
        if is_main:
            print(f"skip {run_dir}: already {status}", flush=True)
        return status
    lock = RunLock(run_dir) if is_main else None
    if lock is not None:
        try:
            run_dir.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise OutputError(run_dir, error) from None
        lock.acquire()
    try:
        if is_main:
            # Again under the lock: an identical command may have finished it meanwhile.
            status = finished_status(run_dir, ident, rerun)
            if status is not None and not rerun:
                print(f"skip {run_dir}: already {status}", flush=True)
                return status
            if status is not None:
                moved = supersede(run_dir)
                print(f"rerun {run_dir}: the previous record moved to {moved}", flush=True)
        return _run(job, plain, run_dir, worker, is_main, ident, hydra_files or {})
    finally:
        if lock is not None:
            release_reserve(run_dir)
            lock.release()


def run_lockstep(points: list[tuple[DictConfig, Path, dict[str, str]]]) -> list[dict[str, Any]]:
    """Run S points of a sweep that differ only in their seed together, their workers' passes
    one batched pass (experiments/workers/sim.py, `run_lockstep`), each point's record what it
    would be run alone. `points`: each one's config, run directory and Hydra files. Returns each
    point's outcome as run.py's job returns it: `{"status", "run_dir"}`, with `error` and
    `exit_code` when it failed. A point that is finished is skipped, one that cannot start
    fails alone; a stop on a signal or Ctrl-C ends them all (raised, as `run` raises it)."""
    from experiments.workers import sim

    outcomes: list[dict[str, Any] | None] = [None] * len(points)
    # (index, typed job, its record, dir, data)
    ready: list[tuple[int, Config, dict[str, Any], Path, Any]] = []
    locks: list[tuple[RunLock, Path]] = []

    def failed(i: int, run_dir: Path, error: BaseException) -> None:
        code = error.exit_code if isinstance(error, OneLine | WorkerFailed) else EXIT_FAILED
        message = str(error) if isinstance(error, OneLine | WorkerFailed) else describe(error)
        print(f"{run_dir}: failed: {message}", file=sys.stderr, flush=True)
        outcomes[i] = {"status": "failed", "error": message, "exit_code": code}
        outcomes[i]["run_dir"] = str(run_dir)

    try:
        for i, (cfg, run_dir, files) in enumerate(points):
            run_dir = Path(run_dir)
            outcomes[i] = {"status": "failed", "run_dir": str(run_dir)}
            job = typed(cfg)
            plain = record(job)
            rerun = job.rerun
            ident = digest(plain)
            started = False
            try:
                check_job(plain, launcher_env())
                lock = RunLock(run_dir)
                try:
                    run_dir.mkdir(parents=True, exist_ok=True)
                except OSError as error:
                    raise OutputError(run_dir, error) from None
                lock.acquire()
                locks.append((lock, run_dir))
                status = finished_status(run_dir, ident, rerun)
                if status is not None and not rerun:
                    print(f"skip {run_dir}: already {status}", flush=True)
                    outcomes[i] = {"status": status, "run_dir": str(run_dir)}
                    continue
                if status is not None:
                    print(f"rerun {run_dir}: the previous record moved to {supersede(run_dir)}")
                meta = ckpt.verify(run_dir, plain, ranks=None, load_files=True)
                if meta is not None:
                    check_metrics(run_dir, meta["step"])
                bundle, card = check_data(plain)
                _start_record(job, plain, run_dir, ident, files, meta, card)
                started = True
                ready.append((i, job, plain, run_dir, bundle))
            except Exception as e:
                failed(i, run_dir, _ended(run_dir, e, started))
        stop: BaseException | None = None  # an interruption or Ctrl-C: every run's
        if ready:
            print(f"lockstep: {len(ready)} seeds of one config in one batched pass", flush=True)
            with late_stops_ignored():
                results = sim.run_lockstep([r[2:] for r in ready], train_worker)
            for (i, job, _, run_dir, _), result in zip(ready, results, strict=True):
                try:
                    if isinstance(result, BaseException):
                        raise result
                    status = _spawned_status(run_dir, job, [signal.SIGINT] if result else [])
                except Exception as e:
                    error = _ended(run_dir, e, True)
                    if isinstance(error, Cancelled | Interrupted):
                        stop = stop or error
                    else:
                        failed(i, run_dir, error)
                    continue
                if status == "interrupted":  # rank 0 has said why
                    summary = read_summary(run_dir) or {}  # the record: its keys as written
                    error = summary.get("error", "interrupted")
                    stop = stop or Interrupted(f"{run_dir}: {error}", said=True)
                    continue
                summary = read_summary(run_dir)
                print(outcome_line(run_dir, summary), flush=True)
                outcomes[i] = {"status": summary["status"], "run_dir": str(run_dir)}
        if stop is not None:
            raise stop
    finally:
        for lock, run_dir in locks:
            release_reserve(run_dir)
            lock.release()
    return [o for o in outcomes if o is not None]


def _run(
    job: Config,
    plain: dict[str, Any],
    run_dir: Path,
    worker: d.Worker | None,
    is_main: bool,
    ident: str,
    hydra_files: dict[str, str],
) -> str:
    if worker is None and not job.cluster.in_process:
        startup.warm()  # the worker processes' forkserver imports torch while we go on
    if worker is not None:
        d.check_rendezvous_port(worker)
    # A checkpoint that cannot be used is an error before any worker starts (never a silent
    # restart from scratch, never a traceback inside the workers): its files are loaded once
    # here; launched workers check their own file again.
    ranks = None if worker is None else [worker.rank]
    meta = ckpt.verify(run_dir, plain, ranks=ranks, load_files=True)
    if meta is not None and is_main:
        check_metrics(run_dir, meta["step"])
    bundle, card = check_data(plain)

    started = False  # whether the record says `running`
    try:
        if is_main:
            _start_record(job, plain, run_dir, ident, hydra_files, meta, card)
            started = True
        if worker is None:
            with late_stops_ignored():
                if job.cluster.in_process:
                    from experiments.workers import sim

                    ctrl_c = sim.run(plain, run_dir, bundle, train_worker)
                    stops = [signal.SIGINT] if ctrl_c else []
                else:
                    # In-memory datasets travel to the workers with their arguments: loading
                    # them again in every process (importing scikit-learn) would cost seconds
                    # per run.
                    shared = bundle if job.dataset.name != "cifar10" else None
                    stops = d.spawn(worker_main, job.workers, (plain, str(run_dir), shared))
                status = _spawned_status(run_dir, job, stops)
        else:
            status = worker_main(
                worker.rank, worker.world_size, plain, str(run_dir), bundle, worker
            )
    except BaseException as e:
        raise _ended(run_dir, e, started and is_main) from None
    if status == "interrupted":  # rank 0 has said why (before a requeue could end the job)
        summary = read_summary(run_dir) or {}
        raise Interrupted(f"{run_dir}: {summary.get('error', 'interrupted')}", said=True)
    if not is_main:
        return status
    summary = read_summary(run_dir)
    print(outcome_line(run_dir, summary), flush=True)
    return summary["status"]


def _start_record(
    job: Config,
    plain: dict[str, Any],
    run_dir: Path,
    ident: str,
    hydra_files: dict[str, str],
    meta: dict[str, Any] | None,
    card: dict[str, Any],
) -> None:
    """Rank 0, before any worker starts: the resolved config, Hydra's files, the identity, the
    data card and `status: running` (with the space of the final summary reserved). `plain` is
    `job`'s record (schema.record): what config.yaml and the identity hold."""
    reserve(run_dir)  # the space of the final summary, should the disk fill up
    (run_dir / ".hydra").mkdir(exist_ok=True)
    for name, text in hydra_files.items():
        write_text_atomic(run_dir / ".hydra" / name, text)
    write_text_atomic(run_dir / CONFIG, OmegaConf.to_yaml(OmegaConf.create(plain)))
    write_json_atomic(run_dir / IDENTITY, identity_config(plain))
    write_json_atomic(run_dir / DATA_CARD, card)
    previous = read_summary(run_dir) or {}  # a record (summary.json): its keys as written
    resumed = previous.get("resumed", [])
    if meta is not None:
        resumed = [*resumed, {"from_step": meta["step"], "at": _now(), "host": _host()}]
    # each commit its steps ran on: the checkpoint's segments, then this start's
    commits = resumed_segments(meta, previous, git_sha())
    update_summary(
        run_dir,
        drop=("error", "interrupted", "finished_at"),
        status="running",
        identity=ident,
        world_size=job.workers,
        git_sha=summary_commit(commits),
        git_commits=commits,
        torch_version=torch.__version__,
        host=_host(),
        started_at=previous.get("started_at") if meta is not None else _now(),
        resumed=resumed,
        wandb_id=previous.get("wandb_id") or _wandb_id(),
        data_card=card,
    )
    what = f"resume from step {meta['step']} ({meta['reason']})" if meta else "run"
    print(
        f"{what} {run_dir}: {job.algorithm.name} tau={job.tau} workers={job.workers} "
        f"dataset={job.dataset.name} model={job.model.name} epochs={job.epochs}",
        flush=True,
    )


@contextmanager
def late_stops_ignored():
    """Around the workers' run: a stop signal that comes after they ended, while run.py reads
    their outcome, is too late to stop anything (the run's record and exit code stand; a sweep
    stops at the next Ctrl-C). Outside, run.py's own handlers (run.py, cli) are back."""
    previous = {sig: signal.getsignal(sig) for sig in d.forwarded_signals()}
    for sig in previous:  # spawn() puts its forwarding handlers in place, then these again
        signal.signal(sig, signal.SIG_IGN)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def check_metrics(run_dir: Path, step: int) -> None:
    """A run resumed from a checkpoint keeps its metrics.jsonl rows up to the checkpoint's step
    (experiments/store/log.py): a file that is not text would lose them, so it is an error here."""
    try:
        read_text(run_dir / METRICS)
    except FileNotFoundError:
        pass
    except DamagedRecord as e:
        raise UserError(
            f"{e}: resuming from step {step} would lose its rows; delete {run_dir} to start over"
        ) from None


def _spawned_status(run_dir: Path, job: Config, stops: list[int]) -> str:
    """The status of a run whose spawned workers all exited cleanly, from its record: a stop
    they checkpointed is `interrupted`; without a result, a Ctrl-C cancelled it."""
    try:
        summary = read_summary(run_dir) or {}
    except UserError:
        summary = {}
    if summary.get("interrupted"):
        return "interrupted"
    status = summary.get("status")
    if status in ("completed", "diverged"):
        return status
    if signal.SIGINT in stops:
        raise Cancelled(ctrl_c_message(run_dir, job, stops.count(signal.SIGINT)))
    raise WorkerFailed(f"the workers ended without a result (status {status!r})")


def ctrl_c_message(run_dir: Path, job: Config, presses: int) -> str:
    """What a Ctrl-C that stopped the run at once (checkpointing off, or a second Ctrl-C) left:
    the checkpoint a rerun resumes from, if there is one."""
    try:
        meta = ckpt.read_meta(run_dir)
    except UserError:
        meta = None
    twice = " twice (stopped at once)" if presses > 1 else ""
    if meta is not None:
        return (
            f"interrupted by Ctrl-C{twice}; the checkpoint of step {meta['step']} stays: rerun "
            "to resume from it"
        )
    if job.checkpoint_every == 0 and presses <= 1:
        return "interrupted by Ctrl-C (no checkpoint: checkpoint_every=0)"
    return f"interrupted by Ctrl-C{twice}, before its first checkpoint: a rerun starts over"


def _ended(run_dir: Path, error: BaseException, recorded: bool) -> BaseException:
    """How run.py reports `error`, which ended the run, after its record says so (`recorded`:
    the summary says `running`; a finished summary is never touched): a stop signal before any
    worker trained is an interruption (exit code 3), a Ctrl-C a cancellation (130)."""
    if isinstance(error, Stopped):
        name = signal.Signals(error.signum).name
        said = f"interrupted by {name} before training started; nothing to save: rerun to start it"
        error = Interrupted(f"{run_dir}: {said}")
        fields = {
            "error": said,
            "interrupted": {"signal": name, "step": 0, "at": _now(), "requeue": None},
        }
    elif isinstance(error, Interrupted):  # a stop signal ended workers without a checkpoint
        fields = {"error": str(error)}
        error = Interrupted(f"{run_dir}: {error}")
    elif isinstance(error, KeyboardInterrupt):
        error = Cancelled("interrupted by Ctrl-C before training started")
        fields = {"error": str(error)}
    elif isinstance(error, OneLine | WorkerFailed | Cancelled):
        fields = {"error": str(error)[:2000]}
    else:
        fields = {"error": f"{type(error).__name__}: {error}"[:2000]}
    if recorded:
        record_failure(run_dir, fields)
    return error


def record_failure(run_dir: Path, fields: dict[str, Any]) -> None:
    """Write `status: failed` and why (the run's final record: the reserved space is released
    for it on a full disk), unless the summary already holds a finished result. A summary that
    cannot be written even then stays `running`; `analysis.status` reports it failed once its
    heartbeat is stale."""
    try:
        if (read_summary(run_dir) or {}).get("status") in ("completed", "diverged"):
            return
    except UserError:
        pass
    try:
        update_summary(run_dir, final=True, status="failed", **fields)
    except OutputError:
        pass


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def _device_label(device: Any) -> str:
    """ "cpu", or "cuda (NVIDIA H200)": what a run computed on, in its summary."""
    import torch

    if device.type == "cuda":
        return f"cuda ({torch.cuda.get_device_name(device)})"
    return device.type


def _host() -> str:
    return platform.node()


def _wandb_id() -> str:
    """The run's W&B id, fixed at its first start so that a resumed run continues the same W&B
    run (`resume="allow"`) instead of starting a new one."""
    return uuid.uuid4().hex[:12]


def outcome_line(run_dir: Path, s: dict) -> str:
    """One line saying how the run ended, for the console."""
    if s["status"] == "diverged":
        return f"{run_dir}: diverged at step {s.get('diverged_at_step')} (non-finite loss)"
    return (
        f"{run_dir}: {s['status']}  final/test_acc {s['final/test_acc']:.4f}  "
        f"time/train_s {s['time/train_s']:.1f}  comm/bytes {s['comm/bytes']}"
    )


def worker_main(
    rank: int,
    world_size: int,
    cfg: dict,
    run_dir: str,
    bundle=None,
    worker: d.Worker | None = None,
) -> str:
    """Entry point of one worker process; returns the run's status as this worker saw it.
    `cfg`: the run's record (schema.record), read through its typed job."""
    if worker is None:  # spawned by run.py on this machine
        d.become_spawned_worker()
        startup.defer_dynamo()
        worker = d.Worker(rank, world_size, rank, world_size, external=False)
        os.environ["RANK"], os.environ["WORLD_SIZE"] = str(rank), str(world_size)
    job = job_of(cfg)
    # Stop requests are caught from the start; the workers agree on them in the loop.
    stopper = Stopper(
        rank=worker.rank,
        world_size=worker.world_size,
        group=None,
        poll_steps=job.checkpoint.poll_steps,
        anywhere=True,
        simulate_at_step=job.checkpoint.simulate_signal_at_step,
        checkpoint_on_interrupt=job.checkpoint_every > 0,
        timeout_s=job.dist_timeout_s,
    )
    if job.checkpoint.on_signal:
        stopper.install()
    else:  # the default of each: a stop signal ends the worker at once
        for sig in d.forwarded_signals():
            signal.signal(sig, signal.default_int_handler if sig == signal.SIGINT else SIG_DFL)
    d.unblock_stop_signals()  # a stop that came while this worker started up: now
    backend = d.choose_backend(
        job.cluster.backend, worker.local_rank, worker.local_world_size, cfg["cluster"]
    )
    threads = job.threads_per_worker or max(1, (os.cpu_count() or 1) // worker.local_world_size)
    torch.set_num_threads(threads)
    clean = False
    try:
        stopper.group = d.init(worker, backend, job.dist_timeout_s)
        status = train_worker(cfg, Path(run_dir), worker, backend, bundle, stopper)
        clean = True
    except Exception as e:
        # A spawned worker's traceback goes to run.py, which reports the worker that failed
        # first (the others then fail for want of it); under torchrun/srun each one says: one
        # line for an error that says it all (a UserError, a full disk), else its traceback.
        d.note_failure(worker.rank)
        if worker.external:
            said = str(e) if isinstance(e, OneLine) else traceback.format_exc()
            print(f"rank {worker.rank}: {said}", file=sys.stderr, flush=True)
        raise
    finally:
        stopper.close(clean)
        d.teardown(clean)
    if not worker.external:  # spawned by run.py: nothing may run after the teardown
        d.exit_spawned_worker()
    return status


# Model initialisation draws from torch's global generator, which the worker threads of
# `cluster=sim` share: one worker at a time (initial_model).
_INIT_LOCK = threading.Lock()


def job_of(cfg: dict[str, Any]) -> Config:
    """The typed job of the run record `cfg` (schema.from_record), typed once per process and
    record: the worker threads of one run (cluster=sim) share it, and nothing changes it."""
    key = canonical_json(cfg)
    with _JOBS_LOCK:
        if key not in _JOBS:
            if len(_JOBS) >= 64:  # a sweep's process: the runs before are done
                _JOBS.clear()
            _JOBS[key] = from_record(cfg)
        return _JOBS[key]


_JOBS: dict[str, Config] = {}
_JOBS_LOCK = threading.Lock()


def initial_model(job: Config, bundle) -> torch.nn.Module:
    """The initial model, the same on every worker: built from torch's global generator seeded
    `seed`, under a lock and with the generator's state saved and restored (`fork_rng`), so
    that a worker thread draws the numbers a worker process draws and nothing else sees them."""
    from experiments.training.models import build_model

    with _INIT_LOCK, torch.random.fork_rng(devices=[]):
        torch.manual_seed(job.seed)
        return build_model(asdict(job.model), bundle.in_channels, bundle.num_classes)


def worker_loader(job: Config, bundle, shards, rank: int, in_threads: bool, device: torch.device):
    """Worker `rank`'s training data: its shard of `shards` (the partition, from
    `partition.seed`), in the order and with the augmentation drawn from `seed` and the rank
    only. Nothing here depends on the algorithm: the same seed gives every method the same
    data, as it gives them the same initial model (`initial_model`), so the claims compare
    methods paired by seed (analysis/stats.py; tests/test_pairing.py)."""
    from torch.utils.data import DataLoader, Subset

    from experiments.data.datasets import Augmented, ResumableRandomSampler

    # One generator, the sampler's (experiments/data/datasets.py). The loader's own generator
    # only seeds its worker processes, which draw nothing.
    order_seed = job.seed * 1_000_003 + rank
    shard = Subset(bundle.train, shards[rank].tolist())
    if bundle.augment is not None:
        shard = Augmented(shard, bundle.augment)
    # Loader processes forked from a process with running threads may deadlock (a lock held by
    # another thread at the fork): worker threads load in their own thread. The data are the
    # same (the sampler's keys carry the random numbers). The in-memory datasets have no loader
    # processes.
    loads = isinstance(job.dataset, Cifar10) and not in_threads
    num_loader_workers = job.dataset.num_workers if loads else 0
    return DataLoader(
        shard,
        batch_size=job.batch_size,
        # = shuffle=True (same order), plus a position for runs resumed mid-epoch
        sampler=ResumableRandomSampler(shard, generator=torch.Generator().manual_seed(order_seed)),
        generator=torch.Generator().manual_seed(order_seed),
        drop_last=False,  # the reference keeps the last partial batch
        num_workers=num_loader_workers,
        persistent_workers=num_loader_workers > 0,
        pin_memory=device.type == "cuda",
    )


def train_worker(
    cfg: dict,
    run_dir: Path,
    worker: d.Worker,
    backend: str,
    bundle=None,
    stopper: Stopper | None = None,
    group=None,
    device: torch.device | None = None,
    batched=None,
    batched_rank: int | None = None,
    shared_calibration=None,
    progress: bool | None = None,
) -> str:
    """Build this worker's data, model, optimizer and algorithm, resume from the run's
    checkpoint if there is one, train, and (rank 0) write the summary. Returns the status.

    `cfg`: the run's record (schema.record), what the data loaders, the checkpoints and the
    sinks take; everything else reads its typed job (`job_of`).

    `group`: where the collectives go (algorithms/group.py; None: torch.distributed's default
    group); `device`: this worker's device (None: from the backend and the local rank);
    `batched`: the in-process workers' batched passes (experiments/workers/batched.py), or
    None; `batched_rank`: this worker's replica there (its rank, unless seeds train in
    lock-step: experiments/workers/sim.py); `shared_calibration`: the seeds' one calibration
    there (sim.SharedCalibration); `progress`: whether rank 0 prints its progress line (None:
    `cfg.progress`; seeds in lock-step: the first seed's only)."""

    from algorithms.comm import Comm
    from algorithms.group import ThreadGroup
    from experiments.data.datasets import load_dataset, worker_eval_sets
    from experiments.data.partition import make_partition
    from experiments.store.log import make_sinks
    from experiments.training.loop import Checkpointing, LoopSettings, train
    from experiments.workers.batched import layout

    job = job_of(cfg)
    rank, m = worker.rank, worker.world_size
    if device is None:
        device = d.device_for(backend, worker.local_rank, worker.local_world_size, cfg["cluster"])
    dtype = DTYPES[job.dtype]
    compression = str(job.comm.compression)  # issue 17
    comm = Comm(group=group, clock=make_clock(job, rank, m), compression=compression)

    if bundle is None:
        bundle = load_dataset(cfg["dataset"])
    shards = make_partition(cfg["partition"], bundle.train_labels, m)  # partition.seed

    model = initial_model(job, bundle).to(device, dtype)  # identical on every worker ...
    comm.broadcast_(list(model.parameters()) + list(model.buffers()), src=0)  # ... guaranteed
    replica = rank if batched_rank is None else batched_rank
    if batched is not None:  # before the optimizer and the algorithm take its parameters
        batched.adopt(replica, model)

    in_threads = isinstance(comm.group, ThreadGroup)
    train_loader = worker_loader(job, bundle, shards, rank, in_threads, device)
    time_budget = job.budget if job.budget.name == "time" else None
    test_full, test_shard, subset_shard = worker_eval_sets(
        bundle.test, rank, m, job.eval_batch_size, device, dtype, time_budget
    )

    # beyond the dtype's largest number the LR is inf, a diverged run (schedule.py)
    schedule = Schedule.of(job, workers=m, limit=torch.finfo(dtype).max)
    name = job.algorithm.name
    algo_cfg = algorithms.make_config(
        name, {k: v for k, v in cfg["algorithm"].items() if k != "name"}
    )
    optimizer = algorithms.REGISTRY[name].local_optimizer(
        algo_cfg,
        model,
        lr=job.lr,
        momentum=job.momentum,
        nesterov=job.nesterov,
        # a float the dtype cannot hold is its infinity, as for the LR (schedule.py)
        weight_decay=_in_range(job.weight_decay, dtype),
    )
    algo = algorithms.REGISTRY[name](model, optimizer, comm, algo_cfg, tau=job.tau)

    # Resume: every rank loads its own file of the latest checkpoint (verified again here:
    # under srun each worker reads it from the shared file system).
    meta = ckpt.verify(run_dir, cfg, ranks=[rank])
    resume = ckpt.load(run_dir, meta, rank) if meta is not None else None
    checkpointing = None
    if stopper is not None and (job.checkpoint_every > 0 or job.checkpoint.on_signal):
        stopper.anywhere = algo.checkpoint_anywhere
        if meta is not None:
            stopper.forget_simulation_before(meta["step"])

        # the commits of the steps the checkpoint holds (rank 0 writes latest.json)
        commits = (read_summary(run_dir) or {}).get("git_commits") if rank == 0 else None

        def save(state: dict, step: int, epoch: int, reason: str) -> None:
            where = dict(rank=rank, world_size=m, step=step, epoch=epoch, reason=reason)
            ckpt.save(run_dir, state, **where, cfg=cfg, group=stopper.group, commits=commits)

        checkpointing = Checkpointing(
            save=save, stopper=stopper, every=job.checkpoint_every, resume=resume
        )
    elif resume is not None:
        raise UserError(
            f"{ckpt.latest_path(run_dir)} exists but checkpointing is off "
            "(checkpoint_every=0, checkpoint.on_signal=false): turn it on to resume"
        )

    sink = None
    if rank == 0:
        summary = read_summary(run_dir) or {}
        sink = make_sinks(
            run_dir,
            cfg,
            readable_name(cfg),
            wandb_id=summary.get("wandb_id"),
            keep_until_step=meta["step"] if meta is not None else None,
        )
    if stopper is not None and stopper.group is not None:
        # Set-up takes unequal times (rank 0 starts W&B, which may take long online): the
        # workers meet here, on the control group's long timeout, so that the training's
        # collectives and their short `dist_timeout_s` start together.
        stopper.group.barrier()
    settings = LoopSettings(
        epochs=job.epochs,
        eval_every=job.eval_every,
        schedule=schedule,
        dtype=dtype,
        progress=job.progress if progress is None else progress,
        heartbeat=run_dir / HEARTBEAT if rank == 0 else None,
        forward_backward=None if batched is None else partial(batched.forward_backward, replica),
        optimizer_step=None if batched is None else partial(batched.optimizer_step, replica),
        shared_calibration=shared_calibration,
        loss_and_correct=None if batched is None else partial(batched.loss_and_correct, replica),
        budget=time_budget,
        test_subset_shard=subset_shard,
    )
    try:
        result = train(
            algo,
            comm,
            train_loader,
            test_full,
            test_shard,
            device,
            settings,
            sink,
            checkpointing,
        )
    except BaseException as e:
        if sink is not None:  # the W&B run ends failed, with the program's exit code
            sink.close(
                exit_code=EXIT_CANCELLED if isinstance(e, KeyboardInterrupt) else EXIT_FAILED
            )
        raise
    if sink is not None:
        sink.close(outcome=result)
    if rank == 0:
        if result["status"] == "interrupted":
            write_interruption(run_dir, result["steps"], stopper)
        else:
            result["finished_at"] = _now()
            result["device"] = _device_label(device)  # provenance.txt names it per report
            # What decides the run's digits (CPU, kernels' ISA, libraries, threads): a reader
            # with other digits tells a platform difference from a defect (fingerprint.py).
            result["platform"] = platform_fingerprint(device, layout=layout(batched, dtype, device))
            update_summary(run_dir, final=True, **result)  # completed/diverged: written last
            ckpt.remove(run_dir)
    return result["status"]


def _in_range(value: float, dtype: torch.dtype) -> float:
    """`value`, or the infinity of its sign when the dtype cannot hold it."""
    return value if abs(value) <= torch.finfo(dtype).max else math.copysign(math.inf, value)


def write_interruption(run_dir: Path, step: int, stopper: Stopper) -> None:
    """Rank 0, after the stop checkpoint: the summary says `failed` (the run did not finish)
    and why, and, when the signal announced a time limit or preemption under SLURM, the job
    is requeued; its next start resumes from the checkpoint."""
    what = stopper.signal_name or "a stop request on another worker"
    error = f"interrupted by {what} at step {step}; checkpoint saved: rerun to resume"
    job = ckpt.slurm_job() if stopper.requeue else None
    requeue = f"job {job} requeued" if job else None
    interrupted = {"signal": what, "step": step, "at": _now(), "requeue": requeue}
    said = error + (f" ({requeue})" if requeue else "")
    # Records and message first: the requeue ends this job at once.
    update_summary(run_dir, final=True, status="failed", error=said, interrupted=interrupted)
    say(f"{run_dir}: {said}")
    failure = ckpt.requeue_slurm_job(job) if job else None
    if failure:
        update_summary(
            run_dir, error=f"{error} ({failure})", interrupted={**interrupted, "requeue": failure}
        )
        say(f"{run_dir}: {failure}")


def say(line: str) -> None:
    """One line on stderr; none when there is no console to say it on (a closed terminal, a
    closed pipe): the record says it too."""
    try:
        print(line, file=sys.stderr, flush=True)
    except OSError:
        pass
