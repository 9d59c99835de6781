"""Evaluation: the consensus model and the mean of the local models (contract.md).

- consensus: a copy of the algorithm's `eval_model()` whose parameters AND floating-point
  buffers (BatchNorm running mean/var) are averaged over the workers; identical on every worker,
  so each evaluates a disjoint 1/m of the test set and the counts are summed.
- local: each worker's own model (own BN statistics) on the whole test set; the accuracies are
  averaged over workers (the reference code's per-rank number, algorithms.md section 9).

These collectives are bookkeeping (`account=False`): they are not part of any algorithm.
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F

from algorithms.comm import Comm


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


def consensus_copy(model: torch.nn.Module, comm: Comm) -> torch.nn.Module:
    """A copy of `model` with parameters and float buffers averaged over the workers."""
    avg = copy.deepcopy(model)
    tensors = [p.data for p in avg.parameters()]
    tensors += [b for b in avg.buffers() if b.is_floating_point()]
    comm.mean_(tensors, account=False)
    return avg


def evaluate(
    local_model: torch.nn.Module,
    eval_model: torch.nn.Module,
    comm: Comm,
    test_full,
    test_shard,
    device: torch.device,
    dtype: torch.dtype,
) -> dict[str, float]:
    consensus = consensus_copy(eval_model, comm)
    c_loss, c_correct, c_count = comm.sum_scalars(
        loss_and_correct(consensus, test_shard, device, dtype)
    )
    l_loss, l_correct, l_count = loss_and_correct(local_model, test_full, device, dtype)
    m = comm.world_size
    acc_local_sum, loss_local_sum = comm.sum_scalars([l_correct / l_count, l_loss / l_count])
    return {
        "test/loss": c_loss / c_count,
        "test/acc": c_correct / c_count,
        "test/acc_local": acc_local_sum / m,
        "test/loss_local": loss_local_sum / m,
    }
