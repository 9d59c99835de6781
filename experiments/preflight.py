"""What is checked before a run directory exists, and how any config error reads: one line.

`check(config)` takes a composed config (with its `hydra` node) and checks, in order: keys that
no schema declares (Hydra lets `+key=value` add them), interpolations (`tau=${oops}`), and then
`check_job`: every value (`experiments.runner.validate`), the model (built on the `meta` device,
no memory), the data and its partition, the fault-injection variable, W&B credentials for
`wandb.mode=online`, the devices the backend needs, and what a launcher (torchrun, srun)
decided against what the config says (world size, nodes, workers per node, GPUs); then the
output root. It returns the run's directory and identity. A single run calls it from the Hydra
callback `Preflight` (conf/config.yaml: `hydra.callbacks`), after Hydra composed the config and
before it creates the run directory; a sweep calls it for every point
(hydra_plugins/commsgd_sweeper), before launching any; the run itself
(experiments/runner.py) calls `check_job` again before any worker starts, for a job that runs
elsewhere (a SLURM array task): it costs nothing more in the same process (the data is cached).

The output root is resolved once, by the `out_dir` resolver (experiments/__init__.py: `~`
expanded, made absolute, refused when empty, holding control characters or a component longer
than 255 bytes); the run directory Hydra makes, the one checked here and the one the run writes
are that one path.

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
    from experiments import resolved_job
    from experiments.config.identity import digest
    from experiments.config.schema import check_keys

    check_keys(config)
    check_present(config)
    check_preset(config)
    plain = resolved_job(config)
    # A sweep's jobs may run elsewhere (cluster=slurm: a SLURM array): what depends on the
    # machine that runs the workers (data files, GPUs, the launcher) is each job's to check.
    here = not (sweep and plain["cluster"]["name"] != "local")
    check_job(plain, launcher=None if sweep else launcher_env(), local=here)
    if sweep:
        run_dir = Path(str(config.hydra.sweep.dir)) / str(config.hydra.sweep.subdir)
    else:
        run_dir = Path(str(config.hydra.run.dir))
    check_output_root(run_dir.parent)
    check_run_dir_name(run_dir)
    return Point(run_dir=run_dir.absolute(), digest=digest(plain), config=plain)


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
    from experiments.runner import check_data, check_model, validate
    from experiments.training import faults

    validate(plain)
    faults.check(plain["workers"])
    check_wandb(plain)
    if launcher is not None:
        check_launcher(plain, launcher)
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


# --- the checks -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Launcher:
    """What a launcher that started this process as one worker decided: how many workers in
    all, on how many nodes, how many on this node (None: not said)."""

    name: str  # torchrun | srun
    world_size: int
    rank: int
    nodes: int | None
    local_world_size: int | None


def launcher_env(env: dict[str, str] | None = None) -> Launcher | None:
    """The launcher that started this process (torchrun: RANK/WORLD_SIZE, LOCAL_WORLD_SIZE,
    GROUP_WORLD_SIZE; srun: SLURM_NTASKS > 1, SLURM_PROCID, SLURM_NNODES), or None when run.py
    will start the workers itself. A value that is not a number is a UserError."""
    env = dict(os.environ if env is None else env)

    def number(key: str, default: str | None = None) -> int | None:
        text = env.get(key, default)
        if text is None or text == "":
            return None
        try:
            return int(text)
        except ValueError:
            raise UserError(
                f"the launcher's {key}={text!r} is not a number; unset it to let run.py start "
                "the workers"
            ) from None

    if "RANK" in env and "WORLD_SIZE" in env:
        launcher = Launcher(
            name="torchrun",
            world_size=number("WORLD_SIZE") or 0,
            rank=number("RANK") or 0,
            nodes=number("GROUP_WORLD_SIZE"),
            local_world_size=number("LOCAL_WORLD_SIZE"),
        )
    elif (number("SLURM_NTASKS", "1") or 1) > 1 and "SLURM_PROCID" in env:
        nodes = number("SLURM_STEP_NUM_NODES") or number("SLURM_NNODES")
        per_node = None
        if nodes:
            per_node = -(-(number("SLURM_NTASKS") or 0) // nodes)
        launcher = Launcher(
            name="srun",
            world_size=number("SLURM_NTASKS") or 0,
            rank=number("SLURM_PROCID") or 0,
            nodes=nodes,
            local_world_size=per_node,
        )
    else:
        return None
    if launcher.world_size < 1 or not 0 <= launcher.rank < launcher.world_size:
        raise UserError(
            f"the launcher ({launcher.name}) says rank {launcher.rank} of {launcher.world_size} "
            "workers: not a valid rank"
        )
    return launcher


def launcher_world_size() -> int | None:
    """How many workers a launcher started this process among (torchrun: WORLD_SIZE; srun:
    SLURM_NTASKS), or None when run.py will start the workers itself."""
    launcher = launcher_env()
    return launcher.world_size if launcher is not None else None


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


def check_launcher(cfg: dict[str, Any], launcher: Launcher) -> None:
    """What the launcher decided must be what the config says, or the record would describe
    another run: the world size (`workers`), and with cluster=slurm the node count
    (`cluster.nodes`) and the workers per node (`cluster.tasks_per_node`); a launcher that
    spreads the workers over several nodes needs cluster=slurm (cluster=local is one
    machine)."""
    check_world_size(cfg["workers"], launcher.world_size)
    cluster = cfg["cluster"]
    how = "srun --nodes" if launcher.name == "srun" else "torchrun --nnodes"
    if cluster.get("name") == "slurm":
        if launcher.nodes is not None and launcher.nodes != cluster["nodes"]:
            raise UserError(
                f"the launcher ({launcher.name}) runs the workers on {launcher.nodes} node(s) but "
                f"cluster.nodes={cluster['nodes']}: give run.py cluster.nodes={launcher.nodes}, "
                f"or start it on {cluster['nodes']} node(s) ({how})"
            )
        per_node = launcher.local_world_size
        if per_node is not None and per_node != cluster["tasks_per_node"]:
            raise UserError(
                f"the launcher ({launcher.name}) runs {per_node} workers per node but "
                f"cluster.tasks_per_node={cluster['tasks_per_node']}: give run.py "
                f"cluster.tasks_per_node={per_node}"
            )
    elif launcher.nodes is not None and launcher.nodes > 1:
        raise UserError(
            f"the launcher ({launcher.name}) runs the workers on {launcher.nodes} nodes but "
            f"cluster={cluster.get('name')} is one machine: give run.py cluster=slurm "
            f"cluster.nodes={launcher.nodes}"
        )


def visible_gpus() -> int:
    """How many CUDA devices this process can use (0 without CUDA)."""
    from experiments.workers.dist import visible_gpus as count

    return count()


def check_devices(cfg: dict[str, Any], launcher: Launcher | None) -> None:
    """The placement the config asks for must work on this machine (experiments/workers/dist.py,
    `place`: `cluster.backend`, `cluster.device`, `cluster.workers_per_gpu` against the visible
    GPUs and the workers on this node), checked for every local worker before any starts;
    under SLURM, a job that asked for `cluster.gpus_per_node` GPUs must see some. The
    in-process workers (`cluster=sim`) place themselves (experiments/workers/sim.py)."""
    from experiments.workers.dist import place

    cluster = cfg["cluster"]
    if cluster.get("in_process"):
        return
    local = cfg["workers"] if launcher is None else (launcher.local_world_size or 1)
    bound = launcher is not None and launcher.name == "srun"
    for local_rank in range(local):
        place(
            cluster["backend"],
            local_rank,
            local,
            device=str(cluster.get("device") or "auto"),
            workers_per_gpu=cluster.get("workers_per_gpu", 1),
            bound=bound,
        )
    gpus = visible_gpus()
    wanted = cluster.get("gpus_per_node")
    # Each task may see only its own GPU (SLURM's per-task binding, experiments/workers/dist.py): a
    # task that sees none while the job asked for GPUs is the mismatch.
    if launcher is not None and launcher.name == "srun" and wanted and gpus == 0:
        raise UserError(
            f"cluster.gpus_per_node={wanted} but this task of the job sees no GPU "
            "(CUDA_VISIBLE_DEVICES): the job did not get them; check the sbatch GPU request"
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
        why = e.strerror or type(e).__name__
        raise UserError(f"output directory {runs} is not writable: {why}") from None
    free_mb, needed = shutil.disk_usage(runs).free / 2**20, min_free_mb()
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
