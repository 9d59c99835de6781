"""Step-level A/B in the same processes: the noise-robust view of one step's cost.

On a shared machine two runs started a minute apart see different loads, and a 2% target
drowns in that. Here both sides run in the *same* gloo worker processes, alternating in blocks
of a few steps (A B A B ...), so they see the same load; each step is timed on its own and each
side's figure is its median step. Sides (one step = forward, backward, the side's
communication, SGD step, `loss.item()`):

- `ddp`: `DistributedDataParallel(model)` (BatchNorm buffers local);
- `sync_real`: the suite's `SyncSGD` hooks on a `Comm` with the real clock (no emulation):
  gradient buckets averaged during backward (`algorithm.bucket_mb`, default 25);
- `sync_flat`: the same with `bucket_mb=0`: one average of all gradients after backward (the
  suite before issue 15, and the reference implementations);
- `sync_virtual`: the same with the virtual clock (network ideal, measured step time);
- `plain`: no communication at all (the compute floor).

The models of the sides are separate copies with the same initial weights; the data is the
same list of random batches. This is a diagnostic of the hook and communication path: the
loop's own work (data loading, LR schedule, bookkeeping) is measured end to end by the
overhead family against plain PyTorch.
"""

from __future__ import annotations

import copy
import json
import os
import tempfile
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.nn.functional as F

SIDES = ("plain", "ddp", "sync_real", "sync_virtual")  # at width 8; + sync_flat at 64


def _worker(rank: int, m: int, spec: dict, out_dir: str, port: int) -> None:
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    import algorithms
    from algorithms.comm import Comm
    from benchmarks.baselines import no_buffer_sync
    from experiments.training.clock import Compute, Network, RealClock, VirtualClock
    from experiments.training.models import build_model
    from experiments.workers.dist import exit_spawned_worker

    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=m, timeout=timedelta(seconds=300))
    try:
        torch.manual_seed(0)
        c, size = spec["channels"], spec["image_size"]
        base = build_model(spec["model"], c, 10)
        # an ideal network, and each step's own measured time
        measured = Compute(step_time_s=None, slowdown=(1.0,) * m, algo_time_s=None)

        def sgd(model):
            return torch.optim.SGD(
                model.parameters(), lr=0.01, momentum=0.9, nesterov=True, weight_decay=1e-4
            )

        sides = {}
        for name in spec["sides"]:
            model = copy.deepcopy(base)
            opt = sgd(model)
            if name == "ddp":
                sides[name] = (DistributedDataParallel(model, **no_buffer_sync()), opt, None)
            elif name.startswith("sync_"):
                timing = "virtual" if name == "sync_virtual" else "real"
                clock = VirtualClock if timing == "virtual" else RealClock
                comm = Comm(clock=clock(rank, Network(), measured))
                options = {"bucket_mb": 0.0} if name == "sync_flat" else {}
                algo = algorithms.build("sync_sgd", options, model, opt, comm, tau=1)
                sides[name] = (model, opt, algo)
            else:
                sides[name] = (model, opt, None)
        gen = torch.Generator().manual_seed(rank)
        batches = [
            (
                torch.randn(spec["batch_size"], c, size, size, generator=gen),
                torch.randint(0, 10, (spec["batch_size"],), generator=gen),
            )
            for _ in range(spec["block"])
        ]
        times: dict[str, list[float]] = {name: [] for name in sides}
        step = 0
        for block in range(spec["blocks"] + 1):  # block 0: warm-up of every side, not timed
            for name in sides if block % 2 else reversed(list(sides)):
                net, opt, algo = sides[name]
                for x, y in batches:
                    t0 = time.perf_counter()
                    loss = F.cross_entropy(net(x), y)
                    opt.zero_grad(set_to_none=True)
                    loss.backward()
                    if algo is not None:
                        algo.comm.clock.local_step(step, time.perf_counter() - t0)
                        algo.before_step(step)
                    opt.step()
                    if algo is not None:
                        algo.after_step(step)
                    loss.item()
                    if block:
                        times[name].append(time.perf_counter() - t0)
                    step += 1
        (Path(out_dir) / f"{rank}.json").write_text(json.dumps(times))
        dist.barrier()
    finally:
        dist.destroy_process_group()
    exit_spawned_worker()


def measure(spec: dict, workers: int) -> dict[str, list[float]]:
    """Rank 0's per-step times of every side in `spec["sides"]`."""
    import torch.multiprocessing as mp

    from experiments.workers.dist import free_port

    with tempfile.TemporaryDirectory(prefix="bench-steps-") as out_dir:
        mp.start_processes(
            _worker,
            args=(workers, spec, out_dir, free_port()),
            nprocs=workers,
            join=True,
            start_method="spawn",
        )
        return json.loads((Path(out_dir) / "0.json").read_text())
