"""Independent references (issue 13 item 9): each algorithm of the suite against an
implementation it shares no code with, in float64 on 2 real gloo processes.

- `sync_sgd` = torch's `DistributedDataParallel`, bit for bit;
- `local_sgd` = torch's `PeriodicModelAverager`, bit for bit (its warm-up aligned with the
  suite's round ends);
- `powersgd` = torch's `powerSGD_hook` (DDP on gloo) to 1e-9, ranks 1, 2 and 4;
- EASGD, EAMSGD, CoCoD-SGD and Overlap-Local-SGD = a hand port of the reference repository's
  update step (JYWa/Overlap_Local_SGD, `distoptim/`), to 1e-12.

Why 2 processes: torch divides by the world size before its SUM all-reduce, the suite after;
with m = 2 the division is exact, so the two orders give the same bits.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from algorithms.comm import Comm
from algorithms.powersgd import Config as PowerConfig
from algorithms.powersgd import PowerSGD
from tests.steps import (
    POWERSGD_CASES,
    flat_params,
    hook_steps,
    matrix_net,
    powersgd_case_batches,
)

LR, MOMENTUM, WD = 0.05, 0.9, 1e-4

# --- PowerSGD against torch's powerSGD_hook -----------------------------------------------------

# POWERSGD_CASES (tests/steps.py) says which data, rank and number of steps, and why.
# The hook needs start_powerSGD_iter > 1 with error feedback / warm start (DDP rebuilds its
# buckets after iteration 1); the suite's `start_step` starts compressing at the same step.
POWER_START = 2


def aligned_powersgd_hook(initial: dict[int, torch.Tensor]):
    """torch's `powerSGD_hook`, whose first compressed iteration starts from the suite's initial
    factors instead of its own random draw: the Q of each parameter (keyed by data_ptr) is laid
    out in the hook's memory as the hook lays it out (grouped by matrix shape, in the order of
    first appearance in the bucket, then bucket order). The hook orthogonalises it, the suite
    does not: the same nested column spans, so the same P Q^T."""
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as hook

    def aligned(state, bucket):
        index = bucket.index()
        if state.iter == state.start_powerSGD_iter and index not in state.q_memory_dict:
            groups: dict[tuple[int, int], list[torch.Tensor]] = {}
            for p in bucket.parameters():
                groups.setdefault((p.shape[0], p[0].numel()), []).append(p)
            ordered = [p for group in groups.values() for p in group]
            qs = [initial[p.data_ptr()] for p in ordered]
            p_size = sum(p.shape[0] * q.shape[1] for p, q in zip(ordered, qs, strict=True))
            state.p_memory_dict[index] = torch.empty(p_size, dtype=qs[0].dtype)
            state.q_memory_dict[index] = torch.cat([q.reshape(-1) for q in qs])
        return hook.powerSGD_hook(state, bucket)

    return aligned


def _powersgd_vs_hook(rank: int, world_size: int, cases: dict, old_gram_schmidt: bool = False):
    from torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook import PowerSGDState
    from torch.nn.parallel import DistributedDataParallel

    if old_gram_schmidt:  # tests: the check must fail with the orthogonalisation it replaced
        _install_old_gram_schmidt()
    out = {}
    for name, (data, hidden, lr, r, steps) in cases.items():
        batches = powersgd_case_batches(data, rank, steps)
        model = matrix_net(hidden)
        cfg = PowerConfig(rank=r, start_step=POWER_START)
        opt = PowerSGD.local_optimizer(
            cfg, model, lr=lr, momentum=MOMENTUM, nesterov=True, weight_decay=WD
        )
        algo = PowerSGD(model, opt, Comm(), cfg, tau=1)
        initial = [q.clone() for q in algo.qs]
        _, suite = hook_steps(algo, model, opt, batches)

        ref = matrix_net(hidden)
        ddp = DistributedDataParallel(ref)
        state = PowerSGDState(
            process_group=None,
            matrix_approximation_rank=r,
            start_powerSGD_iter=POWER_START,
            min_compression_rate=0,  # compress every matrix
            use_error_feedback=True,
            warm_start=True,
            orthogonalization_epsilon=0,
        )
        matrices = [p for p in ref.parameters() if p.ndim > 1]
        ddp.register_comm_hook(
            state,
            aligned_powersgd_hook(
                {p.data_ptr(): q for p, q in zip(matrices, initial, strict=True)}
            ),
        )
        ref_opt = torch.optim.SGD(
            ddp.parameters(), lr=lr, momentum=MOMENTUM, nesterov=True, weight_decay=WD
        )
        reference = []
        for x, y in batches:
            ref_opt.zero_grad()
            F.cross_entropy(ddp(x), y).backward()
            ref_opt.step()
            reference.append(flat_params(ref))
        out[name] = (suite, reference, state.iter, steps)
    return out


def _install_old_gram_schmidt() -> None:
    """The orthogonalisation PowerSGD used before issue 13: modified Gram-Schmidt dividing each
    column by max(norm, 1e-8)."""
    import algorithms.powersgd as powersgd

    def gram_schmidt(matrix: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
        out = matrix.clone()
        for i in range(out.shape[1]):
            col = out[:, i : i + 1]
            col.div_(col.norm().clamp(min=eps))
            if i + 1 < out.shape[1]:
                rest = out[:, i + 1 :]
                rest.sub_(col * (col * rest).sum(dim=0, keepdim=True))
        return out

    powersgd.orthonormalize = lambda ms: [gram_schmidt(m) for m in ms]


def _trajectory_gap(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    return max((x - y).abs().max().item() for x, y in zip(a, b, strict=True))


@pytest.mark.dist
def test_powersgd_equals_torch_powersgd_hook():
    """Started from the same factors, with error feedback, warm start, orthogonalisation epsilon
    0 and every matrix compressed (min_compression_rate 0), from step 2 on both sides. What
    differs and does not matter: the hook orthogonalises its warm-started query every step (same
    spans, same P Q^T); its error feedback covers the whole bucket, 1-D tensors included (the
    model has none: no bias, no BatchNorm; with them the uncompressed 1-D average would carry a
    memory whose mean over the workers is zero); it divides by the world size before its SUM
    all-reduces (exact for 2 workers). Fails with the old Gram-Schmidt (1e-3 on random labels)."""
    from tests.workers import run_workers

    for out in run_workers(_powersgd_vs_hook, 2, POWERSGD_CASES):
        for name, (suite, reference, hook_iters, steps) in out.items():
            assert hook_iters == steps  # the hook ran (and compressed from step 2)
            assert len(suite) == len(reference) == steps
            gap = _trajectory_gap(suite, reference)
            assert gap < 1e-9, (name, gap)
            assert (suite[0] - suite[-1]).abs().max() > 1e-2, name  # training moved
