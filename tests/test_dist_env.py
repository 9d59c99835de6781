"""Who a worker is and which device it gets, from the launcher's environment (no processes):
SLURM tasks through submitit's environment, and GPU binding with and without SLURM restricting
CUDA_VISIBLE_DEVICES per task."""

from __future__ import annotations

import pytest
import torch

from experiments.workers import dist as d


@pytest.mark.parametrize(
    ("visible", "local_rank", "local_world", "bound", "expected"),
    [
        (4, 3, 4, False, 3),  # every GPU of the node visible: GPU = local rank
        (8, 3, 4, False, 3),
        (1, 3, 4, True, 0),  # srun bound one GPU to this task: it is GPU 0, not 3
        (0, 0, 1, False, None),  # no GPU: the CPU
    ],
)
def test_gpu_index(monkeypatch, visible, local_rank, local_world, bound, expected):
    fake_gpus(monkeypatch, visible)
    monkeypatch.setattr(d, "bound_by_srun", lambda env=None: bound)
    assert d.gpu_index(local_rank, local_world) == expected
    backend = d.choose_backend("auto", local_rank, local_world)
    assert backend == ("gloo" if expected is None else "nccl")
    assert d.choose_backend("gloo", local_rank, local_world) == "gloo"
    assert d.device_for("gloo", local_rank, local_world) == torch.device("cpu")


def fake_gpus(monkeypatch, visible: int) -> None:
    """This process sees `visible` CUDA devices (none exists: torch.cuda is faked)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: visible > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: visible)


# --- placement (issue 15 item 4): never a surprise, errors before any worker starts ----------


@pytest.mark.parametrize(
    ("visible", "workers", "keys", "expected"),
    [
        # one GPU per worker with NCCL by default
        (4, 4, {}, [("nccl", 0), ("nccl", 1), ("nccl", 2), ("nccl", 3)]),
        # k workers per GPU, asked for: gloo on CUDA tensors, GPU = rank // k
        (2, 4, {"workers_per_gpu": 2}, [("gloo", 0), ("gloo", 0), ("gloo", 1), ("gloo", 1)]),
        (1, 2, {"workers_per_gpu": 2}, [("gloo", 0), ("gloo", 0)]),
        (1, 2, {"workers_per_gpu": 2, "backend": "gloo"}, [("gloo", 0), ("gloo", 0)]),
        # gloo by name, one per GPU: the CPU (the benchmarks' CPU figures on a GPU machine)
        (4, 4, {"backend": "gloo"}, [("gloo", None)] * 4),
        (2, 2, {"backend": "gloo", "device": "cuda"}, [("gloo", 0), ("gloo", 1)]),
        # no GPU: the CPU, unless a GPU was asked for
        (0, 4, {}, [("gloo", None)] * 4),
        (8, 2, {"device": "cpu"}, [("gloo", None)] * 2),
    ],
)
def test_placement(monkeypatch, visible, workers, keys, expected):
    fake_gpus(monkeypatch, visible)
    backend = keys.pop("backend", "auto")
    got = []
    for r in range(workers):
        p = d.place(backend, r, workers, bound=False, **keys)
        got.append((p.backend, p.gpu))
        assert p.device == ("cpu" if p.gpu is None else "cuda")
    assert got == expected


@pytest.mark.parametrize(
    ("visible", "workers", "cluster", "message"),
    [
        # finding 5: one visible GPU and 4 workers was 4 NCCL ranks on cuda:0
        (1, 4, {}, "4 workers on this node need 4 GPUs at 1 per GPU, 1 visible: set "
         "cluster.workers_per_gpu=4"),
        # ... and 2 GPUs with 4 workers trained silently on the CPU
        (2, 4, {}, "need 4 GPUs at 1 per GPU, 2 visible: set cluster.workers_per_gpu=2"),
        (2, 4, {"backend": "nccl"}, "need 4 GPUs"),
        (2, 6, {"workers_per_gpu": 2}, "6 workers on this node need 3 GPUs at 2 per GPU"),
        (0, 2, {"backend": "nccl"}, "cluster.backend=nccl but no GPU is visible"),
        (0, 2, {"device": "cuda"}, "a GPU but no GPU is visible"),
        (0, 2, {"workers_per_gpu": 2}, "cluster.workers_per_gpu=2 but no GPU is visible"),
        (4, 4, {"backend": "nccl", "workers_per_gpu": 2}, "which NCCL refuses"),
        (4, 2, {"backend": "nccl", "device": "cpu"}, "nccl needs GPUs"),
        (4, 2, {"device": "tpu"}, "cluster.device must be one of auto, cpu, cuda"),
        (4, 2, {"workers_per_gpu": 0}, "workers_per_gpu must be an integer >= 1"),
    ],
)  # fmt: skip
def test_placement_mismatch_is_a_one_line_error_before_any_worker_starts(
    monkeypatch, visible, workers, cluster, message
):
    """The pre-flight check (experiments/preflight.py) refuses the placement in one line
    naming the fix, before a worker exists; the workers' own `place` raises the same."""
    from experiments.errors import UserError
    from experiments.preflight import check_devices

    fake_gpus(monkeypatch, visible)
    monkeypatch.setattr(d, "bound_by_srun", lambda env=None: False)
    node = {"backend": "auto", "device": "auto", "workers_per_gpu": 1, "in_process": False}
    cfg = {"workers": workers, "cluster": {**node, **cluster}}
    with pytest.raises(UserError, match=message.replace("(", r"\(").replace(")", r"\)")) as e:
        check_devices(cfg, None)
    assert "\n" not in str(e.value)
    with pytest.raises(UserError):
        d.device_for(cfg["cluster"]["backend"], 0, workers, cfg["cluster"])


def test_run_py_refuses_a_placement_that_cannot_work_before_starting(monkeypatch, tmp_path):
    """Through the whole pre-flight of a run (config -> checks): the one-line error, and no run
    directory made."""
    from experiments import preflight
    from experiments.errors import UserError
    from tests.test_config import composed

    fake_gpus(monkeypatch, 1)
    cfg = composed("scale=smoke", "dataset=synthetic", "workers=2", f"out_root={tmp_path}")
    with pytest.raises(UserError, match="need 2 GPUs at 1 per GPU, 1 visible"):
        preflight.check_job(cfg, None)
    assert not (tmp_path / "runs").exists()


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
    assert "CUDA_VISIBLE_DEVICES" not in env  # left to SLURM (it may already bind GPUs)


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
