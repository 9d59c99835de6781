"""The contract between the training loop and an algorithm.

The loop (experiments/training/loop.py) knows no algorithm. For every local step t = 0, 1, 2, ...
(one global counter across epochs) it runs

    zero_grad -> forward -> backward -> before_step(t) -> optimizer.step() -> after_step(t)

and at the end `finish()`. Evaluation calls `eval_model()`.

- `before_step(t)`: gradients are local and not yet applied; gradient methods act here
  (sync SGD, PowerSGD, pseudo-sync).
- `after_step(t)`: the local optimizer has moved the parameters; model-averaging methods act
  here. Rounds end after local steps tau, 2*tau, ... i.e. when (t + 1) % tau == 0 (the
  reference code's first round is one step longer; algorithms.md calls that an off-by-one).
- `finish()`: drain pending collectives and leave identical consensus parameters on every
  worker (algorithms.md section 11, identity 6).
- `eval_model()`: the model whose consensus is evaluated (EASGD: the centre variable; OSP/LOSP:
  the parameter-server model w). `eval_needs_fresh_bn()` True: its BatchNorm running statistics
  were never computed on its weights (no worker trained those weights), so the evaluation
  recomputes them on a fixed set of this worker's training batches first
  (experiments/training/evaluate.py).

The local optimizer is a plain `torch.optim.SGD` (its multi-tensor implementation, `FOREACH`),
built by `local_optimizer()` from the config;
an algorithm never re-implements it, but may change its settings there (EASGD runs plain SGD
locally, PowerSGD exempts some BatchNorm parameters from weight decay). All communication goes
through `self.comm` (algorithms/comm.py).

State: every value an algorithm keeps between steps (anchors, centres, error-feedback memories,
factors, stale snapshots, counters, the accumulators of `metrics()`) is an attribute named in
`state`, and every collective it may hold in flight between steps is an attribute named in
`inflight`, so that `state_dict()` / `load_state_dict()` can checkpoint it
(experiments/store/checkpoint.py). `state_dict()` does not drain: a collective in flight is saved as
its snapshot (`Pending.snapshot()`: the sum, waited for in real time, and its modeled times), so
a run restored from a checkpoint continues exactly as the uninterrupted run, clock and ledger
included. That needs every rank to have launched the collective; algorithms whose collectives
start at rank-dependent steps (OSP, LOSP) set `checkpoint_anywhere = False` (in their Config,
algorithms/base_config.py) and are saved only after `drain()` (at evaluation points).
"""

from __future__ import annotations

from typing import Any

import torch

from algorithms.base_config import Config
from algorithms.comm import Comm, Pending

# The local SGD's implementation: torch's multi-tensor ("foreach") one, which torch picks by
# itself only for CUDA tensors. The same arithmetic in the same order (bit-identical to the
# per-tensor loop on CPU, float32 and float64: tests/test_algorithms.py), in one call per
# operation for all the parameters instead of one per parameter and operation: 0.86 against
# 1.24 ms per step for ResNet-18 width 8 on one core, and far fewer GIL hand-offs between
# `cluster=sim`'s worker threads (issue 16).
FOREACH = True


class _OfConfig:
    """A fact about the algorithm that its Config declares (algorithms/base_config.py: the
    config's checks read it there, without torch), read on the rule as a class attribute."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        return getattr((owner or type(obj)).Config, self.name)


class Algorithm:
    Config = Config
    #: True when the algorithm works in rounds of the top-level `tau` local steps (its Config's).
    periodic = _OfConfig()
    #: Names of the attributes that make up the algorithm's state (tensors, lists of tensors,
    #: numbers), saved by `state_dict()`.
    state: tuple[str, ...] = ()
    #: Names of the attributes that may hold a collective in flight (a `Pending` or None).
    inflight: tuple[str, ...] = ()
    #: Whether a checkpoint may be taken between any two steps (every collective in flight was
    #: launched by every rank); False: only after `drain()` on every rank (its Config's).
    checkpoint_anywhere = _OfConfig()

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
        EASGD's m * alpha < 1 needs the number of workers). Raise ValueError, one line. The
        Config's own `check` (torch-free: the pre-flight calls it without the rule)."""
        cfg.check(run)

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
        """The worker's local optimizer: plain torch SGD with the run's settings (`FOREACH`)."""
        return torch.optim.SGD(
            model.parameters(),
            lr=lr,
            momentum=momentum,
            nesterov=nesterov,
            weight_decay=weight_decay,
            foreach=FOREACH,
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

    def model_at(self, t: float) -> torch.nn.Module:
        """The model this method defines, as it stood at virtual time `t`, asked by the time
        budget's evaluation while the clock passes `t` (experiments/training/budget.py): every
        update completed by `t` in, none later. Default: `eval_model()` now, which is right for
        every method whose updates take effect when this worker applies them. A method whose
        model moves when a collective completes, whether or not this worker has looked yet
        (OSP/LOSP's parameter-server model), overrides it. Must not touch the clock, the
        ledger or any collective in flight."""
        return self.eval_model()

    def eval_needs_fresh_bn(self) -> bool:
        """Whether `eval_model()`'s BatchNorm statistics must be recomputed before it is
        evaluated (its weights are not any worker's, e.g. EASGD's centre)."""
        return False

    def metrics(self) -> dict[str, float]:
        """Algorithm-specific values to log at evaluation time (`algo/...`)."""
        return {}

    def drain(self) -> None:
        """Wait for every collective in flight and fold its result into the state."""

    def state_dict(self) -> dict[str, Any]:
        """The algorithm's state; collectives in flight as snapshots (see the module doc)."""
        out = {name: _detached(getattr(self, name)) for name in self.state}
        out["inflight"] = {
            name: None if getattr(self, name) is None else getattr(self, name).snapshot()
            for name in self.inflight
        }
        return out

    def load_state_dict(self, state: dict[str, Any]) -> None:
        missing = set(self.state) - set(state)
        if missing:
            raise KeyError(f"algorithm state lacks {', '.join(sorted(missing))}")
        for name in self.state:
            setattr(self, name, _detached(state[name]))
        inflight = state.get("inflight", {})
        for name in self.inflight:
            snap = inflight.get(name)
            setattr(self, name, None if snap is None else Pending.restore(self.comm, snap))


def _detached(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, list | tuple):
        return type(value)(_detached(v) for v in value)
    if isinstance(value, dict):
        return {k: _detached(v) for k, v in value.items()}
    return value
