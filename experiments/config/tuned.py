"""Tuned learning rates: `conf/tuned/<scale>.yaml`, written by `make tune` (analysis/tune.py) and
read by the scale's `lr` through the `tuned_lr` resolver.

The papers compare each method at its own tuned learning rate (docs/tuning.md): a method run
at another's rate can look broken. A scale whose file exists gives every algorithm the base LR
chosen for it there (`lr: ${tuned_lr:0.1}` in conf/scale/cpu.yaml: the default 0.1 for an
algorithm the file does not list); a command-line `lr=...` still wins, and the paper scale keeps
the papers' published values (no file, no resolver). The chosen value is what enters the run's
config, so a retuned value makes a new run (experiments/config/identity.py), never a changed
record.

The file is plain YAML, one reviewable diff per retune: the setting it was tuned at, the grid,
the seeds, the rule, the command and commit, and per algorithm the chosen value and each grid
point's mean, std and n of the final validation accuracy.

Torch-free on purpose: the config is composed and checked before any worker starts.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

import yaml

from experiments.errors import UserError

TUNED_DIR = Path(__file__).resolve().parents[2] / "conf" / "tuned"


def tuned_path(scale: str) -> Path:
    return TUNED_DIR / f"{scale}.yaml"


def load_tuned(scale: str) -> dict[str, Any]:
    """The tuning file of `scale` as a dict ({} when the scale has none)."""
    path = tuned_path(scale)
    try:
        stat = path.stat()
    except FileNotFoundError:
        return {}
    return _load(str(path), stat.st_mtime_ns)


@functools.lru_cache(maxsize=8)
def _load(path: str, _mtime_ns: int) -> dict[str, Any]:
    try:
        data = yaml.safe_load(Path(path).read_text()) or {}
    except (OSError, yaml.YAMLError) as e:
        raise UserError(f"cannot read the tuning file {os.path.relpath(path)}: {e}") from None
    if not isinstance(data, dict) or not isinstance(data.get("lr", {}), dict):
        raise UserError(f"{os.path.relpath(path)}: expected a mapping with an `lr` mapping")
    return data


def tuned_lr(default: float, *, _root_: Any) -> float:
    """The base LR chosen for the run's algorithm at the run's scale, else `default`."""
    scale = _root_.scale.name
    algorithm = _root_.algorithm.name
    entry = load_tuned(str(scale)).get("lr", {}).get(str(algorithm))
    if entry is None:
        return float(default)
    chosen = entry.get("chosen") if isinstance(entry, dict) else entry
    if isinstance(chosen, bool) or not isinstance(chosen, (int, float)) or chosen <= 0:
        raise UserError(
            f"{os.path.relpath(tuned_path(str(scale)))}: lr.{algorithm}.chosen must be a "
            f"number > 0, got {chosen!r}"
        )
    return float(chosen)
