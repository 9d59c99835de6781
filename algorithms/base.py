"""The contract between the training loop and an algorithm.

The loop (experiments/loop.py) knows no algorithm. For every local step t = 0, 1, 2, ... (one
global counter across epochs) it runs

    zero_grad -> forward -> backward -> before_step(t) -> optimizer.step() -> after_step(t)

and at the end `finish()`. Evaluation calls `eval_model()`.

- `before_step(t)`: gradients are local and not yet applied; gradient methods act here
  (sync SGD, PowerSGD, pseudo-sync).
- `after_step(t)`: the local optimizer has moved the parameters; model-averaging methods act
  here. Rounds end after local steps tau, 2*tau, ... i.e. when (t + 1) % tau == 0 (the
  reference code's first round is one step longer; algorithms.md calls that an off-by-one).
- `finish()`: drain pending collectives and leave identical consensus parameters on every
  worker (algorithms.md section 11, identity 6).
- `eval_model()`: the model whose consensus is evaluated (EASGD: the centre variable).

The local optimizer is a plain `torch.optim.SGD` built by the loop from the config; an algorithm
never re-implements it. All communication goes through `self.comm` (algorithms/comm.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from algorithms.comm import Comm


@dataclass
class Config:
    """Algorithm knobs live under `algorithm.` in the config; this one has none."""


class Algorithm:
    Config = Config
    #: True when the algorithm works in rounds of the top-level `tau` local steps.
    periodic: bool = False

    def __init__(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        comm: Comm,
        cfg: Config,
        tau: int = 1,
    ):
        self.model, self.optimizer, self.comm, self.cfg, self.tau = model, optimizer, comm, cfg, tau
        self.params = [p for p in model.parameters() if p.requires_grad]

    def round_ends(self, t: int) -> bool:
        """True after the last local step of a round (steps tau-1, 2*tau-1, ... 0-based)."""
        return (t + 1) % self.tau == 0

    def before_step(self, t: int) -> None:
        pass

    def after_step(self, t: int) -> None:
        pass

    def finish(self) -> None:
        pass

    def eval_model(self) -> torch.nn.Module:
        return self.model

    def metrics(self) -> dict[str, float]:
        """Algorithm-specific values to log at evaluation time (`algo/...`)."""
        return {}
