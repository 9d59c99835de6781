"""What is checked before a run directory exists, and how any config error reads: one line.

`check(config)` takes a composed config (with its `hydra` node) and checks, in order: keys that no
schema declares (Hydra lets `+key=value` add them), interpolations (`tau=${oops}`), then
`check_values`: every value (`validate`, the dataset's, partition's and model's included:
experiments/data/params.py), the fault-injection variable, for `wandb.mode=online` W&B's key and
the server's answer to it (WANDB_CHECK_TIMEOUT_S),
and what a launcher (torchrun, srun) decided against what the config says (world size, nodes,
workers per node); then a key the command line names where it cannot act (`check_inert_keys`,
DEPENDENT_KEYS: `compute.factor` without slow workers, the network on the real clock, ...), and
the modeled clock's keys a preset or scale file set, refused the same way (`set_by_files`), the
data's files where the workers run, and the output root, without making it: writable, not full
(together: `check_config`); then `check_machine`: the model (built on the `meta` device, no
memory), the data and its partition, the devices the backend needs (GPUs). Everything before
`check_machine` is torch-free (as composing the config is: algorithms/__init__.py), so that bad
input is answered without `import torch` (issue 26; tests/test_torch_free.py); `check_machine`
imports torch, which the run needs next anyway; last, the output root is made and written to
(`check_output_root`). It returns the run's directory and identity. A single run calls it from the
Hydra callback `Preflight` (conf/config.yaml: `hydra.callbacks`), after Hydra composed the config
and before it creates the run directory; a sweep calls it for every point
(hydra_plugins/commsgd_sweeper), before launching any; the run itself (experiments/runner.py) calls
`check_job` (both parts) again before any worker starts, for a job that runs elsewhere (a SLURM
array task): it costs nothing more in the same process (the data is cached).

The output root is resolved once, by the `out_dir` resolver (experiments/__init__.py: `~`
expanded, made absolute, refused when empty, holding control characters or a component longer
than 255 bytes); the run directory Hydra makes, the one checked here and the one the run writes
are that one path.

The checks live in experiments/checks/, below both this module and the run
(experiments/runner.py), their names importable from here: the values (checks/values.py), the
launcher, devices, data and model (checks/machine.py) and W&B (checks/wandb_login.py). They read
the job's record (experiments/config/schema.py `record`) value by value, before any code trusts
a type.

`describe(exception)` turns what Hydra and OmegaConf raise while composing or resolving (an
unknown key, a wrong type, a value outside an enum, an unknown group option, a malformed
override, an interpolation error) into the one line printed after `error: `.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

# the checks' own modules (module docstring), their names importable from here as before
from experiments.checks.machine import (  # noqa: F401 - re-exported
    Launcher,
    check_data,
    check_devices,
    check_launcher,
    check_model,
    check_world_size,
    launcher_env,
    launcher_world_size,
    visible_gpus,
)
from experiments.checks.values import (  # noqa: F401 - re-exported
    DTYPE_MAX,
    MAX_TIMEOUT_S,
    MAY_BE_INFINITE,
    PROCESS_DEVICES,
    SLURM_JOB_KEYS,
    TIMINGS,
    WANDB_MODES,
    check_heterogeneity_applies,
    validate,
    validate_algorithm_numbers,
    validate_checkpointing,
    validate_cluster,
    validate_finite,
    validate_scale,
    validate_slurm_job,
)
from experiments.checks.wandb_login import (  # noqa: F401 - re-exported
    OFFLINE_HINT,
    WANDB_CHECK_TIMEOUT_S,
    WANDB_DEFAULT_URL,
    check_wandb,
    has_wandb_credentials,
    wandb_api_key,
    wandb_base_url,
    wandb_login_problem,
)
from experiments.data import params as data_params
from experiments.errors import UserError
from experiments.store.provenance import REPO


def min_free_mb() -> float:
    """Below this many MB free, the output disk is full (COMMSGD_MIN_FREE_MB, default 100)."""
    return float(os.environ.get("COMMSGD_MIN_FREE_MB", 100))


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
    from experiments.config.identity import digest

    plain, run_dir, launcher, here = check_config(config, sweep)
    check_machine(plain, launcher, local=here)
    check_output_root(run_dir.parent)  # creates `runs`: only for a config that passed the rest
    note_outside_out_root(plain, run_dir, sweep)
    return Point(run_dir=run_dir.absolute(), digest=digest(plain), config=plain)


def check_config(
    config: DictConfig, sweep: bool = False
) -> tuple[dict[str, Any], Path, Launcher | None, bool]:
    """Every check of `check` before `check_machine`, torch-free: the keys, the values, the
    launcher, the output root. Returns the resolved job config, the run directory, the launcher
    and whether the workers run on this machine."""
    from experiments import resolved_job
    from experiments.config.schema import check_keys

    check_keys(config)
    check_present(config)
    check_preset(config)
    plain = resolved_job(config)
    # A sweep's jobs may run elsewhere (cluster=slurm: a SLURM array): what depends on the
    # machine that runs the workers (data files, GPUs, the launcher) is each job's to check.
    here = not (sweep and plain["cluster"]["name"] != "local")
    launcher = None if sweep else launcher_env()
    check_values(plain, launcher)
    check_inert_keys(plain, given_keys(config), set_by_files(config))
    if here:  # the data's files, where the workers run (their content: check_machine)
        data_params.check_files(plain["dataset"])
    if sweep:
        run_dir = Path(str(config.hydra.sweep.dir)) / str(config.hydra.sweep.subdir)
    else:
        run_dir = Path(str(config.hydra.run.dir))
    check_output_root_unmade(run_dir.parent)
    check_run_dir_name(run_dir)
    return plain, run_dir, launcher, here


def note_outside_out_root(plain: dict[str, Any], run_dir: Path, sweep: bool = False) -> None:
    """One `warning:` line when `hydra.run.dir` (`hydra.sweep.dir`) puts the run outside
    `<out_root>/runs`, where the suite's readers look for it (the sweep driver's report,
    analysis.runs.status, `make` targets): the run goes where it was asked to, said once."""
    from experiments import out_dir

    try:
        runs = Path(out_dir(plain["out_root"])) / "runs"
    except UserError:
        return
    if run_dir.absolute().parent == runs:
        return
    key = "hydra.sweep.dir" if sweep else "hydra.run.dir"
    print(
        f"warning: {key} puts this run in {run_dir.absolute()}, outside {runs} (out_root's runs):"
        " the reports, analysis.runs.status and the sweep driver that read out_root will not"
        " see it",
        file=sys.stderr,
        flush=True,
    )


def check_preset(config: DictConfig) -> None:
    """`experiment` is an optional group (conf/config.yaml: `optional experiment: null`): Hydra
    silently skips an option it cannot find, so `experiment=tabel1` would run the default
    config under no preset. A named preset must exist."""
    try:
        chosen = config.hydra.runtime.choices.get("experiment")
    except Exception:  # no hydra node (a config composed without it): nothing to check
        return
    if chosen in (None, "null"):
        return
    conf = Path(__file__).resolve().parents[1] / "conf" / "experiment"
    presets = sorted(p.stem for p in conf.glob("*.yaml"))
    if str(chosen) not in presets:
        raise UserError(f"unknown experiment {str(chosen)!r}; choose from {', '.join(presets)}")


def check_present(cfg: DictConfig, prefix: str = "") -> None:
    """Every key the schema declares must be there: `~key` on the command line deletes one,
    and every run needs it (a UserError naming it, not a KeyError inside the checks)."""
    import dataclasses

    from omegaconf import OmegaConf

    schema = OmegaConf.get_type(cfg)
    if not dataclasses.is_dataclass(schema):
        return
    for f in dataclasses.fields(schema):
        if f.name not in cfg:
            key = f"{prefix}{f.name}"
            raise UserError(f"{key} is missing (`~{key}` deletes it): every run needs a value")
        node = cfg._get_node(f.name)
        if isinstance(node, DictConfig) and not node._is_none() and not node._is_missing():
            check_present(node, f"{prefix}{f.name}.")


def check_job(plain: dict[str, Any], launcher: Launcher | None, local: bool = True) -> None:
    """Every check of a resolved job config `plain` that needs no run directory: values, the
    model, the fault-injection variable, W&B, and, where the workers run on this machine
    (`local`), the data, the devices and the `launcher` (None: run.py starts the workers)."""
    check_values(plain, launcher)
    check_machine(plain, launcher, local)


def check_values(plain: dict[str, Any], launcher: Launcher | None) -> None:
    """The checks of `plain` that read only the config and the environment: every value, the
    fault-injection variable, W&B's credentials, the `launcher`. Torch-free (as composing the
    config is: algorithms/__init__.py), so that bad input is answered without importing torch
    (~3 s of each such command before, issue 26; tests/test_torch_free.py)."""
    from experiments.training import faults

    validate(plain)
    faults.check(plain["workers"])
    check_wandb(plain, launcher)
    if launcher is not None:
        check_launcher(plain, launcher)


def check_machine(plain: dict[str, Any], launcher: Launcher | None, local: bool = True) -> None:
    """The checks of `plain` against what torch builds and sees, after every other: the model
    (built on the `meta` device) and, where the workers run on this machine (`local`), the data
    and its partition and the devices. These import torch, which the run imports next anyway."""
    from experiments.workers.startup import import_torch

    import_torch()  # with the stop signals held: a stop meanwhile is delivered once it is done
    if local:
        bundle, _ = check_data(plain)
        check_model(plain, bundle.in_channels, bundle.num_classes)
        check_devices(plain, launcher)
    else:
        check_model(plain, None, None)


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


def check_output_root(runs: Path) -> None:
    """The directory that will hold the run directories must be writable and not full. Called
    only when a run is about to be made (never for --help, --cfg, --info): creating `runs` is
    then what Hydra would do next."""
    try:
        runs.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=runs, prefix=".write-test-"):
            pass
    except OSError as e:
        why = e.strerror or type(e).__name__
        raise UserError(f"output directory {runs} is not writable: {why}") from None
    _check_free(runs, runs)


def check_output_root_unmade(runs: Path) -> None:
    """`check_output_root`'s refusals that need nothing made, for the torch-free checks: the
    nearest existing folder on the way to `runs` must be a directory this process can write (a
    file created there and removed at once: `os.access` says yes for root on /proc) on a disk
    that is not full, each refused in `check_output_root`'s line. `check_output_root` makes
    `runs` later, once the config passed every other check (a refused config makes nothing)."""
    import errno

    path = runs
    while not path.exists() and path != path.parent:
        path = path.parent
    if not path.is_dir():
        why = os.strerror(errno.ENOTDIR)
    elif not os.access(path, os.W_OK | os.X_OK):
        read_only = bool(os.statvfs(path).f_flag & os.ST_RDONLY)
        why = os.strerror(errno.EROFS if read_only else errno.EACCES)
    else:
        try:
            with tempfile.NamedTemporaryFile(dir=path, prefix=".write-test-"):
                pass
        except OSError as e:
            why = e.strerror or type(e).__name__
        else:
            _check_free(runs, path)
            return
    raise UserError(f"output directory {runs} is not writable: {why}")


def _check_free(runs: Path, on: Path) -> None:
    """The disk of `on` (`runs` or its nearest existing folder) must have min_free_mb free."""
    free_mb, needed = shutil.disk_usage(on).free / 2**20, min_free_mb()
    if free_mb < needed:
        raise UserError(
            f"output directory {runs} is full: {free_mb:.1f} MB free, a run needs at least "
            f"{needed:.0f} MB (COMMSGD_MIN_FREE_MB)"
        )


NAME_MAX = 255  # bytes of one path component (Linux, macOS)


def check_run_dir_name(run_dir: Path) -> None:
    """The run directory's own name must fit a file name (its readable part is capped by
    experiments/config/identity.py; an `hydra.run.dir` set by hand may not be)."""
    for part in run_dir.parts:
        if len(part.encode("utf-8", "surrogateescape")) > NAME_MAX:
            raise UserError(
                f"the run directory's path has a component of "
                f"{len(part.encode('utf-8', 'surrogateescape'))} bytes ({part[:40]}...): at "
                f"most {NAME_MAX} bytes"
            )


def given_keys(config: DictConfig) -> list[str]:
    """The keys the command line (or a sweep's point) names, as `key` of each `key=value`
    override in `hydra.overrides.task` (`+`, `++`, `~` stripped; a group's choice is its
    name, `network`); none for a config composed without its `hydra` node."""
    try:
        task = list(config.hydra.overrides.task)
    except Exception:  # no hydra node
        return []
    return [str(item).split("=", 1)[0].lstrip("+~") for item in task]


def _real_clock(cfg: dict[str, Any]) -> bool:
    return cfg["timing"] == "real"


def _checkpointing(cfg: dict[str, Any]) -> bool:
    return cfg["checkpoint_every"] > 0 or bool(cfg["checkpoint"]["on_signal"])


def _slowdown(cfg: dict[str, Any]) -> Any:
    return cfg["compute"]["slowdown"]


# A key that acts only together with another (the schema's comments say which): (the key, as
# named on the command line, or a group; whether it acts in the resolved config; why not). A key
# the command line names where it cannot act is refused in one line (`check_inert_keys`):
# a run would carry it in its name and record while computing what it computes without it.
# `compute.slowdown`, `compute.straggler_prob` (check_heterogeneity_applies), `emulate_network`,
# `emulate_compute`, `nesterov` and `cluster.batched=true` are refused by `validate` already.
DEPENDENT_KEYS: tuple[tuple[str, Any, str], ...] = (
    (
        "network.ps_servers",
        lambda c: c["network"].get("topology") == "ps",
        "network.ps_servers applies to network.topology=ps only (this network's topology is "
        "{network[topology]})",
    ),
    (
        "network",
        lambda c: not _real_clock(c) or bool(c.get("emulate_network")),
        "{key} has no effect on the real clock (timing=real) without emulate_network=true: no "
        "collective waits for the modeled network; add timing=virtual (the modeled clock) or "
        "emulate_network=true",
    ),
    (
        "compute.step_time_s",
        lambda c: not _real_clock(c) or bool(c.get("emulate_compute")),
        "compute.step_time_s has no effect on the real clock (timing=real) without "
        "emulate_compute=true: each step takes what it takes; add timing=virtual (the modeled "
        "clock) or emulate_compute=true",
    ),
    (
        "compute.algo_time_s",
        lambda c: not _real_clock(c),
        "compute.algo_time_s applies to timing=virtual only: the real clock measures the "
        "algorithm's work at every step",
    ),
    (
        "compute.factor",
        lambda c: _slowdown(c) in ("one_slow", "half_slow"),
        "compute.factor applies to compute.slowdown=one_slow or half_slow only (compute.slowdown="
        "{compute[slowdown]})",
    ),
    (
        "compute.sigma",
        lambda c: _slowdown(c) in ("lognormal", "lognormal_steps"),
        "compute.sigma applies to compute.slowdown=lognormal or lognormal_steps only "
        "(compute.slowdown="
        "{compute[slowdown]})",
    ),
    (
        "compute.straggler_factor",
        lambda c: float((c.get("compute") or {}).get("straggler_prob") or 0) > 0,
        "compute.straggler_factor applies only with compute.straggler_prob > 0 (it is "
        "{compute[straggler_prob]})",
    ),
    (
        "checkpoint.poll_steps",
        _checkpointing,
        "checkpoint.poll_steps has no effect with checkpointing off (checkpoint_every=0, "
        "checkpoint.on_signal=false): nothing is polled for",
    ),
    (
        "checkpoint.simulate_signal_at_step",
        _checkpointing,
        "checkpoint.simulate_signal_at_step has no effect with checkpointing off "
        "(checkpoint_every=0, checkpoint.on_signal=false): nothing would be saved to resume from",
    ),
    (
        "cluster.lockstep_seeds",
        lambda c: bool(c["cluster"].get("in_process")),
        "cluster.lockstep_seeds applies to in-process workers (cluster=sim) only: "
        "cluster={cluster[name]} runs each seed alone",
    ),
    (
        "cluster.batched",
        lambda c: bool(c["cluster"].get("in_process")),
        "cluster.batched applies to in-process workers (cluster=sim) only: cluster={cluster[name]} "
        "runs each worker in its own process",
    ),
    (
        "lr_decay_at",
        lambda c: c["lr_decay"] != 1,
        "lr_decay_at has no effect with lr_decay=1 (the LR is multiplied by 1 there)",
    ),
    (
        "lr_decay",
        lambda c: bool(c["lr_decay_at"]),
        "lr_decay has no effect with lr_decay_at=[] (no point to decay at)",
    ),
)


def dependent_key(key: str) -> tuple[str, Any, str] | None:
    """The DEPENDENT_KEYS entry that governs `key` (a group, `network`, governs its keys)."""
    for entry in DEPENDENT_KEYS:
        if key == entry[0] or key.startswith(entry[0] + "."):
            return entry
    return None


# The values of the modeled clock's keys that ask the real clock for nothing (conf/config.yaml's
# own): named anywhere, they are never inert, and they undo a preset's or scale's setting for a
# run on the real clock (`make fig4 timing=real network=ideal compute.step_time_s=measured`).
NEUTRAL: dict[str, tuple[Any, str]] = {
    "network": (lambda c: c["network"].get("name") == "ideal", "network=ideal"),
    "compute.step_time_s": (
        lambda c: c["compute"]["step_time_s"] == "measured",
        "compute.step_time_s=measured",
    ),
    "compute.algo_time_s": (
        lambda c: c["compute"]["algo_time_s"] == "measured",
        "compute.algo_time_s=measured",
    ),
}


def check_inert_keys(
    cfg: dict[str, Any], keys: list[str], by_files: dict[str, str] | None = None
) -> None:
    """A UserError (one line) for the first of `keys` (those the command line names), then of
    `by_files` (key -> `preset <name>` or `scale <name>`: what a preset or scale file changed,
    `set_by_files`), that cannot act in the resolved config `cfg` (DEPENDENT_KEYS): the same
    key is refused the same way wherever it was set, the file's keys with where."""
    named = [(key, "") for key in keys]
    named += [
        (k, f" (set by {w}; {NEUTRAL[k][1]} undoes it)")
        for k, w in (by_files or {}).items()
        if k not in keys
    ]
    for key, where in named:
        entry = dependent_key(key)
        if key in NEUTRAL and NEUTRAL[key][0](cfg):  # asks the clock for nothing
            continue
        if entry is not None and not entry[1](cfg):
            group = cfg.get(key)
            shown = f"{key}={group.get('name')}" if isinstance(group, dict) else key
            raise UserError(entry[2].format(key=shown, **cfg) + where)


CONF_DIR = REPO / "conf"


# The DEPENDENT_KEYS a preset or scale file is held to as the command line is: those of the
# modeled clock, which a file sets for its virtual clock and a `timing=real` leaves inert (with
# an escape: timing=virtual or emulate_*). The others a preset sets for some of its points
# (losp's compute.factor for its one_slow points): refusing them at another point would leave
# no way to run it but editing the preset.
FILE_KEYS = ("network", "compute.step_time_s", "compute.algo_time_s")


def set_by_files(config: DictConfig) -> dict[str, str]:
    """The FILE_KEYS the chosen preset (`experiment`) and `scale` files change from the root
    config (conf/config.yaml): a group they override to another option (`network`), a value
    they set to another value (`compute.step_time_s`), as key -> `preset <name>` or `scale
    <name>`. Why: a network set by a preset on the real clock is as inert as one on the command
    line (issue 50), and is refused the same way. Read from the files (plain YAML), not from
    Hydra: {} for a config without its `hydra` node or a file that cannot be read."""
    try:
        choices = config.hydra.runtime.choices
        chosen = [("experiment", choices.get("experiment")), ("scale", choices.get("scale"))]
    except Exception:  # no hydra node: nothing to attribute
        return {}
    root = _conf_file("config.yaml")
    root_groups = _defaults(root)
    root_values = dict(_flat(root))
    found: dict[str, str] = {}
    for group, name in chosen:
        if name in (None, "null"):
            continue
        data = _conf_file(f"{group}/{name}.yaml")
        where = f"{'preset' if group == 'experiment' else 'scale'} {name}"
        for key, option in _defaults(data).items():
            if option != root_groups.get(key) and _file_key(key):
                found.setdefault(key, where)
        for key, value in _flat(data):
            if value != root_values.get(key, object()) and _file_key(key):
                found.setdefault(key, where)
    return found


@functools.lru_cache(maxsize=64)
def _conf_file(relative: str) -> dict[str, Any]:
    """A file of conf/ as plain YAML, read once per process (a sweep checks every point: the
    same few files each time); {} when it cannot be read (Hydra composed it: an unreadable
    file cannot get here)."""
    import yaml

    try:
        data = yaml.safe_load((CONF_DIR / relative).read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return {}
    return data if isinstance(data, dict) else {}


def _file_key(key: str) -> bool:
    return any(key == k or key.startswith(k + ".") for k in FILE_KEYS)


def _defaults(data: dict[str, Any]) -> dict[str, Any]:
    """A config file's defaults list as group -> option (`override /network: wan` -> network)."""
    out = {}
    for item in data.get("defaults") or []:
        if isinstance(item, dict):
            for key, option in item.items():
                group = str(key).removeprefix("override ").removeprefix("optional ").lstrip("/")
                out[group] = option
    return out


def _flat(data: dict[str, Any], prefix: str = ""):
    """(dotted key, value) of a config file's values, its defaults, `hydra` and `report` aside."""
    for key, value in data.items():
        if not prefix and key in ("defaults", "hydra", "report"):
            continue
        if isinstance(value, dict):
            yield from _flat(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


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
            hint = ""
            if re.search(r"[^\x00-\x7f]|[~ ]", str(e.override or "")):
                key, _, value = str(e.override).partition("=")
                hint = (
                    f" (quote a value holding `~`, spaces or non-ASCII characters: {key}='{value}')"
                )
            return f"cannot read the override {e.override!r}: {_first(e)}{hint}"
    for e in chain:
        if not isinstance(e, OmegaConfBaseException):
            continue
        key = getattr(e, "full_key", None) or ""
        text = _first(e)
        if isinstance(e, (ConfigKeyError, ConfigAttributeError)) and "not in" in text:
            if key.startswith("algorithm."):
                from experiments.config.schema import unknown_algorithm_option

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
