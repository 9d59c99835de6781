"""What is checked before a run directory exists, and how any config error reads: one line.

`check(config)` takes a composed config (with its `hydra` node) and checks, in order: keys that
no schema declares (Hydra lets `+key=value` add them), interpolations (`tau=${oops}`), every
value (`experiments.runner.validate`), the launcher's world size against `workers`, W&B
credentials for `wandb.mode=online`, and the output root. It returns the run's directory and
identity. A single run calls it from the Hydra callback `Preflight` (conf/config.yaml:
`hydra.callbacks`), after Hydra composed the config and before it creates the run directory;
a sweep calls it for every point (hydra_plugins/commsgd_sweeper), before launching any.

`describe(exception)` turns what Hydra and OmegaConf raise while composing or resolving (an
unknown key, a wrong type, a value outside an enum, an unknown group option, a malformed
override, an interpolation error) into the one line printed after `error: `.
"""

from __future__ import annotations

import netrc
import os
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from experiments.errors import UserError

MIN_FREE_MB = float(os.environ.get("COMMSGD_MIN_FREE_MB", 100))  # below: the output disk is full


@dataclass(frozen=True)
class Point:
    """A checked configuration: where its record goes and what it is."""

    run_dir: Path
    digest: str
    config: dict[str, Any]  # the resolved job config, enums as strings


def check(config: DictConfig, sweep: bool = False) -> Point:
    """Check the composed `config` (see the module docstring); raise UserError (one line) or
    the OmegaConf error of an unresolvable interpolation. `sweep`: the run directory is
    `hydra.sweep.dir/hydra.sweep.subdir` rather than `hydra.run.dir`."""
    from experiments import resolved_job
    from experiments.identity import digest
    from experiments.runner import validate
    from experiments.schema import check_keys

    check_keys(config)
    plain = resolved_job(config)
    validate(plain)
    if not sweep:  # a sweep's jobs run elsewhere (a SLURM array): each job checks its own
        check_world_size(plain["workers"])
    check_wandb(plain)
    if sweep:
        run_dir = Path(str(config.hydra.sweep.dir)) / str(config.hydra.sweep.subdir)
    else:
        run_dir = Path(str(config.hydra.run.dir))
    check_output_root(run_dir.parent)
    return Point(run_dir=run_dir.absolute(), digest=digest(plain), config=plain)


class Preflight(Callback):
    """Hydra callback: a single run's `check`, before Hydra makes its directory. Hydra turns an
    exception raised by a callback into a warning and goes on, so a refusal is printed here and
    ends the program (SystemExit, exit code 2)."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        try:
            check(config)
        except Exception as e:
            print(f"error: {describe(e)}", file=sys.stderr, flush=True)
            raise SystemExit(2) from None


# --- the checks -----------------------------------------------------------------------------


def launcher_world_size() -> int | None:
    """How many workers a launcher started this process among (torchrun: WORLD_SIZE; srun:
    SLURM_NTASKS), or None when run.py will start the workers itself."""
    env = os.environ
    if "RANK" in env and "WORLD_SIZE" in env:
        return int(env["WORLD_SIZE"])
    if int(env.get("SLURM_NTASKS", "1")) > 1 and "SLURM_PROCID" in env:
        return int(env["SLURM_NTASKS"])
    return None


def check_world_size(workers: int, world_size: int | None = None) -> None:
    """Under torchrun/srun the world size that runs must be the config's `workers`: the run's
    identity (and its record) says `workers`, so a mismatch would record one configuration
    under another's name."""
    world_size = launcher_world_size() if world_size is None else world_size
    if world_size is not None and world_size != workers:
        raise UserError(
            f"the launcher started {world_size} workers but workers={workers}: give run.py "
            f"workers={world_size}, or start {workers} processes (torchrun --nproc-per-node, "
            "srun --ntasks)"
        )


def has_wandb_credentials() -> bool:
    """Whether W&B can log in without asking: WANDB_API_KEY, or a netrc entry for the W&B host
    (what `wandb login` writes)."""
    if os.environ.get("WANDB_API_KEY", "").strip():
        return True
    host = urlparse(os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")).hostname or ""
    try:
        entry = netrc.netrc(os.environ.get("NETRC")).authenticators(host)
    except (OSError, netrc.NetrcParseError):
        return False
    return bool(entry and entry[2])


def check_wandb(cfg: dict[str, Any]) -> None:
    if cfg["wandb"]["mode"] == "online" and not has_wandb_credentials():
        raise UserError(
            "wandb.mode=online needs W&B credentials: set WANDB_API_KEY or run `wandb login` "
            "(or run with wandb.mode=offline and `wandb sync` the records later)"
        )


def check_output_root(runs: Path) -> None:
    """The directory that will hold the run directories must be writable and not full. Called
    only when a run is about to be made (never for --help, --cfg, --info): creating `runs` is
    then what Hydra would do next."""
    try:
        runs.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=runs, prefix=".write-test-"):
            pass
    except OSError as e:
        raise UserError(f"output directory {runs} is not writable: {e.strerror}") from None
    free_mb = shutil.disk_usage(runs).free / 2**20
    if free_mb < MIN_FREE_MB:
        raise UserError(
            f"output directory {runs} is full: {free_mb:.1f} MB free, a run needs at least "
            f"{MIN_FREE_MB:.0f} MB (COMMSGD_MIN_FREE_MB)"
        )


# --- one line per error ---------------------------------------------------------------------

_TYPE_WORDS = {
    "Integer": "an integer",
    "Float": "a number",
    "Boolean": "true or false",
    "String": "a string",
}


def describe(error: BaseException) -> str:
    """The one-line cause of a composition, resolution or validation `error` (no `error: `)."""
    from hydra.errors import MissingConfigException, OverrideParseException
    from omegaconf.errors import (
        ConfigAttributeError,
        ConfigKeyError,
        InterpolationResolutionError,
        MissingMandatoryValue,
        OmegaConfBaseException,
        ValidationError,
    )

    chain = _chain(error)
    for e in chain:
        if isinstance(e, UserError):
            return str(e)
    for e in chain:
        if isinstance(e, MissingConfigException) and e.options is not None and e.missing_cfg_file:
            group, _, option = str(e.missing_cfg_file).rpartition("/")
            return f"unknown {group} {option!r}; choose from {', '.join(sorted(e.options))}"
        if isinstance(e, OverrideParseException):
            return f"cannot read the override {e.override!r}: {_first(e)}"
    for e in chain:
        if not isinstance(e, OmegaConfBaseException):
            continue
        key = getattr(e, "full_key", None) or ""
        text = _first(e)
        if isinstance(e, (ConfigKeyError, ConfigAttributeError)) and "not in" in text:
            if key.startswith("algorithm."):
                from experiments.schema import unknown_algorithm_option

                name = _algorithm_name(e)
                if name:
                    return unknown_algorithm_option(name, key.split(".", 1)[1])
            return f"unknown key {key}: no code reads it (the keys: docs/config.md)"
        if isinstance(e, MissingMandatoryValue):
            return f"{key} has no value: set it on the command line ({key}=...)"
        if isinstance(e, ValidationError):
            value = re.search(r"Value '(.*)' of type '\w+' could not be converted to (\w+)", text)
            if value and value.group(2) in _TYPE_WORDS:
                return f"{key} must be {_TYPE_WORDS[value.group(2)]}, got {value.group(1)!r}"
            choice = re.search(r"Invalid value '(.*)', expected one of \[(.*)\]", text)
            if choice:
                return f"{key} must be one of {choice.group(2)}, got {choice.group(1)!r}"
            boolean = re.search(r"Value '(.*)' is not a valid bool", text)
            if boolean:
                return f"{key} must be true or false, got {boolean.group(1)!r}"
            if "is not a ListConfig, list or tuple" in text:
                return f"{key} must be a list (e.g. {key}=[0.5,0.75])"
            return f"{key}: {text}" if key else text
        if isinstance(e, InterpolationResolutionError):
            return f"{key}: {text}" if key else text
        return f"{key}: {text}" if key else text
    return _first(error) or type(error).__name__


def _chain(error: BaseException) -> list[BaseException]:
    out: list[BaseException] = []
    e: BaseException | None = error
    while e is not None and e not in out:
        out.append(e)
        e = e.__cause__ or e.__context__
    return out


def _first(error: BaseException) -> str:
    for line in str(error).splitlines():
        if line.strip():
            return line.strip()
    return ""


def _algorithm_name(error: BaseException) -> str | None:
    """The algorithm whose schema refused a key: its schema class is `algorithm_<name>`."""
    object_type = getattr(error, "object_type", None)
    name = getattr(object_type, "__name__", "")
    return name.removeprefix("algorithm_") if name.startswith("algorithm_") else None
