"""sync_sgd's bucketed gradient averages (issue 15, item 3): launched during backward as the
buckets fill, the same trajectory bit for bit as one average after backward, and on the virtual
clock the modeled mid-backward launches of algorithms/sync_sgd.py."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import algorithms
from algorithms.comm import Comm
from algorithms.group import ThreadGroup
from algorithms.sync_sgd import MB, SyncSGD, plan_buckets
from experiments.training.clock import Compute, Network, VirtualClock, ring_allreduce_time
from experiments.training.models import TinyCNN
from tests.steps import flat, hook_steps, rank_batches
from tests.workers import run_threads, run_workers


def test_buckets_follow_ddps_assignment():
    """Reverse parameter order, the first bucket capped at 1 MB, the others at bucket_mb, a new
    bucket at a dtype change; every parameter in exactly one bucket."""
    mb = MB // 4  # float32 values per MB
    params = [torch.zeros(n) for n in (mb // 2, 3 * mb, mb, mb, mb // 4)]
    assert plan_buckets(params, 2.0) == [[4, 3], [2, 1], [0]]
    assert plan_buckets(params, 25.0) == [[4, 3], [2, 1, 0]]
    assert plan_buckets(params, 0.25) == [[4], [3], [2], [1], [0]]
    mixed = [torch.zeros(10, dtype=torch.float64), torch.zeros(10), torch.zeros(10)]
    assert plan_buckets(mixed, 25.0) == [[2, 1], [0]]
    model = TinyCNN(1, 4, width=4)
    buckets = plan_buckets(list(model.parameters()), 1e-4)
    assert sorted(i for b in buckets for i in b) == list(range(len(list(model.parameters()))))
    assert len(buckets) >= 3


class _Unused(torch.nn.Module):
    """TinyCNN plus a parameter no forward uses: it takes part with a zero gradient."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.net = TinyCNN(in_channels=1, num_classes=4, width=4)
        self.spare = torch.nn.Parameter(torch.ones(3))

    def forward(self, x):
        return self.net(x)


def _train(rank: int, comm: Comm, bucket_mb: float, steps: int = 6):
    model = _Unused().double()
    opt = torch.optim.SGD(
        model.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-4
    )
    algo = algorithms.build("sync_sgd", {"bucket_mb": bucket_mb}, model, opt, comm, tau=1)
    launched_in_backward = []

    def on_backward(t):
        launched_in_backward.append(comm.ledger.collectives)

    batches = [(x.double(), y) for x, y in rank_batches(rank, steps)]
    _, params = hook_steps(algo, model, opt, batches, on_backward=on_backward)
    return params, launched_in_backward, len(algo.buckets), comm.ledger.collectives


def _gloo_buckets(rank: int, m: int):
    return {mb: _train(rank, Comm(), mb) for mb in (0.0, 1e-4, 25.0)}


@pytest.mark.dist
def test_bucketed_sync_equals_one_average_after_backward_bit_for_bit_on_gloo():
    """float64, 2 gloo processes: tiny buckets (launched mid-backward) and DDP's 25 MB give
    the trajectory of one blocking average after backward, bit for bit; the buckets not held
    back by the unused parameter were launched before backward returned."""
    for out in run_workers(_gloo_buckets, 2):
        reference, _, _, _ = out[0.0]
        for mb in (1e-4, 25.0):
            params, launched, n_buckets, collectives = out[mb]
            assert all(torch.equal(a, b) for a, b in zip(params, reference, strict=True)), mb
            assert collectives == 6 * n_buckets
        # the spare parameter (registered first: the last bucket) holds back only its own
        # bucket: the others were launched while backward ran, the last in before_step
        _, launched, n_buckets, _ = out[1e-4]
        assert n_buckets >= 3 and launched == [(n_buckets * t) + n_buckets - 1 for t in range(6)]
        _, launched, n_buckets, _ = out[25.0]
        assert n_buckets == 1 and launched == [t for t in range(6)]


def _initial(model: torch.nn.Module) -> torch.nn.Module:
    """The same initial weights in every worker thread (torch's global generator is shared by
    the threads: seeding it in each would race)."""
    torch.manual_seed(0)
    init = TinyCNN(in_channels=1, num_classes=4, width=4)
    model.load_state_dict(init.state_dict())
    return model


_INITIAL = _initial(TinyCNN(in_channels=1, num_classes=4, width=4)).state_dict()


def _sim_worker(rank: int, group, bucket_mb: float):
    model = TinyCNN(in_channels=1, num_classes=4, width=4)
    model.load_state_dict(_INITIAL)
    model = model.double()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    comm = Comm(group=group)
    algo = SyncSGD(model, opt, comm, SyncSGD.Config(bucket_mb=bucket_mb))
    launched = []
    batches = [(x.double(), y) for x, y in rank_batches(rank, 5)]
    _, params = hook_steps(
        algo, model, opt, batches, on_backward=lambda t: launched.append(comm.ledger.collectives)
    )
    if bucket_mb > 0:  # one preallocated buffer per bucket (DDP's memory), reused every step
        assert len(comm._buffers) == len(algo.buckets)
    return params, launched, len(algo.buckets)


def test_bucketed_sync_in_threads_three_workers_bit_for_bit_and_launched_during_backward():
    """3 in-process workers (sums in rank order whatever the buffer): every bucket size gives
    the unbucketed trajectory bit for bit, and with every parameter used, all buckets were
    launched while backward ran (before before_step)."""
    reference = run_threads(3, _sim_worker, 0.0)
    for mb in (1e-4, 25.0):
        out = run_threads(3, _sim_worker, mb)
        for (params, launched, n_buckets), (ref, _, _) in zip(out, reference, strict=True):
            assert all(torch.equal(a, b) for a, b in zip(params, ref, strict=True))
            assert launched == [n_buckets * (t + 1) for t in range(5)]
    assert (ref[0] - ref[-1]).abs().max() > 1e-4  # training moved


STEP, ALGO = 1.0, 0.1


def _virtual_worker(rank: int, group, network: Network, bucket_mb: float):
    model = TinyCNN(in_channels=1, num_classes=4, width=4)
    model.load_state_dict(_INITIAL)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    compute = Compute(step_time_s=STEP, slowdown=(1.0, 1.0), algo_time_s=ALGO)
    clock = VirtualClock(rank, network, compute)
    comm = Comm(group=group, clock=clock)
    algo = SyncSGD(model, opt, comm, SyncSGD.Config(bucket_mb=bucket_mb))
    for t, (x, y) in enumerate(rank_batches(rank, 3)):
        loss = F.cross_entropy(model(x.float()), y)
        opt.zero_grad()
        loss.backward()
        clock.local_step(t, 0.0)
        clock.algo_step(t)
        algo.before_step(t)
        opt.step()
    sizes = [sum(algo.params[i].numel() for i in b) * 4 for b in algo.buckets]
    return clock.now(), comm.ledger.exposed_s, comm.ledger.hidden_s, sizes


def test_virtual_clock_models_buckets_launched_mid_backward():
    """The closed form of the module doc: bucket k launched at s + d (1/3 + 2/3 n_k / n), the
    last one at the step's end (after the algorithm work), each starting once the link is free;
    exposed = what is left after the step, hidden = the flight under compute. With one bucket:
    exactly one average after the step."""
    lat, bw = 0.05, 1e-5  # T of the whole gradient: a good part of a step
    net = Network(latency_s=lat, bandwidth_gbps=bw)
    out = run_threads(2, _virtual_worker, net, 1e-4)
    now, exposed, hidden, sizes = out[0]
    assert len(sizes) >= 3
    n, step_exposed, step_hidden = sum(sizes), 0.0, 0.0
    t0 = 0.0
    free = 0.0  # when the link is free
    done = 0
    for k, size in enumerate(sizes):
        done += size
        end = t0 + STEP + ALGO
        launch = t0 + STEP * (1 / 3 + 2 / 3 * done / n) if k < len(sizes) - 1 else end
        begin = max(launch, free)
        free = begin + ring_allreduce_time(size, 2, lat, bw)
        step_hidden += max(0.0, min(free, end) - begin)
    step_exposed = max(0.0, free - (t0 + STEP + ALGO))
    assert exposed == pytest.approx(3 * step_exposed, rel=1e-9)
    assert hidden == pytest.approx(3 * step_hidden, rel=1e-9)
    assert now == pytest.approx(3 * (STEP + ALGO + step_exposed), rel=1e-9)
    assert 0 < step_exposed < ring_allreduce_time(n, 2, lat, bw) * 0.9  # some was hidden
    assert out[1][:3] == out[0][:3]  # both workers computed the same times

    one = run_threads(2, _virtual_worker, net, 25.0)
    now, exposed, hidden, sizes = one[0]
    assert len(sizes) == 1
    t = ring_allreduce_time(sizes[0], 2, lat, bw)
    assert exposed == pytest.approx(3 * t, rel=1e-12) and hidden == 0.0


def test_bucket_mb_must_be_non_negative():
    model = TinyCNN(1, 4, width=4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(ValueError, match="bucket_mb"):
        SyncSGD(model, opt, Comm(group=ThreadGroup.create(1, 5)[0]), SyncSGD.Config(-1.0))


def test_a_second_backward_before_the_step_is_refused_with_buckets():
    model = TinyCNN(1, 4, width=4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    algo = SyncSGD(model, opt, Comm(group=ThreadGroup.create(1, 5)[0]))
    x, y = rank_batches(0, 1)[0]
    x = x.float()
    F.cross_entropy(model(x), y).backward()
    with pytest.raises(RuntimeError, match="bucket_mb=0"):
        F.cross_entropy(model(x), y).backward()
    assert flat(algo.params).isfinite().all()
