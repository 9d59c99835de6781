"""`cluster.batched`: the forward and backward passes of a run's m in-process workers as one
vectorised call, everything else of each worker as before.

In `cluster=sim` each worker is a thread with its own model replica (experiments/workers/sim.py).
m small models then run one after another through the interpreter and the per-operator overhead
of each (measured: `python -m benchmarks --only sim`, its mechanisms rows). Here the replicas'
parameters and buffers live in one stacked tensor per name, `[m, *shape]`, and one call of
`torch.func.vmap(functional_call)` computes every worker's loss on its own batch, one backward
every worker's gradient: per operator one grouped kernel for all m replicas instead of m calls.

What each worker keeps unchanged: its module (whose parameters and buffers are now views of row
`rank` of the stacked tensors, so its optimizer's in-place update, its algorithm's averages and
its checkpoints read and write the stacked values with no copy), its optimizer, algorithm, data
shard, random streams, evaluation and checkpoints. Only the loop's three lines
`loss = cross_entropy(model(x), y); zero_grad(); loss.backward()` become `forward_backward`:
each worker brings its batch; the last to arrive runs the batched pass for all (in rank order,
as the in-process reducer does, so nothing depends on thread scheduling); each then takes its row
of the stacked gradient as its parameters' `.grad` (a view, no copy) and fires their
gradient-ready hooks, as autograd would have.

The m workers therefore compute every step together, in lock-step. That holds for an algorithm
whose collectives start at the same loop step on every worker: the ones with
`checkpoint_anywhere` (algorithms/base.py). OSP and LOSP push at rank-dependent steps and may
wait, inside a step, for a peer's later push, which a lock-step pass would never let it reach:
they are refused with cluster.batched=true (a one-line error before the run starts), and
`auto` (the default) runs them with a thread per worker, as it does where batching does not
pay (AUTO_MIN_WORKERS_CPU).

Numbers: the same update rules on the same data; the batched kernels sum in another order than
the per-replica ones, so values agree to rounding, not bit for bit (float64: ~1e-15 per step,
tests/test_batched.py). A batch whose shape differs between workers (an epoch's last, partial
batch on shards of unequal size) is computed replica by replica on the same stacked tensors.
A model that draws random numbers in its forward (dropout) is refused by vmap
(`randomness="error"`): its streams could not match the per-replica ones.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, vmap

from algorithms.group import ThreadGroup
from experiments.errors import UserError

# cluster.batched=auto batches on a GPU, and on a CPU from this many workers: measured on 2
# cores (`python -m benchmarks --only sim`), a thread per worker is faster at 4 workers (0.8 of
# one model's speed against 0.5 batched) and slower at 16 (0.3 against 0.5).
AUTO_MIN_WORKERS_CPU = 8
CHOICES = ("auto", "true", "false")


def choice(cfg: dict[str, Any]) -> str:
    """cluster.batched as one of CHOICES (a YAML boolean or its spelling as a string)."""
    return str(cfg["cluster"].get("batched", "auto")).lower()


def check(cfg: dict[str, Any], algorithm_class: type) -> None:
    """One-line errors for a configuration that cluster.batched cannot run."""
    value = choice(cfg)
    if value not in CHOICES:
        raise UserError(
            f"cluster.batched must be auto, true or false, got {cfg['cluster']['batched']!r}"
        )
    if value != "true":
        return
    if not cfg["cluster"].get("in_process"):
        raise UserError(
            "cluster.batched=true batches the workers of one process: it needs "
            "cluster.in_process=true (cluster=sim)"
        )
    if not algorithm_class.checkpoint_anywhere:
        raise UserError(
            f"cluster.batched=true computes every worker's step together, but "
            f"{cfg['algorithm']['name']} starts its collectives at rank-dependent steps "
            "(algorithms/base.py, checkpoint_anywhere): use cluster.batched=false or auto"
        )


def wanted(cfg: dict[str, Any], algorithm_class: type, device: torch.device) -> bool:
    """Whether the in-process workers of `cfg` compute batched: `true`, or `auto` where it
    pays (a GPU; AUTO_MIN_WORKERS_CPU workers or more on a CPU) and the algorithm allows it."""
    value, m = choice(cfg), cfg["workers"]
    if value == "auto":
        pays = device.type == "cuda" or m >= AUTO_MIN_WORKERS_CPU
        return m > 1 and pays and algorithm_class.checkpoint_anywhere
    return value == "true" and m > 1


class BatchedSteps:
    """The stacked replicas of one run's m workers and their batched passes. Build one per run
    (experiments/workers/sim.py); worker `rank` calls `adopt(rank, model)` once, before its
    optimizer and algorithm exist, then `forward_backward(rank, ...)` at every training step."""

    def __init__(self, world_size: int, timeout_s: float):
        self.m = world_size
        # the passes are collectives of their own group (matched by sequence number, failures
        # and timeouts as for the workers' other collectives)
        self.groups = ThreadGroup.create(world_size, timeout_s, name="batched steps")
        self.params: dict[str, torch.Tensor] = {}  # name -> [m, *shape], leaves of autograd
        self.buffers: dict[str, torch.Tensor] = {}  # name -> [m, *shape]
        self._base: nn.Module | None = None  # the structure, on the meta device
        self._own: list[list[tuple[str, nn.Parameter]]] = [[] for _ in range(world_size)]

    def abort(self, message: str, error: type[BaseException]) -> None:
        """Make every worker's wait for a batched pass raise `error(message)` (sim.py)."""
        self.groups[0].abort(message, error)

    # set-up ------------------------------------------------------------------------------------

    def adopt(self, rank: int, model: nn.Module) -> None:
        """Make `model`'s parameters and buffers views of row `rank` of the stacked tensors
        (their values kept). Every worker calls it, with replicas of one architecture."""
        self.groups[rank].collective("adopt", model, self._stack)
        stacked = self.params
        for name, p in list(model.named_parameters()):
            owner, leaf = _owner(model, name)
            view = nn.Parameter(stacked[name].detach()[rank], requires_grad=p.requires_grad)
            owner._parameters[leaf] = view
            self._own[rank].append((name, view))
        for name, _ in list(model.named_buffers()):
            owner, leaf = _owner(model, name)
            owner._buffers[leaf] = self.buffers[name][rank]

    def _stack(self, op) -> None:
        models: list[nn.Module] = op.inputs
        params = [dict(mm.named_parameters()) for mm in models]
        buffers = [dict(mm.named_buffers()) for mm in models]
        for r in range(1, len(models)):
            if list(params[r]) != list(params[0]) or list(buffers[r]) != list(buffers[0]):
                raise RuntimeError(f"worker {r}'s model differs from worker 0's")
        with torch.no_grad():
            self.params = {
                name: torch.stack([named[name] for named in params])
                .detach()
                .requires_grad_(p.requires_grad)
                for name, p in params[0].items()
            }
            self.buffers = {
                name: torch.stack([named[name] for named in buffers]) for name in buffers[0]
            }
        self._base = copy.deepcopy(models[0]).to("meta")

        def loss_of(params, buffers, x, y):
            return F.cross_entropy(functional_call(self._base, (params, buffers), (x,)), y)

        self._loss_of = loss_of
        self._batched = vmap(loss_of, randomness="error")

    # every step --------------------------------------------------------------------------------

    def forward_backward(
        self,
        rank: int,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        x: torch.Tensor,
        y: torch.Tensor,
    ) -> torch.Tensor:
        """The loop's `loss = cross_entropy(model(x), y); optimizer.zero_grad();
        loss.backward()` for worker `rank`, computed with every other worker's in one pass.
        Returns this worker's loss (detached)."""
        optimizer.zero_grad(set_to_none=True)
        losses = self.groups[rank].collective("step", (x, y, model.training), self._step)
        for name, p in self._own[rank]:
            grad = self.params[name].grad
            p.grad = None if grad is None else grad[rank]
        # What autograd does after accumulating a leaf's gradient (sync_sgd's bucket hooks),
        # in the order a backward pass reaches them (the last layer first).
        for _, p in reversed(self._own[rank]):
            for hook in (getattr(p, "_post_accumulate_grad_hooks", None) or {}).values():
                hook(p)
        return losses[rank]

    def _step(self, op) -> torch.Tensor:
        xs = [x for x, _, _ in op.inputs]
        ys = [y for _, y, _ in op.inputs]
        modes = {training for _, _, training in op.inputs}
        if len(modes) != 1:
            raise RuntimeError("the workers' models are not all in the same train/eval mode")
        assert self._base is not None
        self._base.train(modes.pop())
        for p in self.params.values():
            p.grad = None
        with torch.enable_grad():
            if len({(x.shape, y.shape) for x, y in zip(xs, ys, strict=True)}) == 1:
                losses = self._batched(self.params, self.buffers, torch.stack(xs), torch.stack(ys))
            else:  # shapes differ (a last, partial batch): replica by replica
                losses = torch.stack(
                    [
                        self._loss_of(
                            {n: t[r] for n, t in self.params.items()},
                            {n: t[r] for n, t in self.buffers.items()},
                            xs[r],
                            ys[r],
                        )
                        for r in range(self.m)
                    ]
                )
            losses.sum().backward()  # d(sum)/d(loss_r) = 1: each replica gets its own gradient
        return losses.detach()


def _owner(model: nn.Module, dotted: str) -> tuple[nn.Module, str]:
    path, _, leaf = dotted.rpartition(".")
    return (model.get_submodule(path) if path else model), leaf
