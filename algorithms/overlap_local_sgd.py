"""Overlap-Local-SGD: pull toward a one-round-stale anchor while the next anchor is averaged
in the background (algorithms.md section 3).

Wang, Liang & Joshi, "Overlap Local-SGD: An Algorithmic Approach to Hide Communication Delays in
Distributed SGD", ICASSP 2020; reference code JYWa/Overlap_Local_SGD (`distoptim/OverlapLocalSGD`).

Notation -> config / attribute:

| paper        | here                                                                     |
|--------------|--------------------------------------------------------------------------|
| x_i          | this worker's parameters (`self.params`); b_i: torch SGD's momentum      |
| z            | the anchor, identical on all workers (`self.anchor`)                     |
| v_i          | anchor momentum, stored divided by the LR (`self.anchor_momentum`)       |
| alpha        | `algorithm.alpha`, pullback (None -> 0.6, or 0.5 when tau = 1)           |
| beta         | `algorithm.beta`, anchor momentum                                        |
| eta_r        | the LR in force at round r (`optimizer.param_groups[0]["lr"]`)           |
| tau, m       | `tau` (top level), `workers`                                             |

Update rule. Every step: the local torch SGD step (Nesterov). After local steps tau, 2tau, ...
(round r):

    z_r  = sum_j s_j                  wait for the all-reduce launched at round r-1 (z_0 = x_0)
    x_i <- (1 - alpha) x_i + alpha z_r                                   pullback   (eq. 1)
    v_i  = (z_r - x_i) / eta_r  (first round),  else  beta v_i + (z_r - x_i) / eta_r   (eq. 2)
    s_i  = (z_r - eta_r v_i) / m      launched, not waited for; x_i is the PULLED model (eq. 3)

Closed form (tested): with xbar'_r the mean of the pulled models and u_{-1} = 0,

    u_r = beta (eta_r / eta_{r-1}) u_{r-1} + (xbar'_r - z_r),    z_{r+1} = z_r + u_r      (eq. 4)

so with beta = 0 the anchor is the mean of the pulled models, (1 - alpha) xbar_r + alpha z_r.
The anchor used at round r summarises the models of round r-1: it is tau local steps stale, and
the all-reduce has tau local steps to complete. One model-sized all-reduce per round.

State: `anchor` (z, the latest anchor received), `anchor_momentum` (v_i; None before the first
round), `pending` (the all-reduce in flight, folded into `anchor` by `drain()`; a checkpoint
keeps its snapshot).

Deviations from the paper and the reference code:
- The anchor is the average of the post-pullback models, as in the reference code; whether the
  paper's equation averages pre- or post-pullback models could not be checked [I].
- The first round pulls toward the initial weights (no anchor has been reduced yet), as the
  reference code does.
- Rounds end after tau, 2tau, ... local steps (the reference's first round is one step longer).
- The message z_r - eta_r v_i is sent through `mean_async` (an average), equal to the reference's
  all-reduce SUM of the pre-divided s_i; no thread.
- v is divided by the LR in force at each round (reference, pitfall 8): an LR decay rescales it.
- BatchNorm running statistics are never averaged in training. `eval_model()` is the local model,
  as the reference logs; the loop's consensus evaluation averages it over the workers anyway.
- `finish()`: wait for the anchor in flight, then one exact blocking average of the parameters,
  so every worker holds the same consensus model (one extra all-reduce).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from algorithms.base import Algorithm
from algorithms.mixing import pull_toward_
from algorithms.overlap_local_sgd_config import Config, default_alpha


@torch.no_grad()
def anchor_momentum(
    momentum: Sequence[torch.Tensor] | None,
    anchor: Sequence[torch.Tensor],
    pulled: Sequence[torch.Tensor],
    beta: float,
    lr: float,
) -> list[torch.Tensor]:
    """(eq. 2): v = (z - x) / eta the first time (`momentum` None), else beta v + (z - x) / eta."""
    fresh = [(z - x) / lr for z, x in zip(anchor, pulled, strict=True)]
    if momentum is None:
        return fresh
    return [beta * v + f for v, f in zip(momentum, fresh, strict=True)]


@torch.no_grad()
def anchor_message(
    anchor: Sequence[torch.Tensor], momentum: Sequence[torch.Tensor], lr: float
) -> list[torch.Tensor]:
    """m * s_i = z - eta v_i, (eq. 3) scaled so that the MEAN over workers is z_{r+1}."""
    return [z - lr * v for z, v in zip(anchor, momentum, strict=True)]


class OverlapLocalSGD(Algorithm):
    Config = Config
    state = ("anchor", "anchor_momentum")
    inflight = ("pending",)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.alpha = default_alpha(self.tau) if self.cfg.alpha is None else float(self.cfg.alpha)
        self.beta = float(self.cfg.beta)
        self.anchor = [p.detach().clone() for p in self.params]  # z_0 = x_0
        self.anchor_momentum = None
        self.pending = None

    def after_step(self, t: int) -> None:
        if self.round_ends(t):
            self.sync()

    def sync(self) -> None:
        self.drain()  # z_r: launched a round ago, it had tau local steps to arrive
        pull_toward_(self.params, self.anchor, self.alpha)  # (eq. 1)
        lr = self.optimizer.param_groups[0]["lr"]
        self.anchor_momentum = anchor_momentum(  # (eq. 2)
            self.anchor_momentum, self.anchor, self.params, self.beta, lr
        )
        message = anchor_message(self.anchor, self.anchor_momentum, lr)
        self.pending = self.comm.mean_async(message, slot="anchor")  # z_{r+1}, (eq. 3)

    def drain(self) -> None:
        if self.pending is not None:
            self.anchor = self.pending.wait()
            self.pending = None

    def finish(self) -> None:
        self.drain()
        self.comm.mean_(self.params)
