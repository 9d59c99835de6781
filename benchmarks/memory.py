"""Peak memory per worker of each algorithm, in-process (run.py records no memory figures).

For each algorithm, `workers` fresh gloo processes (fresh, because the peak resident set size
`ru_maxrss` of a process only grows). Each worker builds the model and the algorithm's own local
optimizer, then

1. trains `plain_steps` plain steps (forward, backward, optimizer step; no algorithm, no
   communication): its peak RSS is the yardstick, "plain single-process training of the same
   model" in the same process;
2. builds the algorithm on a `Comm` and runs `steps` steps of the loop's hook sequence
   (zero_grad, backward, before_step, step, after_step), then `finish()`: the peak RSS again.

Figures per algorithm: peak / plain peak; the extra peak in model-sized copies
((peak - plain peak) / model bytes); and the model-sized copies the algorithm *holds* between
steps, counted exactly: the bytes of the distinct tensor storages reachable from the algorithm's
attributes (its `state`, in-flight buffers, caches), excluding the model's own parameters,
gradients, buffers and the optimizer's state, divided by the model's parameter bytes.

On CUDA (--device cuda) the same with `torch.cuda.max_memory_allocated()` instead of RSS.
"""

from __future__ import annotations

import json
import os
import resource
import tempfile
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

import torch

from experiments.workers import allocator


def reset_peak(device: torch.device) -> bool:
    """Restart the peak-memory count of this process; False where the OS cannot."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        return True
    try:  # Linux >= 4.0: "5" resets the peak RSS (VmHWM) to the current RSS
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def peak_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device)
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


def held_bytes(algo, exclude: set[int]) -> int:
    """Bytes of the distinct tensor storages reachable from `algo`'s attributes, except the
    storages in `exclude` (model and optimizer) and the model/optimizer/comm objects."""
    from algorithms.comm import Comm

    seen: set[int] = set()
    total = 0
    stack = [v for k, v in vars(algo).items() if k not in ("model", "optimizer", "comm", "cfg")]
    visited: set[int] = set()
    while stack:
        obj = stack.pop()
        if id(obj) in visited:
            continue
        visited.add(id(obj))
        if isinstance(obj, torch.Tensor):
            storage = obj.untyped_storage()
            ptr = storage.data_ptr()
            if ptr and ptr not in exclude and ptr not in seen:
                seen.add(ptr)
                total += storage.nbytes()
        elif isinstance(obj, dict):
            stack.extend(obj.values())
        elif isinstance(obj, list | tuple | set):
            stack.extend(obj)
        elif hasattr(obj, "__dict__") and not isinstance(obj, torch.nn.Module | type | Comm):
            # Pending and similar holders of in-flight buffers
            stack.extend(vars(obj).values())
    return total


def model_storages(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> set[int]:
    ptrs = set()
    for t in list(model.parameters()) + list(model.buffers()):
        ptrs.add(t.untyped_storage().data_ptr())
        if t.grad is not None:
            ptrs.add(t.grad.untyped_storage().data_ptr())
    for state in optimizer.state.values():
        for v in state.values():
            if isinstance(v, torch.Tensor):
                ptrs.add(v.untyped_storage().data_ptr())
    return ptrs


def _measure_one(spec: dict, rank: int, device: torch.device, fresh: bool) -> dict:
    import algorithms
    from algorithms.comm import Comm
    from experiments.training.loop import forward_backward
    from experiments.training.models import build_model

    torch.manual_seed(0)
    c, size, classes = spec["channels"], spec["image_size"], spec["classes"]
    model = build_model(spec["model"], c, classes).to(device)
    name, tau = spec["algorithm"], spec["tau"]
    cls = algorithms.REGISTRY[name]
    acfg = algorithms.make_config(name, spec["options"])
    opt = cls.local_optimizer(acfg, model, lr=0.01, momentum=0.9, nesterov=True, weight_decay=1e-4)
    gen = torch.Generator().manual_seed(rank)
    batches = [
        (
            torch.randn(spec["batch_size"], c, size, size, generator=gen).to(device),
            torch.randint(0, classes, (spec["batch_size"],), generator=gen).to(device),
        )
        for _ in range(max(spec["plain_steps"], spec["steps"]))
    ]
    model_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    if not fresh and not reset_peak(device):
        raise RuntimeError("cannot reset the peak memory count of this process")
    for x, y in batches[: spec["plain_steps"]]:
        forward_backward(model, opt, x, y)
        opt.step()
    plain = peak_bytes(device)

    algo = cls(model, opt, Comm(), acfg, tau=tau)
    held = 0
    for t, (x, y) in enumerate(batches[: spec["steps"]]):
        loss = forward_backward(model, opt, x, y)  # the training loop's own
        algo.before_step(t)
        opt.step()
        algo.after_step(t)
        loss.item()
        held = max(held, held_bytes(algo, model_storages(model, opt)))
    algo.finish()
    peak = peak_bytes(device)
    return {"plain": plain, "peak": peak, "held": held, "model_bytes": model_bytes}


def _worker(rank: int, m: int, specs: list[dict], out_dir: str, port: int, fresh: bool) -> None:
    import gc

    import torch.distributed as dist

    from experiments.workers.dist import exit_spawned_worker

    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    torch.set_num_threads(1)
    cuda = specs[0]["device"] == "cuda"
    backend, device = "gloo", torch.device("cpu")
    if cuda:  # the suite's placement: a GPU each with NCCL, else gloo with GPUs shared
        from experiments.workers.dist import place

        share = -(-m // max(1, torch.cuda.device_count()))
        placement = place("auto", rank, m, device="cuda", workers_per_gpu=share, bound=False)
        backend, device = placement.backend, placement.torch_device()
        torch.cuda.set_device(device)
    dist.init_process_group(backend, rank=rank, world_size=m, timeout=timedelta(seconds=120))
    try:
        results = []
        for spec in specs:
            gc.collect()
            results.append(_measure_one(spec, rank, device, fresh))
            dist.barrier()
        (Path(out_dir) / f"{rank}.json").write_text(json.dumps(results))
        dist.barrier()
    finally:
        dist.destroy_process_group()
    exit_spawned_worker()


def measure(specs: list[dict], workers: int, fresh: bool = False) -> list[list[dict]]:
    """Measure every spec (one algorithm each) in `workers` gloo processes; returns, per spec,
    the results by rank. One set of processes for all specs where the OS can reset the peak
    count (Linux), else (or with `fresh`) fresh processes per spec. `fresh` makes a spec's
    figures independent of the specs before it: in one set of processes the plain phase's
    peak grows from spec to spec (measured on the width-64 ResNet-18, sync_sgd and
    overlap_local_sgd alternating, sync_sgd first: 872, 1044, 1045, 1216, 1216, 1387 MiB, 4
    model copies more at each step from a sync_sgd spec to the next), which lowers the later
    specs' peak / plain, while peak - plain stays the same."""
    # Every allocation of 64 KiB or more gets its own mapping, returned to the OS when freed:
    # a freed buffer of one algorithm cannot hide the next one's allocations from the RSS. (The
    # suite's own setting keeps freed memory, experiments/workers/allocator.py: not here.)
    with _environment(MALLOC_MMAP_THRESHOLD_="65536", **dict.fromkeys(allocator.SETTINGS)):
        return _measure(specs, workers, fresh)


@contextmanager
def _environment(**values: str | None):
    """os.environ with `values` set (None: unset) for the processes started inside."""
    saved = {k: os.environ.get(k) for k in values}
    try:
        _put(values)
        yield
    finally:
        _put(saved)


def _put(values: dict[str, str | None]) -> None:
    for k, v in values.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def _measure(specs: list[dict], workers: int, fresh: bool) -> list[list[dict]]:
    import torch.multiprocessing as mp

    from experiments.workers.dist import free_port

    cpu = torch.device("cpu")
    shared = not fresh and (specs[0]["device"] == "cuda" or reset_peak(cpu))
    groups = [specs] if shared else [[spec] for spec in specs]
    out: list[list[dict]] = []
    for group in groups:
        with tempfile.TemporaryDirectory(prefix="bench-mem-") as out_dir:
            mp.start_processes(
                _worker,
                args=(workers, group, out_dir, free_port(), not shared),
                nprocs=workers,
                join=True,
                start_method="spawn",
            )
            by_rank = [
                json.loads((Path(out_dir) / f"{r}.json").read_text()) for r in range(workers)
            ]
        out.extend([by_rank[r][i] for r in range(workers)] for i in range(len(group)))
    return out
