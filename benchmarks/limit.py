"""How far the suite's lock-step pass is from what this machine can do (issue 48): the quick
bench's limit rows.

- `matmul_peak`: the machine's fp32 matrix-multiply rate (GFLOP/s), the best of a few square
  products large enough to run at full speed: the ceiling of any convolutional network here.
- `StepPair`: the lock-step step (the forward and backward passes of S x m replicas as one
  grouped pass, experiments/workers/batched.py's own code: `_grouped`, `replica_losses`) against
  the ideal: one plain model of the same structure on the same S x m x B images (a single
  network's step on the whole batch, which batching many replicas can at best match), timed
  interleaved by the quick bench; and the plain step's arithmetic rate, from torch's own FLOP
  count (`torch.utils.flop_counter`), as a share of `matmul_peak`.

Measured in the bench's own process with the suite's thread rule for seeds in lock-step (every
core, experiments/workers/sim.py) and its allocator settings (experiments/workers/allocator.py)."""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from experiments.training.models import ResNet18
from experiments.workers.batched import _grouped, channels_last, replica_losses


def matmul_peak(n: int = 1024, repeats: int = 5) -> float:
    """GFLOP/s of the best of `repeats` fp32 [n, n] @ [n, n] products (2 n^3 operations each)."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b  # warm-up: threads started, kernels chosen
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t0)
    return 2 * n**3 / best / 1e9


class StepPair:
    """The two sides of the step row for `replicas` (S x m) width-`width` ResNet-18s on
    `batch` images each of `channels` x `size` x `size`."""

    def __init__(self, replicas: int, batch: int, width: int, channels: int, size: int):
        torch.manual_seed(0)
        base = ResNet18(num_classes=10, in_channels=channels, width=width)
        self.k = replicas
        self.grouped = _grouped(base, replicas)
        if self.grouped is None:
            raise RuntimeError("ResNet18 is not groupable: the lock-step pass would be vmapped")
        self.grouped.train()
        self.params = {
            n: torch.stack([p.detach()] * replicas).requires_grad_()
            for n, p in base.named_parameters()
        }
        self.buffers = {n: torch.stack([b] * replicas) for n, b in base.named_buffers()}
        self.plain = base.train()
        self.x = torch.randn(replicas, batch, channels, size, size)
        self.y = torch.randint(0, 10, (replicas, batch))
        # the plain model gets the layout the grouped pass gets (`_side_by_side`)
        self.flat_x, self.flat_y = self.x.flatten(0, 1), self.y.flatten()
        if channels_last(self.flat_x.dtype, self.flat_x.device):
            self.flat_x = self.flat_x.contiguous(memory_format=torch.channels_last)

    def lockstep(self) -> float:
        """Seconds of one lock-step step's forward and backward (as BatchedSteps computes it)."""
        t0 = time.perf_counter()
        for p in self.params.values():
            p.grad = None
        replica_losses(self.grouped, self.params, self.buffers, self.x, self.y).sum().backward()
        return time.perf_counter() - t0

    def plain_step(self) -> float:
        """Seconds of one plain model's forward and backward on all S x m x B images."""
        t0 = time.perf_counter()
        self.plain.zero_grad(set_to_none=True)
        F.cross_entropy(self.plain(self.flat_x), self.flat_y).backward()
        return time.perf_counter() - t0

    def plain_flops(self) -> int:
        """Floating-point operations of the plain step (torch's count: convolutions and matrix
        products, forward and backward)."""
        with FlopCounterMode(display=False) as counter:
            self.plain_step()
        return counter.get_total_flops()
