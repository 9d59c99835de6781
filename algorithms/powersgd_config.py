"""The knobs of PowerSGD (algorithms/powersgd.py: the rule and its notation), torch-free: the config
is checked before any worker starts, without importing torch (algorithms/__init__.py)."""

from __future__ import annotations

from dataclasses import dataclass

from algorithms.base_config import Config as AlgorithmConfig


@dataclass
class Config(AlgorithmConfig):
    # r: rank of the approximation of every matrix (1, 2, 4 or 8 in the paper).
    rank: int = 1
    # Keep the local residual M - P Q^T and add it to the next step's gradient (paper: on).
    error_feedback: bool = True
    # Reuse last step's averaged Q as the next query (one power iteration per step, warm).
    warm_start: bool = True
    # Plain uncompressed averaging before this step (paper: compress from the first step).
    start_step: int = 0
    # Weight decay 0 on the BN parameters matching the reference's `.*\.bn\d+\.(weight|bias)`
    # (the block BNs, not the stem's bn1 nor the shortcut BN); false: decay all.
    bn_no_weight_decay: bool = True
    # Log `algo/residual_rel` = ||M - P Q^T|| / ||M|| (two full-gradient norms per step); off:
    # no per-step diagnostic work.
    log_residual: bool = False

    def __post_init__(self):
        if isinstance(self.rank, bool) or not isinstance(self.rank, int) or self.rank < 1:
            raise ValueError(f"algorithm.rank must be an integer >= 1, got {self.rank!r}")
        if isinstance(self.start_step, bool) or not isinstance(self.start_step, int):
            raise ValueError(f"algorithm.start_step must be an integer, got {self.start_step!r}")
        if self.start_step < 0:
            raise ValueError(f"algorithm.start_step must be >= 0, got {self.start_step}")
        for key in ("error_feedback", "warm_start", "bn_no_weight_decay", "log_residual"):
            if not isinstance(getattr(self, key), bool):
                raise ValueError(
                    f"algorithm.{key} must be true or false, got {getattr(self, key)!r}"
                )
