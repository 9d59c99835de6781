"""The knobs of the outer optimizer (algorithms/outer.py: the rule and its notation), torch-free:
the config is checked before any worker starts, without importing torch (algorithms/__init__.py)."""

from __future__ import annotations

import numbers
from dataclasses import dataclass

from algorithms.base_config import Config as AlgorithmConfig

OUTER = ("none", "momentum", "nesterov")


@dataclass
class OuterConfig(AlgorithmConfig):
    """The outer-optimizer knobs, shared by every method that takes an outer step."""

    # Outer optimizer on the pseudo-gradient z - mean_i x_i: none (plain average) | momentum
    # (heavy ball: BMUF, SlowMo) | nesterov (DiLoCo).
    outer: str = "none"
    # Outer learning rate (SlowMo's slow LR alpha, BMUF's block LR); 1 with no momentum = none.
    outer_lr: float = 1.0
    # Outer momentum beta in [0, 1); null = 1 - 1/workers (BMUF's block momentum rule).
    outer_momentum: float | None = 0.0
    # Divide the pseudo-gradient by the inner LR eta_r and step with outer_lr * eta_r (SlowMo,
    # BMUF: an LR decay rescales the momentum); null = true for momentum, false for nesterov.
    outer_divide_by_lr: bool | None = None

    def __post_init__(self):
        if self.outer not in OUTER:
            raise ValueError(
                f"algorithm.outer must be one of {', '.join(OUTER)}, got {self.outer!r}"
            )
        if not (_is_number(self.outer_lr) and self.outer_lr > 0):
            raise ValueError(f"algorithm.outer_lr must be a number > 0, got {self.outer_lr!r}")
        beta = self.outer_momentum
        if beta is not None and not (_is_number(beta) and 0 <= beta < 1):
            raise ValueError(
                f"algorithm.outer_momentum must be null or a number in [0, 1), got {beta!r}"
            )
        if self.outer_divide_by_lr not in (None, True, False):
            raise ValueError(
                "algorithm.outer_divide_by_lr must be null, true or false, "
                f"got {self.outer_divide_by_lr!r}"
            )
        if self.outer == "none" and (self.outer_lr != 1 or beta not in (0, None)):
            raise ValueError(
                "algorithm.outer_lr and algorithm.outer_momentum act only with "
                "algorithm.outer=momentum or nesterov (outer=none is the plain average)"
            )
        if self.outer == "nesterov" and beta == 0:
            raise ValueError("algorithm.outer=nesterov needs algorithm.outer_momentum > 0")


def _is_number(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)
