"""A preset's sweep grid: which runs it asks for, so a report can say which of them are missing.

A preset `conf/experiment/<name>.yaml` sweeps `hydra.sweeper.params`, a mapping from override key
to Hydra sweep text (`algorithm: local_sgd,easgd`, `tau: 1,2,4,8`, `seed: range(0,3)`). Hydra's
basic sweeper runs their cartesian product; `expand_grid` does the same on paper. Each override
key maps to the config column of `load.py` that records it: a config group (`algorithm`) to its
`<group>.name` (a group option's file stem is its `name`), any other key to itself (`tau`,
`compute.slowdown`, `algorithm.rank`).

Values are compared in one canonical form (`canonical`): numbers by value (`2` = `2.0`), lists as
tuples, missing as None, so a grid point matches the run whose resolved config holds the same
values, whatever YAML or Hydra made of their types.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from experiments.errors import UserError

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"
#: The seeds the learning rates are tuned on (analysis/tuning/tune_preset.py), disjoint from the
#: presets' evaluation seeds (0-9) and from a replication's (analysis/reproduce/replicate.py).
TUNING_SEEDS = (100, 101)

# The config groups (docs/configuration.md); an override `<group>=<option>` is recorded as
# `<group>.name`.
GROUPS = frozenset(
    {"algorithm", "dataset", "model", "partition", "network", "cluster", "scale", "experiment"}
)


@dataclass(frozen=True)
class Preset:
    """What a composed preset tells the report: its sweep (`params`, override key -> sweep text),
    its `extra_sweeps` (`hydra.sweeper.grids`: each a mapping of the same kind, on top of the
    main sweep's params, as hydra_plugins/commsgd_sweeper runs them) and its `report:` node
    (plain containers, interpolations resolved)."""

    params: dict[str, Any] = field(default_factory=dict)
    report: dict[str, Any] = field(default_factory=dict)
    extra_sweeps: list[dict[str, Any]] = field(default_factory=list)

    @property
    def sweeps(self) -> list[dict[str, Any]]:
        """Every sweep the preset runs, each complete: the main one, then each extra sweep's
        overrides on top of the main params (a command-line override replaces a sweeper param
        of the same key)."""
        main = {key.lstrip("+~"): value for key, value in self.params.items()}
        extra = [
            {**main, **{k.lstrip("+~"): v for k, v in sweep.items()}} for sweep in self.extra_sweeps
        ]
        return [main, *extra] if main else extra


def compose_preset(
    experiment: str,
    scale: str | None = None,
    conf_dir: str | os.PathLike = CONF_DIR,
    overrides: Iterable[str] = (),
) -> Preset:
    """Compose `experiment=<experiment>` (and `scale=<scale>` when given, then `overrides`: what
    the sweep was given on top, e.g. `cluster=sim`) with Hydra's compose API and return its
    sweep params and report node; a UserError when it cannot be composed."""
    from omegaconf import OmegaConf

    from analysis.runs.load import _to_dict_resolving_what_we_can

    conf_dir = Path(conf_dir).resolve()
    if not (conf_dir / "experiment" / f"{experiment}.yaml").is_file():
        raise UserError(f"no preset {conf_dir / 'experiment' / experiment}.yaml")
    cfg = _compose(conf_dir, [*_base_overrides(experiment, scale), *overrides], with_hydra=True)
    params = OmegaConf.to_container(cfg.hydra.sweeper.params, resolve=True) or {}
    report = cfg.get("report")
    report = _to_dict_resolving_what_we_can(report) if report is not None else {}
    extra = cfg.hydra.sweeper.get("grids")  # the commsgd sweeper's extra grids
    extra = OmegaConf.to_container(extra, resolve=True) if extra is not None else []
    return Preset(
        params=dict(params), report=dict(report), extra_sweeps=[_overrides(s) for s in extra]
    )


def _overrides(sweep: Any) -> dict[str, Any]:
    """["algorithm=powersgd", "algorithm.rank=2,4,8"] -> {"algorithm": "powersgd", ...}."""
    if isinstance(sweep, Mapping):
        return dict(sweep)
    pairs = {}
    for override in [sweep] if isinstance(sweep, str) else sweep:
        key, sep, value = str(override).partition("=")
        if not sep:
            raise UserError(f"extra_sweeps: {override!r} is not key=value")
        pairs[key.strip()] = value.strip()
    return pairs


class PointConfigs:
    """The config a grid point's run would get, by composing the preset with the point's group
    overrides (`algorithm=powersgd`: that group's knobs and the preset's fixed values, such as a
    tau the preset sets without sweeping it), then setting the point's other values. Cached per
    set of group overrides, so a grid of 5 algorithms costs 5 compositions; a point that cannot
    be composed gives just its own values."""

    def __init__(
        self,
        experiment: str,
        scale: str | None = None,
        conf_dir: str | os.PathLike = CONF_DIR,
        groups: Iterable[str] = GROUPS,
        overrides: Iterable[str] = (),
    ) -> None:
        self.conf_dir = Path(conf_dir).resolve()
        # the sweep's own overrides (`cluster=sim` sets the clock: part of a point's config)
        self.base = [*_base_overrides(experiment, scale), *overrides]
        self.groups = set(groups)
        self._cache: dict[tuple[str, ...], dict[str, Any]] = {}

    def __call__(self, point: Mapping[str, Any]) -> dict[str, Any]:
        from analysis.runs.load import _flatten, _to_dict_resolving_what_we_can

        overrides = tuple(
            f"{column.removesuffix('.name')}={value}"
            for column, value in point.items()
            if column.endswith(".name") and column.removesuffix(".name") in self.groups
        )
        if overrides not in self._cache:
            try:
                cfg = _compose(self.conf_dir, [*self.base, *overrides], with_hydra=False)
                flat = _flatten(_to_dict_resolving_what_we_can(cfg))
                # named as load.py names them (`lr` of the config is `config.lr`)
                self._cache[overrides] = {_config_column(k): v for k, v in flat.items()}
            except UserError:
                self._cache[overrides] = {}
        return {**self._cache[overrides], **point}


def _base_overrides(experiment: str, scale: str | None) -> list[str]:
    return [f"experiment={experiment}"] + ([f"scale={scale}"] if scale else [])


# This process's compositions (see `composition`): the key is the command line, the conf directory
# and what it holds (`conf_state`), and for the Hydra node the working directory it records.
_COMPOSED: dict[tuple, Any] = {}


def conf_state(conf_dir: Path) -> tuple:
    """What a composition reads from `conf_dir`: every file's path and a digest of its bytes (a
    conf/ edited between two compositions composes afresh; by content, not by size and time,
    which a rewrite within the clock's tick can keep: ~2 ms for conf/'s hundred files)."""
    return tuple(
        sorted(
            (str(p.relative_to(conf_dir)), hashlib.blake2b(p.read_bytes()).digest())
            for p in conf_dir.rglob("*")
            if p.is_file()
        )
    )


def composition(conf_dir: Path, overrides: Sequence[str], with_hydra: bool) -> Any:
    """Hydra's `compose("config", overrides)` under `conf_dir`: a copy of this process's
    composition of the same command line and conf/ when there is one (tests/compose.py reads
    the same cache). Cached by hand because Hydra composes afresh every call (~0.1 s idle: its
    defaults list, YAML, merges), and a report composes its preset and each grid point; a
    process that reports repeatedly (the robustness and replication commands, the tests)
    composed the same lines again and again. The copy is made before anything is resolved
    (resolvers such as `tuned_lr` run when it is read); a command line that does not compose
    raises Hydra's error each time (not cached)."""
    import copy

    from hydra import compose, initialize_config_dir

    key = (
        str(conf_dir),
        conf_state(conf_dir),
        tuple(overrides),
        with_hydra,
        os.getcwd() if with_hydra else None,
    )
    if key not in _COMPOSED:
        with initialize_config_dir(config_dir=str(conf_dir), version_base="1.3"):
            _COMPOSED[key] = compose(
                "config", overrides=list(overrides), return_hydra_config=with_hydra
            )
    return copy.deepcopy(_COMPOSED[key])


def _compose(conf_dir: Path, overrides: list[str], with_hydra: bool) -> Any:
    """`composition`, its failure one UserError line."""
    from omegaconf import OmegaConf

    # conf/config.yaml names run dirs through run.py's resolver; composing only needs it to exist.
    if not OmegaConf.has_resolver("run_name"):
        OmegaConf.register_new_resolver("run_name", lambda s: s or "default")
    try:
        return composition(conf_dir, overrides, with_hydra)
    except Exception as error:  # Hydra's errors carry their cause on the first line
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise UserError(f"cannot compose {' '.join(overrides)}: {first}") from error


def grid_column(key: str, groups: Iterable[str] = GROUPS) -> str:
    """The config column an override key sets: `algorithm` -> `algorithm.name`, `+tau` -> `tau`,
    `lr` -> `config.lr` (a config key named like a metric: analysis/runs/load.py, METRIC_KEYS)."""
    key = key.lstrip("+~")
    return f"{key}.name" if "." not in key and key in set(groups) else _config_column(key)


def _config_column(key: str) -> str:
    from analysis.runs.load import METRIC_KEYS

    return f"config.{key}" if key in METRIC_KEYS else key


def sweep_values(key: str, value: Any) -> list[Any]:
    """The values a sweep entry stands for, typed as Hydra types them: "1,2,4" -> [1, 2, 4],
    "range(0,3)" -> [0, 1, 2], "none,[1,3]" -> ["none", [1, 3]]; a list stays as it is."""
    if isinstance(value, (list, tuple)):
        return list(value)
    if not isinstance(value, str):
        return [value]
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        override = OverridesParser.create().parse_override(f"{key}={value}")
        if override.is_sweep_override():
            return list(override.sweep_iterator())
        return [override.value()]
    except Exception as error:
        raise UserError(f"cannot read the sweep {key}={value}: {error}") from error


def expand_grid(
    params: Mapping[str, Any] | None, groups: Iterable[str] = GROUPS
) -> list[dict[str, Any]]:
    """The cartesian product of a sweep, one dict column -> value per grid point (Hydra's basic
    sweeper order: the first key varies slowest). No params: no points."""
    if not params:
        return []
    groups = set(groups)
    columns = [grid_column(key, groups) for key in params]
    values = [sweep_values(key.lstrip("+~"), value) for key, value in params.items()]
    return [dict(zip(columns, point, strict=True)) for point in itertools.product(*values)]


def expand_sweeps(
    sweeps: Iterable[Mapping[str, Any]], groups: Iterable[str] = GROUPS
) -> list[dict[str, Any]]:
    """The points of several sweeps (`expand_grid` of each), each point once, in order. A
    tau-less method (`TAU_LESS`: it ignores `tau`) at a second tau is the same run again, not a
    point: the sweeper runs it once (no pseudo-replication)."""
    from analysis.runs.load import TAU_LESS

    groups = set(groups)
    points, seen = [], set()
    for sweep in sweeps:
        for point in expand_grid(sweep, groups):
            tau_less = canonical(point.get("algorithm.name")) in TAU_LESS
            key = tuple(
                sorted((c, canonical(v)) for c, v in point.items() if not (tau_less and c == "tau"))
            )
            if key not in seen:
                seen.add(key)
                points.append(point)
    return points


def canonical(value: Any) -> Any:
    """A hashable form in which equal config values compare equal (see the module docstring)."""
    if isinstance(value, (list, tuple)):
        return tuple(canonical(v) for v in value)
    if isinstance(value, Mapping):
        return tuple(sorted((str(k), canonical(v)) for k, v in value.items()))
    if value is None or pd.isna(value):
        return None
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, float, np.integer, np.floating)):
        number = float(value)
        if math.isnan(number):
            return None
        return int(number) if number.is_integer() else number
    return str(value)


def add_preset_arguments(parser: Any, experiment_help: str) -> None:
    """The command-line options that pick a preset's runs (`--experiment`, `--scale`, `--set`),
    shared by analysis/reports/report.py and analysis/reports/wandb_report.py."""
    parser.add_argument("--experiment", metavar="NAME", help=experiment_help)
    parser.add_argument("--scale", metavar="SCALE", help="only the runs at this scale.name")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an override the sweep was run with (e.g. cluster=sim): the grid's points are "
        "composed with it (repeatable)",
    )
