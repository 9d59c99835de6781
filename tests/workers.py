"""Run a function in m real gloo processes on loopback and collect what each returns.

The processes are forked from a forkserver that imported torch and the suite once
(experiments/workers/startup.py), not spawned: the many launches of the test suite then cost no
import each."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from experiments.workers.dist import exit_spawned_worker, free_port
from experiments.workers.startup import context, defer_dynamo


def _entry(
    rank: int, world_size: int, fn: Callable, args: tuple, out_dir: str, port: int, environ: dict
):
    os.environ.clear()
    os.environ.update(environ)  # the test's environment now, not the forkserver's at its start
    defer_dynamo()
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world_size, timeout=timedelta(seconds=60))
    try:
        result = fn(rank, world_size, *args)
        torch.save(result, Path(out_dir) / f"{rank}.pt")
        dist.barrier()
    finally:
        dist.destroy_process_group()
    exit_spawned_worker()  # as run.py's workers: no gloo teardown abort at interpreter exit


def run_workers(fn: Callable, world_size: int, *args) -> list:
    """`fn(rank, world_size, *args)` in `world_size` processes; returns the results by rank.

    `fn` must be importable (a module-level function), since the workers are spawned.
    """
    with tempfile.TemporaryDirectory() as out_dir:
        context()  # the forkserver's preload
        mp.start_processes(
            _entry,
            args=(world_size, fn, args, out_dir, free_port(), dict(os.environ)),
            nprocs=world_size,
            join=True,
            start_method="forkserver",
        )
        return [
            torch.load(Path(out_dir) / f"{r}.pt", weights_only=False) for r in range(world_size)
        ]
