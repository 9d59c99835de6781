"""Mechanisms for m workers in one process, side by side on the same model and data: the numbers
behind the design note of experiments/workers/sim.py.

    python -m benchmarks.sim --workers 4 [--width 8] [--batch 32] [--device cpu] [--reps 10]

Per step of m workers (each its own replica, batch `batch`): forward, cross-entropy, backward,
SGD step (momentum 0.9), of

- `one`: one model on the global batch m x batch (the yardstick: what the papers' "same global
  batch" costs without replicas);
- `sequential`: the m replicas one after the other in one thread;
- `threads`: the m replicas in m threads at once (what `cluster=sim` does, without the suite);
- `vmap`: the m replicas as one batched model (`torch.func.functional_call` under `vmap` over
  stacked parameters and buffers: one grouped kernel per layer), a prototype of the other
  design: the algorithms would have to work on the stacked parameters.

Sides alternate (one, sequential, threads, vmap, one, ...); each side's figure is the low
quantile of its step times (interference only adds time). Prints one JSON object: ms per step
of each side and throughput ratios over `one`.
"""

from __future__ import annotations

import argparse
import copy
import json
import threading
import time

import torch
import torch.nn.functional as F

SIDES = ("one", "sequential", "threads", "vmap")


def measure(
    workers: int, width: int = 8, batch: int = 32, device: str = "cpu", reps: int = 10
) -> dict:
    from benchmarks.harness import low_quantile
    from experiments.training.models import build_model

    dev = torch.device(device)
    channels, size = (1, 8) if device == "cpu" else (3, 32)
    g = torch.Generator().manual_seed(0)

    def model() -> torch.nn.Module:
        return build_model({"name": "resnet18", "width": width}, channels, 10).to(dev)

    def data(n: int):
        x = torch.randn(n, channels, size, size, generator=g).to(dev)
        return x, torch.randint(0, 10, (n,), generator=g).to(dev)

    def sgd(params):
        return torch.optim.SGD(params, lr=0.01, momentum=0.9)

    def step(net, opt, x, y) -> None:
        loss = F.cross_entropy(net(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    one = model()
    one_opt = sgd(one.parameters())
    xb, yb = data(workers * batch)
    replicas = [model() for _ in range(workers)]
    opts = [sgd(r.parameters()) for r in replicas]
    batches = [data(batch) for _ in range(workers)]

    def run_one() -> None:
        step(one, one_opt, xb, yb)

    def run_sequential() -> None:
        for net, opt, (x, y) in zip(replicas, opts, batches, strict=True):
            step(net, opt, x, y)

    def run_threads() -> None:
        threads = [
            threading.Thread(target=step, args=(net, opt, x, y))
            for net, opt, (x, y) in zip(replicas, opts, batches, strict=True)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    from torch.func import functional_call, stack_module_state, vmap

    base = copy.deepcopy(replicas[0]).to("meta")
    params, buffers = stack_module_state(replicas)
    params = {k: v.detach().clone().requires_grad_() for k, v in params.items()}
    buffers = {k: v.clone() for k, v in buffers.items()}
    vmap_opt = sgd(list(params.values()))
    xs = torch.stack([x for x, _ in batches])
    ys = torch.stack([y for _, y in batches])

    def loss_of(p, b, x, y):
        return F.cross_entropy(functional_call(base, (p, b), (x,)), y)

    batched = vmap(loss_of, in_dims=(0, 0, 0, 0), randomness="different")

    def run_vmap() -> None:
        loss = batched(params, buffers, xs, ys).sum()
        vmap_opt.zero_grad(set_to_none=True)
        loss.backward()
        vmap_opt.step()

    runs = {"one": run_one, "sequential": run_sequential, "threads": run_threads, "vmap": run_vmap}
    threads_before = torch.get_num_threads()
    times: dict[str, list[float]] = {side: [] for side in SIDES}
    try:
        for rep in range(reps + 2):  # two warm-up rounds
            for side in SIDES:
                # the replicas' sides: one intra-op thread each (cluster=sim's default with
                # m >= cores); the single model: all cores, as a lone process has them
                torch.set_num_threads(threads_before if side == "one" else 1)
                if dev.type == "cuda":
                    torch.cuda.synchronize(dev)
                t0 = time.perf_counter()
                runs[side]()
                if dev.type == "cuda":
                    torch.cuda.synchronize(dev)
                if rep >= 2:
                    times[side].append(time.perf_counter() - t0)
    finally:
        torch.set_num_threads(threads_before)
    low = {side: low_quantile(t) for side, t in times.items()}
    return {
        "workers": workers,
        "width": width,
        "batch": batch,
        "device": device,
        "ms": {side: 1e3 * t for side, t in low.items()},
        "ratio": {side: low["one"] / t for side, t in low.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.sim", description=__doc__)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--width", type=int, default=8)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--reps", type=int, default=10)
    args = parser.parse_args()
    print(json.dumps(measure(args.workers, args.width, args.batch, args.device, args.reps)))


if __name__ == "__main__":
    main()
