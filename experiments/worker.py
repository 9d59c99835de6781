"""One worker of a run, from its start to its status: its set-up (the model, the data, the
optimizer, the communicator and the algorithm) and then the one training loop,
experiments/training/loop.py's `train`.

`worker_main` is the entry point of a worker process (spawned by the runner on this machine, or
the process torchrun/srun started: experiments/workers/dist.py): stop signals, backend, threads,
process groups, then `train_worker`. `train_worker` is what every worker runs, a worker process or
a worker thread of `cluster=sim` (experiments/workers/sim.py, which the runner hands it to): the
run's typed job (`job_of`), the initial model (`initial_model`, the same on every worker), its
shard of the data (`worker_loader`), the optimizer and the algorithm, the resume from the run's
checkpoint, the metrics sinks; after the loop, rank 0 writes the final summary (or, after a stop
checkpoint, `write_interruption`). The run around it, from the config to the finished record, is
experiments/runner.py's.
"""

from __future__ import annotations

import math
import os
import signal
import sys
import threading
import traceback
from dataclasses import asdict
from functools import partial
from pathlib import Path
from signal import SIG_DFL
from typing import Any

import torch

import algorithms
from experiments.config.identity import canonical_json, readable_name
from experiments.config.schema import Cifar10, Config, from_record
from experiments.errors import EXIT_CANCELLED, EXIT_FAILED, OneLine, UserError
from experiments.store import checkpoint as ckpt
from experiments.store.checkpoint import Stopper
from experiments.store.fingerprint import platform_fingerprint
from experiments.store.records import HEARTBEAT, now, read_summary, update_summary
from experiments.training.clock import make_clock
from experiments.training.schedule import Schedule
from experiments.workers import dist as d
from experiments.workers import startup

DTYPES = {"float32": torch.float32, "float64": torch.float64}


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
    methods paired by seed (analysis/stats/; tests/test_pairing.py)."""
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
            ckpt.save(
                run_dir,
                state,
                rank=rank,
                world_size=m,
                step=step,
                epoch=epoch,
                reason=reason,
                cfg=cfg,
                group=stopper.group,
                commits=commits,
            )

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
            result["finished_at"] = now()
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


def _device_label(device: Any) -> str:
    """ "cpu", or "cuda (NVIDIA H200)": what a run computed on, in its summary."""
    import torch

    if device.type == "cuda":
        return f"cuda ({torch.cuda.get_device_name(device)})"
    return device.type


def write_interruption(run_dir: Path, step: int, stopper: Stopper) -> None:
    """Rank 0, after the stop checkpoint: the summary says `failed` (the run did not finish)
    and why, and, when the signal announced a time limit or preemption under SLURM, the job
    is requeued; its next start resumes from the checkpoint."""
    what = stopper.signal_name or "a stop request on another worker"
    error = f"interrupted by {what} at step {step}; checkpoint saved: rerun to resume"
    job = ckpt.slurm_job() if stopper.requeue else None
    requeue = f"job {job} requeued" if job else None
    interrupted = {"signal": what, "step": step, "at": now(), "requeue": requeue}
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
