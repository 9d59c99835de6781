"""The knobs of synchronous SGD (algorithms/sync_sgd.py: the rule and its notation), torch-free: the
config is checked before any worker starts, without importing torch (algorithms/__init__.py)."""

from __future__ import annotations

from dataclasses import dataclass

from algorithms.base_config import Config as AlgorithmConfig


@dataclass
class Config(AlgorithmConfig):
    # Gradient bucket size in MB (2**20 bytes), averaged as backward produces them, DDP's
    # default 25; 0 = one blocking average of all gradients after backward (no overlap).
    bucket_mb: float = 25.0

    def __post_init__(self):
        size = self.bucket_mb
        if isinstance(size, bool) or not isinstance(size, int | float) or not size >= 0:
            raise ValueError(f"algorithm.bucket_mb must be a number >= 0, got {size!r}")
