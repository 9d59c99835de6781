"""Each default of the config lives once, in the schema (experiments/config/schema.py and the
algorithms' Config classes) and conf/, and the run reads the typed job the schema makes.

Why: the run used to turn the composed config into a plain dict and read it back with
`cfg.get("dtype", "float32")` and the like, so every such default lived twice and the two could
disagree without any test noticing (issue 38). The scan below reads the run's sources with `ast`
and refuses a read of a schema key with a fallback: `<x>.get("<key>", <default>)` or
`getattr(<x>, "<key>", <default>)` whose default is anything but None (a `.get(key)` of a key
that may be absent, or `or {}`, supplies no value of its own). The record of a run
(`schema.record`: config.yaml, the identity, checkpoints, W&B) must be exactly the composed
config, so that runs recorded before the typed job are still recognised: the second test
compares every preset.

Not scanned: experiments/data/ (the dataset loaders' own fallbacks, such as cifar10's
`augment`, are issue 38's next step: the loaders read the dataset node as a mapping, also for
callers outside a run) and experiments/config/tuned.py (its `.get("lr", {})` reads the tuned-LR
files, whose `lr` is no config key).
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest
from omegaconf import OmegaConf

import algorithms
from experiments.config import schema
from tests.compose import CONF, composed

ROOT = Path(__file__).resolve().parents[1]
NOT_SCANNED = ("experiments/data/", "experiments/config/tuned.py")


def schema_keys() -> set[str]:
    """Every key name a schema declares: the root, its nodes, the group options' schemas and
    the algorithms' Configs."""
    classes = [c for c in vars(schema).values() if dataclasses.is_dataclass(c)]
    classes += list(algorithms.CONFIGS.values())
    return {f.name for c in classes for f in dataclasses.fields(c)}


def fallback_reads(source: str, keys: set[str]) -> list[tuple[int, str]]:
    """(line, key) of each `.get("<key>", default)` and `getattr(x, "<key>", default)` in
    `source` whose key is in `keys` and whose default is not None."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call) or len(node.args) < 2:
            continue
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr == "get" and len(node.args) == 2:
            key, default = node.args
        elif isinstance(func, ast.Name) and func.id == "getattr" and len(node.args) == 3:
            key, default = node.args[1], node.args[2]
        else:
            continue
        if not (isinstance(key, ast.Constant) and key.value in keys):
            continue
        if isinstance(default, ast.Constant) and default.value is None:
            continue
        found.append((node.lineno, key.value))
    return found


def test_no_schema_key_is_read_with_a_default_of_its_own():
    keys = schema_keys()
    offenders = []
    for path in sorted((ROOT / "experiments").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith(NOT_SCANNED):
            continue
        for line, key in fallback_reads(path.read_text(), keys):
            offenders.append(f"{rel}:{line}: {key}")
    assert not offenders, "defaults outside the schema:\n" + "\n".join(offenders)


def test_the_scan_finds_a_fallback_read():
    """The scan's own check: the reads it exists to refuse, and the ones it lets through."""
    source = (
        'cfg.get("dtype", "float32")\n'
        '(cfg.get("comm") or {}).get("compression", "none")\n'
        'getattr(job.cluster, "in_process", False)\n'
        'cfg.get("threads_per_worker")\n'
        'summary.get("status", "failed")\n'
    )
    keys = schema_keys()
    assert fallback_reads(source, keys) == [(1, "dtype"), (2, "compression"), (3, "in_process")]


def presets() -> list[str]:
    return sorted(p.stem for p in (CONF / "experiment").glob("*.yaml"))


@pytest.mark.parametrize(
    "overrides",
    [
        (),
        ("cluster=sim", "dataset=synthetic", "algorithm=local_sgd", "compute.slowdown=[1,2]"),
        ("cluster=slurm", "dataset=cifar10", "partition=dirichlet", "algorithm=powersgd"),
        ("dataset=fashion_mnist", "partition=noniid", "network=wan", "dtype=float64"),
        *[(f"experiment={name}",) for name in presets()],
    ],
    ids=lambda o: " ".join(o) or "default",
)
def test_the_record_of_the_typed_job_is_the_composed_config(overrides):
    """`record(typed(cfg))` is what the run wrote before it read a typed job: the same keys in
    the same order (config.yaml byte for byte) and values; and the workers' typed job
    (`from_record`) has that record too."""
    cfg = composed(*overrides)
    plain = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
    plain.pop("rerun")
    job = schema.typed(cfg)
    record = schema.record(job)
    assert OmegaConf.to_yaml(OmegaConf.create(record)) == OmegaConf.to_yaml(OmegaConf.create(plain))
    assert record == plain
    masked = OmegaConf.masked_copy(cfg, list(cfg))  # the sweeper's copy: an untyped root
    assert schema.record(schema.typed(masked)) == plain
    again = schema.from_record(record)
    assert type(again.dataset) is type(job.dataset)
    assert type(again.cluster) is type(job.cluster)
    assert schema.record(again) == plain
