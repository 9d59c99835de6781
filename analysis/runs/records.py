"""A result's runs in one committed file: `runs.jsonl.gz` (issue 33).

A committed table holds aggregates; its runs stay on the machine that made them. So every report
also writes, next to its table, the records of the runs it was made from: one JSON object a line,
one line a run, sorted by the run's name, gzip-compressed with no time stamp (the same runs give
the same bytes):

    run        the run directory's path below its runs root ("sync_sgd-seed0-d539b737f2")
    config     the resolved config (config.yaml), every key: what varies and what does not
    overrides  the command-line overrides that made it (.hydra/overrides.yaml): `make verify`
               reruns the point from them
    summary    summary.json: status, final and best accuracy, steps, times, bytes, commit, the
               platform fingerprint (experiments/store/fingerprint.py), the data card
    metrics    metrics.jsonl: one object per evaluation (accuracy, losses, LR, time ledger)

Paths of the machine that made them are not in it: `out_root` and any other absolute path read
`$OUT/...` (experiments.store.provenance.public_path), and the host's name is dropped.

`python -m analysis.reports.report` takes such a file where it takes a runs root: `materialized`
writes the records back as run directories (config.yaml, summary.json, metrics.jsonl, .hydra/) in a
temporary folder, which the analysis reads exactly as it reads the runs themselves; that is the
one reader, so a table recomputed from the file is the table computed from the runs
(`make recompute` checks it byte for byte). For an analysis of one's own:

    import pandas as pd
    runs = pd.read_json("results/demo/cpu/runs.jsonl.gz", lines=True)
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import yaml

from analysis.runs.load import METRIC_KEYS, read_config, read_metrics, read_summary
from experiments.errors import UserError
from experiments.store import records as run_records
from experiments.store.provenance import public_path

RECORDS = "runs.jsonl.gz"
# Keys of a summary that name the machine, not the run: dropped (the fingerprint says what
# matters of the machine).
_MACHINE_KEYS = ("host",)


def is_records(path: str | os.PathLike) -> bool:
    """Whether `path` names a records file (rather than a runs root)."""
    return os.fspath(path).endswith(".jsonl.gz")


def _public(value: Any, out_root: str | os.PathLike | None) -> Any:
    """`value` with every absolute path in it as `public_path` gives it."""
    if isinstance(value, dict):
        return {k: _public(v, out_root) for k, v in value.items()}
    if isinstance(value, list):
        return [_public(v, out_root) for v in value]
    if isinstance(value, str) and value.startswith("/"):
        return public_path(value, out_root)
    if isinstance(value, str) and "=/" in value:  # an override: key=/abs/path
        key, _, path = value.partition("=")
        return f"{key}={public_path(path, out_root)}"
    return value


def _machine_free(summary: dict) -> dict:
    summary = {k: v for k, v in summary.items() if k not in _MACHINE_KEYS}
    if isinstance(summary.get("resumed"), list):
        summary["resumed"] = [
            {k: v for k, v in r.items() if k not in _MACHINE_KEYS} if isinstance(r, dict) else r
            for r in summary["resumed"]
        ]
    return summary


def run_record(
    run_dir: str | os.PathLike, name: str, out_root: str | os.PathLike | None = None
) -> dict[str, Any]:
    """One run's record (the module docstring), read with the analysis' validated readers."""
    run_dir = Path(run_dir)
    overrides_path = run_dir / ".hydra" / "overrides.yaml"
    overrides: list = []
    if overrides_path.is_file():
        loaded = yaml.safe_load(run_records.read_text(overrides_path))
        overrides = [str(o) for o in loaded] if isinstance(loaded, list) else []
    return {
        "run": name,
        "config": _public(read_config(run_dir), out_root),
        "overrides": _public(overrides, out_root),
        "summary": _public(_machine_free(read_summary(run_dir)), out_root),
        "metrics": read_metrics(run_dir / "metrics.jsonl"),
    }


def run_names(run_dirs: Sequence[str | os.PathLike], roots: Sequence[str | os.PathLike]) -> list:
    """Each run's name: its path below the first of `roots` that holds it (below the second
    and later roots prefixed `root<i>/`, so two roots' runs of one name stay two runs)."""
    names = []
    resolved = [Path(r).resolve() for r in roots]
    for run_dir in run_dirs:
        path = Path(run_dir).resolve()
        for i, root in enumerate(resolved):
            if root == path or root in path.parents:
                rel = path.relative_to(root).as_posix() or path.name
                names.append(rel if i == 0 else f"root{i}/{rel}")
                break
        else:
            names.append(path.name)
    return names


def dumps(records: Sequence[dict[str, Any]]) -> bytes:
    """The file's bytes: records sorted by run, one JSON line each, gzip without a time stamp or
    a file name (the same records give the same bytes)."""
    ordered = sorted(records, key=lambda r: r["run"])
    text = "".join(json.dumps(r, sort_keys=True, separators=(",", ":")) + "\n" for r in ordered)
    buffer = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buffer, mtime=0, compresslevel=9) as f:
        f.write(text.encode())
    return buffer.getvalue()


def write_records(
    run_dirs: Sequence[str | os.PathLike],
    roots: Sequence[str | os.PathLike],
    out_dir: str | os.PathLike,
    out_root: str | os.PathLike | None = None,
) -> tuple[Path, list[dict[str, Any]]]:
    """Write `runs.jsonl.gz` of `run_dirs` (found under `roots`) into `out_dir`; its path and
    the records."""
    names = run_names(run_dirs, roots)
    records = [run_record(d, n, out_root) for d, n in zip(run_dirs, names, strict=True)]
    path = Path(out_dir) / RECORDS
    path.parent.mkdir(parents=True, exist_ok=True)
    run_records.write_bytes_atomic(path, dumps(records))
    return path, records


def read_records(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The records of a `runs.jsonl.gz`; a UserError naming the file (and the line) when it is
    not one."""
    path = Path(path)
    if path.is_dir():
        raise UserError(f"{path}: a directory, not a records file")
    if not path.is_file():
        raise UserError(f"no records file {path}")
    if path.stat().st_size == 0:
        raise UserError(f"{path}: empty (0 bytes), not a gzip-compressed JSON-lines file")
    try:
        with gzip.open(path, "rt", encoding="utf-8") as f:
            lines = f.read().splitlines()
    except (OSError, EOFError, UnicodeDecodeError) as error:
        raise UserError(f"{path}: not a gzip-compressed JSON-lines file ({error})") from None
    records: list[dict[str, Any]] = []
    seen: set[str] = set()
    for number, line in enumerate(lines, start=1):
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            raise UserError(f"{path}:{number}: not a JSON line") from None
        missing = [
            k
            for k in ("run", "config", "summary", "metrics")
            if not isinstance(record, dict) or k not in record
        ]
        if missing:
            raise UserError(f"{path}:{number}: not a run record (no {', '.join(missing)})")
        wrong = _wrong_field(record)
        if wrong:
            raise UserError(f"{path}:{number}: not a run record ({wrong})")
        if record["run"] in seen:
            raise UserError(f"{path}:{number}: run {record['run']} is recorded twice")
        seen.add(record["run"])
        records.append(record)
    return records


# The summary's values the checks compute with (analysis/reproduce/verify.py): numbers, or null.
SUMMARY_NUMBERS = (
    "final/test_acc", "final/test_acc_local", "best/test_acc", "final/train_loss", "steps",
    "comm/bytes", "budget/time_s", "compute/step_time_s", "compute/algo_time_s",
)  # fmt: skip


def _is_number(value: Any) -> bool:
    return value is None or (isinstance(value, int | float) and not isinstance(value, bool))


def _wrong_field(record: dict[str, Any]) -> str | None:
    """What makes `record` no run record a report or a rerun can use (a field of the wrong
    type, a run name that would lead out of its folder), in a few words; None when it is one."""
    kind = run_records.kind
    run = record["run"]
    if not isinstance(run, str) or not run or "\0" in run:
        return f"run is {kind(run)}, not a run's name"
    if run.startswith("/") or ".." in run.split("/"):
        return f"run {run!r} is not a path below the runs root"
    for key, want in (("config", dict), ("summary", dict), ("metrics", list)):
        if not isinstance(record[key], want):
            return f"{run}: {key} is {kind(record[key])}, not {kind(want())}"
    overrides = record.get("overrides", [])
    if not isinstance(overrides, list) or not all(isinstance(o, str) for o in overrides):
        return f"{run}: overrides is not a list of strings"
    summary = record["summary"]
    if not isinstance(summary.get("status"), str):
        return f"{run}: summary.status is {kind(summary.get('status'))}, not a string"
    for key in SUMMARY_NUMBERS:
        if not _is_number(summary.get(key)):
            return f"{run}: summary.{key} is {kind(summary[key])}, not a number"
    for key, want in (("platform", dict), ("identity", str)):
        if summary.get(key) is not None and not isinstance(summary[key], want):
            return f"{run}: summary.{key} is {kind(summary[key])}, not {kind(want())}"
    for i, row in enumerate(record["metrics"], start=1):
        if not isinstance(row, dict):
            return f"{run}: metrics row {i} is {kind(row)}, not an object"
        bad = next((k for k in METRIC_KEYS if not _is_number(row.get(k))), None)
        if bad:
            return f"{run}: metrics row {i}: {bad} is {kind(row[bad])}, not a number"
    return None


def write_run_dir(record: dict[str, Any], root: str | os.PathLike) -> Path:
    """`record` as a run directory below `root` (the files the analysis reads)."""
    run_dir = Path(root) / record["run"]
    (run_dir / ".hydra").mkdir(parents=True, exist_ok=True)
    # libyaml's emitter where PyYAML has it (the same safe representer; 160 configs took 0.59
    # CPU-s with the pure-Python one, 0.12 with it): the folder is read back at once
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    config = yaml.dump(record["config"], Dumper=dumper, sort_keys=False)
    (run_dir / "config.yaml").write_text(config)
    overrides = yaml.dump(record.get("overrides", []), Dumper=dumper)
    (run_dir / ".hydra" / "overrides.yaml").write_text(overrides)
    (run_dir / "summary.json").write_text(json.dumps(record["summary"], indent=2, sort_keys=True))
    (run_dir / "metrics.jsonl").write_text(
        "".join(json.dumps(m, sort_keys=True) + "\n" for m in record["metrics"])
    )
    return run_dir


@contextlib.contextmanager
def materialized(roots: Sequence[str | os.PathLike]) -> Iterator[list[Path]]:
    """`roots` with every records file among them written out as a runs root in a temporary
    folder (removed after the block); runs roots are passed through."""
    with contextlib.ExitStack() as stack:
        out = []
        for root in roots:
            if not is_records(root):
                out.append(Path(root))
                continue
            records = read_records(root)
            folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="records-")))
            for record in records:
                write_run_dir(record, folder)
            out.append(folder)
        yield out
