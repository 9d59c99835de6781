"""The algorithms of the suite: REGISTRY maps each config name to its class.

This dict is the table of contents. One name per concept: registry key =
`conf/algorithm/<name>.yaml` = run label; the file stem too, except for methods that are one
implementation under several names (eamsgd in easgd.py; bmuf, slowmo and diloco in
local_sgd.py, each with its own Config defaults, so tables and W&B name the method).

Compression (`comm.compression`, algorithms/comm.py) applies to the averages of the round-based
methods (`periodic`); `check_compression` refuses it for the others.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from algorithms.base import Algorithm
from algorithms.cocod_sgd import CoCoDSGD
from algorithms.comm import COMPRESSIONS
from algorithms.easgd import EAMSGD, EASGD
from algorithms.local_sgd import BMUF, DiLoCo, LocalSGD, SlowMo
from algorithms.losp import LOSP
from algorithms.osp import OSP
from algorithms.overlap_local_sgd import OverlapLocalSGD
from algorithms.powersgd import PowerSGD
from algorithms.pseudo_sync import PseudoSync
from algorithms.streaming_diloco import StreamingDiLoCo
from algorithms.sync_sgd import SyncSGD

REGISTRY: dict[str, type[Algorithm]] = {
    "sync_sgd": SyncSGD,  # all-reduce the gradients every step
    "local_sgd": LocalSGD,  # average the models every tau steps
    "bmuf": BMUF,  # Local SGD + block momentum on the pseudo-gradient (local_sgd.py)
    "slowmo": SlowMo,  # Local SGD + slow momentum, the same rule with its own defaults
    "diloco": DiLoCo,  # Local SGD + an outer Nesterov step on the pseudo-gradient
    "streaming_diloco": StreamingDiLoCo,  # DiLoCo synced fragment by fragment, overlapped
    "powersgd": PowerSGD,  # low-rank gradient compression with error feedback
    "easgd": EASGD,  # elastic pull toward a centre variable, plain local SGD
    "eamsgd": EAMSGD,  # the same with local Nesterov momentum
    "cocod_sgd": CoCoDSGD,  # average a snapshot while computing, add back own progress
    "overlap_local_sgd": OverlapLocalSGD,  # pull toward a stale anchor averaged in background
    "pseudo_sync": PseudoSync,  # apply a predicted gradient while the fresh one is averaged
    "osp": OSP,  # PS-style push overlapped with adaptive extra local steps
    "losp": LOSP,  # OSP with local compensation of the stale progress
}


def make_config(name: str, options: Mapping[str, Any]):
    """Build the algorithm's typed Config from the `algorithm` node (without `name`).

    A misspelled or unknown key fails here, before any worker starts. Raises ValueError with a
    one-line message (the caller turns it into a UserError).
    """
    if name not in REGISTRY:
        raise ValueError(f"unknown algorithm {name!r}; choose from {', '.join(REGISTRY)}")
    cls = REGISTRY[name].Config
    fields = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(options) - fields)
    if unknown:
        known = ", ".join(sorted(fields)) or "none"
        raise ValueError(f"algorithm {name} has no option {', '.join(unknown)} (options: {known})")
    return cls(**options)


def build(name: str, options: Mapping[str, Any], model, optimizer, comm, tau: int) -> Algorithm:
    """Instantiate algorithm `name` with its Config built from `options`."""
    return REGISTRY[name](model, optimizer, comm, make_config(name, options), tau=tau)


def check_compression(name: str, compression: str) -> None:
    """Reject `comm.compression` values that do not apply to algorithm `name` (ValueError, one
    line): unknown formats, and any compression for the methods that are not round-based
    (sync_sgd, powersgd, pseudo_sync), whose gradient averages are their own subject
    (PowerSGD's low-rank compression, pseudo-sync's predicted gradients), not a model average."""
    if compression not in COMPRESSIONS:
        raise ValueError(
            f"comm.compression must be one of {', '.join(COMPRESSIONS)}, got {compression!r}"
        )
    if compression != "none" and not REGISTRY[name].periodic:
        raise ValueError(
            f"comm.compression={compression} applies to the model averages of the round-based "
            f"methods; {name} averages gradients every step: use comm.compression=none"
        )
