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

The local optimizer is a plain `torch.optim.SGD`, built by `local_optimizer()` from the config;
an algorithm never re-implements it, but may change its settings there (EASGD runs plain SGD
locally, PowerSGD exempts some BatchNorm parameters from weight decay). All communication goes
through `self.comm` (algorithms/comm.py).

State: every tensor an algorithm keeps between steps (anchors, centres, error-feedback memories,
factors, stale snapshots, in-flight results) is an attribute named in `state`, so that
`state_dict()` / `load_state_dict()` can checkpoint it. `state_dict()` first drains in-flight
collectives (`drain()`), so a checkpoint never holds half a collective.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from algorithms.comm import Comm


@dataclass
class Config:
    """Algorithm knobs live under `algorithm.` in the config; this one has none."""


class Algorithm:
    Config = Config
    #: True when the algorithm works in rounds of the top-level `tau` local steps.
    periodic: bool = False
    #: Names of the attributes that make up the algorithm's state (tensors, lists of tensors,
    #: numbers), saved by `state_dict()`.
    state: tuple[str, ...] = ()

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

    @classmethod
    def check(cls, cfg: Config, run: dict[str, Any]) -> None:
        """Reject knob values that are wrong only in combination with the run's config (e.g.
        EASGD's m * alpha < 1 needs the number of workers). Raise ValueError, one line."""

    @classmethod
    def local_optimizer(
        cls,
        cfg: Config,
        model: torch.nn.Module,
        *,
        lr: float,
        momentum: float,
        nesterov: bool,
        weight_decay: float,
    ) -> torch.optim.SGD:
        """The worker's local optimizer: plain torch SGD with the run's settings."""
        return torch.optim.SGD(
            model.parameters(),
            lr=lr,
            momentum=momentum,
            nesterov=nesterov,
            weight_decay=weight_decay,
        )

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

    def drain(self) -> None:
        """Wait for every collective in flight and fold its result into the state."""

    def state_dict(self) -> dict[str, Any]:
        self.drain()
        return {name: _detached(getattr(self, name)) for name in self.state}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        missing = set(self.state) - set(state)
        if missing:
            raise KeyError(f"algorithm state lacks {', '.join(sorted(missing))}")
        for name in self.state:
            setattr(self, name, _detached(state[name]))


def _detached(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, list | tuple):
        return type(value)(_detached(v) for v in value)
    if isinstance(value, dict):
        return {k: _detached(v) for k, v in value.items()}
    return value
