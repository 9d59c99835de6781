"""Local SGD: periodic model averaging (algorithms.md section 2, beta_g = 0).

Stich 2019; Lin et al. 2020; Overlap-Local-SGD's "Local SGD" column.
Notation -> config: tau = `tau` (top level), m = `workers`, x_i = this worker's parameters,
b_i = its momentum buffer, mu = `momentum`.

    every step:            x_i <- LocalStep(x_i)                  (torch SGD, Nesterov)
    after steps tau, 2tau: x_i <- mean_j x_j                      (blocking, one flat buffer)

Momentum buffers are per worker and kept through a sync in the reference code; pitfall 2 of
algorithms.md makes that a flag: `algorithm.momentum_at_sync` = keep (default) | average | reset.
BatchNorm running statistics are never averaged during training.

Deviations from the reference code: rounds end after tau, 2*tau, ... local steps (the reference's
first round is one step longer). Written on `Comm` rather than torch's `PeriodicModelAverager`
because that averager's round convention starts with an average at step 0 and it bypasses the
suite's byte and wait accounting.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from algorithms.base import Algorithm

MOMENTUM_AT_SYNC = ("keep", "average", "reset")


@dataclass
class Config:
    # What happens to the local momentum buffers at a sync: keep (reference), average, reset.
    momentum_at_sync: str = "keep"

    def __post_init__(self):
        if self.momentum_at_sync not in MOMENTUM_AT_SYNC:
            raise ValueError(
                f"algorithm.momentum_at_sync must be one of {', '.join(MOMENTUM_AT_SYNC)}, "
                f"got {self.momentum_at_sync!r}"
            )


class LocalSGD(Algorithm):
    Config = Config
    periodic = True
    state = ("in_round",)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.in_round = False  # local steps taken since the last average

    def after_step(self, t: int) -> None:
        self.in_round = True
        if self.round_ends(t):
            self.sync()

    def sync(self) -> None:
        self.comm.mean_(self.params)  # x_i <- mean_j x_j
        buffers = momentum_buffers(self.optimizer)
        if self.cfg.momentum_at_sync == "average" and buffers:
            self.comm.mean_(buffers)
        elif self.cfg.momentum_at_sync == "reset":
            for b in buffers:
                b.zero_()
        self.in_round = False

    def finish(self) -> None:
        # A run whose length is not a multiple of tau ends mid-round: close it with one average.
        if self.in_round:
            self.sync()


def momentum_buffers(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    """The SGD momentum buffers that exist (none before the first step)."""
    return [
        s["momentum_buffer"]
        for s in optimizer.state.values()
        if s.get("momentum_buffer") is not None
    ]
