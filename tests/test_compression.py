"""Compressed averages (`comm.compression`, algorithms/comm.py `Codec`): the quantisation error
bounds, the bytes on the wire, the modeled time of the compressed size, what a compressed
average delivers on real gloo workers, and who may use it."""

from __future__ import annotations

import math

import pytest
import torch

import algorithms
from algorithms.codec import COMPRESSIONS, INT8_BLOCK, Codec, int8_roundtrip_
from algorithms.comm import Comm
from tests.workers import run_workers


def _mixed_scales(n: int, seed: int = 0) -> torch.Tensor:
    """Values of very different magnitudes per region (a bias next to a weight), float64."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, generator=gen, dtype=torch.float64)
    x[: n // 3] *= 1e-3
    x[n // 3 : n // 2] *= 50.0
    return x


@pytest.mark.parametrize("n", [1, 7, INT8_BLOCK, INT8_BLOCK + 1, 3 * INT8_BLOCK + 17])
def test_int8_error_is_at_most_half_a_step_of_its_block(n):
    x = _mixed_scales(n, seed=n)
    y = int8_roundtrip_(x.clone())
    for start in range(0, n, INT8_BLOCK):
        block, decoded = x[start : start + INT8_BLOCK], y[start : start + INT8_BLOCK]
        step = block.abs().max().item() / 127  # the block's scale
        err = (decoded - block).abs().max().item()
        assert err <= step / 2 * (1 + 1e-6), (start, err, step)
        # 255 levels: the error is a real rounding, not zero (the values are not on the grid)
        if block.numel() > 4:
            assert err > step / 100
    # the largest value of each block is exact up to the float32 rounding of the scale
    top = x.abs().argmax()
    assert abs(y[top] - x[top]) <= abs(x[top]) * 2**-23


def test_int8_keeps_zero_blocks_and_grid_values_exact():
    x = torch.zeros(2 * INT8_BLOCK, dtype=torch.float64)
    x[INT8_BLOCK:] = torch.arange(INT8_BLOCK, dtype=torch.float64) % 255 - 127  # on the grid
    y = int8_roundtrip_(x.clone())
    assert torch.equal(y[:INT8_BLOCK], torch.zeros(INT8_BLOCK, dtype=torch.float64))
    assert torch.equal(y[INT8_BLOCK:], x[INT8_BLOCK:])


@pytest.mark.parametrize(
    "name, dtype, bits", [("fp16", torch.float16, 11), ("bf16", torch.bfloat16, 8)]
)
def test_casts_round_to_nearest_with_their_mantissa(name, dtype, bits):
    x = _mixed_scales(5000)
    y = Codec(name).roundtrip_(x.clone(), [x.numel()])
    normal = x.abs() >= torch.finfo(dtype).tiny
    rel = ((y - x).abs() / x.abs())[normal].max().item()
    assert rel <= 2.0**-bits * (1 + 1e-9)  # round to nearest: half an ulp
    assert rel > 2.0 ** -(bits + 3)  # and it did round
    if name == "fp16":  # below its normal range (6.1e-5): half the subnormal spacing, absolute
        below = (y - x).abs()[~normal]
        assert below.numel() > 20 and below.max() <= torch.finfo(dtype).tiny * 2.0**-11
    assert Codec("none").roundtrip_(x.clone(), [x.numel()]).equal(x)


def test_blocks_restart_at_every_tensor():
    small, large = torch.full((10,), 1e-4, dtype=torch.float64), torch.full((10,), 3.0)
    flat = torch.cat([small, large.double()])
    Codec("int8").roundtrip_(flat, [10, 10])
    # the small tensor has its own scale: one flat block would have rounded it to 0
    assert torch.allclose(flat[:10], small, rtol=1e-6, atol=0)


def test_wire_bytes_closed_form():
    sizes = [3000, 10, 1024]
    n = sum(sizes)
    assert Codec("none").wire_bytes(sizes, 4) == 4 * n
    assert Codec("none").wire_bytes(sizes, 8) == 8 * n
    assert Codec("fp16").wire_bytes(sizes, 4) == Codec("bf16").wire_bytes(sizes, 8) == 2 * n
    # int8: one byte per value, a float32 scale per started block of each tensor (3 + 1 + 1)
    assert Codec("int8").wire_bytes(sizes, 4) == n + 4 * (3 + 1 + 1)
    # the CIFAR ResNet-18 payload: 11,173,962 values in 62 tensors -> about a quarter of fp32
    assert Codec("int8").wire_bytes([11_173_962], 4) / (4 * 11_173_962) < 0.252


def test_unknown_compression_is_one_line_error():
    with pytest.raises(ValueError, match="comm.compression must be one of none, fp16, bf16, int8"):
        Codec("fp8")
    with pytest.raises(ValueError, match="comm.compression must be one of"):
        algorithms.check_compression("local_sgd", "int4")


def test_only_round_based_methods_take_compression():
    for name, cls in algorithms.REGISTRY.items():
        for c in COMPRESSIONS:
            if c == "none" or cls.periodic:
                algorithms.check_compression(name, c)
            else:
                with pytest.raises(ValueError, match=f"{name} averages gradients every step"):
                    algorithms.check_compression(name, c)
    refused = {n for n, cls in algorithms.REGISTRY.items() if not cls.periodic}
    assert refused == {"sync_sgd", "powersgd", "pseudo_sync"}


def _compressed_averages(rank: int, world_size: int, compression: str):
    from experiments.training.clock import Compute, Network, VirtualClock

    net = Network("slow", latency_s=1e-3, bandwidth_gbps=0.001)
    clock = VirtualClock(rank, net, Compute(0.01, (1.0,) * world_size))
    comm = Comm(clock=clock, compression=compression)
    gen = torch.Generator().manual_seed(rank)
    a = torch.randn(3000, generator=gen, dtype=torch.float64) * (rank + 1)
    b = torch.randn(5, generator=gen, dtype=torch.float64) * 1e-3
    sent = (a.clone(), b.clone())
    comm.mean_([a, b])
    blocking = (a.clone(), b.clone(), comm.ledger.bytes, clock.now())
    pending = comm.mean_async([sent[0], sent[1]], slot="x")
    averaged = [t.clone() for t in pending.wait()]
    unaccounted = torch.full((4,), float(rank) + 0.1, dtype=torch.float64)
    comm.mean_([unaccounted], account=False)
    return sent, blocking, averaged, comm.ledger, clock.now(), unaccounted


@pytest.mark.dist
@pytest.mark.parametrize("compression", ["fp16", "bf16", "int8"])
def test_compressed_average_decodes_each_contribution_and_the_mean(compression):
    m = 2
    results = run_workers(_compressed_averages, m, compression)
    codec, sizes = Codec(compression), [3000, 5]

    def rt(t: torch.Tensor) -> torch.Tensor:
        return codec.roundtrip_(t.clone(), sizes)

    flat_sent = [torch.cat(r[0]) for r in results]
    # the wire: each contribution decoded, summed exactly, the mean decoded once more
    expected = rt(sum(rt(f) for f in flat_sent) / m)
    exact = sum(flat_sent) / m
    wire = codec.wire_bytes(sizes, 8)
    ring = 2 * (m - 1) * 1e-3 + 2 * (m - 1) / m * wire * 8 / 1e6  # timing.md, on wire bytes
    for _, (a, b, nbytes, t_blocking), averaged, ledger, t_end, unaccounted in results:
        got = torch.cat([a, b])
        assert torch.allclose(got, expected, rtol=0, atol=1e-15)
        assert not torch.equal(got, exact)  # the compression did change the average ...
        for part, ref in zip(got.split(sizes), exact.split(sizes), strict=True):
            # ... within its precision: two roundings of at most a 127th of each tensor's range
            assert (part - ref).abs().max() <= 0.02 * ref.abs().max()
        assert torch.equal(torch.cat(averaged), got)  # mean_async: the same wire
        assert nbytes == wire and ledger.bytes == 2 * wire and ledger.collectives == 2
        assert wire < 3005 * 8 / 3.9
        assert math.isclose(t_blocking, ring, rel_tol=1e-12)
        assert math.isclose(t_end, 2 * ring, rel_tol=1e-12)
        # bookkeeping collectives are never compressed
        assert torch.equal(unaccounted, torch.full((4,), (0.1 + 1.1) / 2, dtype=torch.float64))


def test_runner_refuses_compression_for_gradient_methods(tmp_path):
    from hydra.errors import ConfigCompositionException

    from experiments.errors import UserError
    from experiments.preflight import validate
    from tests.compose import resolved as cfg

    validate(cfg("algorithm=diloco", "tau=4", "comm.compression=int8"))
    with pytest.raises(UserError, match="^comm.compression=bf16 applies to the model averages"):
        validate(cfg("algorithm=sync_sgd", "comm.compression=bf16"))
    # An unknown format is refused by the config schema itself, before validate() runs.
    with pytest.raises(ConfigCompositionException) as refused:
        cfg("algorithm=local_sgd", "comm.compression=fp4")
    assert "expected one of [none, fp16, bf16, int8]" in str(refused.value.__cause__)
