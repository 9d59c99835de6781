"""Who am I among the workers, and how the workers come to exist.

Three ways a run gets its m workers:
- `python run.py` on a laptop: run.py spawns `workers` processes itself (`spawn` below);
- `torchrun --nproc-per-node m run.py ...`: each process already has RANK/WORLD_SIZE;
- `srun` (SLURM, also through Hydra's submitit launcher): each task is one worker; rank and
  rendezvous come from submitit's `TorchDistributedEnvironment`, which reads SLURM's variables.

Backend: NCCL with one GPU per worker when CUDA has a GPU for every local worker, else gloo.
Teardown is a barrier then `destroy_process_group()`, so no rank tears down a group another rank
is still using (ecosystem.md: aborts at teardown).
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


@dataclass
class Worker:
    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    external: bool  # started by torchrun/srun rather than by run.py


def external_worker() -> Worker | None:
    """This process's identity when a launcher (torchrun, srun) started it, else None."""
    env = os.environ
    if "RANK" in env and "WORLD_SIZE" in env:  # torchrun, or env:// set up by hand
        return Worker(
            rank=int(env["RANK"]),
            world_size=int(env["WORLD_SIZE"]),
            local_rank=int(env.get("LOCAL_RANK", 0)),
            local_world_size=int(env.get("LOCAL_WORLD_SIZE", env["WORLD_SIZE"])),
            external=True,
        )
    if int(env.get("SLURM_NTASKS", "1")) > 1 and "SLURM_PROCID" in env:
        import submitit

        # Sets MASTER_ADDR (first node), MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK; leaves
        # CUDA_VISIBLE_DEVICES alone because SLURM may already bind GPUs (ecosystem.md, sec. 2).
        denv = submitit.helpers.TorchDistributedEnvironment().export(set_cuda_visible_devices=False)
        return Worker(
            rank=denv.rank,
            world_size=denv.world_size,
            local_rank=denv.local_rank,
            local_world_size=denv.local_world_size,
            external=True,
        )
    return None


def choose_backend(requested: str, local_world_size: int) -> str:
    if requested != "auto":
        return requested
    if torch.cuda.is_available() and torch.cuda.device_count() >= local_world_size:
        return "nccl"
    return "gloo"


def device_for(backend: str, local_rank: int) -> torch.device:
    if backend == "nccl":
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def init(worker: Worker, backend: str, timeout_s: float) -> None:
    dist.init_process_group(
        backend=backend,
        init_method="env://",
        rank=worker.rank,
        world_size=worker.world_size,
        timeout=timedelta(seconds=timeout_s),
    )


def teardown(clean: bool = True) -> None:
    """Leave the process group. After a failure, skip the barrier: peers may be gone."""
    if dist.is_available() and dist.is_initialized():
        try:
            if clean:
                dist.barrier()
        finally:
            dist.destroy_process_group()


def exit_spawned_worker() -> None:
    """End a spawned worker process at once, after its clean teardown, with exit code 0.

    Why: with torch 2.14.1 a gloo process sometimes aborts while the interpreter shuts down
    ("terminate called without an active exception", SIGABRT) after all its work is done and
    the group is destroyed (ecosystem.md; seen here about once in a few hundred process exits).
    The parent would then report a finished run as failed. Skipping the interpreter's shutdown
    (`os._exit`) after everything is written and flushed avoids that C++ teardown.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def free_port() -> int:
    """A TCP port on loopback that nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn(fn: Callable, nprocs: int, args: tuple) -> None:
    """Run `fn(rank, nprocs, *args)` in `nprocs` fresh processes on this machine.

    `torch.multiprocessing.start_processes` joins them and, when one fails, terminates the
    others and raises (`ProcessRaisedException` / `ProcessExitedException`).
    """
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(free_port())
    mp.start_processes(fn, args=(nprocs, *args), nprocs=nprocs, join=True, start_method="spawn")
