"""The time ledger on an accelerator (issue 15, item 1), on a CPU with a fake device clock.

On a GPU the host runs ahead of the device, and a collective's future completes when it is
enqueued (NCCL), so host timestamps would book the forward/backward kernels still queued before
a wait as communication and see no hidden time. algorithms/comm.py times collectives on CUDA
tensors with marks on the device's streams (`DeviceMarks`, CUDA events) instead. Here the marks
are a fake with the same four methods over a scripted device timeline: a compute stream whose
position the test sets, collectives that complete at chosen device times, and a host clock that
is far behind (it only launched the work). `make gpu-check` (benchmarks/gpu_check.py) runs the
same accounting on real CUDA events."""

from __future__ import annotations

import pytest
import torch

from algorithms.comm import Comm, device_accounts
from experiments.training.clock import Compute, Network, RealClock


class FakeDevice:
    """A device timeline: `compute` is where the compute stream stands (the device time at which
    work enqueued now would run); collectives finish at the times the test gives them."""

    def __init__(self):
        self.compute = 0.0
        self.now = 0.0  # how far the device has run (what `ready` checks)
        self.next_done: list[float] = []  # completion times of the next collectives


class FakeWork:
    def __init__(self, device: FakeDevice, done: float):
        self.device, self.done_t = device, done

    def wait(self, timeout=None):  # on the compute stream: it stands until the collective is done
        self.device.compute = max(self.device.compute, self.done_t)
        return True

    def is_completed(self) -> bool:
        return self.device.now >= self.done_t


class FakeGroup:
    """Two workers whose other rank sends the same values (the sum doubles them)."""

    rank, world_size = 0, 2

    def __init__(self, device: FakeDevice):
        self.fake = device

    @property
    def device(self):
        return torch.device("cpu")

    def all_reduce(self, tensor, op="sum", async_op=False):
        tensor.mul_(2)
        work = FakeWork(self.fake, self.fake.next_done.pop(0))
        if async_op:
            return work
        work.wait()
        return None

    def broadcast(self, tensor, src):
        pass


class FakeMarks:
    """`DeviceMarks` over a FakeDevice: a mark is a device time."""

    def __init__(self, device: FakeDevice):
        self.device = device
        self.synced = 0  # blocking reads (seconds() of marks the device has not reached)

    def mark(self) -> float:
        return self.device.compute

    def done(self, work: FakeWork) -> float:
        return work.done_t  # the side stream waits for the collective only

    def ready(self, mark: float) -> bool:
        return self.device.now >= mark

    def seconds(self, a: float, b: float) -> float:
        if not self.ready(b):
            self.synced += 1
            self.device.now = max(self.device.now, b)
        return b - a


def fake_comm(emulate: bool = False) -> tuple[Comm, FakeDevice, FakeMarks]:
    device = FakeDevice()
    marks = FakeMarks(device)
    net = Network(latency_s=0.0, bandwidth_gbps=1e-5 if emulate else float("inf"))
    clock = RealClock(0, net, Compute(None, (1.0, 1.0)), emulate_network=emulate)
    return Comm(group=FakeGroup(device), clock=clock, marks=marks), device, marks


def test_device_accounts_arithmetic():
    s = lambda a, b: b - a  # noqa: E731
    # launched at 5, done at 7; the compute stream reached the wait at 6: 1 hidden, 1 exposed
    assert device_accounts(s, 5.0, 7.0, 6.0, 7.0, blocking=False) == (1.0, 1.0)
    # done before the compute stream needed it: all hidden, nothing exposed
    assert device_accounts(s, 5.0, 6.5, 9.0, 9.0, blocking=False) == (0.0, 1.5)
    # blocking: nothing hidden by definition
    assert device_accounts(s, 5.0, 7.0, 5.0, 7.0, blocking=True) == (2.0, 0.0)


def test_queued_compute_is_not_booked_as_communication():
    """Finding 1: the host waits at host time ~0 while the device still has 5 s of
    forward/backward queued; the collective takes 2 s after that. Exposed = 2 s (the stall of
    the compute stream), not the 7 s a host timer around a synchronising wait would see."""
    comm, device, marks = fake_comm()
    device.compute = 5.0  # backward's kernels end at device time 5: the payload is ready there
    device.next_done = [7.0]
    x = [torch.ones(3)]
    comm.mean_(x)  # blocking
    assert torch.equal(x[0], torch.ones(3))  # (2 x 1) / 2
    assert comm.ledger.exposed_s == 0.0  # nothing read yet: no host-device sync per collective
    assert marks.synced == 0
    assert comm.settle() == pytest.approx(2.0)
    assert comm.ledger.exposed_s == pytest.approx(2.0) and comm.ledger.hidden_s == 0.0


def test_hidden_time_is_measured_on_the_device_not_at_enqueue():
    """Finding 2: a non-blocking average launched at device time 5, done at 8; the compute
    stream computes until 7 before it needs it: 2 s hidden, 1 s exposed (an NCCL future's
    callback would have said done at launch: nothing hidden)."""
    comm, device, _ = fake_comm()
    device.compute = 5.0
    device.next_done = [8.0]
    pending = comm.mean_async([torch.ones(2)])
    device.compute = 7.0  # the next step's compute, queued behind the launch
    (avg,) = pending.wait()
    assert torch.equal(avg, torch.ones(2))
    device.now = 10.0  # the device has run everything: settled without a sync
    assert comm.settle(block=False) == pytest.approx(1.0)
    assert comm.ledger.hidden_s == pytest.approx(2.0)


def test_waits_are_settled_as_their_marks_complete_and_never_twice():
    comm, device, marks = fake_comm()
    device.next_done = [2.0, 4.0]
    device.compute = 1.0
    comm.mean_([torch.ones(1)])  # exposed 1 (1 -> 2)
    device.compute = 3.0
    comm.mean_([torch.ones(1)])  # exposed 1 (3 -> 4)
    device.now = 2.5  # the first wait's marks have completed, the second's not
    assert comm.settle(block=False) == pytest.approx(1.0)
    assert comm.settle(block=False) == 0.0
    assert marks.synced == 0
    assert comm.settle() == pytest.approx(1.0)  # waits for the device (the evaluation's sync)
    assert comm.settle() == 0.0
    assert comm.ledger.exposed_s == pytest.approx(2.0)


@pytest.mark.parametrize("comm_s", [[0.5, 3.0, 0.2, 0.0], [2.0, 2.0, 2.0, 2.0]])
def test_the_device_ledger_adds_up_to_the_device_time_exactly(comm_s):
    """The ledger invariant on a device timeline: steps of compute c_i, each followed by a
    blocking average of d_i (sync SGD) or a non-blocking one waited for one step later (the
    overlap methods): compute + exposed = the device's training time, exactly, whatever the
    host did, and hidden + exposed = the collectives' durations."""
    compute = [1.0, 1.5, 0.7, 1.2]
    for overlap in (False, True):
        comm, device, _ = fake_comm()
        pending = None
        for c, d in zip(compute, comm_s, strict=True):
            device.compute += c  # the step's kernels
            device.next_done = [device.compute + d]
            if overlap:
                nxt = comm.mean_async([torch.ones(4)])
                if pending is not None:
                    pending.wait()
                pending = nxt
            else:
                comm.mean_([torch.ones(4)])
        if pending is not None:
            pending.wait()
        comm.settle()
        assert sum(compute) + comm.ledger.exposed_s == pytest.approx(device.compute, abs=1e-12)
        assert comm.ledger.exposed_s + comm.ledger.hidden_s == pytest.approx(sum(comm_s), abs=1e-12)


def test_network_emulation_on_a_device_times_on_the_host_after_draining_the_queue(monkeypatch):
    """With emulate_network the modeled duration is slept off on the host: there the
    collective is timed on the host clock, and the stream is synchronised before the timer
    starts (so queued compute is not in it). On a CPU tensor no stream exists: only the branch
    choice is checked here; benchmarks/gpu_check.py runs it on CUDA."""
    comm, device, _ = fake_comm(emulate=True)
    device.next_done = [1.0]
    comm.mean_([torch.ones(10)])  # modeled: 40 bytes at 10 kbit/s between 2 workers = 32 ms
    assert comm.settle() == 0.0  # not device-timed
    # the 32 ms count from the launch, the host timer from the wait, a moment later: the
    # exposed time is the sleep less that moment (31.994 ms once, with both cores busy)
    assert 0.9 * 0.032 <= comm.ledger.exposed_s < 5.0
