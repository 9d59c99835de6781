"""The time budget (`budget=time`; docs/timing.md, "Budgets"): stragglers as the papers measure
them.

With equal workers, "E epochs" is the papers' budget. With one worker 3x slower it hides what
the straggler claims are about: if every worker makes the same steps and all meet at an
evaluation every epoch, a fast OSP/LOSP worker that its rule lets go on only spends its steps
sooner, then waits. On a time budget T (virtual seconds, `budget.time_s`):

- **Stop.** Each worker steps at its own modeled speed until the budget ends, going on as far as
  its method's rule allows (OSP/LOSP in their window, Overlap-Local-SGD while its anchor
  travels); a blocking collective makes the fast workers wait, as always. Where the workers
  must make the same steps (every method but OSP/LOSP: they wait for the same collectives at the
  same steps), they stop at the first step boundary at which the latest collective they waited
  for completed at or after T (`Ledger.completed_s`: the same number on every rank, so they stop
  together with no extra message). OSP/LOSP workers stop when their own clock reaches T; their
  `finish()` answers the pushes of a worker still training (algorithms/osp.py). Either way every
  worker's clock is at or past T when it stops: what happens after T is not scored.
- **The learning rate at time t** is the schedule's at the fraction t / T of its `epochs`
  (`TimeBudget.schedule_step`), the same for every worker at the same time, whatever its step
  count. Why by time, not by each worker's own steps: a fast worker would otherwise decay
  sooner than the slow one and than the consensus it is averaged into, and a method's schedule
  would depend on how many steps its fast workers made, which is the outcome being compared.
- **Data order.** Each worker walks its own shard in its own seeded order and starts its next
  pass when it gets there (the steps budget's epochs, unbounded).
- **Evaluation without a barrier** (`Timeline`). The points are t_k = k x `eval_every_s` below
  T, and T. As a worker's virtual clock passes t_k, it copies the model its method defines as
  it stood at t_k (`Algorithm.model_at`: the local model, the centre, or OSP/LOSP's w with every
  aggregate completed by t_k) and its own accounts at t_k (busy, idle, steps, samples): the
  clock moves before the state it moves to is applied (a step's update after its compute, an
  average after its wait), so the state when the clock passes t_k is the state at t_k. The
  copies are scored later with the usual collectives (the consensus: parameters and BN buffers
  averaged over the workers, the test set sharded): where the workers make the same steps, at
  every pass boundary (`flush_every` steps), the points every worker has copied; OSP/LOSP, whose
  ranks have no common step, after the run (the copies are kept until then). Nothing drains, so
  the training is what it would be with no evaluation at all. Points before T are scored on
  `eval_images` test images (a fixed stratified subset, the same for every method and seed);
  T on the whole test set, with each worker's own model too (`test/acc_local`).
- **Time to target** is then known every `eval_every_s` (analysis/reports/tables.py interpolates the
  crossing between the two points around it; docs/statistics.md).

Checkpoints and stop requests: where the workers make the same steps, as with the steps budget
(the copies not yet scored are saved with the checkpoint); OSP/LOSP on a time budget have no
step at which every worker is at rest before the end, so a stop request is answered when the
budget ends.
"""

from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass
from typing import Any

import torch

from algorithms.base import Algorithm
from algorithms.comm import Comm
from experiments.training.evaluate import consensus_copy, loss_and_correct, state_tensors


@dataclass(frozen=True)
class TimeBudget:
    """T, the evaluation points, and the LR's clock (module docstring)."""

    time_s: float
    every_s: float
    epochs: int  # the schedule's span, in passes of the reference worker
    steps_per_epoch: int

    @classmethod
    def of(cls, node: Any, epochs: int, steps_per_epoch: int, compute: Any) -> TimeBudget:
        """The budget of the config's `budget` node (time_s null: the slowest worker's `epochs`
        passes of compute; eval_every_s null: T / (8 epochs)) for the clock's `compute`
        (experiments/training/clock.py, calibrated)."""
        time_s = node.time_s
        if time_s is None:
            step = compute.step_time_s or 0.0
            time_s = epochs * steps_per_epoch * step * max(compute.slowdown)
        if not time_s > 0 or not math.isfinite(time_s):
            raise ValueError(f"budget.time_s must be a positive number of seconds, got {time_s}")
        every = node.eval_every_s if node.eval_every_s is not None else time_s / (8 * epochs)
        if not every > 0:
            raise ValueError(f"budget.eval_every_s must be > 0, got {every}")
        return cls(float(time_s), float(every), epochs, steps_per_epoch)

    def points(self) -> list[float]:
        """t_k = k x every_s below T, then T."""
        count = math.ceil(self.time_s / self.every_s - 1e-9)
        return [k * self.every_s for k in range(1, count)] + [self.time_s]

    def schedule_step(self, t: float) -> int:
        """The step of the steps budget's schedule whose LR is in force at virtual time `t`:
        the fraction t / T of `epochs` passes."""
        total = self.epochs * self.steps_per_epoch
        return min(int(t / self.time_s * total), total - 1)


@dataclass
class Point:
    """One worker at one evaluation point: the model's state and its own accounts."""

    t: float
    state: list[torch.Tensor]  # the method's model (parameters, then buffers) at t
    local: list[torch.Tensor] | None  # this worker's own model at t (the last point only)
    step: int  # local steps whose compute ended by t
    samples: int
    compute_s: float  # modeled local steps by t
    algo_s: float  # modeled algorithm work by t
    idle_s: float  # waiting by t: t - compute_s - algo_s
    hidden_s: float
    bytes: int
    collectives: int
    loss_sum: float  # training losses of this worker's steps so far, summed
    lr: float


def _state(model: torch.nn.Module) -> list[torch.Tensor]:
    """A copy of `model`'s parameters and buffers (evaluate.state_tensors' order)."""
    return [t.detach().clone() for t in state_tensors(model)]


class Timeline:
    """This worker's copies of the model at the evaluation points (module docstring)."""

    def __init__(self, budget: TimeBudget, algo: Algorithm, comm: Comm, loss_sum, lr_at):
        self.budget, self.algo, self.comm = budget, algo, comm
        self.loss_sum, self.lr_at = loss_sum, lr_at  # callables: the loop's running numbers
        self.points = budget.points()
        self.next = 0  # the first point not copied yet
        self.taken: list[Point] = []  # copied, not scored yet
        self.scored = 0  # points scored so far
        self.previous = (0.0, 0)  # (loss sum, steps) of this worker at the last scored point
        self.copy_s = 0.0  # real time spent copying (evaluation's cost, not training's)

    def install(self) -> None:
        """Copy the model whenever the clock passes a point (VirtualClock.watch)."""
        self.comm.clock.watch = self.passing

    def uninstall(self) -> None:
        self.comm.clock.watch = None

    def passing(self, old: float, new: float, busy: bool) -> None:
        while self.next < len(self.points) and self.points[self.next] < new:
            self._take(self.points[self.next], max(0.0, self.points[self.next] - old), busy)
            self.next += 1

    def before_work(self, ends: float | None) -> None:
        """Before a local step's forward pass, its work ending at `ends` (None: unknown): the
        points inside it, copied now. The forward pass moves the BatchNorm running statistics
        before the step's compute moves the clock, so a copy taken as the clock passes would
        hold them one batch late."""
        if ends is not None:
            self.passing(self.comm.clock.now(), ends, True)

    def close(self) -> None:
        """At the end: the points at the clock's time (T, when the budget is spent), with the
        state as it is; none later (a run that diverged stops before T)."""
        now = self.comm.clock.now()
        self.passing(now, math.nextafter(now, math.inf), False)  # the points <= now
        self.uninstall()

    def _take(self, t: float, into: float, busy: bool) -> None:
        """Copy at point t, `into` seconds into an advance of the clock that is this worker's
        own work (busy) or a wait."""
        started = time.perf_counter()
        clock, ledger = self.comm.clock, self.comm.ledger
        last = t == self.budget.time_s
        compute_s = clock.busy_s + (into if busy else 0.0)
        self.taken.append(
            Point(
                t=t,
                state=_state(self.algo.model_at(t)),
                local=_state(self.algo.model) if last else None,
                step=clock.steps,
                samples=clock.samples,
                compute_s=compute_s,
                algo_s=clock.algo_s,
                idle_s=max(0.0, t - compute_s - clock.algo_s),
                hidden_s=ledger.hidden_s,
                bytes=ledger.bytes,
                collectives=ledger.collectives,
                loss_sum=self.loss_sum(),
                lr=self.lr_at(t),
            )
        )
        self.copy_s += time.perf_counter() - started

    # ---- checkpoints -------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        return {
            "next": self.next,
            "scored": self.scored,
            "previous": self.previous,
            "taken": [dict(vars(p)) for p in self.taken],  # the tensors as they are
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.next, self.scored = state["next"], state["scored"]
        self.previous = tuple(state["previous"])
        self.taken = [Point(**p) for p in state["taken"]]

    # ---- scoring ----------------------------------------------------------------------

    def common(self) -> int:
        """Collective: how many of the copied points every worker has (the min)."""
        (n,) = self.comm.sum_scalars([len(self.taken)], op="min")
        return int(n)

    def score(self, count: int, scorer: Scorer) -> list[dict[str, Any]]:
        """Collective: score the first `count` copied points (every rank the same count);
        their rows, in order."""
        rows = []
        for point in self.taken[:count]:
            rows.append(scorer.row(point, self))
            self.scored += 1
        del self.taken[:count]
        return rows


class Scorer:
    """Scores copied points with the usual evaluation's collectives: the consensus of the
    copies (parameters and float buffers averaged over the workers) on this worker's shard of
    the test images, counts summed; at T the whole test set and each worker's own model."""

    def __init__(
        self,
        algo: Algorithm,
        comm: Comm,
        device: torch.device,
        dtype: torch.dtype,
        subset_shard,
        full,
        full_shard,
        counts=None,
        bn_batches=None,
        steps_per_epoch: int = 1,
    ):
        self.comm, self.device, self.dtype = comm, device, dtype
        self.subset_shard, self.full, self.full_shard = subset_shard, full, full_shard
        self.counts = counts or loss_and_correct
        self.bn_batches = bn_batches
        self.steps_per_epoch = steps_per_epoch
        # the module the copies are loaded into: the eval model's shape (EASGD's centre, OSP's
        # w: a copy of the worker's model)
        self.model = copy.deepcopy(algo.model)
        self.local = copy.deepcopy(algo.model)

    def _load(self, module: torch.nn.Module, state: list[torch.Tensor]) -> torch.nn.Module:
        with torch.no_grad():
            torch._foreach_copy_(state_tensors(module), state)
        return module

    def row(self, point: Point, timeline: Timeline) -> dict[str, Any]:
        comm, m = self.comm, self.comm.world_size
        last = point.local is not None
        model = self._load(self.model, point.state)
        consensus = consensus_copy(model, comm, self.bn_batches, self.device, self.dtype)
        shard = self.full_shard if last else self.subset_shard
        loss_prev, steps_prev = timeline.previous
        c_loss, c_correct, c_count, loss_sum, steps = comm.sum_scalars(
            [
                *self.counts(consensus, shard, self.device, self.dtype),
                point.loss_sum - loss_prev,
                point.step - steps_prev,
            ]
        )
        timeline.previous = (point.loss_sum, point.step)
        row: dict[str, Any] = {
            "step": point.step,
            "epoch": round(point.step / self.steps_per_epoch, 4),
            "train/loss": loss_sum / steps if steps > 0 else math.nan,
            "lr": point.lr,
            "test/loss": c_loss / c_count,
            "test/acc": c_correct / c_count,
            "test/images": int(c_count),
        }
        if last:
            local = self._load(self.local, point.local)
            l_loss, l_correct, l_count = self.counts(local, self.full, self.device, self.dtype)
            acc, loss = comm.sum_scalars([l_correct / l_count, l_loss / l_count])
            row["test/acc_local"], row["test/loss_local"] = acc / m, loss / m
            row.update(self.workers(point))
        row.update(ledger_at(point))
        return row

    def workers(self, point: Point) -> dict[str, list]:
        """Collective: every worker's accounts at T (the papers' "under-utilization": busy,
        idle, steps, samples), as lists by rank."""
        comm, m, rank = self.comm, self.comm.world_size, self.comm.rank
        fields = ("busy_s", "idle_s", "step", "samples")
        mine = (point.compute_s + point.algo_s, point.idle_s, point.step, point.samples)
        values = [0.0] * (len(fields) * m)
        for i, value in enumerate(mine):
            values[i * m + rank] = float(value)
        summed = comm.sum_scalars(values)
        out = {f"workers/{name}": summed[i * m : (i + 1) * m] for i, name in enumerate(fields)}
        out["workers/steps"] = [int(s) for s in out.pop("workers/step")]
        out["workers/samples"] = [int(s) for s in out["workers/samples"]]
        out["workers/idle_share"] = [
            idle / point.t if point.t > 0 else 0.0 for idle in out["workers/idle_s"]
        ]
        return out


def ledger_at(point: Point) -> dict[str, float]:
    """This worker's ledger (loop.time_ledger's keys) at the point: on the virtual clock what
    is not compute or algorithm work is waiting (exposed communication)."""
    return {
        "time/train_s": point.t,
        "time/compute_s": point.compute_s,
        "time/comm_exposed_s": point.idle_s,
        "time/comm_hidden_s": point.hidden_s,
        "time/algo_s": point.algo_s,
        "time/data_s": 0.0,
        "comm/bytes": point.bytes,
        "comm/collectives": point.collectives,
        "comm/ratio": point.idle_s / point.compute_s if point.compute_s > 0 else 0.0,
    }
