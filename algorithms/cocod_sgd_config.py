"""The knobs of CoCoD-SGD (algorithms/cocod_sgd.py: the rule and its notation), torch-free: the
config is checked before any worker starts, without importing torch (algorithms/__init__.py)."""

from __future__ import annotations

from dataclasses import dataclass

from algorithms.base_config import Config as AlgorithmConfig


@dataclass
class Config(AlgorithmConfig):
    """CoCoD-SGD has no knobs (the round length is the top-level `tau`); the empty dataclass
    still makes a misspelled `algorithm.` key fail."""

    periodic = True  # rounds of `tau` local steps (base_config.py)
