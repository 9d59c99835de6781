"""The knobs of EASGD and EAMSGD (algorithms/easgd.py: the rule and its notation), torch-free: the
config is checked before any worker starts, without importing torch (algorithms/__init__.py)."""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Any

from algorithms.base_config import Config as AlgorithmConfig

CENTRE_BN = ("recompute", "average")


@dataclass
class Config(AlgorithmConfig):
    periodic = True  # rounds of `tau` local steps (base_config.py)

    # Moving rate alpha of each worker toward the centre, in [0, 1]; None = 0.9 / workers.
    # Needs workers * alpha < 1 (checked against the run's worker count).
    alpha: float | None = None
    # BatchNorm statistics of the evaluated centre: recompute (on a fixed set of training
    # batches) or average (the workers' buffers, computed on other weights).
    centre_bn: str = "recompute"

    def __post_init__(self):
        if self.centre_bn not in CENTRE_BN:
            raise ValueError(
                f"algorithm.centre_bn must be one of {', '.join(CENTRE_BN)}, got {self.centre_bn!r}"
            )
        if self.alpha is None:
            return
        if not isinstance(self.alpha, numbers.Real) or isinstance(self.alpha, bool):
            raise ValueError(f"algorithm.alpha must be a number in [0, 1], got {self.alpha!r}")
        if not 0 <= self.alpha <= 1:
            raise ValueError(f"algorithm.alpha must be in [0, 1], got {self.alpha}")

    def check(self, run: dict[str, Any]) -> None:
        """workers * alpha < 1 (`stability_error`), named after the run's algorithm (easgd or
        eamsgd, the rule's `label`)."""
        if self.alpha is not None:
            error = stability_error(run["algorithm"]["name"], self.alpha, run["workers"])
            if error:
                raise ValueError(error)


def default_alpha(num_workers: int) -> float:
    """beta = m * alpha = 0.9, the original paper's guidance [M]."""
    return 0.9 / num_workers


def stability_error(label: str, alpha: float, num_workers: int) -> str | None:
    """The one-line reason why (eq. 3) diverges, or None when m * alpha < 1."""
    if num_workers * alpha < 1:
        return None
    return (
        f"{label} needs workers * alpha < 1 (got {num_workers} x {alpha:g} = "
        f"{num_workers * alpha:g}): the centre update z <- (1 - m*alpha) z + ... is unstable"
    )
