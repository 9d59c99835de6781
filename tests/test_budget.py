"""The time budget (experiments/training/budget.py, docs/timing.md "Budgets"): its points and LR
clock, the copies taken as the virtual clock passes a point, the crossing estimator
(experiments/store/crossing.py), and whole runs: barrier-free evaluation equal to the barrier
evaluation where the workers are equal (threads and processes), and with one worker 3x slower,
OSP's fast workers busy where sync SGD's wait."""

from __future__ import annotations

import json
import math
import re
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from experiments.store.crossing import crossing_time, per_pass
from experiments.training.budget import TimeBudget, Timeline
from experiments.training.clock import Compute, Network, VirtualClock
from tests.cli import run_py_with_workers_here as run_py

# --- the budget's numbers (unit) ----------------------------------------------------------


def node(time_s=None, eval_every_s=None):
    return SimpleNamespace(time_s=time_s, eval_every_s=eval_every_s)


def test_default_budget_is_the_slowest_workers_passes_and_points_an_eighth_of_one():
    compute = Compute(step_time_s=0.025, slowdown=(1.0, 1.0, 1.0, 3.0))
    budget = TimeBudget.of(node(), epochs=10, steps_per_epoch=32, compute=compute)
    assert budget.time_s == pytest.approx(10 * 32 * 0.025 * 3)  # 24 s
    assert budget.every_s == pytest.approx(24 / 80)
    points = budget.points()
    assert len(points) == 80 and points[-1] == budget.time_s
    assert points[0] == pytest.approx(0.3) and all(
        b > a for a, b in zip(points, points[1:], strict=False)
    )


def test_points_end_at_the_budget_when_the_interval_does_not_divide_it():
    budget = TimeBudget(time_s=1.0, every_s=0.3, epochs=1, steps_per_epoch=10)
    assert budget.points() == pytest.approx([0.3, 0.6, 0.9, 1.0])


def test_the_lr_clock_is_the_fraction_of_the_budget():
    budget = TimeBudget(time_s=10.0, every_s=1.0, epochs=5, steps_per_epoch=4)  # 20 steps
    assert budget.schedule_step(0.0) == 0
    assert budget.schedule_step(5.0) == 10  # half the budget: half the schedule
    assert budget.schedule_step(9.99) == 19
    assert budget.schedule_step(12.0) == 19  # past T: the last step's LR


@pytest.mark.parametrize("bad", [{"time_s": -1.0}, {"time_s": 1.0, "eval_every_s": 0.0}])
def test_a_budget_that_cannot_be_refuses(bad):
    with pytest.raises(ValueError):
        TimeBudget.of(node(**bad), 1, 1, Compute(step_time_s=0.1, slowdown=(1.0,)))


@pytest.mark.parametrize(
    "overrides, said",
    [
        (("timing=real",), "budget=time needs timing=virtual"),
        (("algorithm=osp", "checkpoint_every=1"), "checkpoint_every=1 with budget=time: osp's"),
        (("budget.time_s=-1",), "budget.time_s must be null or a positive number"),
        (("budget.eval_images=0",), "budget.eval_images must be null (every test image)"),
    ],
)
def test_a_time_budget_it_cannot_run_is_refused_before_any_work(overrides, said):
    from experiments.checks.values import validate
    from experiments.errors import UserError
    from tests.compose import resolved

    validate(resolved("budget=time"))  # the option alone: the virtual clock, every default
    with pytest.raises(UserError, match=f"^{re.escape(said)}"):
        validate(resolved("budget=time", *overrides))


# --- the clock's accounts and the copies at the points (unit) --------------------------------


def clock(step=0.25, slowdown=(1.0,)):
    return VirtualClock(0, Network(), Compute(step_time_s=step, slowdown=slowdown))


def test_the_clock_knows_its_busy_and_idle_time_exactly():
    c = clock()
    c.local_step(0, 0.0)
    c.t = c.t + 0.5  # a wait
    c.local_step(1, 0.0)
    assert c.busy_s == 0.5 and c.steps == 2
    assert c.idle_s == 0.5 and c.t == 1.0


class Counter(torch.nn.Module):
    """A 'model' whose one parameter is the number of updates applied to it."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1))


def fake_algo(model):
    return SimpleNamespace(model=model, model_at=lambda t: model)


def timeline_for(c, points):
    budget = TimeBudget(time_s=points[-1], every_s=points[0], epochs=1, steps_per_epoch=1)
    model = Counter()
    comm = SimpleNamespace(clock=c, ledger=SimpleNamespace(hidden_s=0.0, bytes=0, collectives=0))
    tl = Timeline(budget, fake_algo(model), comm, loss_sum=lambda: 0.0, lr_at=lambda t: 0.1)
    tl.points = list(points)
    tl.install()
    return tl, model


def step(c, model, k):
    """A local step as the loop makes it: the clock moves (compute), then the update."""
    c.local_step(k, 0.0)
    with torch.no_grad():
        model.w += 1


def test_a_copy_is_the_state_when_the_clock_passes_its_point():
    c = clock(step=0.25)
    tl, model = timeline_for(c, [0.3, 0.6, 1.0])
    for k in range(4):
        step(c, model, k)  # the clock at 0.25, 0.5, 0.75, 1.0 after each step's update
    # 0.3 lies inside step 2's compute: one update applied; 0.6: two
    assert [p.state[0].item() for p in tl.taken] == [1.0, 2.0]
    assert [p.step for p in tl.taken] == [1, 2]
    assert tl.taken[0].compute_s == pytest.approx(0.3)  # 0.25 done + 0.05 into step 2
    tl.close()  # the clock is at T: T's copy, with the state as it is, and its local model
    assert tl.taken[-1].t == 1.0 and tl.taken[-1].state[0].item() == 4.0
    assert tl.taken[-1].local is not None and tl.taken[0].local is None


def test_a_wait_passing_a_point_copies_the_state_before_what_the_wait_brings():
    c = clock(step=0.25)
    tl, model = timeline_for(c, [0.5, 2.0])
    step(c, model, 0)
    c.t = 1.0  # a blocking collective completes at 1.0; its average applies after
    with torch.no_grad():
        model.w.fill_(10.0)
    (point,) = tl.taken
    assert point.state[0].item() == 1.0
    assert point.idle_s == pytest.approx(0.25) and point.compute_s == pytest.approx(0.25)


def test_close_takes_no_point_the_clock_has_not_reached():
    c = clock(step=0.25)
    tl, model = timeline_for(c, [0.3, 0.6, 1.0])
    step(c, model, 0)
    tl.close()  # a run that stopped early (diverged) at 0.25
    assert tl.taken == [] and c.watch is None


def test_the_copies_survive_a_checkpoint():
    c = clock(step=0.25)
    tl, model = timeline_for(c, [0.3, 0.6, 1.0])
    for k in range(3):
        step(c, model, k)
    saved = tl.state_dict()
    other, _ = timeline_for(clock(), [0.3, 0.6, 1.0])
    other.load_state_dict(saved)
    assert other.next == tl.next == 2
    assert [p.state[0].item() for p in other.taken] == [1.0, 2.0]


# --- time to target: the estimator (unit) ------------------------------------------------


def test_crossing_is_exact_on_a_straight_line_and_the_first_point_on_the_steps_budget():
    times = [1.0, 2.0, 3.0, 4.0]
    accs = [0.1, 0.3, 0.5, 0.7]
    assert crossing_time(times, accs, 0.4, interpolate=True) == pytest.approx(2.5)
    assert crossing_time(times, accs, 0.4, interpolate=False) == 3.0
    assert crossing_time(times, accs, 0.05, interpolate=True) == 1.0  # above from the start
    assert crossing_time(times, accs, 0.9, interpolate=True) is None


def test_crossing_estimator_on_a_curve_whose_crossing_is_known():
    # a(t) = 0.9 (1 - exp(-t)); a(t*) = 0.75 at t* = ln 6: sampled every 0.3 s, the
    # interpolated crossing is within a few hundredths, the first point's time up to 0.3 late
    target, truth, every = 0.75, math.log(6.0), 0.3
    for shift in (0.0, 0.07, 0.13, 0.21, 0.29):
        times = [shift + every * k for k in range(1, 40)]
        accs = [0.9 * (1 - math.exp(-t)) for t in times]
        interpolated = crossing_time(times, accs, target, interpolate=True)
        first = crossing_time(times, accs, target, interpolate=False)
        assert abs(interpolated - truth) < 0.02
        assert 0 <= first - truth < every
    noisy = [a + (0.01 if k % 2 else -0.01) for k, a in enumerate(accs)]
    assert abs(crossing_time(times, noisy, target, interpolate=True) - truth) < every


def test_on_a_noisy_curve_the_crossing_does_not_depend_on_how_often_it_was_scored():
    # points scored on a subset of the test images are noisy (sd 0.02 here): a dense curve
    # touches the target by chance early; its monotone fit does not, so every sixth point
    # gives about the crossing the dense curve gives, both near the truth
    truth = math.log(6.0)
    for seed in range(8):
        rng = np.random.default_rng(seed)
        times = [0.05 * k for k in range(1, 200)]
        accs = [0.9 * (1 - math.exp(-t)) + rng.normal(0, 0.02) for t in times]
        dense = crossing_time(times, accs, 0.75, interpolate=True)
        sparse = crossing_time(times[5::6], accs[5::6], 0.75, interpolate=True)
        assert abs(dense - truth) < 0.15 and abs(sparse - truth) < 0.15, seed
        assert abs(dense - sparse) < 0.2, seed


def test_per_pass_keeps_one_point_a_pass_with_its_means():
    rows = [
        {"time/train_s": 0.5 * k, "test/acc": 0.1 * k, "train/loss": float(k), "test/images": 9}
        for k in range(1, 9)
    ]  # T = 4, 2 passes: boundaries 2 and 4
    kept = per_pass(rows, epochs=2)
    assert [r["time/train_s"] for r in kept] == [2.0, 4.0]
    assert [r["train/loss"] for r in kept] == [2.5, 6.5]
    assert [r["test/acc"] for r in kept] == pytest.approx([0.25, 0.65])  # the pass's means
    steps = [{"time/train_s": 1.0, "test/acc": 0.5, "train/loss": 1.0}]
    assert per_pass(steps, epochs=2) == steps  # the steps budget's rows as they are


# --- whole runs ----------------------------------------------------------------------------

STEP = 0.03125  # a power of two: the virtual clock's sums are exact
SMOKE = ("dataset=synthetic", "scale=smoke", "wandb.mode=disabled", "timing=virtual",
         f"compute.step_time_s={STEP}", "compute.algo_time_s=0", "progress=false")  # fmt: skip
EPOCH_S = 32 * STEP  # smoke: 32 steps a pass, 2 passes


def rows_of(root) -> list[dict]:
    (run_dir,) = [p for p in (root / "runs").iterdir() if p.is_dir()]
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def summary_of(root) -> dict:
    (run_dir,) = [p for p in (root / "runs").iterdir() if p.is_dir()]
    return json.loads((run_dir / "summary.json").read_text())


def run(tmp_path, name, *overrides) -> tuple[list[dict], dict]:
    proc = run_py(*SMOKE, *overrides, f"out_root={tmp_path / name}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    return rows_of(tmp_path / name), summary_of(tmp_path / name)


@pytest.mark.e2e
@pytest.mark.parametrize("cluster", ["sim", "local"])
@pytest.mark.parametrize("algorithm", ["sync_sgd", "local_sgd"])
def test_barrier_free_evaluation_equals_the_barrier_evaluation_with_equal_workers(
    tmp_path, cluster, algorithm
):
    common = (f"algorithm={algorithm}", "tau=4", f"cluster={cluster}")
    if cluster == "sim":
        common += ("cluster.batched=false",)
    barrier, _ = run(tmp_path, "steps", *common)
    budget = ("budget=time", f"budget.time_s={2 * EPOCH_S}", f"budget.eval_every_s={EPOCH_S}")
    free, summary = run(tmp_path, "time", *common, *budget, "budget.eval_images=null")
    assert [r["time/train_s"] for r in free] == [EPOCH_S, 2 * EPOCH_S]
    assert len(barrier) == len(free) == 2
    for a, b in zip(barrier, free, strict=True):
        assert b["step"] == a["step"]  # every worker at the same step: the pass's end
        assert b["test/acc"] == a["test/acc"]
        assert b["test/loss"] == pytest.approx(a["test/loss"], rel=1e-12)
    assert free[-1]["test/acc_local"] == barrier[-1]["test/acc_local"]
    assert summary["budget/points"] == 2 and summary["workers/idle_share"] == [0.0, 0.0]


@pytest.mark.e2e
def test_with_one_worker_3x_slower_fast_osp_workers_do_not_wait_where_sync_sgds_do(tmp_path):
    common = ("workers=4", "cluster=sim", "budget=time", "compute.slowdown=one_slow",
              "compute.factor=3", "network=ethernet1g", "tau=2")  # fmt: skip
    _, osp = run(tmp_path, "osp", "algorithm=osp", *common)
    rows, sync = run(tmp_path, "sync", "algorithm=sync_sgd", *common)
    for summary in (osp, sync):
        assert summary["status"] == "completed"
        assert summary["time/train_s"] == summary["budget/time_s"]  # scored at T
        assert len(summary["workers/idle_share"]) == 4
    fast = slice(0, 3)  # one_slow: the last worker is slow
    assert max(osp["workers/idle_share"][fast]) < 0.2
    assert min(sync["workers/idle_share"][fast]) > 0.6
    assert min(osp["workers/samples"][fast]) > 2 * osp["workers/samples"][3]
    # sync SGD's workers make the same steps: the slow one's pace
    assert max(sync["workers/steps"]) - min(sync["workers/steps"]) <= 1
    # points every eighth of a slow pass, the last on the whole test set
    assert sync["budget/points"] == len(rows) >= 16
    assert rows[0]["test/images"] < rows[-1]["test/images"]
    budget = sync["budget/time_s"]
    assert [r["time/train_s"] for r in rows] == pytest.approx(
        [budget * k / len(rows) for k in range(1, len(rows) + 1)]
    )


@pytest.mark.e2e
def test_a_stopped_time_budget_run_resumes_to_the_same_record(tmp_path):
    # cut by a (simulated) stop request mid-pass: the copies not yet scored travel in the
    # checkpoint, and the rerun's rows and summary are the uninterrupted run's
    common = ("algorithm=local_sgd", "tau=2", "cluster=sim", "cluster.batched=false",
              "budget=time", "compute.slowdown=one_slow", "compute.factor=3")  # fmt: skip
    whole, whole_summary = run(tmp_path, "whole", *common)
    stop = ("checkpoint.simulate_signal_at_step=40", "checkpoint.poll_steps=5")  # mid-pass 2
    cut = run_py(*SMOKE, *common, *stop, f"out_root={tmp_path / 'cut'}")
    assert cut.returncode == 3, cut.stderr[-2000:]
    (run_dir,) = [p for p in (tmp_path / "cut" / "runs").iterdir() if p.is_dir()]
    meta = json.loads((run_dir / "checkpoint" / "latest.json").read_text())
    assert meta["step"] == 45  # between two passes' ends: copies not scored yet
    resumed, summary = run(tmp_path, "cut", *common, *stop)
    assert [r["test/acc"] for r in resumed] == [r["test/acc"] for r in whole]
    assert [r["time/train_s"] for r in resumed] == [r["time/train_s"] for r in whole]
    for key in ("final/test_acc", "workers/idle_s", "workers/samples", "budget/points"):
        assert summary[key] == whole_summary[key], key
