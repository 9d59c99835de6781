"""The pull shared by the elastic and anchor methods (easgd.py, overlap_local_sgd.py).

    x <- (1 - weight) * x + weight * z          (elastic pull / pullback toward z)

Written as `x + weight * (z - x)` (torch.lerp), so weight 0 leaves x bit-for-bit unchanged:
the identities "zero pull = independent local training" (algorithms.md section 11, #3) hold
exactly, not just to rounding.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


@torch.no_grad()
def pull_toward_(params: Sequence[torch.Tensor], target: Sequence[torch.Tensor], weight: float):
    """In place: every x in `params` moves a fraction `weight` of the way to its z in `target`."""
    for x, z in zip(params, target, strict=True):
        x.lerp_(z, weight)
