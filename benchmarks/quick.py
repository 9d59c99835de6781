"""The quick bench (`make bench-quick` = `python -m benchmarks --quick`): the headline ratios of
the full bench, each measured side by side with its 95% interval, in about 15 minutes on 2
cores, written to benchmarks/RESULTS-quick.md and .json.

Rows (the full bench's workloads and figures, fewer epochs and repetitions):

- sync_sgd / DDP, time per step (4 gloo workers; families.overhead_pairs);
- local_sgd tau=1000 / plain single process, time per step (the loop's own overhead);
- overlap_local_sgd tau=2, emulated network / ideal, time per step (families.overlap_overrides),
  one seed per pair;
- fixed cost of a run, cluster=sim / cluster=local (a run that is nothing but start-up), and the
  two seconds against the full bench's targets;
- overlap_local_sgd and sync_sgd: extra peak memory per worker in model copies (fresh worker
  processes per measurement, benchmarks/memory.py);
- seeds in lock-step: the wall time of LOCKSTEP_SEEDS seeds of the demo config trained in
  lock-step (one `python run.py -m ... seed=0,...,7`) against one seed (`python run.py`),
  interleaved (experiments/workers/sim.py, run_lockstep);
- sweep efficiency: the demo sweep (`python run.py -m experiment=demo cluster=sim`, its 30
  points) once: the training time its runs measured (each run's steps x its calibrated step
  time, `compute/measured_step_s`: what the run would take to train at its own speed with no
  overhead) over the sweep's wall time, and what each point costs beyond that;
- the same two rows at the verdicts' scale (`scale=fmnist`, Fashion-MNIST: `make data`; the
  bench refuses before any work without it), shortened: 2 epochs for the lock-step row, the
  demo sweep at 1 epoch.

Each timed row interleaves A and B (A B, B A, ...) for at least `reps` pairs, then adds pairs
until its interval is within +-2%, `max_reps` pairs were made, or its share of the time budget
(ROW_BUDGET_S) would be overrun. Every row names the full bench's target and its last figure
(read from the committed benchmarks/RESULTS*.json), so a quick figure can be read against it.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from benchmarks import families as f
from benchmarks import harness as h

#: Seconds each timed row may take: no pair is started that would end past it, the first
#: `reps` pairs aside (always made). Sized on this project's 2 cores, idle: one sync_sgd / DDP
#: pair ~32 s, local_sgd / plain ~13 s, an overlap pair ~14 s, a sim / local pair ~5 s, a
#: memory measurement ~9 s; the whole bench ~7 minutes, leaving room for a loaded machine.
ROW_BUDGET_S = {
    "sync": 100.0,
    "local": 50.0,
    "overlap": 50.0,
    "sim": 25.0,
    "lockstep": 60.0,
    "verdict_lockstep": 90.0,
    "limit": 40.0,
}
#: Seeds of row (a), the issue's S; the demo config's algorithm in it.
LOCKSTEP_SEEDS = 8
LOCKSTEP_RUN = ["experiment=demo", "cluster=sim", "algorithm=local_sgd"]
#: Rows (c): the same two rows at the verdicts' scale (scale=fmnist, results/README.md), shortened
#: to fit the quick bench (its runs train 10 epochs: 8 seeds 3-5 min; here 2 epochs, ~35 s, and
#: the 30-point demo sweep at 1 epoch, ~80 s); `make data` installs Fashion-MNIST.
VERDICT_LOCKSTEP_RUN = [*LOCKSTEP_RUN, "scale=fmnist", "epochs=2"]
VERDICT_SWEEP = ["experiment=demo", "cluster=sim", "scale=fmnist", "epochs=1"]
#: --smoke (the tests): two seeds of a tiny run, and a four-point sweep instead of the demo's 30
SMOKE_LOCKSTEP_RUN = [*f.TINY_RUN, "cluster=sim", "algorithm=local_sgd"]
SMOKE_LOCKSTEP_SEEDS = 2
SMOKE_SWEEP = [*f.TINY_RUN, "cluster=sim", "algorithm=local_sgd,osp", "seed=0,1"]
MEMORY_ALGORITHMS = ("sync_sgd", "overlap_local_sgd")
#: Epochs of the runs (the full bench: 16, 16 and 6). The overhead rows leave epoch 1 out.
EPOCHS = {"sync": 6, "local": 6, "overlap": 4}
SMOKE_EPOCHS = {"sync": 2, "local": 2, "overlap": 2}
OVERLAP_STEP_S = 0.04  # the full bench's emulated compute step (smoke: 0.01)
#: Where the full bench's committed results (RESULTS*.json) are, beside this bench's own.
FULL = Path(__file__).resolve().parent

ROWS = (
    "sync_sgd / DDP, time per step",
    "local_sgd tau=1000 / plain single process, time per step",
    "overlap_local_sgd tau=2, emulated / ideal step time",
    "fixed cost of a run, cluster=sim / cluster=local",
    "sync_sgd: extra peak memory per worker (model copies)",
    "overlap_local_sgd: extra peak memory per worker (model copies)",
    f"seeds in lock-step: {LOCKSTEP_SEEDS} seeds / 1 seed, wall time",
    "sweep efficiency: the runs' measured training time / the sweep's wall time",
    f"fmnist (verdicts' scale), 2 epochs: {LOCKSTEP_SEEDS} seeds / 1 seed in lock-step, wall time",
    "fmnist (verdicts' scale), 1 epoch: demo sweep efficiency",
    f"fmnist: the lock-step step of {LOCKSTEP_SEEDS} seeds / one plain model on the same images",
    "fmnist: the plain step's fp32 rate / this machine's fp32 matrix-multiply peak",
    f"fmnist, 2 epochs, {LOCKSTEP_SEEDS} seeds in lock-step: evaluation's share of the wall time",
    f"fmnist, 2 epochs, {LOCKSTEP_SEEDS} seeds in lock-step: steps x the ideal step / wall time",
)

INTRO = """\
# Quick bench: the headline ratios

`make bench-quick` (`python -m benchmarks --quick`): the headline rows of the full bench
(`make bench`, [RESULTS.md](RESULTS.md)), on the same workloads with fewer epochs and
repetitions, in about 15 minutes on 2 cores. Every figure is a **ratio of two measurements
made side by side** in this invocation (A and B interleaved, A B / B A, ratio of medians), with
its **95% bootstrap interval** over the interleaved pairs; a target is **met** only when the
whole interval meets it, **within noise** when the interval straddles it. Each timed row repeats
until its interval is within +-2% or its share of the time budget is spent, so on a loaded
machine the intervals are wider, not the run longer. The column `full bench` gives the full
bench's target and its last figure (from the committed RESULTS*.json): the quick figure should
fall within the full one's interval; the full bench decides a target.
"""


def _full_figure(file: str, name: str) -> dict | None:
    """The figure `name` of the committed full-bench result `file` (None: not there)."""
    path = FULL / file
    if not path.is_file():
        return None
    data = json.loads(path.read_text())
    for sec in data["sections"].values():
        for fig in sec["figures"]:
            if fig["name"] == name:
                return {**fig, "file": file, "git": str(data["meta"].get("git", ""))[:7]}
    return None


def _full_text(file: str, name: str) -> str:
    fig = _full_figure(file, name)
    if fig is None:
        return f"no figure in {file}"
    interval = ""
    if fig.get("interval"):
        low, high = fig["interval"]
        interval = f" [{low:.4g}, {high:.4g}] (n={fig['reps']})"
    target = f"target {fig['target']}: " if fig.get("target") else ""
    verdict = f", {fig['verdict']}" if fig.get("target") else ""
    return f"{target}{fig['value']:.4g}{interval}{verdict} ({file} at {fig['git']})"


def _full_memory_text(algorithm: str) -> str:
    """The full bench's memory row of `algorithm`: extra peak, held copies, by design."""
    file = "RESULTS-memory.json"
    path = FULL / file
    if not path.is_file():
        return f"no {file}"
    data = json.loads(path.read_text())
    sec = data["sections"].get("memory")
    rows = [r for r in (sec or {}).get("rows", []) if r and r[0] == algorithm]
    if not rows:
        return f"no {algorithm} row in {file}"
    row = dict(zip(sec["columns"], rows[0], strict=True))
    return (
        f"extra peak {row['extra peak (model copies)']}, held {row['held (model copies)']} "
        f"(by design: {row['held, by design']}) ({file} at {str(data['meta']['git'])[:7]})"
    )


def _median_ratio(pairs: list) -> float:
    """median of side A over median of side B (pairs of scalar measurements)."""
    return h.median(a for a, _ in pairs) / h.median(b for _, b in pairs)


def _scalar_spread(xs: list, ys: list) -> float:
    pairs = list(zip(xs, ys, strict=True))
    return h.half_width(h.bootstrap_interval(pairs, _median_ratio), _median_ratio(pairs))


class _Table:
    """The quick section as it fills: each row's figure and table line, and the wall-clock
    of each row's measurements."""

    def __init__(self, sec: f.Section, s: f.Settings, budgets: dict[str, float]):
        self.sec, self.s, self.budgets = sec, s, budgets
        self.times: dict[str, float] = {}

    def interleave(self, key: str, a: Callable, b: Callable, spread: Callable) -> tuple:
        t0 = time.perf_counter()
        xy = f._interleaved(
            a, b, self.s.reps, max_reps=self.s.max_reps, spread=spread, budget_s=self.budgets[key]
        )
        self.times[key] = time.perf_counter() - t0
        print(f"[bench-quick] {key}: {len(xy[0])} pairs, {self.times[key]:.0f} s", file=sys.stderr)
        return xy

    def add(
        self,
        name: str,
        workload: str,
        a_text: str,
        b_text: str,
        value: float,
        interval: tuple[float, float],
        per_rep: list[float],
        target: str,
        limit: float | None,
        full: str,
        at_least: bool = False,
    ) -> None:
        fig = f.Figure(name, value, target, limit, at_least=at_least, interval=interval)
        fig.reps = len(per_rep)
        self.sec.figures.append(fig)
        self.sec.rows.append(
            [
                name,
                workload,
                a_text,
                b_text,
                f"{value:.4g}",
                fig.interval_text,
                ", ".join(f"{x:.3f}" for x in per_rep),
                target or "-",
                fig.verdict,
                full,
            ]
        )

    def add_ratio(
        self,
        name: str,
        workload: str,
        a_text: str,
        b_text: str,
        xs: list[float],
        ys: list[float],
        target: str,
        limit: float | None,
        full: str,
    ) -> None:
        """A row whose figure is median(xs) / median(ys) of interleaved scalar measurements,
        with its bootstrap interval over the pairs and each pair's ratio."""
        pairs = list(zip(xs, ys, strict=True))
        self.add(
            name,
            workload,
            a_text,
            b_text,
            _median_ratio(pairs),
            h.bootstrap_interval(pairs, _median_ratio),
            [x / y for x, y in pairs],
            target,
            limit,
            full,
        )


def _workload(overrides: list[str]) -> str:
    return " ".join(o for o in overrides if not o.startswith(("cluster", "threads", "eval")))


def run(s: f.Settings) -> f.Section:
    """Measure the headline rows (sizes: the quick bench's, or the smoke test's with
    `s.smoke`): one section, the rows' wall-clock seconds in its last note."""
    epochs = SMOKE_EPOCHS if s.smoke else EPOCHS
    budgets = {k: 0.0 for k in ROW_BUDGET_S} if s.smoke else dict(ROW_BUDGET_S)
    sec = f.Section(
        "quick",
        "Headline ratios",
        "A = the first side of the ratio, B = the second, in the row's unit; `per rep`: A / B "
        "of each interleaved pair (memory: each measurement). The overhead rows take each "
        "run's per-epoch time per step (`time/train_s`, epoch 1 left out) and pool every "
        "epoch of every repetition per side (as the full bench); the overlap row one "
        "emulated and one ideal run per seed (`time/train_s` / steps); the fixed-cost row "
        "the seconds from starting `python run.py` to its exit.",
        [
            "figure",
            "workload",
            "A",
            "B",
            "ratio",
            "95% interval (n)",
            "per rep",
            "target",
            "verdict",
            "full bench",
        ],
    )
    table = _Table(sec, s, budgets)
    ctx: f.Context = {}

    # 1-2. overhead against plain PyTorch
    o = f.overhead_pairs(s, ctx, epochs=epochs["sync"], epochs1=epochs["local"])
    for key, (a, b), name, overrides in (
        ("sync", o.sync, ROWS[0], o.common),
        ("local", o.local, ROWS[1], o.single),
    ):
        xs, ys = table.interleave(key, a, b, f._pair_spread)
        pairs = list(zip(xs, ys, strict=True))
        ma, mb = h.median(x for rep in xs for x in rep), h.median(y for rep in ys for y in rep)
        table.add(
            name,
            _workload(overrides),
            f"{f._ms(ma)} ms/step",
            f"{f._ms(mb)} ms/step (DDP)" if key == "sync" else f"{f._ms(mb)} ms/step (plain)",
            ma / mb,
            h.bootstrap_interval(pairs, f._pooled_ratio),
            [h.median(x) / h.median(y) for x, y in pairs],
            "<= 1.02",
            1.02,
            _full_text("RESULTS.json", name),
        )

    # 3. overlap efficiency: one seed per pair, emulated network against ideal
    step_s = 0.01 if s.smoke else OVERLAP_STEP_S
    common, _, _ = f.overlap_overrides(s, epochs["overlap"], step_s)
    common = [*common, "algorithm=overlap_local_sgd"]
    seeds = {True: 0, False: 0}
    comm_comp: list[float] = []

    def overlap_side(emulated: bool) -> Callable[[], float]:
        def side() -> float:
            seed = seeds[emulated]
            seeds[emulated] += 1
            side = common if emulated else f.not_emulated(common)
            (r,) = h.suite([*side, f"seed={seed}", f"emulate_network={str(emulated).lower()}"])
            if emulated:
                comm_comp.append(r.summary["comm/ratio"])
            return r.step_s

        return side

    xs, ys = table.interleave("overlap", overlap_side(True), overlap_side(False), _scalar_spread)
    table.add_ratio(
        ROWS[2],
        _workload(common) + " (one seed per pair)",
        f"{f._ms(h.median(xs))} ms/step emulated",
        f"{f._ms(h.median(ys))} ms/step ideal",
        xs,
        ys,
        "<= 1.05",
        1.05,
        _full_text("RESULTS.json", ROWS[2]),
    )
    sec.notes.append(
        f"overlap_local_sgd, emulated runs: exposed communication / compute "
        f"{h.median(comm_comp):.1%} (the paper: 1.5% at tau = 2); the modeled all-reduce of "
        f"the model takes one compute step ({step_s * 1e3:.0f} ms, `emulate_compute=true`)."
    )

    # 4. workers in one process against worker processes: the fixed cost of a run
    xs, ys = table.interleave(
        "sim",
        lambda: f._wall_of_run([*f.TINY_RUN, "cluster=sim"]),
        lambda: f._wall_of_run([*f.TINY_RUN, "cluster=local"]),
        _scalar_spread,
    )
    full_sim = _full_figure("RESULTS-sim.json", "fixed cost of a run, in-process (s)")
    full_local = _full_figure("RESULTS-sim.json", "fixed cost of a run, multi-process (s)")
    full = "no figures in RESULTS-sim.json"
    if full_sim and full_local:
        full = (
            f"{full_sim['value']:.2f} s / {full_local['value']:.2f} s = "
            f"{full_sim['value'] / full_local['value']:.3g} (RESULTS-sim.json at "
            f"{full_sim['git']})"
        )
    table.add_ratio(
        ROWS[3],
        "smoke, 2 workers, 1 step each, one evaluation (a run that is all fixed cost)",
        f"{h.median(xs):.2f} s sim",
        f"{h.median(ys):.2f} s local",
        xs,
        ys,
        "",
        None,
        full,
    )
    # the two seconds against the full bench's targets (their intervals: over the repetitions)
    for values, label, target, limit in (
        (xs, "fixed cost of a run, in-process (s)", "<= 2", 2.0),
        (ys, "fixed cost of a run, multi-process (s)", "<= 5", 5.0),
    ):
        fig = f.Figure(
            label,
            h.median(values),
            target,
            limit,
            interval=h.bootstrap_interval(values, h.median),
            reps=len(values),
        )
        sec.figures.append(fig)
        sec.notes.append(
            f"{label}: {fig.value:.2f} {fig.interval_text}, target {target}: {fig.verdict}; "
            f"full bench: {_full_text('RESULTS-sim.json', label)}."
        )

    # 5. memory: extra peak per worker in model copies, fresh worker processes each time
    from benchmarks import memory as mem

    t0 = time.perf_counter()
    reps = max(1, s.reps)
    order = [
        name
        for rep in range(reps)
        for name in (MEMORY_ALGORITHMS if rep % 2 == 0 else MEMORY_ALGORITHMS[::-1])
    ]
    results = mem.measure([f.memory_spec(s, name) for name in order], workers=2, fresh=True)
    table.times["memory"] = time.perf_counter() - t0
    print(f"[bench-quick] memory: {len(order)} measurements, {table.times['memory']:.0f} s",
          file=sys.stderr)  # fmt: skip
    model = f.memory_model(s)
    mib = 2**20
    for i, name in enumerate(MEMORY_ALGORITHMS):
        worst = [
            max(by_rank, key=lambda x: x["peak"] - x["plain"])
            for algo, by_rank in zip(order, results, strict=True)
            if algo == name
        ]
        extra = [(r["peak"] - r["plain"]) / r["model_bytes"] for r in worst]
        table.add(
            ROWS[4 + i],
            f"{model['name']} width {model['width']}, 2 gloo workers, 4 steps at tau = 2",
            f"{h.median(r['peak'] for r in worst) / mib:.0f} MiB peak",
            f"{h.median(r['plain'] for r in worst) / mib:.0f} MiB plain "
            f"(peak / plain {h.median(r['peak'] / r['plain'] for r in worst):.3f})",
            h.median(extra),
            h.bootstrap_interval(extra, h.median),
            extra,
            "",
            None,
            _full_memory_text(name),
        )
    sec.notes.append(
        "Memory: (peak RSS - plain peak) / the model's fp32 bytes of the worse worker, each "
        "measurement in fresh worker processes (`benchmarks/memory.py`, `fresh=True`); the "
        "full bench measures every algorithm in one set of processes, where the plain peak "
        "grows after some algorithms, so its peak / plain is not comparable, its extra peak "
        "in model copies is. The value hardly varies: peak memory does not depend on the load."
    )
    # 6-7. seeds in lock-step and sweep efficiency at the demo's scale (cpu, digits) and 8-9.
    # at the verdicts' scale (fmnist: Fashion-MNIST, results/README.md), shortened to fit.
    # --smoke gives both the same tiny workload: it is measured once and read for both rows.
    measured: dict[tuple, _Lockstep] = {}
    for rows, run, sweep, key in (
        (ROWS[6:8], LOCKSTEP_RUN, ["experiment=demo", "cluster=sim"], "lockstep"),
        (ROWS[8:10], VERDICT_LOCKSTEP_RUN, VERDICT_SWEEP, "verdict_lockstep"),
    ):
        if s.smoke:
            run, sweep = SMOKE_LOCKSTEP_RUN, SMOKE_SWEEP
        workload = (tuple(run), tuple(sweep))
        if workload not in measured:
            measured[workload] = _measure_lockstep(table, s, run, sweep, key)
        lockstep = _lockstep_rows(table, sec, rows, run, sweep, measured[workload])
    # 10-13. the verdicts' scale against the machine's limit
    _limit_rows(table, sec, s, lockstep)
    sec.notes.append(
        "Rows' wall-clock: "
        + ", ".join(f"{k} {v:.0f} s" for k, v in table.times.items())
        + " (budgets, the first pairs aside: "
        + ", ".join(f"{k} {v:.0f} s" for k, v in budgets.items())
        + ")."
    )
    return sec


@dataclass
class _Lockstep:
    """One workload's lock-step measurements: the interleaved walls of `seeds` seeds together
    (xs) and of one seed (ys), each lock-step run's (wall, its first seed's summary), and the
    sweep once (its runs, its wall time)."""

    seeds: int
    xs: list[float]
    ys: list[float]
    runs_together: list[tuple[float, dict]]
    sweep_runs: list
    sweep_wall: float


def _measure_lockstep(
    table: _Table, s: f.Settings, run: list[str], sweep: list[str], key: str
) -> _Lockstep:
    """Rows (a) and (b) of issue 34 measured for one workload: S seeds of `run` in lock-step
    against one seed, interleaved; then the sweep `sweep` once."""
    count = SMOKE_LOCKSTEP_SEEDS if s.smoke else LOCKSTEP_SEEDS
    seeds = ",".join(str(i) for i in range(count))
    together_runs: list[tuple[float, dict]] = []

    def together() -> float:
        wall, summary = f._timed_run(["-m", *run, f"seed={seeds}"])
        together_runs.append((wall, summary))
        return wall

    xs, ys = table.interleave(
        key, together, lambda: f._wall_of_run([*run, "seed=0"]), _scalar_spread
    )
    t0 = time.perf_counter()
    runs = h.suite(sweep, multirun=True)
    wall = time.perf_counter() - t0
    table.times[f"{key} sweep"] = wall
    return _Lockstep(count, xs, ys, together_runs, runs, wall)


def _lockstep_rows(
    table: _Table,
    sec: f.Section,
    rows: tuple[str, ...],
    run: list[str],
    sweep: list[str],
    m: _Lockstep,
) -> list[tuple[float, dict]]:
    """Rows (a) and (b) of issue 34 for one workload, from its measurements `m`: S seeds in
    lock-step over one seed; the sweep's runs' measured training time over its wall time.
    Returns each lock-step run's (wall seconds, its first seed's summary)."""
    xs, ys, runs, wall = m.xs, m.ys, m.sweep_runs, m.sweep_wall
    table.add_ratio(
        rows[0],
        " ".join(run) + " (W&B off)",
        f"{h.median(xs):.1f} s for {m.seeds} seeds",
        f"{h.median(ys):.1f} s for 1 seed",
        xs,
        ys,
        "<= 2.5",
        2.5,
        "new in issue 34 (no full-bench figure)",
    )
    trained = sum(
        r.steps * (r.summary["compute/measured_step_s"] or r.summary["compute/step_time_s"])
        for r in runs
    )
    efficiency = trained / wall
    table.add(
        rows[1],
        f"python run.py -m {' '.join(sweep)} (W&B off): {len(runs)} runs",
        f"{trained:.0f} s measured training",
        f"{wall:.0f} s wall",
        efficiency,
        (efficiency, efficiency),
        [efficiency],
        ">= 0.8",
        0.8,
        "new in issue 34; before it: about 0.4 (the issue's measurement)",
        at_least=True,
    )
    sec.notes.append(
        f"Sweep efficiency ({rows[1]}): one sweep (no interval: the sweep is the measurement); "
        f"beyond its runs' measured training it cost {wall - trained:.0f} s, "
        f"{(wall - trained) / max(len(runs), 1):.2f} s a point: start-up and composition once, "
        "then per point its pre-flight check, records and evaluation set-up, and per "
        "lock-step its threads, stacked replicas and one calibration; OSP and LOSP in "
        "lock-step rank by rank. A figure above 1 means seeds in lock-step trained "
        "faster together than each would alone."
    )
    return m.runs_together


def _limit_rows(table: _Table, sec: f.Section, s: f.Settings, lockstep: list) -> None:
    """Rows 10-13 (issue 48): the lock-step step of the verdicts' scale against one plain model
    on the same images (the ideal, benchmarks/limit.py), the plain step's arithmetic rate
    against the machine's fp32 matrix-multiply peak, and from the lock-step runs of row 8
    evaluation's share of their wall time and their steps at the ideal step's time over it."""
    import torch

    from benchmarks import limit

    seeds = SMOKE_LOCKSTEP_SEEDS if s.smoke else LOCKSTEP_SEEDS
    workers, batch = (2, 8) if s.smoke else (4, 32)  # fmnist: 4 workers, batch 32, 1x14x14
    replicas = seeds * workers
    threads = torch.get_num_threads()
    torch.set_num_threads(os.cpu_count() or 1)  # the lock-step's rule: every core
    try:
        pair = limit.StepPair(replicas, batch, width=8, channels=1, size=14)
        steps = 1 if s.smoke else 3

        def median_of(side: Callable[[], float]) -> Callable[[], float]:
            return lambda: h.median(side() for _ in range(steps))

        pair.plain_step()  # warm-up: threads started, kernels chosen
        pair.lockstep()
        xs, ys = table.interleave(
            "limit", median_of(pair.lockstep), median_of(pair.plain_step), _scalar_spread
        )
        flops = pair.plain_flops()
        peak = limit.matmul_peak(256 if s.smoke else 1024)
    finally:
        torch.set_num_threads(threads)
    workload = (
        f"{replicas} width-8 ResNet-18 replicas ({seeds} seeds x {workers} workers), batch "
        f"{batch} each, 1x14x14 images, forward and backward"
    )
    ideal = h.median(ys)
    table.add_ratio(
        ROWS[10],
        workload,
        f"{h.median(xs) * 1e3:.0f} ms lock-step step",
        f"{ideal * 1e3:.0f} ms plain step on {replicas * batch} images",
        xs,
        ys,
        "",
        None,
        "new in issue 48: 1 = the lock-step pass at the plain model's speed",
    )
    rate = flops / ideal / 1e9
    table.add(
        ROWS[11],
        f"the plain step above ({flops / 1e9:.2f} GFLOP, torch's count); peak: the best of 5 "
        "fp32 1024x1024 matrix products",
        f"{rate:.1f} GFLOP/s plain step",
        f"{peak:.1f} GFLOP/s peak",
        rate / peak,
        (rate / peak, rate / peak),
        [rate / peak],
        "",
        None,
        "new in issue 48 (the width-8 convolutions' floor, not the multiply's)",
    )
    runs = [(w, sm) for w, sm in lockstep if sm.get("time/eval_s") is not None]
    walls = [w for w, _ in runs]
    shares = [sm["time/eval_s"] / w for w, sm in runs]
    efficiency = [sm["steps"] * ideal / w for w, sm in runs]
    for name, values, target, limit_value, full in (
        (ROWS[12], shares, "<= 0.25", 0.25, "new in issue 48; at e57154c: 0.42 (the issue's)"),
        (ROWS[13], efficiency, "", None, "new in issue 48: 1 = every second at the ideal step"),
    ):
        if not values:
            continue
        value = h.median(values)
        table.add(
            name,
            " ".join(VERDICT_LOCKSTEP_RUN if not s.smoke else SMOKE_LOCKSTEP_RUN),
            f"{h.median(walls):.1f} s wall",
            "time/eval_s of seed 0" if name == ROWS[12] else f"{ideal * 1e3:.0f} ms ideal step",
            value,
            h.bootstrap_interval(values, h.median) if len(values) > 1 else (value, value),
            values,
            target,
            limit_value,
            full,
        )
