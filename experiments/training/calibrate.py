"""The virtual clock's calibration: the step time and the algorithm's own work, measured once
before training (timing.md, "Two clocks"; algorithms.md 12.17; issue 13 item 7, issue 14 item 9).

A virtual clock whose step time is measured afresh every step is not deterministic: times,
and the OSP/LOSP trajectories that are decided on the clock, change from run to run. So when
`timing=virtual` and `compute.step_time_s` or `compute.algo_time_s` is `measured`, every worker,
before the first training step:

1. copies its model, local optimizer and algorithm (`copy.deepcopy`, the algorithm's `Comm`
   replaced by a calibration `Comm` on the same process group, on wall time, timed on the
   device's clock: `clock.DeviceTimer`); the real training state, its RNG streams
   (`torch.random.fork_rng`) and its data order (one fixed batch of its shard, drawn under a
   forked RNG, never through the training loader) are untouched;
2. runs WARMUP_ROUNDS whole rounds that are not measured (allocations, lazy initialisation),
   then at least MEASURED_STEPS steps in whole rounds (`tau` steps for round-based methods, 1
   for the others; a round longer than MAX_ROUND_STEPS: MEASURED_STEPS of its local steps,
   without its sync), timing on the device's clock (synchronised at both ends of each region):
   - the step: forward + backward + the local optimizer's step;
   - the algorithm's work: time in its hooks (`before_step`, `after_step`) minus the time spent
     inside the calibration Comm's calls (`ledger.call_s`: collectives, their buffers, waits);
3. takes the median step time and the mean algorithm time per step over the measured steps,
   then drains the copy (every collective completes; OSP/LOSP launch theirs at rank-dependent
   steps) and drops it;
4. agrees across workers: the MEAN of the workers' values (one all-reduce of bookkeeping, not
   accounted), rounded to SIGNIFICANT digits so that the recorded value is the value used.

The virtual clock then charges per local step (experiments/training/clock.py):

    step time       step_time_s = the pinned value, else the measured median step
    algorithm time  algo_time_s = the pinned value, else
                                  measured algorithm time x step_time_s / measured step time

i.e. the algorithm's work keeps its measured proportion to a step whatever step time the clock
is told to use (fig4 at the paper's scale: a 0.173 s GPU step; PowerSGD's compression then costs
the share of it that it costs here). Both values go into summary.json and every metrics row
(`compute/step_time_s`, `compute/algo_time_s`, with the raw measurements), and into checkpoints: a
resumed run keeps them. A rerun with `compute.step_time_s=<s> compute.algo_time_s=<a>` skips the
calibration and repeats the run exactly (tests/test_timing.py).

Choices [I]:
- Agreement by the mean, not the max: every worker measured its step while the others measured
  theirs (the same contention), so the mean is the estimate of the reference worker's step; the
  max would let one worker's noise set every worker's clock. Heterogeneity is modeled by
  `compute.slowdown`, not measured.
- The step time is a median (robust to a slow outlier step); the algorithm's work is a mean
  over whole rounds, amortised per step, because it is not the same every step: Local SGD,
  EASGD and the overlap methods work at round ends only. Amortising, not charging per kind of
  step, because OSP/LOSP's rounds have no fixed length (their window is decided on the clock,
  per rank), so there is no step kind that every method has; over any whole number of rounds the
  charge equals the measured total, and within a round it moves at most one round's algorithm
  work (a small part of one step) earlier than where it happens.
- The work of `drain()` / `finish()` (evaluation points and the end) is not charged on the
  virtual clock; on the real clock it is measured like the hooks' (experiments/training/loop.py).
- The calibration's steps are the run's first ones (t = 0, 1, ...): an algorithm whose work
  changes later (PowerSGD with `start_step` > 0 compresses only from then on) is charged what
  its first steps cost; pin `compute.algo_time_s` for such a run.
- Measured on this machine: the proportion of algorithm work to step is that of this device
  (a CPU's ratio of PowerSGD's QR to a ResNet step is not a GPU's). Pin `compute.algo_time_s`
  to model another device.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F

from algorithms.base import Algorithm
from algorithms.comm import Comm, WallClock
from experiments.training.clock import Compute, DeviceTimer

WARMUP_ROUNDS = 1  # whole rounds, at least WARMUP_STEPS steps, not measured
WARMUP_STEPS = 2
MEASURED_STEPS = 10  # at least this many steps, in whole rounds
# Longest round measured whole. A longer round (e.g. `local_sgd tau=1000`, the benchmarks' loop
# overhead) is measured over MEASURED_STEPS steps of its first round, without its sync: its
# once-per-round work amortised over more than this many steps is below the clock's rounding,
# and measuring whole rounds of it would cost more steps than many runs train.
MAX_ROUND_STEPS = 64
SIGNIFICANT = 4  # digits of the recorded values


@dataclass(frozen=True)
class Calibration:
    """What the virtual clock charges per local step, and what it was derived from."""

    step_time_s: float  # the step time the clock uses (before each worker's factor)
    algo_time_s: float  # the algorithm's work per step the clock uses (idem)
    measured_step_s: float | None = None  # median step, mean over workers (None: not measured)
    measured_algo_s: float | None = None  # algorithm work per step, mean over workers
    measured_step_min_s: float | None = None  # the workers' medians: the smallest ...
    measured_step_max_s: float | None = None  # ... and the largest (their agreement)
    steps: int = 0  # measured steps per worker (whole rounds); 0: nothing measured

    def record(self) -> dict[str, float | int | None]:
        """The keys of summary.json and of the metrics rows (`compute/...`)."""
        return {
            "compute/step_time_s": self.step_time_s,
            "compute/algo_time_s": self.algo_time_s,
            "compute/measured_step_s": self.measured_step_s,
            "compute/measured_algo_s": self.measured_algo_s,
            "compute/measured_step_min_s": self.measured_step_min_s,
            "compute/measured_step_max_s": self.measured_step_max_s,
            "compute/calibration_steps": self.steps,
        }

    def state(self) -> dict:
        return asdict(self)

    @classmethod
    def from_state(cls, state: dict) -> Calibration:
        return cls(**state)

    def apply(self, compute: Compute) -> Compute:
        """`compute` with the calibrated step and algorithm times."""
        return dataclasses.replace(
            compute, step_time_s=self.step_time_s, algo_time_s=self.algo_time_s
        )

    def pins(self) -> str:
        """The overrides that repeat this run's clock exactly."""
        return f"compute.step_time_s={self.step_time_s!r} compute.algo_time_s={self.algo_time_s!r}"


def needed(compute: Compute) -> bool:
    """Whether the virtual clock of `compute` has a value to measure."""
    return compute.step_time_s is None or compute.algo_time_s is None


def round_significant(x: float, digits: int = SIGNIFICANT) -> float:
    """`x` rounded to `digits` significant digits (0 stays 0)."""
    if x == 0 or not math.isfinite(x):
        return x
    return round(x, digits - 1 - math.floor(math.log10(abs(x))))


def steps_in_rounds(minimum: int, tau: int) -> int:
    """The smallest whole number of rounds of `tau` steps holding at least `minimum` steps."""
    return tau * max(1, math.ceil(minimum / tau))


def calibration_batch(dataset, batch_size: int, device: torch.device, dtype: torch.dtype):
    """One batch of `dataset` (the worker's shard): its first `batch_size` samples, the training
    transforms applied under a forked RNG (the training's streams are untouched)."""
    n = min(len(dataset), batch_size)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        items = [dataset[i] for i in range(n)]
    x = torch.stack([torch.as_tensor(item[0]) for item in items]).to(device, dtype=dtype)
    y = torch.as_tensor([int(item[1]) for item in items]).to(device)
    return x, y


def measure(
    algo: Algorithm,
    batch: tuple[torch.Tensor, torch.Tensor],
    lr_at: Callable[[int], float],
    timer: Callable[[], float],
    warmup_steps: int,
    measured_steps: int,
) -> tuple[list[float], float]:
    """Run `warmup_steps` + `measured_steps` local steps on a copy of `algo` (its model, local
    optimizer and algorithm state; its Comm replaced by a calibration Comm timed by `timer`).
    Returns this worker's measured step times and its algorithm work per measured step."""
    comm = algo.comm
    probe = Comm(comm.group, clock=WallClock(), compression=comm.codec.name, timer=timer)
    # One deepcopy for the three, so that the copy's optimizer and algorithm hold the copy's
    # parameters; every reference to the training's Comm becomes the calibration Comm.
    model, optimizer, twin = copy.deepcopy(
        (algo.model, algo.optimizer, algo), memo={id(comm): probe}
    )
    x, y = batch
    steps, work = [], 0.0
    device = x.device
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        model.train()
        for t in range(warmup_steps + measured_steps):
            for group in optimizer.param_groups:
                group["lr"] = lr_at(t)
            t0 = timer()
            loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            t1 = timer()
            calls = probe.ledger.call_s
            twin.before_step(t)
            t2 = timer()
            optimizer.step()
            t3 = timer()
            twin.after_step(t)
            t4 = timer()
            if t >= warmup_steps:
                steps.append((t1 - t0) + (t3 - t2))
                work += (t2 - t1) + (t4 - t3) - (probe.ledger.call_s - calls)
        twin.drain()  # every collective of the copy completes on every worker
    del model, optimizer, twin
    return steps, work / max(measured_steps, 1)


def calibrate(
    algo: Algorithm,
    compute: Compute,
    batch: tuple[torch.Tensor, torch.Tensor],
    lr_at: Callable[[int], float],
    timer: Callable[[], float] | None = None,
    measured_steps: int = MEASURED_STEPS,
) -> Calibration:
    """Measure this worker's step and algorithm work on a copy of `algo`, agree across the
    workers (mean), and resolve `compute`'s `measured` values (module docstring). Every worker
    calls it at the same point (it runs collectives on `algo.comm`'s group)."""
    comm = algo.comm
    timer = timer if timer is not None else DeviceTimer(batch[0].device)
    tau = algo.tau if algo.periodic else 1
    if tau > MAX_ROUND_STEPS:  # the first round's local steps only (MAX_ROUND_STEPS)
        warmup, steps = WARMUP_STEPS, measured_steps
    else:
        warmup = max(steps_in_rounds(WARMUP_STEPS, tau), WARMUP_ROUNDS * tau)
        steps = steps_in_rounds(measured_steps, tau)
    samples, work = measure(algo, batch, lr_at, timer, warmup, steps)
    median = statistics.median(samples)
    m = comm.world_size
    total_step, total_work = comm.sum_scalars([median, work])
    (low,) = comm.sum_scalars([median], op="min")
    (high,) = comm.sum_scalars([median], op="max")
    step_s = round_significant(total_step / m)
    work_s = round_significant(max(total_work, 0.0) / m)
    step_time = compute.step_time_s if compute.step_time_s is not None else step_s
    algo_time = compute.algo_time_s
    if algo_time is None:
        algo_time = round_significant(work_s * step_time / step_s) if step_s > 0 else 0.0
    return Calibration(
        step_time_s=step_time,
        algo_time_s=algo_time,
        measured_step_s=step_s,
        measured_algo_s=work_s,
        measured_step_min_s=round_significant(low),
        measured_step_max_s=round_significant(high),
        steps=steps,
    )


def pinned(compute: Compute) -> Calibration:
    """The calibration of a clock whose both values are given (nothing measured)."""
    return Calibration(step_time_s=compute.step_time_s, algo_time_s=compute.algo_time_s)
