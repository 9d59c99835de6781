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
