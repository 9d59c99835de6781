"""Fully synchronous SGD (the baseline of every paper here; algorithms.md section 1).

Notation -> config: m = `workers`, eta_t = the LR schedule (`lr`, `warmup_epochs`, ...),
mu = `momentum`, wd = `weight_decay`; `algorithm.bucket_mb` = the gradient bucket size.

Per step (matches PowerSGD's `ExactReducer`):

    G   = mean_j grad_j                 (all-reduce, bucket by bucket)               # backward
    G  += wd * x ; b = mu*b + G ; x -= eta * (G + mu*b)                              # torch SGD

Weight decay and momentum are applied by the local `torch.optim.SGD` *after* averaging; since
the parameters are identical on every worker (they start equal and receive the same update),
the momentum buffer is global and nothing is stale. BatchNorm running statistics stay local.

A parameter without a gradient (unused in this step's forward) takes part with a zero gradient,
as in PowerSGD, so every worker sends the same buffers.

How the average is computed (as `DistributedDataParallel` does it, so that sync_sgd runs at
DDP's speed): the gradients are split into buckets of about `bucket_mb` MB (2**20 bytes, DDP's
unit), in reverse parameter order (the order backward produces them), the first bucket capped
at 1 MB as DDP caps it (`dist._DEFAULT_FIRST_BUCKET_BYTES`), so that communication starts
early. A gradient-ready hook (`register_post_accumulate_grad_hook`) counts each bucket's
gradients; when a bucket is complete its average is launched (non-blocking, `Comm.mean_async`)
while backward goes on, buckets strictly in order (every worker launches the same collectives
in the same order; a bucket completed early waits for its predecessors, as in DDP's reducer).
`before_step` launches what is left (buckets with unused parameters), waits for every bucket
and writes the averages into the gradients. Why our own hooks rather than a DDP communication
hook: DDP's hook sees only its own buckets' futures, not the suite's clock and ledger, and DDP
would own the model (its forward and buffers); the hooks here keep the one `Comm` ledger and
the virtual clock, and the algorithm keeps the loop's contract. `bucket_mb=0`: one blocking
average of all gradients after backward (the reference implementations' way, no overlap).

The sums are those of one flat average, element by element (each element is summed over the
same workers in the same order; 2 workers or `cluster=sim`: bit for bit whatever the buckets),
checked against `DistributedDataParallel` bit for bit (tests/test_references.py) and against
`bucket_mb=0` (tests/test_sync_buckets.py).

Time, virtual clock ([I], the model of a collective launched mid-backward): the buckets are
launched in `before_step`, each stamped with the modeled time its last gradient was ready:

    launch_k = s + d * (1/3 + 2/3 * n_k / n)

with s and d the start and modeled duration of the step's compute (`clock.last_step`), n_k
the values in buckets 0..k and n all values: forward takes the first third of the step,
backward (about twice the forward's FLOPs) the rest, producing gradient values at an even rate.
The last bucket is launched at the clock's now, after the step's algorithm work, as every other
collective of the suite. The buckets share the worker's link: bucket k starts no earlier than
bucket k-1 completes (`Comm.mean_async(after=...)`). With one bucket (every model of 1 MB or
less, e.g. the cpu scale) the time is exactly that of one average after backward. Real clock:
measured (algorithms/comm.py); the time spent waiting in `before_step` is exposed, the part of
a bucket's flight under backward is hidden.

Deviations: none in the update rule. The bucketed average changes when communication happens
(and so the exposed time), not what is computed; the papers' sync baseline averages after
backward (`bucket_mb=0`, which conf/experiment/fig4.yaml uses).
"""

from __future__ import annotations

import torch

from algorithms.base import Algorithm
from algorithms.comm import Pending
from algorithms.sync_sgd_config import Config

MB = 2**20  # DDP's unit of bucket_cap_mb
FIRST_BUCKET_MB = 1.0  # DDP's first bucket (torch.distributed._DEFAULT_FIRST_BUCKET_BYTES)
FORWARD_SHARE = 1 / 3  # [I] of a step's compute: forward 1, backward ~2 (the FLOP ratio)


def plan_buckets(params: list[torch.Tensor], bucket_mb: float) -> list[list[int]]:
    """Indices into `params` of each bucket, in launch order: reverse parameter order, a bucket
    closed once it holds `bucket_mb` MB (the first: min(1 MB, bucket_mb)) or at a change of
    dtype or device (a bucket is one flat buffer), as DDP's `_compute_bucket_assignment_by_size`
    does."""
    buckets: list[list[int]] = []
    current: list[int] = []
    size, cap = 0, min(FIRST_BUCKET_MB, bucket_mb) * MB
    for i in reversed(range(len(params))):
        p = params[i]
        if current:
            q = params[current[-1]]
            if (p.dtype, p.device) != (q.dtype, q.device):
                buckets.append(current)
                current, size, cap = [], 0, bucket_mb * MB
        current.append(i)
        size += p.numel() * p.element_size()
        if size >= cap:
            buckets.append(current)
            current, size, cap = [], 0, bucket_mb * MB
    if current:
        buckets.append(current)
    return buckets


class SyncSGD(Algorithm):
    Config = Config

    def __init__(self, model, optimizer, comm, cfg: Config = None, tau: int = 1):
        cfg = Config() if cfg is None else cfg
        super().__init__(model, optimizer, comm, cfg, tau)
        if not cfg.bucket_mb >= 0:
            raise ValueError(f"algorithm.bucket_mb must be >= 0, got {cfg.bucket_mb}")
        self.buckets = plan_buckets(self.params, cfg.bucket_mb) if cfg.bucket_mb > 0 else []
        self._bucket_of = {id(self.params[i]): k for k, b in enumerate(self.buckets) for i in b}
        sizes = [sum(self.params[i].numel() for i in b) for b in self.buckets]
        total = sum(sizes)
        done, self._ready_frac = 0, []
        for n in sizes:  # the share of the gradient values ready once bucket k is complete
            done += n
            self._ready_frac.append(done / total if total else 1.0)
        self._reset()
        # (the hooks read self.comm when they fire: a calibration swaps it, experiments/
        # calibrate.py)
        for p in self.params if self.buckets else ():
            p.register_post_accumulate_grad_hook(self._grad_ready)

    def _reset(self) -> None:
        self._missing = [len(b) for b in self.buckets]  # gradients not ready yet, per bucket
        self._next = 0  # the next bucket to launch
        self._pending: list[Pending] = []

    def _grad_ready(self, p: torch.Tensor) -> None:
        """Gradient-ready hook: launch every complete bucket next in line (real clock)."""
        if self.comm.clock.virtual:  # launched in before_step at their modeled times
            return
        k = self._bucket_of[id(p)]
        self._missing[k] -= 1
        if self._missing[k] < 0:
            raise RuntimeError(
                "sync_sgd: a second backward pass before the optimizer step (gradient "
                "accumulation) is not supported with bucketed averages; set "
                "algorithm.bucket_mb=0"
            )
        while self._next < len(self.buckets) and self._missing[self._next] == 0:
            self._launch(self._next)

    def _launch(self, k: int, launch_at: float | None = None) -> None:
        grads = []
        for i in self.buckets[k]:
            p = self.params[i]
            if p.grad is None:  # an unused parameter still takes part in the collective
                p.grad = torch.zeros_like(p)
            grads.append(p.grad)
        after = self._pending[-1] if self._pending else None
        self._pending.append(
            self.comm.mean_async(
                grads, slot=f"bucket{k}", launch_at=launch_at, after=after, turns=1
            )
        )
        self._next = k + 1

    def before_step(self, t: int) -> None:
        if not self.buckets:
            for p in self.params:
                if p.grad is None:
                    p.grad = torch.zeros_like(p)
            self.comm.mean_([p.grad for p in self.params])
            return
        clock = self.comm.clock
        if clock.virtual:
            step = getattr(clock, "last_step", None)
            for k in range(len(self.buckets)):
                at = None  # now: the last bucket, or no modeled step to place it in
                if step is not None and step[0] == t and k < len(self.buckets) - 1:
                    _, began, duration = step
                    at = began + duration * (
                        FORWARD_SHARE + (1 - FORWARD_SHARE) * self._ready_frac[k]
                    )
                self._launch(k, launch_at=at)
        else:
            while self._next < len(self.buckets):  # buckets holding unused parameters
                self._launch(self._next)
        with torch.no_grad():
            for k, pending in enumerate(self._pending):
                averages = pending.wait()
                for i, avg in zip(self.buckets[k], averages, strict=True):
                    self.params[i].grad.copy_(avg)
        self._reset()
