"""The communication layer: flat buffers, blocking and non-blocking averages, the ledger."""

from __future__ import annotations

import pytest
import torch

from algorithms.comm import Comm, flatten, unflatten
from tests.workers import run_workers


def test_flatten_unflatten_round_trip():
    tensors = [torch.randn(3, 4), torch.randn(5), torch.randn(2, 1, 3)]
    flat = flatten(tensors)
    assert flat.shape == (12 + 5 + 6,)
    for a, b in zip(unflatten(flat, tensors), tensors, strict=True):
        assert a.shape == b.shape and torch.equal(a, b)


def test_flatten_copies_and_unflatten_views():
    """`flatten` is a snapshot (new memory, a lone tensor too; outside autograd, parameters
    included), `flatten(out=)` writes into `out`, non-contiguous inputs included, and
    `unflatten` gives views of the buffer."""
    one = torch.randn(4)
    flat = flatten([one])
    one.add_(1)
    assert not torch.equal(flat, one) and flat.data_ptr() != one.data_ptr()
    params = [torch.nn.Parameter(torch.randn(2, 3)), torch.nn.Parameter(torch.randn(3, 2).t())]
    expected = torch.cat([p.detach().reshape(-1) for p in params])
    flat = flatten(params)
    assert torch.equal(flat, expected) and not flat.requires_grad
    out = torch.zeros(12)
    assert flatten(params, out=out) is out and torch.equal(out, expected)
    assert not out.requires_grad
    views = unflatten(out, params)
    views[1].fill_(7)
    assert torch.equal(out[6:], torch.full((6,), 7.0))
    meta = [torch.empty(p.shape, device="meta") for p in params]  # (Pending.restore's shapes)
    assert [v.shape for v in unflatten(out, meta)] == [p.shape for p in params]


def test_flatten_rejects_mixed_dtypes_and_unflatten_wrong_size():
    with pytest.raises(ValueError, match="one dtype"):
        flatten([torch.zeros(2), torch.zeros(2, dtype=torch.int64)])
    with pytest.raises(ValueError, match="7 values"):
        unflatten(torch.zeros(7), [torch.zeros(2, 2)])


def _averages(rank: int, world_size: int):
    comm = Comm()
    a = torch.full((3, 2), float(rank), dtype=torch.float64)
    b = torch.arange(4, dtype=torch.float64) * (rank + 1)
    comm.mean_([a, b])
    after_blocking = (a.clone(), b.clone(), comm.ledger.bytes, comm.ledger.collectives)

    x = torch.full((5,), float(rank + 1), dtype=torch.float64)
    pending = comm.mean_async([x])
    x.mul_(100)  # the worker keeps computing on x: the average must be of the snapshot
    (avg,) = pending.wait()
    completed = pending.is_completed()

    before = comm.ledger.bytes
    comm.mean_([torch.ones(10)], account=False)  # bookkeeping: not in the ledger
    unaccounted = comm.ledger.bytes - before
    return after_blocking, avg.clone(), x.clone(), completed, comm.ledger, unaccounted


@pytest.mark.dist
@pytest.mark.parametrize("world_size", [2, 3])
def test_mean_and_mean_async_average_over_workers(world_size):
    results = run_workers(_averages, world_size)
    mean_rank = sum(range(world_size)) / world_size
    mean_scale = sum(r + 1 for r in range(world_size)) / world_size
    for rank, ((a, b, nbytes, ncoll), avg, x, completed, ledger, unaccounted) in enumerate(results):
        assert torch.allclose(a, torch.full((3, 2), mean_rank, dtype=torch.float64))
        assert torch.allclose(b, torch.arange(4, dtype=torch.float64) * mean_scale)
        # one collective for both tensors, payload = (6 + 4) float64 values
        assert (nbytes, ncoll) == (10 * 8, 1)
        assert torch.allclose(avg, torch.full((5,), mean_scale, dtype=torch.float64))
        assert torch.equal(x, torch.full((5,), 100.0 * (rank + 1), dtype=torch.float64))
        assert completed
        assert ledger.bytes == 10 * 8 + 5 * 8 and ledger.collectives == 2
        assert ledger.exposed_s >= 0
        assert unaccounted == 0


def _buffer_reuse(rank: int, world_size: int):
    """Hot path (issue 7): repeated syncs of the same tensors reuse preallocated flat buffers,
    and each result is still the right average."""
    comm = Comm()
    g = [torch.full((4, 3), float(rank)), torch.full((5,), float(rank))]
    blocking = []
    for step in range(3):
        for t in g:
            t.fill_(rank + step)
        comm.mean_(g)
        blocking.append(float(g[0][0, 0]))
    n_blocking = len(comm._buffers)

    results, pointers = [], []
    for r in range(4):  # an algorithm's rounds: one average in flight, the previous in use
        x = [torch.full((6,), float(rank * 10 + r))]
        pending = comm.mean_async(x, slot="anchor")
        (avg,) = pending.wait()
        results.append(avg.clone())
        pointers.append(pending.wait_flat().data_ptr())
    fresh = comm.mean_async([torch.zeros(6)]).wait_flat().data_ptr()
    return blocking, n_blocking, results, pointers, fresh, len(comm._buffers)


@pytest.mark.dist
def test_syncs_reuse_preallocated_buffers():
    m = 2
    for blocking, n_blocking, results, pointers, fresh, n_buffers in run_workers(_buffer_reuse, m):
        assert blocking == [0.5 + step for step in range(3)]
        assert n_blocking == 1  # three blocking syncs, one buffer
        for r, avg in enumerate(results):
            assert torch.equal(avg, torch.full((6,), (0 + 10) / 2 + r))
        # a slot's two buffers take turns: round r and r + 2 share one, r and r + 1 do not
        assert pointers[0] == pointers[2] and pointers[1] == pointers[3]
        assert pointers[0] != pointers[1]
        assert fresh not in pointers  # no slot: a new buffer, never a slot's
        assert n_buffers == 3


def test_launch_clocks_ride_exactly_in_float32_and_float64_buffers():
    """The virtual clock's launch times travel in a blocking collective's own buffer (one
    collective per sync): a float64 clock split into float32 parts comes back exactly."""
    import random

    from algorithms.comm import _encode_clock, clock_tail_len

    assert clock_tail_len(torch.float32, 4) == 12 and clock_tail_len(torch.float64, 4) == 4
    assert clock_tail_len(torch.float16, 4) == 0 and clock_tail_len(torch.float32, 1) == 0
    rng = random.Random(0)
    for _ in range(2000):
        x = rng.random() * 10 ** rng.randint(-4, 7)
        parts = torch.tensor(_encode_clock(x, 3), dtype=torch.float32).tolist()
        assert sum(parts) == x
        assert torch.tensor(_encode_clock(x, 1), dtype=torch.float64).item() == x
