"""The knobs of pseudo-synchronous SGD (algorithms/pseudo_sync.py: the rule and its notation),
torch-free: the config is checked before any worker starts, without importing torch
(algorithms/__init__.py)."""

from __future__ import annotations

from dataclasses import dataclass

from algorithms.base_config import Config as AlgorithmConfig

CONFIDENCE_RULES = ("adaptive", "fixed")
MOMENTUM_MODES = ("none", "keep")


@dataclass
class Config(AlgorithmConfig):
    # How c_t is chosen: adaptive = clip(cos(S_{t-1}, G_{t-1}), 0, c_max); fixed = `c`.
    confidence: str = "adaptive"
    # c_t when confidence=fixed, in [0, 1]; 0 = plain one-step-delayed synchronous SGD.
    c: float = 0.0
    # Upper bound of the adaptive confidence, in [0, 1].
    c_max: float = 0.9
    # Add the worker's fresh correction (g_t - G_{t-1}) / m to S_t (replicas then drift).
    blend_local: bool = False
    # none: S_t is the only history term (local SGD without momentum); keep: the run's
    # momentum/Nesterov on top of S_t (ablation).
    momentum: str = "none"

    def __post_init__(self):
        if self.confidence not in CONFIDENCE_RULES:
            raise ValueError(
                f"algorithm.confidence must be one of {', '.join(CONFIDENCE_RULES)}, "
                f"got {self.confidence!r}"
            )
        for key in ("c", "c_max"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
                raise ValueError(f"algorithm.{key} must be a number in [0, 1], got {value!r}")
        if self.momentum not in MOMENTUM_MODES:
            raise ValueError(
                f"algorithm.momentum must be one of {', '.join(MOMENTUM_MODES)}, "
                f"got {self.momentum!r}"
            )
        if not isinstance(self.blend_local, bool):
            raise ValueError(
                f"algorithm.blend_local must be true or false, got {self.blend_local!r}"
            )
