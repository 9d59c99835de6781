"""Local SGD: periodic model averaging (algorithms.md section 2), with an optional outer
optimizer (section 13): BMUF, SlowMo and DiLoCo are this one implementation under their own
names.

Stich 2019; Lin et al. 2020; Overlap-Local-SGD's "Local SGD" column. Outer optimizers (the
knobs of algorithms/outer.py):
- BMUF: Chen & Huo, "Scalable training of deep learning machines by incremental block training
  with intra-block parallel optimization and blockwise model-update filtering", ICASSP 2016.
- SlowMo: Wang, Tantia, Ballas & Rabbat, "SlowMo: Improving Communication-Efficient
  Distributed SGD with Slow Momentum", ICLR 2020.
- DiLoCo: Douillard et al., "DiLoCo: Distributed Low-Communication Training of Language
  Models", arXiv 2311.08105, 2023.

Notation -> config: tau = `tau` (top level), m = `workers`, x_i = this worker's parameters,
b_i = its momentum buffer, mu = `momentum`; z, Delta, eta_r and the outer knobs as in
algorithms/outer.py.

    every step:            x_i <- LocalStep(x_i)                  (torch SGD, Nesterov)
    after steps tau, 2tau: outer = none:  x_i <- mean_j x_j       (blocking, one flat buffer)
                           otherwise:     Delta = mean_j (z - x_j)          (blocking, one buffer)
                                          z <- OuterOptimizer(z, Delta)     (algorithms/outer.py)
                                          x_i <- z

One all-reduce per round, of the same size either way. With an outer optimizer it carries the
pseudo-gradients z - x_j rather than the models: the outer step needs Delta, and a compressed
wire (`comm.compression`) then quantises the round's change, not the weights (an fp16/bf16
model average would round away updates smaller than half an ulp of the weights). So plain Local
SGD also sends z - x_j when the wire is compressed (z = the last average), and sends x_j as
before otherwise (bit for bit the trajectory of earlier versions).

Registry names sharing this class (each with its own Config defaults; conf/algorithm/*.yaml):

| name       | outer    | outer_lr | outer_momentum       | Delta / eta_r | source             |
|------------|----------|----------|----------------------|---------------|--------------------|
| local_sgd  | none     | 1        | 0                    | -             | algorithms.md s. 2 |
| bmuf       | momentum | 1        | null = 1 - 1/workers | yes           | Chen & Huo 2016    |
| slowmo     | momentum | 1        | 0.5                  | yes           | Wang et al. 2020   |
| diloco     | nesterov | 0.7      | 0.9                  | no            | Douillard 2023     |

`algorithm=diloco` is `algorithm=local_sgd algorithm.outer=nesterov algorithm.outer_lr=0.7
algorithm.outer_momentum=0.9` under its own name (identical trajectories: tested), and so on
for the others; the reference code's Local SGD baseline with `--gmf 0.7` is `algorithm=local_sgd
algorithm.outer=momentum algorithm.outer_momentum=0.7` (algorithms.md section 2's rule exactly:
tested against a hand-written version of it).

Momentum buffers are per worker and kept through a sync in the reference code; pitfall 2 of
algorithms.md makes that a flag: `algorithm.momentum_at_sync` = keep (default) | average | reset.
BatchNorm running statistics are never averaged during training.

Where else an outer optimizer means something (not added there):
- Overlap-Local-SGD already has one: its anchor momentum beta is a heavy-ball outer step on the
  pulled models with the LR division (algorithms.md section 3); a second would be redundant.
- CoCoD-SGD: its averaged part is one round stale; an outer step on that stale average is the
  "delayed outer update" family (Kale et al. 2025, "eager updates", for DiLoCo), a different
  algorithm, not a knob.
- EASGD: the centre z already moves by an elastic average (z += alpha sum_j (x_j - z)); a
  momentum on it is EAMSGD's centre variant in Zhang et al., a separate method.
- OSP/LOSP: the server step has its own `server_lr` (section 7 [I]).
- Streaming DiLoCo (algorithms/streaming_diloco.py) takes these knobs per fragment.

Deviations from the reference code: rounds end after tau, 2*tau, ... local steps (the reference's
first round is one step longer). Written on `Comm` rather than torch's `PeriodicModelAverager`
because that averager's round convention starts with an average at step 0 and it bypasses the
suite's byte and wait accounting. DiLoCo's inner optimizer is AdamW for language models; the
suite keeps its local torch SGD (algorithms.md section 13). `finish()` of a run that ends
mid-round takes one outer step on the partial round.
"""

from __future__ import annotations

import torch

from algorithms.base import Algorithm
from algorithms.local_sgd_config import (
    BMUFConfig,
    Config,
    DiLoCoConfig,
    SlowMoConfig,
)
from algorithms.outer import OuterOptimizer, pseudo_gradient


class LocalSGD(Algorithm):
    Config = Config
    state = ("in_round", "outer_model", "outer_buffers")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.in_round = False  # local steps taken since the last average
        self.outer = OuterOptimizer(self.cfg, self.comm.world_size)
        # z, the last synced model: kept when the round sends pseudo-gradients (module doc)
        sends_delta = self.cfg.outer != "none" or self.comm.codec.active
        self.outer_model = [p.detach().clone() for p in self.params] if sends_delta else None
        self.outer_buffers = [None] * len(self.params) if self.outer.has_momentum else None

    def after_step(self, t: int) -> None:
        self.in_round = True
        if self.round_ends(t):
            self.sync()

    def sync(self) -> None:
        if self.outer_model is None:
            self.comm.mean_(self.params)  # x_i <- mean_j x_j
        else:
            delta = pseudo_gradient(self.outer_model, self.params)
            self.comm.mean_(delta)  # Delta = mean_j (z - x_j)
            lr = self.optimizer.param_groups[0]["lr"]  # eta_r
            self.outer.step(self.outer_model, delta, self.outer_buffers, lr)
            with torch.no_grad():
                for x, z in zip(self.params, self.outer_model, strict=True):
                    x.copy_(z)  # x_i <- z
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


class BMUF(LocalSGD):
    """Local SGD with block momentum (registry name `bmuf`)."""

    Config = BMUFConfig


class SlowMo(LocalSGD):
    """Local SGD with slow momentum (registry name `slowmo`)."""

    Config = SlowMoConfig


class DiLoCo(LocalSGD):
    """Local SGD with an outer Nesterov step (registry name `diloco`)."""

    Config = DiLoCoConfig


def momentum_buffers(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    """The SGD momentum buffers that exist (none before the first step)."""
    return [
        s["momentum_buffer"]
        for s in optimizer.state.values()
        if s.get("momentum_buffer") is not None
    ]
