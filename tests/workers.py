"""Run a function in m real gloo processes on loopback and collect what each returns.

The processes are forked from a forkserver that imported torch and the suite once
(experiments/workers/startup.py), not spawned: the many launches of the test suite then cost no
import each."""

from __future__ import annotations

import os
import tempfile
import threading
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from algorithms.group import ThreadGroup
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


def run_threads(m: int, fn: Callable, *args) -> list:
    """`fn(rank, group, *args)` for every rank in a thread of this process, the ranks talking
    through an in-process `ThreadGroup` (cluster=sim's); returns the results by rank. A
    failure aborts the group (the peers stop waiting) and is raised after every thread ended."""
    groups = ThreadGroup.create(m, timeout_s=60)
    out: list = [None] * m
    errors: list = []

    def run(r):
        try:
            out[r] = fn(r, groups[r], *args)
        except BaseException as e:  # noqa: BLE001 - re-raised below
            errors.append(e)
            groups[r].abort(repr(e))

    threads = [threading.Thread(target=run, args=(r,)) for r in range(m)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return out
