"""The time model (timing.md): cost formulas, worker speeds, the real and virtual clocks in the
communication layer, the ledger invariant, and the closed forms the model must reproduce."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
import torch

from algorithms.comm import Comm
from experiments.config import schema
from experiments.training.clock import (
    Compute,
    Network,
    RealClock,
    VirtualClock,
    ps_time,
    ring_allreduce_time,
    slowdown_factors,
)
from experiments.training.models import TinyCNN
from tests.cli import run_py_with_workers_here as run_py  # run.py here, its workers real
from tests.compose import composed

RESNET18_BYTES = 11_173_962 * 4


# --- formulas and speeds (unit) -----------------------------------------------------------


def test_ring_allreduce_formula_for_resnet18_on_40g():
    # 2 (m-1)/m n / B at line rate: "about 17 ms" for 16 workers (timing.md)
    t = ring_allreduce_time(RESNET18_BYTES, 16, 0.0, 40.0)
    assert t == pytest.approx(2 * 15 / 16 * RESNET18_BYTES * 8 / 40e9)
    assert 0.016 < t < 0.018
    assert ring_allreduce_time(1000, 4, 1e-3, math.inf) == pytest.approx(2 * 3 * 1e-3)
    assert ring_allreduce_time(1000, 1, 1.0, 1.0) == 0.0


def test_parameter_server_formula():
    # 2 alpha + 2 m n / (k B)
    assert ps_time(1e6, 8, 2, 1e-3, 1.0) == pytest.approx(2e-3 + 2 * 8 * 1e6 * 8 / (2 * 1e9))
    net = Network(latency_s=1e-3, bandwidth_gbps=1.0, topology="ps", ps_servers=2)
    assert net.collective_time(1e6, 8) == pytest.approx(ps_time(1e6, 8, 2, 1e-3, 1.0))


def network_node(**values):
    """The composed config's `network` node (ideal), typed, with `values` in place."""
    return dataclasses.replace(schema.typed(composed("network=ideal")).network, **values)


def compute_node(**values):
    """The composed config's `compute` node, typed, with `values` in place."""
    return dataclasses.replace(schema.typed(composed()).compute, **values)


@pytest.mark.parametrize(
    "cfg, message",
    [
        ({"topology": "mesh"}, "topology"),
        ({"bandwidth_gbps": 0}, "bandwidth"),
        ({"latency_s": -1}, "latency"),
        ({"ps_servers": 0}, "ps_servers"),
    ],
)
def test_bad_network_values(cfg, message):
    with pytest.raises(ValueError, match=message):
        Network.from_config(network_node(**cfg))


def test_slowdown_patterns():
    assert slowdown_factors("none", 4) == [1, 1, 1, 1]
    assert slowdown_factors("one_slow", 4, factor=3) == [1, 1, 1, 3]
    assert slowdown_factors("half_slow", 4, factor=2) == [1, 1, 2, 2]
    assert slowdown_factors([1, 1.5], 2) == [1, 1.5]
    a, b = slowdown_factors("lognormal", 8, seed=1), slowdown_factors("lognormal", 8, seed=1)
    assert a == b and len(set(a)) == 8 and all(f > 0 for f in a)
    assert slowdown_factors("lognormal", 8, seed=2) != a
    with pytest.raises(ValueError, match="3 factors for 2 workers"):
        slowdown_factors([1, 2, 3], 2)
    with pytest.raises(ValueError, match="must be one of"):
        slowdown_factors("sometimes", 2)


def test_stragglers_are_seeded_by_seed_rank_step():
    cfg = {"step_time_s": 0.1, "straggler_prob": 0.3, "straggler_factor": 4.0}
    c = Compute.from_config(compute_node(**cfg), m=2, seed=0)
    times = [c.step_time(1, s, measured_s=99.0) for s in range(200)]
    assert {round(t, 12) for t in times} == {0.1, 0.4}
    assert 30 < sum(t > 0.2 for t in times) < 90  # about 30% of 200
    assert times == [c.step_time(1, s, 0.0) for s in range(200)]  # deterministic
    other_rank = [c.step_time(0, s, 0.0) for s in range(200)]
    other = Compute.from_config(compute_node(**cfg), 2, seed=1)
    other_seed = [other.step_time(1, s, 0.0) for s in range(200)]
    assert times != other_rank and times != other_seed


@pytest.mark.parametrize(
    "cfg, message",
    [
        ({"step_time_s": 0}, "compute.step_time_s must be a number > 0 or 'measured'"),
        ({"step_time_s": "fast"}, "compute.step_time_s must be a number > 0"),
        ({"algo_time_s": -0.1}, "compute.algo_time_s must be a number >= 0 or 'measured'"),
        ({"algo_time_s": True}, "compute.algo_time_s must be a number >= 0"),
        ({"algo_time_s": float("inf")}, "compute.algo_time_s must be a number >= 0"),
    ],
)
def test_bad_compute_times(cfg, message):
    with pytest.raises(ValueError, match=message):
        Compute.from_config(compute_node(**cfg), m=2, seed=0)


def test_compute_times_measured_or_pinned():
    node = compute_node(step_time_s="measured", algo_time_s="measured")
    measured = Compute.from_config(node, m=2, seed=0)
    assert measured.step_time_s is None and measured.algo_time_s is None  # both `measured`
    pinned = Compute.from_config(compute_node(step_time_s=0.1, algo_time_s=0), m=2, seed=0)
    assert (pinned.step_time_s, pinned.algo_time_s) == (0.1, 0.0)
    assert pinned.algo_time(0, 0) == 0.0  # not charged


def test_measured_step_time_scales_the_measurement():
    node = compute_node(step_time_s="measured", slowdown="one_slow", factor=3)
    c = Compute.from_config(node, m=2, seed=0)
    assert c.step_time(0, 0, measured_s=0.02) == pytest.approx(0.02)
    assert c.step_time(1, 0, measured_s=0.02) == pytest.approx(0.06)


# --- clocks inside the communication layer (real gloo processes) --------------------------


def _virtual_collectives(rank: int, world_size: int, latency_s: float, dtype=torch.float64):
    net = Network(latency_s=latency_s)
    # binary fractions, so that clock arithmetic is exact
    compute = Compute(step_time_s=1 / 16, slowdown=tuple(1.0 + r for r in range(world_size)))
    clock = VirtualClock(rank, net, compute)
    comm = Comm(clock=clock)
    t_coll = net.collective_time(8 * 10, world_size)
    log = {}
    clock.local_step(0, 0.0)  # (rank + 1) / 16
    x = torch.full((10,), float(rank), dtype=dtype)
    comm.mean_([x])  # blocking: all finish at max + T (launch clocks in the same buffer)
    log["blocking_mean"] = x.tolist()
    log["after_blocking"] = clock.now()
    log["exposed_blocking"] = comm.ledger.exposed_s
    pending = comm.mean_async([torch.ones(10, dtype=torch.float64)])
    completion = log["after_blocking"] + t_coll  # all launched at the same clock
    log["done_at_launch"] = pending.is_completed()
    steps = 0
    while not pending.is_completed():  # train on until the average has arrived
        clock.local_step(1 + steps, 0.0)
        steps += 1
    log["window_steps"] = steps
    before = clock.now()
    pending.wait()
    log["wait_moved_clock"] = clock.now() - before
    log["completion"] = completion
    log["hidden"] = comm.ledger.hidden_s
    log["T"] = t_coll
    return log


@pytest.mark.dist
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_virtual_clock_blocking_and_async_collectives(dtype):
    from tests.workers import run_workers

    m, latency = 3, 1 / 16
    logs = run_workers(_virtual_collectives, m, latency, dtype)
    t_coll = ring_allreduce_time(80, m, latency, math.inf)  # 2 (m-1) alpha = 1/4
    slowest = m / 16
    for rank, log in enumerate(logs):
        assert log["blocking_mean"] == [1.0] * 10  # mean of ranks 0, 1, 2; clocks not in it
        # every worker leaves the blocking collective at max_j c_j + T
        assert log["after_blocking"] == pytest.approx(slowest + t_coll)
        assert log["exposed_blocking"] == pytest.approx(slowest + t_coll - (rank + 1) / 16)
        assert not log["done_at_launch"]
        # the async one completes T later: a worker of speed (rank+1) fits ceil(T / step) steps
        step = (rank + 1) / 16
        assert log["window_steps"] == math.ceil(t_coll / step)  # 4, 2, 2
        assert log["wait_moved_clock"] == 0.0  # it had arrived: waiting costs nothing
        assert log["hidden"] == pytest.approx(t_coll)  # the whole collective overlapped
    assert logs[0]["window_steps"] > logs[-1]["window_steps"]  # fast workers fit more steps


def _emulated_wait(rank: int, world_size: int):
    import time

    clock = RealClock(rank, Network(latency_s=0.05), Compute(None, (1.0,) * world_size),
                      emulate_network=True)  # fmt: skip
    comm = Comm(clock=clock)
    t0 = time.perf_counter()
    comm.mean_([torch.ones(4)])  # modeled T = 2 (m-1) * 0.05 = 0.1 s
    blocking = time.perf_counter() - t0
    pending = comm.mean_async([torch.ones(4)])
    time.sleep(0.15)  # compute longer than T: the collective is hidden
    t1 = time.perf_counter()
    pending.wait()
    hidden_wait = time.perf_counter() - t1
    return blocking, hidden_wait, comm.ledger


@pytest.mark.dist
def test_real_clock_emulates_the_network():
    from tests.workers import run_workers

    for blocking, hidden_wait, ledger in run_workers(_emulated_wait, 2):
        assert blocking >= 0.1  # completes no earlier than its modeled duration
        assert hidden_wait < 0.05  # finished while the worker computed: costs nothing
        assert ledger.exposed_s == pytest.approx(blocking, abs=0.02)
        assert 0.09 < ledger.hidden_s < 0.2


# --- whole runs: closed forms, determinism, the ledger invariant, heterogeneity -----------

STEP = 0.01
ALGO = 0.002  # the algorithm's work per step, pinned: the closed forms gain ALGO per step
FAST = ("dataset=synthetic", "scale=smoke", "wandb.mode=disabled", "timing=virtual",
        f"compute.step_time_s={STEP}", f"compute.algo_time_s={ALGO}")  # fmt: skip
TINY_BYTES = sum(p.numel() for p in TinyCNN(1, 10, width=8).parameters()) * 4
STEPS = 64  # synthetic: 2048 samples, 2 workers, batch 32, 2 epochs


def final_row(root) -> dict:
    (run_dir,) = [p for p in (root / "runs").iterdir() if p.is_dir()]
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()][-1]


def run_virtual(tmp_path, name: str, *overrides: str) -> dict:
    proc = run_py(*FAST, *overrides, f"out_root={tmp_path / name}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    return final_row(tmp_path / name)


@pytest.mark.e2e
def test_closed_forms_sync_local_overlap_and_ps(tmp_path):
    lat, bw = 1e-4, 1.0
    net = (f"network.latency_s={lat}", f"network.bandwidth_gbps={bw}", "eval_every=2")
    t_ring = ring_allreduce_time(TINY_BYTES, 2, lat, bw)

    row = run_virtual(tmp_path, "sync", "algorithm=sync_sgd", *net)
    assert row["time/comm_exposed_s"] == pytest.approx(STEPS * t_ring, rel=1e-9)
    assert row["time/compute_s"] == pytest.approx(STEPS * STEP, rel=1e-9)
    assert row["time/algo_s"] == pytest.approx(STEPS * ALGO, rel=1e-9)
    assert row["time/train_s"] == pytest.approx(STEPS * (STEP + ALGO + t_ring), rel=1e-9)
    assert row["comm/ratio"] == pytest.approx(t_ring / STEP, rel=1e-9)
    assert row["compute/step_time_s"] == STEP and row["compute/algo_time_s"] == ALGO

    row = run_virtual(tmp_path, "local", "algorithm=local_sgd", "tau=4", *net)
    assert row["time/comm_exposed_s"] == pytest.approx(STEPS / 4 * t_ring, rel=1e-9)

    # Overlap-Local-SGD, tau = 2: the anchor has 2 steps (each STEP + ALGO) to arrive. At the
    # end, finish() waits for the last anchor (T, nothing to hide it) and averages once (T).
    rounds, window = STEPS // 2, 2 * (STEP + ALGO)
    for name, latency in (("hidden", 0.3 * STEP), ("exposed", 1.5 * STEP)):
        # T = 2 alpha + bytes = 0.6 and 3 steps + bytes: within a round's window, and beyond it
        t = ring_allreduce_time(TINY_BYTES, 2, latency, bw)
        row = run_virtual(tmp_path, f"overlap_{name}", "algorithm=overlap_local_sgd", "tau=2",
                          f"network.latency_s={latency}", f"network.bandwidth_gbps={bw}",
                          "eval_every=2")  # fmt: skip
        per_round = max(0.0, t - window)
        assert row["time/comm_exposed_s"] == pytest.approx((rounds - 1) * per_round + 2 * t)
        assert (per_round == 0.0) == (name == "hidden")
        assert row["time/comm_hidden_s"] == pytest.approx((rounds - 1) * min(t, window))

    row = run_virtual(tmp_path, "ps", "algorithm=sync_sgd", "network.topology=ps",
                      "network.ps_servers=2", *net)  # fmt: skip
    assert row["time/comm_exposed_s"] == pytest.approx(
        STEPS * ps_time(TINY_BYTES, 2, 2, lat, bw), rel=1e-9
    )


@pytest.mark.e2e
def test_virtual_time_is_deterministic_and_the_ledger_adds_up(tmp_path):
    stragglers = ("compute.straggler_prob=0.3", "compute.straggler_factor=3", "network=ethernet1g",
                  "algorithm=local_sgd", "tau=2")  # fmt: skip
    a = run_virtual(tmp_path, "a", *stragglers)
    b = run_virtual(tmp_path, "b", *stragglers)
    c = run_virtual(tmp_path, "c", *stragglers, "seed=1")
    for key in ("time/train_s", "time/compute_s", "time/comm_exposed_s", "time/comm_hidden_s"):
        assert a[key] == b[key], key
    assert a["time/compute_s"] != c["time/compute_s"]  # other straggler draws
    for row in (a, c):  # exactly, in virtual time (data loading is not modeled)
        assert row["time/data_s"] == 0.0
        parts = row["time/compute_s"] + row["time/algo_s"] + row["time/comm_exposed_s"]
        assert parts == pytest.approx(row["time/train_s"], rel=1e-12)
        assert row["time/compute_s"] > STEPS * STEP  # some steps straggled
        # a straggling step does its algorithm's work as slowly as its compute
        assert row["time/algo_s"] / row["time/compute_s"] == pytest.approx(ALGO / STEP)


def summary_of(root) -> dict:
    (run_dir,) = [p for p in (root / "runs").iterdir() if p.is_dir()]
    return json.loads((run_dir / "summary.json").read_text())


def rows_of(root) -> list[dict]:
    (run_dir,) = [p for p in (root / "runs").iterdir() if p.is_dir()]
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.e2e
@pytest.mark.parametrize("algorithm", ["osp", "losp"])
def test_a_measured_clock_is_recorded_and_a_rerun_that_pins_it_is_exact(tmp_path, algorithm):
    """issue 14 item 9: `measured` compute times are measured once (calibration), recorded in
    summary.json and the metrics, and a rerun with those values pinned gives the same virtual
    times and the same trajectory, bit for bit; for OSP/LOSP, whose rounds are decided on the
    clock (one slow worker: the fast one fits window steps)."""
    common = ("dataset=synthetic", "scale=smoke", "wandb.mode=disabled", "timing=virtual",
              f"algorithm={algorithm}", "tau=2", "compute.slowdown=one_slow", "compute.factor=3",
              "network=ethernet1g", "network.latency_s=0.002")  # fmt: skip
    first = run_py(*common, f"out_root={tmp_path / 'measured'}")
    assert first.returncode == 0, first.stderr[-2000:]
    summary = summary_of(tmp_path / "measured")
    step, algo = summary["compute/step_time_s"], summary["compute/algo_time_s"]
    assert step > 0 and algo > 0  # OSP/LOSP do work of their own in the hooks
    assert summary["compute/measured_step_s"] == step  # measured, used as measured
    assert summary["compute/measured_step_min_s"] <= step <= summary["compute/measured_step_max_s"]
    assert summary["compute/calibration_steps"] == 10  # 5 whole rounds of tau = 2
    rerun = run_py(*common, f"compute.step_time_s={step!r}", f"compute.algo_time_s={algo!r}",
                   f"out_root={tmp_path / 'pinned'}")  # fmt: skip
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    pinned = summary_of(tmp_path / "pinned")
    assert pinned["compute/measured_step_s"] is None  # nothing measured the second time
    measured_rows, pinned_rows = rows_of(tmp_path / "measured"), rows_of(tmp_path / "pinned")
    assert len(measured_rows) == len(pinned_rows) == 2
    for a, b in zip(measured_rows, pinned_rows, strict=True):
        for key in a:
            if key == "time/eval_s" or key.startswith("compute/"):
                continue  # evaluation is real time; the calibration's raw measurements
            assert a[key] == b[key], key
        assert a["compute/step_time_s"] == b["compute/step_time_s"] == step
    assert measured_rows[-1]["algo/window_steps"] > 0  # the clock decided the rounds
    parts = sum(pinned[k] for k in ("time/compute_s", "time/algo_s", "time/comm_exposed_s"))
    assert parts == pytest.approx(pinned["time/train_s"], rel=1e-12)


@pytest.mark.e2e
def test_real_time_ledger_adds_up_within_2_percent(tmp_path):
    proc = run_py("dataset=synthetic", "scale=smoke", "wandb.mode=disabled", "algorithm=local_sgd",
                  "tau=2", "compute.step_time_s=0.01", "emulate_compute=true",
                  f"out_root={tmp_path}")  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    row = final_row(tmp_path)
    parts = (
        row["time/compute_s"] + row["time/algo_s"] + row["time/comm_exposed_s"] + row["time/data_s"]
    )
    assert parts <= row["time/train_s"] * (1 + 1e-9)
    assert parts >= 0.98 * row["time/train_s"]
    assert row["time/compute_s"] >= STEPS * 0.01  # emulate_compute slept to the modeled time
    assert row["time/algo_s"] > 0  # measured in the hooks: local SGD's averaging arithmetic
    assert "compute/step_time_s" not in row  # the real clock has no calibration


@pytest.mark.e2e
def test_emulated_overlap_hides_communication_that_local_sgd_exposes(tmp_path):
    # one all-reduce ~ one compute step (50 ms): local SGD at tau 2 waits for it every round,
    # Overlap-Local-SGD hides it behind the next round's two steps.
    # 60 steps: the two waits of finish() (0.1 s) stay small next to 3 s of compute.
    common = (
        "dataset=synthetic",
        "dataset.num_train=1280",
        "scale=smoke",
        "wandb.mode=disabled",
        "tau=2",
        "epochs=3",  # 20 steps an epoch
        "eval_every=3",  # no drain before the end
        "emulate_network=true",
        "emulate_compute=true",
        "compute.step_time_s=0.05",
        "network.latency_s=0.025",
    )
    ratios = {}
    for algorithm in ("local_sgd", "overlap_local_sgd"):
        out = tmp_path / algorithm
        proc = run_py(*common, f"algorithm={algorithm}", f"out_root={out}")  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-2000:]
        row = final_row(out)
        ratios[algorithm] = row["time/comm_exposed_s"] / row["time/compute_s"]
    assert 0.35 < ratios["local_sgd"] < 0.7  # about half: 1 step of comm per 2 of compute
    assert ratios["overlap_local_sgd"] < 0.1


@pytest.mark.e2e
def test_osp_losp_on_ideal_network_equal_local_sgd(tmp_path):
    losses = {}
    for algorithm in ("local_sgd", "osp", "losp"):
        proc = run_py(*FAST, f"algorithm={algorithm}", "tau=2", "dtype=float64", "network=ideal",
                      f"out_root={tmp_path / algorithm}")  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-2000:]
        (run_dir,) = [p for p in (tmp_path / algorithm / "runs").iterdir() if p.is_dir()]
        rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
        losses[algorithm] = [r["train/loss"] for r in rows]
        if algorithm != "local_sgd":
            # homogeneous workers, zero-cost network: the overlap window is always empty
            assert all(r["algo/local_steps"] == 2 for r in rows)
    # algorithms.md section 11, identity 4
    assert losses["osp"] == pytest.approx(losses["local_sgd"], abs=1e-10)
    assert losses["losp"] == pytest.approx(losses["local_sgd"], abs=1e-10)


@pytest.mark.e2e
def test_one_slow_worker_sets_the_pace_of_sync_but_not_of_osp(tmp_path):
    slow = ("compute.slowdown=one_slow", "compute.factor=3", "network=ethernet10g", "tau=2")
    sync = run_virtual(tmp_path, "sync", "algorithm=sync_sgd", *slow)
    # rank 0 (fast) logs: in sync SGD it waits for the slow worker every step
    assert sync["time/train_s"] >= STEPS * 3 * STEP
    assert sync["time/comm_exposed_s"] >= STEPS * 2 * STEP
    osp = run_virtual(tmp_path, "osp", "algorithm=osp", *slow)
    # the fast worker fits window steps while the slow one's push travels: rounds > tau steps
    assert osp["algo/local_steps"] > 2
    assert osp["algo/window_steps"] > 0


@pytest.mark.parametrize("on_host", [True, False])
def test_loss_meter_sums_in_float64_and_finds_the_first_bad_step(on_host):
    """The loop's loss accumulator (no per-step `.item()` on an accelerator): both of its
    ways give the float64 sum of the float32 losses in step order and the first non-finite
    step, and continue exactly from a checkpointed (sum, first bad step)."""
    from experiments.training.loop import LossMeter

    losses = [torch.tensor(v, dtype=torch.float32) for v in (0.1, 0.7, 2.3, 1e-8)]
    meter = LossMeter(torch.device("cpu"), on_host=on_host)
    for step, loss in enumerate(losses):
        meter.add(loss, step)
    expected = 0.0
    for loss in losses:
        expected += float(loss)
    assert meter.read() == (expected, math.inf)

    resumed = LossMeter(torch.device("cpu"), *meter.read(), on_host=on_host)
    for step, v in [(4, float("nan")), (5, 1.0), (6, float("inf"))]:
        resumed.add(torch.tensor(v), step)
    total, first_bad = resumed.read()
    assert math.isnan(total) and first_bad == 4
    resumed.reset_sum()
    assert resumed.read() == (0.0, 4)
