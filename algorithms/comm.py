"""The one door to the network: every collective of the suite goes through `Comm`.

Why a module of our own rather than calling `torch.distributed` directly: each sync must be one
collective on one flat buffer (not one per tensor), overlap must use `async_op=True` handles (no
threads, style.md anti-pattern 4), and every collective must be accounted for, because the
papers' claims are about bytes sent and communication time exposed to the worker (timing.md,
"The ledger"). torch.distributed offers the primitives but keeps no such ledger.

Averages are computed as SUM then divide by m: `ReduceOp.AVG` exists on gloo only since torch
~2.7 and the suite supports older clusters' builds.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.distributed as dist


def flatten(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    """Copy `tensors` (one dtype and device) into one new contiguous 1-D buffer."""
    if not tensors:
        raise ValueError("flatten() needs at least one tensor")
    dtypes = {t.dtype for t in tensors}
    if len(dtypes) != 1:
        raise ValueError(f"flatten() needs one dtype, got {sorted(map(str, dtypes))}")
    return torch.cat([t.detach().reshape(-1) for t in tensors])


def unflatten(flat: torch.Tensor, like: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """Views of `flat` shaped as the tensors of `like` (the inverse of `flatten`)."""
    sizes = [t.numel() for t in like]
    if sum(sizes) != flat.numel():
        raise ValueError(f"buffer has {flat.numel()} values, tensors need {sum(sizes)}")
    return [chunk.view_as(t) for chunk, t in zip(torch.split(flat, sizes), like, strict=True)]


def copy_into_(targets: Sequence[torch.Tensor], flat: torch.Tensor) -> None:
    """Write the values of `flat` back into `targets`, in place."""
    with torch.no_grad():
        for t, src in zip(targets, unflatten(flat, targets), strict=True):
            t.copy_(src)


@dataclass
class Ledger:
    """Cumulative communication accounts of this worker (timing.md, "The ledger")."""

    bytes: int = 0  # payload bytes handed to collectives
    collectives: int = 0  # number of collectives launched
    exposed_s: float = 0.0  # time blocked waiting for a collective to finish


class Pending:
    """A collective in flight. `wait()` blocks (the blocked time is exposed communication)."""

    def __init__(self, comm: Comm, work: dist.Work | None, flat: torch.Tensor, like, account):
        self._comm, self._work, self._flat, self._like = comm, work, flat, like
        self._account = account
        self._done = work is None

    def is_completed(self) -> bool:
        return self._done or self._work.is_completed()

    def wait(self) -> list[torch.Tensor]:
        """Block until the average has arrived; return it shaped like the inputs."""
        if not self._done:
            start = time.perf_counter()
            self._work.wait()
            if self._flat.is_cuda:
                torch.cuda.current_stream().synchronize()
            if self._account:
                self._comm.ledger.exposed_s += time.perf_counter() - start
            self._flat.div_(self._comm.world_size)
            self._done = True
        return unflatten(self._flat, self._like)


class Comm:
    """Averaging over the workers of `group`, with a ledger of bytes, collectives and waits.

    `account=False` is for bookkeeping collectives (evaluation, metric reduction) that are not
    part of the algorithm and so must not appear in `comm/bytes` or the exposed time.
    """

    def __init__(self, group: dist.ProcessGroup | None = None):
        self.group = group
        self.world_size = dist.get_world_size(group)
        self.rank = dist.get_rank(group)
        self.ledger = Ledger()

    def _launch(self, flat: torch.Tensor, account: bool, async_op: bool):
        if account:
            self.ledger.bytes += flat.numel() * flat.element_size()
            self.ledger.collectives += 1
        if self.world_size == 1:
            return None
        return dist.all_reduce(flat, op=dist.ReduceOp.SUM, group=self.group, async_op=async_op)

    def _sum_blocking(self, tensors: list[torch.Tensor], account: bool) -> torch.Tensor:
        """One blocking SUM all-reduce of `tensors` as one flat buffer; returns the buffer."""
        flat = flatten(tensors)
        start = time.perf_counter()
        self._launch(flat, account, async_op=False)
        if flat.is_cuda:
            torch.cuda.current_stream().synchronize()
        if account:
            self.ledger.exposed_s += time.perf_counter() - start
        return flat

    def mean_(self, tensors: Sequence[torch.Tensor], *, account: bool = True) -> None:
        """Replace every tensor by its average over the workers (blocking, one collective)."""
        tensors = list(tensors)
        copy_into_(tensors, self._sum_blocking(tensors, account).div_(self.world_size))

    def sum_(self, tensors: Sequence[torch.Tensor], *, account: bool = True) -> None:
        """Replace every tensor by its sum over the workers (blocking, one collective)."""
        tensors = list(tensors)
        copy_into_(tensors, self._sum_blocking(tensors, account))

    def mean_async(self, tensors: Sequence[torch.Tensor], *, account: bool = True) -> Pending:
        """Start averaging a snapshot of `tensors` in the background; `.wait()` returns it.

        The inputs are copied into a fresh buffer first, so they may change while the
        collective runs (the worker keeps training on them).
        """
        tensors = list(tensors)
        flat = flatten(tensors)
        work = self._launch(flat, account, async_op=True)
        return Pending(self, work, flat, tensors, account)

    def broadcast_(self, tensors: Sequence[torch.Tensor], src: int = 0) -> None:
        """Overwrite `tensors` with rank `src`'s values (set-up: never accounted).

        Tensors of several dtypes (e.g. BatchNorm's integer batch counter) are sent per dtype.
        """
        if self.world_size == 1:
            return
        by_dtype: dict[torch.dtype, list[torch.Tensor]] = {}
        for t in tensors:
            by_dtype.setdefault(t.dtype, []).append(t)
        for group in by_dtype.values():
            flat = flatten(group)
            dist.broadcast(flat, src=src, group=self.group)
            copy_into_(group, flat)

    def sum_scalars(self, values: Sequence[float], *, op: str = "sum") -> list[float]:
        """Reduce a few Python numbers over the workers with `op` in sum | min | max
        (bookkeeping: never accounted)."""
        flat = torch.tensor(list(values), dtype=torch.float64, device=self.device)
        if self.world_size > 1:
            reduce_op = {
                "sum": dist.ReduceOp.SUM,
                "min": dist.ReduceOp.MIN,
                "max": dist.ReduceOp.MAX,
            }
            dist.all_reduce(flat, op=reduce_op[op], group=self.group)
        return flat.tolist()

    @property
    def device(self) -> torch.device:
        backend = dist.get_backend(self.group)
        if backend == "nccl":
            return torch.device("cuda", torch.cuda.current_device())
        return torch.device("cpu")
