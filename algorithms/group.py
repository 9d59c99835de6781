"""Where a collective goes: the processes of a torch.distributed group, or the other worker
threads of this process (`cluster=sim`).

`Comm` (algorithms/comm.py) and the suite's own agreements (experiments/store/checkpoint.py: stop
requests, checkpoint digests) talk to a `Group`; two implementations:

- `TorchGroup`: a `torch.distributed` process group (gloo or NCCL), one worker per process;
- `ThreadGroup`: m workers as threads of one process, each with its own `ThreadGroup` handle on
  one shared `Rendezvous` (`ThreadGroup.create(m)`).

Both return torch's kind of handle from a non-blocking all-reduce (`wait(timeout)`,
`is_completed()`, `get_future().add_done_callback(fn)`), so the code that times and waits for
collectives is the same for both.

How the in-process reducer works (written by hand: torch has no in-process backend that the
algorithms' `async_op` handles and this suite's clocks can use; the `fake` and `threaded`
backends of torch's tests neither reduce deterministically nor time out by rank):
- collectives are matched by their sequence number on each rank, as NCCL and gloo match them:
  every rank issues the same collectives in the same order (the algorithms' contract);
- the last rank to arrive reduces, in rank order: ((x_0 + x_1) + x_2) + ..., always the same
  sum whatever the threads' timing, written into every rank's tensor; a non-blocking all-reduce
  lets its caller go on at once, and its result is there once every rank has launched it;
- a wait that lasts longer than the group's timeout raises, naming the ranks that did not
  arrive; a rank that fails (`abort`) makes every other rank's wait raise at once, naming it.
Result values: the same numbers as gloo up to the order of the additions (gloo's ring sums
chunk by chunk in ring order): float64 runs agree to ~1e-15 per sum (tests/test_sim.py).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any, Protocol

import torch

OPS = ("sum", "max", "min")


class Work(Protocol):
    """The handle of a non-blocking collective (torch's `Work` has these methods)."""

    def wait(self, timeout: timedelta | float | None = None) -> Any: ...

    def is_completed(self) -> bool: ...

    def get_future(self) -> Any: ...


class Group(Protocol):
    """The workers a collective runs among, and this worker's place in them."""

    rank: int
    world_size: int

    @property
    def device(self) -> torch.device:
        """Where small bookkeeping tensors (scalars, flags) of this group live."""
        ...

    def all_reduce(self, tensor: torch.Tensor, op: str = "sum", async_op: bool = False):
        """Reduce `tensor` in place over the workers with `op` (sum | max | min); a `Work`
        when `async_op`, else None once done."""
        ...

    def broadcast(self, tensor: torch.Tensor, src: int) -> None: ...

    def all_gather_object(self, obj: Any) -> list[Any]: ...

    def barrier(self) -> None: ...


# ---------------------------------------------------------------------------------------------
# torch.distributed


class TorchGroup:
    """A torch.distributed process group (None: the default group) as a `Group`."""

    def __init__(self, pg=None):
        import torch.distributed as dist

        self.dist, self.pg = dist, pg
        self.rank = dist.get_rank(pg)
        self.world_size = dist.get_world_size(pg)

    @property
    def device(self) -> torch.device:
        if self.dist.get_backend(self.pg) == "nccl":
            return torch.device("cuda", torch.cuda.current_device())
        return torch.device("cpu")

    def _op(self, op: str):
        ops = self.dist.ReduceOp
        return {"sum": ops.SUM, "max": ops.MAX, "min": ops.MIN}[op]

    def all_reduce(self, tensor: torch.Tensor, op: str = "sum", async_op: bool = False):
        return self.dist.all_reduce(tensor, op=self._op(op), group=self.pg, async_op=async_op)

    def broadcast(self, tensor: torch.Tensor, src: int) -> None:
        self.dist.broadcast(tensor, src=src, group=self.pg)

    def all_gather_object(self, obj: Any) -> list[Any]:
        out: list[Any] = [None] * self.world_size
        self.dist.all_gather_object(out, obj, group=self.pg)
        return out

    def barrier(self) -> None:
        self.dist.barrier(group=self.pg)


# ---------------------------------------------------------------------------------------------
# threads of one process


class CollectiveTimeout(RuntimeError):
    """A collective waited longer than the group's timeout for the ranks named."""


class PeerFailed(RuntimeError):
    """Another worker of the group failed (or the run was stopped): this one cannot go on."""


class _Op:
    """One collective in the making: what each rank brought, and its result once all came."""

    def __init__(self, kind: str, seq: int, m: int):
        self.kind, self.seq = kind, seq
        self.inputs: list[Any] = [None] * m
        self.arrived: list[bool] = [False] * m
        self.count = 0
        self.done = False
        self.result: Any = None
        self.reduce: Callable | None = None  # the reducer, once a rank brought it
        self.callbacks: list[Callable[[], None]] = []

    def missing(self) -> list[int]:
        return [r for r, here in enumerate(self.arrived) if not here]


class Rendezvous:
    """What the m `ThreadGroup` handles of one group share: the collectives in the making,
    matched by sequence number, and the group's failure, if any."""

    def __init__(self, world_size: int, timeout_s: float, name: str = "group"):
        self.world_size, self.timeout_s, self.name = world_size, timeout_s, name
        self.cond = threading.Condition()
        self.ops: dict[int, _Op] = {}
        self.failure: str | None = None
        self.error: type[BaseException] = PeerFailed
        self.departed: set[int] = set()  # ranks that left (`leave`)

    def abort(self, message: str, error: type[BaseException] = PeerFailed) -> None:
        """Make every wait of this group raise `error(message)` now and from now on (the first
        abort's message and error stay)."""
        with self.cond:
            if self.failure is None:
                self.failure, self.error = message, error
            self.cond.notify_all()

    def _check(self) -> None:
        if self.failure is not None:
            raise self.error(self.failure)

    def arrive(self, rank: int, seq: int, kind: str, value: Any, reduce: Callable) -> _Op:
        """Rank `rank` brings `value` to collective `seq`; the last to arrive runs
        `reduce(op)` (outside the lock: a model-sized sum must not stall the other
        collectives) and wakes the waiting ranks."""
        with self.cond:
            self._check()
            if rank in self.departed:
                raise PeerFailed(f"{self.name}: rank {rank} has left the group")
            op = self.ops.get(seq)
            if op is None:
                op = self.ops[seq] = self._new_op(kind, seq)
            elif op.kind != kind:
                message = (
                    f"{self.name}: collective #{seq} is {op.kind} on other ranks but {kind} on "
                    f"rank {rank}: the workers issued different collectives"
                )
                self.failure = self.failure or message
                self.cond.notify_all()
                raise RuntimeError(message)
            op.inputs[rank] = value
            op.arrived[rank] = True
            op.count += 1
            op.reduce = reduce
            last = op.count == self.world_size
        if last:
            self._complete(op, rank)
        return op

    def _new_op(self, kind: str, seq: int) -> _Op:
        op = _Op(kind, seq, self.world_size)
        for r in self.departed:  # a rank that left is there with nothing (`leave`)
            op.arrived[r] = True
            op.count += 1
        return op

    def _complete(self, op: _Op, rank: int) -> None:
        try:
            op.result = op.reduce(op)
        except BaseException as e:
            self.abort(f"{self.name}: collective #{op.seq} failed on rank {rank}: {e}")
            raise
        with self.cond:
            op.done = True
            del self.ops[op.seq]
            callbacks, op.callbacks = op.callbacks, []
            self.cond.notify_all()
        for callback in callbacks:
            callback()

    def leave(self, rank: int) -> None:
        """Rank `rank` takes part in no more collectives of this group: from now on each
        collective completes without it, its input None (the reducers skip it). For groups
        whose members may end at different times: the seeds trained in lock-step
        (experiments/workers/batched.py), where one seed that diverged or failed must not hold
        up the others. A collective it was the last to be waited for completes here, in its
        thread."""
        with self.cond:
            if rank in self.departed:
                return
            self.departed.add(rank)
            ready = []
            for op in self.ops.values():
                if not op.arrived[rank]:
                    op.arrived[rank] = True
                    op.count += 1
                    if op.count == self.world_size and op.reduce is not None:
                        ready.append(op)
        for op in sorted(ready, key=lambda o: o.seq):
            if self.failure is None:
                self._complete(op, rank)

    def wait(self, op: _Op, rank: int, timeout_s: float | None = None) -> None:
        """Block rank `rank` until `op` is done; raise on a peer's failure, or when a peer
        has not arrived within `timeout_s`. Once every rank has arrived the last one is
        computing the result (a batched pass over every replica: on a loaded machine it can
        take longer than the timeout, e.g. the evaluation of 8 seeds x 8 workers): that is
        progress, not a hung peer, so the wait goes on (the computing rank's own failure
        aborts the group and ends it)."""
        timeout_s = self.timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + timeout_s
        with self.cond:
            while not op.done:
                self._check()
                left = deadline - time.monotonic()
                if left <= 0 and not op.missing():
                    deadline, left = time.monotonic() + timeout_s, timeout_s
                if left <= 0:
                    missing = op.missing()
                    who = ", ".join(str(r) for r in missing)
                    message = (
                        f"{self.name}: rank {rank} waited {timeout_s:g} s (dist_timeout_s) "
                        f"for {op.kind} #{op.seq}: rank{'s' if len(missing) > 1 else ''} "
                        f"{who} did not arrive"
                    )
                    self.failure = self.failure or message
                    self.cond.notify_all()
                    raise CollectiveTimeout(message)
                self.cond.wait(min(left, 1.0))
            # a result is a result even if a peer failed afterwards


class _Future:
    """The part of torch's Future that the suite uses: a callback once the work is done."""

    def __init__(self, work: ThreadWork):
        self._work = work

    def add_done_callback(self, fn: Callable[[Any], None]) -> None:
        rdv, op = self._work.rendezvous, self._work.op
        with rdv.cond:
            if not op.done:
                op.callbacks.append(lambda: fn(self))
                return
        fn(self)

    def done(self) -> bool:
        return self._work.is_completed()


class ThreadWork:
    """A non-blocking collective of a `ThreadGroup`."""

    def __init__(self, rendezvous: Rendezvous, op: _Op, rank: int):
        self.rendezvous, self.op, self.rank = rendezvous, op, rank

    def wait(self, timeout: timedelta | float | None = None) -> bool:
        if isinstance(timeout, timedelta):
            timeout = timeout.total_seconds()
        self.rendezvous.wait(self.op, self.rank, timeout)
        return True

    def is_completed(self) -> bool:
        return self.op.done

    def get_future(self) -> _Future:
        return _Future(self)


@torch.no_grad()
def _reduce_in_rank_order_(tensors: list[torch.Tensor], op: str) -> None:
    """Reduce `tensors` (one per rank) in rank order into every one of them: rank 0's tensor
    accumulates ((x_0 + x_1) + x_2) + ..., then the others copy it (no model-sized
    temporary)."""
    out = tensors[0]
    for t in tensors[1:]:
        if op == "sum":
            out.add_(t)
        elif op == "max":
            torch.maximum(out, t, out=out)
        else:
            torch.minimum(out, t, out=out)
    for t in tensors[1:]:
        t.copy_(out)


class ThreadGroup:
    """Worker `rank` of m worker threads of this process (module doc). Build the m handles of
    one group with `ThreadGroup.create(m, timeout_s)`; hand handle r to thread r."""

    def __init__(self, rendezvous: Rendezvous, rank: int, device: torch.device):
        self.rendezvous, self.rank = rendezvous, rank
        self.world_size = rendezvous.world_size
        self._device = device
        self._seq = 0

    @classmethod
    def create(
        cls,
        world_size: int,
        timeout_s: float,
        device: torch.device | str = "cpu",
        name: str = "group",
    ) -> list[ThreadGroup]:
        rendezvous = Rendezvous(world_size, timeout_s, name)
        return [cls(rendezvous, r, torch.device(device)) for r in range(world_size)]

    @property
    def device(self) -> torch.device:
        return self._device

    def abort(self, message: str, error: type[BaseException] = PeerFailed) -> None:
        """Make every rank's waits on this group raise `error(message)` (another worker
        failed, or the run was stopped)."""
        self.rendezvous.abort(message, error)

    def _next(self) -> int:
        self._seq += 1
        return self._seq

    def all_reduce(self, tensor: torch.Tensor, op: str = "sum", async_op: bool = False):
        if op not in OPS:
            raise ValueError(f"op must be one of {', '.join(OPS)}, got {op!r}")

        def reduce(o: _Op) -> None:
            tensors = o.inputs
            sizes = {(t.numel(), t.dtype) for t in tensors}
            if len(sizes) != 1:
                raise RuntimeError(f"all_reduce #{o.seq}: the ranks' tensors differ: {sizes}")
            _reduce_in_rank_order_(tensors, op)

        seq = self._next()
        arrived = self.rendezvous.arrive(self.rank, seq, f"all_reduce-{op}", tensor, reduce)
        work = ThreadWork(self.rendezvous, arrived, self.rank)
        if async_op:
            return work
        work.wait()
        return None

    def collective(self, kind: str, value: Any, reduce: Callable[[_Op], Any]) -> Any:
        """A blocking collective of any kind: every rank brings `value`, the last to arrive
        runs `reduce(op)` over all of them (`op.inputs`, in rank order), and every rank gets
        its result."""
        op = self.rendezvous.arrive(self.rank, self._next(), kind, value, reduce)
        self.rendezvous.wait(op, self.rank)
        return op.result

    def broadcast(self, tensor: torch.Tensor, src: int) -> None:
        def reduce(o: _Op) -> None:
            with torch.no_grad():
                for r, t in enumerate(o.inputs):
                    if r != src:
                        t.copy_(o.inputs[src])

        self.collective(f"broadcast-{src}", tensor, reduce)

    def all_gather_object(self, obj: Any) -> list[Any]:
        return list(self.collective("all_gather_object", obj, lambda o: list(o.inputs)))

    def barrier(self) -> None:
        self.collective("barrier", None, lambda o: None)


# ---------------------------------------------------------------------------------------------
# the group a `Comm()` without arguments uses


_current = threading.local()


def use(group: Group | None) -> None:
    """Make `group` the default of `as_group(None)` in this thread (a worker thread of
    `cluster=sim` sets its own); None: back to torch.distributed's default group."""
    _current.group = group


def as_group(group: Any = None) -> Group:
    """`group` as a `Group`: a Group as is, a torch.distributed process group wrapped, None the
    thread's default (`use`), else torch.distributed's default group."""
    if group is None:
        group = getattr(_current, "group", None)
        if group is None:
            return TorchGroup(None)
    if isinstance(group, ThreadGroup | TorchGroup):
        return group
    if all(hasattr(group, name) for name in ("all_reduce", "broadcast", "rank", "world_size")):
        return group
    return TorchGroup(group)
