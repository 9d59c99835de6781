"""A run's identity: the digest of the configuration that shapes its trajectory and its record.

Two configurations with the same identity make the same run, however they were spelled on the
command line (`python run.py` and `python run.py scale=cpu`); a different identity is a
different run, which never reuses or overwrites another's record (docs/records.md, "A run's
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
- `dataset.root`, `dataset.source`, `dataset.download`, `dataset.verify_checksums`: where the
  data lies and how it is fetched;
- `report`, `scale.target_acc`: what a preset's report does with the runs;
- `scale.table_seeds`: which seeds a preset's sweep runs (each run's own `seed` is hashed);
- `rerun`: a request to recompute a finished run, not a property of it;
- `hydra`: Hydra's own settings;
- `tau` when the algorithm does not read it (`algorithms.reads_tau`: sync SGD, PowerSGD and
  pseudo-sync communicate every step): its runs at tau 2 and tau 4 are one run, one digest;
- `budget` on the steps budget (the default; its time keys are read by `budget=time` only):
  a run made before the budget existed and the same run today are one run, one digest.

A key an algorithm does not read is left out rather than hashed, so that one run is one record:
hashed, the same run at two values of the key would be trained twice and counted twice. A run
recorded before a key was left out (a sync SGD run whose digest hashed its tau) is still that
run: its identity.json, digested by today's rule, is today's digest, which is how a sweep finds
and reuses it (`run_dir_name`, and experiments/store/records.py's `finished_status`).

A run's directory is `<out_root>/runs/<readable>-<digest>` (`run_name`): the readable part is
built from the config's values (the algorithm, its knobs that differ from their defaults, tau for
round-based methods, the seed), never from how the overrides were spelled; the digest makes it
unique.

SERIES_KEYS names the keys that define a series in a comparison (a line in a figure, a row in a
table, a tag in W&B): W&B's tags and the analysis read this one list.
"""

from __future__ import annotations

import copy
import glob
import hashlib
import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import algorithms

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
    "dataset.source",
    "dataset.download",
    "dataset.verify_checksums",
    "report",
    "scale.target_acc",
    "scale.table_seeds",
    "rerun",
    "hydra",
)

DIGEST_CHARS = 10  # hex characters of the sha256 kept in directory names (40 bits)

# The keys that name a series: what a reader compares runs by. "algorithm.*" stands for every
# knob of the run's algorithm (PowerSGD's rank, Overlap-Local-SGD's alpha and beta, ...).
SERIES_KEYS: tuple[str, ...] = (
    "algorithm.name",
    "algorithm.*",
    "tau",
    "workers",
    "network.name",
    "partition.name",
    "compute.slowdown",
    "comm.compression",
)


def identity_config(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The resolved config without the keys of NON_IDENTITY_KEYS and the keys its algorithm
    does not read (a new dict)."""
    out = copy.deepcopy(dict(cfg))
    algorithm = out.get("algorithm")
    if isinstance(algorithm, Mapping) and not algorithms.reads_tau(str(algorithm.get("name"))):
        out.pop("tau", None)
    budget = out.get("budget")
    if isinstance(budget, Mapping) and budget.get("name") == "steps":
        out.pop("budget")
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
    return hash_identity(identity_config(cfg), chars)


def hash_identity(identity: Mapping[str, Any], chars: int = DIGEST_CHARS) -> str:
    """The hex sha256 of an identity configuration as it stands, no key left out: what a
    record's digest was computed from its identity.json when it was made, by the rule of then."""
    return hashlib.sha256(canonical_json(identity).encode()).hexdigest()[:chars]


def series(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The resolved config `cfg`'s value of every key of SERIES_KEYS, `algorithm.*` expanded to
    the algorithm's knobs (dotted key -> value; keys the config lacks are left out)."""
    out: dict[str, Any] = {}
    for key in SERIES_KEYS:
        if key == "algorithm.*":
            algo = cfg.get("algorithm") or {}
            out.update({f"algorithm.{k}": v for k, v in algo.items() if k != "name"})
            continue
        node: Any = cfg
        for part in key.split("."):
            node = node.get(part, _ABSENT) if isinstance(node, Mapping) else _ABSENT
        if node is not _ABSENT:
            out[key] = node
    return out


def is_series_key(dotted: str) -> bool:
    """Whether the dotted config key `dotted` names a series (SERIES_KEYS, `algorithm.*`)."""
    return dotted in SERIES_KEYS or (dotted.startswith("algorithm.") and dotted != "algorithm")


_ABSENT = object()


def readable_name(cfg: Mapping[str, Any]) -> str:
    """The human part of a run's directory name, from the resolved config's values: the
    algorithm, its knobs that differ from the algorithm's defaults, tau (round-based methods
    only) and the seed, e.g. `powersgd-rank2-seed0`, `local_sgd-tau4-seed1`."""
    import dataclasses

    algo = dict(cfg.get("algorithm") or {})
    name = str(algo.pop("name", "unknown"))
    parts = [name]
    cls = algorithms.CONFIGS.get(name)  # torch-free (algorithms/__init__.py)
    defaults = {}
    if cls is not None:
        defaults = {
            f.name: f.default
            for f in dataclasses.fields(cls)
            if f.default is not dataclasses.MISSING
        }
    for key, value in algo.items():
        if key not in defaults or defaults[key] != value:
            parts.append(f"{key}{_short(value)}")
    if algorithms.reads_tau(name):
        parts.append(f"tau{_short(cfg.get('tau'))}")
    parts.append(f"seed{_short(cfg.get('seed'))}")
    return "-".join(parts)


def _short(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        value = f"{value:g}"
    text = "".join(c if c.isalnum() or c in "._+" else "_" for c in str(value))
    return text[:24]


def run_name(cfg: Mapping[str, Any]) -> str:
    """The run directory's name for the resolved config `cfg`: `<readable>-<digest>`."""
    return f"{readable_name(cfg)}-{digest(cfg)}"


def current_digest(run_dir: Path, recorded: Any) -> str | None:
    """Today's digest of the run in `run_dir` whose summary names the identity `recorded`, when
    its record was made by an earlier identity rule: its identity.json, hashed as written, is
    `recorded` (the record is whole, not edited by hand), and today's rule, which leaves out
    more keys (tau of a tau-less method), digests that configuration anew. None when
    identity.json is missing, unreadable or not what `recorded` was computed from."""
    then = _json_object(Path(run_dir) / "identity.json")
    return digest(then) if then is not None and hash_identity(then) == recorded else None


def run_dir_name(runs: Path, cfg: Mapping[str, Any]) -> str:
    """The name of the run directory below `runs` of the resolved config `cfg`: its `run_name`
    (`<readable>-<digest>`), unless that directory does not exist and a sibling of the same
    readable part holds this run recorded under an earlier identity rule (its directory and
    summary named by the digest of then: `current_digest`). That run is this one: a sweep
    finds it there and skips it when it finished (experiments/store/records.py,
    `finished_status`) or resumes it, rather than train it again beside its record. The first
    such sibling in name order, should there be several (one run recorded at two values of a
    key since left out)."""
    name = run_name(cfg)
    readable, _, today = name.rpartition("-")
    runs = Path(runs)
    try:
        if (runs / name).exists():
            return name
        siblings = sorted(runs.glob(f"{glob.escape(readable)}-{'[0-9a-f]' * DIGEST_CHARS}"))
    except OSError:  # an unreadable runs folder: the pre-flight says what is wrong with it
        return name
    for sibling in siblings:
        summary = _json_object(sibling / "summary.json")
        if summary is not None and current_digest(sibling, summary.get("identity")) == today:
            return sibling.name
    return name


def _json_object(path: Path) -> dict | None:
    """A record file's JSON object; None when it is missing or not one (the records' validated
    readers, experiments/store/records.py, say what is wrong where a run reads its own)."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None
