"""The algorithms of the suite: TABLE names each one's Config, its rule and its colour;
REGISTRY maps each config name to its rule class.

TABLE is the table of contents and the one place an algorithm is added: the schema, the run's
identity, the analysis (the order of rows and legends, which methods ignore `tau`) and the
figures' colours all read it (docs/extending.md). One name per concept: registry key =
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
from typing import TYPE_CHECKING, Any, NamedTuple

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


class Entry(NamedTuple):
    """One algorithm of TABLE: what the runs, the analysis and the figures need to know of it."""

    #: its Config class (torch-free); its `periodic` says whether it reads the top-level `tau`
    config: type
    #: its rule as `<module stem>.<class>` below algorithms/, imported on first use (REGISTRY)
    rule: str
    #: its colour in every figure (hex), fixed so that a method looks the same everywhere
    colour: str


# name -> Entry. The order is that of tables and legends (baseline first; the outer-optimizer
# variants of Local SGD, then Streaming DiLoCo, right after Local SGD); the name is also what
# tables, legends, W&B's job type and the run's directory show (one name per concept).
# Colours: seaborn's "colorblind" palette (Okabe-Ito-like, safe for the common colour-vision
# deficiencies), written out so they do not move with a seaborn release, its pale yellow
# replaced by black for the baseline and its pale pink given to the method seen least often
# with many others; the outer-optimizer family (issue 17) from Paul Tol's colour-blind-safe
# "muted" scheme, hues and lightness apart from the ten others (the dark indigo and wine of the
# DiLoCo pair stand out beside Local SGD's blue and Overlap-Local-SGD's orange in
# experiment=low_comm).
TABLE: dict[str, Entry] = {
    # all-reduce the gradients every step
    "sync_sgd": Entry(sync_sgd_config.Config, "sync_sgd.SyncSGD", "#000000"),
    # average the models every tau steps
    "local_sgd": Entry(local_sgd_config.Config, "local_sgd.LocalSGD", "#0173b2"),
    # Local SGD + block momentum on the pseudo-gradient (local_sgd.py)
    "bmuf": Entry(local_sgd_config.BMUFConfig, "local_sgd.BMUF", "#cc6677"),
    # Local SGD + slow momentum, the same rule with its own defaults
    "slowmo": Entry(local_sgd_config.SlowMoConfig, "local_sgd.SlowMo", "#999933"),
    # Local SGD + an outer Nesterov step on the pseudo-gradient
    "diloco": Entry(local_sgd_config.DiLoCoConfig, "local_sgd.DiLoCo", "#332288"),
    # DiLoCo synced fragment by fragment, overlapped
    "streaming_diloco": Entry(
        streaming_diloco_config.Config, "streaming_diloco.StreamingDiLoCo", "#882255"
    ),
    # low-rank gradient compression with error feedback
    "powersgd": Entry(powersgd_config.Config, "powersgd.PowerSGD", "#ca9161"),
    # elastic pull toward a centre variable, plain local SGD
    "easgd": Entry(easgd_config.Config, "easgd.EASGD", "#029e73"),
    # the same with local Nesterov momentum
    "eamsgd": Entry(easgd_config.Config, "easgd.EAMSGD", "#de8f05"),
    # average a snapshot while computing, add back own progress
    "cocod_sgd": Entry(cocod_sgd_config.Config, "cocod_sgd.CoCoDSGD", "#cc78bc"),
    # pull toward a stale anchor averaged in background
    "overlap_local_sgd": Entry(
        overlap_local_sgd_config.Config, "overlap_local_sgd.OverlapLocalSGD", "#d55e00"
    ),
    # apply a predicted gradient while the fresh one is averaged
    "pseudo_sync": Entry(pseudo_sync_config.Config, "pseudo_sync.PseudoSync", "#fbafe4"),
    # PS-style push overlapped with adaptive extra local steps
    "osp": Entry(osp_config.Config, "osp.OSP", "#949494"),
    # OSP with local compensation of the stale progress
    "losp": Entry(losp_config.Config, "losp.LOSP", "#56b4e9"),
}

#: name -> its Config class (torch-free: the schema, the pre-flight and the run's name use it)
CONFIGS: dict[str, type] = {name: entry.config for name, entry in TABLE.items()}


def reads_tau(name: str) -> bool:
    """Whether algorithm `name` reads the top-level `tau` (its Config's `periodic`: it works in
    rounds of tau local steps). The others communicate every step, so their runs at any tau are
    one run: the run's identity leaves tau out, the analysis puts them in one row. A name the
    registry does not know is taken to read it, so nothing of its runs is merged."""
    config = CONFIGS.get(name)
    return config is None or bool(config.periodic)


def rule_name(name: str) -> str:
    """The class name of algorithm `name`'s rule (e.g. `LocalSGD`), without importing it."""
    return TABLE[name].rule.rpartition(".")[2]


def __getattr__(attribute: str) -> Any:
    """`REGISTRY`, name -> rule class: imports every rule module (and torch) on first use."""
    if attribute != "REGISTRY":
        raise AttributeError(f"module {__name__!r} has no attribute {attribute!r}")
    return _registry()


def _registry() -> dict[str, type[Algorithm]]:
    if "REGISTRY" not in globals():
        registry = {}
        for name, entry in TABLE.items():
            module, _, cls = entry.rule.rpartition(".")
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
