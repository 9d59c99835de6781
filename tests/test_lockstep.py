"""Seeds in lock-step (experiments/workers/sim.py `run_lockstep`, experiments/workers/batched.py):
S runs of one config that differ only in their seed train as one batched pass over their S x m
workers' replicas, and each run's record is the one it writes alone: bit for bit in float64, to
rounding in float32 (FLOAT32_RTOL), for every algorithm that computes in lock-step; a run that
fails leaves the others' records intact; a sweep groups the seeds by itself and says which
algorithms it cannot group."""

from __future__ import annotations

import json
import math
import threading
import time
from pathlib import Path

import pytest
from omegaconf import OmegaConf

import algorithms
from algorithms.group import PeerFailed, ThreadGroup
from experiments.errors import WorkerFailed
from tests.cli import run_py
from tests.compose import composed

# Measured with the wall-clock even on the virtual clock: never the same twice.
WALL_CLOCK_KEYS = ("time/eval_s", "time/wall_s", "finished_at")


# Seeds in lock-step in float32 agree with the seed alone to rounding, not bit for bit: oneDNN
# chooses its float32 convolution kernel (blocking, vector tail) by the number of groups, i.e.
# of replicas (float64 convolutions run per group, as alone). Measured on these runs: ~1e-7
# relative on a loss (the last bit or two of a float32); the bound leaves two orders of margin.
FLOAT32_RTOL = 1e-5


def assert_close(a, b, rtol: float, where: str = "") -> None:
    """Equal structure; numbers within `rtol` (relative), everything else equal."""
    if isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for key in a:
            assert_close(a[key], b[key], rtol, f"{where}/{key}")
    elif isinstance(a, list | tuple):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_close(x, y, rtol, f"{where}[{i}]")
    elif isinstance(a, float) and isinstance(b, float):
        assert math.isclose(a, b, rel_tol=rtol, abs_tol=rtol * 1e-3), (where, a, b)
    else:
        assert a == b, (where, a, b)


def config(*overrides: str) -> dict:
    """A small heterogeneous run on the virtual clock with pinned compute times (the same
    run as tests/test_sim.py's), so that every number of two runs of it is comparable."""
    cfg = composed(
        "cluster=sim",
        "scale=smoke",
        "dataset=synthetic",
        "dataset.num_train=288",  # 96 per worker: 6 steps per epoch, and a partial batch
        "dataset.num_test=64",
        "model.width=4",
        "workers=3",
        "batch_size=20",
        "epochs=2",
        "wandb.mode=disabled",
        "progress=false",
        "timing=virtual",
        "compute.step_time_s=0.01",
        "compute.algo_time_s=0.001",
        "compute.slowdown=[1.0,1.5,3.0]",
        "compute.straggler_prob=0.25",
        "compute.straggler_factor=4.0",
        "network=ethernet1g",
        "tau=2",
        *overrides,
    )
    return OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)


def lockstep_algorithms() -> list[str]:
    from experiments.workers import sim

    return [n for n in sorted(algorithms.REGISTRY) if sim.lockstep(config(f"algorithm={n}"))]


def record(run_dir: Path) -> tuple[dict, list[dict]]:
    summary = json.loads((run_dir / "summary.json").read_text())
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    for row in [summary, *rows]:
        for key in WALL_CLOCK_KEYS:
            row.pop(key, None)
    return summary, rows


def train(runs: list[tuple[dict, Path]], worker=None) -> list:
    from experiments.data.datasets import load_dataset
    from experiments.worker import train_worker
    from experiments.workers import sim

    bundle = load_dataset(runs[0][0]["dataset"])
    for _, run_dir in runs:
        run_dir.mkdir(parents=True, exist_ok=True)
    return sim.run_lockstep([(c, d, bundle) for c, d in runs], worker or train_worker)


def test_every_algorithm_computes_in_lockstep_osp_and_losp_rank_by_rank_where_speeds_are_fixed():
    """OSP and LOSP (collectives at rank-dependent steps) train seeds in lock-step rank by rank
    (sim.by_rank), and only where no modeled speed is drawn from the seed: their windows follow
    the clocks, which must then be the same for every seed."""
    from experiments.workers import sim

    names = lockstep_algorithms()  # config(): stragglers drawn from the seed
    assert "osp" not in names and "losp" not in names
    assert len(names) == len(algorithms.REGISTRY) - 2, names
    for name in ("osp", "losp"):
        fixed = config(f"algorithm={name}", "compute.straggler_prob=0")
        assert sim.lockstep(fixed) and sim.by_rank(fixed)
        assert not sim.by_rank(config(f"algorithm={name}", "compute.slowdown=lognormal"))
        assert not sim.by_rank(config(f"algorithm={name}", "compute.straggler_prob=0", *ALONE))
    assert not sim.by_rank(config("algorithm=local_sgd", "compute.straggler_prob=0"))


ALONE = ("cluster.lockstep_seeds=1",)  # a run that never trains among other seeds


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("name", lockstep_algorithms())
def test_each_seed_in_lockstep_writes_the_record_it_writes_alone(tmp_path, name, dtype):
    """Seeds 1 and 2 together, then seed 2 alone: seed 2's summary and every metrics row are
    equal, bit for bit in float64 (its data order, initial model, stragglers and clock its
    own)."""
    seeds = {s: config(f"algorithm={name}", f"dtype={dtype}", f"seed={s}") for s in (1, 2)}
    outcomes = train([(seeds[1], tmp_path / "s1"), (seeds[2], tmp_path / "s2")])
    assert outcomes == [False, False]
    (alone,) = train([(seeds[2], tmp_path / "alone")])
    assert alone is False
    together, by_itself = record(tmp_path / "s2"), record(tmp_path / "alone")
    assert together[0]["status"] == "completed"
    if dtype == "float64":
        assert together == by_itself
    else:  # FLOAT32_RTOL: oneDNN's float32 convolution kernels depend on the number of groups
        assert_close(together, by_itself, FLOAT32_RTOL)
    other = record(tmp_path / "s1")
    assert other[0]["final/test_acc"] != together[0]["final/test_acc"] or (
        other[1][0]["train/loss"] != together[1][0]["train/loss"]
    ), "two seeds computed the same run"


@pytest.mark.parametrize("name", ["sync_sgd", "local_sgd", "overlap_local_sgd"])
def test_on_a_time_budget_seeds_with_the_same_clocks_train_in_lockstep(tmp_path, name):
    """budget=time (experiments/training/budget.py): seeds whose workers' speeds do not depend
    on the seed stop and score their points at the same steps, so they share one pass, each
    record the one it writes alone; speeds drawn from the seed keep them apart."""
    from experiments.workers import sim

    budget = ("budget=time", "compute.straggler_prob=0", "dtype=float64", f"algorithm={name}")
    seeds = {s: config(*budget, f"seed={s}") for s in (1, 2)}
    assert sim.lockstep(seeds[1])
    assert not sim.lockstep(config(*budget, "compute.straggler_prob=0.25"))
    assert not sim.lockstep(config(*budget, "compute.slowdown=lognormal_steps"))
    assert train([(seeds[1], tmp_path / "s1"), (seeds[2], tmp_path / "s2")]) == [False, False]
    assert train([(seeds[2], tmp_path / "alone")]) == [False]
    together, by_itself = record(tmp_path / "s2"), record(tmp_path / "alone")
    assert together[0]["status"] == "completed" and together[0]["budget/points"] > 2
    assert together == by_itself


RANKED = [
    pytest.param("osp", "float64", (), id="osp-float64"),
    pytest.param("losp", "float32", (), id="losp-float32"),
    pytest.param("osp", "float64", ("budget=time", "compute.slowdown=one_slow"), id="osp-time"),
    pytest.param("losp", "float64", ("budget=time", "compute.slowdown=one_slow"), id="losp-time"),
]


@pytest.mark.parametrize("name, dtype, over", RANKED)
def test_osp_and_losp_seeds_rank_by_rank_write_the_records_they_write_alone(
    tmp_path, name, dtype, over
):
    """Seeds 1 and 2 rank by rank (a batched pass per rank over both seeds' replicas; the
    workers 1.5x and 3x slower, their overlap windows on the clock), then seed 2 alone: equal
    records, bit for bit in float64, on a steps and on a time budget."""
    seeds = {
        s: config(f"algorithm={name}", f"dtype={dtype}", f"seed={s}", "compute.straggler_prob=0",
                  *over)
        for s in (1, 2)
    }  # fmt: skip
    assert train([(seeds[1], tmp_path / "s1"), (seeds[2], tmp_path / "s2")]) == [False, False]
    assert train([(seeds[2], tmp_path / "alone")]) == [False]
    together, by_itself = record(tmp_path / "s2"), record(tmp_path / "alone")
    assert together[0]["status"] == "completed"
    if over:  # on the time budget: scored at points of the clock, the same for both seeds
        assert together[0]["budget/points"] > 2
    else:  # the slow workers' pushes arrive late: the fast workers' windows have steps
        windows = [r["algo/window_steps"] for r in together[1] if "algo/window_steps" in r]
        assert max(windows) > 0, windows
    if dtype == "float64":
        assert together == by_itself
    else:
        assert_close(together, by_itself, FLOAT32_RTOL)
        assert together[0]["platform"]["layout"] == "channels_last"
    assert record(tmp_path / "s1")[1][0]["train/loss"] != together[1][0]["train/loss"]


def test_seeds_rank_by_rank_that_start_at_different_steps_train_in_waves(tmp_path):
    """Seeds resumed from different steps cannot share a pass rank by rank (their ranks' passes
    would not line up): each starting step is a wave of its own, and every seed still writes
    the record it writes alone."""
    from experiments.data.datasets import load_dataset
    from experiments.worker import train_worker
    from experiments.workers import sim

    cfgs = {s: config("algorithm=osp", "dtype=float64", f"seed={s}", "compute.straggler_prob=0")
            for s in (0, 1, 2)}  # fmt: skip
    bundle = load_dataset(cfgs[0]["dataset"])
    seen: dict[int, set[int]] = {}

    def worker(cfg, run_dir, worker_id, backend, data, stopper, group, device, **kw):
        seen.setdefault(cfg["seed"], set()).add(kw["batched"].m)  # replicas in its passes
        return train_worker(cfg, run_dir, worker_id, backend, data, stopper, group, device, **kw)

    runs = []
    for s in (0, 1, 2):
        (tmp_path / f"s{s}").mkdir()
        runs.append((cfgs[s], tmp_path / f"s{s}", bundle))
    assert sim.run_lockstep(runs, worker, starts=[0, 4, 0]) == [False] * 3
    assert seen == {0: {2}, 1: {1}, 2: {2}}  # seeds 0 and 2 together, seed 1 in a wave alone
    train([(cfgs[1], tmp_path / "alone")])
    assert record(tmp_path / "s1") == record(tmp_path / "alone")


def test_osp_seeds_rank_by_rank_stopped_and_resumed_write_the_record_of_a_run_alone(tmp_path):
    """A stop (simulated at step 5) checkpoints both seeds at one step; the rerun resumes them
    rank by rank from there, and each ends with the metrics and summary of
    the same seed run alone without a stop, bit for bit in float64."""
    from experiments.data.datasets import load_dataset
    from experiments.store.checkpoint import read_meta
    from experiments.worker import train_worker
    from experiments.workers import sim

    over = ("algorithm=losp", "dtype=float64", "compute.straggler_prob=0", "checkpoint_every=100")
    cut = {s: config(*over, f"seed={s}", "checkpoint.simulate_signal_at_step=5") for s in (1, 2)}
    bundle = load_dataset(cut[1]["dataset"])
    runs = [(cut[s], tmp_path / f"s{s}", bundle) for s in (1, 2)]
    for _, run_dir, _ in runs:
        run_dir.mkdir()
    assert sim.run_lockstep(runs, train_worker) == [False, False]
    for _, run_dir, _ in runs:  # (the runner, not this test, records the status)
        assert "checkpoint saved" in record(run_dir)[0]["error"]
    starts = [read_meta(d)["step"] for _, d, _ in runs]
    assert starts[0] == starts[1] >= 5, starts
    assert sim.run_lockstep(runs, train_worker, starts=starts) == [False, False]
    train([(config(*over, "seed=2"), tmp_path / "alone")])
    (resumed, rows), (alone, alone_rows) = record(tmp_path / "s2"), record(tmp_path / "alone")
    assert resumed["status"] == "completed" and rows == alone_rows
    for key in ("final/test_acc", "steps", "time/train_s", "comm/bytes", "algo/window_steps"):
        assert resumed.get(key) == alone.get(key), key


class FailingSteps:
    """`BatchedSteps` as one worker sees it, its `fail_at`-th batched step raising."""

    def __init__(self, steps, fail_at: int):
        self._steps, self._left = steps, fail_at

    def forward_backward(self, *args, **kwargs):
        self._left -= 1
        if self._left == 0:
            raise RuntimeError("injected in one seed")
        return self._steps.forward_backward(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._steps, name)


@pytest.mark.parametrize("fail_at", [0, 4], ids=["before-its-first-step", "mid-training"])
def test_a_seed_that_fails_leaves_the_others_records_as_they_are_alone(tmp_path, fail_at):
    """Seed 1's worker 1 fails (before it joins the stacked replicas, or at its 4th step):
    seed 1 fails naming it; seeds 0 and 2 complete, their records those of runs alone."""
    from experiments.worker import train_worker

    def worker(cfg, run_dir, worker_id, backend, bundle, stopper, group, device, **kw):
        if cfg["seed"] == 1 and worker_id.rank == 1:
            if fail_at == 0:
                raise RuntimeError("injected in one seed")
            kw["batched"] = FailingSteps(kw["batched"], fail_at)
        return train_worker(cfg, run_dir, worker_id, backend, bundle, stopper, group, device, **kw)

    cfgs = {s: config("algorithm=local_sgd", "dtype=float64", f"seed={s}") for s in (0, 1, 2)}
    outcomes = train([(cfgs[s], tmp_path / f"s{s}") for s in (0, 1, 2)], worker)
    assert outcomes[0] is False and outcomes[2] is False
    assert isinstance(outcomes[1], WorkerFailed)
    assert "worker 1 (rank 1) failed: RuntimeError: injected in one seed" in str(outcomes[1])
    train([(cfgs[2], tmp_path / "alone")])
    assert record(tmp_path / "s2") == record(tmp_path / "alone")
    assert record(tmp_path / "s0")[0]["status"] == "completed"
    deadline = time.monotonic() + 30  # the failed seed's workers stop at their next collective
    while [t for t in threading.enumerate() if t.name.startswith("commsgd-worker-")]:
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_seeds_in_lockstep_share_one_calibration(tmp_path):
    """Measured compute times: the first seed's workers measure, the others take its values
    (one calibration per lock-step, not one per seed)."""
    over = ("algorithm=local_sgd", "compute.step_time_s=measured", "compute.algo_time_s=measured")
    runs = [(config(*over, f"seed={s}"), tmp_path / f"s{s}") for s in (0, 1, 2)]
    assert train(runs) == [False, False, False]
    measured = {
        json.dumps({k: v for k, v in record(d)[0].items() if k.startswith("compute/")})
        for _, d in runs
    }
    assert len(measured) == 1, measured


def test_a_rank_that_leaves_completes_the_collectives_waiting_for_it():
    groups = ThreadGroup.create(3, timeout_s=30, name="t")
    results = {}

    def reduce(op):
        return [v for v in op.inputs if v is not None]

    def member(rank: int):
        results[rank] = groups[rank].collective("c", rank, reduce)

    waiting = [threading.Thread(target=member, args=(r,)) for r in (0, 1)]
    for t in waiting:
        t.start()
    groups[0].rendezvous.leave(2)  # rank 2 will never come: the two waiting get a result
    for t in waiting:
        t.join(10)
    assert results == {0: [0, 1], 1: [0, 1]}
    with pytest.raises(PeerFailed, match="has left"):
        groups[2].collective("c", 2, reduce)


@pytest.mark.e2e
def test_a_sweep_runs_its_seeds_in_lockstep_and_says_which_algorithms_cannot(tmp_path):
    out = tmp_path / "out"
    done = run_py(
        "-m",
        "cluster=sim",
        "scale=smoke",
        "dataset=synthetic",
        "wandb.mode=disabled",
        "progress=false",
        "algorithm=local_sgd,osp",
        "compute.slowdown=none,lognormal",  # osp's windows follow speeds drawn from the seed
        "seed=0,1,2",
        f"out_root={out}",
    )
    assert done.returncode == 0, done.stderr
    said = done.stdout
    assert said.count("lockstep: 3 seeds of one config in one batched pass") == 2, said
    assert said.count("lockstep: 3 seeds of one config rank by rank") == 1, said
    assert said.count("lockstep: osp cannot train seeds in lock-step") == 1, said
    summaries = {
        p.parent.name: json.loads(p.read_text()) for p in (out / "runs").glob("*/summary.json")
    }
    assert sorted(s["status"] for s in summaries.values()) == ["completed"] * 12
    assert sorted(n.split("-")[0] for n in summaries) == ["local_sgd"] * 6 + ["osp"] * 6
