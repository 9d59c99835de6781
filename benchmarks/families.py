"""The six benchmark families. Each returns a `Section`: its table, its figures (ratios, each
measured side by side in this invocation) and the notes that explain them.

    overhead  sync_sgd vs DistributedDataParallel; local_sgd (tau = 1000) vs plain training
    overlap   overlap methods under an emulated network sized to one compute step, vs ideal
    volume    bytes per step of every algorithm vs its closed form; PowerSGD compression
    memory    peak memory per worker vs plain training; model-sized copies held
    clock     timing=virtual vs timing=real, wall-clock per step
    scaling   steps per second with 1, 2, 4 and 8 workers on this machine
    sim       workers in one process (cluster=sim): fixed cost of a run, throughput vs one model
    workflows `make demo` and `make table1 SCALE=cpu CLUSTER=sim`, end to end
    bad_input `python run.py algorithm=nope` and `tau=0`: the one-line error without torch
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from analysis.load import ALGORITHMS  # the README's order, baseline first
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


# ---------------------------------------------------------------------------------------------
# 1. overhead


def overhead(s: Settings, ctx: Context) -> Section:
    sec = Section(
        "overhead",
        "1. Overhead against plain PyTorch",
        "Time per training step (data + forward/backward/step + communication; start-up and "
        "evaluation excluded) of the suite (`run.py`: `time/train_s` per step, from its "
        "metrics row after every epoch) and of a plain PyTorch script on the same composed "
        "config (`benchmarks/baselines.py`: same model, data, shards, batch, seeds, optimizer, "
        "LR schedule, steps and threads per worker, timed over the same phases). Runs "
        "interleaved A B / B A; per side, the median over all epochs of all repetitions "
        "(epoch 1, the warm-up, left out on both sides), which a passing burst of the "
        "neighbours' load does not move; figure = ratio of the two medians.",
        [
            "comparison",
            "workload",
            "suite ms/step",
            "baseline ms/step",
            "ratio",
            "95% interval",
            "per rep",
            "target",
        ],
    )
    # ~11 steps per epoch and worker (short epochs are noisy); 1 worker: ~45 steps per epoch
    o = overhead_pairs(s, ctx, epochs=2 if s.smoke else 16, epochs1=2 if s.smoke else 16)
    common, single, comp_s, comm_share = o.common, o.single, o.comp_s, o.comm_share
    pairs = [o.sync, o.local]
    if s.smoke:  # not a measurement: both pairs at once
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(3) as pool:
            if s.device == "cpu":
                pool.submit(_step_level, s, ctx, 8)
            (sync_xy, local_xy) = pool.map(lambda ab: _interleaved(*ab, s.reps), pairs)
    else:  # headline rows: repeated until their interval is within +-2% (or max_reps)
        sync_xy, local_xy = (
            _interleaved(a, b, s.reps, max_reps=s.max_reps, spread=_pair_spread) for a, b in pairs
        )
    ctx["compute_step_s"] = h.median(comp_s)
    _pair(sec, "sync_sgd / DDP", common, sync_xy, "<= 1.02", 1.02)
    sec.notes.append(
        f"sync_sgd: exposed communication is {h.median(comm_share):.0%} of its training time "
        "(gloo all-reduce of the gradients on loopback). DDP runs with BatchNorm buffers local "
        "(`forward_sync_buffers=False`), as the suite's sync_sgd; on this small model DDP's "
        "gradients fit in one bucket, so neither side overlaps the all-reduce with backward."
    )
    _pair(sec, "local_sgd tau=1000 / plain single process", single, local_xy, "<= 1.02", 1.02)

    if s.device == "cpu":
        w8 = _step_level(s, ctx, 8)
        _step_row(sec, "step level: SyncSGD hooks / DDP (same processes)", w8, "sync_real", "ddp")
        if not s.smoke:
            w64 = _step_level(s, ctx, 64)
            _step_row(
                sec,
                "step level: SyncSGD hooks / DDP (same processes)",
                w64,
                "sync_real",
                "ddp",
                target="<= 1.00",  # issue 15: bucketed during backward, as DDP
            )
            _step_row(
                sec,
                "step level: SyncSGD, one average after backward (bucket_mb=0) / DDP",
                w64,
                "sync_flat",
                "ddp",
                target="",  # the contrast: the suite before issue 15
            )
        sec.notes.append(
            "Step level (`benchmarks/steps.py`): DDP and the suite's SyncSGD hooks on `Comm` in "
            "the same gloo processes, alternating blocks of steps, each step timed, medians "
            "and 10th percentiles per launch (two launches at width 8, three at width 64, ratios "
            "in the `per rep` column; the interval resamples each launch's steps; "
            "figure = their geometric mean; interference only adds time to a step: the medians "
            "of two launches differed by up to 8%, the 10th percentiles by 2%): both sides see the "
            "same load. 2 workers of one thread, one per core: with 4 workers on 2 cores the "
            "same ratio swung between 0.97 and 1.07 from one launch to the next (measured), as "
            "the scheduler interleaved the processes. It covers the step and its communication, "
            "not the loop (that is the local_sgd / plain row). Compute floor (no communication) "
            f"in the same processes: {_ms(h.median(w8['times']['plain']))} ms/step."
        )
        sec.notes.append(WIDE_MODEL_NOTE)
    return sec


@dataclass
class OverheadPairs:
    """The overhead rows' two A/B pairs: each side a callable that makes one run and returns
    its per-epoch step times (epoch 1 left out)."""

    common: list[str]  # the 4-worker workload of sync_sgd / DDP
    single: list[str]  # the 1-worker workload of local_sgd / plain
    sync: tuple[Callable[[], list[float]], Callable[[], list[float]]]  # suite sync_sgd, DDP
    local: tuple[Callable[[], list[float]], Callable[[], list[float]]]  # local_sgd, plain
    comp_s: list[float] = field(default_factory=list)  # sync_sgd runs: compute s per step
    comm_share: list[float] = field(default_factory=list)  # and exposed comm / train time


def overhead_pairs(s: Settings, ctx: Context, epochs: int, epochs1: int) -> OverheadPairs:
    """sync_sgd against DDP on the timed workload (`epochs` epochs, evaluated after each), and
    the loop's own overhead: one worker, no communication (tau beyond the run's length),
    against plain single-process training (`epochs1` epochs). Shared by the overhead family
    and the quick bench (benchmarks/quick.py), so both measure the same workloads."""
    common = [*s.backend, *s.timed(), f"epochs={epochs}", "eval_every=1"]
    one = [o for o in s.timed() if not o.startswith("workers=")]
    single = [*s.backend, *one, "workers=1", f"epochs={epochs1}", "eval_every=1"]
    comp_s: list[float] = []
    comm_share: list[float] = []

    def suite_sync() -> list[float]:
        (run,) = h.suite([*common, "algorithm=sync_sgd"])
        comp_s.append(run.summary["time/compute_s"] / run.steps)
        comm_share.append(run.summary["time/comm_exposed_s"] / run.summary["time/train_s"])
        ctx.setdefault("model_bytes", run.summary["comm/bytes"] // run.steps)
        return run.epoch_step_s()

    def ddp() -> list[float]:
        return _baseline_epochs("ddp", [*common, "algorithm=sync_sgd"], s.device)

    def suite_local() -> list[float]:
        (run,) = h.suite([*single, "algorithm=local_sgd", "tau=1000"])
        return run.epoch_step_s()

    def plain() -> list[float]:
        return _baseline_epochs("single", single, s.device)

    return OverheadPairs(
        common, single, (suite_sync, ddp), (suite_local, plain), comp_s, comm_share
    )


WIDE_MODEL_NOTE = (
    "On the full-width ResNet-18 (width 64, 11.2 M parameters, 45 MB of gradients) DDP splits "
    "the gradients into buckets (1 MB first, then up to 25 MB) and starts each bucket's "
    "all-reduce while backward still runs; the suite's sync_sgd does the same since issue 15 "
    "(`algorithm.bucket_mb`, default 25: gradient-ready hooks launch each complete bucket's "
    "non-blocking average, `before_step` waits for them), which is what this row compares "
    "(target <= 1.00: at DDP's speed). Before, sync_sgd averaged all gradients in one "
    "collective after backward and trailed DDP by 1-7% per launch on this row. At width 8 the "
    "gradients are one bucket (0.7 MB) for both."
)


def _step_level(s: Settings, ctx: Context, width: int) -> dict:
    """Per-step times of the sides of benchmarks/steps.py on ResNet-18 of `width` (smoke: the
    tiny CNN), 2 gloo workers of one thread (one per core: 4 workers on 2 cores made the same
    comparison swing between 0.97 and 1.07 from one launch to the next, as the scheduler
    interleaved them); two launches pooled. Measured once per invocation, shared by
    families."""
    key = f"steps_w{width}"
    with ctx.setdefault(f"lock_{key}", threading.Lock()):  # smoke mode: families in threads
        if key not in ctx:
            ctx[key] = _measure_steps(s, width)
    return ctx[key]


def _measure_steps(s: Settings, width: int) -> dict:
    from benchmarks import steps

    if s.smoke:
        model, block, blocks, workers = {"name": "tiny_cnn", "width": 8}, 2, 2, 2
    elif width == 8:
        model, block, blocks, workers = {"name": "resnet18", "width": 8}, 5, 30, 2
    else:  # 3 launches of 16 blocks: the interval of the <= 1.00 row within a few percent
        model, block, blocks, workers = {"name": "resnet18", "width": width}, 3, 16, 2
    spec = {
        "model": model,
        "channels": 1 if width == 8 else 3,
        "image_size": 8,
        "batch_size": 32,
        "block": block,
        "blocks": blocks,
        "sides": list(steps.SIDES) if width == 8 else ["ddp", "sync_real", "sync_flat"],
    }
    launches = 1 if s.smoke else (2 if width == 8 else 3)
    times: dict[str, list[float]] = {}
    per_launch = []
    for _ in range(launches):
        measured = steps.measure(spec, workers)
        per_launch.append(measured)
        for side, t in measured.items():
            times.setdefault(side, []).extend(t)
    return {"times": times, "workers": workers, "model": model, "per_launch": per_launch}


def _step_row(
    sec: Section, name: str, level: dict, a: str, b: str, target: str = "<= 1.02"
) -> None:
    """A row and figure of the step-level harness: side a / side b, 10th percentiles of the
    step times (medians for context), per launch; figure = geometric mean of the launches'
    ratios (each is side by side; two launches run at different absolute speeds)."""
    ta, tb = level["times"][a], level["times"][b]
    q = h.low_quantile
    ratio = h.geomean(q(t[a]) / q(t[b]) for t in level["per_launch"])
    interval = _step_interval(level["per_launch"], a, b)
    model = level["model"]
    workload = f"{model['name']} width {model['width']}, {level['workers']} workers, batch 32"
    sec.rows.append(
        [
            name,
            workload,
            f"{_ms(q(ta))} (median {_ms(h.median(ta))})",
            f"{_ms(q(tb))} (median {_ms(h.median(tb))})",
            _fmt_ratio(ratio),
            f"[{interval[0]:.4g}, {interval[1]:.4g}]",
            ", ".join(_fmt_ratio(q(t[a]) / q(t[b])) for t in level["per_launch"])
            + f" ({len(ta)} steps each)",
            target,
        ]
    )
    limit = float(target.split()[-1]) if target else None
    figure = Figure(f"{name} ({workload}), time per step", ratio, target, limit, interval=interval)
    figure.reps = len(ta)
    sec.figures.append(figure)


def _baseline_epochs(mode: str, overrides: list[str], device: str) -> list[float]:
    r = h.baseline(mode, overrides, device=device)
    return h.per_interval(r["rows"], [e["time/train_s"] for e in r["rows"]], skip_first=True)


def _pair(sec: Section, name: str, overrides, xy, target: str, limit: float) -> None:
    """One A/B row: lists of per-epoch step times per repetition, pooled into medians."""
    xs, ys = xy
    a, b = h.median(x for rep in xs for x in rep), h.median(y for rep in ys for y in rep)
    ratio = a / b
    pairs = list(zip(xs, ys, strict=True))
    interval = h.bootstrap_interval(pairs, _pooled_ratio)
    per_rep = ", ".join(_fmt_ratio(h.median(x) / h.median(y)) for x, y in pairs)
    workload = " ".join(o for o in overrides if not o.startswith(("cluster", "threads", "eval")))
    figure = Figure(name + ", time per step", ratio, target, limit, interval=interval)
    figure.reps = len(pairs)
    sec.rows.append(
        [name, workload, _ms(a), _ms(b), _fmt_ratio(ratio), figure.interval_text, per_rep, target]
    )
    sec.figures.append(figure)


# ---------------------------------------------------------------------------------------------
# 2. overlap


def overlap(s: Settings, ctx: Context) -> Section:
    sec = Section(
        "overlap",
        "2. Overlap efficiency",
        "Each algorithm at tau = 2 runs twice, back to back in one Hydra multirun: with "
        "`emulate_network=true` on a network whose modeled all-reduce of the model takes one "
        "compute step (latency 0, bandwidth sized for T = step), and with the same network not "
        "emulated (= `network=ideal`). The compute step is fixed with `emulate_compute=true` "
        "and `compute.step_time_s` (each step sleeps to that duration; the real step is a few "
        "times shorter): on 2 shared cores a measured step changes with the load and with "
        "whether the other workers are computing or waiting, so a T sized to it would not be "
        "one step. 2 workers, one core each. Figure: time per step emulated / ideal "
        "(`time/train_s` / `steps`), medians over seeds 0, 1, 2 (one emulated and one ideal "
        "run each: the interval is over the seeds' pairs). The communication-to-computation "
        "ratio is "
        "`time/comm_exposed_s` / `time/compute_s` of the emulated run.",
        [
            "algorithm",
            "ideal ms/step",
            "emulated ms/step",
            "ratio",
            "95% interval",
            "T / compute step",
            "comm/comp (emulated)",
            "paper comm/comp",
            "target",
        ],
    )
    epochs, step_s = (2, 0.01) if s.smoke else (6, 0.04)
    workers = 2
    common, bandwidth_gbps, nbytes = overlap_overrides(s, epochs, step_s, workers)
    algos = ["overlap_local_sgd"] if s.smoke else ["sync_sgd", "local_sgd", *OVERLAP_METHODS]
    seeds = 1 if s.smoke else OVERLAP_SEEDS
    points = [f"seed={','.join(str(i) for i in range(seeds))}", f"algorithm={','.join(algos)}"]
    runs = [
        *h.suite([*not_emulated(common), *points, "emulate_network=false"], multirun=True),
        *h.suite([*common, *points, "emulate_network=true"], multirun=True),
    ]
    for name in algos:
        pairs = [
            (
                h.pick(runs, algorithm__name=name, emulate_network=True, seed=seed)[0].step_s,
                h.pick(runs, algorithm__name=name, emulate_network=False, seed=seed)[0].step_s,
            )
            for seed in range(seeds)
        ]
        (ideal,) = h.pick(runs, algorithm__name=name, emulate_network=False, seed=0)
        (emul,) = h.pick(runs, algorithm__name=name, emulate_network=True, seed=0)

        def seed_ratio(ps: list) -> float:
            return h.median(e for e, _ in ps) / h.median(i for _, i in ps)

        ratio = seed_ratio(pairs)
        interval = h.bootstrap_interval(pairs, seed_ratio) if seeds > 1 else None
        comm_comp = emul.summary["comm/ratio"]
        t_over_step = step_s / (ideal.summary["time/compute_s"] / ideal.steps)
        if name in OVERLAP_METHODS:
            target, limit = "<= 1.05", 1.05
        elif name == "local_sgd":
            target, limit = "~1.5 (contrast)", None
        else:
            target, limit = "~2 (contrast)", None
        paper = {"sync_sgd": PAPER_RATIO_SYNC, "overlap_local_sgd": PAPER_RATIO_OVERLAP_TAU2}
        sec.rows.append(
            [
                name,
                _ms(ideal.step_s),
                _ms(emul.step_s),
                _fmt_ratio(ratio),
                f"[{interval[0]:.4g}, {interval[1]:.4g}] (n={seeds})" if interval else "",
                f"{t_over_step:.2f}",
                f"{comm_comp:.1%}",
                f"{paper[name]:.1%}" if name in paper else "",
                target,
            ]
        )
        figure = Figure(f"{name} tau=2, emulated / ideal step time", ratio, target, limit)
        figure.interval, figure.reps = interval, seeds
        sec.figures.append(figure)
        if name in paper:
            sec.figures.append(
                Figure(f"{name} comm/comp ratio, emulated (paper {paper[name]:.1%})", comm_comp)
            )
    sec.notes.append(
        f"Emulated network: latency 0, {bandwidth_gbps:.3g} Gbps, so that the ring all-reduce of "
        f"the model ({nbytes:,} bytes, {workers} workers) takes T = {step_s * 1e3:.0f} ms = "
        "`compute.step_time_s`; `T / compute step` is T over the compute step the ideal run "
        "measured (1 when no real step overran the emulated one). The paper's ratios are for "
        "T of about 0.35 compute steps (34.6% for fully synchronous SGD on 40 Gbps Ethernet); "
        "here T is a whole step, so sync_sgd must show about 100% and local_sgd at tau = 2 "
        "about 50%; the overlap methods have tau = 2 steps to hide T in."
    )
    return sec


def overlap_overrides(
    s: Settings, epochs: int, step_s: float, workers: int = 2
) -> tuple[list[str], float, int]:
    """The overlap rows' workload at tau = 2 (algorithm, seed and `emulate_network` left to
    the caller): `workers` workers of one core, the compute step fixed at `step_s` seconds,
    evaluated once at the end, on a network whose modeled all-reduce of the model takes one
    compute step. Returns (overrides, its bandwidth in Gbps, the model's bytes). Shared by the
    overlap family and the quick bench (benchmarks/quick.py)."""
    workload = [o for o in s.timed() if not o.startswith("workers=")] + [f"workers={workers}"]
    common = [*s.backend, *workload, f"epochs={epochs}", f"eval_every={epochs}"]
    nbytes = _model_bytes(common)
    # ring all-reduce, latency 0: T = 2 (m - 1) / m * n / B  ->  B for T = one compute step
    bandwidth_gbps = 2 * (workers - 1) / workers * nbytes * 8 / (step_s * 1e9)
    overrides = [
        *common,
        "tau=2",
        "emulate_compute=true",
        f"compute.step_time_s={step_s}",
        "network.latency_s=0",
        f"network.bandwidth_gbps={bandwidth_gbps:.6g}",
    ]
    return overrides, bandwidth_gbps, nbytes


def not_emulated(overrides: list[str]) -> list[str]:
    """`overrides` for the side without the emulated network: run.py refuses `network.*`
    keys on the real clock without emulate_network=true (they would have no effect), so that side
    leaves them out; it trains as on `network=ideal` either way."""
    return [o for o in overrides if not o.startswith("network.")]


def _model_bytes(overrides: list[str]) -> int:
    """fp32 bytes of the parameters of the model that `overrides` train."""
    from benchmarks.baselines import compose
    from experiments.data.datasets import load_dataset
    from experiments.training.models import build_model

    cfg = compose([o for o in overrides if not o.startswith("cluster.")])
    data = load_dataset(cfg["dataset"])
    model = build_model(cfg["model"], data.in_channels, data.num_classes)
    return 4 * sum(p.numel() for p in model.parameters() if p.requires_grad)


# ---------------------------------------------------------------------------------------------
# 3. volume


def closed_form_bytes(
    name: str,
    steps: int,
    tau: int,
    n: int,
    powersgd_floats: int,
    fragment_sizes: Sequence[int] = (),
) -> tuple:
    """(total bytes a worker hands to collectives in a run of `steps` steps evaluated only at
    the end, the formula) from algorithms.md and the algorithms' docstrings (fp32).
    `fragment_sizes`: the values of each of Streaming DiLoCo's fragments (its default 2)."""
    rounds, partial = steps // tau, int(steps % tau != 0)
    if name in ("sync_sgd", "pseudo_sync"):
        return 4 * n * steps, "4n per step"
    if name == "powersgd":
        return 4 * powersgd_floats * steps, "4 (sum (rows+cols) r' + 1-D numel) per step"
    if name in ("local_sgd", "bmuf", "slowmo", "diloco", "easgd", "eamsgd"):
        return 4 * n * (rounds + partial), "4n per round (+1 closing a partial round)"
    if name == "streaming_diloco":
        # Its defaults at tau = 2: no delay (tau // fragments < 2), so fragment p is sent after
        # the steps s_p + k tau, s_p = max(1, (p + 1) tau // P), and once more in finish() when
        # steps followed its last sync.
        values = 0
        for p, size in enumerate(fragment_sizes):
            offset = max(1, (p + 1) * tau // len(fragment_sizes))
            syncs = [t for t in range(1, steps + 1) if t % tau == offset % tau]
            values += size * (len(syncs) + int(not syncs or syncs[-1] < steps))
        return 4 * values, "4 n_p per sync of fragment p, + finish() for each one with progress"
    if name in ("cocod_sgd", "overlap_local_sgd"):
        return 4 * n * (rounds + 1), "4n per round, +1 exact average in finish()"
    if name in ("osp", "losp"):
        return 4 * (n + 1) * (rounds + 1), "4(n+1) per push (flag), rounds + 1 push in finish()"
    raise ValueError(name)


def volume(s: Settings, ctx: Context) -> Section:
    import torch

    from algorithms.powersgd import floats_per_step
    from algorithms.streaming_diloco import split_fragments
    from experiments.training.models import build_model

    sec = Section(
        "volume",
        "3. Communication volume",
        "`comm/bytes` of a run through `run.py` (virtual clock with a fixed 10 ms step and "
        "`network=ideal`, so that OSP/LOSP windows are empty and every count is deterministic) "
        "against the closed form for the same number of steps. Figure: measured / closed form "
        "(target: exactly 1). PowerSGD's compression is 4n / its bytes per step.",
        [
            "algorithm",
            "steps",
            "collectives",
            "bytes/step measured",
            "bytes/step closed form",
            "measured / closed",
            "closed form",
            "floats/step",
            "compression",
            "paper",
        ],
    )
    if s.smoke:
        model = ["model=tiny_cnn", "dataset.channels=1"]
        algos, ranks = ["powersgd"], [1]
        width, name, channels = None, "tiny_cnn", 1
    else:  # the CIFAR ResNet-18 (11,173,962 parameters) on 3x8x8 inputs: same parameters
        model = ["model=resnet18", "model.width=64", "dataset.channels=3"]
        algos, ranks = list(ALGORITHMS), [1, 2, 4, 8]
        width, name, channels = 64, "resnet18", 3
    common = [
        *s.backend,
        *model,
        "dataset=synthetic",
        "dataset.image_size=8",
        "dataset.num_train=128",
        "dataset.num_test=64",
        f"workers={1 if s.smoke else 2}",
        "batch_size=32",
        "epochs=2",
        "eval_every=2",
        "tau=2",
        "timing=virtual",
        "network=ideal",
        "compute.step_time_s=0.01",
    ]
    runs = h.suite([*common, f"algorithm={','.join(algos)}"], multirun=True)
    if len(ranks) > 1:
        more = ",".join(str(r) for r in ranks if r != 1)
        runs += h.suite([*common, "algorithm=powersgd", f"algorithm.rank={more}"], multirun=True)

    torch.manual_seed(0)
    net = build_model({"name": name, "width": width or 8}, channels, 10)
    shapes = [tuple(p.shape) for p in net.parameters() if p.requires_grad]
    n = sum(p.numel() for p in net.parameters() if p.requires_grad)
    groups = split_fragments([math.prod(shape) for shape in shapes], 2)  # streaming_diloco's
    fragments = [sum(math.prod(shapes[i]) for i in group) for group in groups]
    for algo in algos:
        for rank in ranks if algo == "powersgd" else [None]:
            want = {"algorithm__name": algo}
            if rank is not None:
                want["algorithm__rank"] = rank
            (run,) = h.pick(runs, **want)
            steps, measured = run.steps, run.summary["comm/bytes"]
            fps = floats_per_step(shapes, rank or 1)
            expected, formula = closed_form_bytes(algo, steps, 2, n, fps, fragments)
            label = algo if rank is None else f"powersgd rank {rank}"
            floats = measured / 4 / steps
            compression = 4 * n * steps / measured if algo == "powersgd" else None
            paper = ""
            if algo == "powersgd" and n == RESNET18_PARAMS and rank in PAPER_POWERSGD_FLOATS:
                pf = PAPER_POWERSGD_FLOATS[rank]
                paper = f"{pf:,} floats, {RESNET18_PARAMS / pf:.0f}x"
            ratio = measured / expected
            sec.rows.append(
                [
                    label,
                    steps,
                    run.summary.get("comm/collectives", ""),
                    f"{measured / steps:,.0f}",
                    f"{expected / steps:,.0f}",
                    f"{ratio:.6f}",
                    formula,
                    f"{floats:,.0f}",
                    f"{compression:.1f}x" if compression else "",
                    paper,
                ]
            )
            sec.figures.append(
                Figure(f"{label}: bytes measured / closed form", ratio, "= 1", 1.0, True)
            )
            if compression:
                sec.figures.append(Figure(f"{label}: compression vs sync_sgd", compression))
    sec.notes.append(
        f"Model: {name}{'' if width is None else f' width {width}'}, n = {n:,} parameters "
        f"(4n = {4 * n:,} bytes), {1 if s.smoke else 2} worker(s), tau = 2, batch 32. Bytes "
        "are the payload this worker hands to collectives (the ledger); the virtual clock's "
        "launch times (a few slots per worker riding in a blocking collective's buffer, or "
        "a small all-reduce next to a non-blocking one) are not payload."
    )
    return sec


# ---------------------------------------------------------------------------------------------
# 4. memory


def memory(s: Settings, ctx: Context) -> Section:
    from benchmarks import memory as mem

    sec = Section(
        "memory",
        "4. Memory per worker",
        "In-process harness (`benchmarks/memory.py`, 2 gloo workers; run.py records no memory "
        "figures): each worker first trains plain steps (forward/backward/SGD step, no "
        "algorithm), then the same model under the algorithm's hooks for 4 steps at tau = 2 and "
        "`finish()`. Peak RSS (VmHWM, reset before each algorithm) of the plain phase is the "
        "yardstick. `held` = model-sized copies the algorithm keeps between steps (distinct "
        "tensor storages reachable from it, excluding the model's parameters, gradients and "
        "the optimizer's momentum), counted exactly.",
        [
            "algorithm",
            "plain peak MiB",
            "peak MiB",
            "peak / plain",
            "extra peak (model copies)",
            "held (model copies)",
            "held, by design",
        ],
    )
    algos = ["sync_sgd", "overlap_local_sgd"] if s.smoke else list(ALGORITHMS)
    model = memory_model(s)
    specs = [memory_spec(s, name) for name in algos]
    results = mem.measure(specs, workers=2)
    mib = 2**20
    for name, by_rank in zip(algos, results, strict=True):
        r = max(by_rank, key=lambda x: x["peak"] - x["plain"])  # the worst worker
        ratio = r["peak"] / r["plain"]
        extra = (r["peak"] - r["plain"]) / r["model_bytes"]
        held = r["held"] / r["model_bytes"]
        sec.rows.append(
            [
                name,
                f"{r['plain'] / mib:.0f}",
                f"{r['peak'] / mib:.0f}",
                f"{ratio:.3f}",
                f"{extra:.2f}",
                f"{held:.2f}",
                HELD_BY_DESIGN[name],
            ]
        )
        sec.figures.append(Figure(f"{name}: peak memory / plain training", ratio))
    label = f"{model['name']} width {model['width']}"
    sec.notes.append(
        f"Model: {label}, {results[0][0]['model_bytes'] / mib:.1f} MiB of fp32 parameters; "
        "batch 32 of 3x8x8 inputs, so activations are small and the model-sized buffers "
        "dominate the difference. `extra peak` includes transient buffers (flattened copies "
        "made during a sync); `held` counts only what survives between steps."
    )
    return sec


def memory_model(s: Settings) -> dict:
    """The memory rows' model: the CIFAR ResNet-18 (the tiny CNN in smoke mode)."""
    return {"name": "tiny_cnn", "width": 8} if s.smoke else {"name": "resnet18", "width": 64}


def memory_spec(s: Settings, algorithm: str) -> dict:
    """One algorithm's measurement of benchmarks/memory.py: 2 plain steps, then 4 steps of the
    algorithm at tau = 2, batch 32 of 3x8x8 inputs. Shared by the memory family and the quick
    bench (benchmarks/quick.py)."""
    return {
        "device": s.device,
        "channels": 3,
        "image_size": 8,
        "classes": 10,
        "model": memory_model(s),
        "algorithm": algorithm,
        "options": {},
        "tau": 2,
        "batch_size": 32,
        "plain_steps": 2,
        "steps": 4,
    }


#: What each algorithm must keep between steps (its docstring's state), in model copies.
HELD_BY_DESIGN = {
    "sync_sgd": "0",
    "local_sgd": "0",
    "bmuf": "2 (outer model z, block momentum)",
    "slowmo": "2 (outer model z, slow momentum)",
    "diloco": "2 (outer model z, outer Nesterov momentum)",
    "streaming_diloco": "2-3 (outer model z, outer momentum; a fragment in flight)",
    "powersgd": "~1 (error memories of the matrices, Q)",
    "easgd": "1-2 (centre; next centre in flight)",
    "eamsgd": "1-2 (centre; next centre in flight)",
    "cocod_sgd": "2-3 (snapshot, average; next in flight)",
    "overlap_local_sgd": "2-3 (anchor, anchor momentum; next in flight)",
    "pseudo_sync": "2-3 (S, G; next in flight)",
    "osp": "2-3 (global model, base; push in flight)",
    "losp": "2-3 (global model, base; push in flight)",
}


# ---------------------------------------------------------------------------------------------
# 5. virtual clock


def clock(s: Settings, ctx: Context) -> Section:
    sec = Section(
        "clock",
        "5. Virtual-clock overhead",
        "sync_sgd (one collective per step: the worst case for the clock's bookkeeping) with "
        "`timing=virtual` and with `timing=real` (no emulation), alternating in one Hydra "
        "multirun (one seed per pair). The virtual run's `time/train_s` is modeled, so both "
        "are timed from outside: the parent watches `metrics.jsonl` (every 4 ms) and takes the "
        "wall-clock between consecutive rows (one per epoch) minus the evaluation time between "
        "them, per step. Per seed, virtual / real of the medians over the epochs; figure = "
        "the geometric mean over the seeds. On the CPU 2 workers of one thread, one per core: "
        "with 4 workers on 2 cores one seed's pair alone moved the figure from 0.99 to 1.05 "
        "(measured), which is the scheduler, not the clock.",
        ["clock", "wall ms/step (median)", "per seed", "ratio", "target"],
    )
    epochs = 3 if s.smoke else 7
    reps = 1 if s.smoke else max(1, s.reps - 1)
    workload = s.timed()
    if s.device == "cpu" and not s.smoke:
        workload = [o if not o.startswith("workers=") else "workers=2" for o in workload]
    if s.smoke:  # epochs of ~30 steps: metrics rows further apart than the watch's 4 ms
        workload = [*workload, "dataset.num_train=2048"]
    runs = h.suite(
        [
            *s.backend,
            *workload,
            "algorithm=sync_sgd",
            f"epochs={epochs}",
            "eval_every=1",
            f"seed={','.join(str(i) for i in range(reps))}",
            "timing=real,virtual",
        ],
        multirun=True,
        watch=True,
    )

    def by_seed(timing: str) -> list[h.Run]:
        return sorted(h.pick(runs, timing=timing), key=lambda r: r.config["seed"])

    # An interval shorter than the watch's resolution reads as <= 0 s per step (seen in smoke
    # mode, a few steps per epoch): not a time, left out.
    real = [[x for x in r.epoch_wall_step_s() if x > 0] for r in by_seed("real")]
    virtual = [[x for x in r.epoch_wall_step_s() if x > 0] for r in by_seed("virtual")]
    pairs = [(v, r) for v, r in zip(virtual, real, strict=True) if v and r]
    if not pairs:
        raise RuntimeError("clock: no interval between metrics rows was longer than the watch")
    virtual, real = [v for v, _ in pairs], [r for _, r in pairs]
    a, b = h.median(x for rep in virtual for x in rep), h.median(x for rep in real for x in rep)
    per_seed = [h.median(v) / h.median(r) for v, r in zip(virtual, real, strict=True)]
    ratio = h.geomean(per_seed)
    seed_pairs = list(zip(virtual, real, strict=True))
    interval = h.bootstrap_interval(
        seed_pairs, lambda ps: h.geomean(h.median(v) / h.median(r) for v, r in ps)
    )
    sec.rows.append(["real", _ms(b), ", ".join(_ms(h.median(x)) for x in real), "", ""])
    sec.rows.append(
        [
            "virtual",
            _ms(a),
            ", ".join(_ms(h.median(x)) for x in virtual),
            f"{_fmt_ratio(ratio)} (per seed {', '.join(_fmt_ratio(x) for x in per_seed)})",
            "<= 1.02",
        ]
    )
    sec.figures.append(
        Figure(
            "timing=virtual / timing=real, wall time per step",
            ratio,
            "<= 1.02",
            1.02,
            interval=interval if len(seed_pairs) > 1 else None,
            reps=len(seed_pairs),
        )
    )
    if s.device == "cpu":
        w8 = _step_level(s, ctx, 8)
        ta, tb = w8["times"]["sync_virtual"], w8["times"]["sync_real"]
        q = h.low_quantile
        ratio = h.geomean(q(t["sync_virtual"]) / q(t["sync_real"]) for t in w8["per_launch"])
        per_launch = ", ".join(
            _fmt_ratio(q(t["sync_virtual"]) / q(t["sync_real"])) for t in w8["per_launch"]
        )
        sec.rows.append(
            [
                "step level: virtual / real (same processes), 10th percentiles",
                f"{_ms(q(ta))} / {_ms(q(tb))}",
                f"{per_launch} ({len(ta)} steps each)",
                _fmt_ratio(ratio),
                "<= 1.02",
            ]
        )
        sec.figures.append(
            Figure(
                "step level: SyncSGD on the virtual / real clock",
                ratio,
                "<= 1.02",
                1.02,
                interval=_step_interval(w8["per_launch"], "sync_virtual", "sync_real"),
                reps=len(ta),
            )
        )
        sec.notes.append(
            "Step level (`benchmarks/steps.py`, same gloo processes, alternating blocks of "
            "steps): the suite's SyncSGD on a `Comm` with the virtual clock against one with "
            "the real clock. The virtual clock needs every worker's launch clock: they ride in "
            "the gradient all-reduce's own buffer (3 float32 slots per worker), so its cost "
            "is writing them and reading the tail back, not a second collective."
        )
    # The real runs' own clock against the outside watch: what the loop leaves untimed.
    inside = [x for r in h.pick(runs, timing="real") for x in r.epoch_step_s()]
    sec.notes.append(
        "Cross-check on the real runs: their own `time/train_s` gives "
        f"{_ms(h.median(inside))} ms/step against {_ms(b)} ms watched from outside (the "
        "difference is loop work outside the step timers, plus the watch's 4 ms resolution)."
    )
    return sec


# ---------------------------------------------------------------------------------------------
# 6. scaling


def scaling(s: Settings, ctx: Context) -> Section:
    sec = Section(
        "scaling",
        "6. Scaling on one machine",
        "One Hydra multirun over the number of workers, per-worker batch 32, synthetic data "
        "(4096 samples, 1x8x8; 2 epochs), ResNet-18 width 8, `threads_per_worker=1` (so 1 "
        "worker uses one core and 2 workers both). sync_sgd, and local_sgd with tau beyond "
        "the run (no communication: compute alone). Steps per second = `steps` / "
        "`time/train_s` of rank 0; samples per second = that x workers x batch; speed-up = "
        "samples per second over 1 worker's.",
        [
            "algorithm",
            "workers",
            "steps/s",
            "samples/s",
            "speed-up vs 1 worker",
            "efficiency",
            "exposed comm share",
        ],
    )
    workers = [1, 2] if s.smoke else [1, 2, 4, 8]
    algos = ["sync_sgd"] if s.smoke else ["sync_sgd", "local_sgd"]
    model = ["model=tiny_cnn"] if s.smoke else ["model=resnet18", "model.width=8"]
    runs = h.suite(
        [
            "cluster.backend=gloo",
            "threads_per_worker=1",
            "dataset=synthetic",
            f"dataset.num_train={256 if s.smoke else 4096}",
            *model,
            "batch_size=32",
            "epochs=2",
            "eval_every=2",
            "tau=1000",  # local_sgd: no communication (compute scaling alone)
            f"algorithm={','.join(algos)}",
            f"workers={','.join(str(w) for w in workers)}",
        ],
        multirun=True,
    )
    for algo in algos:
        base = None
        for w in workers:
            (run,) = h.pick(runs, algorithm__name=algo, workers=w)
            steps_per_s = run.steps / run.summary["time/train_s"]
            samples = steps_per_s * w * 32
            base = base or samples
            share = run.summary["time/comm_exposed_s"] / run.summary["time/train_s"]
            label = algo if algo == "sync_sgd" else "local_sgd (no sync)"
            sec.rows.append(
                [
                    label,
                    w,
                    f"{steps_per_s:.1f}",
                    f"{samples:.0f}",
                    f"{samples / base:.2f}",
                    f"{samples / base / w:.0%}",
                    f"{share:.0%}",
                ]
            )
            sec.figures.append(
                Figure(f"{label}, {w} workers: speed-up vs 1 worker", samples / base)
            )
    return sec


# ---------------------------------------------------------------------------------------------
# 7. workers in one process


#: A run that is all fixed cost: 2 workers, 1 step each, one evaluation on 64 samples.
TINY_RUN = [
    "scale=smoke",
    "dataset=synthetic",
    "dataset.num_train=64",
    "dataset.num_test=64",
    "epochs=1",
    "timing=virtual",
    "compute.step_time_s=0.01",
]
#: How worker processes were started before issue 16 (experiments/workers/startup.py): a fresh
#: interpreter per worker, torch._dynamo imported by the first optimizer step.
BEFORE = {"COMMSGD_START_METHOD": "spawn", "COMMSGD_EAGER_DYNAMO": "0"}


def _wall_of_run(overrides: list[str], env: dict | None = None) -> float:
    """Seconds from starting `python run.py OVERRIDES` to its exit (a fresh out_root)."""
    import sys
    import tempfile
    import time

    with tempfile.TemporaryDirectory(prefix="bench-start-") as out:
        cmd = [sys.executable, "run.py", *h.QUIET, *overrides, f"out_root={out}"]
        t0 = time.perf_counter()
        h.run_command(cmd, timeout=600, env=env)
        return time.perf_counter() - t0


def sim(s: Settings, ctx: Context) -> Section:
    sec = Section(
        "sim",
        "7. Workers in one process",
        "Fixed cost of a run: seconds from starting `python run.py` to its exit, for a run "
        "that is nothing but fixed cost (smoke scale, 2 workers, one step each, one evaluation "
        "of 64 samples, W&B off): `cluster=sim` (threads of one process), `cluster=local` "
        "(worker processes forked from a forkserver with torch and the suite preloaded, "
        "torch._dynamo kept out of the optimizer path: experiments/workers/startup.py) and the "
        "same processes started as before issue 16 (`COMMSGD_START_METHOD=spawn "
        "COMMSGD_EAGER_DYNAMO=0`: a fresh interpreter per worker), interleaved, medians. "
        "Throughput: m workers of the cpu-scale model (ResNet-18 width 8, batch 32 each, "
        "synthetic 1x8x8 data, local_sgd without syncs) with `cluster=sim` (a thread per worker; "
        "and with `cluster.batched=true`: their forward and backward passes as one pass of the "
        "replicas grouped as one model, their SGD steps as one update, "
        "experiments/workers/batched.py), against one worker "
        "training the global batch of m x 32 as one model (`cluster=sim workers=1`: the same "
        "process, all cores for its intra-op threads); samples per second from the wall-clock "
        "between metrics rows watched from outside (the virtual clock's times are modeled), "
        "epoch 1 left out, interleaved, ratio of medians. Mechanisms: the same step measured "
        "in one process for one model, the m replicas one after the other, in m threads, and "
        "batched with vmap (`benchmarks/sim.py`, the numbers behind experiments/workers/sim.py's "
        "design note).",
        ["figure", "workload", "measured", "contrast", "ratio", "per rep", "target"],
    )
    reps = 1 if s.smoke else 3
    walls: dict[str, list[float]] = {"sim": [], "local": [], "before": []}
    for _ in range(reps):
        if not s.smoke:  # smoke mode: the two ways of today only
            walls["before"].append(_wall_of_run([*TINY_RUN, "cluster=local"], BEFORE))
        walls["local"].append(_wall_of_run([*TINY_RUN, "cluster=local"]))
        walls["sim"].append(_wall_of_run([*TINY_RUN, "cluster=sim"]))
    before = h.median(walls["before"] or walls["local"])
    for key, label, target, limit in (
        ("sim", "fixed cost of a run, in-process (s)", "<= 2", 2.0),
        ("local", "fixed cost of a run, multi-process (s)", "<= 5", 5.0),
    ):
        value = h.median(walls[key])
        sec.rows.append(
            [
                label,
                "smoke, 2 workers, 1 step",
                f"{value:.2f} s",
                f"{before:.2f} s before",
                _fmt_ratio(value / before),
                ", ".join(f"{w:.2f}" for w in walls[key]),
                target,
            ]
        )
        sec.figures.append(Figure(label, value, target, limit))
        sec.figures.append(Figure(f"{label.split(' (')[0]} / before issue 16", value / before))

    sizes = [2] if s.smoke else [4, 16]
    for m, batched in [(m, b) for m in sizes for b in (False, True)]:
        ratio, per_rep, sim_sps, one_sps = _throughput(s, m, batched)
        target, limit = {4: (">= 0.8", 0.8), 16: (">= 0.6", 0.6)}.get(m, ("", None))
        name = f"throughput, {m} workers in one process / one model on the global batch"
        if batched:
            name += " (cluster.batched=true)"
        sec.rows.append(
            [
                name,
                f"resnet18 width {8 if not s.smoke else 'tiny'}, batch 32 x {m}",
                f"{sim_sps:.0f} samples/s",
                f"{one_sps:.0f} samples/s",
                _fmt_ratio(ratio),
                ", ".join(_fmt_ratio(x) for x in per_rep),
                target,
            ]
        )
        sec.figures.append(Figure(name, ratio, target, limit, at_least=True))
    if s.device == "cpu":
        from benchmarks import sim as mech

        for m in sizes:
            r = mech.measure(m, width=8, batch=32, reps=2 if s.smoke else 10)
            sec.rows.append(
                [
                    f"mechanisms, {m} replicas (prototype)",
                    "resnet18 width 8, batch 32 each",
                    ", ".join(f"{k} {v:.1f} ms" for k, v in r["ms"].items()),
                    "",
                    ", ".join(f"{k} {v:.2f}" for k, v in r["ratio"].items() if k != "one"),
                    "",
                    "",
                ]
            )
            for side in ("threads", "vmap"):
                label = f"mechanisms, {m} replicas: {side} / one model"
                sec.figures.append(Figure(label, r["ratio"][side]))
        sec.rows.append(
            [
                "GPU: 16 workers of ResNet-18 width 64 (batch 128 each) in one process / one "
                "model on batch 16 x 128; a paper-scale table1 epoch",
                "--device cuda",
                "pending",
                "",
                "",
                "",
                ">= 0.6; < 60 s",
            ]
        )
        sec.notes.append(
            "GPU rows: pending here (no GPU). `python -m benchmarks --device cuda --only sim` "
            "measures them: the throughput of 16 workers of the paper-scale ResNet-18 (width "
            "64, batch 128 each, 3x32x32 synthetic data) in one process on one GPU against one "
            "model on batch 2048, and the wall-clock of one epoch of table1 at the paper scale "
            "(16 workers, 50,000 CIFAR-sized synthetic samples, overlap_local_sgd, tau = 2)."
        )
    else:
        ratio, per_rep, sim_sps, one_sps = _throughput(s, 16, batched=True)
        name = (
            "GPU: 16 workers in one process (cluster.batched=true) / one model on the global batch"
        )
        sec.rows.append(
            [
                name,
                "resnet18 width 64, batch 128 x 16, one GPU",
                f"{sim_sps:.0f} samples/s",
                f"{one_sps:.0f} samples/s",
                _fmt_ratio(ratio),
                ", ".join(_fmt_ratio(x) for x in per_rep),
                ">= 0.6",
            ]
        )
        sec.figures.append(Figure(name, ratio, ">= 0.6", 0.6, at_least=True))
        epoch_s = _paper_epoch_s(s)
        sec.rows.append(
            [
                "GPU: one epoch of table1 at the paper scale (s)",
                "16 workers, 50,000 samples, overlap_local_sgd tau=2",
                f"{epoch_s:.1f} s",
                "",
                "",
                "",
                "< 60",
            ]
        )
        sec.figures.append(Figure("GPU: paper-scale table1 epoch (s)", epoch_s, "< 60", 60.0))
    return sec


def _throughput(
    s: Settings, m: int, batched: bool = False
) -> tuple[float, list[float], float, float]:
    """(median ratio of samples/s, per-rep ratios, samples/s in-process, of one model) for m
    workers in one process (`batched`: cluster.batched=true, experiments/workers/batched.py)
    against one model on the global batch (see `sim`)."""
    steps_per_epoch = 2 if s.smoke else 12
    if s.device == "cuda":
        batch, model = 128, ["model=resnet18", "model.width=64"]
        data = ["dataset=synthetic", "dataset.channels=3", "dataset.image_size=32"]
        cluster = ["cluster=sim", "cluster.device=cuda"]
    else:
        batch = 32
        model = ["model=tiny_cnn"] if s.smoke else ["model=resnet18", "model.width=8"]
        data = ["dataset=synthetic", "dataset.channels=1", "dataset.image_size=8"]
        cluster = ["cluster=sim"]
    common = [
        *cluster,
        *data,
        *model,
        f"dataset.num_train={m * batch * steps_per_epoch}",
        "dataset.num_test=64",
        "algorithm=local_sgd",
        "tau=100000",  # no sync: the compute of m replicas against one model's
        f"epochs={2 if s.smoke else 4}",
        "eval_every=1",
        "timing=virtual",
        "compute.step_time_s=0.01",
    ]
    ratios, sim_sps, one_sps = [], [], []
    for _ in range(1 if s.smoke else s.reps):
        (many,) = h.suite(
            [
                *common,
                f"workers={m}",
                f"batch_size={batch}",
                f"cluster.batched={str(batched).lower()}",
            ],
            watch=True,
        )
        (one,) = h.suite([*common, "workers=1", f"batch_size={m * batch}"], watch=True)
        a = m * batch / h.median(many.epoch_wall_step_s())
        b = m * batch / h.median(one.epoch_wall_step_s())
        sim_sps.append(a)
        one_sps.append(b)
        ratios.append(a / b)
    return h.median(sim_sps) / h.median(one_sps), ratios, h.median(sim_sps), h.median(one_sps)


def _paper_epoch_s(s: Settings) -> float:
    """Wall-clock seconds of one epoch of table1 at the paper scale, in one process on the GPU
    (CIFAR-sized synthetic data: the GPU machine may not hold CIFAR-10)."""
    (run,) = h.suite(
        [
            "experiment=table1",
            "scale=paper",
            "cluster=sim",
            "cluster.device=cuda",
            "dataset=synthetic",
            "dataset.channels=3",
            "dataset.image_size=32",
            "dataset.num_train=50000",
            "dataset.num_test=10000",
            "algorithm=overlap_local_sgd",
            "tau=2",
            "epochs=3",
            "eval_every=1",
            "cluster.batched=true",
        ],
        watch=True,
    )
    steps = h.median(run.epoch_wall_step_s())  # seconds per step, epochs 2 and 3
    return steps * (run.rows[1]["step"] - run.rows[0]["step"])


# ---------------------------------------------------------------------------------------------
# 8. workflows


def workflows(s: Settings, ctx: Context) -> Section:
    sec = Section(
        "workflows",
        "8. The demo and a table, end to end",
        "Wall-clock of the commands a user types, after set-up, into a temporary OUT and "
        "RESULTS: `make demo` (one real multi-process run, then the comparison with its workers "
        "in one process) and `make table1 SCALE=cpu CLUSTER=sim` (the 60 runs of Table 1 at the "
        "cpu scale's `scale.table_workers`, then the report). In smoke mode a reduced version "
        "of each (not a measurement).",
        ["command", "measured", "target"],
    )
    import shutil
    import sys
    import tempfile
    import time

    make = shutil.which("make")
    commands = [
        ("make demo (s)", ["demo"], "<= 60", 60.0),
        ("make table1 SCALE=cpu CLUSTER=sim (s)", ["table1", "SCALE=cpu", "CLUSTER=sim"],
         "<= 300", 300.0),
    ]  # fmt: skip
    for name, args, target, limit in commands[:1] if s.smoke else commands:
        with tempfile.TemporaryDirectory(prefix="bench-make-") as tmp:
            # STAMP= : the set-up is done (the running interpreter is the suite's)
            cmd = [make, "-s", *args, "STAMP=", f"PY={sys.executable}", f"OUT={tmp}/out",
                   f"RESULTS={tmp}/results"]  # fmt: skip
            if s.smoke:
                cmd = _smoke_workflow(args[0], tmp)
            t0 = time.perf_counter()
            h.run_command(cmd, timeout=3600)
            wall = time.perf_counter() - t0
        sec.rows.append([("smoke: " if s.smoke else "") + name, f"{wall:.0f} s", target])
        sec.figures.append(Figure(name, wall, target, limit))
    return sec


def _smoke_workflow(what: str, tmp: str) -> list[str]:
    """A few runs of the same commands' path (smoke mode)."""
    import sys

    preset = "demo" if what == "demo" else "table1"
    return [sys.executable, "-m", "experiments.sweep", preset, "--scale", "smoke", "--cluster",
            "sim", "--out-root", f"{tmp}/out", "--results", f"{tmp}/results", "seed=0",
            "algorithm=overlap_local_sgd", "tau=2", "epochs=1"]  # fmt: skip


def bad_input(s: Settings, ctx: Context) -> Section:
    sec = Section(
        "bad_input",
        "9. Bad input",
        "Seconds from starting `python run.py ARGS` to its exit with code 2 and its one-line "
        "error, output read through pipes as a script reads it, median of 5 (issue 26: "
        "composing the config and the pre-flight's checks import no torch; "
        "tests/test_torch_free.py checks the imports). Absolute seconds: on a shared machine "
        "they include the neighbours.",
        ["command", "median", "per rep", "target"],
    )
    import statistics
    import subprocess
    import sys
    import tempfile
    import time

    for args in (["algorithm=nope"], ["tau=0"]):
        walls = []
        with tempfile.TemporaryDirectory(prefix="bench-bad-input-") as out:
            for _ in range(5):
                cmd = [sys.executable, "run.py", *args, f"out_root={out}"]
                t0 = time.perf_counter()
                proc = subprocess.run(cmd, cwd=h.REPO, env=h.child_env(), capture_output=True)
                walls.append(time.perf_counter() - t0)
                if proc.returncode != 2 or len(proc.stderr.splitlines()) != 1:
                    raise RuntimeError(f"{' '.join(cmd)}: exit {proc.returncode}: {proc.stderr}")
        name = f"python run.py {' '.join(args)} (s)"
        median = statistics.median(walls)
        sec.rows.append([name, f"{median:.2f} s", " ".join(f"{w:.2f}" for w in walls), "< 1"])
        interval = h.bootstrap_interval(walls, statistics.median)
        sec.figures.append(Figure(name, median, "< 1", 1.0, interval=interval, reps=len(walls)))
    return sec


FAMILIES: dict[str, Callable[[Settings, Context], Section]] = {
    "overhead": overhead,
    "overlap": overlap,
    "volume": volume,
    "memory": memory,
    "clock": clock,
    "scaling": scaling,
    "sim": sim,
    "workflows": workflows,
    "bad_input": bad_input,
}


def finite_positive(x: float) -> bool:
    return isinstance(x, int | float) and math.isfinite(x) and x > 0
