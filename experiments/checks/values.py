"""The pre-flight's checks of a resolved job config's values (experiments/preflight.py,
`validate`): one-line `UserError`s for any value that cannot make a run, before a run directory
exists. Torch-free, as everything the pre-flight checks before the machine (composing the config
is: algorithms/__init__.py), so that bad input is answered without importing torch
(tests/test_torch_free.py). They read the plain record (`experiments.config.schema.record`): a
value is checked here before any code trusts its type."""

from __future__ import annotations

import math
import re
import sys
from typing import Any

import algorithms
from experiments.data import params as data_params
from experiments.errors import UserError
from experiments.workers import options as batched

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


# The workers' streams are seed * 1_000_003 + rank: a 64-bit seed needs seed < 2^32 (every
# seed of a config, and every seed a scale's sweeps list: scale.table_seeds).
SEED_LIMIT = 2**32


def validate(cfg: dict[str, Any]) -> None:
    """Raise UserError (one line) for any value that cannot make a run."""
    validate_finite(cfg)
    for key, value in _seeds(cfg):
        if not _is_int(value) or not 0 <= value < SEED_LIMIT:
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
    if cfg["dtype"] not in DTYPE_MAX:
        raise UserError(f"dtype must be one of {', '.join(DTYPE_MAX)}, got {cfg['dtype']!r}")
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
    validate_budget(cfg)
    from experiments.config import schema
    from experiments.training.clock import Compute, Network  # (numpy: not for --help and such)

    try:  # the clock's own checks, on the nodes typed as the workers' clocks read them
        Network.from_config(schema.Network(**cfg["network"]))
        Compute.from_config(schema.Compute(**cfg["compute"]), cfg["workers"], cfg["seed"])
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
        algorithms.check_compression(name, cfg["comm"]["compression"])
    except (ValueError, TypeError) as e:
        raise UserError(str(e)) from None
    # the data's, the partition's and the model's values (torch-free: the loaders' own checks)
    data_params.check(cfg)


def validate_budget(cfg: dict[str, Any]) -> None:
    """budget=time (experiments/training/budget.py): on the virtual clock, its numbers
    positive. A record made before the budget existed ran on steps."""
    budget = cfg.get("budget") or {"name": "steps"}
    if budget.get("name") not in ("steps", "time"):
        raise UserError(f"budget must be steps or time, got {budget.get('name')!r}")
    if budget["name"] != "time":
        return
    if cfg["timing"] != "virtual":
        raise UserError(
            "budget=time needs timing=virtual: the budget ends on each worker's modeled clock "
            "(docs/timing.md, Budgets); on the real clock use the steps budget"
        )
    for key in ("time_s", "eval_every_s"):
        value = budget.get(key)
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if value is not None and not (number and 0 < value < math.inf):
            raise UserError(
                f"budget.{key} must be null or a positive number of seconds, got {value!r}"
            )
    images = budget.get("eval_images")
    if images is not None and (not _is_int(images) or images < 1):
        raise UserError(
            f"budget.eval_images must be null (every test image) or >= 1, got {images!r}"
        )
    name = cfg["algorithm"]["name"]
    config = algorithms.CONFIGS.get(name)
    if cfg["checkpoint_every"] and config is not None and not config.checkpoint_anywhere:
        raise UserError(
            f"checkpoint_every={cfg['checkpoint_every']} with budget=time: {name}'s workers are "
            "never all at rest before the budget ends, so there is no point to save at; use "
            "checkpoint_every=0"
        )


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
    limit = DTYPE_MAX[cfg["dtype"]]
    for key, value in (cfg.get("algorithm") or {}).items():
        if isinstance(value, float) and math.isfinite(value) and abs(value) > limit:
            raise UserError(
                f"algorithm.{key}={value:g} is beyond what {cfg['dtype']} holds ({limit:.3g})"
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
    k = c["workers_per_gpu"]
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

    for key in ("table_workers", "noniid_table_workers"):
        workers = s.get(key)
        if not _is_int(workers) or workers < 1:
            raise UserError(f"scale.{key} must be an integer >= 1, got {workers!r}")
    seeds = s.get("table_seeds")
    parts = str(seeds).split(",") if isinstance(seeds, str | int) else []
    if not parts or not all(p.strip().isdigit() and int(p) < SEED_LIMIT for p in parts):
        raise UserError(
            f"scale.table_seeds must be seeds separated by commas (0,1,2), got {seeds!r}"
        )
    for key in ("noniid_fraction", "noniid_table_fraction"):
        if not 0 < number(key, s.get(key)) <= 1:
            raise UserError(f"scale.{key} must be in (0, 1], got {s[key]!r}")
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


def check_heterogeneity_applies(cfg: dict[str, Any]) -> None:
    """Slow workers and stragglers (`compute.slowdown`, `compute.straggler_prob`) act on the
    virtual clock (timing=virtual) or, on the real clock, through `emulate_compute=true` (the
    slow workers sleep); on the real clock without it every worker computes at the machine's
    speed and the keys would change nothing but the run's name: refused in one line."""
    compute = cfg["compute"]
    slowdown = compute["slowdown"]
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
