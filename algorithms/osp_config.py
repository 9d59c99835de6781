"""The knobs of OSP (algorithms/osp.py: the rule and its notation), torch-free: the config is
checked before any worker starts, without importing torch (algorithms/__init__.py)."""

from __future__ import annotations

from dataclasses import dataclass

from algorithms.base_config import Config as AlgorithmConfig

COMPENSATIONS = ("delta", "none", "gradient")


@dataclass
class Config(AlgorithmConfig):
    periodic = True  # rounds of `tau` local steps (base_config.py)
    # Pushes start at rank-dependent steps: a checkpoint waits for drain() (evaluation points).
    checkpoint_anywhere = False

    # Longest overlap window in local steps (W); then the worker waits. null = 4 * tau; 0 = wait
    # at once (no window).
    max_overlap_steps: int | None = None
    # Server learning rate eta_s: w_{r+1} = w_r - server_lr * mean_j U_j (1 = plain averaging).
    server_lr: float = 1.0

    def __post_init__(self):
        w = self.max_overlap_steps
        if w is not None and (isinstance(w, bool) or not isinstance(w, int) or w < 0):
            raise ValueError(
                f"algorithm.max_overlap_steps must be an integer >= 0 or null, got {w!r}"
            )
        lr = self.server_lr
        if isinstance(lr, bool) or not isinstance(lr, int | float) or not lr > 0:
            raise ValueError(f"algorithm.server_lr must be a number > 0, got {lr!r}")
