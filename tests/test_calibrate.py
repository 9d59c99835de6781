"""The virtual clock's calibration (experiments/training/calibrate.py): measured once on copies,
agreed across workers, leaving the training untouched; device time on an accelerator (a fake device
here); the communication layer's call accounting that separates an algorithm's work from its
communication."""

from __future__ import annotations

import math

import pytest
import torch

import algorithms
from algorithms.comm import Comm
from experiments.training import calibrate
from experiments.training.calibrate import Calibration, round_significant, steps_in_rounds
from experiments.training.clock import Compute, DeviceTimer, Network, VirtualClock
from experiments.training.models import TinyCNN
from tests.steps import flat_params, hook_steps, rank_batches

STEPS = 7
TAU = 3


def test_round_significant_and_whole_rounds():
    assert round_significant(0.0123456) == 0.01235
    assert round_significant(123456.0) == 123500.0
    assert round_significant(0.0) == 0.0
    assert round_significant(-2.71828, 3) == -2.72
    assert steps_in_rounds(10, 1) == 10
    assert steps_in_rounds(10, 3) == 12  # 4 whole rounds
    assert steps_in_rounds(10, 16) == 16  # one round holds them
    assert steps_in_rounds(2, 8) == 8


class _Agreement:
    """A one-worker Comm for the agreement step: sums of one value are the value."""

    world_size = 1

    def sum_scalars(self, values, op="sum"):
        return list(values)


@pytest.mark.parametrize(
    ("tau", "periodic", "warmup", "measured"),
    [
        (1, False, 2, 10),  # a per-step method: steps
        (3, True, 3, 12),  # whole rounds: one not measured, then 4 (12 steps >= 10)
        (64, True, 64, 64),  # the longest round measured whole
        (100_000, True, 2, 10),  # a longer round: its first local steps only (no 200k steps)
    ],
)
def test_calibration_measures_whole_rounds_up_to_a_bound(
    monkeypatch, tau, periodic, warmup, measured
):
    asked = []

    def measure(algo, batch, lr_at, timer, warmup_steps, measured_steps):
        asked.append((warmup_steps, measured_steps))
        return [0.01] * measured_steps, 0.001

    monkeypatch.setattr(calibrate, "measure", measure)
    algo = type("Algo", (), {"tau": tau, "periodic": periodic, "comm": _Agreement()})()
    compute = Compute(None, (1.0,), algo_time_s=None)
    result = calibrate.calibrate(algo, compute, (torch.zeros(1),), lambda t: 0.1, timer=lambda: 0)
    assert asked == [(warmup, measured)]
    assert result.measured_step_s == 0.01 and result.steps == measured


class FakeDevice:
    """An accelerator's clock: launching work costs the host `launch_s`, the device runs it
    later; `synchronize()` waits until the device has run everything queued."""

    def __init__(self, launch_s: float = 1e-4):
        self.host = 0.0
        self.device_free_at = 0.0
        self.launch_s = launch_s
        self.syncs = 0

    def launch(self, work_s: float) -> None:
        self.host += self.launch_s
        self.device_free_at = max(self.device_free_at, self.host) + work_s

    def synchronize(self) -> None:
        self.syncs += 1
        self.host = max(self.host, self.device_free_at)

    def now(self) -> float:
        return self.host


def test_device_timer_reads_device_time_not_launch_time():
    fake = FakeDevice()
    timer = DeviceTimer(synchronize=fake.synchronize, clock=fake.now)
    t0 = timer()
    for _ in range(4):
        fake.launch(0.05)  # 4 kernels of 50 ms, launched in 0.4 ms
    elapsed = timer() - t0
    assert elapsed == pytest.approx(0.2 + fake.launch_s)  # device time (first launch's delay)
    host_only = DeviceTimer(synchronize=None, clock=fake.now)
    t1 = host_only()
    fake.launch(0.05)
    assert host_only() - t1 == pytest.approx(fake.launch_s)  # what an unsynchronised timer sees


def test_device_timer_synchronises_cuda(monkeypatch):
    calls = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: calls.append(device))
    timer = DeviceTimer(torch.device("cuda", 1))
    timer()
    timer()
    assert calls == [torch.device("cuda", 1)] * 2  # every reading waits for the device first
    assert DeviceTimer("cpu").synchronize is None  # nothing queued on the CPU


class _SlowOnDevice(torch.nn.Module):
    """A model whose forward and backward each queue `work_s` of work on a FakeDevice (class
    attributes: the calibration's copies of the model share the one device)."""

    fake: FakeDevice
    work_s: float

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 3)

    def forward(self, x):
        self.fake.launch(self.work_s)
        out = self.linear(x)
        out.register_hook(lambda g: self.fake.launch(self.work_s))
        return out


class _AlgoOnDevice(algorithms.REGISTRY["sync_sgd"]):
    """sync SGD whose own work (before its average) queues `work_s` on the FakeDevice."""

    fake: FakeDevice
    work_s: float

    def before_step(self, t: int) -> None:
        self.fake.launch(self.work_s)
        super().before_step(t)


def _calibrate_on_fake_device(rank: int, world_size: int) -> tuple:
    fake = FakeDevice()
    _SlowOnDevice.fake, _SlowOnDevice.work_s = fake, 0.02
    model = _SlowOnDevice()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    _AlgoOnDevice.fake, _AlgoOnDevice.work_s = fake, 0.004
    algo = _AlgoOnDevice(model, opt, Comm(), algorithms.make_config("sync_sgd", {}))
    compute = Compute(None, (1.0,) * world_size, algo_time_s=None)
    batch = (torch.randn(8, 4), torch.randint(0, 3, (8,)))
    timer = DeviceTimer(synchronize=fake.synchronize, clock=fake.now)
    result = calibrate.calibrate(algo, compute, batch, lambda t: 0.1, timer=timer)
    return result, fake.syncs


@pytest.mark.dist
def test_calibration_measures_device_time_of_the_step_and_the_algorithm():
    """On an accelerator the step's kernels run after their launch: the calibration's step and
    algorithm times are the device's (forward + backward 40 ms, algorithm 4 ms), not the
    launch times (a fraction of a millisecond)."""
    from tests.workers import run_workers

    (r0, syncs), (r1, _) = run_workers(_calibrate_on_fake_device, 2)
    assert r0 == r1  # agreed across the workers
    assert syncs > 0
    # forward 20 ms + backward 20 ms, plus the fake launch costs (a few 1e-4 s)
    assert r0.measured_step_s == pytest.approx(0.04, abs=2e-3)
    assert r0.step_time_s == r0.measured_step_s
    # the algorithm's own work: 4 ms queued, plus one launch; the real gloo all-reduce of the
    # gradients happens inside Comm's calls and is not the algorithm's
    assert r0.measured_algo_s == pytest.approx(0.004, abs=1e-3)
    assert r0.algo_time_s == r0.measured_algo_s  # step time measured: no rescaling


def _build(name: str, comm: Comm):
    torch.manual_seed(0)
    model = TinyCNN(in_channels=1, num_classes=4, width=4).double()
    cfg = algorithms.make_config(name, {})
    opt = algorithms.REGISTRY[name].local_optimizer(
        cfg, model, lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-4
    )
    return model, opt, algorithms.REGISTRY[name](model, opt, comm, cfg, tau=TAU)


def _with_and_without_calibration(rank: int, world_size: int) -> dict:
    out = {}
    for name in algorithms.REGISTRY:
        runs = []
        for calibrated in (False, True):
            clock = VirtualClock(
                rank, Network(), Compute(None, (1.0,) * world_size, algo_time_s=None)
            )
            comm = Comm(clock=clock)
            model, opt, algo = _build(name, comm)
            torch.manual_seed(100 + rank)
            result = None
            if calibrated:
                x, y = rank_batches(rank, 1, seed_base=7)[0]
                result = calibrate.calibrate(
                    algo, clock.compute, (x, y), lambda t: 0.05, measured_steps=4
                )
            rng = torch.get_rng_state()
            hook_steps(algo, model, opt, rank_batches(rank, STEPS, seed_base=100))
            algo.finish()
            ledger = comm.ledger
            runs.append(
                (
                    flat_params(model),
                    rng,
                    (ledger.bytes, ledger.collectives, ledger.exposed_s, clock.now()),
                    result,
                )
            )
        out[name] = runs
    return out


@pytest.mark.dist
def test_calibration_leaves_every_algorithms_training_untouched():
    """For every algorithm of the registry: a run calibrated first trains exactly (bit for bit)
    as one that is not, with the same RNG stream, the same collectives and bytes on its Comm,
    and the same clock; the calibration's values are the same on every worker."""
    from tests.workers import run_workers

    per_rank = run_workers(_with_and_without_calibration, 2)
    for name in algorithms.REGISTRY:
        for rank in range(2):
            (p0, rng0, ledger0, _), (p1, rng1, ledger1, result) = per_rank[rank][name]
            assert torch.equal(p0, p1), f"{name}: the calibration changed the trajectory"
            assert torch.equal(rng0, rng1), f"{name}: the calibration drew from the RNG"
            assert ledger0 == ledger1, f"{name}: the calibration used the training's Comm"
            assert result.steps == steps_in_rounds(
                4, TAU if algorithms.REGISTRY[name].periodic else 1
            )
            assert result.step_time_s > 0 and result.algo_time_s >= 0
        assert per_rank[0][name][1][3] == per_rank[1][name][1][3], f"{name}: workers disagree"


def test_pinned_step_time_rescales_the_measured_algorithm_work(monkeypatch):
    """compute.step_time_s pinned, algo_time_s measured: the algorithm's work keeps its measured
    share of a step (measured algorithm / measured step x pinned step)."""
    monkeypatch.setattr(calibrate, "measure", lambda *a, **k: ([0.010, 0.011, 0.012], 0.0025))
    comm = Comm.__new__(Comm)  # a one-worker Comm without a process group
    comm.world_size, comm.rank = 1, 0
    comm.sum_scalars = lambda values, op="sum": list(values)
    algo = type("A", (), {"comm": comm, "tau": 1, "periodic": False})()
    batch = (torch.zeros(1), torch.zeros(1))
    pinned = calibrate.calibrate(algo, Compute(0.173, (1.0,), algo_time_s=None), batch, None)
    assert pinned.measured_step_s == 0.011 and pinned.measured_algo_s == 0.0025
    assert pinned.step_time_s == 0.173
    assert pinned.algo_time_s == round_significant(0.0025 * 0.173 / 0.011)
    measured = calibrate.calibrate(algo, Compute(None, (1.0,), algo_time_s=None), batch, None)
    assert measured.step_time_s == 0.011 and measured.algo_time_s == 0.0025
    both = calibrate.calibrate(algo, Compute(None, (1.0,), algo_time_s=0.0), batch, None)
    assert both.algo_time_s == 0.0  # a pinned 0: not charged


def test_calibration_round_trips_and_pins():
    c = Calibration(0.0123, 0.00045, 0.0123, 0.00045, 0.012, 0.0126, 10)
    assert Calibration.from_state(c.state()) == c
    applied = c.apply(Compute(None, (1.0, 2.0), algo_time_s=None))
    assert (applied.step_time_s, applied.algo_time_s) == (0.0123, 0.00045)
    assert applied.algo_time(1, 0) == 0.0009  # the worker's factor applies to it too
    assert c.pins() == "compute.step_time_s=0.0123 compute.algo_time_s=0.00045"
    assert c.record()["compute/step_time_s"] == 0.0123
    assert not calibrate.needed(applied) and calibrate.needed(
        Compute(0.1, (1.0,), algo_time_s=None)
    )


def _comm_calls(rank: int, world_size: int) -> tuple:
    import time

    comm = Comm()
    x = torch.ones(1000)
    comm.mean_([x])
    pending = comm.mean_async([x])
    pending.wait()
    outside_before = comm.ledger.call_s
    time.sleep(0.05)  # not in a Comm call: not counted
    return outside_before, comm.ledger.call_s, math.isfinite(comm.ledger.call_s)


@pytest.mark.dist
def test_comm_accounts_the_time_spent_in_its_calls():
    from tests.workers import run_workers

    for before, after, finite in run_workers(_comm_calls, 2):
        assert finite and before > 0
        assert after == before  # time outside Comm's calls is not Comm's
