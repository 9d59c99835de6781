"""The knobs of LOSP (algorithms/losp.py: the rule and its notation), torch-free: the config is
checked before any worker starts, without importing torch (algorithms/__init__.py)."""

from __future__ import annotations

from dataclasses import dataclass

from algorithms.osp_config import COMPENSATIONS
from algorithms.osp_config import Config as OSPConfig


@dataclass
class Config(OSPConfig):
    # What the worker does with its unpushed progress A when the aggregate arrives:
    # delta (x = w - A), none (x = w: OSP), gradient (DC-ASGD-style correction of A).
    compensation: str = "delta"
    # lam of the gradient mode: A + lam * A*A*(w_{r+1} - w_r); ignored by the other modes.
    lam: float = 0.04

    def __post_init__(self):
        super().__post_init__()
        if self.compensation not in COMPENSATIONS:
            raise ValueError(
                f"algorithm.compensation must be one of {', '.join(COMPENSATIONS)}, "
                f"got {self.compensation!r}"
            )
        lam = self.lam
        if isinstance(lam, bool) or not isinstance(lam, int | float) or not lam >= 0:
            raise ValueError(f"algorithm.lam must be a number >= 0, got {lam!r}")
