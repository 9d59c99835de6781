"""From a resolved config to a finished run directory.

`run(cfg, run_dir)` is what run.py calls in the Hydra job:
1. validate every value and the data (one-line `UserError`s, before any worker starts);
2. skip the run when its directory already holds a finished result;
3. write the resolved config, the data card and `status: running`;
4. start the workers (or become one, under torchrun/srun) and train;
5. rank 0 writes the final summary; a crash leaves `status: failed`, never `completed`.
"""

from __future__ import annotations

import math
import os
import platform
import time
import traceback
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

import algorithms
from experiments import dist as d
from experiments.clock import make_clock
from experiments.errors import UserError
from experiments.records import (
    CONFIG,
    DATA_CARD,
    git_sha,
    is_finished,
    read_summary,
    update_summary,
    write_json_atomic,
)

DTYPES = {"float32": torch.float32, "float64": torch.float64}
WANDB_MODES = ("disabled", "offline", "online")
TIMINGS = ("real", "virtual")  # timing.md


def validate(cfg: dict[str, Any]) -> None:
    """Raise UserError (one line) for any value that cannot make a run."""
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
    if not 0 <= cfg["momentum"] < 1:
        raise UserError(f"momentum must be in [0, 1), got {cfg['momentum']!r}")
    if cfg["nesterov"] and cfg["momentum"] == 0:
        raise UserError("nesterov=true needs momentum > 0")
    if cfg["weight_decay"] < 0:
        raise UserError(f"weight_decay must be >= 0, got {cfg['weight_decay']!r}")
    if cfg["warmup_epochs"] < 0:
        raise UserError(f"warmup_epochs must be >= 0, got {cfg['warmup_epochs']!r}")
    if any(not 0 < f <= 1 for f in cfg["lr_decay_at"]):
        raise UserError(
            f"lr_decay_at holds fractions of epochs in (0, 1], got {cfg['lr_decay_at']}"
        )
    if cfg.get("dtype", "float32") not in DTYPES:
        raise UserError(f"dtype must be one of {', '.join(DTYPES)}, got {cfg.get('dtype')!r}")
    if cfg["timing"] not in TIMINGS:
        raise UserError(f"timing must be one of {', '.join(TIMINGS)}, got {cfg['timing']!r}")
    if cfg["timing"] == "virtual" and (cfg.get("emulate_network") or cfg.get("emulate_compute")):
        raise UserError("emulate_network / emulate_compute apply to timing=real only")
    try:
        make_clock(cfg, rank=0, m=cfg["workers"])
    except (ValueError, TypeError) as e:
        raise UserError(str(e)) from None
    if cfg["wandb"]["mode"] not in WANDB_MODES:
        raise UserError(f"wandb.mode must be one of {', '.join(WANDB_MODES)}")
    algo = dict(cfg["algorithm"])
    name = algo.pop("name")
    try:
        algorithms.REGISTRY[name].check(algorithms.make_config(name, algo), cfg)
    except (ValueError, TypeError) as e:
        raise UserError(str(e)) from None


def check_data(cfg: dict[str, Any]):
    """Make sure the data is there and the partition is feasible; return the loaded data and
    the data card."""
    from experiments.data import load_dataset, prepare_dataset
    from experiments.partition import data_card, make_partition

    prepare_dataset(cfg["dataset"])
    bundle = load_dataset(cfg["dataset"])
    shards = make_partition(cfg["partition"], bundle.train_labels, cfg["workers"], cfg["seed"])
    if len(shards[0]) < 1:
        raise UserError(f"{cfg['workers']} workers leave no training sample per worker")
    card = data_card(bundle.train_labels, shards, bundle.num_classes)
    card["partition"] = dict(cfg["partition"])
    card["dataset"] = cfg["dataset"]["name"]
    return bundle, card


def run(cfg: DictConfig, run_dir: str | Path) -> str:
    """Run one configuration into `run_dir`; return the final status."""
    run_dir = Path(run_dir)
    plain: dict[str, Any] = OmegaConf.to_container(cfg, resolve=True)
    worker = d.external_worker()
    is_main = worker is None or worker.rank == 0
    if is_finished(run_dir):
        status = read_summary(run_dir)["status"]
        if is_main:
            print(f"skip {run_dir}: already {status}", flush=True)
        return status
    validate(plain)
    if worker is not None and worker.world_size != plain["workers"]:
        # Under torchrun/srun the launcher decides the world size; the record must say so.
        plain["workers"] = worker.world_size
        validate(plain)
    bundle, card = check_data(plain)

    if is_main:
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / CONFIG).write_text(OmegaConf.to_yaml(OmegaConf.create(plain)))
        write_json_atomic(run_dir / DATA_CARD, card)
        update_summary(
            run_dir,
            status="running",
            world_size=plain["workers"],
            git_sha=git_sha(),
            torch_version=torch.__version__,
            host=platform.node(),
            started_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            data_card=card,
        )
        print(
            f"run {run_dir}: {plain['algorithm']['name']} tau={plain['tau']} "
            f"workers={plain['workers']} dataset={plain['dataset']['name']} "
            f"model={plain['model']['name']} epochs={plain['epochs']}",
            flush=True,
        )
    try:
        if worker is None:
            # In-memory datasets travel to the workers with their arguments: loading them again
            # in every process (importing scikit-learn) would cost seconds per run.
            shared = bundle if plain["dataset"]["name"] != "cifar10" else None
            d.spawn(worker_main, plain["workers"], (plain, str(run_dir), shared))
        else:
            worker_main(worker.rank, worker.world_size, plain, str(run_dir), bundle, worker)
    except BaseException as e:
        if is_main:
            update_summary(run_dir, status="failed", error=f"{type(e).__name__}: {e}"[:2000])
        raise
    if not is_main:
        return "completed"
    summary = read_summary(run_dir)
    print(outcome_line(run_dir, summary), flush=True)
    return summary["status"]


def outcome_line(run_dir: Path, s: dict) -> str:
    """One line saying how the run ended, for the console."""
    if s["status"] == "diverged":
        return f"{run_dir}: diverged at step {s.get('diverged_at_step')} (non-finite loss)"
    return (
        f"{run_dir}: {s['status']}  final/test_acc {s['final/test_acc']:.4f}  "
        f"time/train_s {s['time/train_s']:.1f}  comm/bytes {s['comm/bytes']}"
    )


def worker_main(
    rank: int,
    world_size: int,
    cfg: dict,
    run_dir: str,
    bundle=None,
    worker: d.Worker | None = None,
) -> None:
    """Entry point of one worker process."""
    if worker is None:  # spawned by run.py on this machine
        worker = d.Worker(rank, world_size, rank, world_size, external=False)
        os.environ["RANK"], os.environ["WORLD_SIZE"] = str(rank), str(world_size)
    backend = d.choose_backend(cfg["cluster"]["backend"], worker.local_world_size)
    threads = cfg.get("threads_per_worker") or max(
        1, (os.cpu_count() or 1) // worker.local_world_size
    )
    torch.set_num_threads(threads)
    d.init(worker, backend, cfg["dist_timeout_s"])
    clean = False
    try:
        train_worker(cfg, Path(run_dir), worker, backend, bundle)
        clean = True
    except Exception:
        if worker.rank == 0:
            traceback.print_exc()
        raise
    finally:
        d.teardown(clean)
    if not worker.external:  # spawned by run.py: nothing may run after the teardown
        d.exit_spawned_worker()


def train_worker(cfg: dict, run_dir: Path, worker: d.Worker, backend: str, bundle=None) -> None:
    from torch.utils.data import DataLoader, Subset

    from algorithms.comm import Comm
    from experiments.data import load_dataset
    from experiments.log import make_sinks
    from experiments.loop import LoopSettings, train
    from experiments.models import build_model
    from experiments.partition import make_partition

    rank, m, seed = worker.rank, worker.world_size, cfg["seed"]
    device = d.device_for(backend, worker.local_rank)
    dtype = DTYPES[cfg.get("dtype", "float32")]
    comm = Comm(clock=make_clock(cfg, rank, m))

    if bundle is None:
        bundle = load_dataset(cfg["dataset"])
    shards = make_partition(cfg["partition"], bundle.train_labels, m, seed)

    torch.manual_seed(seed)  # identical initial parameters on every worker ...
    model = build_model(cfg["model"], bundle.in_channels, bundle.num_classes).to(device, dtype)
    comm.broadcast_(list(model.parameters()) + list(model.buffers()), src=0)  # ... guaranteed
    torch.manual_seed(seed * 1_000_003 + rank + 1)  # each worker its own augmentation stream

    loader_seed = torch.Generator().manual_seed(seed * 1_000_003 + rank)
    num_loader_workers = int(cfg["dataset"].get("num_workers", 0) or 0)
    train_loader = DataLoader(
        Subset(bundle.train, shards[rank].tolist()),
        batch_size=cfg["batch_size"],
        shuffle=True,
        generator=loader_seed,
        drop_last=False,  # the reference keeps the last partial batch
        num_workers=num_loader_workers,
        persistent_workers=num_loader_workers > 0,
        pin_memory=device.type == "cuda",
    )
    eval_bs = cfg["eval_batch_size"]
    test_full = DataLoader(bundle.test, batch_size=eval_bs)
    test_shard = DataLoader(Subset(bundle.test, range(rank, len(bundle.test), m)), eval_bs)

    schedule = {
        k: cfg[k]
        for k in ("lr", "batch_size", "epochs", "warmup_epochs", "lr_decay_at", "lr_decay")
    }
    schedule["workers"] = m
    name = cfg["algorithm"]["name"]
    algo_cfg = algorithms.make_config(
        name, {k: v for k, v in cfg["algorithm"].items() if k != "name"}
    )
    optimizer = algorithms.REGISTRY[name].local_optimizer(
        algo_cfg,
        model,
        lr=cfg["lr"],
        momentum=cfg["momentum"],
        nesterov=cfg["nesterov"],
        weight_decay=cfg["weight_decay"],
    )
    algo = algorithms.REGISTRY[name](model, optimizer, comm, algo_cfg, tau=cfg["tau"])

    sink = make_sinks(run_dir, cfg, run_dir.name) if rank == 0 else None
    settings = LoopSettings(
        epochs=cfg["epochs"],
        eval_every=cfg["eval_every"],
        schedule=schedule,
        dtype=dtype,
        progress=cfg.get("progress", True),
    )
    try:
        result = train(algo, comm, train_loader, test_full, test_shard, device, settings, sink)
    finally:
        if sink is not None:
            sink.close()
    if rank == 0:
        result["finished_at"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        update_summary(run_dir, **result)  # status completed/diverged: written last
