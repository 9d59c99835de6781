"""The pre-flight's checks against the machine and the launcher (experiments/preflight.py,
`check_machine` and `check_launcher`): what a launcher (torchrun, srun) decided, the devices the
placement needs, the data and its partition, and the model built on the `meta` device. Both the
pre-flight and the run (experiments/runner.py) use them. Importing this module imports no torch:
the checks that need it import it when they run."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from experiments.errors import UserError


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
            workers_per_gpu=cluster["workers_per_gpu"],
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


# dataset config -> loaded data (the pre-flight's, reused by the run in the same process)
_DATA: dict[str, Any] = {}


def check_data(cfg: dict[str, Any]):
    """Make sure the data is there and the partition is feasible; return the loaded data and
    the data card. The data is loaded once per process and dataset config (the pre-flight loads
    it, the run in the same process reuses it; a sweep's points share it)."""
    import json

    from experiments.data.datasets import load_dataset, prepare_dataset
    from experiments.data.partition import data_card, make_partition

    key = json.dumps(cfg["dataset"], sort_keys=True, default=str)
    bundle = _DATA.get(key)
    if bundle is None:
        if cfg["dataset"]["name"] == "cifar10":
            prepare_dataset(cfg["dataset"])  # may download; the others are checked by loading
        bundle = load_dataset(cfg["dataset"])
        _DATA.clear()  # one dataset in memory at a time
        _DATA[key] = bundle
    shards = make_partition(cfg["partition"], bundle.train_labels, cfg["workers"])
    if len(shards[0]) < 1:
        raise UserError(f"{cfg['workers']} workers leave no training sample per worker")
    card = data_card(bundle.train_labels, shards, bundle.num_classes)
    card["partition"] = dict(cfg["partition"])
    card["dataset"] = cfg["dataset"]["name"]
    return bundle, card


def check_model(cfg: dict[str, Any], in_channels: int | None, num_classes: int | None) -> None:
    """Build the model as the workers will, on the `meta` device (no memory, no time): a value
    that cannot make it (`model.width=0`) is a UserError here, not in every worker. Without the
    data's shape (a job checked before it runs elsewhere), a stand-in shape checks the values."""
    import torch

    from experiments.training.models import build_model

    with torch.device("meta"):
        try:
            model = build_model(cfg["model"], in_channels or 3, num_classes or 10)
        except UserError:
            raise
        except (ValueError, RuntimeError, TypeError) as e:
            raise UserError(f"model {cfg['model']['name']!r} cannot be built: {e}") from None
    if in_channels is None:  # the workers run elsewhere: their memory is not this machine's
        return
    itemsize = torch.finfo(getattr(torch, cfg["dtype"])).bits // 8
    per_worker = sum(p.numel() for p in model.parameters()) * itemsize
    total = _memory_bytes()
    if total and per_worker * cfg["workers"] > total:
        raise UserError(
            f"model {cfg['model']['name']} with model.width={cfg['model']['width']} has "
            f"{per_worker / 2**30:.3g} GiB of parameters per worker, {cfg['workers']} workers: "
            f"more than this machine's {total / 2**30:.3g} GiB of memory"
        )


def _memory_bytes() -> int | None:
    """This machine's memory (Linux: /proc/meminfo MemTotal), None when unknown."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None
