"""CoCoD-SGD: average a snapshot in the background, then add back the local progress made
meanwhile (algorithms.md section 5).

Shen, Jin, Xu et al., "Faster Distributed Deep Net Training: Computation and Communication
Decoupled Stochastic Gradient Descent", IJCAI 2019, arXiv 1906.12043; in the form of the
Overlap-Local-SGD code (JYWa/Overlap_Local_SGD).

Notation -> config / attribute:

| paper   | here                                                                   |
|---------|------------------------------------------------------------------------|
| x_i     | this worker's parameters (`self.params`); b_i: torch SGD's momentum    |
| y_i     | this worker's model at the last round end (`self.snapshot`)           |
| z       | mean of the models at the last round end (`self.average`)             |
| tau, m  | `tau` (top level), `workers`; no algorithm knobs                       |

Update rule. Every step: the local torch SGD step (Nesterov). After local steps tau, 2tau, ...
(round r):

    z    = mean_j y_j                  wait for the all-reduce launched at round r-1 (z = y = x_0
                                       at the first round, which is then a no-op)
    x_i <- z + (x_i - y_i)             stale average + own progress since the last round (eq. 1)
    y_i  = x_i ; launch mean_j y_j     not waited for                                     (eq. 2)

Invariant (tested): the average moves by the mean local progress of each round,
z_{r+1} = z_r + mean_j (x_j - y_j) with x_j taken before (eq. 1); right after a round the
workers differ only by their own progress, x_i - x_k = (x_i - y_i) - (x_k - y_k). The averaged
part is tau local steps stale; the all-reduce has tau local steps to complete. One model-sized
all-reduce per round.

State: `snapshot` (y_i), `average` (z, the latest average received), `pending` (the all-reduce
in flight, folded into `average` by `drain()`; a checkpoint keeps its snapshot).

Deviations from the paper and the reference code:
- (eq. 1) is applied as x_i += z - y_i (the same sum, in an order that leaves x_i bit-for-bit
  unchanged at the first round, where z = y_i).
- Rounds end after tau, 2tau, ... local steps (the reference's first round is one step longer).
- The average runs on `Comm.mean_async` (a collective handle), not a Python thread.
- BatchNorm running statistics are never averaged in training; `eval_model()` is the local model.
- `finish()`: wait for the average in flight, apply (eq. 1) once more, then one exact blocking
  average of the parameters, so every worker holds the same consensus model (one extra
  all-reduce).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from algorithms.base import Algorithm
from algorithms.cocod_sgd_config import Config


@torch.no_grad()
def add_progress_(
    params: Sequence[torch.Tensor],
    average: Sequence[torch.Tensor],
    snapshot: Sequence[torch.Tensor],
) -> None:
    """(eq. 1) in place: x <- x + (z - y), i.e. the average plus the progress since y."""
    for x, z, y in zip(params, average, snapshot, strict=True):
        x.add_(z - y)


class CoCoDSGD(Algorithm):
    Config = Config
    state = ("snapshot", "average")
    inflight = ("pending",)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.snapshot = [p.detach().clone() for p in self.params]  # y_i = x_0
        self.average = [p.detach().clone() for p in self.params]  # z = x_0
        self.pending = None

    def after_step(self, t: int) -> None:
        if self.round_ends(t):
            self.sync()

    def sync(self) -> None:
        self.fold()
        # (eq. 2): the snapshot is copied, not waited for
        self.pending = self.comm.mean_async(self.params, slot="average")

    def fold(self) -> None:
        """Wait for the average and apply (eq. 1); y_i <- x_i."""
        self.drain()  # launched a round ago, it had tau local steps to arrive
        add_progress_(self.params, self.average, self.snapshot)
        self.snapshot = [p.detach().clone() for p in self.params]

    def drain(self) -> None:
        if self.pending is not None:
            self.average = self.pending.wait()
            self.pending = None

    def finish(self) -> None:
        self.fold()
        self.comm.mean_(self.params)
