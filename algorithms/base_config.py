"""What every algorithm's Config is, torch-free (algorithms/__init__.py says why): the knobs
under `algorithm.` plus the facts about the algorithm that the config's checks need before any
worker starts. The rule (algorithms/base.py's `Algorithm` and its subclasses) reads the same
facts through its `Config`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: `comm.compression`: the number formats of the averages on the wire (algorithms/comm.py, Codec).
COMPRESSIONS = ("none", "fp16", "bf16", "int8")


@dataclass
class Config:
    """Algorithm knobs live under `algorithm.` in the config; this one has none."""

    #: True when the algorithm works in rounds of the top-level `tau` local steps (plain class
    #: attributes, not fields: no config key).
    periodic = False
    #: Whether a checkpoint may be taken between any two steps (every collective in flight was
    #: launched by every rank); False: only after `drain()` on every rank (algorithms/base.py).
    checkpoint_anywhere = True

    def check(self, run: dict[str, Any]) -> None:
        """Reject knob values that are wrong only in combination with the run's resolved config
        `run` (e.g. EASGD's m * alpha < 1 needs the number of workers). Raise ValueError, one
        line."""
