"""Time: the network and worker-speed model, and the real and virtual clocks (timing.md).

The papers' claims are about time, so every run says how long it took and where the time went.
On a cluster that is measured (`timing=real`); on a laptop it is modeled (`timing=virtual`),
deterministically, so a time-axis figure is the same on every machine.

Cost of a collective of n payload bytes among m workers (timing.md):

    ring all-reduce:             T = 2 (m-1) alpha + 2 (m-1)/m * n / B
    parameter server, k shards:  T = 2 alpha + 2 m n / (k B)

with alpha = `network.latency_s` and B = `network.bandwidth_gbps` (1e9 bit/s units).

Worker speed: a local step takes `compute.step_time_s` times this worker's factor f_i(t): its
slowdown (`compute.slowdown`: none, one_slow, half_slow, lognormal (one factor per worker),
lognormal_steps (one per step: exp(N(0, sigma^2)) for every step of every worker, the random
per-step slowdown of the straggler literature), or an explicit list) times
`compute.straggler_factor` with probability `compute.straggler_prob`. Every random draw comes
from a generator seeded by (seed, rank, step) or (seed, "slowdown"): the same run gives the same
times.

The algorithm's own work (PowerSGD's compression, EASGD's elastic update, the anchor arithmetic
of the overlap methods, pseudo-sync's prediction: what its hooks do outside collectives) is a
second charge per local step, `compute.algo_time_s`, scaled by the same factor f_i(t): a slow
worker does its algorithm's arithmetic slowly too. On the virtual clock

    step:       step_time_s x f_i(t)           (time/compute_s)
    algorithm:  algo_time_s x f_i(t)           (time/algo_s)

both charged when the local step's backward pass ends, before the hooks' collectives. `measured`
for either value: experiments/training/calibrate.py measures it once before training (the median
step, agreed across workers; the algorithm's work amortised over whole rounds and scaled as
measured algorithm time x step_time_s / measured step time), records it in summary.json, and a
rerun that pins both values (`compute.step_time_s=<s> compute.algo_time_s=<a>`) repeats the run
exactly. On the real clock the algorithm's work is measured every step instead.

Two clocks, one interface used by algorithms/comm.py and experiments/training/loop.py:
- `RealClock`: wall-clock. With `emulate_network` a collective completes no earlier than its
  modeled duration after its launch (a wait sleeps off the rest, so a hidden collective costs
  nothing and an exposed one its remainder); with `emulate_compute` each step sleeps to reach
  its modeled duration.
- `VirtualClock`: no sleeping. Each worker keeps a clock; a step advances it by the modeled
  step time and algorithm time; a collective launched by the workers at clocks c_j completes at
  max_j c_j + T (the clocks travel with the collective, in slots appended to its buffer), and
  waiting for it moves the worker's clock to max(own clock, completion).

`DeviceTimer` reads time on a device's clock (it waits for the device's queued work first): what
the calibration and the communication layer's call accounting measure with.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from experiments.config import schema

SLOWDOWN_PATTERNS = ("none", "one_slow", "half_slow", "lognormal", "lognormal_steps")
TOPOLOGIES = ("allreduce", "ps")


def ring_allreduce_time(nbytes: float, m: int, latency_s: float, bandwidth_gbps: float) -> float:
    """T = 2(m-1) alpha + 2(m-1)/m * n / B (bandwidth-optimal ring)."""
    if m <= 1:
        return 0.0
    return 2 * (m - 1) * latency_s + 2 * (m - 1) / m * nbytes * 8 / (bandwidth_gbps * 1e9)


def ps_time(nbytes: float, m: int, servers: int, latency_s: float, bandwidth_gbps: float) -> float:
    """T = 2 alpha + 2 m n / (k B): push to and pull from k server shards, whose links carry
    every worker's traffic."""
    if m <= 1:
        return 0.0
    return 2 * latency_s + 2 * m * nbytes * 8 / (servers * bandwidth_gbps * 1e9)


@dataclass(frozen=True)
class Network:
    name: str = "ideal"
    latency_s: float = 0.0
    bandwidth_gbps: float = math.inf
    topology: str = "allreduce"
    ps_servers: int = 1

    @classmethod
    def from_config(cls, node: schema.Network) -> Network:
        """The network of the config's `network` node; a value that cannot be one raises."""
        net = cls(
            name=str(node.name),
            latency_s=float(node.latency_s),
            bandwidth_gbps=float(node.bandwidth_gbps),
            topology=str(node.topology),
            ps_servers=int(node.ps_servers),
        )
        if net.latency_s < 0 or math.isnan(net.latency_s):
            raise ValueError(f"network.latency_s must be >= 0, got {net.latency_s}")
        if not net.bandwidth_gbps > 0:
            raise ValueError(
                f"network.bandwidth_gbps must be > 0 (or inf), got {net.bandwidth_gbps}"
            )
        if net.topology not in TOPOLOGIES:
            raise ValueError(
                f"network.topology must be one of {', '.join(TOPOLOGIES)}, got {net.topology!r}"
            )
        if net.ps_servers < 1:
            raise ValueError(f"network.ps_servers must be >= 1, got {net.ps_servers}")
        return net

    def collective_time(self, nbytes: float, m: int) -> float:
        """Modeled duration of one collective on `nbytes` of payload among `m` workers."""
        if self.topology == "ps":
            return ps_time(nbytes, m, self.ps_servers, self.latency_s, self.bandwidth_gbps)
        return ring_allreduce_time(nbytes, m, self.latency_s, self.bandwidth_gbps)


def slowdown_factors(
    pattern: str | Sequence[float], m: int, factor: float = 2.0, sigma: float = 0.5, seed: int = 0
) -> list[float]:
    """Per-worker compute slowdown factors (1 = the reference speed)."""
    if not isinstance(pattern, str):
        if not isinstance(pattern, list | tuple) or any(
            isinstance(f, bool) or not isinstance(f, int | float) for f in pattern
        ):
            raise ValueError(
                f"compute.slowdown must be one of {', '.join(SLOWDOWN_PATTERNS)} or a list of "
                f"numbers, got {pattern!r}"
            )
        factors = [float(f) for f in pattern]
        if len(factors) != m:
            raise ValueError(f"compute.slowdown lists {len(factors)} factors for {m} workers")
    elif pattern == "none":
        factors = [1.0] * m
    elif pattern == "one_slow":  # the last worker is `factor` times slower
        factors = [1.0] * (m - 1) + [float(factor)]
    elif pattern == "half_slow":  # the second half of the workers
        factors = [1.0] * (m - m // 2) + [float(factor)] * (m // 2)
    elif pattern == "lognormal":  # exp(N(0, sigma^2)), drawn once per run
        rng = np.random.default_rng([seed, 0x510D])
        factors = np.exp(rng.normal(0.0, sigma, size=m)).tolist()
    elif pattern == "lognormal_steps":  # every worker at the reference speed on average ...
        factors = [1.0] * m  # ... each step drawn on its own (Compute.step_sigma)
    else:
        raise ValueError(
            f"compute.slowdown must be one of {', '.join(SLOWDOWN_PATTERNS)} or a list, "
            f"got {pattern!r}"
        )
    if any(not f > 0 for f in factors):
        raise ValueError(f"compute.slowdown factors must be > 0, got {factors}")
    return factors


MEASURED = "measured"


def _seconds(value: Any, key: str, positive: bool) -> float | None:
    """The `compute.<key>` time `value`: `measured` (None) or a number of seconds (> 0, or
    >= 0)."""
    if value == MEASURED or value is None:
        return None
    bound = "> 0" if positive else ">= 0"
    if isinstance(value, bool):
        raise ValueError(f"compute.{key} must be a number {bound} or 'measured', got {value!r}")
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        raise ValueError(
            f"compute.{key} must be a number {bound} or 'measured', got {value!r}"
        ) from None
    if not (seconds > 0 if positive else seconds >= 0) or not math.isfinite(seconds):
        raise ValueError(f"compute.{key} must be a number {bound} or 'measured', got {value!r}")
    return seconds


@dataclass(frozen=True)
class Compute:
    """The modeled duration of each local step of each worker, and of its algorithm's work."""

    step_time_s: float | None  # None = measured (the calibration, or each step's own time)
    slowdown: tuple[float, ...]
    straggler_prob: float = 0.0
    straggler_factor: float = 1.0
    seed: int = 0
    # The algorithm's own work per local step on the virtual clock; None = measured (the
    # calibration). 0: not charged.
    algo_time_s: float | None = 0.0
    # slowdown=lognormal_steps: each step of each worker takes exp(N(0, step_sigma^2)) times
    # longer, drawn from (seed, rank, step): no worker is slow for long, any may straggle
    step_sigma: float = 0.0

    @classmethod
    def from_config(cls, node: schema.Compute, m: int, seed: int) -> Compute:
        """The worker speeds of the config's `compute` node among `m` workers, drawn from
        `seed`; a value that cannot be one raises."""
        step_time = _seconds(node.step_time_s, "step_time_s", positive=True)
        algo_time = _seconds(node.algo_time_s, "algo_time_s", positive=False)
        prob = float(node.straggler_prob)
        if not 0 <= prob <= 1:
            raise ValueError(f"compute.straggler_prob must be in [0, 1], got {prob}")
        straggler = float(node.straggler_factor)
        if not straggler >= 1:
            raise ValueError(f"compute.straggler_factor must be >= 1, got {straggler}")
        factors = slowdown_factors(
            node.slowdown,
            m,
            factor=float(node.factor),
            sigma=float(node.sigma),
            seed=seed,
        )
        step_sigma = float(node.sigma) if node.slowdown == "lognormal_steps" else 0.0
        return cls(step_time, tuple(factors), prob, straggler, seed, algo_time, step_sigma)

    def scaled(self, seconds: float, rank: int, step: int) -> float:
        """`seconds` of reference work as `rank` does it at step `step`: times its slowdown, and
        times the straggler factor when this step's draw makes it a straggler."""
        t = seconds * self.slowdown[rank]
        if self.step_sigma > 0:
            t *= math.exp(
                np.random.default_rng([self.seed, rank, step, 0x57E9]).normal(0.0, self.step_sigma)
            )
        if self.straggler_prob > 0:
            draw = np.random.default_rng([self.seed, rank, step]).random()
            if draw < self.straggler_prob:
                t *= self.straggler_factor
        return t

    def step_time(self, rank: int, step: int, measured_s: float) -> float:
        """Modeled duration of `rank`'s local step `step` (measured_s: what it really took)."""
        return self.scaled(measured_s if self.step_time_s is None else self.step_time_s, rank, step)

    def algo_time(self, rank: int, step: int) -> float:
        """Modeled duration of the algorithm's work in `rank`'s local step `step`."""
        if not self.algo_time_s:  # 0, or not calibrated (a clock built outside a run)
            return 0.0
        return self.scaled(self.algo_time_s, rank, step)


class RealClock:
    """Wall-clock time of this worker; optional emulation of the network and the slowdowns."""

    virtual = False

    def __init__(
        self,
        rank: int,
        network: Network,
        compute: Compute,
        emulate_network: bool = False,
        emulate_compute: bool = False,
    ):
        self.rank, self.network, self.compute = rank, network, compute
        self.emulate_network, self.emulate_compute = emulate_network, emulate_compute

    def now(self) -> float:
        return time.perf_counter()

    def local_step(self, step: int, measured_s: float) -> float:
        """Account a local step that took `measured_s`; with emulate_compute, sleep until it
        has taken its modeled time. Returns the step's compute time."""
        if not self.emulate_compute:
            return measured_s
        target = self.compute.step_time(self.rank, step, measured_s)
        if target > measured_s:
            time.sleep(target - measured_s)
        return max(target, measured_s)

    def algo_step(self, step: int) -> float:
        """Nothing modeled: the loop measures the algorithm's work in the hooks themselves."""
        return 0.0

    def duration(self, nbytes: int, m: int) -> float:
        return self.network.collective_time(nbytes, m) if self.emulate_network else 0.0


class VirtualClock:
    """A deterministic per-worker clock (timing.md, "Two clocks"); never sleeps.

    Besides the time `t` it keeps what this worker did with it: `busy_s` (modeled local steps),
    `algo_s` (modeled algorithm work), `steps` and `samples` (local steps whose compute has
    ended, and their samples: the loop adds them); the rest of `t` is waiting (exposed
    communication), so `idle_s = t - busy_s - algo_s` exactly. `watch(old, new, busy)`, when
    set, is called before every advance of the clock, with whether the advance is this
    worker's own work (a step or its algorithm work) or a wait: the time budget's evaluation
    takes the model as it stood at the points that the advance passes (budget.py)."""

    virtual = True
    emulate_compute = False  # it never sleeps

    def __init__(self, rank: int, network: Network, compute: Compute):
        self.rank, self.network, self.compute = rank, network, compute
        self._t = 0.0
        self.busy_s = self.algo_s = 0.0
        self.steps = self.samples = 0
        self.watch: Callable[[float, float, bool], None] | None = None
        # (step, clock at its start, its modeled duration) of the last local step: where in
        # the modeled timeline a collective launched during that step's backward pass starts
        # (algorithms/sync_sgd.py)
        self.last_step: tuple[int, float, float] | None = None

    @property
    def t(self) -> float:
        return self._t

    @t.setter
    def t(self, value: float) -> None:
        """A wait (or a restore) moves the clock."""
        self._move(value, busy=False)

    def _move(self, value: float, busy: bool) -> None:
        if self.watch is not None and value > self._t:
            self.watch(self._t, value, busy)
        self._t = value

    @property
    def idle_s(self) -> float:
        return self._t - self.busy_s - self.algo_s

    def now(self) -> float:
        return self._t

    def work_ends(self, step: int) -> float | None:
        """When step `step`'s modeled compute and algorithm work, started now, will end; None
        when its compute time is each step's measured time (known only once it ran)."""
        if self.compute.step_time_s is None:
            return None
        return (
            self._t
            + self.compute.step_time(self.rank, step, 0.0)
            + self.compute.algo_time(self.rank, step)
        )

    def local_step(self, step: int, measured_s: float) -> float:
        """Advance by the modeled step `step`; returns its duration (time/compute_s)."""
        dt = self.compute.step_time(self.rank, step, measured_s)
        self.last_step = (step, self._t, dt)
        self._move(self._t + dt, busy=True)
        self.busy_s += dt
        self.steps += 1
        return dt

    def algo_step(self, step: int) -> float:
        """Advance by the modeled algorithm work of step `step` (amortised per local step,
        experiments/training/calibrate.py); returns its duration (time/algo_s)."""
        dt = self.compute.algo_time(self.rank, step)
        self._move(self._t + dt, busy=True)
        self.algo_s += dt
        return dt

    def duration(self, nbytes: int, m: int) -> float:
        return self.network.collective_time(nbytes, m)


class DeviceTimer:
    """Seconds on `device`'s clock: `now()` first waits for the work queued on the device, so
    the difference of two readings is the time the device (and the host) spent on the work
    between them, not the time it took to launch it. On the CPU nothing is queued: a plain
    `perf_counter`. On CUDA: `torch.cuda.synchronize` then `perf_counter`, i.e. the timed
    region is synchronised at both ends (what the reference code does around its timers). Every
    reading costs a host-device sync: for measurements off the hot path (the calibration);
    `synchronize` and `clock` are injectable so that the accelerator path is testable here."""

    def __init__(
        self,
        device: Any = "cpu",
        synchronize: Callable[[], None] | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ):
        if synchronize is None:
            import torch

            device = torch.device(device)
            if device.type == "cuda":
                synchronize = partial(torch.cuda.synchronize, device)
        self.synchronize, self.clock = synchronize, clock

    def __call__(self) -> float:
        return self.now()

    def now(self) -> float:
        if self.synchronize is not None:
            self.synchronize()
        return self.clock()


def make_clock(job: schema.Config, rank: int, m: int) -> RealClock | VirtualClock:
    """The clock of worker `rank` of `m` for the typed run config `job` (its `timing`,
    `network`, `compute`, `emulate_network`, `emulate_compute`, `seed`)."""
    network = Network.from_config(job.network)
    compute = Compute.from_config(job.compute, m, job.seed)
    if job.timing == "virtual":
        return VirtualClock(rank, network, compute)
    return RealClock(
        rank,
        network,
        compute,
        emulate_network=job.emulate_network,
        emulate_compute=job.emulate_compute,
    )
