"""What is checked before a run directory exists, and how any config error reads: one line.

`check(config)` takes a composed config (with its `hydra` node) and checks, in order: keys that no
schema declares (Hydra lets `+key=value` add them), interpolations (`tau=${oops}`), then
`check_values`: every value (`validate`, the dataset's, partition's and model's included:
experiments/data/params.py), the fault-injection variable, for `wandb.mode=online` W&B's key and
the server's answer to it (WANDB_CHECK_TIMEOUT_S),
and what a launcher (torchrun, srun) decided against what the config says (world size, nodes,
workers per node); then a key the command line names where it cannot act (`check_inert_keys`,
DEPENDENT_KEYS: `compute.factor` without slow workers, the network on the real clock, ...), the
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

`describe(exception)` turns what Hydra and OmegaConf raise while composing or resolving (an
unknown key, a wrong type, a value outside an enum, an unknown group option, a malformed
override, an interpolation error) into the one line printed after `error: `.
"""

from __future__ import annotations

import math
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

import algorithms
from experiments.data import params as data_params
from experiments.errors import UserError
from experiments.workers import options as batched


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
    check_inert_keys(plain, given_keys(config))
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
    analysis.status, `make` targets): the run goes where it was asked to, said once."""
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
        " the reports, analysis.status and the sweep driver that read out_root will not see it",
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
    from experiments.runner import check_data, check_model

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


# --- the values ---------------------------------------------------------------------------
# Torch-free, as everything before `check_machine` (module doc): the dtypes by name, with the
# largest finite number each holds (torch.finfo(dtype).max; tests/test_torch_free.py compares).
DTYPE_MAX = {"float32": 3.4028234663852886e38, "float64": sys.float_info.max}
WANDB_MODES = ("disabled", "offline", "online")
TIMINGS = ("real", "virtual")  # timing.md


MAX_TIMEOUT_S = 1e6  # 11 days: longer is no timeout at all (and overflows C timeouts)

# Numbers that may be infinite: an ideal network's bandwidth.
MAY_BE_INFINITE = ("network.bandwidth_gbps",)


def validate_finite(node: Any, prefix: str = "") -> None:
    """No NaN anywhere, no infinity except where it means something (MAY_BE_INFINITE)."""
    if isinstance(node, dict):
        for k, v in node.items():
            validate_finite(v, f"{prefix}{k}.")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            validate_finite(v, f"{prefix}{i}.")
    elif isinstance(node, float) and not math.isfinite(node):
        key = prefix.rstrip(".")
        if math.isnan(node) or key not in MAY_BE_INFINITE:
            raise UserError(f"{key} must be a finite number, got {node}")


def validate(cfg: dict[str, Any]) -> None:
    """Raise UserError (one line) for any value that cannot make a run."""
    validate_finite(cfg)
    for key, value in _seeds(cfg):
        # the workers' streams are seed * 1_000_003 + rank: a 64-bit seed needs seed < 2^32
        if not _is_int(value) or not 0 <= value < 2**32:
            raise UserError(f"{key} must be an integer in [0, 2^32), got {value!r}")
    for key, low in (("workers", 1), ("tau", 1), ("batch_size", 1), ("epochs", 1)):
        value = cfg[key]
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            raise UserError(f"{key} must be an integer >= {low}, got {value!r}")
    for key in ("eval_every", "eval_batch_size"):
        if not isinstance(cfg[key], int) or cfg[key] < 1:
            raise UserError(f"{key} must be an integer >= 1, got {cfg[key]!r}")
    lr = cfg["lr"]
    if not isinstance(lr, int | float) or isinstance(lr, bool) or not lr > 0 or math.isinf(lr):
        raise UserError(f"lr must be a number > 0, got {lr!r}")
    for key in ("momentum", "weight_decay", "warmup_epochs", "lr_decay"):
        if isinstance(cfg[key], bool) or not isinstance(cfg[key], int | float):
            raise UserError(f"{key} must be a number, got {cfg[key]!r}")
    if not 0 <= cfg["momentum"] < 1:
        raise UserError(f"momentum must be in [0, 1), got {cfg['momentum']!r}")
    if cfg["nesterov"] and cfg["momentum"] == 0:
        raise UserError("nesterov=true needs momentum > 0")
    if cfg["weight_decay"] < 0:
        raise UserError(f"weight_decay must be >= 0, got {cfg['weight_decay']!r}")
    if cfg["warmup_epochs"] < 0:
        raise UserError(f"warmup_epochs must be >= 0, got {cfg['warmup_epochs']!r}")
    if not cfg["lr_decay"] > 0:
        raise UserError(f"lr_decay must be > 0, got {cfg['lr_decay']!r}")
    if any(not 0 < f <= 1 for f in cfg["lr_decay_at"]):
        raise UserError(
            f"lr_decay_at holds fractions of epochs in (0, 1], got {cfg['lr_decay_at']}"
        )
    validate_checkpointing(cfg)
    validate_scale(cfg)  # before the clock: sim's compute.step_time_s is the scale's
    t = cfg["dist_timeout_s"]
    if isinstance(t, bool) or not isinstance(t, int | float) or not 0 < t <= MAX_TIMEOUT_S:
        raise UserError(
            f"dist_timeout_s must be a number of seconds in (0, {MAX_TIMEOUT_S:g}], got {t!r}"
        )
    threads = cfg.get("threads_per_worker")
    if threads is not None and (not _is_int(threads) or threads < 1):
        raise UserError(
            f"threads_per_worker must be null (the cores / local workers) or an integer >= 1, "
            f"got {threads!r}"
        )
    validate_cluster(cfg)
    if cfg.get("dtype", "float32") not in DTYPE_MAX:
        raise UserError(f"dtype must be one of {', '.join(DTYPE_MAX)}, got {cfg.get('dtype')!r}")
    if cfg["timing"] not in TIMINGS:
        raise UserError(f"timing must be one of {', '.join(TIMINGS)}, got {cfg['timing']!r}")
    if cfg["timing"] == "virtual" and (cfg.get("emulate_network") or cfg.get("emulate_compute")):
        raise UserError("emulate_network / emulate_compute apply to timing=real only")
    if cfg["cluster"].get("in_process") and cfg["timing"] != "virtual":
        raise UserError(
            f"timing={cfg['timing']} with cluster={cfg['cluster']['name']}: the workers are "
            "threads of one process sharing its cores, so their wall-clock measures nothing; "
            "use timing=virtual (the modeled clock, timing.md)"
        )
    from experiments.training.clock import make_clock  # (numpy: not for --help and the like)

    try:
        make_clock(cfg, rank=0, m=cfg["workers"])
    except (ValueError, TypeError) as e:
        raise UserError(str(e)) from None
    check_heterogeneity_applies(cfg)
    if cfg["wandb"]["mode"] not in WANDB_MODES:
        raise UserError(f"wandb.mode must be one of {', '.join(WANDB_MODES)}")
    validate_algorithm_numbers(cfg)
    algo = dict(cfg["algorithm"])
    name = algo.pop("name")
    try:
        # the Configs only (algorithms/<stem>_config.py): no rule, no torch
        algorithms.make_config(name, algo).check(cfg)
        batched.check(cfg, algorithms.CONFIGS[name])
        algorithms.check_compression(name, (cfg.get("comm") or {}).get("compression", "none"))
    except (ValueError, TypeError) as e:
        raise UserError(str(e)) from None
    # the data's, the partition's and the model's values (torch-free: the loaders' own checks)
    data_params.check(cfg)


def _seeds(cfg: dict[str, Any]) -> list[tuple[str, Any]]:
    """The config's seeds: `seed` and the dataset's (`dataset.seed`, `dataset.split_seed`)."""
    found = [("seed", cfg["seed"])]
    for key in ("seed", "split_seed"):
        if key in (cfg.get("dataset") or {}):
            found.append((f"dataset.{key}", cfg["dataset"][key]))
    return found


def validate_algorithm_numbers(cfg: dict[str, Any]) -> None:
    """An algorithm's knob is used in the training's dtype: a number that dtype cannot hold
    (`algorithm.outer_lr=1e300` in float32) would crash every worker at its first use. (The
    LR and weight decay of the local optimizer overflow to infinity instead, a diverged run:
    experiments/training/schedule.py.)"""
    limit = DTYPE_MAX[cfg.get("dtype", "float32")]
    for key, value in (cfg.get("algorithm") or {}).items():
        if isinstance(value, float) and math.isfinite(value) and abs(value) > limit:
            raise UserError(
                f"algorithm.{key}={value:g} is beyond what {cfg.get('dtype', 'float32')} holds "
                f"({limit:.3g})"
            )


def validate_checkpointing(cfg: dict[str, Any]) -> None:
    every, c = cfg["checkpoint_every"], cfg["checkpoint"]
    if not _is_int(every) or every < 0:
        raise UserError(f"checkpoint_every must be an integer >= 0 (epochs), got {every!r}")
    if every and every % cfg["eval_every"]:
        raise UserError(
            f"checkpoint_every={every} must be a multiple of eval_every={cfg['eval_every']}: "
            "checkpoints are taken at evaluation points, where every worker is at rest"
        )
    if not isinstance(c["on_signal"], bool):
        raise UserError(f"checkpoint.on_signal must be true or false, got {c['on_signal']!r}")
    if not _is_int(c["poll_steps"]) or c["poll_steps"] < 1:
        raise UserError(f"checkpoint.poll_steps must be an integer >= 1, got {c['poll_steps']!r}")
    at = c.get("simulate_signal_at_step")
    if at is not None and (not _is_int(at) or at < 1):
        raise UserError(
            f"checkpoint.simulate_signal_at_step must be null or an integer >= 1, got {at!r}"
        )


def validate_cluster(cfg: dict[str, Any]) -> None:
    c = cfg["cluster"]
    if c.get("in_process"):
        # The device's name here, torch-free; whether this machine has it is check_devices'
        # (torch counts the GPUs: experiments/workers/sim.py device_of).
        spec = str(c.get("device") or "auto")
        if not re.fullmatch(r"auto|cpu(:0)?|cuda(:\d+)?", spec):
            raise UserError(f"cluster.device must be auto, cpu, cuda or cuda:N, got {spec!r}")
        if c.get("name") == "slurm" and (c.get("nodes") != 1 or c.get("tasks_per_node") != 1):
            raise UserError(
                "cluster.in_process=true runs a run's workers in one SLURM task: set "
                "cluster.nodes=1 cluster.tasks_per_node=1 (and cluster.gpus_per_node=1 for a GPU)"
            )
    else:  # worker processes (experiments/workers/dist.py, place: which GPU is whose)
        if str(c.get("device") or "auto") not in PROCESS_DEVICES:
            raise UserError(
                f"cluster.device must be one of {', '.join(PROCESS_DEVICES)}, got "
                f"{c.get('device')!r}"
            )
    k = c.get("workers_per_gpu", 1)
    if not _is_int(k) or k < 1:
        raise UserError(f"cluster.workers_per_gpu must be an integer >= 1, got {k!r}")
    if c.get("name") == "slurm":
        validate_slurm_job(c)
    if c.get("in_process"):
        return  # one SLURM task runs the whole run
    if c.get("name") != "slurm":
        return
    nodes, per_node = c["nodes"], c["tasks_per_node"]
    if not _is_int(nodes) or nodes < 1 or not _is_int(per_node) or per_node < 1:
        raise UserError(
            f"cluster.nodes and cluster.tasks_per_node must be integers >= 1, got {nodes!r} "
            f"and {per_node!r}"
        )
    if nodes * per_node != cfg["workers"]:
        raise UserError(
            f"workers={cfg['workers']} do not fill cluster.nodes={nodes} x "
            f"cluster.tasks_per_node={per_node}: choose workers divisible by the nodes"
        )


PROCESS_DEVICES = ("auto", "cpu", "cuda")  # experiments/workers/dist.py DEVICES
# cluster=slurm's job keys (submitit's): (key, smallest value, whether null is allowed)
SLURM_JOB_KEYS = (
    ("gpus_per_node", 0, True),
    ("cpus_per_task", 1, True),
    ("mem_gb", 1, True),
    ("timeout_min", 1, False),
    ("signal_delay_s", 0, False),
    ("max_num_timeout", 0, False),
    ("array_parallelism", 1, False),
)


def validate_slurm_job(c: dict[str, Any]) -> None:
    """The SLURM job's numbers (what submitit would submit, or refuse after the sweep began)."""
    for key, low, nullable in SLURM_JOB_KEYS:
        value = c.get(key)
        if value is None and nullable:
            continue
        if not _is_int(value) or value < low:
            null = "null or " if nullable else ""
            raise UserError(f"cluster.{key} must be {null}an integer >= {low}, got {value!r}")


def validate_scale(cfg: dict[str, Any]) -> None:
    """The scale's numbers (the presets read them through interpolations: a preset's workers,
    non-IID fraction, modeled step and network)."""
    s = cfg.get("scale") or {}

    def number(key: str, value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise UserError(f"scale.{key} must be a number, got {value!r}")
        return float(value)

    workers = s.get("table_workers")
    if not _is_int(workers) or workers < 1:
        raise UserError(f"scale.table_workers must be an integer >= 1, got {workers!r}")
    if not 0 < number("noniid_fraction", s.get("noniid_fraction")) <= 1:
        raise UserError(f"scale.noniid_fraction must be in (0, 1], got {s['noniid_fraction']!r}")
    if not 0 <= number("target_acc", s.get("target_acc")) <= 1:
        raise UserError(f"scale.target_acc must be in [0, 1], got {s['target_acc']!r}")
    if not number("step_time_s", s.get("step_time_s")) > 0:
        raise UserError(f"scale.step_time_s must be a number > 0, got {s['step_time_s']!r}")
    net = s.get("network") or {}
    if not number("network.latency_s", net.get("latency_s")) >= 0:
        raise UserError(f"scale.network.latency_s must be >= 0, got {net['latency_s']!r}")
    if not number("network.bandwidth_gbps", net.get("bandwidth_gbps")) > 0:
        raise UserError(f"scale.network.bandwidth_gbps must be > 0, got {net['bandwidth_gbps']!r}")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


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
    if cluster.get("in_process"):  # the one device of every worker (sim.py)
        from experiments.workers.sim import check_in_process

        check_in_process(cfg)
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


# --- W&B ----------------------------------------------------------------------------------------
# wandb.mode=online is checked once per command (a sweep's points share it: `_WANDB_ANSWERS`),
# before any work, by asking the W&B server who the key belongs to: no network, a server that
# does not answer within WANDB_CHECK_TIMEOUT_S or a key it refuses is one line and exit 2, rather
# than wandb.init's 90 s wait and a worker's traceback (issue 36 item 4). Stdlib only (torch-free,
# wandb-free: wandb's own login retries for minutes). A W&B lost after this check costs the run
# nothing: experiments/store/log.py goes on offline and never fails a finished run.
WANDB_CHECK_TIMEOUT_S = 8.0  # the whole check: name lookup, connection, TLS, answer
WANDB_DEFAULT_URL = "https://api.wandb.ai"
OFFLINE_HINT = "(or run with wandb.mode=offline and `wandb sync` the records later)"
_WANDB_ANSWERS: dict[tuple[str, str], str | None] = {}  # (url, key) -> problem, None: fine


def wandb_base_url() -> str:
    """The W&B server this process talks to: WANDB_BASE_URL, else W&B's cloud."""
    return os.environ.get("WANDB_BASE_URL", "").strip().rstrip("/") or WANDB_DEFAULT_URL


def wandb_api_key() -> str | None:
    """The key W&B logs in with, without asking: WANDB_API_KEY, or the password of a netrc
    entry for the W&B host (what `wandb login` writes); None without one."""
    key = os.environ.get("WANDB_API_KEY", "").strip()
    if key:
        return key
    host = urlparse(wandb_base_url()).hostname or ""
    try:
        entry = netrc.netrc(os.environ.get("NETRC")).authenticators(host)
    except (OSError, netrc.NetrcParseError):
        return None
    return entry[2] if entry and entry[2] else None


def has_wandb_credentials() -> bool:
    """Whether W&B can log in without asking (`wandb_api_key`)."""
    return wandb_api_key() is not None


def wandb_login_problem(timeout_s: float | None = None) -> str | None:
    """Why W&B online cannot work from here, in a phrase, or None: the server at
    `wandb_base_url()` must answer a query for the key's user within `timeout_s` (default
    WANDB_CHECK_TIMEOUT_S) and know the key. Asked once per server and key in a process."""
    import threading

    timeout_s = WANDB_CHECK_TIMEOUT_S if timeout_s is None else timeout_s
    base, key = wandb_base_url(), wandb_api_key() or ""
    if (base, key) in _WANDB_ANSWERS:
        return _WANDB_ANSWERS[(base, key)]
    answer: list[str | None] = []
    # A thread with a deadline: a socket timeout does not bound the name lookup.
    asking = threading.Thread(
        target=lambda: answer.append(_ask_wandb(base, key, timeout_s)),
        name="commsgd-wandb-check",
        daemon=True,
    )
    asking.start()
    asking.join(timeout_s)
    if answer:
        problem = answer[0]
    else:
        problem = f"W&B at {base} did not answer within {timeout_s:g} s"
    _WANDB_ANSWERS[(base, key)] = problem
    return problem


def _ask_wandb(base: str, key: str, timeout_s: float) -> str | None:
    """One query of the W&B GraphQL API for the key's user: None when it knows the key."""
    import base64
    import http.client
    import json
    import urllib.error
    import urllib.request

    request = urllib.request.Request(
        f"{base}/graphql",
        data=json.dumps({"query": "query CommsgdViewer { viewer { id username } }"}).encode(),
        headers={
            "Content-Type": "application/json",
            "Authorization": "Basic " + base64.b64encode(f"api:{key}".encode()).decode(),
            "User-Agent": "commsgd-bench (W&B login check)",
        },
    )
    rejected = (
        f"W&B at {base} does not accept the API key: check WANDB_API_KEY or run "
        "`wandb login --relogin`"
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            body = response.read(1 << 20)
    except urllib.error.HTTPError as e:
        return rejected if e.code in (401, 403) else f"W&B at {base} answered HTTP {e.code}"
    except (OSError, http.client.HTTPException, ValueError) as e:  # URLError is an OSError
        reason = e.reason if isinstance(e, urllib.error.URLError) else e
        if isinstance(reason, TimeoutError):  # as the deadline says it, whichever comes first
            return f"W&B at {base} did not answer within {timeout_s:g} s"
        return f"cannot reach W&B at {base} ({_reason(reason)})"
    try:
        viewer = (json.loads(body).get("data") or {}).get("viewer")
    except (ValueError, AttributeError):
        return f"{base} does not answer as W&B's API does (check WANDB_BASE_URL)"
    return None if viewer else rejected


def _reason(error: object) -> str:
    """An error's reason in a few words, on one line."""
    if isinstance(error, BaseException):
        text = getattr(error, "strerror", None) or str(error) or type(error).__name__
    else:
        text = str(error)
    return " ".join(text.split())[:200]


def check_wandb(cfg: dict[str, Any], launcher: Launcher | None = None) -> None:
    """wandb.mode=online needs credentials and, where this process logs to W&B (not a worker of
    rank > 0 under a launcher: only rank 0 logs), a W&B that answers and accepts them."""
    if cfg["wandb"]["mode"] != "online":
        return
    if not has_wandb_credentials():
        raise UserError(
            "wandb.mode=online needs W&B credentials: set WANDB_API_KEY or run `wandb login` "
            + OFFLINE_HINT
        )
    if launcher is not None and launcher.rank != 0:
        return
    problem = wandb_login_problem()
    if problem is not None:
        raise UserError(f"wandb.mode=online: {problem} {OFFLINE_HINT}")


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


# --- one line per error ---------------------------------------------------------------------

_TYPE_WORDS = {
    "Integer": "an integer",
    "Float": "a number",
    "Boolean": "true or false",
    "String": "a string",
}


def check_heterogeneity_applies(cfg: dict[str, Any]) -> None:
    """Slow workers and stragglers (`compute.slowdown`, `compute.straggler_prob`) act on the
    virtual clock (timing=virtual) or, on the real clock, through `emulate_compute=true` (the
    slow workers sleep); on the real clock without it every worker computes at the machine's
    speed and the keys would change nothing but the run's name: refused in one line."""
    compute = cfg.get("compute") or {}
    slowdown = compute.get("slowdown", "none")
    slow = slowdown != "none" and not (
        isinstance(slowdown, list) and all(float(x) == 1.0 for x in slowdown)
    )
    stragglers = float(compute.get("straggler_prob") or 0.0) > 0
    if cfg["timing"] != "real" or cfg.get("emulate_compute") or not (slow or stragglers):
        return
    key = f"compute.slowdown={slowdown}" if slow else "compute.straggler_prob"
    raise UserError(
        f"{key} has no effect on the real clock (timing=real) without emulate_compute=true: "
        "every worker computes at this machine's speed; add timing=virtual (the modeled clock) "
        "or emulate_compute=true (the slow workers sleep)"
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
    return (cfg.get("compute") or {}).get("slowdown", "none")


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
        lambda c: _slowdown(c) == "lognormal",
        "compute.sigma applies to compute.slowdown=lognormal only (compute.slowdown="
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


def check_inert_keys(cfg: dict[str, Any], keys: list[str]) -> None:
    """A UserError (one line) for the first of `keys` (those the command line names) that
    cannot act in the resolved config `cfg` (DEPENDENT_KEYS)."""
    for key in keys:
        entry = dependent_key(key)
        if entry is not None and not entry[1](cfg):
            group = cfg.get(key)
            shown = f"{key}={group.get('name')}" if isinstance(group, dict) else key
            raise UserError(entry[2].format(key=shown, **cfg))


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
