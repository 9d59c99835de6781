"""Streaming DiLoCo: DiLoCo whose parameters are synced fragment by fragment on a staggered
schedule, each fragment's all-reduce overlapped with inner steps (algorithms.md section 13).

Douillard, Donchev, Rush, Kale, Charles, Garrett, Teston, Lacey, McIlroy, Shen, Ramé, Szlam,
Ranzato & Barham, "Streaming DiLoCo with overlapping communication: Towards a Distributed Free
Lunch", arXiv 2501.18512, 2025; as implemented by torchft's `DiLoCo(..., fragment_sync_delay,
fragment_update_alpha)` (meta-pytorch/torchft, `torchft/local_sgd.py`).

Notation -> config / attribute:

| paper / torchft                      | here                                                     |
|--------------------------------------|----------------------------------------------------------|
| H, `sync_every`                      | `tau` (top level): every fragment is synced once per tau |
| P, number of model fragments         | `algorithm.fragments`                                    |
| tau (overlap), `fragment_sync_delay` | `algorithm.sync_delay` inner steps                       |
| alpha, `fragment_update_alpha`       | `algorithm.mix_alpha`                                    |
| theta_p (outer / global fragment)    | `outer_model[p]`, identical on every worker              |
| outer optimizer, one per fragment    | `algorithm.outer`, `outer_lr`, `outer_momentum`          |

Fragments: the parameter tensors, in model order, cut into P contiguous groups of about equal
size (`split_fragments`: the p-th cut falls at the tensor boundary nearest to p/P of the
values), as torchft's list of `model_fragments` (the paper also tries a strided pattern; not
offered). Fragment p is synced after local steps s_p + k tau, with s_p = floor((p + 1) tau / P)
(`fragment_offsets`; torchft: every tau / P steps, fragments in turn; with tau < P, fragments
share steps, so tau = 1 syncs every fragment every step). With d = sync_delay:

    after step s_p + k tau - d (launch):  Delta_p,i = z_p - x_p,i ; start mean_j Delta_p,j
                                          (`comm.mean_async`, one accounted collective)
    after step s_p + k tau     (apply):   wait for it (it had d inner steps to arrive)
                                          z_p <- OuterOptimizer_p(z_p, Delta_p)
                                          x_p <- alpha x_p + (1 - alpha) z_p        (merge)

alpha = 0 takes the outer fragment (the d steps of local progress on it are dropped, as in
torchft); alpha = 1 keeps the local fragment. Peak bandwidth falls by P: one fragment's
collective at a time, each fragment's bytes and modeled time accounted on its own. With P = 1,
d = 0 and alpha = 0 this is `diloco` exactly (tested), and the torchft regression scenario
(2 fragments, delay 0/1, alpha 0/0.5/1) is reproduced step by step (tests).

State: `outer_model` (z_p), `outer_buffers` (outer momentum, per fragment), `arrived` (an
average that `drain()` received before its apply step), `fresh` (local steps since the
fragment's last launch); in flight: `pending` (one Pending or None per fragment; a checkpoint
keeps their snapshots).

Deviations and interpretations:
- [I] The inner optimizer is the suite's local torch SGD (the paper and torchft: AdamW), and its
  momentum buffers are kept through syncs, as torchft keeps the inner optimizer's state.
- [I] `sync_delay` null = 1 inner step of overlap when tau // fragments >= 2, else 0; explicit
  values must be < the smallest gap between two fragments' syncs (torchft: < tau / P), so at most
  one fragment is in flight at a time.
- [M] `mix_alpha` 0.5 and outer Nesterov 0.7 / 0.9 (DiLoCo's) as defaults: recalled from the
  paper, not checked against its text here; torchft's own defaults are delay 0, alpha 0.
- The paper's 4-bit outer gradients are the separate `comm.compression` knob (fp16, bf16, int8).
- [I] With `outer_divide_by_lr` (outer=momentum), eta_r is the LR of the step at which the
  fragment is applied (it was launched `sync_delay` steps earlier, usually at the same LR).
- The paper's fragments are groups of transformer blocks, here groups of parameter tensors:
  a fragment may end inside a residual block (the split is by size, not by module).
- `finish()`: applies the fragments in flight (their overlap ends early), then closes the round:
  for each fragment with local steps since its last launch, one blocking collective of its
  pseudo-gradient (a fragment at a time, as the rounds: the peak stays a fragment's) and an outer
  step, and x = z everywhere (consensus, whatever alpha).
- `drain()` (evaluation points) waits for the fragments in flight but applies them at their
  scheduled step, so the trajectory does not depend on `eval_every`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from algorithms.base import Algorithm
from algorithms.comm import Pending
from algorithms.mixing import pull_toward_
from algorithms.outer import OuterOptimizer, pseudo_gradient
from algorithms.streaming_diloco_config import (
    Config,
    check_schedule,
    fragment_offsets,
    resolve_delay,
)


def split_fragments(sizes: Sequence[int], fragments: int) -> list[list[int]]:
    """Indices of the tensors of each fragment: `fragments` contiguous, non-empty groups of
    tensors (in order) whose value counts are about equal (each cut at the tensor boundary
    nearest to p/P of the total)."""
    n = len(sizes)
    if fragments > n:
        raise ValueError(
            f"algorithm.fragments={fragments} exceeds the model's {n} parameter tensors"
        )
    prefix = [0]
    for s in sizes:
        prefix.append(prefix[-1] + s)
    cuts = [0]
    for p in range(1, fragments):
        target = p * prefix[-1] / fragments
        candidates = range(cuts[-1] + 1, n - (fragments - p) + 1)
        cuts.append(min(candidates, key=lambda b: (abs(prefix[b] - target), b)))
    cuts.append(n)
    return [list(range(cuts[p], cuts[p + 1])) for p in range(fragments)]


class StreamingDiLoCo(Algorithm):
    Config = Config
    state = ("outer_model", "outer_buffers", "arrived", "fresh")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        cfg, P = self.cfg, self.cfg.fragments
        check_schedule(cfg, self.tau)
        self.delay = resolve_delay(cfg, self.tau)
        self.alpha = float(cfg.mix_alpha)
        self.offsets = fragment_offsets(self.tau, P)
        groups = split_fragments([p.numel() for p in self.params], P)
        self.fragment_params = [[self.params[i] for i in g] for g in groups]
        self.outer = OuterOptimizer(cfg, self.comm.world_size)
        self.outer_model = [[x.detach().clone() for x in f] for f in self.fragment_params]
        self.outer_buffers = (
            [[None] * len(f) for f in self.fragment_params] if self.outer.has_momentum else None
        )
        self.arrived: list[list[torch.Tensor] | None] = [None] * P
        self.fresh = [False] * P  # local steps since the fragment's last launch
        self.pending: list[Pending | None] = [None] * P

    def after_step(self, t: int) -> None:
        self.fresh = [True] * len(self.fresh)
        c = (t + 1) % self.tau  # position in the round; 0 = its last step
        for p, s in enumerate(self.offsets):
            if c == (s - self.delay) % self.tau:
                self.launch(p)
        for p, s in enumerate(self.offsets):
            if c == s % self.tau:
                self.apply(p)

    def launch(self, p: int) -> None:
        """Start averaging fragment p's pseudo-gradient z_p - x_p (not waited for)."""
        delta = pseudo_gradient(self.outer_model[p], self.fragment_params[p])
        self.pending[p] = self.comm.mean_async(delta, slot=f"fragment{p}")
        self.fresh[p] = False

    def apply(self, p: int, alpha: float | None = None) -> None:
        """Outer step on z_p with the averaged pseudo-gradient, then the merge into x_p."""
        self.receive(p)
        delta, self.arrived[p] = self.arrived[p], None
        lr = self.optimizer.param_groups[0]["lr"]
        buffers = None if self.outer_buffers is None else self.outer_buffers[p]
        self.outer.step(self.outer_model[p], delta, buffers, lr)
        weight = 1.0 - (self.alpha if alpha is None else alpha)  # x <- alpha x + (1-alpha) z
        pull_toward_(self.fragment_params[p], self.outer_model[p], weight)

    def receive(self, p: int) -> None:
        if self.pending[p] is not None:
            self.arrived[p] = self.pending[p].wait()
            self.pending[p] = None

    def drain(self) -> None:
        for p in range(len(self.pending)):
            self.receive(p)

    def finish(self) -> None:
        for p in range(len(self.pending)):
            if self.pending[p] is not None or self.arrived[p] is not None:
                self.apply(p)
        # Close the round: each fragment with local progress since its last launch gets one
        # blocking collective of its own, so no collective is larger than a fragment (the peak
        # bandwidth the method asks for, `comm/peak_bytes`, stays a fragment's to the end).
        for p in [p for p, f in enumerate(self.fresh) if f]:
            delta = pseudo_gradient(self.outer_model[p], self.fragment_params[p])
            self.comm.mean_(delta)
            self.arrived[p] = delta
            self.apply(p, alpha=0.0)
        with torch.no_grad():
            for f, z in zip(self.fragment_params, self.outer_model, strict=True):
                for x, zi in zip(f, z, strict=True):
                    x.copy_(zi)  # x = z: the consensus
        self.fresh = [False] * len(self.fresh)

    def state_dict(self) -> dict[str, Any]:
        out = super().state_dict()
        out["inflight"]["pending"] = [None if q is None else q.snapshot() for q in self.pending]
        return out

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        snaps = state.get("inflight", {}).get("pending") or [None] * len(self.pending)
        self.pending = [None if s is None else Pending.restore(self.comm, s) for s in snaps]
