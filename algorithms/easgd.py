"""EASGD and EAMSGD: elastic averaging toward a centre variable, communication hidden
(algorithms.md section 4).

Zhang, Choromanska & LeCun, "Deep learning with Elastic Averaging SGD", NeurIPS 2015; in the
non-blocking form of the Overlap-Local-SGD code (JYWa/Overlap_Local_SGD, `distoptim/EASGD`).

Notation -> config / attribute:

| paper              | here                                                              |
|--------------------|-------------------------------------------------------------------|
| x_i                | this worker's parameters (`self.params`)                          |
| z (x tilde)        | the centre variable, identical on all workers (`self.centre`)     |
| alpha (moving rate)| `algorithm.alpha` (None -> 0.9 / m)                               |
| beta = m * alpha   | the centre's moving rate (not a knob)                             |
| tau                | `tau` (top level): local steps per round                          |
| m                  | `workers`                                                         |
| delta (EAMSGD)     | `momentum` (top level), with `nesterov`                           |

Update rule. Every step: the local torch SGD step (easgd: plain SGD, momentum forced to 0, weight
decay kept, as the original EASGD; eamsgd: the run's Nesterov momentum, as the original EAMSGD
and as the reference code's "EASGD"). After local steps tau, 2tau, ... (round r):

    z_r  = sum_j s_j                   wait for the all-reduce launched at round r-1 (z_0 = x_0)
    x_i <- (1 - alpha) x_i + alpha z_r                       elastic pull          (eq. 1)
    s_i  = c z_r + gamma x_i           x_i after the pull; launched, not waited for (eq. 2)
           gamma = alpha / (1 - alpha),  c = 1/m - alpha - alpha^2 / (1 - alpha)

Summing (eq. 2) over the workers and substituting (eq. 1):

    z_{r+1} = (1 - m alpha) z_r + alpha sum_j x_j(before the pull)                  (eq. 3)

Pull and centre update both use the same z_r, so this is exactly synchronous EASGD with the
centre's rate beta = m * alpha: the all-reduce hides behind the next tau local steps and there is
no algorithmic staleness (unlike Overlap-Local-SGD and CoCoD-SGD). (eq. 3) is stable only for
m * alpha < 1; `check()` rejects the rest. One model-sized all-reduce per round.

State: `centre` (z, the latest centre received), `pending` (the all-reduce in flight, folded into
`centre` by `drain()`; a checkpoint keeps its snapshot), `in_round` (local steps taken since the
last round end).

Deviations from the paper and the reference code:
- The reference `average()` tests an undefined name `req` and raises NameError at its first
  sync; here the wait is on the `Comm` handle of the previous round and that block is gone.
- The messages are sent as m * s_i through `mean_async` (an average), whose mean is the sum the
  reference all-reduces; same bytes, one model per round.
- alpha stays fixed through LR decays, as in the reference [M/I]; the paper's alpha = eta * rho
  would shrink with the LR.
- Default alpha = 0.9 / m, from the paper's guidance beta = m * alpha ~ 0.9 [M]; the
  Overlap-Local-SGD paper's alpha for EASGD was not retrieved.
- Rounds end after tau, 2tau, ... local steps (the reference's first round is one step longer).
- BatchNorm running statistics are never averaged in training. `eval_model()` is the centre:
  a copy of the model whose parameters are z (after waiting for the centre in flight). No worker
  trains z, so no BN statistics were ever computed on it: the workers' averaged running
  statistics belong to other weights (algorithms.md section 12.15). With
  `algorithm.centre_bn=recompute` (default) `eval_needs_fresh_bn()` asks the loop to recompute
  the centre's statistics on a fixed set of this worker's training batches before it is
  evaluated (experiments/training/evaluate.py; then averaged over the workers like every consensus
  model); `average` keeps the workers' averaged buffers (the suite's behaviour before issue 13,
  for comparison). The local models (`test/acc_local`, the reference's number) are evaluated
  beside it. Measured on the demo config (`python run.py -m experiment=demo
  algorithm=easgd,eamsgd algorithm.centre_bn=average,recompute seed=0,1,2`; the trajectories
  are the same for both settings), mean test accuracy over the seeds:

      epoch   centre, averaged BN   centre, recomputed BN   local models
      easgd  2       0.202                 0.567                0.355
            10       0.947                 0.944                0.946
      eamsgd 2       0.120                 0.171                0.562
            10       0.878                 0.899                0.890

  EASGD's early centre gap was BN statistics; most of EAMSGD's is not: with fresh statistics
  its centre is still a worse model than its Nesterov workers for the first epochs.
- Why EAMSGD is poor in a short run (issue 25: 0.41 in the 5-epoch demo at lr 0.1). Not a
  defect: the learning rate is part of it, the momentum the rest. Validation accuracy at the
  demo's setting (`python run.py experiment=tune cluster=sim algorithm=eamsgd seed=0 ...`,
  5 epochs, tau = 4, 4 workers): lr 0.1 0.42, 0.025 0.72, 0.00625 (tuned, conf/tuned/cpu.yaml)
  0.81 +- 0.03 over 2 seeds; at lr 0.025: momentum=0.5 0.84, tau=1 (a pull every step) 0.93,
  epochs=20 0.99 (EASGD 0.97), centre_bn=average 0.59. Nesterov momentum 0.9 multiplies each
  local step about tenfold, while the pull (alpha = 0.9/m once per tau steps, leaving the
  momentum buffer as it was) brings a worker only part of the way back: the workers drift apart,
  the centre (their average) is a poor model until the LR decays and the pulls win, and the
  training loss even rises at the end of a 5-epoch run as the workers are pulled in. Weaker
  momentum, more frequent pulls or more epochs converge; the 20-epoch tables
  (results/table1) are where EAMSGD is compared.
- `finish()` [I]: a run that stops mid-round first closes it with one more elastic round (one
  extra all-reduce), then waits for the last centre and sets x_i = z on every worker, so the
  consensus model is the centre (identical everywhere by construction).
- eamsgd uses the top-level `momentum` (0.9 here; the original EAMSGD used delta = 0.99 [M]).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import torch

from algorithms.base import Algorithm
from algorithms.comm import copy_into_, flatten
from algorithms.easgd_config import Config, default_alpha, stability_error
from algorithms.mixing import pull_toward_


@torch.no_grad()
def centre_message(
    centre: Sequence[torch.Tensor], pulled: Sequence[torch.Tensor], alpha: float, num_workers: int
) -> list[torch.Tensor]:
    """m * s_i = m * (c z + gamma x_i), (eq. 2) scaled so that the MEAN over workers is z_{r+1}."""
    gamma = alpha / (1 - alpha)
    c = 1 / num_workers - alpha - alpha * alpha / (1 - alpha)
    return [
        num_workers * c * z + num_workers * gamma * x for z, x in zip(centre, pulled, strict=True)
    ]


class EASGD(Algorithm):
    Config = Config
    state = ("centre", "in_round")
    inflight = ("pending",)
    #: Local optimizer keeps the run's momentum (EAMSGD) or runs plain SGD (EASGD).
    local_momentum = False
    label = "easgd"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        m = self.comm.world_size
        self.alpha = default_alpha(m) if self.cfg.alpha is None else float(self.cfg.alpha)
        error = stability_error(self.label, self.alpha, m)
        if error:
            raise ValueError(error)
        self.centre = [p.detach().clone() for p in self.params]  # z_0 = x_0
        self.pending = None
        self.in_round = False

    @classmethod
    def check(cls, cfg: Config, run: dict[str, Any]) -> None:
        if cfg.alpha is not None:
            error = stability_error(cls.label, cfg.alpha, run["workers"])
            if error:
                raise ValueError(error)

    @classmethod
    def local_optimizer(cls, cfg, model, *, lr, momentum, nesterov, weight_decay):
        if not cls.local_momentum:  # the original EASGD: plain local SGD, weight decay kept
            momentum, nesterov = 0.0, False
        return super().local_optimizer(
            cfg, model, lr=lr, momentum=momentum, nesterov=nesterov, weight_decay=weight_decay
        )

    def after_step(self, t: int) -> None:
        self.in_round = True
        if self.round_ends(t):
            self.sync()

    def sync(self) -> None:
        self.drain()  # z_r: launched a round ago, it had tau local steps to arrive
        pull_toward_(self.params, self.centre, self.alpha)  # (eq. 1)
        message = centre_message(self.centre, self.params, self.alpha, self.comm.world_size)
        self.pending = self.comm.mean_async(message, slot="centre")  # z_{r+1}, (eq. 2)-(eq. 3)
        self.in_round = False

    def drain(self) -> None:
        if self.pending is not None:
            self.centre = self.pending.wait()
            self.pending = None

    def finish(self) -> None:
        if self.in_round:
            self.sync()
        self.drain()
        copy_into_(self.params, flatten(self.centre))

    def eval_model(self) -> torch.nn.Module:
        self.drain()
        centre_model = copy.deepcopy(self.model)  # BN buffers: this worker's (see the docs)
        params = [p for p in centre_model.parameters() if p.requires_grad]
        copy_into_(params, flatten(self.centre))
        return centre_model

    def eval_needs_fresh_bn(self) -> bool:
        return self.cfg.centre_bn == "recompute"


class EAMSGD(EASGD):
    """EASGD with local Nesterov momentum (the reference code's "EASGD")."""

    local_momentum = True
    label = "eamsgd"
