"""A run's identity: the digest of the configuration that shapes its trajectory and its record.

Two configurations with the same identity make the same run, however they were spelled on the
command line (`python run.py` and `python run.py scale=cpu`); a different identity is a
different run, which never reuses or overwrites another's record (contract.md, "A run's
directory"). The identity is every key of the resolved configuration except the ones below,
which change where a run is written, how it is watched or how often it is saved, never what it
computes or what its record says:

- `out_root`: where the records go;
- `wandb`: the mirror of the records;
- `progress`, `threads_per_worker`, `dist_timeout_s`: display, CPU threads (the result does
  not depend on them on the CPU: tested), how long a hung collective may wait;
- `checkpoint_every`, `checkpoint`: checkpoint cadence (resume is exact);
- `cluster`: how the workers are started (local processes, SLURM, torchrun); a run of one
  configuration is the same run on every launcher;
- `dataset.root`, `dataset.download`, `dataset.verify_checksums`: where the data lies and how
  it is fetched;
- `report`, `extra_sweeps`, `scale.target_acc`: what a preset's report does with the runs;
- `rerun`: a request to recompute a finished run, not a property of it;
- `hydra`: Hydra's own settings.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
from collections.abc import Mapping
from typing import Any

NON_IDENTITY_KEYS: tuple[str, ...] = (
    "out_root",
    "wandb",
    "progress",
    "threads_per_worker",
    "dist_timeout_s",
    "checkpoint_every",
    "checkpoint",
    "cluster",
    "dataset.root",
    "dataset.download",
    "dataset.verify_checksums",
    "report",
    "extra_sweeps",
    "scale.target_acc",
    "rerun",
    "hydra",
)

DIGEST_CHARS = 10  # hex characters of the sha256 kept in directory names (40 bits)


def identity_config(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The resolved config without the keys of NON_IDENTITY_KEYS (a new dict)."""
    out = copy.deepcopy(dict(cfg))
    for dotted in NON_IDENTITY_KEYS:
        *parents, leaf = dotted.split(".")
        node: Any = out
        for key in parents:
            node = node.get(key) if isinstance(node, dict) else None
            if node is None:
                break
        if isinstance(node, dict):
            node.pop(leaf, None)
    return out


def is_identity_key(dotted: str) -> bool:
    """Whether the dotted config key `dotted` is part of a run's identity."""
    return not any(dotted == k or dotted.startswith(k + ".") for k in NON_IDENTITY_KEYS)


def canonical_json(value: Any) -> str:
    """One spelling per value: sorted keys, no spaces, non-finite floats and Enums as strings.
    (1 and 1.0 are spelled differently: the config's schema fixes each key's type.)"""
    return json.dumps(_canonical(value), sort_keys=True, separators=(",", ":"))


def _canonical(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _canonical(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_canonical(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if hasattr(value, "value") and hasattr(value, "name"):  # an Enum
        return value.name
    return value


def digest(cfg: Mapping[str, Any], chars: int = DIGEST_CHARS) -> str:
    """The identity of the resolved config `cfg`: a hex sha256 of its identity keys."""
    text = canonical_json(identity_config(cfg))
    return hashlib.sha256(text.encode()).hexdigest()[:chars]
