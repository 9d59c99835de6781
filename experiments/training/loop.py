"""The only training loop. It knows no algorithm: it calls the four hooks of algorithms/base.py.

    (timing=virtual with a `measured` compute time: experiments/training/calibrate.py, once)
    for each local step t (one counter across epochs):
        x, y = next batch of this worker's shard            (time/data_s)
        lr   = schedule(t)
        zero_grad -> forward -> backward                     (time/compute_s ...)
        clock.local_step(t)        (virtual: adds the modeled step; real: emulated sleep)
        clock.algo_step(t)         (virtual: adds the modeled algorithm work)
        algo.before_step(t) -> optimizer.step() -> algo.after_step(t)
                                   (... minus time/comm_exposed_s and, real clock: minus
                                    time/algo_s = the hooks' time outside Comm's calls)
        (between steps: the stop poll, see below)
    every `eval_every` epochs and after the last: algo.drain() (the last time: the local models
    are evaluated, then algo.finish()), then evaluate (time/eval_s, not training time); then,
    every `checkpoint_every` epochs or when the workers agree to stop, a checkpoint

Time is kept on the run's clock (experiments/training/clock.py): wall-clock, or a deterministic
virtual clock on which collectives complete at their modeled times. Training time excludes
evaluation (AlgoPerf's rule). The ledger (`time_ledger`): compute + algorithm work + exposed
communication = training time, exactly on the virtual clock; on the real clock data loading and the
rest (Python between the timers, the communication layer's own copies) complete it. A non-finite
training loss stops the run with status `diverged` on every worker at the next evaluation
point, and the summary names the first step at which any worker saw it.

Checkpoints (experiments/store/checkpoint.py): `capture()` takes this worker's whole state at a step
boundary and `restore()` puts it back, so that a resumed run continues on the same trajectory.
A stop request (a signal) is acted on at the next step boundary the workers agree on (every
`checkpoint.poll_steps` steps, for algorithms that allow it) or at the next evaluation point;
the loop then saves a checkpoint and returns status `interrupted`.
"""

from __future__ import annotations

import itertools
import math
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from algorithms.base import Algorithm
from algorithms.comm import Comm
from experiments.store.checkpoint import Stopper
from experiments.store.records import write_json_atomic
from experiments.training.budget import Scorer, TimeBudget, Timeline
from experiments.training.evaluate import evaluate, fixed_batches, loss_and_correct
from experiments.training.faults import Fault
from experiments.training.schedule import Schedule


@dataclass
class LoopSettings:
    epochs: int
    eval_every: int
    schedule: Schedule  # the LR of each step
    dtype: torch.dtype = torch.float32
    progress: bool = True
    heartbeat: Path | None = None  # rank 0: a file rewritten every HEARTBEAT_S while training
    # zero_grad -> forward -> backward of one step, returning the loss: `forward_backward`
    # below, or the in-process workers' batched pass (experiments/workers/batched.py)
    forward_backward: Callable[..., torch.Tensor] | None = None
    # the step of the local optimizer: `optimizer.step()`, or the in-process workers' batched
    # update (experiments/workers/batched.py)
    optimizer_step: Callable[[torch.optim.Optimizer], None] | None = None
    # Seeds in lock-step (experiments/workers/sim.py): the virtual clock's calibration measured
    # once for all of them, `shared_calibration(measure)` returning the one result
    shared_calibration: Callable[[Callable[[], Any]], Any] | None = None
    # `loss_and_correct(model, loader, device, dtype)` of an evaluation: evaluate.py's, or the
    # in-process workers' batched evaluation (experiments/workers/batched.py)
    loss_and_correct: Callable[..., tuple[float, int, int]] | None = None
    # budget=time (experiments/training/budget.py): the config's `budget` node, and the loader
    # of this worker's shard of the stratified test subset its points before T are scored on.
    # None: the steps budget.
    budget: Any = None
    test_subset_shard: Any = None


@dataclass
class Times:
    """Training-time accounts of this worker, in seconds (timing.md, "The ledger").

    Real clock: measured; `algo_s` is the time in the algorithm's hooks (and its drain/finish)
    outside the communication layer's calls, `compute_s` the rest of the step after the exposed
    communication and `algo_s`; `train_s` = data + compute + algorithm + exposed communication
    + other (Python overhead between the timers), within a few percent. Virtual clock: modeled;
    data loading is not modeled and `train_s` = compute + algorithm + exposed communication
    exactly.
    """

    train_s: float = 0.0
    compute_s: float = 0.0
    data_s: float = 0.0
    eval_s: float = 0.0
    algo_s: float = 0.0


@dataclass
class Position:
    """Where the loop stands: everything a checkpoint needs besides the model, the optimizer,
    the algorithm, the clock and the ledger."""

    step: int = 0  # local steps done (one counter across epochs)
    epoch: int = 0  # the epoch in progress (0-based)
    batch_in_epoch: int = 0  # batches of `epoch` already taken
    loss_sum: float = 0.0  # training loss since the last evaluation
    loss_steps: int = 0
    first_bad_step: float = math.inf  # first step whose local loss was not finite
    best_acc: float = -1.0
    lr: float = 0.0
    row: dict = field(default_factory=dict)  # the last evaluation's metrics
    epoch_rng: torch.Tensor | None = None  # the data loader's generator at the start of `epoch`
    calibration: dict | None = None  # the virtual clock's (experiments/training/calibrate.py), once


@dataclass
class Checkpointing:
    """What the worker's set-up (experiments/worker.py) hands the loop for checkpoints
    (experiments/store/checkpoint.py): `save(state, step, epoch, reason)` writes one consistently
    on every worker; `stopper` carries the stop requests; `every` is in epochs (0: on stop
    requests only); `resume` is a saved state."""

    save: Callable[[dict, int, int, str], object]
    stopper: Stopper
    every: int = 0
    resume: dict | None = None


def train(
    algo: Algorithm,
    comm: Comm,
    train_loader,
    test_full,
    test_shard,
    device: torch.device,
    settings: LoopSettings,
    sink=None,
    checkpointing: Checkpointing | None = None,
) -> dict:
    """Run the whole training (or the rest of it, from `checkpointing.resume`); return the
    numbers for summary.json (same on every rank). Status `interrupted` when the workers
    stopped on a request, after a checkpoint."""
    started = time.perf_counter()
    model, optimizer, ledger = algo.model, algo.optimizer, comm.ledger
    step_pass = settings.forward_backward or forward_backward
    update = settings.optimizer_step or optimizer_step
    steps_per_epoch = len(train_loader)
    total_steps = settings.epochs * steps_per_epoch
    clock, times, pos = comm.clock, Times(), Position()
    ckpt = checkpointing
    if ckpt is not None and ckpt.resume is not None:
        restore(ckpt.resume, algo, comm, times, pos, train_loader)
    calibration = _calibration(algo, comm, train_loader, device, settings, pos.calibration)
    pos.calibration = calibration.state() if calibration is not None else None
    calibrated = calibration.record() if calibration is not None else {}
    progress = Progress(total_steps, enabled=settings.progress and comm.rank == 0, done=pos.step)
    heartbeat = Heartbeat(settings.heartbeat, total_steps)
    fault = Fault(comm.rank)  # COMMSGD_INJECT_FAULT: failure handling on purpose
    heartbeat.beat(pos.step)
    status, diverged, diverged_at = "completed", False, math.inf
    losses = LossMeter(device, pos.loss_sum, pos.first_bad_step)
    bn_batches = None  # evaluate.fixed_batches of this worker's shard, drawn when first needed
    timeline = None  # budget=time: the model at the evaluation points (budget.py)
    if settings.budget is not None:
        budget = TimeBudget.of(settings.budget, settings.epochs, steps_per_epoch, clock.compute)

        def lr_by_time(t: float) -> float:  # the same LR for every worker at the same time
            return settings.schedule.lr_at(budget.schedule_step(t), steps_per_epoch)

        timeline = Timeline(budget, algo, comm, loss_sum=lambda: losses.read()[0], lr_at=lr_by_time)
        if ckpt is not None and ckpt.resume is not None and "timeline" in ckpt.resume:
            timeline.load_state_dict(ckpt.resume["timeline"])
        if algo.eval_needs_fresh_bn():
            bn_batches = fixed_batches(train_loader.dataset, train_loader.batch_size)
        scorer = Scorer(
            algo,
            comm,
            device,
            settings.dtype,
            settings.test_subset_shard or test_shard,
            test_full,
            test_shard,
            counts=settings.loss_and_correct,
            bn_batches=bn_batches,
            steps_per_epoch=steps_per_epoch,
        )
        # where the workers make the same steps, they stop together (budget.py)
        together = algo.checkpoint_anywhere and comm.world_size > 1
        timeline.install()
    spent = False  # budget=time: the budget has ended

    def checkpoint(reason: str) -> None:
        # device-timed waits not read yet (algorithms/comm.py) go into the saved ledger
        _synchronize(device)
        times.compute_s -= comm.settle()
        pos.loss_sum, pos.first_bad_step = losses.read()
        state = capture(algo, comm, times, pos, train_loader)
        if timeline is not None:
            state["timeline"] = timeline.state_dict()
        ckpt.save(state, pos.step, pos.epoch, reason)

    def at_rest(epoch: int) -> bool:
        """Every worker at rest after `epoch` (no collective in flight that a checkpoint
        cannot hold): a periodic checkpoint when due, and the workers' agreement on a stop
        request, answered with a checkpoint. Returns whether they stop."""
        stop = ckpt.stopper.agree(pos.step)
        periodic = ckpt.every > 0 and (epoch + 1) % ckpt.every == 0
        if stop or periodic:
            pos.epoch, pos.batch_in_epoch = epoch + 1, 0
            pos.epoch_rng = _generator_state(train_loader)
            checkpoint("stop request" if stop else "periodic")
        return stop

    def log(row: dict) -> None:
        pos.row = row
        pos.best_acc = max(pos.best_acc, row["test/acc"])
        if sink is not None:
            sink.log(row, row["step"] if timeline is not None else pos.step)

    def score(count: int) -> tuple[list[dict], float]:
        """Collective (budget=time): score and log the first `count` copied points; their
        rows, and the first step at which any worker's loss was not finite (inf: none)."""
        t0 = time.perf_counter()
        rows = timeline.score(count, scorer)
        (first_bad,) = comm.sum_scalars([losses.read()[1]], op="min")
        times.eval_s += time.perf_counter() - t0
        for row in rows:
            log(row)
        return rows, first_bad

    model.train()
    epochs = range(pos.epoch, settings.epochs) if timeline is None else itertools.count(pos.epoch)
    for epoch in epochs:
        if epoch != pos.epoch:
            pos.epoch, pos.batch_in_epoch = epoch, 0
        # The epoch's data order comes from the loader's generator as it is now; a run resumed
        # mid-epoch restored it to the epoch's start (restore()) and skips the batches taken.
        pos.epoch_rng = _generator_state(train_loader)
        if pos.batch_in_epoch:
            train_loader.sampler.skip = pos.batch_in_epoch * train_loader.batch_size
        batches = iter(train_loader)
        while True:
            if timeline is not None:
                done = comm.ledger.completed_s if together else clock.now()
                if done >= budget.time_s:
                    spent = True
                    break
            if (
                ckpt is not None
                and pos.batch_in_epoch < steps_per_epoch
                and ckpt.stopper.poll(pos.step)
            ):
                checkpoint("stop request")
                status = "interrupted"
                break
            t0 = time.perf_counter()
            batch = next(batches, None)
            if batch is None:
                break
            x = batch[0].to(device, dtype=settings.dtype, non_blocking=True)
            y = batch[1].to(device, non_blocking=True)
            t1 = time.perf_counter()
            step = pos.step
            fault.check(step)
            if timeline is None:
                lr = settings.schedule.lr_at(step, steps_per_epoch)
            else:  # by time (budget.py)
                lr = lr_by_time(clock.now())
            for group in optimizer.param_groups:
                group["lr"] = lr
            exposed_before = ledger.exposed_s
            if timeline is not None:
                # the points inside this step's work see the model before its forward pass
                # (which moves the BatchNorm statistics before the clock moves)
                timeline.before_work(clock.work_ends(step))

            loss = step_pass(model, optimizer, x, y)
            if clock.emulate_compute:
                _synchronize(device)  # sleeps to the modeled step: the step's device time
            # The clock takes the step's compute here, before any collective of the hooks:
            # virtual: adds the modeled step time and algorithm work; real: sleeps to the
            # modeled step with emulate_compute (the algorithm's work is measured below).
            step_compute = clock.local_step(step, time.perf_counter() - t1)
            if clock.virtual:
                clock.samples += y.shape[0]
            step_algo = clock.algo_step(step)
            calls_before, h0 = ledger.call_s, time.perf_counter()
            algo.before_step(step)
            h1 = time.perf_counter()
            update(optimizer)
            h2 = time.perf_counter()
            algo.after_step(step)
            h3 = time.perf_counter()
            losses.add(loss, step)  # on the device: no per-step wait for an accelerator

            t2 = time.perf_counter()
            if clock.virtual:
                times.compute_s += step_compute
                times.algo_s += step_algo
                times.train_s = clock.now()
            else:
                # the hooks' own work: their time outside the communication layer's calls
                step_algo = (h1 - h0) + (h3 - h2) - (ledger.call_s - calls_before)
                times.data_s += t1 - t0
                times.algo_s += step_algo
                times.compute_s += (t2 - t1) - (ledger.exposed_s - exposed_before) - step_algo
                times.train_s += t2 - t0
            pos.loss_steps += 1
            pos.lr = lr
            pos.step += 1
            pos.batch_in_epoch += 1
            progress.update(pos.step, loss)
            heartbeat.beat(pos.step)
        if status == "interrupted":
            break
        if timeline is not None:
            if spent:
                break
            if not together:  # OSP/LOSP: no step at which every worker is at rest
                continue
            # Every worker is at the same step: score the points all have copied, no drain.
            rows, diverged_at = score(timeline.common())
            if rows:
                progress.report(pos.step, epoch + 1, settings.epochs, rows[-1])
            if math.isfinite(diverged_at):
                status = "diverged"
                break
            if ckpt is not None and at_rest(epoch):
                status = "interrupted"
                break
            continue

        last = epoch == settings.epochs - 1
        if not last and (epoch + 1) % settings.eval_every != 0:
            continue

        # Bring every worker to rest before any bookkeeping collective: with collectives in
        # flight (OSP/LOSP push at rank-dependent steps) an evaluation all-reduce would be
        # matched against another worker's push. The last evaluation sees the consensus.
        t0 = time.perf_counter()
        exposed_before, calls_before = ledger.exposed_s, ledger.call_s
        local_counts, local_s = None, 0.0
        if last:
            # The reference's number, each worker's own model, before finish() replaces the
            # local models by the consensus (evaluation time, not training time). Local: no
            # collective, so nothing needs draining first; on the real clock a collective still
            # in flight may complete meanwhile (its wait in finish() then exposes less).
            _synchronize(device)
            t_local = time.perf_counter()
            counts = settings.loss_and_correct or loss_and_correct
            local_counts = counts(model, test_full, device, settings.dtype)
            local_s = time.perf_counter() - t_local
            algo.finish()
        else:
            algo.drain()
        _synchronize(device)  # an accelerator's queued steps belong to this epoch's time
        # the device-timed waits of the epoch (algorithms/comm.py): read now, after the sync;
        # the exposed time they add comes off compute below, as a host-timed wait's does
        comm.settle()
        t1 = time.perf_counter()
        times.eval_s += local_s
        if (
            clock.virtual
        ):  # drain/finish's own work is not modeled (experiments/training/calibrate.py)
            times.train_s = clock.now()
        else:
            spent = t1 - t0 - local_s
            work = spent - (ledger.call_s - calls_before)  # drain/finish outside Comm's calls
            times.algo_s += work
            times.compute_s += spent - (ledger.exposed_s - exposed_before) - work
            times.train_s += spent

        # Divergence is a result: the workers agree on the first step at which any of them saw
        # a non-finite loss, and stop together.
        loss_sum, pos.first_bad_step = losses.read()
        (diverged_at,) = comm.sum_scalars([pos.first_bad_step], op="min")
        diverged = math.isfinite(diverged_at)
        (train_loss_sum, train_steps) = comm.sum_scalars([loss_sum, pos.loss_steps])
        train_loss = train_loss_sum / max(train_steps, 1)
        losses.reset_sum()
        pos.loss_sum, pos.loss_steps = 0.0, 0
        if algo.eval_needs_fresh_bn() and bn_batches is None:
            bn_batches = fixed_batches(train_loader.dataset, train_loader.batch_size)
        row = {
            "epoch": epoch + 1,
            "train/loss": train_loss,
            "lr": pos.lr,
            **evaluate(
                model,
                algo.eval_model(),
                comm,
                test_shard,
                device,
                settings.dtype,
                bn_batches=bn_batches if algo.eval_needs_fresh_bn() else None,
                local_counts=local_counts,
                counts=settings.loss_and_correct,
            ),
        }
        times.eval_s += time.perf_counter() - t1
        row.update(
            {
                **time_ledger(times, ledger),
                **calibrated,
                **{f"algo/{k}": v for k, v in algo.metrics().items()},
            }
        )
        log(row)
        progress.report(pos.step, epoch + 1, settings.epochs, row)
        if diverged or not (math.isfinite(train_loss) and math.isfinite(row["test/loss"])):
            status = "diverged"  # every rank saw the same all-reduced numbers
            break
        if ckpt is None or last:
            continue
        # Every worker is at rest here: the place for periodic checkpoints, and where OSP/LOSP
        # (no safe step between two drains) answer a stop request.
        if at_rest(epoch):
            status = "interrupted"
            break

    if timeline is not None and status != "interrupted":
        # The end (every worker's clock at or past T): the points at T copied, the algorithm
        # finished (no collective left in flight: OSP/LOSP answer the pushes of a worker still
        # training), then every point not scored yet scored and logged.
        timeline.close()
        algo.finish()
        rows, diverged_at = score(len(timeline.taken))
        bad = math.isfinite(diverged_at) or not all(math.isfinite(r["test/loss"]) for r in rows)
        status = "diverged" if bad else "completed"
        progress.report(pos.step, pos.epoch + 1, settings.epochs, pos.row)
    progress.close()
    if ckpt is not None:
        ckpt.stopper.close()
    row = pos.row  # the last evaluation's metrics (none when no evaluation ran)
    summary = {
        "status": status,
        "final/test_acc": row.get("test/acc"),
        "final/test_acc_local": row.get("test/acc_local"),
        "best/test_acc": pos.best_acc,
        "final/train_loss": row.get("train/loss"),
        "steps": pos.step,
        "diverged_at_step": int(diverged_at)
        if status == "diverged" and math.isfinite(diverged_at)
        else None,
        "epochs": row.get("epoch"),
        **time_ledger(times, ledger),
        **calibrated,
    }
    if timeline is not None:
        summary.update(
            {
                # at T, not where the workers stopped (past T: not scored)
                **{k: v for k, v in row.items() if k.startswith(("time/", "comm/", "workers/"))},
                "time/eval_s": times.eval_s + timeline.copy_s,
                # real seconds of this process's loop, evaluation included: its share
                "time/wall_s": time.perf_counter() - started,
                "budget/time_s": timeline.budget.time_s,
                "budget/eval_every_s": timeline.budget.every_s,
                "budget/points": timeline.scored,
            }
        )
    return summary


def optimizer_step(optimizer: torch.optim.Optimizer) -> None:
    """The loop's update of one worker's parameters (LoopSettings.optimizer_step)."""
    optimizer.step()


def forward_backward(model, optimizer, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """One step's zero_grad -> forward -> backward; returns the loss."""
    loss = F.cross_entropy(model(x), y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    return loss


def _calibration(algo: Algorithm, comm: Comm, loader, device, settings: LoopSettings, saved):
    """The virtual clock's calibration (experiments/training/calibrate.py), applied to the
    clock: the saved one of a resumed run, else measured now when a compute time is `measured`,
    else the pinned values. None on the real clock (nothing to calibrate: it measures every
    step)."""
    from experiments.training import calibrate

    clock = comm.clock
    if not clock.virtual:
        return None
    if saved is not None:
        result = calibrate.Calibration.from_state(saved)
    elif calibrate.needed(clock.compute):
        steps_per_epoch = len(loader)

        def measure():
            batch = calibrate.calibration_batch(
                loader.dataset, loader.batch_size, device, settings.dtype
            )
            return calibrate.calibrate(
                algo, clock.compute, batch, lambda t: settings.schedule.lr_at(t, steps_per_epoch)
            )

        shared = settings.shared_calibration
        result = measure() if shared is None else shared(measure)
    else:
        result = calibrate.pinned(clock.compute)
    clock.compute = result.apply(clock.compute)
    return result


def _order_generator(loader) -> torch.Generator | None:
    """The generator of the data order and augmentation: the sampler's
    (experiments/data/datasets.py), else the loader's."""
    generator = getattr(loader.sampler, "generator", None)
    return generator if generator is not None else loader.generator


def _generator_state(loader) -> torch.Tensor | None:
    generator = _order_generator(loader)
    return generator.get_state() if generator is not None else None


# What a virtual clock has done with its time (experiments/training/clock.py), saved with it.
CLOCK_ACCOUNTS = ("busy_s", "algo_s", "steps", "samples")


def capture(algo: Algorithm, comm: Comm, times: Times, pos: Position, train_loader) -> dict:
    """This worker's whole state at a step boundary, for experiments/store/checkpoint.py."""
    rng = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        rng["cuda"] = torch.cuda.get_rng_state_all()
    optimizer = algo.optimizer.state_dict()
    optimizer["state"] = {k: _own_storage(v) for k, v in optimizer["state"].items()}
    return {
        "model": _own_storage(algo.model.state_dict()),
        "optimizer": optimizer,
        "algorithm": algo.state_dict(),
        "rng": rng,
        "clock": comm.clock.now() if comm.clock.virtual else None,
        "clock_accounts": {k: getattr(comm.clock, k) for k in CLOCK_ACCOUNTS}
        if comm.clock.virtual
        else None,
        "ledger": asdict(comm.ledger),
        "times": asdict(times),
        "position": {k: v for k, v in asdict(pos).items()},
    }


def _own_storage(tensors: dict) -> dict:
    """`tensors` with each view of a larger tensor copied out: torch.save writes a view's whole
    storage (the batched workers' parameters and momentum buffers are rows of stacked tensors,
    experiments/workers/batched.py)."""
    return {
        k: v.clone()
        if isinstance(v, torch.Tensor)
        and v.untyped_storage().nbytes() > v.numel() * v.element_size()
        else v
        for k, v in tensors.items()
    }


def restore(state: dict, algo: Algorithm, comm: Comm, times: Times, pos: Position, loader) -> None:
    """The inverse of capture(): after it, the loop continues as the saved worker would have."""
    algo.model.load_state_dict(state["model"])
    algo.optimizer.load_state_dict(state["optimizer"])
    algo.load_state_dict(state["algorithm"])
    torch.set_rng_state(state["rng"]["torch"])
    if "cuda" in state["rng"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["rng"]["cuda"])
    if comm.clock.virtual and state["clock"] is not None:
        comm.clock.t = state["clock"]
        for k, v in (state.get("clock_accounts") or {}).items():
            setattr(comm.clock, k, v)
    for k, v in state["ledger"].items():
        setattr(comm.ledger, k, v)
    for k, v in state["times"].items():
        setattr(times, k, v)
    for k, v in state["position"].items():
        setattr(pos, k, v)
    if pos.epoch_rng is not None and _order_generator(loader) is not None:
        _order_generator(loader).set_state(pos.epoch_rng)


def time_ledger(times: Times, ledger) -> dict[str, float]:
    """The ledger of timing.md, cumulative since the start of the run."""
    return {
        "time/train_s": times.train_s,
        "time/compute_s": times.compute_s,
        "time/comm_exposed_s": ledger.exposed_s,
        "time/comm_hidden_s": ledger.hidden_s,
        "time/algo_s": times.algo_s,
        "time/data_s": times.data_s,
        "time/eval_s": times.eval_s,
        "comm/bytes": ledger.bytes,
        "comm/collectives": ledger.collectives,
        "comm/peak_bytes": ledger.peak_bytes,  # largest payload of one collective
        # communication-to-computation ratio (timing.md)
        "comm/ratio": ledger.exposed_s / times.compute_s if times.compute_s > 0 else 0.0,
    }


HEARTBEAT_S = 30.0


class Heartbeat:
    """`heartbeat.json` in the run directory, rewritten at most every HEARTBEAT_S seconds with
    the step and the time: how `python -m analysis.runs.status` tells a running run from one whose
    job died without a word (a killed job cannot update its summary)."""

    def __init__(self, path: Path | None, total: int):
        self.path, self.total, self.last = path, total, -math.inf

    def beat(self, step: int) -> None:
        if self.path is None or time.monotonic() - self.last < HEARTBEAT_S:
            return
        self.last = time.monotonic()
        write_json_atomic(self.path, {"step": step, "total_steps": self.total, "time": time.time()})


class LossMeter:
    """The training loss since the last evaluation and the first step whose loss was not
    finite. On an accelerator they are kept as tensors on the device: reading a loss every
    step (`.item()`) would make every step wait for the device; they are read once per
    evaluation or checkpoint. On the CPU `.item()` waits for nothing and costs less than the
    tensor arithmetic (measured with py-spy: 0.9% of a width-8 ResNet-18 step for the tensors),
    so there the sums are Python floats. Both add float32 losses in float64 in step order, and
    a checkpoint restores the running sum as is, so a resumed run adds the same numbers in the
    same order as an uninterrupted one."""

    def __init__(
        self,
        device: torch.device,
        loss_sum: float = 0.0,
        first_bad: float = math.inf,
        on_host: bool | None = None,  # default: on the CPU; tests set it to check both ways
    ):
        self.on_host = device.type == "cpu" if on_host is None else on_host
        if self.on_host:
            self.sum, self.first_bad = loss_sum, first_bad
        else:
            self.sum = torch.tensor(loss_sum, dtype=torch.float64, device=device)
            self.first_bad = torch.tensor(first_bad, dtype=torch.float64, device=device)

    def add(self, loss: torch.Tensor, step: int) -> None:
        if self.on_host:
            value = loss.item()
            self.sum += value
            if not math.isfinite(value) and self.first_bad == math.inf:
                self.first_bad = step
            return
        value = loss.detach()
        self.sum += value
        seen = torch.isfinite(value) | torch.isfinite(self.first_bad)
        self.first_bad = torch.where(seen, self.first_bad, step)

    def read(self) -> tuple[float, float]:
        """(loss sum, first non-finite step or inf): on an accelerator, the one host sync."""
        if self.on_host:
            return self.sum, float(self.first_bad)
        return self.sum.item(), self.first_bad.item()

    def reset_sum(self) -> None:
        if self.on_host:
            self.sum = 0.0
        else:
            self.sum.zero_()


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class Progress:
    """Rank 0's progress: a tqdm bar on a terminal, plain log lines otherwise."""

    def __init__(self, total: int, enabled: bool, done: int = 0):
        self.enabled, self.total, self.done0 = enabled, total, done
        self.start = time.perf_counter()
        self.bar = None
        self.acc = float("nan")
        self.shown_at = -math.inf
        if enabled and sys.stderr.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=total, initial=done, unit="step", dynamic_ncols=True, leave=True)

    def update(self, step: int, loss: torch.Tensor) -> None:
        if self.bar is None:
            return
        self.bar.update(1)
        now = time.monotonic()
        if now - self.shown_at >= 1.0:  # reads the loss (a device sync) once a second at most
            self.shown_at = now
            self.bar.set_postfix(loss=f"{loss.item():.3f}", acc=f"{self.acc:.3f}", refresh=False)

    def report(self, step: int, epoch: int, epochs: int, row: dict) -> None:
        if not self.enabled:
            return
        self.acc = row["test/acc"]
        if self.bar is not None:
            return
        elapsed = time.perf_counter() - self.start
        run = step - self.done0  # steps of this process (a resumed run started at done0)
        eta = elapsed * (self.total - step) / run if run > 0 else float("nan")
        if "test/images" in row:  # budget=time: a point in virtual time (budget.py)
            local = (
                f"  test/acc_local {row['test/acc_local']:.4f}" if "test/acc_local" in row else ""
            )
            print(
                f"t {row['time/train_s']:.2f}s  step {row['step']}  "
                f"train/loss {row['train/loss']:.4f}  "
                f"test/acc {row['test/acc']:.4f} ({row['test/images']} images){local}  "
                f"elapsed {elapsed:.1f}s",
                flush=True,
            )
            return
        print(
            f"epoch {epoch}/{epochs}  step {step}/{self.total}  "
            f"train/loss {row['train/loss']:.4f}  "
            f"test/acc {row['test/acc']:.4f}  test/acc_local {row['test/acc_local']:.4f}  "
            f"elapsed {elapsed:.1f}s  eta {eta:.0f}s",
            flush=True,
        )

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
