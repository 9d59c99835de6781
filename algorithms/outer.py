"""The outer optimizer of the round-based averaging methods (algorithms.md section 13).

A round of Local SGD starts every worker from the same model z and ends with x_i after tau
local steps. Instead of taking the average, an outer optimizer treats the averaged change as a
gradient, the pseudo-gradient (or outer gradient)

    Delta = z - mean_i x_i                                          (one all-reduce per round)

and steps z with it; every worker then starts the next round from the new z.

| paper symbol                          | here (config)                                        |
|---------------------------------------|------------------------------------------------------|
| z (global / slow / outer model)       | `outer_model`, identical on every worker             |
| Delta_r (outer gradient)              | mean over workers of z - x_i                         |
| eta_r (inner LR in force at round r)  | the local optimizer's LR at the round's last step    |
| alpha (SlowMo slow LR), zeta (BMUF)   | `algorithm.outer_lr`                                 |
| beta (SlowMo slow momentum), eta_BMUF | `algorithm.outer_momentum`                           |
| heavy ball / Nesterov                 | `algorithm.outer` = momentum / nesterov              |

    outer = momentum (SlowMo, BMUF; `outer_divide_by_lr` on by default):
        u = beta u + Delta / eta_r ;  z = z - alpha eta_r u                          (SlowMo Alg. 1)
    outer = nesterov (DiLoCo; `outer_divide_by_lr` off by default):
        u = beta u + Delta ;  z = z - alpha (Delta + beta u)        (torch SGD, nesterov=True)
    outer = none: z = z - Delta = mean_i x_i (plain Local SGD)

Both are torch's SGD update (`torch.optim.sgd.sgd`, its functional form: the momentum buffers
are ours, so they are checkpointed with the algorithm), with grad = Delta / eta_r and lr =
alpha eta_r when dividing by the LR, grad = Delta and lr = alpha otherwise. Dividing by eta_r
stores the momentum in units of the LR in force, so an LR decay shrinks the accumulated
momentum with it (SlowMo; the Overlap-Local-SGD code's global momentum, algorithms.md section 2,
pitfall 8). DiLoCo's outer step does not divide: its outer LR is absolute. Special cases:
alpha = 1, beta = 0 is plain Local SGD (up to rounding); alpha = 1, beta = beta_g with the LR
division is BMUF / the reference code's global momentum (`--gmf beta_g`) exactly.

Where it applies: `local_sgd` (and its presets `bmuf`, `slowmo`, `diloco`) and Streaming
DiLoCo, per fragment: the methods whose round ends in a plain model average. Not the others,
whose round already ends in a rule of its own on that average: Overlap-Local-SGD's anchor has
its momentum beta, CoCoD-SGD adds each worker's progress back onto a stale average, EASGD's
centre moves elastically, OSP/LOSP's server step has `server_lr`; an outer step on top would
be a second, different method.

Deviations and interpretations:
- [I] torch's SGD seeds its momentum buffer with the first gradient (u_1 = Delta_1), which is
  u_0 = 0 in SlowMo's and the reference code's form: the same numbers.
- [I] With `outer_divide_by_lr`, eta_r is the LR of the round's last local step (warm-up and
  step decays change it between rounds; within a round the reference code uses the same value).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch.optim.sgd import sgd

from algorithms.outer_config import OuterConfig


class OuterOptimizer:
    """The outer step z <- z - lr * SGD-direction(Delta), on tensors the caller owns."""

    def __init__(self, cfg: OuterConfig, workers: int):
        self.kind = cfg.outer
        beta = cfg.outer_momentum
        self.momentum = float(1 - 1 / workers if beta is None else beta)
        self.lr = float(cfg.outer_lr)
        divide = cfg.outer_divide_by_lr
        self.divide_by_lr = self.kind == "momentum" if divide is None else bool(divide)

    @property
    def has_momentum(self) -> bool:
        return self.kind != "none" and self.momentum > 0

    @torch.no_grad()
    def step(
        self,
        z: Sequence[torch.Tensor],
        delta: Sequence[torch.Tensor],
        buffers: list[torch.Tensor | None] | None,
        inner_lr: float,
    ) -> None:
        """In place: z <- outer step with pseudo-gradient `delta` (the workers' mean of z - x).
        `buffers` (one entry per tensor, None before the first step) are the momentum buffers,
        updated in place."""
        if self.kind == "none":
            for zi, d in zip(z, delta, strict=True):
                zi.sub_(d)
            return
        if self.divide_by_lr:
            grads, lr = [d / inner_lr for d in delta], self.lr * inner_lr
        else:
            grads, lr = list(delta), self.lr
        if buffers is None:
            buffers = [None] * len(grads)  # momentum 0: torch keeps no buffer
        sgd(
            list(z),
            grads,
            buffers,
            weight_decay=0.0,
            momentum=self.momentum,
            lr=lr,
            dampening=0.0,
            nesterov=self.kind == "nesterov",
            maximize=False,
            foreach=False,
        )


@torch.no_grad()
def pseudo_gradient(
    outer_model: Sequence[torch.Tensor], params: Sequence[torch.Tensor]
) -> list[torch.Tensor]:
    """This worker's share of the outer gradient: z - x_i (new tensors)."""
    return [z - x for z, x in zip(outer_model, params, strict=True)]
