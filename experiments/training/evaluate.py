"""Evaluation: the consensus model and the mean of the local models (docs/records.md).

- consensus: a copy of the algorithm's `eval_model()` whose parameters AND floating-point
  buffers (BatchNorm running mean/var) are averaged over the workers; identical on every worker,
  so each evaluates a disjoint 1/m of the test set and the counts are summed.
- local: each worker's own model (own BN statistics). At the last evaluation on the whole test
  set, the accuracies averaged over workers (the reference code's per-rank number, algorithms.md
  section 9: `final/test_acc_local`); the loop takes it before `finish()` (it passes
  `local_counts`), since `finish()` replaces the local models by the consensus. At the
  evaluations before it, each worker's model on its own 1/m of the test set (the consensus's
  shard) and the counts pooled: the same quantity's unbiased estimate from as many images as the
  consensus's, at 1/m of the cost. Scoring all m models on the whole set every epoch made
  evaluation most of a run's wall time at 8 workers (57% of a fig5 run at scale=fmnist, issue
  48); the curve `test/acc_local` is drawn in figures only, no claim reads it.
- fresh BatchNorm statistics: when the algorithm says its eval model's statistics were never
  computed on its weights (`Algorithm.eval_needs_fresh_bn`, e.g. EASGD's centre), each worker
  recomputes them on the same fixed `BN_BATCHES` batches of its own training shard
  (`fixed_batches`) before the averaging, so the consensus holds statistics pooled over
  m * BN_BATCHES batches (`recompute_bn_`).

These collectives are bookkeeping (`account=False`): they are not part of any algorithm.
"""

from __future__ import annotations

import copy
import threading
import weakref

import torch
import torch.nn.functional as F
from torch.optim.swa_utils import update_bn

from algorithms.comm import Comm

# Training batches per worker on which an eval model's BatchNorm statistics are recomputed.
# Why 20: at the paper's scale (16 workers, batch 128, 25 batches per shard) the pooled
# estimate covers 40,960 samples, about 80% of CIFAR-10's training set, well above the ~10^4
# samples that precise-BN estimates need (Wu & Johnson 2021, "Rethinking 'Batch' in
# BatchNorm"), for 20 forward passes per evaluation (less than one epoch's, and evaluation is
# not training time); at the cpu scale a digits shard has fewer whole batches (11 of 32) and all
# of them are used.
BN_BATCHES = 20
# The seed of the fixed draw (any constant: the set must be the same at every evaluation and in
# a resumed run).
BN_SEED = 0


@torch.no_grad()
def loss_and_correct(
    model: torch.nn.Module, loader, device: torch.device, dtype: torch.dtype
) -> tuple[float, int, int]:
    """Sum of cross-entropy losses, number correct, number of samples."""
    was_training = model.training
    model.eval()
    loss_sum, correct, count = 0.0, 0, 0
    for x, y in loader:
        x, y = x.to(device, dtype=dtype, non_blocking=True), y.to(device, non_blocking=True)
        out = model(x)
        loss_sum += F.cross_entropy(out, y, reduction="sum").item()
        correct += (out.argmax(1) == y).sum().item()
        count += y.numel()
    model.train(was_training)
    return loss_sum, correct, count


def fixed_batches(
    dataset, batch_size: int, num_batches: int = BN_BATCHES, seed: int = BN_SEED
) -> list[torch.Tensor]:
    """The inputs of `num_batches` batches of `batch_size` samples of `dataset` (this worker's
    shard), or of as many whole batches as it holds (a smaller last batch would weigh as much as
    a full one in the cumulative average; a shard smaller than one batch is one batch): a random
    draw without replacement from a generator seeded `seed`, the training augmentation of an
    `Augmented` shard (experiments/data/datasets.py) drawn from a second generator seeded `seed + 1`
    (another dataset's random transforms: under a forked global RNG seeded `seed`).
    Deterministic, and neither the training's RNG streams nor its data order are touched (a
    resumed run draws the same set)."""
    n = min(len(dataset), num_batches * batch_size)
    if n >= batch_size:
        n -= n % batch_size
    order = torch.randperm(len(dataset), generator=torch.Generator().manual_seed(seed))[:n]
    if hasattr(dataset, "keys"):  # (index, augmentation parameters): no global RNG involved
        keys = dataset.keys(order.tolist(), torch.Generator().manual_seed(seed + 1))
        xs = [torch.as_tensor(dataset[k][0]) for k in keys]
    else:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            xs = [torch.as_tensor(dataset[i][0]) for i in order.tolist()]
    return [torch.stack(xs[k : k + batch_size]) for k in range(0, n, batch_size)]


def recompute_bn_(
    model: torch.nn.Module, batches: list[torch.Tensor], device: torch.device, dtype: torch.dtype
) -> None:
    """In place: reset `model`'s BatchNorm running statistics and recompute them as the
    cumulative average over `batches` (torch's `swa_utils.update_bn`: train-mode forward
    passes with momentum None; other modules' state and the training mode are kept)."""
    update_bn([x.to(device, dtype=dtype) for x in batches], model)


# The copy each evaluation works on, one per evaluated module, kept between evaluations: a
# `copy.deepcopy` of a module is slow in Python (6% of the worker threads' time of a table1
# point in `cluster=sim`, py-spy, evaluating every epoch); copying the values into the same
# copy again is not. Weak keys: an eval model made for one evaluation (EASGD's centre) takes its
# copy with it.
_SCRATCH: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_SCRATCH_LOCK = threading.Lock()  # (cluster=sim: the workers evaluate in threads)


def state_tensors(model: torch.nn.Module) -> list[torch.Tensor]:
    return [*model.parameters(), *model.buffers()]


def scratch_copy(model: torch.nn.Module) -> torch.nn.Module:
    """A copy of `model` (parameters, buffers, training mode) to evaluate or change freely:
    the one kept for `model` with `model`'s current values copied in, or a new deep copy (the
    first time, or when `model`'s tensors no longer match the kept copy's)."""
    with _SCRATCH_LOCK:
        scratch = _SCRATCH.get(model)
    state = state_tensors(model)
    if scratch is not None:
        kept = state_tensors(scratch)
        if len(kept) == len(state) and all(
            a.shape == b.shape and a.dtype == b.dtype and a.device == b.device
            for a, b in zip(kept, state, strict=True)
        ):
            with torch.no_grad():
                torch._foreach_copy_(kept, state)
            scratch.train(model.training)
            return scratch
    scratch = copy.deepcopy(model)
    with _SCRATCH_LOCK:
        _SCRATCH[model] = scratch
    return scratch


def consensus_copy(
    model: torch.nn.Module, comm: Comm, bn_batches=None, device=None, dtype=None
) -> torch.nn.Module:
    """A copy of `model` (`scratch_copy`: read it before the next call for `model`) with
    parameters and float buffers averaged over the workers; with `bn_batches`, its BatchNorm
    statistics recomputed on them first (`recompute_bn_`, on `device` in `dtype`)."""
    avg = scratch_copy(model)
    if bn_batches is not None:
        recompute_bn_(avg, bn_batches, device, dtype)
    tensors = [p.data for p in avg.parameters()]
    tensors += [b for b in avg.buffers() if b.is_floating_point()]
    comm.mean_(tensors, account=False)
    return avg


def evaluate(
    local_model: torch.nn.Module,
    eval_model: torch.nn.Module,
    comm: Comm,
    test_shard,
    device: torch.device,
    dtype: torch.dtype,
    *,
    bn_batches: list[torch.Tensor] | None = None,
    local_counts: tuple[float, int, int] | None = None,
    counts=None,
) -> dict[str, float]:
    """The test metrics of the consensus of `eval_model` and of the local models.

    bn_batches: recompute `eval_model`'s BatchNorm statistics on them first (on a copy).
    local_counts: `loss_and_correct(local_model, test_full)` taken earlier (the last evaluation
    takes it before `finish()`); None (the evaluations before the last): the local model on
    `test_shard`, pooled over the workers (module docstring).
    counts: what computes `loss_and_correct` (the in-process workers' batched evaluation,
    experiments/workers/batched.py); None: `loss_and_correct`.
    """
    counts = counts or loss_and_correct
    consensus = consensus_copy(eval_model, comm, bn_batches, device, dtype)
    c_loss, c_correct, c_count = comm.sum_scalars(counts(consensus, test_shard, device, dtype))
    if local_counts is None:
        l_loss, l_correct, l_count = comm.sum_scalars(
            counts(local_model, test_shard, device, dtype)
        )
        acc_local, loss_local = l_correct / l_count, l_loss / l_count
    else:
        l_loss, l_correct, l_count = local_counts
        m = comm.world_size
        acc_sum, loss_sum = comm.sum_scalars([l_correct / l_count, l_loss / l_count])
        acc_local, loss_local = acc_sum / m, loss_sum / m
    return {
        "test/loss": c_loss / c_count,
        "test/acc": c_correct / c_count,
        "test/acc_local": acc_local,
        "test/loss_local": loss_local,
    }
