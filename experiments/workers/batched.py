"""`cluster.batched`: the forward and backward passes of a run's m in-process workers as one
vectorised call, everything else of each worker as before.

In `cluster=sim` each worker is a thread with its own model replica (experiments/workers/sim.py).
m small models then run one after another through the interpreter and the per-operator overhead
of each (measured: `python -m benchmarks --only sim`, its mechanisms rows). Here the replicas'
parameters and buffers live in one stacked tensor per name, `[m, *shape]`, and one forward
computes every worker's loss on its own batch, one backward every worker's gradient: per
operator one grouped kernel for all m replicas instead of m calls. The suite's models
(`replicas_groupable`, experiments/training/models.py) run as one model with m times the
channels, each layer grouped by replica (`_grouped`); any other model through
`torch.func.vmap(functional_call)`, the same arithmetic with ~25% more time (its batching
rules move the replica dimension around every layer).

What each worker keeps unchanged: its module (whose parameters and buffers are now views of row
`rank` of the stacked tensors, so its optimizer's in-place update, its algorithm's averages and
its checkpoints read and write the stacked values with no copy), its optimizer, algorithm, data
shard, random streams, evaluation and checkpoints. Two steps of the loop are batched. Its
three lines `loss = cross_entropy(model(x), y); zero_grad(); loss.backward()` become
`forward_backward`: each worker brings its batch; the last to arrive runs the batched pass for
all (in rank order, as the in-process reducer does, so nothing depends on thread scheduling);
each then takes its row of the stacked gradient as its parameters' `.grad` (a view, no copy)
and fires their gradient-ready hooks, as autograd would have. Its `optimizer.step()` becomes
`optimizer_step`: when the m optimizers are torch SGD with the same settings over the workers'
own parameters (every algorithm's local optimizer), one call of torch's SGD on the stacked
parameters, gradients and momentum buffers updates all m, each worker's optimizer state then
holding its row of the stacked buffer; otherwise (settings that differ, another optimizer,
step hooks) each worker steps its own, as unbatched. Whatever the algorithm's hooks do between
the two (average gradients, replace them) they do on the worker's own tensors, as before.

The m workers therefore compute every step together, in lock-step. That holds for an algorithm
whose collectives start at the same loop step on every worker: the ones with
`checkpoint_anywhere` (algorithms/base.py). OSP and LOSP push at rank-dependent steps and may
wait, inside a step, for a peer's later push, which a lock-step pass would never let it reach:
they are refused with cluster.batched=true (a one-line error before the run starts), and
`auto` (the default) runs them with a thread per worker, as it does where batching does not
pay (AUTO_MIN_WORKERS_CPU). Their seeds in lock-step batch rank by rank instead: one
`BatchedSteps` per rank over that rank's S replicas, one worker per run (`block=1`,
experiments/workers/sim.py `by_rank`).

Numbers: the same update rules on the same data; the batched kernels sum in another order than
the per-replica ones, so values agree to rounding, not bit for bit (float64: ~1e-15 per step,
tests/test_batched.py). A batch whose shape differs between workers (an epoch's last, partial
batch on shards of unequal size) is computed replica by replica on the same stacked tensors.
Evaluation is batched too (`loss_and_correct`): the workers' own models from their rows, a
consensus copy's parameters stacked for the pass.

Seeds in lock-step (`block`, experiments/workers/sim.py `run_lockstep`): the S runs of a sweep
that differ only in their seed stack their S x m replicas here. Each replica's numbers are then
the ones its run computes alone (batched over its own m), bit for bit in float64
(tests/test_lockstep.py, every algorithm that computes in lock-step): a grouped convolution
computes each group apart whatever the number of groups, and everything that would reduce
across replicas is laid out per replica (the linear head as one matrix product per replica,
the loss replica by replica, the optimizer step one call per run, a run with a partial batch
computed as that run alone computes it). In float32 oneDNN picks its convolution kernels by
the number of groups: to rounding (~1e-7 relative, tests/test_lockstep.py FLOAT32_RTOL).
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
from torch.optim.optimizer import _global_optimizer_post_hooks, _global_optimizer_pre_hooks
from torch.optim.sgd import sgd
from torch.utils._foreach_utils import _get_fused_kernels_supported_devices

from algorithms.group import ThreadGroup
from experiments.workers.options import AUTO_MIN_WORKERS_CPU, choice, lockstep_seeds


def wanted(cfg: dict[str, Any], algorithm_class: type, device: torch.device) -> bool:
    """Whether the in-process workers of `cfg` compute batched: `true`, or `auto` where it
    pays (a GPU; AUTO_MIN_WORKERS_CPU workers or more on a CPU; seeds in lock-step, where a
    seed alone must compute as it does among the others) and the algorithm allows it."""
    value, m = choice(cfg), cfg["workers"]
    if value == "auto":
        pays = device.type == "cuda" or m >= AUTO_MIN_WORKERS_CPU or lockstep_seeds(cfg) > 1
        return m > 1 and pays and algorithm_class.checkpoint_anywhere
    return value == "true" and m > 1


class BatchedSteps:
    """The stacked replicas of one run's m workers and their batched passes. Build one per run
    (experiments/workers/sim.py); worker `rank` calls `adopt(rank, model)` once, before its
    optimizer and algorithm exist, then `forward_backward(rank, ...)` at every training step.

    Seeds in lock-step: `block` < `world_size` stacks S = world_size / block runs of `block`
    workers each (rank = seed's index x block + the worker's rank in its run). Every replica's
    numbers are then those of its run computed alone, bit for bit: the pass over all S x m
    replicas computes each replica's rows exactly as the pass over its own run's m (grouped
    kernels, and a head laid out per replica: `_GroupedLinear`, `_grouped_losses`), a step
    where a run's shapes differ is computed run by run as that run alone would compute it, and
    the optimizer step is one update per run (the fused kernel's vectorised body and scalar tail
    split a longer tensor elsewhere). A run that ends (diverged, failed) `leave`s; the others
    go on without it."""

    def __init__(self, world_size: int, timeout_s: float, block: int | None = None):
        self.m = world_size
        self.block = block or world_size
        if self.m % self.block:
            raise ValueError(f"{world_size} replicas are not whole runs of {block} workers")
        # the passes are collectives of their own group (matched by sequence number, failures
        # and timeouts as for the workers' other collectives)
        self.groups = ThreadGroup.create(world_size, timeout_s, name="batched steps")
        self.params: dict[str, torch.Tensor] = {}  # name -> [m, *shape], leaves of autograd
        self.buffers: dict[str, torch.Tensor] = {}  # name -> [m, *shape]
        self._base: nn.Module | None = None  # the structure, on the meta device
        self._grouped: dict[int, nn.Module | None] = {}  # k -> k replicas as one grouped model
        self.grouped = False  # whether the passes are grouped (else vmapped): set by `adopt`
        self._own: list[list[tuple[str, nn.Parameter]]] = [[] for _ in range(world_size)]
        self._modules: list[nn.Module | None] = [None] * world_size  # each worker's own
        self._name_of: list[dict[int, str]] = [{} for _ in range(world_size)]  # id(param) -> name
        # (run, name) -> [block, *shape], the SGD buffers of one run's workers, and their rows
        self.momentum: dict[tuple[int, str], torch.Tensor] = {}
        self._buffer_rows: dict[tuple[int, str], tuple[torch.Tensor, ...]] = {}
        self._grad_rows: dict[str, tuple[torch.Tensor, ...]] = {}  # name -> the last pass's rows

    def abort(self, message: str, error: type[BaseException]) -> None:
        """Make every worker's wait for a batched pass raise `error(message)` (sim.py)."""
        self.groups[0].abort(message, error)

    def leave(self, rank: int) -> None:
        """Worker `rank` has stopped training (its run ended, diverged or failed): the passes
        go on without it (algorithms/group.py, `Rendezvous.leave`)."""
        self.groups[0].rendezvous.leave(rank)

    # set-up ------------------------------------------------------------------------------------

    def adopt(self, rank: int, model: nn.Module) -> None:
        """Make `model`'s parameters and buffers views of row `rank` of the stacked tensors
        (their values kept). Every worker calls it, with replicas of one architecture."""
        self.groups[rank].collective("adopt", model, self._stack)
        self._modules[rank] = model
        stacked = self.params
        for name, p in list(model.named_parameters()):
            owner, leaf = _owner(model, name)
            view = nn.Parameter(stacked[name].detach()[rank], requires_grad=p.requires_grad)
            owner._parameters[leaf] = view
            self._own[rank].append((name, view))
            self._name_of[rank][id(view)] = name
        for name, _ in list(model.named_buffers()):
            owner, leaf = _owner(model, name)
            owner._buffers[leaf] = self.buffers[name][rank]

    def _stack(self, op) -> None:
        # a worker that left before adopting (its run failed in set-up): a placeholder row
        present = next(mm for mm in op.inputs if mm is not None)
        models: list[nn.Module] = [present if mm is None else mm for mm in op.inputs]
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
        # every replica's loss on its batch, in one pass: grouped where the model allows it
        self.grouped = self._grouped_model(self.m) is not None
        if self.grouped:
            self._batched = self._grouped_losses
        else:
            self._batched = vmap(loss_of, randomness="error")

    def _grouped_model(self, k: int) -> nn.Module | None:
        """The model as k replicas in one grouped model (None: not groupable), built once per k
        (the whole stack; one run's block when the runs compute apart)."""
        if k not in self._grouped:
            assert self._base is not None
            self._grouped[k] = _grouped(self._base, k)
        return self._grouped[k]

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
        assert losses[rank] is not None
        rows = self._grad_rows
        for name, p in self._own[rank]:
            p.grad = rows[name][rank] if name in rows else None
        # What autograd does after accumulating a leaf's gradient (sync_sgd's bucket hooks),
        # in the order a backward pass reaches them (the last layer first).
        for _, p in reversed(self._own[rank]):
            for hook in (getattr(p, "_post_accumulate_grad_hooks", None) or {}).values():
                hook(p)
        return losses[rank]

    def _step(self, op) -> list[torch.Tensor | None]:
        inputs = op.inputs  # None: a worker that left
        present = [r for r, v in enumerate(inputs) if v is not None]
        modes = {inputs[r][2] for r in present}
        if len(modes) != 1:
            raise RuntimeError("the workers' models are not all in the same train/eval mode")
        assert self._base is not None
        training = modes.pop()
        self._base.train(training)
        for grouped in self._grouped.values():
            if grouped is not None:
                grouped.train(training)
        for p in self.params.values():
            p.grad = None

        shapes = [None if v is None else (v[0].shape, v[1].shape) for v in inputs]
        calls = self._calls(shapes)
        losses: list[torch.Tensor | None] = [None] * self.m
        with torch.enable_grad():
            computed = []
            for rows, one_pass in calls:
                a, b = rows.start, rows.stop
                if one_pass:
                    xs = torch.stack([inputs[r][0] for r in rows])
                    ys = torch.stack([inputs[r][1] for r in rows])
                    every = b - a == self.m
                    params = self.params if every else {n: t[a:b] for n, t in self.params.items()}
                    buffers = (
                        self.buffers if every else {n: t[a:b] for n, t in self.buffers.items()}
                    )
                    out = self._batched(params, buffers, xs, ys)
                else:
                    x, y, _ = inputs[a]
                    params = {n: t[a] for n, t in self.params.items()}
                    out = self._loss_of(
                        params, {n: t[a] for n, t in self.buffers.items()}, x, y
                    ).unsqueeze(0)
                computed.append(out)
                for r, loss in zip(rows, out.detach().unbind(0), strict=True):
                    losses[r] = loss
            # d(sum)/d(loss_r) = 1: each replica gets its own gradient
            torch.cat(computed).sum().backward()
        self._grad_rows = {
            name: p.grad.unbind(0) for name, p in self.params.items() if p.grad is not None
        }
        return losses

    def _calls(self, shapes: list[Any]) -> list[tuple[range, bool]]:
        """How to compute a pass whose replicas bring inputs of `shapes` (None: a replica that
        left): [(replicas, whether in one batched pass)]. Each run as it computes alone: one
        pass over its block when all of its workers are here with inputs of one shape, else
        replica by replica (a last, partial batch); when every run's block is one pass of one
        shape, one pass for all (the same numbers, fewer calls)."""
        runs = [range(a, a + self.block) for a in range(0, self.m, self.block)]
        whole = [
            None not in (kinds := {shapes[r] for r in run}) and len(kinds) == 1 for run in runs
        ]
        if all(whole) and len(set(shapes)) == 1:
            return [(range(0, self.m), True)]
        calls = []
        for run, one_pass in zip(runs, whole, strict=True):
            if one_pass:
                calls.append((run, True))
            else:
                calls += [(range(r, r + 1), False) for r in run if shapes[r] is not None]
        return calls

    def loss_and_correct(
        self,
        rank: int,
        model: nn.Module,
        loader,
        device: torch.device,
        dtype: torch.dtype,
    ) -> tuple[float, int, int]:
        """experiments/training/evaluate.py's `loss_and_correct` for worker `rank`, computed
        with every other worker's in batched passes: `model` is the worker's own module (its
        row of the stacked replicas) or a model of the same structure (a consensus copy),
        stacked for the pass. Every worker calls it at the same point of the loop."""
        batches = [(x.to(device, dtype=dtype), y.to(device)) for x, y in loader]
        out = self.groups[rank].collective("evaluate", (model, batches), self._evaluate)
        return out[rank]

    @torch.no_grad()
    def _evaluate(self, op) -> list[tuple[float, int, int] | None]:
        inputs = op.inputs
        present = next(v[0] for v in inputs if v is not None)
        models = [present if v is None else v[0] for v in inputs]
        if all(self._still_own(r, mm) for r, mm in enumerate(models) if inputs[r] is not None):
            params, buffers = self.params, self.buffers
        else:  # copies (a consensus): their parameters stacked for the pass
            named = [dict(mm.named_parameters()) for mm in models]
            kept = [dict(mm.named_buffers()) for mm in models]
            params = {n: torch.stack([d[n] for d in named]) for n in self.params}
            buffers = {n: torch.stack([d[n] for d in kept]) for n in self.buffers}
        assert self._base is not None
        self._base.eval()
        for grouped in self._grouped.values():
            if grouped is not None:
                grouped.eval()
        shapes = [None if v is None else tuple((x.shape, y.shape) for x, y in v[1]) for v in inputs]
        results: list[tuple[float, int, int] | None] = [None] * self.m
        for rows, one_pass in self._calls(shapes):
            a, b = rows.start, rows.stop
            sums = [[0.0, 0, 0] for _ in rows]
            part_p = {n: t[a:b] for n, t in params.items()}
            part_b = {n: t[a:b] for n, t in buffers.items()}
            for j in range(len(inputs[a][1])):
                xs = torch.stack([inputs[r][1][j][0] for r in rows])
                ys = torch.stack([inputs[r][1][j][1] for r in rows])
                logits = self._logits(part_p, part_b, xs, one_pass)  # [k, B, classes]
                for i, (out, target) in enumerate(zip(logits, ys, strict=True)):
                    # replica by replica, as `_grouped_losses` (the same numbers whatever k)
                    sums[i][0] += F.cross_entropy(out, target, reduction="sum").item()
                    sums[i][1] += int((out.argmax(1) == target).sum().item())
                    sums[i][2] += target.numel()
            for r, (loss, right, count) in zip(rows, sums, strict=True):
                results[r] = (loss, right, count)
        return results

    def _still_own(self, rank: int, model: nn.Module) -> bool:
        """Whether `model` is worker `rank`'s module with its parameters and buffers still its
        rows of the stacked tensors (an algorithm may have put others in their place)."""
        if model is not self._modules[rank]:
            return False
        params = dict(model.named_parameters())
        if any(params.get(name) is not view for name, view in self._own[rank]):
            return False
        return all(
            b.data_ptr() == self.buffers[name][rank].data_ptr()
            for name, b in model.named_buffers()
            if name in self.buffers
        )

    def _logits(self, params, buffers, x: torch.Tensor, one_pass: bool) -> torch.Tensor:
        """The logits [k, B, classes] of k replicas (`params`, `buffers`: [k, ...]) on their
        inputs x [k, B, ...]: one grouped (or vmapped) pass, or (k = 1) the model itself."""
        k = x.shape[0]
        if not one_pass:
            assert self._base is not None
            first = functional_call(
                self._base,
                ({n: t[0] for n, t in params.items()}, {n: t[0] for n, t in buffers.items()}),
                (x[0],),
            )
            return first.unsqueeze(0)
        grouped = self._grouped_model(k)
        if grouped is not None:
            out = functional_call(grouped, (params, buffers), (_side_by_side(x),))
            return out.unflatten(1, (k, -1)).transpose(0, 1)
        return vmap(lambda p, b, xx: functional_call(self._base, (p, b), (xx,)))(params, buffers, x)

    def _grouped_losses(self, params, buffers, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """`replica_losses` with the grouped model of k = len(y) replicas. The same call as the
        vmapped loss (`_batched`)."""
        return replica_losses(self._grouped_model(y.shape[0]), params, buffers, x, y)

    def optimizer_step(self, rank: int, optimizer: torch.optim.Optimizer) -> None:
        """The loop's `optimizer.step()` for worker `rank`. When the m workers' optimizers are
        torch SGD with the same settings over their own parameters (every algorithm's local
        optimizer, algorithms/base.py), one call of torch's SGD update rule on the stacked
        parameters, gradients and momentum buffers updates all m at once (measured at 16
        workers: their m steps through the interpreter took about as long as the batched
        forward and backward). Otherwise each worker steps its own optimizer, as unbatched."""
        if rank not in self.groups[rank].collective("optimizer step", optimizer, self._sgd_step):
            optimizer.step()

    def _sgd_step(self, op) -> set[int]:
        """One update per run of the stacked rows of its workers; returns the ranks it
        updated (the others step their own optimizer)."""
        done: set[int] = set()
        for a in range(0, self.m, self.block):
            rows = range(a, a + self.block)
            optimizers = [op.inputs[r] for r in rows]
            if None not in optimizers and self._sgd_run(a // self.block, rows, optimizers):
                done.update(rows)
        return done

    def _sgd_run(self, run: int, rows: range, optimizers: list[torch.optim.Optimizer]) -> bool:
        plan = self._sgd_plan(rows, optimizers)
        if plan is None:
            return False
        with torch.no_grad():
            for hyper, names, replicas_of, grads, buffers in plan:
                params = [self.params[name][rows.start : rows.stop] for name in names]
                # torch's fused kernel: one pass over memory instead of foreach's several (4x
                # faster on the stacked tensors of 16 width-8 ResNet-18s). It needs all of a
                # group's buffers or none (the first step), and may round differently from
                # foreach in the last bit, the order of the batched pass's own differences.
                fused = _fusable(params) and len({b is None for b in buffers}) <= 1
                sgd(
                    params,
                    grads,
                    buffers,
                    weight_decay=hyper["weight_decay"],
                    momentum=hyper["momentum"],
                    lr=hyper["lr"],
                    dampening=hyper["dampening"],
                    nesterov=hyper["nesterov"],
                    maximize=hyper["maximize"],
                    foreach=not fused,
                    fused=fused,
                )
                if hyper["momentum"] == 0:
                    continue
                # each worker's optimizer state holds its row of the stacked buffer, where its
                # own step would have left a buffer (checkpoints copy it out: loop.capture)
                for name, replicas, buffer in zip(names, replicas_of, buffers, strict=True):
                    if self.momentum.get((run, name)) is buffer:
                        continue
                    self.momentum[run, name] = buffer
                    self._buffer_rows[run, name] = buffer.unbind(0)
                    for opt, p, row in zip(
                        optimizers, replicas, self._buffer_rows[run, name], strict=True
                    ):
                        opt.state[p]["momentum_buffer"] = row
        return True

    def _sgd_plan(self, rows: range, optimizers: list[torch.optim.Optimizer]):
        """[(settings, names, each name's parameters of the workers `rows` (one run's), their
        stacked gradients, stacked momentum buffers or None)] per param group, or None where
        one update of the stacked tensors cannot stand for the run's steps: another optimizer,
        settings or parameters that differ between workers, step hooks, a gradient on some
        workers only."""
        run = rows.start // self.block
        first = optimizers[0]
        if (
            any(
                type(o) is not torch.optim.SGD
                or o._optimizer_step_pre_hooks
                or o._optimizer_step_post_hooks
                or len(o.param_groups) != len(first.param_groups)
                for o in optimizers
            )
            or _global_optimizer_pre_hooks
            or _global_optimizer_post_hooks
        ):
            return None
        plan = []
        for i, group in enumerate(first.param_groups):
            hyper = {k: v for k, v in group.items() if k != "params"}
            groups = [o.param_groups[i] for o in optimizers]
            if hyper.get("differentiable") or any(
                g[k] != v for g in groups[1:] for k, v in hyper.items()
            ):
                return None
            names = self._names(rows, groups)
            if names is None:
                return None
            entry = (hyper, [], [], [], [])
            for name, *replicas in zip(names, *(g["params"] for g in groups), strict=True):
                row_grads = [p.grad for p in replicas]
                fresh = self._grad_rows.get(name)
                fresh = None if fresh is None else fresh[rows.start : rows.stop]
                if fresh is not None and all(g is f for g, f in zip(row_grads, fresh, strict=True)):
                    stacked = self.params[name].grad[rows.start : rows.stop]
                elif all(g is None for g in row_grads):
                    continue  # SGD skips a parameter without a gradient
                elif any(g is None or g.is_sparse for g in row_grads):
                    return None
                else:  # an algorithm set gradient tensors of its own: stack them (a copy)
                    stacked = torch.stack(row_grads)
                buffer = None
                if hyper["momentum"] != 0:
                    row_bufs = [
                        (o.state.get(p) or {}).get("momentum_buffer")
                        for o, p in zip(optimizers, replicas, strict=True)
                    ]
                    kept = self._buffer_rows.get((run, name))
                    if kept is not None and all(
                        b is k for b, k in zip(row_bufs, kept, strict=True)
                    ):
                        buffer = self.momentum[run, name]
                    elif any(b is not None for b in row_bufs):
                        if any(b is None for b in row_bufs):
                            return None
                        # restored from a checkpoint, or replaced by an algorithm: stacked
                        buffer = torch.stack(row_bufs)
                for part, value in zip(entry[1:], (name, replicas, stacked, buffer), strict=True):
                    part.append(value)
            plan.append(entry)
        return plan

    def _names(self, rows: range, groups: list[dict]) -> list[str] | None:
        """The parameter names of one param group, the same on every worker of `rows`, or
        None."""
        names = [self._name_of[rows[0]].get(id(p)) for p in groups[0]["params"]]
        if None in names:
            return None
        for r, g in zip(rows[1:], groups[1:], strict=True):
            if [self._name_of[r].get(id(p)) for p in g["params"]] != names:
                return None
        return names


def _grouped(model: nn.Module, m: int) -> nn.Module | None:
    """`model`'s structure as m replicas in one: every Conv2d, BatchNorm2d and Linear replaced
    by its grouped twin below, which reads the stacked [m, ...] parameters and buffers (the same
    names) and keeps replica r's channels in block r of m. Only for a model that declares its
    forward channel-wise between those layers (`replicas_groupable`,
    experiments/training/models.py), with layers the twins cover; else None (vmap serves).

    Why by hand: `torch.func.vmap` of the same model does the same arithmetic, but batches a
    convolution by moving the replica dimension in and out of the channels around every layer
    and BatchNorm through a decomposition into elementwise operators (its batching rules);
    measured on 16 width-8 ResNet-18s on 2 cores, the grouped model's pass takes ~0.8 of
    vmap's time."""
    if not getattr(type(model), "replicas_groupable", False) or _has_state(model):
        return None
    grouped = copy.deepcopy(model)
    for module in list(grouped.modules()):
        for name, child in list(module.named_children()):
            if isinstance(child, nn.Conv2d):
                if child.padding_mode != "zeros":
                    return None
                setattr(module, name, _GroupedConv2d(child, m))
            elif isinstance(child, nn.BatchNorm2d):
                if not (child.affine and child.track_running_stats) or child.momentum is None:
                    return None
                setattr(module, name, _GroupedBatchNorm2d(child, m))
            elif isinstance(child, nn.Linear):
                setattr(module, name, _GroupedLinear(m))
            elif _has_state(child):
                return None  # a layer with state that no twin covers
    return grouped


def replica_losses(
    grouped: nn.Module, params, buffers, x: torch.Tensor, y: torch.Tensor
) -> torch.Tensor:
    """Each replica's mean loss on its batch (x [k, B, C, ...], y [k, B]), computed by `grouped`
    (k replicas as one model, `_grouped`; its stacked `params` and `buffers`) on the replicas'
    inputs side by side as channels: [B, k*C, ...] (`_side_by_side`)."""
    k = y.shape[0]
    logits = functional_call(grouped, (params, buffers), (_side_by_side(x),))  # [B, k * classes]
    # each replica's loss on its own [B, classes]: one kernel over all k x B rows would put
    # a replica's rows in its vectorised body or its scalar tail depending on k
    return torch.stack(
        [
            F.cross_entropy(out, target)
            for out, target in zip(logits.unflatten(1, (k, -1)).unbind(1), y, strict=True)
        ]
    )


def layout(batched: BatchedSteps | None, dtype: torch.dtype, device: torch.device) -> str | None:
    """The image layout of a run's batched passes where it is not torch's default (the platform
    fingerprint's `layout`): "channels_last", or None."""
    grouped = batched is not None and batched.grouped
    return "channels_last" if grouped and channels_last(dtype, device) else None


def channels_last(dtype: torch.dtype, device: torch.device) -> bool:
    """Whether the grouped passes lay their images out channels-last (NHWC): in float32 on a
    CPU, where oneDNN's grouped convolutions run faster on it (issue 48, measured on 2 cores,
    32 width-8 ResNet-18 replicas: a training step's forward and backward 0.67x the time, an
    evaluation pass 0.85x, at the plain model's speed on the same images). The same arithmetic
    summed in another order: the digits differ to rounding (the platform fingerprint records
    the layout, experiments/store/fingerprint.py). float64 (the bit-for-bit tests) and GPUs
    keep the contiguous layout."""
    return dtype == torch.float32 and device.type == "cpu"


def _side_by_side(x: torch.Tensor) -> torch.Tensor:
    """k replicas' images x [k, B, C, H, W] as the grouped model's input [B, k * C, H, W]
    (replica r's channels in block r), channels-last where that is faster (`channels_last`)."""
    out = x.transpose(0, 1).flatten(1, 2)
    if out.dim() == 4 and channels_last(out.dtype, out.device):
        return out.contiguous(memory_format=torch.channels_last)
    return out


def _has_state(module: nn.Module) -> bool:
    """Whether `module` holds parameters or buffers of its own (not its children's)."""
    return bool(module._parameters) or bool(module._buffers)


def _placeholders(module: nn.Module, params=("weight", "bias"), buffers=()) -> None:
    # functional_call sets the stacked tensors under these names
    for name in params:
        module.register_parameter(name, None)
    for name in buffers:
        module.register_buffer(name, None)


class _GroupedConv2d(nn.Module):
    """m Conv2d replicas as one convolution with m times the groups: weight [m, out, in, k, k]."""

    def __init__(self, conv: nn.Conv2d, m: int):
        super().__init__()
        self.m, self.stride, self.padding = m, conv.stride, conv.padding
        self.dilation, self.groups = conv.dilation, conv.groups
        _placeholders(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        bias = None if self.bias is None else self.bias.flatten()
        return F.conv2d(
            x,
            self.weight.flatten(0, 1),
            bias,
            self.stride,
            self.padding,
            self.dilation,
            self.groups * self.m,
        )


class _GroupedBatchNorm2d(nn.Module):
    """m BatchNorm2d replicas as one over m times the channels (statistics per channel, so per
    replica); the running statistics are updated in place in the stacked buffers, as
    BatchNorm2d.forward does its own."""

    def __init__(self, bn: nn.BatchNorm2d, m: int):
        super().__init__()
        self.momentum, self.eps = bn.momentum, bn.eps
        _placeholders(self, buffers=("running_mean", "running_var", "num_batches_tracked"))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training:
            self.num_batches_tracked.add_(1)
        return F.batch_norm(
            x,
            self.running_mean.view(-1),
            self.running_var.view(-1),
            self.weight.flatten(),
            self.bias.flatten(),
            self.training,
            self.momentum,
            self.eps,
        )


class _GroupedLinear(nn.Module):
    """m Linear replicas: [B, m * in] -> [B, m * out], weight [m, out, in], bias [m, out].

    One batched matrix product per replica, [B, in + 1] @ [in + 1, out], the bias as the
    weight of a column of ones: each replica's numbers, bias gradient included, are then the
    same whatever m (seeds in lock-step). Adding the bias [m, out] across the batch instead
    sums its gradient over a [B, m, out] tensor, whose reduction order depends on m."""

    def __init__(self, m: int):
        super().__init__()
        self.m = m
        _placeholders(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.unflatten(1, (self.m, -1)).transpose(0, 1)  # [m, B, in]
        weight = self.weight.transpose(1, 2)  # [m, in, out]
        if self.bias is not None:
            x = torch.cat([x, x.new_ones(*x.shape[:2], 1)], dim=2)
            weight = torch.cat([weight, self.bias.unsqueeze(1)], dim=1)
        return torch.bmm(x, weight).transpose(0, 1).flatten(1)  # [B, m * out]


# The devices torch's fused SGD kernel takes, asked of the torch installed (not assumed: its
# fused CPU kernels are recent), among the two this path is tested on.
_FUSED_DEVICES = frozenset(_get_fused_kernels_supported_devices()) & {"cpu", "cuda"}


def _fusable(tensors: list[torch.Tensor]) -> bool:
    return all(t.device.type in _FUSED_DEVICES and t.is_floating_point() for t in tensors)


def _owner(model: nn.Module, dotted: str) -> tuple[nn.Module, str]:
    path, _, leaf = dotted.rpartition(".")
    return (model.get_submodule(path) if path else model), leaf
