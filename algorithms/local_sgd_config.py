"""The knobs of Local SGD, BMUF, SlowMo and DiLoCo (algorithms/local_sgd.py: the rule and its
notation), torch-free: the config is checked before any worker starts, without importing torch
(algorithms/__init__.py)."""

from __future__ import annotations

from dataclasses import dataclass

from algorithms.outer_config import OuterConfig

MOMENTUM_AT_SYNC = ("keep", "average", "reset")


@dataclass
class Config(OuterConfig):
    periodic = True  # rounds of `tau` local steps (base_config.py)

    # What happens to the local momentum buffers at a sync: keep (reference), average, reset.
    momentum_at_sync: str = "keep"

    def __post_init__(self):
        super().__post_init__()
        if self.momentum_at_sync not in MOMENTUM_AT_SYNC:
            raise ValueError(
                f"algorithm.momentum_at_sync must be one of {', '.join(MOMENTUM_AT_SYNC)}, "
                f"got {self.momentum_at_sync!r}"
            )


@dataclass
class BMUFConfig(Config):
    """BMUF (Chen & Huo 2016): block LR 1, block momentum 1 - 1/workers [M]."""

    outer: str = "momentum"
    outer_momentum: float | None = None


@dataclass
class SlowMoConfig(Config):
    """SlowMo (Wang et al. 2020): slow LR 1, slow momentum 0.5 (the defaults of fairscale's
    SlowMoDistributedDataParallel, by the paper's authors; the paper tunes beta per task)."""

    outer: str = "momentum"
    outer_momentum: float | None = 0.5


@dataclass
class DiLoCoConfig(Config):
    """DiLoCo (Douillard et al. 2023): outer Nesterov SGD, LR 0.7, momentum 0.9."""

    outer: str = "nesterov"
    outer_lr: float = 0.7
    outer_momentum: float | None = 0.9
