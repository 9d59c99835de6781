"""The line under a table that says at which base learning rate its rows ran (issue 35 item 5).

The papers compare methods each at its own tuned rate, so a table must say whether its rows ran
at theirs: every row at its method's tuned rate (and where that was tuned: the preset's own
setting, or the demo's), the methods no tuning file lists (the default 0.1: untuned at this
scale), and each row that ran at another rate than its method's tuned one (a preset's choice,
e.g. the Overlap-Local-SGD paper's 0.15 at tau = 1, or a command-line `lr=`), with both rates.
The tuned rates are read where the runs read them (experiments/config/tuned.py: the preset's
file at the scale, else the scale's).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from analysis.runs.load import TAU_LESS
from experiments.config.tuned import read_tuned, tuned_entry
from experiments.store.provenance import REPO


def _value(value: Any) -> str:
    return f"{float(value):g}"


def _label(keys: Sequence[str], values: Sequence[Any]) -> str:
    parts = []
    for key, value in zip(keys, values, strict=True):
        if key == "algorithm.name":
            parts.append(str(value))
        elif not (key == "tau" and parts and parts[0] in TAU_LESS):
            parts.append(f"{key.rsplit('.', 1)[-1]}={value}")
    return " ".join(parts)


def _shown(path: Path) -> str:
    """The tuning file as a reader can open it: relative to the checkout when inside it."""
    return os.path.relpath(path, REPO) if REPO in path.parents else str(path)


def _where(path: Path) -> str:
    """The tuning file as a reader can open it, and the setting it was tuned at."""
    shown = _shown(path)
    setting = read_tuned(path).get("setting")
    setting = setting if isinstance(setting, dict) else {}
    if setting.get("preset"):
        at = ", ".join(f"{k} {v}" for k, v in (setting.get("tuned_at") or {}).items())
        seeds = ", ".join(str(s) for s in setting.get("seeds") or ())
        how = "this preset's setting" + (f" at {at}" if at else "")
        return f"{shown}: tuned at {how}, seeds {seeds}" if seeds else f"{shown}: tuned at {how}"
    parts = [
        f"{setting[k]} {name}"
        for k, name in (("epochs", "epochs"), ("workers", "workers"))
        if setting.get(k) is not None
    ]
    if setting.get("tau") is not None:
        parts.append(f"tau {setting['tau']}")
    if setting.get("seeds"):
        parts.append("seeds " + ", ".join(str(s) for s in setting["seeds"]))
    return f"{shown}: tuned at the demo's setting ({', '.join(parts)})" if parts else shown


def rate_lines(runs: pd.DataFrame, rows: Sequence[str]) -> list[str]:
    """The lines under a table of `runs` (one row per run, as `load_summaries` gives them)
    grouped by `rows`: where the rows' base LRs come from, and every row off its tuned rate."""
    lr = "config.lr" if "config.lr" in runs else "lr"
    if runs.empty or lr not in runs or "algorithm.name" not in runs:
        return []
    keys = [k for k in rows if k in runs]
    tuned, untuned, off = {}, set(), []
    for values, group in runs.groupby(keys, sort=False, dropna=False):
        values = values if isinstance(values, tuple) else (values,)
        first = group.iloc[0]
        algorithm = str(first["algorithm.name"])
        scale = str(first.get("scale.name"))
        preset = first.get("report.tuned_from")
        if not isinstance(preset, str) or not preset:
            preset = first.get("experiment_name")
        preset = str(preset) if isinstance(preset, str) and preset else None
        found = tuned_entry(scale, preset, algorithm)
        rates = sorted({float(v) for v in pd.to_numeric(group[lr], errors="coerce").dropna()})
        if found is None:
            untuned.add((algorithm, tuple(rates)))
            continue
        chosen, path = found
        where = _where(path)
        if any(abs(r - chosen) > 1e-12 * chosen for r in rates):
            shown = ", ".join(_value(r) for r in rates)
            off.append(
                f"{_label(keys, values)}: base LR {shown}, not its tuned {_value(chosen)} "
                f"({_shown(path)})"
            )
        else:
            tuned.setdefault(where, []).append(algorithm)
    lines = []
    for where, algorithms in tuned.items():
        names = ", ".join(dict.fromkeys(algorithms))
        lines.append(f"base LR: each method's tuned rate ({names}; {where}).")
    if untuned:
        names = ", ".join(sorted({a for a, _ in untuned}))
        rates = sorted({r for _, rs in untuned for r in rs})
        lines.append(
            f"base LR {', '.join(_value(r) for r in rates)}: untuned at this scale ({names}: no "
            "tuning file lists them)."
        )
    return lines + [f"{line}." for line in off]
