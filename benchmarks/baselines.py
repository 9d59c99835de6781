"""Plain PyTorch on the suite's own config: the yardsticks of the overhead benchmarks.

    python -m benchmarks.baselines ddp    --out R.json [--device cpu|cuda] KEY=VALUE ...
    python -m benchmarks.baselines single --out R.json [--device cpu|cuda] KEY=VALUE ...

The KEY=VALUE overrides are composed with the suite's Hydra config (conf/), so a baseline trains
exactly what `python run.py KEY=VALUE ...` trains: the same model (`experiments.training.models`),
the same data, partition, shards, batch size, DataLoader and seeds, the same optimizer settings and
LR schedule, the same number of steps and the same threads per worker.

- `ddp`: `workers` spawned processes (gloo on CPU, NCCL with one GPU each under --device cuda)
  training `DistributedDataParallel(model, broadcast_buffers=False)`: DDP's bucketed gradient
  all-reduce, overlapped with backward where there is more than one bucket. BatchNorm buffers
  stay local, as in the suite's sync_sgd.
- `single`: one process, no process group, the whole training set (the suite with workers=1).

Timed exactly like `time/train_s` of experiments/training/loop.py: per step, from fetching the batch
to the loss's `.item()` (data + forward/backward/step + communication); start-up and process
creation are not timed. Rank 0's numbers are written to --out as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.nn.functional as F

from benchmarks.harness import REPO

DTYPES = {"float32": torch.float32, "float64": torch.float64}


def compose(overrides: list[str]) -> dict:
    """The suite's resolved config for `overrides`, as run.py would see it (without Hydra's own
    node)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from omegaconf import OmegaConf

    import experiments  # noqa: F401 - the config's schema and resolvers

    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = hydra_compose(config_name="config", overrides=overrides)
    return OmegaConf.to_container(cfg, resolve=True)


def threads_for(cfg: dict, local_workers: int) -> int:
    """The suite's rule (experiments/worker.py): threads_per_worker, else cores / workers."""
    return cfg.get("threads_per_worker") or max(1, (os.cpu_count() or 1) // local_workers)


def train(cfg: dict, rank: int, m: int, device: torch.device, wrap) -> dict:
    """Plain training of this worker's shard; `wrap(model)` returns the module to call."""
    from torch.utils.data import DataLoader, Subset

    from experiments.data.datasets import load_dataset
    from experiments.data.partition import make_partition
    from experiments.training.models import build_model
    from experiments.training.schedule import lr_at

    seed, dtype = cfg["seed"], DTYPES[cfg.get("dtype", "float32")]
    bundle = load_dataset(cfg["dataset"])
    shards = make_partition(cfg["partition"], bundle.train_labels, m, seed)
    torch.manual_seed(seed)
    model = build_model(cfg["model"], bundle.in_channels, bundle.num_classes).to(device, dtype)
    net = wrap(model)
    torch.manual_seed(seed * 1_000_003 + rank + 1)
    num_loader_workers = int(cfg["dataset"].get("num_workers", 0) or 0)
    loader = DataLoader(
        Subset(bundle.train, shards[rank].tolist()),
        batch_size=cfg["batch_size"],
        shuffle=True,
        generator=torch.Generator().manual_seed(seed * 1_000_003 + rank),
        drop_last=False,
        num_workers=num_loader_workers,
        persistent_workers=num_loader_workers > 0,
        pin_memory=device.type == "cuda",
    )
    optimizer = torch.optim.SGD(
        model.parameters(),
        lr=cfg["lr"],
        momentum=cfg["momentum"],
        nesterov=cfg["nesterov"],
        weight_decay=cfg["weight_decay"],
    )
    schedule = {
        k: cfg[k]
        for k in ("lr", "batch_size", "epochs", "warmup_epochs", "lr_decay_at", "lr_decay")
    }
    schedule["workers"] = m
    steps_per_epoch = len(loader)
    step, train_s, data_s, loss_sum = 0, 0.0, 0.0, 0.0
    epochs = []  # (steps, train_s) at the end of each epoch, as the suite's metrics rows
    net.train()
    for _ in range(cfg["epochs"]):
        batches = iter(loader)
        while True:
            t0 = time.perf_counter()
            batch = next(batches, None)
            if batch is None:
                break
            x = batch[0].to(device, dtype=dtype, non_blocking=True)
            y = batch[1].to(device, non_blocking=True)
            t1 = time.perf_counter()
            lr = lr_at(step, steps_per_epoch, **schedule)
            for group in optimizer.param_groups:
                group["lr"] = lr
            loss = F.cross_entropy(net(x), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            loss_sum += loss.item()
            t2 = time.perf_counter()
            data_s += t1 - t0
            train_s += t2 - t0
            step += 1
        epochs.append({"step": step, "time/train_s": train_s})
    return {
        "steps": step,
        "time/train_s": train_s,
        "time/data_s": data_s,
        "loss_sum": loss_sum,
        "rows": epochs,
    }


def _ddp_worker(rank: int, m: int, cfg: dict, out: str, device_kind: str, port: int) -> None:
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from experiments.workers.dist import exit_spawned_worker, place

    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    torch.set_num_threads(threads_for(cfg, m))
    # the suite's placement of the same config (experiments/workers/dist.py): NCCL with one GPU per
    # worker, or gloo on CUDA tensors with cluster.workers_per_gpu > 1
    cluster = cfg["cluster"]
    placement = place(
        cluster["backend"] if device_kind == "cuda" else "gloo",
        rank,
        m,
        device=device_kind,
        workers_per_gpu=cluster.get("workers_per_gpu", 1) if device_kind == "cuda" else 1,
        bound=False,
    )
    backend = placement.backend
    dist.init_process_group(
        backend, rank=rank, world_size=m, timeout=timedelta(seconds=cfg["dist_timeout_s"])
    )
    device = placement.torch_device()
    if device.type == "cuda":
        torch.cuda.set_device(device)

    def wrap(model):
        ids = [device.index] if device.type == "cuda" else None
        return DistributedDataParallel(model, device_ids=ids, **no_buffer_sync())

    try:
        result = train(cfg, rank, m, device, wrap)
        if rank == 0:
            result.update(backend=backend, workers=m, threads=threads_for(cfg, m))
            Path(out).write_text(json.dumps(result))
        dist.barrier()
    finally:
        dist.destroy_process_group()
    exit_spawned_worker()  # as the suite's workers: no gloo teardown abort at exit


def no_buffer_sync() -> dict:
    """DDP's option for "BatchNorm buffers stay local" (synced once at construction, as the
    suite's initial broadcast): `forward_sync_buffers=False` on newer torch, where
    `broadcast_buffers` is deprecated, else `broadcast_buffers=False`."""
    import inspect

    from torch.nn.parallel import DistributedDataParallel

    if "forward_sync_buffers" in inspect.signature(DistributedDataParallel).parameters:
        return {"forward_sync_buffers": False}
    return {"broadcast_buffers": False}


def run_ddp(cfg: dict, out: Path, device_kind: str) -> None:
    import torch.multiprocessing as mp

    from experiments.workers.dist import free_port

    m = cfg["workers"]
    if device_kind == "cuda":  # the placement's one-line error before any worker starts
        from experiments.errors import UserError
        from experiments.workers.dist import place

        cluster = cfg["cluster"]
        try:
            place(
                cluster["backend"],
                0,
                m,
                device="cuda",
                workers_per_gpu=cluster.get("workers_per_gpu", 1),
                bound=False,
            )
        except UserError as e:
            raise SystemExit(f"error: {e}") from None
    mp.start_processes(
        _ddp_worker,
        args=(m, cfg, str(out), device_kind, free_port()),
        nprocs=m,
        join=True,
        start_method="spawn",
    )


def run_single(cfg: dict, out: Path, device_kind: str) -> None:
    torch.set_num_threads(threads_for(cfg, 1))
    device = torch.device("cuda", 0) if device_kind == "cuda" else torch.device("cpu")
    result = train(cfg, 0, 1, device, lambda model: model)
    result.update(backend="none", workers=1, threads=threads_for(cfg, 1))
    out.write_text(json.dumps(result))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.baselines", description=__doc__)
    parser.add_argument("mode", choices=("ddp", "single"))
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("overrides", nargs="*", help="the suite's KEY=VALUE overrides")
    args = parser.parse_intermixed_args(argv)
    cfg = compose(args.overrides)
    if args.mode == "single":
        cfg["workers"] = 1
        run_single(cfg, args.out, args.device)
    else:
        run_ddp(cfg, args.out, args.device)


if __name__ == "__main__":
    main()
