"""Who a worker is and which device it gets, from the launcher's environment (no processes):
SLURM tasks through submitit's environment, and GPU binding with and without SLURM restricting
CUDA_VISIBLE_DEVICES per task."""

from __future__ import annotations

import pytest
import torch

from experiments import dist as d


@pytest.mark.parametrize(
    ("visible", "local_rank", "local_world", "expected"),
    [
        (4, 3, 4, 3),  # every GPU of the node visible: GPU = local rank
        (8, 3, 4, 3),
        (1, 3, 4, 0),  # SLURM bound one GPU to this task: it is GPU 0, not 3
        (2, 3, 4, None),  # fewer GPUs than workers: no GPU per worker
        (0, 0, 1, None),
    ],
)
def test_gpu_index(monkeypatch, visible, local_rank, local_world, expected):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: visible > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: visible)
    assert d.gpu_index(local_rank, local_world) == expected
    backend = d.choose_backend("auto", local_rank, local_world)
    assert backend == ("gloo" if expected is None else "nccl")
    assert d.choose_backend("gloo", local_rank, local_world) == "gloo"


def test_srun_task_identity_and_rendezvous_from_slurm_variables(monkeypatch):
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SUBMITIT_"))}
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    env.pop("CUDA_VISIBLE_DEVICES", None)
    env.update(
        SLURM_JOB_ID="4242",
        SLURM_NTASKS="4",
        SLURM_PROCID="3",
        SLURM_LOCALID="1",
        SLURM_NNODES="2",
        SLURM_JOB_NUM_NODES="2",
        SLURM_NODEID="1",
        SLURM_JOB_NODELIST="n[1-2]",
    )
    monkeypatch.setattr(os, "environ", env)  # what export() writes stays in this copy
    w = d.external_worker()
    assert (w.rank, w.world_size, w.local_rank, w.local_world_size) == (3, 4, 1, 2)
    assert env["MASTER_ADDR"] == "n1"  # the first node of the job
    port = int(env["MASTER_PORT"])
    assert 20000 <= port <= 60000  # derived from the job id: the same on every task ...
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR"):
        env.pop(key)
    env.pop("MASTER_PORT")
    env["SLURM_PROCID"], env["SLURM_LOCALID"], env["SLURM_NODEID"] = "0", "0", "0"
    assert d.external_worker().rank == 0
    assert int(env["MASTER_PORT"]) == port  # ... rank 0 computes the same port
    assert "CUDA_VISIBLE_DEVICES" not in env  # left to SLURM (ecosystem.md sec. 2)
