"""The only training loop. It knows no algorithm: it calls the four hooks of algorithms/base.py.

    for each local step t (one counter across epochs):
        x, y = next batch of this worker's shard            (time/data_s)
        lr   = schedule(t)
        zero_grad -> forward -> backward                     (time/compute_s ...)
        clock.local_step(t)        (virtual: adds the modeled step; real: emulated sleep)
        algo.before_step(t) -> optimizer.step() -> algo.after_step(t)
                                                             (... minus time/comm_exposed_s)
    every `eval_every` epochs and after the last: algo.drain() (algo.finish() the last time),
    then evaluate (time/eval_s, not training time)

Time is kept on the run's clock (experiments/clock.py): wall-clock, or a deterministic virtual
clock on which collectives complete at their modeled times. Training time excludes evaluation
(AlgoPerf's rule). A non-finite training loss stops the run
with status `diverged` on every worker at the next evaluation point, and the summary names the
first step at which any worker saw it.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from algorithms.base import Algorithm
from algorithms.comm import Comm
from experiments.evaluate import evaluate
from experiments.schedule import lr_at


@dataclass
class LoopSettings:
    epochs: int
    eval_every: int
    schedule: dict  # keyword arguments of experiments.schedule.lr_at
    dtype: torch.dtype = torch.float32
    progress: bool = True


@dataclass
class Times:
    """Training-time accounts of this worker, in seconds (timing.md, "The ledger").

    Real clock: measured; `train_s` = data + compute + exposed communication + other (Python
    overhead between the timers), within a few percent. Virtual clock: modeled; data loading is
    not modeled and `train_s` = compute + exposed communication exactly.
    """

    train_s: float = 0.0
    compute_s: float = 0.0
    data_s: float = 0.0
    eval_s: float = 0.0


def train(
    algo: Algorithm,
    comm: Comm,
    train_loader,
    test_full,
    test_shard,
    device: torch.device,
    settings: LoopSettings,
    sink=None,
) -> dict:
    """Run the whole training; return the numbers for summary.json (same on every rank)."""
    model, optimizer, ledger = algo.model, algo.optimizer, comm.ledger
    steps_per_epoch = len(train_loader)
    total_steps = settings.epochs * steps_per_epoch
    progress = Progress(total_steps, enabled=settings.progress and comm.rank == 0)
    clock, times = comm.clock, Times()
    step, status, best_acc = 0, "completed", -1.0
    first_bad_step = math.inf  # first step whose local training loss was not finite
    loss_sum, loss_steps = 0.0, 0
    row: dict = {}

    model.train()
    for epoch in range(settings.epochs):
        batches = iter(train_loader)
        while True:
            t0 = time.perf_counter()
            batch = next(batches, None)
            if batch is None:
                break
            x = batch[0].to(device, dtype=settings.dtype, non_blocking=True)
            y = batch[1].to(device, non_blocking=True)
            t1 = time.perf_counter()
            lr = lr_at(step, steps_per_epoch, **settings.schedule)
            for group in optimizer.param_groups:
                group["lr"] = lr
            exposed_before = ledger.exposed_s

            loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            # The clock takes the step's compute here, before any collective of the hooks:
            # virtual: adds the modeled step time; real: sleeps to it with emulate_compute.
            step_compute = clock.local_step(step, time.perf_counter() - t1)
            algo.before_step(step)
            optimizer.step()
            algo.after_step(step)
            loss_value = loss.item()  # also the sync point with an accelerator
            if not math.isfinite(loss_value) and first_bad_step == math.inf:
                first_bad_step = step

            t2 = time.perf_counter()
            if clock.virtual:
                times.compute_s += step_compute
                times.train_s = clock.now()
            else:
                times.data_s += t1 - t0
                times.compute_s += (t2 - t1) - (ledger.exposed_s - exposed_before)
                times.train_s += t2 - t0
            loss_sum += loss_value
            loss_steps += 1
            step += 1
            progress.update(step, loss_value)

        last = epoch == settings.epochs - 1
        if not last and (epoch + 1) % settings.eval_every != 0:
            continue

        # Bring every worker to rest before any bookkeeping collective: with collectives in
        # flight (OSP/LOSP push at rank-dependent steps) an evaluation all-reduce would be
        # matched against another worker's push. The last evaluation sees the consensus.
        t0 = time.perf_counter()
        exposed_before = ledger.exposed_s
        if last:
            algo.finish()
        else:
            algo.drain()
        t1 = time.perf_counter()
        if clock.virtual:
            times.train_s = clock.now()
        else:
            times.compute_s += (t1 - t0) - (ledger.exposed_s - exposed_before)
            times.train_s += t1 - t0

        # Divergence is a result: the workers agree on the first step at which any of them saw
        # a non-finite loss, and stop together.
        (diverged_at,) = comm.sum_scalars([first_bad_step], op="min")
        diverged = math.isfinite(diverged_at)
        (train_loss_sum, train_steps) = comm.sum_scalars([loss_sum, loss_steps])
        train_loss = train_loss_sum / max(train_steps, 1)
        loss_sum, loss_steps = 0.0, 0
        row = {
            "epoch": epoch + 1,
            "train/loss": train_loss,
            "lr": lr,
            **evaluate(
                model, algo.eval_model(), comm, test_full, test_shard, device, settings.dtype
            ),
        }
        times.eval_s += time.perf_counter() - t1
        row.update(
            {
                **time_ledger(times, ledger),
                **{f"algo/{k}": v for k, v in algo.metrics().items()},
            }
        )
        best_acc = max(best_acc, row["test/acc"])
        if sink is not None:
            sink.log(row, step)
        progress.report(step, epoch + 1, settings.epochs, row)
        if diverged or not (math.isfinite(train_loss) and math.isfinite(row["test/loss"])):
            status = "diverged"  # every rank saw the same all-reduced numbers
            break

    progress.close()
    return {
        "status": status,
        "final/test_acc": row.get("test/acc"),
        "final/test_acc_local": row.get("test/acc_local"),
        "best/test_acc": best_acc,
        "final/train_loss": row.get("train/loss"),
        "steps": step,
        "diverged_at_step": int(diverged_at) if status == "diverged" and diverged else None,
        "epochs": row.get("epoch"),
        **time_ledger(times, ledger),
    }


def time_ledger(times: Times, ledger) -> dict[str, float]:
    """The ledger of timing.md, cumulative since the start of the run."""
    return {
        "time/train_s": times.train_s,
        "time/compute_s": times.compute_s,
        "time/comm_exposed_s": ledger.exposed_s,
        "time/comm_hidden_s": ledger.hidden_s,
        "time/data_s": times.data_s,
        "time/eval_s": times.eval_s,
        "comm/bytes": ledger.bytes,
        "comm/collectives": ledger.collectives,
        # communication-to-computation ratio (timing.md)
        "comm/ratio": ledger.exposed_s / times.compute_s if times.compute_s > 0 else 0.0,
    }


class Progress:
    """Rank 0's progress: a tqdm bar on a terminal, plain log lines otherwise."""

    def __init__(self, total: int, enabled: bool):
        self.enabled, self.total = enabled, total
        self.start = time.perf_counter()
        self.bar = None
        self.acc = float("nan")
        if enabled and sys.stderr.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=total, unit="step", dynamic_ncols=True, leave=True)

    def update(self, step: int, loss: float) -> None:
        if self.bar is not None:
            self.bar.update(1)
            self.bar.set_postfix(loss=f"{loss:.3f}", acc=f"{self.acc:.3f}", refresh=False)

    def report(self, step: int, epoch: int, epochs: int, row: dict) -> None:
        if not self.enabled:
            return
        self.acc = row["test/acc"]
        if self.bar is not None:
            return
        elapsed = time.perf_counter() - self.start
        done = epoch / epochs
        eta = elapsed * (1 - done) / done if done > 0 else float("nan")
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
