"""Benchmark families 3 to 6 (benchmarks/families.py): bytes per step against the closed forms
(volume), peak memory per worker (memory), the virtual clock against the real one (clock), and
steps per second from 1 to 8 workers (scaling)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from analysis.runs.load import ALGORITHMS  # the README's order, baseline first
from benchmarks import harness as h
from benchmarks.family_overhead import _step_level
from benchmarks.section import (
    PAPER_POWERSGD_FLOATS,
    RESNET18_PARAMS,
    Context,
    Figure,
    Section,
    Settings,
    _fmt_ratio,
    _ms,
    _step_interval,
)

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
