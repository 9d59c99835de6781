"""Fully synchronous SGD (the baseline of every paper here; algorithms.md section 1).

Notation -> config: m = `workers`, eta_t = the LR schedule (`lr`, `warmup_epochs`, ...),
mu = `momentum`, wd = `weight_decay`.

Per step (matches PowerSGD's `ExactReducer`):

    G   = mean_j grad_j                 (blocking all-reduce, one flat buffer)   # before_step
    G  += wd * x ; b = mu*b + G ; x -= eta * (G + mu*b)                          # torch SGD

Weight decay and momentum are applied by the local `torch.optim.SGD` *after* averaging; since
the parameters are identical on every worker (they start equal and receive the same update),
the momentum buffer is global and nothing is stale. BatchNorm running statistics stay local.

A parameter without a gradient (unused in this step's forward) takes part with a zero gradient,
as in PowerSGD, so every worker sends the same flat buffer.

Deviations: the gradient average is a separate blocking collective after backward (one per step,
counted in the ledger) rather than DDP's bucketed all-reduce overlapped with backward. Checked
bit for bit against `torch.nn.parallel.DistributedDataParallel` (tests/test_references.py).
"""

from __future__ import annotations

import torch

from algorithms.base import Algorithm


class SyncSGD(Algorithm):
    def before_step(self, t: int) -> None:
        for p in self.params:
            if p.grad is None:  # an unused parameter still takes part in the collective
                p.grad = torch.zeros_like(p)
        self.comm.mean_([p.grad for p in self.params])
