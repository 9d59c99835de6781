"""The knobs of Overlap-Local-SGD (algorithms/overlap_local_sgd.py: the rule and its notation),
torch-free: the config is checked before any worker starts, without importing torch
(algorithms/__init__.py)."""

from __future__ import annotations

import numbers
from dataclasses import dataclass

from algorithms.base_config import Config as AlgorithmConfig


@dataclass
class Config(AlgorithmConfig):
    periodic = True  # rounds of `tau` local steps (base_config.py)

    # Pullback alpha toward the anchor, in [0, 1]; None = 0.6, or 0.5 when tau = 1 (the paper's
    # best values).
    alpha: float | None = None
    # Anchor momentum beta, in [0, 1); 0 = the anchor is the mean of the pulled models.
    beta: float = 0.7

    def __post_init__(self):
        if self.alpha is not None and not (_is_number(self.alpha) and 0 <= self.alpha <= 1):
            raise ValueError(f"algorithm.alpha must be a number in [0, 1], got {self.alpha!r}")
        if not (_is_number(self.beta) and 0 <= self.beta < 1):
            raise ValueError(f"algorithm.beta must be a number in [0, 1), got {self.beta!r}")


def _is_number(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def default_alpha(tau: int) -> float:
    """The paper's best pullback: 0.5 for tau = 1, 0.6 for tau >= 2."""
    return 0.5 if tau == 1 else 0.6
