"""The algorithms of the suite: TABLE names each one's Config and its rule; REGISTRY maps each
config name to its rule class.

TABLE is the table of contents. One name per concept: registry key =
`conf/algorithm/<name>.yaml` = run label; the file stem too, except for methods that are one
implementation under several names (eamsgd in easgd.py; bmuf, slowmo and diloco in
local_sgd.py, each with its own Config defaults, so tables and W&B name the method).

Each algorithm is two modules side by side: `<stem>.py`, the rule (its notation, the update,
torch), and `<stem>_config.py`, its Config (the knobs with their meanings and defaults, their
checks, and the facts the config needs: `periodic`, `checkpoint_anywhere`; base_config.py).
Why two: everything run.py checks before a worker starts (composition against the schema
built from the Configs, the pre-flight) runs without importing torch, ~2.9 s of each bad-input
command's ~3.5 s before (issue 26); the Config modules import nothing but the standard library.
Why this layout rather than a folder per algorithm: the rule modules keep their names
(`from algorithms.local_sgd import LocalSGD, Config` as before) and the two files sort next to
each other. This package imports only the Configs; `REGISTRY` imports the rules (and torch)
when first asked for, which is when a worker builds its algorithm (`build`).

Compression (`comm.compression`, algorithms/comm.py) applies to the averages of the round-based
methods (`periodic`); `check_compression` refuses it for the others.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from algorithms import (
    cocod_sgd_config,
    easgd_config,
    local_sgd_config,
    losp_config,
    osp_config,
    overlap_local_sgd_config,
    powersgd_config,
    pseudo_sync_config,
    streaming_diloco_config,
    sync_sgd_config,
)
from algorithms.base_config import COMPRESSIONS

if TYPE_CHECKING:
    from algorithms.base import Algorithm

#: name -> (its Config, its rule as `<module stem>.<class>`)
TABLE: dict[str, tuple[type, str]] = {
    # all-reduce the gradients every step
    "sync_sgd": (sync_sgd_config.Config, "sync_sgd.SyncSGD"),
    # average the models every tau steps
    "local_sgd": (local_sgd_config.Config, "local_sgd.LocalSGD"),
    # Local SGD + block momentum on the pseudo-gradient (local_sgd.py)
    "bmuf": (local_sgd_config.BMUFConfig, "local_sgd.BMUF"),
    # Local SGD + slow momentum, the same rule with its own defaults
    "slowmo": (local_sgd_config.SlowMoConfig, "local_sgd.SlowMo"),
    # Local SGD + an outer Nesterov step on the pseudo-gradient
    "diloco": (local_sgd_config.DiLoCoConfig, "local_sgd.DiLoCo"),
    # DiLoCo synced fragment by fragment, overlapped
    "streaming_diloco": (streaming_diloco_config.Config, "streaming_diloco.StreamingDiLoCo"),
    # low-rank gradient compression with error feedback
    "powersgd": (powersgd_config.Config, "powersgd.PowerSGD"),
    # elastic pull toward a centre variable, plain local SGD
    "easgd": (easgd_config.Config, "easgd.EASGD"),
    # the same with local Nesterov momentum
    "eamsgd": (easgd_config.Config, "easgd.EAMSGD"),
    # average a snapshot while computing, add back own progress
    "cocod_sgd": (cocod_sgd_config.Config, "cocod_sgd.CoCoDSGD"),
    # pull toward a stale anchor averaged in background
    "overlap_local_sgd": (overlap_local_sgd_config.Config, "overlap_local_sgd.OverlapLocalSGD"),
    # apply a predicted gradient while the fresh one is averaged
    "pseudo_sync": (pseudo_sync_config.Config, "pseudo_sync.PseudoSync"),
    # PS-style push overlapped with adaptive extra local steps
    "osp": (osp_config.Config, "osp.OSP"),
    # OSP with local compensation of the stale progress
    "losp": (losp_config.Config, "losp.LOSP"),
}

#: name -> its Config class (torch-free: the schema, the pre-flight and the run's name use it)
CONFIGS: dict[str, type] = {name: config for name, (config, _) in TABLE.items()}


def rule_name(name: str) -> str:
    """The class name of algorithm `name`'s rule (e.g. `LocalSGD`), without importing it."""
    return TABLE[name][1].rpartition(".")[2]


def __getattr__(attribute: str) -> Any:
    """`REGISTRY`, name -> rule class: imports every rule module (and torch) on first use."""
    if attribute != "REGISTRY":
        raise AttributeError(f"module {__name__!r} has no attribute {attribute!r}")
    return _registry()


def _registry() -> dict[str, type[Algorithm]]:
    if "REGISTRY" not in globals():
        registry = {}
        for name, (_, rule) in TABLE.items():
            module, _, cls = rule.rpartition(".")
            registry[name] = getattr(importlib.import_module(f"algorithms.{module}"), cls)
        globals()["REGISTRY"] = registry
    return globals()["REGISTRY"]


def make_config(name: str, options: Mapping[str, Any]):
    """Build the algorithm's typed Config from the `algorithm` node (without `name`).

    A misspelled or unknown key fails here, before any worker starts. Raises ValueError with a
    one-line message (the caller turns it into a UserError).
    """
    if name not in CONFIGS:
        raise ValueError(f"unknown algorithm {name!r}; choose from {', '.join(CONFIGS)}")
    cls = CONFIGS[name]
    fields = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(options) - fields)
    if unknown:
        known = ", ".join(sorted(fields)) or "none"
        raise ValueError(f"algorithm {name} has no option {', '.join(unknown)} (options: {known})")
    return cls(**options)


def build(name: str, options: Mapping[str, Any], model, optimizer, comm, tau: int) -> Algorithm:
    """Instantiate algorithm `name` with its Config built from `options`."""
    return __getattr__("REGISTRY")[name](
        model, optimizer, comm, make_config(name, options), tau=tau
    )


def check_compression(name: str, compression: str) -> None:
    """Reject `comm.compression` values that do not apply to algorithm `name` (ValueError, one
    line): unknown formats, and any compression for the methods that are not round-based
    (sync_sgd, powersgd, pseudo_sync), whose gradient averages are their own subject
    (PowerSGD's low-rank compression, pseudo-sync's predicted gradients), not a model average."""
    if compression not in COMPRESSIONS:
        raise ValueError(
            f"comm.compression must be one of {', '.join(COMPRESSIONS)}, got {compression!r}"
        )
    if compression != "none" and not CONFIGS[name].periodic:
        raise ValueError(
            f"comm.compression={compression} applies to the model averages of the round-based "
            f"methods; {name} averages gradients every step: use comm.compression=none"
        )
