"""Fully synchronous SGD (the baseline of every paper here; algorithms.md section 1).

Notation -> config: m = `workers`, eta_t = the LR schedule (`lr`, `warmup_epochs`, ...),
mu = `momentum`, wd = `weight_decay`.

Per step (matches PowerSGD's `ExactReducer`):

    G   = mean_j grad_j                 (blocking all-reduce, one flat buffer)   # before_step
    G  += wd * x ; b = mu*b + G ; x -= eta * (G + mu*b)                          # torch SGD

Weight decay and momentum are applied by the local `torch.optim.SGD` *after* averaging; since
the parameters are identical on every worker (they start equal and receive the same update),
the momentum buffer is global and nothing is stale. BatchNorm running statistics stay local.

Deviations: the gradient average is a separate blocking collective after backward (one per step,
counted in the ledger) rather than DDP's bucketed all-reduce overlapped with backward.
"""

from __future__ import annotations

from algorithms.base import Algorithm


class SyncSGD(Algorithm):
    def before_step(self, t: int) -> None:
        grads = [p.grad for p in self.params]
        self.comm.mean_(grads)
