"""Who a worker is and which device it gets, from the launcher's environment (no processes):
SLURM tasks through submitit's environment, and GPU binding with and without SLURM restricting
CUDA_VISIBLE_DEVICES per task."""

from __future__ import annotations

import pytest
import torch

from experiments.workers import dist as d


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


def _srun_task_env(monkeypatch, ntasks: int, procid: int, localid: int, nodeid: int, **extra):
    """os.environ as srun gives it to one task of a 2-node job (n1, n2), in a copy that
    export() may write to, with no launcher identity of this test process."""
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SUBMITIT_"))}
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    env.pop("CUDA_VISIBLE_DEVICES", None)
    env.update(
        SLURM_JOB_ID="4242",
        SLURM_NTASKS=str(ntasks),
        SLURM_PROCID=str(procid),
        SLURM_LOCALID=str(localid),
        SLURM_NNODES="2",
        SLURM_JOB_NUM_NODES="2",
        SLURM_NODEID=str(nodeid),
        SLURM_JOB_NODELIST="n[1-2]",
        **extra,
    )
    monkeypatch.setattr(os, "environ", env)
    return env


def test_srun_task_identity_and_rendezvous_from_slurm_variables(monkeypatch):
    env = _srun_task_env(monkeypatch, ntasks=4, procid=3, localid=1, nodeid=1)
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


def test_a_rendezvous_inherited_from_the_submitting_shell_is_replaced(monkeypatch, capsys):
    """sbatch exports the submitter's environment: a MASTER_ADDR/MASTER_PORT set there must not
    stop the job (submitit refuses to overwrite them) nor be used; rank 0 says it ignored them."""
    env = _srun_task_env(
        monkeypatch,
        ntasks=2,
        procid=0,
        localid=0,
        nodeid=0,
        MASTER_ADDR="login-node",
        MASTER_PORT="12345",
    )
    w = d.external_worker()
    assert (w.rank, w.world_size) == (0, 2)
    assert env["MASTER_ADDR"] == "n1" and env["MASTER_PORT"] != "12345"
    err = capsys.readouterr().err
    assert "ignoring MASTER_ADDR=login-node, MASTER_PORT=12345" in err


def test_rendezvous_port_check_ignores_time_wait_but_not_a_listener(monkeypatch):
    """A requeued SLURM job derives the same port from the same job id: connections of its
    previous run left in TIME_WAIT must not count as "in use" (TCPStore binds with
    SO_REUSEADDR too); a process listening on the port must."""
    import socket

    from experiments.errors import UserError

    worker = d.Worker(rank=0, world_size=2, local_rank=0, local_world_size=1, external=True)
    monkeypatch.delenv("TORCHELASTIC_USE_AGENT_STORE", raising=False)
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    accepted, _ = server.accept()
    accepted.close()  # the server side closes first: its end of the port goes to TIME_WAIT
    server.close()
    client.close()
    monkeypatch.setenv("MASTER_PORT", str(port))
    d.check_rendezvous_port(worker)  # no error

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        monkeypatch.setenv("MASTER_PORT", str(listener.getsockname()[1]))
        with pytest.raises(UserError, match="already in use"):
            d.check_rendezvous_port(worker)
