"""Run directories -> one tidy DataFrame.

A run is any directory holding `summary.json` (docs/records.md, "Run records"); nothing here
parses directory names. Each run contributes its resolved config flattened to dotted columns
(`algorithm.name`, `tau`, `dataset.name`, ...), its summary prefixed `summary.` (`summary.status`,
`summary.final/test_acc`, ...) and, in `load_runs`, one row per line of `metrics.jsonl` with the
metric columns named as logged (`step`, `epoch`, `test/acc`, ...).

Damaged records never stop a report. Every file is validated as it is read, and a run whose
`summary.json` (not UTF-8, not JSON, not an object, no text `status`), `config.yaml` (not
UTF-8, not YAML, not a mapping) or `metrics.jsonl` (not UTF-8) cannot be used is left out with
one `RecordWarning` naming the file; within `metrics.jsonl` a torn line, a line that is not an
object, or one whose metric values are not numbers is skipped with a warning naming the file and
the line (a torn last line, from a run killed mid-write, silently). The command-line entry points
print these warnings as one `warning: ...` line each (`one_line_warnings`).
"""

from __future__ import annotations

import copy
import functools
import json
import math
import numbers
import os
import sys
import warnings
from collections.abc import Iterable, Iterator, Sequence
from collections.abc import Set as AbstractSet
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

import algorithms
from experiments.errors import UserError
from experiments.store import records as run_records


class _Algorithms(Sequence[str]):
    """The algorithm names in the order tables and legends list them: algorithms.TABLE's (the
    registry, the one place an algorithm is added), read when used, so that a name registered
    after this module was imported (a plugin's, a test's) is in it too."""

    def __getitem__(self, index):  # noqa: ANN001 - an int or a slice, as a tuple takes
        return tuple(algorithms.TABLE)[index]

    def __len__(self) -> int:
        return len(algorithms.TABLE)

    def __iter__(self) -> Iterator[str]:
        return iter(tuple(algorithms.TABLE))

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in algorithms.TABLE

    def index(self, name: Any, start: int = 0, stop: int | None = None) -> int:
        return tuple(algorithms.TABLE).index(name, start, len(self) if stop is None else stop)

    def __repr__(self) -> str:
        return repr(tuple(algorithms.TABLE))


class _TauLess(AbstractSet[str]):
    """The methods that communicate every step, so the top-level `tau` (local updates per round)
    has no effect on them: their runs form one table row and one curve whatever `tau` the config
    holds. The registry's methods that do not read tau (`algorithms.reads_tau`), read when used
    (as `_Algorithms`)."""

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in algorithms.TABLE and not algorithms.reads_tau(name)

    def __iter__(self) -> Iterator[str]:
        return iter([name for name in algorithms.TABLE if not algorithms.reads_tau(name)])

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __repr__(self) -> str:
        return repr(set(self))


ALGORITHMS: Sequence[str] = _Algorithms()
TAU_LESS: AbstractSet[str] = _TauLess()

# The network presets of conf/network/, fastest first: the order of table rows and panels.
NETWORKS = ("ideal", "ethernet40g", "ethernet10g", "ethernet1g", "wan")

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


class RecordWarning(UserWarning):
    """A damaged run record (or part of one) that the analysis left out; the message names the
    file."""


# A record file that cannot be used: `path`, and `why` in a few words (the records' own class,
# experiments/store/records.py: one validated reader per file for the runs and the analysis alike).
DamagedRecord = run_records.DamagedRecord


@contextmanager
def one_line_warnings(stream: Any = None) -> Iterator[None]:
    """Within the block, each `RecordWarning` is printed as one line `warning: <message>` on
    `stream` (default stderr), every time it occurs; other warnings are shown as usual."""
    with warnings.catch_warnings():
        warnings.simplefilter("always", RecordWarning)
        shown = warnings.showwarning

        def show(message, category, filename, lineno, file=None, line=None):  # noqa: ANN001
            if issubclass(category, RecordWarning):
                print(f"warning: {message}", file=stream or sys.stderr)
            else:
                shown(message, category, filename, lineno, file, line)

        warnings.showwarning = show
        yield


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
    """The run's resolved config: `config.yaml`, else Hydra's `.hydra/config.yaml`; {} when it
    has neither. A DamagedRecord naming the file when the one it has is not a YAML mapping."""
    run_dir = Path(run_dir)
    path = run_dir / "config.yaml"
    if path.is_file():
        config = _parsed_yaml(_read_text(path))
        if not isinstance(config, dict):
            raise DamagedRecord(path, f"not a mapping but {_kind(config)}")
        return copy.deepcopy(config)
    path = run_dir / ".hydra" / "config.yaml"
    if path.is_file():
        from omegaconf import DictConfig, OmegaConf

        node = OmegaConf.load(path)
        if not isinstance(node, DictConfig):
            raise DamagedRecord(path, "not a mapping but a list")
        return _to_dict_resolving_what_we_can(node)
    return {}


@functools.lru_cache(maxsize=4096)
def _parsed_yaml(text: str) -> Any:
    """A `config.yaml`'s text parsed, once per text (the callers get deep copies). Cached by hand
    because a report reads each run's config four times (loading the runs, their summaries, their
    identity, their record): three quarters of its YAML parsing were repeats. Keyed by the text
    itself, not the file's size and time, which a rewrite within the clock's tick can keep.
    libyaml's parser where PyYAML has it (the same safe constructor, ~10x faster than the
    pure-Python one)."""
    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def read_summary(run_dir: str | os.PathLike) -> dict:
    """The run's `summary.json`: a JSON object with a text `status`, else a DamagedRecord
    naming the file and what is wrong."""
    path = Path(run_dir) / "summary.json"
    summary = run_records.read_json_object(path)
    if not isinstance(summary.get("status"), str):
        raise DamagedRecord(path, f"no text status (status: {summary.get('status')!r})")
    return summary


def read_metrics(path: str | os.PathLike) -> list[dict]:
    """The evaluations in a `metrics.jsonl`; a trailing partial line (run killed mid-write) is
    dropped silently; any other line that is not JSON, not an object, or holds a metric of the
    contract (`METRIC_KEYS`) that is not a number is skipped with a warning naming the line.
    A file that is not UTF-8 text is a DamagedRecord."""
    path = Path(path)
    if not path.is_file():
        return []
    lines = _read_text(path).splitlines()
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
                _warn(f"{path}:{number}: unreadable line skipped")
            continue
        if not isinstance(record, dict):
            _warn(f"{path}:{number}: line skipped: not a JSON object but {_kind(record)}")
            continue
        bad = [k for k in METRIC_KEYS if k in record and not _is_number(record[k])]
        if bad:
            _warn(f"{path}:{number}: line skipped: {bad[0]} is not a number ({record[bad[0]]!r})")
            continue
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
            try:
                summary = read_summary(run_dir)
            except (OSError, DamagedRecord) as error:
                # A half-written summary must not hide every other run from the report.
                _warn(f"{run_dir}: unreadable summary.json skipped ({_reason(error)})")
                continue
            if statuses is not None and summary["status"] not in statuses:
                continue
            try:
                config = read_config(run_dir)
            except Exception as error:  # any parse failure: skip this run, keep the others
                name = (
                    "config.yaml" if (run_dir / "config.yaml").is_file() else ".hydra/config.yaml"
                )
                _warn(f"{run_dir}: unreadable config skipped ({name}: {_reason(error)})")
                continue
            try:
                # Read (and so checked) even when only the summaries are wanted: a run is in a
                # report's table exactly when it is in its figures.
                records = read_metrics(run_dir / "metrics.jsonl")
            except (OSError, DamagedRecord) as error:
                _warn(f"{run_dir}: unreadable metrics.jsonl, run skipped ({_reason(error)})")
                continue
            if not records and summary["status"] == "completed" and _empty(run_dir):
                # a completed run evaluated at least once: its rows were lost (a 0-byte file)
                _warn(f"{run_dir}: completed, but its metrics.jsonl is empty: run skipped")
                continue
            meta = _run_meta(run_dir, config, summary)
            yield meta, (records if with_metrics else [])


def _empty(run_dir: Path) -> bool:
    """Whether the run has a metrics.jsonl without a line (0 bytes, or blank)."""
    try:
        return not (run_dir / "metrics.jsonl").read_bytes().strip()
    except OSError:
        return False


def _read_text(path: Path) -> str:
    """A record file's text; a DamagedRecord when it is not UTF-8 (binary garbage, a disk
    error's zeros): the records' reader."""
    return run_records.read_text(path)


def _reason(error: BaseException) -> str:
    """One line: what is wrong, without the path when the message already starts with it."""
    text = " ".join(str(error).split()) or type(error).__name__
    if isinstance(error, DamagedRecord):
        text = error.why
    elif isinstance(error, OSError) and error.strerror:
        text = error.strerror
    else:
        text = f"{type(error).__name__}: {text}"
    return text[:300]


def _warn(message: str) -> None:
    warnings.warn(message, RecordWarning, stacklevel=3)


def _kind(value: Any) -> str:
    return {list: "a list", str: "a string", type(None): "null", bool: "a boolean"}.get(
        type(value), "a number" if isinstance(value, numbers.Number) else type(value).__name__
    )


def _is_number(value: Any) -> bool:
    # JSON null is a metric not measured at this evaluation; NaN/inf (a diverged loss) are numbers.
    return value is None or (isinstance(value, numbers.Real) and not isinstance(value, bool))


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


def _flatten(mapping: dict, prefix: str = "") -> dict:
    """`mapping`'s leaves under dotted keys (`{"a": {"b": 1}}` -> `{"a.b": 1}`), an empty
    mapping left out: what `pd.json_normalize(mapping, sep=".")` gives (checked on every
    committed record), written out because json_normalize builds a DataFrame per call, a tenth
    of a report's time."""
    out: dict = {}
    for key, value in mapping.items():
        if isinstance(value, dict):
            out.update(_flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


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
