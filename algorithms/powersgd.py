r"""PowerSGD: low-rank gradient compression with error feedback (algorithms.md section 6).

Vogels, Karimireddy & Jaggi, "PowerSGD: Practical Low-Rank Gradient Compression for Distributed
Optimization", NeurIPS 2019. Semantics of the paper's code (epfml/powersgd `paper-code/`,
`RankKReducer` with reuse_query=true, memory=true), not of the later pip package.

Notation -> config / attribute:

    r        rank of the approximation          `algorithm.rank` (r' = min(r, rows, cols))
    M_i      gradient + error memory, as matrix  local in `before_step`
    e_i      error-feedback memory               `self.memories` (`algorithm.error_feedback`)
    Q        shared right factor, [cols, r']     `self.qs` (`algorithm.warm_start`)
    P        left factor, [rows, r']             local in `before_step`
    m        number of workers                   `workers` (top level)

Per step t >= `algorithm.start_step`, for every gradient with ndim > 1, viewed as [out, in*k*k]:

    M_i  = grad_i + e_i                                  (no wd / momentum before compression)
    P    = sum_j M_j Q                                   (1 collective for all P's)
    P    = orthonormalise_columns(P)                     (Householder QR, batched by shape)
    Q    = mean_j M_j^T P                                (1 collective for all Q's)
    Ghat = P Q^T ;  e_i = M_i - Ghat                     (EF residual re-enters next step)

1-D tensors (biases, BN weight/bias) are averaged uncompressed (1 async collective launched
before the matrix work, waited after it), without error feedback: 3 collectives per step.
Ghat is written into `p.grad`; the local torch SGD then adds weight decay and Nesterov momentum,
so momentum is global and the replicas stay identical (BN running statistics aside).
Floats sent per step: `floats_per_step` (ResNet-18: 45,935 at rank 1, 243x less than SGD).

Weight decay (reference): 1e-4 on every parameter except the BatchNorm weights and biases whose
full name matches the reference's regex `.*\.bn\d+\.(weight|bias)` (epfml/powersgd
paper-code/train.py, `is_batchnorm_param`, applied with `re.match` to the name): `layer1.0.bn2`
and the other block BNs are exempt; the stem BN (`bn1.weight`: no dot before `bn`) and the
shortcut BN (`shortcut.1`) keep it. `local_optimizer` builds the two parameter groups;
`algorithm.bn_no_weight_decay=false` puts every parameter under the run's weight decay.

State: `memories` (one e_i per matrix, empty without error feedback), `qs` (Q factors), and the
sums behind `metrics()` (only with `algorithm.log_residual`: two full-gradient norms per step).
The step counter is the loop's `t`, passed to every hook, so it is not kept here.

Deviations from the paper and the reference code:
- Written on `Comm` rather than torch's `powerSGD_hook`: that hook only runs inside DDP (the
  suite does not wrap models in DDP) and its semantics differ (it leaves tensors uncompressed
  below a `min_compression_rate`, compresses only from iteration 1000 by default, batches
  tensors into buckets). Here compression starts at `start_step` (0 = from the first step, as
  in the paper). Checked against the hook with its settings aligned (error feedback, warm
  start, epsilon 0, every matrix compressed, the same first compressed step and initial
  factors): the trajectories agree to 1e-11 over 50 steps at ranks 1, 2 and 4
  (tests/test_references.py).
- The 1-D all-reduce is launched before the P all-reduce (the reference launches it right
  after), so it overlaps all the matrix work; the result is the same.
- Q is drawn from a `torch.Generator` seeded with 0 (the reference seeds numpy), identically on
  every worker, and is not orthogonalised (neither is the reference's; torch's hook
  orthogonalises the query every step, which changes P's columns but not their nested spans,
  so not P Q^T either). Without warm start it is re-drawn at step t from a generator seeded
  with t, so no generator state needs checkpointing.
- P is orthonormalised by Householder QR (`torch.linalg.qr`, one batched call per shape), as
  torch's `powerSGD_hook` does above rank 2, not by the reference's Gram-Schmidt that divides
  by (norm + eps) (algorithms.md section 12.14). When the rank reaches a gradient matrix's own
  rank (a C-class classifier's gradient has rank <= C - 1: its rows sum to zero), P has a
  column with no signal; Gram-Schmidt with an epsilon shrinks that column instead of
  normalising it, error feedback then accumulates a spurious component in a direction the loss
  does not see, and the run even depends on the scale of its initial factors. QR returns an
  orthonormal basis whatever P's rank, so the compression is a projection P P^T M and the run
  is invariant to that scale (tests/test_powersgd.py). QR's columns may differ in sign from
  Gram-Schmidt's; P Q^T does not. Full rank reproduces the averaged gradient to float
  precision (the identity of algorithms.md section 11 #2).
- Before `start_step` the whole gradient is averaged in one collective; the error memories stay
  zero and Q is untouched.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence

import torch

from algorithms.base import FOREACH, Algorithm
from algorithms.powersgd_config import Config

# The reference's BatchNorm parameters (paper-code/train.py `is_batchnorm_param`, re.match on the
# full parameter name): `layer3.1.bn2.weight` matches, the stem's `bn1.weight` does not.
BN_PARAM = re.compile(r".*\.bn\d+\.(weight|bias)")


class PowerSGD(Algorithm):
    Config = Config
    state = ("memories", "qs", "_residual_sq", "_input_sq")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.matrices = [p for p in self.params if p.ndim > 1]
        self.vectors = [p for p in self.params if p.ndim <= 1]
        self.shapes = [matrix_shape(p.shape) for p in self.matrices]
        self.qs = draw_queries(self.shapes, self.cfg.rank, seed=0, like=self.matrices)
        self.memories = (
            [
                torch.zeros(s, dtype=p.dtype, device=p.device)
                for s, p in zip(self.shapes, self.matrices, strict=True)
            ]
            if self.cfg.error_feedback
            else []
        )
        self._residual_sq = 0.0  # sum over steps of ||M - Ghat||^2 (tensor once used)
        self._input_sq = 0.0  # sum over steps of ||M||^2

    @classmethod
    def local_optimizer(
        cls, cfg, model, *, lr, momentum, nesterov, weight_decay
    ) -> torch.optim.SGD:
        """Torch SGD with weight decay 0 on the reference's BN parameters (when
        `bn_no_weight_decay`)."""
        decayed, exempt = split_bn_params(model.named_parameters(), cfg.bn_no_weight_decay)
        groups = [{"params": decayed}]
        if exempt:
            groups.append({"params": exempt, "weight_decay": 0.0})
        return torch.optim.SGD(
            groups,
            lr=lr,
            momentum=momentum,
            nesterov=nesterov,
            weight_decay=weight_decay,
            foreach=FOREACH,
        )

    def before_step(self, t: int) -> None:
        for p in self.params:
            if p.grad is None:  # an unused parameter still takes part in every collective
                p.grad = torch.zeros_like(p)
        if t < self.cfg.start_step:
            self.comm.mean_([p.grad for p in self.params])
            return
        # 1-D tensors: plain average in the background while the matrices are compressed.
        vectors = (
            self.comm.mean_async([p.grad for p in self.vectors], slot="vectors")
            if self.vectors
            else None
        )
        if self.matrices:
            self._compress_matrices(t)
        if vectors is not None:
            for p, avg in zip(self.vectors, vectors.wait(), strict=True):
                p.grad.copy_(avg)

    def _compress_matrices(self, t: int) -> None:
        ms = [p.grad.reshape(s) for p, s in zip(self.matrices, self.shapes, strict=True)]
        if self.cfg.error_feedback:
            ms = [m + e for m, e in zip(ms, self.memories, strict=True)]  # M_i = grad_i + e_i
        if not self.cfg.warm_start:
            self.qs = draw_queries(self.shapes, self.cfg.rank, seed=t, like=self.matrices)
        ps = [m @ q for m, q in zip(ms, self.qs, strict=True)]  # P_i = M_i Q
        self.comm.sum_(ps)  # P = sum_j P_j (its scale is removed by the orthonormalisation)
        ps = orthonormalize(ps)
        qs = [m.T @ p for m, p in zip(ms, ps, strict=True)]  # Q_i = M_i^T P
        self.comm.mean_(qs)  # Q = mean_j Q_j
        self.qs = qs
        log = self.cfg.log_residual
        residual_sq, input_sq = 0.0, 0.0
        for i, (param, m, p, q) in enumerate(zip(self.matrices, ms, ps, qs, strict=True)):
            ghat = p @ q.T
            if self.cfg.error_feedback or log:
                residual = m - ghat
            if self.cfg.error_feedback:
                self.memories[i] = residual  # e_i = M_i - Ghat
            if log:
                residual_sq = residual_sq + residual.square().sum()
                input_sq = input_sq + m.square().sum()
            param.grad.copy_(ghat.view_as(param.grad))
        if log:
            self._residual_sq = self._residual_sq + residual_sq
            self._input_sq = self._input_sq + input_sq

    def metrics(self) -> dict[str, float]:
        """`residual_rel` (with `log_residual`): ||M - P Q^T|| / ||M|| of this worker's matrices
        since the last call."""
        input_sq = float(self._input_sq)
        if input_sq == 0.0:
            return {}
        out = {"residual_rel": math.sqrt(float(self._residual_sq) / input_sq)}
        self._residual_sq, self._input_sq = 0.0, 0.0
        return out


def matrix_shape(shape: Sequence[int]) -> tuple[int, int]:
    """The [out, in*k*k] matrix view of a parameter of shape `shape` (ndim > 1)."""
    return int(shape[0]), math.prod(shape[1:])


def effective_rank(shape: Sequence[int], rank: int) -> int:
    """r' = min(r, rows, cols) of the matrix view."""
    rows, cols = matrix_shape(shape)
    return min(rank, rows, cols)


def floats_per_step(shapes: Iterable[Sequence[int]], rank: int) -> int:
    """Values one worker sends per compressed step: (rows + cols) * r' per matrix + 1-D numel."""
    total = 0
    for shape in shapes:
        if len(shape) > 1:
            rows, cols = matrix_shape(shape)
            total += (rows + cols) * effective_rank(shape, rank)
        else:
            total += math.prod(shape)
    return total


def orthonormalize(matrices: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """An orthonormal basis of each matrix's column space, as the Q factor of its Householder
    QR (`torch.linalg.qr`, reduced), one batched call per distinct shape; new tensors, in the
    input order. Columns without signal (P's rank below its column count) still come out as
    unit vectors orthogonal to the others."""
    out: list[torch.Tensor | None] = [None] * len(matrices)
    by_shape: dict[tuple[int, ...], list[int]] = {}
    for i, m in enumerate(matrices):
        by_shape.setdefault(tuple(m.shape), []).append(i)
    for indices in by_shape.values():
        q = torch.linalg.qr(torch.stack([matrices[i] for i in indices])).Q
        for i, qi in zip(indices, q.unbind(0), strict=True):
            out[i] = qi
    return out


def orthonormalize_columns(matrix: torch.Tensor) -> torch.Tensor:
    """`orthonormalize` of one matrix."""
    return orthonormalize([matrix])[0]


def draw_queries(
    shapes: Sequence[tuple[int, int]], rank: int, seed: int, like: Sequence[torch.Tensor]
) -> list[torch.Tensor]:
    """Standard-normal Q of shape [cols, r'] per matrix, from a CPU generator seeded with
    `seed` (so identical on every worker and device), in the dtype/device of `like`."""
    gen = torch.Generator().manual_seed(seed)
    qs = []
    for (rows, cols), ref in zip(shapes, like, strict=True):
        q = torch.randn(cols, effective_rank((rows, cols), rank), generator=gen, dtype=ref.dtype)
        qs.append(q.to(ref.device))
    return qs


def power_step(m: torch.Tensor, q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """One worker's compression of `m` (m = 1): P = orth(M Q), Q' = M^T P; M ~ P Q'^T."""
    p = orthonormalize_columns(m @ q)
    return p, m.T @ p


def split_bn_params(
    named_params: Iterable[tuple[str, torch.nn.Parameter]], exempt_bn: bool
) -> tuple[list[torch.nn.Parameter], list[torch.nn.Parameter]]:
    """(decayed, exempt): the parameters whose name matches BN_PARAM are exempt when
    `exempt_bn`."""
    decayed, exempt = [], []
    for name, p in named_params:
        (exempt if exempt_bn and BN_PARAM.match(name) else decayed).append(p)
    return decayed, exempt
