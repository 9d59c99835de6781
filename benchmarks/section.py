"""What every benchmark family (benchmarks/families.py) returns and shares: a `Section` of
`Figure`s, the run sizes (`Settings`), the paper's numbers the figures are set against, and the
statistics of interleaved pairs (`_interleaved`, `_pooled_ratio`, `_step_interval`)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from benchmarks import harness as h

# The Overlap-Local-SGD paper (algorithms.md section 10): communication-to-computation ratio.
PAPER_RATIO_SYNC = 0.346
PAPER_RATIO_OVERLAP_TAU2 = 0.015
# algorithms.md section 10: PowerSGD floats per step on the CIFAR ResNet-18, by rank.
PAPER_POWERSGD_FLOATS = {1: 45_935, 2: 82_260, 4: 154_910, 8: 300_210}
RESNET18_PARAMS = 11_173_962
OVERLAP_METHODS = ("overlap_local_sgd", "cocod_sgd", "osp", "losp")


@dataclass
class Figure:
    """One benchmark figure: a ratio, and its target when the issue sets one."""

    name: str
    value: float
    target: str = ""  # e.g. "<= 1.02"; empty: reported, no target
    limit: float | None = None  # the number in `target`
    exact: bool = False  # the target is equality (closed forms), within 1e-9
    at_least: bool = False  # the target is a lower bound (">= limit"), else an upper one
    # The 95% interval of `value` over its repetitions (harness.bootstrap_interval); None: a
    # figure without repetitions (a count, a closed form, one wall-clock).
    interval: tuple[float, float] | None = field(default=None, kw_only=True)
    # the repetitions (or launches, epochs, steps) the interval is over
    reps: int | None = field(default=None, kw_only=True)

    @property
    def verdict(self) -> str:
        """met: the whole interval meets the target; MISSED: none of it does; within noise:
        the interval straddles the target (without an interval: the value alone decides)."""
        if self.limit is None:
            return "-"
        if self.exact:
            return "met" if abs(self.value - self.limit) <= 1e-9 else "MISSED"
        low, high = self.interval if self.interval is not None else (self.value, self.value)
        if self.at_least:
            low, high = -high, -low
            limit = -self.limit
        else:
            limit = self.limit
        if high <= limit:
            return "met"
        if low > limit:
            return "MISSED"
        return "within noise"

    @property
    def interval_text(self) -> str:
        if self.interval is None:
            return ""
        low, high = self.interval
        return f"[{low:.4g}, {high:.4g}] (n={self.reps})"


@dataclass
class Section:
    key: str
    title: str
    about: str  # how the figures are measured
    columns: list[str]
    rows: list[list] = field(default_factory=list)
    figures: list[Figure] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass
class Settings:
    """Sizes of the runs: the full benchmark, or the smoke mode of the tests (`--smoke`: a few
    steps per run, no figure a measurement)."""

    smoke: bool = False
    device: str = "cpu"  # cpu | cuda (NCCL for the DDP comparison and CUDA memory)
    reps: int = 5  # interleaved repetitions of each A/B pair (at least)
    # Headline pairs repeat until their 95% interval is within +-HALF_WIDTH of the figure, up
    # to this many repetitions.
    max_reps: int = 12

    @property
    def backend(self) -> list[str]:
        """Overrides of every timed run. On a GPU machine the CPU figures must stay CPU
        figures: gloo unless --device cuda. One intra-op thread per worker: with the suite's
        default (cores / workers) a single worker gets 2 OpenMP threads, and on a shared
        2-core machine its steps then wait for a descheduled sibling thread (measured: up to
        6x slower per step under load), which would measure the neighbours, not the suite."""
        if self.device == "cuda":
            return cuda_placement(MAX_WORKERS)
        return ["cluster.backend=gloo", "threads_per_worker=1"]

    def timed(self) -> list[str]:
        """The workload of the timing benchmarks: the cpu scale (digits, ResNet-18 width 8,
        4 workers, batch 32), or a tiny one in smoke mode (on either device)."""
        if self.smoke:
            return ["dataset=synthetic", "dataset.num_train=256", "model=tiny_cnn", "workers=2"]
        if self.device == "cuda":
            return [
                "dataset=synthetic",
                "dataset.channels=3",
                "dataset.image_size=32",
                "dataset.num_train=16384",
                "model.width=64",
                "batch_size=128",
                "workers=4",
            ]
        if self.smoke:
            return ["dataset=synthetic", "dataset.num_train=256", "model=tiny_cnn", "workers=2"]
        return ["dataset=digits", "model=resnet18", "model.width=8", "workers=4"]


OVERLAP_SEEDS = 3  # pairs of runs per overlap figure (their interval: within +-1% measured)
MAX_WORKERS = 4  # the most workers of one timed run (the scaling family aside)


def cuda_placement(workers: int) -> list[str]:
    """Overrides that place `workers` workers on this machine's GPUs (experiments/workers/dist.py,
    place): one GPU each with NCCL when there are enough, else gloo on CUDA tensors with as
    many workers per GPU as needed (a one-GPU machine runs every family that way)."""
    import torch

    gpus = max(1, torch.cuda.device_count())
    share = -(-workers // gpus)
    if share == 1:
        return ["cluster.backend=nccl", "cluster.device=cuda"]
    return ["cluster.backend=gloo", "cluster.device=cuda", f"cluster.workers_per_gpu={share}"]


Context = dict  # what one family leaves for another (the measured compute step)


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f}"


def _fmt_ratio(x: float) -> str:
    return f"{x:.3f}"


HALF_WIDTH = 0.02  # the headline figures' 95% interval: within +-2% of the figure


def _interleaved(
    a: Callable[[], object],
    b: Callable[[], object],
    reps: int,
    *,
    max_reps: int | None = None,
    spread: Callable[[list, list], float] | None = None,
    budget_s: float | None = None,
    clock: Callable[[], float] = time.perf_counter,
):
    """A B, B A, A B, ...: `reps` measurements of each, alternating which goes first so that
    a drift of the machine's load does not favour either side; then, with `spread` (the
    relative half-width of the figure's interval from the lists so far), more pairs until it
    is within HALF_WIDTH or `max_reps` pairs were made. `budget_s`: no further pair once one
    more, as long as the mean pair so far, would end past `budget_s` seconds (of `clock`)
    after the start (the quick bench's rows; the first `reps` pairs are always made).
    Returns the two lists."""
    xs, ys = [], []
    rep = 0
    start = clock()
    while True:
        if rep % 2 == 0:
            xs.append(a())
            ys.append(b())
        else:
            ys.append(b())
            xs.append(a())
        rep += 1
        if rep < reps:
            continue
        if spread is None or max_reps is None or rep >= max_reps:
            return xs, ys
        if spread(xs, ys) <= HALF_WIDTH:
            return xs, ys
        if budget_s is not None and (clock() - start) * (rep + 1) / rep > budget_s:
            return xs, ys


def _pooled_ratio(pairs: list) -> float:
    """Median of every epoch of side A over that of side B (lists of per-rep epoch times)."""
    a = h.median(x for rep, _ in pairs for x in rep)
    b = h.median(y for _, rep in pairs for y in rep)
    return a / b


def _pair_spread(xs: list, ys: list) -> float:
    pairs = list(zip(xs, ys, strict=True))
    return h.half_width(h.bootstrap_interval(pairs, _pooled_ratio), _pooled_ratio(pairs))


def _step_interval(per_launch: list[dict], a: str, b: str) -> tuple[float, float]:
    """95% interval of the step-level figure (geometric mean over launches of the 10th
    percentile ratio), each launch's step times of each side resampled on their own."""
    import random

    rng = random.Random(0)
    q = h.low_quantile
    values = []
    for _ in range(h.BOOTSTRAP):
        ratios = []
        for t in per_launch:
            ta, tb = t[a], t[b]
            ratios.append(q(rng.choices(ta, k=len(ta))) / q(rng.choices(tb, k=len(tb))))
        values.append(h.geomean(ratios))
    values.sort()
    tail = (1 - h.CONFIDENCE) / 2
    return values[int(tail * (h.BOOTSTRAP - 1))], values[int((1 - tail) * (h.BOOTSTRAP - 1))]


def finite_positive(x: float) -> bool:
    return isinstance(x, int | float) and math.isfinite(x) and x > 0
