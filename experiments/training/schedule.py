"""Learning-rate schedule of the reference code (algorithms.md section 9), as a pure function.

    peak   = lr * batch_size * workers / 128          (base LR per 128 samples, linear scaling)
    warmup : linear per iteration from lr to peak over `warmup_epochs`:
             lr + (peak - lr) * (step + 1) / warmup_steps for step < warmup_steps
    then   : peak * lr_decay ** (number of decay epochs reached)

The warm-up is the reference's `update_learning_rate` (JYWa/Overlap_Local_SGD,
train_LocalSGD.py): `count = epoch * itr_per_epoch + itr + 1`, so its first iteration already
takes one increment and its last warm-up iteration runs at the peak; and when the peak is not
above the base LR (`target_lr <= args.lr`) it uses the peak from the first iteration, without a
ramp; no decay applies inside the warm-up. The reference's warm-up always lasts 5 epochs; here
`warmup_epochs` (0 = none).

Decay epochs are `round(f * epochs)` for f in `lr_decay_at`, so that [0.5, 5/6] of 300 epochs
gives 150 and 250 (the paper) and the same fractions scale to shorter runs; the decay applies
from the first step of that epoch.

`limit`: the largest number of the training's dtype (torch.finfo(dtype).max). An LR beyond it is
what float arithmetic makes of it, infinity (the optimizer would otherwise refuse to convert it
and crash): the update is non-finite, and the run ends `diverged`, as any run whose numbers
overflow does.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

# one rule for the decay epochs, shared with the convergence rule that reads them (store/)
from experiments.store.convergence import decay_epochs

if TYPE_CHECKING:
    from experiments.config.schema import Config


def peak_lr(lr: float, batch_size: int, workers: int) -> float:
    """Base LR `lr` (for 128 samples) scaled linearly to the global batch."""
    return lr * batch_size * workers / 128


def lr_at(
    step: int,
    steps_per_epoch: int,
    *,
    lr: float,
    batch_size: int,
    workers: int,
    epochs: int,
    warmup_epochs: float = 0,
    lr_decay_at: Sequence[float] = (),
    lr_decay: float = 0.1,
    limit: float = math.inf,
) -> float:
    """The LR in force for local step `step` (0-based, counted across epochs); infinity when it
    exceeds `limit` (module docstring)."""
    peak = peak_lr(lr, batch_size, workers)
    warmup_steps = warmup_epochs * steps_per_epoch
    if step < warmup_steps:  # as the reference, no decay inside the warm-up
        # the reference's count = itr + 1; min(): a fractional warm-up never overshoots the peak
        ramp = min(step + 1, warmup_steps) / warmup_steps
        value = peak if peak <= lr else lr + (peak - lr) * ramp
    else:
        epoch = step // steps_per_epoch
        value = peak * lr_decay ** sum(epoch >= e for e in decay_epochs(lr_decay_at, epochs))
    return value if abs(value) <= limit else math.copysign(math.inf, value)


@dataclass(frozen=True)
class Schedule:
    """One run's LR schedule: the keys of the run's config that `lr_at` reads, the workers that
    run and the dtype's `limit`. The worker's set-up (experiments/worker.py) makes it and the
    loop asks it for each step's LR."""

    lr: float
    batch_size: int
    workers: int
    epochs: int
    warmup_epochs: float
    lr_decay_at: tuple[float, ...]
    lr_decay: float
    limit: float = math.inf

    @classmethod
    def of(cls, job: Config, workers: int, limit: float) -> Schedule:
        """The schedule of the typed run config `job` among `workers` workers."""
        return cls(
            lr=job.lr,
            batch_size=job.batch_size,
            workers=workers,
            epochs=job.epochs,
            warmup_epochs=job.warmup_epochs,
            lr_decay_at=tuple(job.lr_decay_at),
            lr_decay=job.lr_decay,
            limit=limit,
        )

    def lr_at(self, step: int, steps_per_epoch: int) -> float:
        """The LR in force for local step `step` (the module docstring)."""
        return lr_at(
            step,
            steps_per_epoch,
            lr=self.lr,
            batch_size=self.batch_size,
            workers=self.workers,
            epochs=self.epochs,
            warmup_epochs=self.warmup_epochs,
            lr_decay_at=self.lr_decay_at,
            lr_decay=self.lr_decay,
            limit=self.limit,
        )
