"""Pseudo-synchronous SGD with an adaptive exponential-smoothing predicted gradient
(algorithms.md section 8).

"Pseudo-synchronous SGD with adaptive exponential-smoothing predicted gradient", International
Journal of Parallel Programming, 2023, doi 10.1007/s10766-023-00759-4. Only the abstract is
known: the network is updated with the previous step's gradient while the new gradient's
all-reduce overlaps the computation, and an exponentially smoothed *predicted* gradient, whose
confidence in the history adapts, recovers the convergence of synchronous SGD. The formulas
are not available: the rule below is the suite's interpretation [I] of algorithms.md.

Notation -> config / attribute:

    g_t      this worker's gradient at step t     `p.grad` after backward
    G_t      mean_j g_j,t (async all-reduce)      in flight in `self.pending`, then `self.G`
    S_t      predicted gradient                   `self.S` (flat)
    c_t      confidence in the history            `algorithm.confidence` = adaptive | fixed,
                                                  `algorithm.c` (fixed), `algorithm.c_max`
    m        number of workers                    `workers` (top level)

Rule, in `before_step(t)`:

    launch G_t = mean_j g_j,t in the background (arrives during step t+1)
    t = 0:  wait for G_0 (the only blocking wait) ; S_0 = G_0 ; apply S_0
    t = 1:  nothing new has arrived (G_0 is spent, G_1 in flight): apply no gradient ;
            S_1 = S_0 is kept for the next cosine
    t >= 2: wait for G_{t-1} (it had a whole step of computation to arrive)
            c_t = clip(cos(S_{t-1}, G_{t-1}), 0, c_max)        (fixed: c_t = c)
            S_t = c_t * S_{t-1} + (1 - c_t) * G_{t-1}           (exponential smoothing)
            blend_local:  S_t += (g_t - G_{t-1}) / m            (own fresh gradient)
            apply S_t
    "apply d": p.grad = d ; the local torch SGD then adds wd * x (and, with momentum=keep only,
    the run's Nesterov momentum)

S_t is the method's only history term (algorithms.md section 8, revised): with
`algorithm.momentum=none` (default) `local_optimizer` builds the local SGD with momentum 0 and
no Nesterov, so x_{t+1} = x_t - eta_t (S_t + wd x_t). `algorithm.momentum=keep` stacks the run's
momentum/Nesterov on top of S_t, for ablation only: a second history term on a stale gradient is
extra lag, not a prediction. Measured (algorithms.md section 8): with Nesterov 0.9 on top, the
demo reached 0.610 / 0.913 / 0.853 over seeds 0/1/2 against 0.970 for sync SGD, the training loss
rising above ln 10 in the first epochs; on a quadratic the largest stable eta*lambda falls from
1.357 (Nesterov, no delay) to 0.094 (delay 1, c = 0.5), while without momentum it stays 1.0.
Each averaged gradient G_t is applied exactly once (through S).

Measured at the defaults (final test accuracy `final/test_acc`, mean +- sd over seeds 0, 1, 2;
`python run.py -m [experiment=demo] algorithm=sync_sgd,pseudo_sync seed=0,1,2`), the paper's
"comparable to synchronous SGD" read as within 1.5 points of it:

    demo (digits, 4 workers, 10 epochs): pseudo_sync 0.9722 +- 0.0084 (0.9633 / 0.9800 / 0.9733)
                                         sync_sgd    0.9722 +- 0.0117 (0.9600 / 0.9833 / 0.9733)
    cpu  (the same, 20 epochs):          pseudo_sync 0.9789 +- 0.0051 (0.9800 / 0.9733 / 0.9833)
                                         sync_sgd    0.9833 +- 0.0000 (0.9833 / 0.9833 / 0.9833)

Without `blend_local` every worker applies the same S_t, so the replicas stay identical (hence
"pseudo-synchronous"); with it they drift and `finish()` averages the parameters once.
Communication: one gradient-sized all-reduce per step, non-blocking, one step of staleness.

State: `S` (predicted gradient), `G` (the averaged gradient that arrived but is not applied
yet; `drain()` waits for the one in flight and stores it here), `last_confidence` (c_t),
`pending` (G_t in flight; a checkpoint keeps its snapshot), and the sums behind `metrics()`.

Deviations from the paper and the reference code (all [I]; neither the paper body nor code is
available):
- The whole update rule above, including the cosine-based confidence (how well the previous
  prediction matched the gradient that then arrived) and its clipping to [0, c_max].
- No momentum on top of S_t by default (see above); the paper's optimizer settings are unknown.
- One confidence for the whole model (the cosine of the flattened vectors), not per layer.
- The start-up [I]: step 0 waits for its own average (as synchronous SGD; nothing older
  exists), so at step 1 no unapplied average has arrived and the step applies no gradient (only
  weight decay acts); from step 2 on every step applies the average of the step before. The
  alternative reading (step 0 applies nothing and does not wait, step 1 applies G_0) delays
  G_0 by one step and saves one blocking wait; both apply every G_t once. With
  `confidence=fixed`, c = 0 the rule is exactly one-step-delayed synchronous SGD with this
  start-up (algorithms.md section 11 #5; tests/test_pseudo_sync.py).
- With `blend_local` the correction becomes part of S_t and so of the history that the next
  step smooths (the rule of algorithms.md read literally); step 1 applies nothing either.
- The gradient all-reduced at the last step is waited for by `finish()` and discarded: there is
  no step left to apply it.
- A zero vector has cosine 0 with anything, so the adaptive rule then trusts the fresh average.
"""

from __future__ import annotations

import torch

from algorithms.base import Algorithm
from algorithms.comm import copy_into_, flatten
from algorithms.pseudo_sync_config import Config


class PseudoSync(Algorithm):
    Config = Config
    state = ("S", "G", "last_confidence", "_confidence_sum", "_confidence_steps")
    inflight = ("pending",)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.S: torch.Tensor | None = None  # S_{t-1}, flat
        self.G: torch.Tensor | None = None  # G_{t-1} once arrived, flat
        self.pending = None  # G_{t-1} in flight
        self.last_confidence: torch.Tensor | None = None  # c_t (0-d tensor: no device sync)
        self._confidence_sum, self._confidence_steps = 0.0, 0

    @classmethod
    def local_optimizer(cls, cfg, model, *, lr, momentum, nesterov, weight_decay):
        """momentum=none: torch SGD without momentum (S_t is the history); keep: the run's."""
        if cfg.momentum == "none":
            momentum, nesterov = 0.0, False
        return super().local_optimizer(
            cfg, model, lr=lr, momentum=momentum, nesterov=nesterov, weight_decay=weight_decay
        )

    def before_step(self, t: int) -> None:
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in self.params]
        for p, g in zip(self.params, grads, strict=True):
            p.grad = g
        launched = self.comm.mean_async(grads, slot="G")  # G_t, arrives during the next step
        if self.S is None:  # step 0
            self.S = launched.wait_flat().clone()  # S_0 = G_0: the only blocking wait
            copy_into_(grads, self.S)
            return
        g_prev = self._arrived()  # G_{t-1}; None at step 1 (G_0 is spent)
        self.pending = launched
        if g_prev is None:  # nothing new to apply: S_1 = S_0 is kept, only weight decay acts
            for g in grads:
                g.zero_()
            return
        if self.cfg.confidence == "adaptive":
            c = adaptive_confidence(self.S, g_prev, self.cfg.c_max)
        else:
            c = torch.tensor(float(self.cfg.c), dtype=g_prev.dtype, device=g_prev.device)
        self.S = smooth(self.S, g_prev, c)
        if self.cfg.blend_local:
            self.S = blend_local(self.S, flatten(grads), g_prev, self.comm.world_size)
        self.last_confidence = c
        self._confidence_sum = self._confidence_sum + c
        self._confidence_steps += 1
        copy_into_(grads, self.S)

    def _arrived(self) -> torch.Tensor | None:
        """The averaged gradient launched at the previous step (waiting for it if needed), once:
        None when it was applied already."""
        self.drain()
        g_prev, self.G = self.G, None
        return g_prev

    def drain(self) -> None:
        if self.pending is not None:
            self.G = self.pending.wait_flat()
            self.pending = None

    def finish(self) -> None:
        self.drain()  # the last gradient: waited for, then never applied
        if self.cfg.blend_local:
            self.comm.mean_(self.params)  # replicas drifted: one exact average

    def metrics(self) -> dict[str, float]:
        """`confidence`: the mean c_t over the steps since the last call."""
        if self._confidence_steps == 0:
            return {}
        out = {"confidence": float(self._confidence_sum) / self._confidence_steps}
        self._confidence_sum, self._confidence_steps = 0.0, 0
        return out


def cosine(a: torch.Tensor, b: torch.Tensor, eps: float = 1e-30) -> torch.Tensor:
    """cos(a, b) of two flat vectors; 0 when either is (numerically) zero."""
    return torch.dot(a, b) / (a.norm() * b.norm()).clamp(min=eps)


def adaptive_confidence(s_prev: torch.Tensor, g_prev: torch.Tensor, c_max: float) -> torch.Tensor:
    """c_t = clip(cos(S_{t-1}, G_{t-1}), 0, c_max): trust the history as far as it predicted
    the gradient that then arrived."""
    return cosine(s_prev, g_prev).clamp(0.0, c_max)


def smooth(s_prev: torch.Tensor, g_prev: torch.Tensor, c: torch.Tensor | float) -> torch.Tensor:
    """S_t = c * S_{t-1} + (1 - c) * G_{t-1} (new tensor)."""
    return c * s_prev + (1 - c) * g_prev


def blend_local(s: torch.Tensor, g: torch.Tensor, g_prev: torch.Tensor, m: int) -> torch.Tensor:
    """S_t + (g_t - G_{t-1}) / m: replace this worker's share of the stale average by its
    fresh gradient (new tensor)."""
    return s + (g - g_prev) / m
