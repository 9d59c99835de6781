"""Tuned learning rates: `conf/tuned/<scale>/<preset>.yaml` (tuned at that preset's own
setting: `make tune PRESET=<preset> SCALE=<scale>`, analysis/tune_preset.py) or else
`conf/tuned/<scale>.yaml` (the demo's setting: `make tune SCALE=<scale>`, the same driver), read
by the scale's
`lr` through the `tuned_lr` resolver: a preset's runs (`experiment_name`) take their preset's
file where it has one, or the file of the preset their `report.tuned_from` names (a preset of
the same setting on another budget: pseudo_sync_speed takes pseudo_sync's).

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


def tuned_path(scale: str, preset: str | None = None) -> Path:
    """The tuning file of `preset` at `scale` (`conf/tuned/<scale>/<preset>.yaml`), or the scale's
    (`conf/tuned/<scale>.yaml`) when `preset` is None."""
    if preset is not None:
        return TUNED_DIR / scale / f"{preset}.yaml"
    return TUNED_DIR / f"{scale}.yaml"


def tuned_file(scale: str, preset: str | None = None) -> Path:
    """The file a run of `preset` at `scale` takes its LR from: the preset's where it exists,
    else the scale's (which may not exist either)."""
    if preset:
        own = tuned_path(scale, preset)
        if own.is_file():
            return own
    return tuned_path(scale)


def load_tuned(scale: str, preset: str | None = None) -> dict[str, Any]:
    """The tuning file of `preset` at `scale` (`tuned_file`) as a dict ({} when there is none)."""
    return read_tuned(tuned_file(scale, preset))


def read_tuned(path: Path) -> dict[str, Any]:
    """The tuning file at `path` as a dict ({} when there is none), read once per change."""
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


def tuned_entry(scale: str, preset: str | None, algorithm: str) -> tuple[float, Path] | None:
    """The base LR chosen for `algorithm` and the file it comes from: the preset's tuning file at
    `scale`, else the scale's; None when neither lists the algorithm."""
    for path in dict.fromkeys([tuned_file(scale, preset), tuned_path(scale)]):
        entry = read_tuned(path).get("lr", {}).get(algorithm)
        if entry is None:
            continue
        chosen = entry.get("chosen") if isinstance(entry, dict) else entry
        if isinstance(chosen, bool) or not isinstance(chosen, (int, float)) or chosen <= 0:
            raise UserError(
                f"{os.path.relpath(path)}: lr.{algorithm}.chosen must be a number > 0, "
                f"got {chosen!r}"
            )
        return float(chosen), path
    return None


def tuned_lr(default: float, *, _root_: Any) -> float:
    """The base LR chosen for the run's algorithm: in its preset's file at the run's scale, else
    in the scale's file, else `default`."""
    report = _root_.get("report") or {}
    # a preset may take another's rates (`report.tuned_from`: the same setting, another budget)
    preset = report.get("tuned_from") or _root_.get("experiment_name")
    found = tuned_entry(
        str(_root_.scale.name), str(preset) if preset else None, str(_root_.algorithm.name)
    )
    return float(default) if found is None else found[0]
