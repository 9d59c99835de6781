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
    t = 0:  wait for G_0 (the only blocking wait) ; S_0 = G_0
    t > 0:  wait for G_{t-1} (it had a whole step of computation to arrive)
            c_t = clip(cos(S_{t-1}, G_{t-1}), 0, c_max)        (fixed: c_t = c)
            S_t = c_t * S_{t-1} + (1 - c_t) * G_{t-1}           (exponential smoothing)
            blend_local:  S_t += (g_t - G_{t-1}) / m            (own fresh gradient)
    p.grad = S_t ; torch SGD then adds wd * x and Nesterov momentum

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
- One confidence for the whole model (the cosine of the flattened vectors), not per layer.
- Step 1 applies G_0 again: S_0 = G_0 and G_0 is also the "previous" gradient at step 1, so
  cos = 1, and S_1 = c_1 G_0 + (1 - c_1) G_0 = G_0 whatever c_1. The first fresh information
  (G_1) enters at step 2.
- With `blend_local` the correction becomes part of S_t and so of the history that the next
  step smooths (the rule of algorithms.md read literally).
- The gradient all-reduced at the last step is waited for by `finish()` and discarded: there is
  no step left to apply it.
- A zero vector has cosine 0 with anything, so the adaptive rule then trusts the fresh average.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from algorithms.base import Algorithm
from algorithms.comm import copy_into_, flatten

CONFIDENCE_RULES = ("adaptive", "fixed")


@dataclass
class Config:
    # How c_t is chosen: adaptive = clip(cos(S_{t-1}, G_{t-1}), 0, c_max); fixed = `c`.
    confidence: str = "adaptive"
    # c_t when confidence=fixed, in [0, 1]; 0 = plain one-step-delayed synchronous SGD.
    c: float = 0.0
    # Upper bound of the adaptive confidence, in [0, 1].
    c_max: float = 0.9
    # Add the worker's fresh correction (g_t - G_{t-1}) / m to S_t (replicas then drift).
    blend_local: bool = False

    def __post_init__(self):
        if self.confidence not in CONFIDENCE_RULES:
            raise ValueError(
                f"algorithm.confidence must be one of {', '.join(CONFIDENCE_RULES)}, "
                f"got {self.confidence!r}"
            )
        for key in ("c", "c_max"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
                raise ValueError(f"algorithm.{key} must be a number in [0, 1], got {value!r}")
        if not isinstance(self.blend_local, bool):
            raise ValueError(
                f"algorithm.blend_local must be true or false, got {self.blend_local!r}"
            )


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

    def before_step(self, t: int) -> None:
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in self.params]
        for p, g in zip(self.params, grads, strict=True):
            p.grad = g
        launched = self.comm.mean_async(grads, slot="G")  # G_t, arrives during the next step
        if self.S is None:
            self.G = launched.wait_flat()  # G_0: the only blocking wait
            self.S = self.G.clone()  # S_0 = G_0
        else:
            g_prev = self._arrived()  # G_{t-1}
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
            self.pending, self.G = launched, None
        copy_into_(grads, self.S)

    def _arrived(self) -> torch.Tensor:
        """The averaged gradient launched at the previous step, waiting for it if needed."""
        self.drain()
        return self.G

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
