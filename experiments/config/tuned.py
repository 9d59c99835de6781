"""Tuned learning rates: `conf/tuned/<scale>/<preset>.yaml` (tuned at that preset's own
setting: `make tune PRESET=<preset> SCALE=<scale>`, analysis/tuning/tune_preset.py) or else
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

A missing file means "not tuned" (the scale's file, else the default). A file that is there but
cannot be used is refused in one line naming it (and the line of the bad value where there is
one), never read as "no rates": an empty (truncated) file, a directory in its place, YAML that
does not parse, no `lr` mapping, or a rate that is not a finite number > 0 (NaN, 0, negative, a
string). `check_tuned` checks the files a preset's runs read before any of them runs
(experiments/sweep.py, `--check` included).

Torch-free on purpose: the config is composed and checked before any worker starts.
"""

from __future__ import annotations

import functools
import math
import os
from pathlib import Path
from typing import Any

import yaml

from experiments.errors import UserError

CHECKOUT = Path(__file__).resolve().parents[2]
TUNED_DIR = CHECKOUT / "conf" / "tuned"


def tuned_path(scale: str, preset: str | None = None) -> Path:
    """The tuning file of `preset` at `scale` (`conf/tuned/<scale>/<preset>.yaml`), or the scale's
    (`conf/tuned/<scale>.yaml`) when `preset` is None."""
    if preset is not None:
        return TUNED_DIR / scale / f"{preset}.yaml"
    return TUNED_DIR / f"{scale}.yaml"


def tuned_file(scale: str, preset: str | None = None) -> Path:
    """The file a run of `preset` at `scale` takes its LR from: the preset's where it exists
    (anything in its place: a directory there is refused when read, not passed over), else the
    scale's (which may not exist either)."""
    if preset:
        own = tuned_path(scale, preset)
        if own.exists() or own.is_symlink():
            return own
    return tuned_path(scale)


def load_tuned(scale: str, preset: str | None = None) -> dict[str, Any]:
    """The tuning file of `preset` at `scale` (`tuned_file`) as a dict ({} when there is none)."""
    return read_tuned(tuned_file(scale, preset))


def check_tuned(scale: str, preset: str | None = None) -> list[Path]:
    """Read (and so check) every tuning file a run of `preset` at `scale` may read: the preset's
    and the scale's; a UserError naming the first that cannot be used. The files that exist."""
    paths = dict.fromkeys([tuned_file(scale, preset), tuned_path(scale)])
    found = []
    for path in paths:
        if read_tuned(path) or path.exists():
            found.append(path)
    return found


def shown(path: str | os.PathLike) -> str:
    """A tuning file as its user can open it: relative to the checkout when inside it."""
    path = Path(path).absolute()  # (against the checkout, not TUNED_DIR: tests move that)
    return str(path.relative_to(CHECKOUT)) if CHECKOUT in path.parents else str(path)


def read_tuned(path: Path) -> dict[str, Any]:
    """The tuning file at `path` as a dict ({} when there is none), read once per change; a
    UserError naming it when it is there but cannot be used (module docstring)."""
    try:
        stat = path.stat()
    except FileNotFoundError:
        return {}
    except OSError as e:
        raise UserError(f"cannot read the tuning file {shown(path)}: {e.strerror or e}") from None
    if path.is_dir():
        raise UserError(
            f"the tuning file {shown(path)} is a directory: remove it (no file: not tuned) or "
            "rerun make tune"
        )
    return _load(str(path), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=8)
def _load(path: str, _mtime_ns: int, _size: int) -> dict[str, Any]:
    name = shown(path)
    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError) as e:
        why = getattr(e, "strerror", None) or str(e)
        raise UserError(f"cannot read the tuning file {name}: {why}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise UserError(f"the tuning file {name}{where} is not valid YAML: {problem}") from None
    if data is None:  # nothing but comments or blanks: a truncated file, not "no rates"
        raise UserError(
            f"the tuning file {name} is empty (truncated?): rerun make tune, or remove it "
            "(no file: not tuned)"
        )
    if not isinstance(data, dict) or not isinstance(data.get("lr"), dict):
        raise UserError(f"the tuning file {name}: expected a mapping with an `lr` mapping")
    for algorithm, entry in data["lr"].items():
        keys = [algorithm, "chosen"] if isinstance(entry, dict) else [algorithm]
        chosen = entry.get("chosen") if isinstance(entry, dict) else entry
        if not _rate(chosen):
            raise UserError(
                f"the tuning file {name}{_line(text, ['lr', *keys])}: "
                f"lr.{'.'.join(map(str, keys))} must be a number > 0, got {chosen!r}"
            )
    return data


def _rate(value: Any) -> bool:
    """A usable base LR: a finite number > 0 (not a bool, not a string)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return math.isfinite(value) and value > 0


def _line(text: str, keys: list[Any]) -> str:
    """` (line N)`: where the value at `keys` is written in the YAML `text` ('' if not found)."""
    try:
        node = yaml.compose(text)
        for key in keys:
            node = next(v for k, v in node.value if k.value == str(key))
    except Exception:  # noqa: BLE001 - only a hint for the message
        return ""
    return f" (line {node.start_mark.line + 1})"


def tuned_entry(scale: str, preset: str | None, algorithm: str) -> tuple[float, Path] | None:
    """The base LR chosen for `algorithm` and the file it comes from: the preset's tuning file at
    `scale`, else the scale's; None when neither lists the algorithm. Every file read is checked
    whole (`read_tuned`): a damaged rate of another algorithm is refused too."""
    for path in dict.fromkeys([tuned_file(scale, preset), tuned_path(scale)]):
        entry = read_tuned(path).get("lr", {}).get(algorithm)
        if entry is None:
            continue
        chosen = entry.get("chosen") if isinstance(entry, dict) else entry
        return float(chosen), path
    return None


def tuning_preset(report: Any, experiment_name: Any) -> Any:
    """The preset whose tuning file a run reads: the one its `report.tuned_from` names (a
    preset may take another's rates: the same setting, another budget), else its own."""
    return (report or {}).get("tuned_from") or experiment_name


def tuned_lr(default: float, *, _root_: Any) -> float:
    """The base LR chosen for the run's algorithm: in its preset's file at the run's scale, else
    in the scale's file, else `default`."""
    preset = tuning_preset(_root_.get("report"), _root_.get("experiment_name"))
    found = tuned_entry(
        str(_root_.scale.name), str(preset) if preset else None, str(_root_.algorithm.name)
    )
    return float(default) if found is None else found[0]
