"""Run directories -> one tidy DataFrame.

A run is any directory holding `summary.json` (contract.md, "A run's directory"); nothing here
parses directory names. Each run contributes its resolved config flattened to dotted columns
(`algorithm.name`, `tau`, `dataset.name`, ...), its summary prefixed `summary.` (`summary.status`,
`summary.final/test_acc`, ...) and, in `load_runs`, one row per line of `metrics.jsonl` with the
metric columns named as logged (`step`, `epoch`, `test/acc`, ...).
"""

from __future__ import annotations

import json
import math
import os
import warnings
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from experiments.errors import UserError

# The algorithm names of contract.md, in the order tables and legends list them (baseline first).
ALGORITHMS = (
    "sync_sgd",
    "local_sgd",
    "powersgd",
    "easgd",
    "eamsgd",
    "cocod_sgd",
    "overlap_local_sgd",
    "pseudo_sync",
    "osp",
    "losp",
)

# Methods that communicate every step, so the top-level `tau` (local updates per round) has no
# effect on them: their runs form one table row and one curve whatever `tau` the config holds.
TAU_LESS = {"sync_sgd", "powersgd", "pseudo_sync"}

# The metric names the contract fixes. A config key with one of these names (`lr`: base LR in the
# config, current LR in the metrics) is renamed `config.<key>` so both frames mean the same thing
# by the same column.
METRIC_KEYS = (
    "step",
    "epoch",
    "train/loss",
    "test/loss",
    "test/acc",
    "test/acc_local",
    "lr",
    "time/train_s",
    "time/compute_s",
    "time/comm_exposed_s",
    "comm/bytes",
)

DEFAULT_STATUSES = ("completed", "diverged")

# Hydra's own files and W&B's offline mirror sit inside run dirs but are never runs themselves.
_SKIP_DIRS = {"wandb"}


def find_runs(root: str | os.PathLike) -> list[Path]:
    """All run directories (those holding `summary.json`) at or below `root`, sorted."""
    root = Path(root)
    if not root.is_dir():
        raise UserError(f"runs root is not a directory: {root}")
    runs = []
    for dirpath, dirnames, filenames in os.walk(root):
        # Pruning in place stops os.walk from descending; dot-dirs cover `.hydra` and `.submitit`.
        dirnames[:] = [d for d in dirnames if d not in _SKIP_DIRS and not d.startswith(".")]
        if "summary.json" in filenames:
            runs.append(Path(dirpath))
    return sorted(runs)


def run_label(algorithm: Any, tau: Any) -> str:
    """The legend name of a run: `local_sgd (tau=2)`, or just `sync_sgd` for tau-less methods."""
    name = "unknown" if _missing(algorithm) else str(algorithm)
    if name in TAU_LESS or _missing(tau):
        return name
    return f"{name} (tau={_format_number(tau)})"


def load_runs(
    *roots: str | os.PathLike, statuses: Sequence[str] | str | None = DEFAULT_STATUSES
) -> pd.DataFrame:
    """One row per (run, evaluation): config + summary columns joined to the metric rows.

    Runs whose `summary.status` is not in `statuses` are left out (None keeps all). A run without
    metric lines still gives one row, with NaN metrics.
    """
    frames = []
    for meta, records in _read_all(roots, statuses):
        metrics = pd.DataFrame.from_records(records) if records else pd.DataFrame(index=[0])
        metrics = _resolve_collisions(meta, metrics)
        info = pd.DataFrame([meta] * len(metrics), index=metrics.index)
        frames.append(pd.concat([info, metrics], axis=1))
    if not frames:
        return pd.DataFrame(columns=["run_dir", "label"])
    return pd.concat(frames, ignore_index=True)


def load_summaries(
    *roots: str | os.PathLike, statuses: Sequence[str] | str | None = DEFAULT_STATUSES
) -> pd.DataFrame:
    """One row per run: config + summary columns, no metric rows."""
    metas = [meta for meta, _ in _read_all(roots, statuses, with_metrics=False)]
    if not metas:
        return pd.DataFrame(columns=["run_dir", "label"])
    return pd.DataFrame.from_records(metas)


def read_config(run_dir: str | os.PathLike) -> dict:
    """The run's resolved config: `config.yaml`, else Hydra's `.hydra/config.yaml`."""
    run_dir = Path(run_dir)
    path = run_dir / "config.yaml"
    if path.is_file():
        config = yaml.safe_load(path.read_text())
        return config if isinstance(config, dict) else {}
    path = run_dir / ".hydra" / "config.yaml"
    if path.is_file():
        from omegaconf import OmegaConf

        return _to_dict_resolving_what_we_can(OmegaConf.load(path))
    return {}


def read_metrics(path: str | os.PathLike) -> list[dict]:
    """The evaluations in a `metrics.jsonl`; a trailing partial line (run killed mid-write) is
    dropped silently, any other unreadable line with a warning."""
    path = Path(path)
    if not path.is_file():
        return []
    lines = path.read_text().splitlines()
    while lines and not lines[-1].strip():
        lines.pop()
    records = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            if number < len(lines):
                # A resumed run can append after a torn line; the rest of the file is still good.
                warnings.warn(f"{path}:{number}: unreadable line skipped", stacklevel=2)
            continue
        if isinstance(record, dict):
            records.append(record)
    return records


def _read_all(
    roots: Iterable[str | os.PathLike],
    statuses: Sequence[str] | str | None,
    with_metrics: bool = True,
) -> Iterable[tuple[dict, list[dict]]]:
    if isinstance(statuses, str):
        statuses = (statuses,)
    for root in roots:
        for run_dir in find_runs(root):
            summary = _read_summary(run_dir)
            if summary is None:
                continue
            if statuses is not None and summary.get("status") not in statuses:
                continue
            try:
                config = read_config(run_dir)
            except Exception as error:  # any parse failure: skip this run, keep the others
                warnings.warn(
                    f"{run_dir}: unreadable config skipped ({type(error).__name__})", stacklevel=2
                )
                continue
            meta = _run_meta(run_dir, config, summary)
            records = read_metrics(run_dir / "metrics.jsonl") if with_metrics else []
            yield meta, records


def _read_summary(run_dir: Path) -> dict | None:
    try:
        summary = json.loads((run_dir / "summary.json").read_text())
    except (OSError, json.JSONDecodeError) as error:
        # A half-written summary must not hide every other run from the report.
        warnings.warn(f"{run_dir}: unreadable summary.json skipped ({error})", stacklevel=3)
        return None
    return summary if isinstance(summary, dict) else None


def _run_meta(run_dir: Path, config: dict, summary: dict) -> dict:
    config_flat = _flatten(config)
    for key in METRIC_KEYS:
        if key in config_flat:
            config_flat[f"config.{key}"] = config_flat.pop(key)
    # The per-worker label histogram is large and nested; it belongs in its own analysis.
    summary = {k: v for k, v in summary.items() if k != "data_card"}
    summary_flat = {f"summary.{k}": v for k, v in _flatten(summary).items()}
    algorithm = config_flat.get("algorithm.name", config_flat.get("algorithm"))
    label = run_label(algorithm, config_flat.get("tau"))
    return {"run_dir": str(run_dir), "label": label, **config_flat, **summary_flat}


def _resolve_collisions(meta: dict, metrics: pd.DataFrame) -> pd.DataFrame:
    # Metric names are fixed by the contract, so on a clash with a config key the config key gives
    # way; only a metric named like one of our own columns (`run_dir`, `label`, `summary.*`) moves.
    ours = {"run_dir", "label"}
    renamed = {}
    for key in set(metrics.columns) & set(meta):
        if key in ours or key.startswith("summary."):
            renamed[key] = f"metrics.{key}"
        else:
            meta[f"config.{key}"] = meta.pop(key)
    return metrics.rename(columns=renamed)


def _flatten(mapping: dict) -> dict:
    if not mapping:
        return {}
    return pd.json_normalize(mapping, sep=".").to_dict(orient="records")[0]


def _to_dict_resolving_what_we_can(node: Any) -> Any:
    """OmegaConf node -> plain containers, resolving interpolations one value at a time.

    One that fails (an unset env var, a key only Hydra's runtime knows) stays as its `${...}` text
    instead of failing the whole load.
    """
    from omegaconf import DictConfig, ListConfig, OmegaConf

    raw = OmegaConf.to_container(node, resolve=False)
    keys = node.keys() if isinstance(node, DictConfig) else range(len(node))
    out: dict | list = {} if isinstance(node, DictConfig) else []
    for key in keys:
        try:
            value = node[key]
        except Exception:
            value = raw[key]
        if isinstance(value, (DictConfig, ListConfig)):
            value = _to_dict_resolving_what_we_can(value)
        if isinstance(out, dict):
            out[key] = value
        else:
            out.append(value)
    return out


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _format_number(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)
