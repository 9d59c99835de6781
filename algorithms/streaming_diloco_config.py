"""The knobs of Streaming DiLoCo (algorithms/streaming_diloco.py: the rule and its notation), torch-
free: the config is checked before any worker starts, without importing torch
(algorithms/__init__.py)."""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Any

from algorithms.outer_config import OuterConfig


@dataclass
class Config(OuterConfig):
    periodic = True  # rounds of `tau` local steps (base_config.py)

    # The outer optimizer of every fragment (algorithms/outer.py): DiLoCo's Nesterov step.
    outer: str = "nesterov"
    outer_lr: float = 0.7
    outer_momentum: float | None = 0.9
    # P: contiguous groups of parameter tensors of about equal size, synced in turn.
    fragments: int = 2
    # Inner steps each fragment's all-reduce overlaps (launched this many steps before it is
    # applied); null = 1 when tau // fragments >= 2, else 0.
    sync_delay: int | None = None
    # Merge x_p <- alpha x_p + (1 - alpha) z_p at a fragment's sync; 0 = take the outer model.
    mix_alpha: float = 0.5

    def __post_init__(self):
        super().__post_init__()
        if not _is_int(self.fragments) or self.fragments < 1:
            raise ValueError(f"algorithm.fragments must be an integer >= 1, got {self.fragments!r}")
        if self.sync_delay is not None and not (_is_int(self.sync_delay) and self.sync_delay >= 0):
            raise ValueError(
                f"algorithm.sync_delay must be null or an integer >= 0, got {self.sync_delay!r}"
            )
        alpha = self.mix_alpha
        is_number = isinstance(alpha, numbers.Real) and not isinstance(alpha, bool)
        if not (is_number and 0 <= alpha <= 1):
            raise ValueError(f"algorithm.mix_alpha must be a number in [0, 1], got {alpha!r}")

    def check(self, run: dict[str, Any]) -> None:
        check_schedule(self, run["tau"])


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def fragment_offsets(tau: int, fragments: int) -> list[int]:
    """s_p = max(1, floor((p + 1) tau / P)): the local step (1..tau) within each round after
    which fragment p is synced; the last fragment ends the round. Distinct when tau >= P; with
    fewer steps than fragments, several fragments share a step (each its own collective)."""
    return [max(1, (p + 1) * tau // fragments) for p in range(fragments)]


def smallest_gap(tau: int, fragments: int) -> int:
    """The fewest local steps between two steps with fragment syncs (and before the first)."""
    steps = sorted(set(fragment_offsets(tau, fragments)))
    return min(b - a for a, b in zip([0, *steps], steps, strict=False))


def resolve_delay(cfg: Config, tau: int) -> int:
    """`sync_delay`, with null resolved (Config doc)."""
    if cfg.sync_delay is not None:
        return cfg.sync_delay
    return 1 if tau // cfg.fragments >= 2 else 0


def check_schedule(cfg: Config, tau: int) -> None:
    """Raise ValueError (one line) when tau has no room for the delay between the syncs."""
    gap, delay = smallest_gap(tau, cfg.fragments), resolve_delay(cfg, tau)
    if delay >= gap:
        raise ValueError(
            f"algorithm.sync_delay={delay} must be < {gap}, the fewest steps between two "
            f"fragments' syncs with tau={tau} and fragments={cfg.fragments}: a fragment's "
            "average must arrive before the next one is launched"
        )
