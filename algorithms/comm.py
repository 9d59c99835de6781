"""The one door to the network: every collective of the suite goes through `Comm`.

Why a module of our own rather than calling `torch.distributed` directly: each sync must be one
collective on one flat buffer (not one per tensor; preallocated and reused, not a model-sized
allocation per sync), overlap must use `async_op=True` handles (no
threads), and every collective must be accounted for, because the
papers' claims are about bytes sent and communication time exposed to the worker (timing.md,
"The ledger"). torch.distributed offers the primitives but keeps no such ledger.

Averages are computed as SUM then divide by m: `ReduceOp.AVG` exists on gloo only since torch
~2.7 and the suite supports older clusters' builds.

Time (timing.md): each accounted collective asks the worker's clock for its modeled duration.
Blocking waits are exposed communication; for a non-blocking one, the part of its duration
that passed while the worker computed is hidden (`hidden_s`) and only the wait is exposed.
On an accelerator (CUDA tensors with NCCL) the real clock of the host says
when work was *launched*, not when it ran: the host runs ahead of the device, ProcessGroupNCCL's
future completes at enqueue, and a host-side wait would count the forward/backward kernels still
queued before the collective as communication. There a collective is timed on the device, with
CUDA events (`DeviceMarks`): L on the compute stream when the payload is ready (its launch), D
on a side stream made to wait for the collective (its completion), Wb and Wa on the compute
stream just before and just after the compute stream waits for the result. Then, as on gloo,

    exposed = Wa - Wb                     (how long the compute stream stalled for it)
    hidden  = max(0, min(D, Wb) - L)      (non-blocking ones: how long it ran under compute)

read when the events have completed: at the next wait whose events are done (no sync), at the
latest in `settle()`, which the loop calls at each evaluation after its device sync. No
host-device sync is added by a collective. Where the wait is on the host anyway (gloo on CUDA
tensors: gloo copies them to the host and its `wait()` blocks the host; `emulate_network`: the
modeled duration is a host-side sleep) the collective is timed on the host, and the compute
stream is synchronised *before* the wait's timer starts, so queued compute is never booked as
communication (there a hidden time counts from the host's launch). `device_accounts` is the
arithmetic, `DeviceMarks` the CUDA events; both are replaceable (tests use a fake event clock).

Every call into `Comm` (and into a `Pending` it returned) also adds its real duration to
`ledger.call_s`, read on `Comm.timer` (wall time by default; a `clock.DeviceTimer` waits for an
accelerator's queued work): an algorithm's hook time minus the `call_s` it spent is the
algorithm's own work (`time/algo_s`, experiments/training/loop.py and
experiments/training/calibrate.py).

Compressed averages (`comm.compression`): the wire formats are algorithms/codec.py's `Codec`.
"""

from __future__ import annotations

import functools
import struct
import time
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch._utils import _unflatten_dense_tensors

from algorithms.codec import Codec
from algorithms.group import Group, as_group


def flatten(tensors: Sequence[torch.Tensor], out: torch.Tensor | None = None) -> torch.Tensor:
    """Copy `tensors` (one dtype and device) into one contiguous 1-D buffer: `out` when given
    (preallocated, of the right size), else a new one."""
    if not tensors:
        raise ValueError("flatten() needs at least one tensor")
    dtypes = {t.dtype for t in tensors}
    if len(dtypes) != 1:
        raise ValueError(f"flatten() needs one dtype, got {sorted(map(str, dtypes))}")
    # torch's C++ helpers (those of DDP's flat buffers): one call for all the tensors
    # rather than a Python call per tensor, which `cluster=sim`'s worker threads pay for in GIL
    # hand-offs (issue 16)
    tensors = list(tensors)
    if out is None:
        t0 = tensors[0]
        out = torch.empty(sum(t.numel() for t in tensors), dtype=t0.dtype, device=t0.device)
    with torch.no_grad():  # (as `detach()` per tensor: the buffer is outside autograd)
        torch._foreach_copy_(unflatten(out, tensors), tensors)
    return out


def unflatten(flat: torch.Tensor, like: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """Views of `flat` shaped as the tensors of `like` (the inverse of `flatten`)."""
    sizes = [t.numel() for t in like]
    if sum(sizes) != flat.numel():
        raise ValueError(f"buffer has {flat.numel()} values, tensors need {sum(sizes)}")
    return list(_unflatten_dense_tensors(flat, like))


def copy_into_(targets: Sequence[torch.Tensor], flat: torch.Tensor) -> None:
    """Write the values of `flat` back into `targets`, in place."""
    with torch.no_grad():  # one call for all tensors (cluster=sim: fewer GIL hand-offs)
        torch._foreach_copy_(list(targets), unflatten(flat, targets))


@dataclass
class Ledger:
    """Cumulative communication accounts of this worker (timing.md, "The ledger")."""

    bytes: int = 0  # payload bytes handed to collectives
    collectives: int = 0  # number of collectives launched
    peak_bytes: int = 0  # the largest payload of one collective: the peak bandwidth it asks for
    exposed_s: float = 0.0  # time blocked waiting for a collective to finish
    hidden_s: float = 0.0  # duration of async collectives that overlapped computation
    # Real time spent inside this Comm's calls (collectives of any kind, their buffers, codecs,
    # waits), on `Comm.timer`: what separates an algorithm's own work from its communication.
    call_s: float = 0.0
    # Virtual clock: the latest modeled completion among the collectives this worker waited
    # for. Ranks that wait for the same collectives at the same steps (every method but
    # OSP/LOSP) hold the same value at the same step: the time budget's stop (budget.py).
    completed_s: float = 0.0


class WallClock:
    """The default clock: wall time, no emulation (a Comm built without a run's clock)."""

    virtual = False

    def now(self) -> float:
        return time.perf_counter()

    def duration(self, nbytes: int, m: int) -> float:
        return 0.0


# float32 parts that carry one float64 exactly (hi + mid + lo, 24 + 24 + 24 >= 53 bits).
_CLOCK_PARTS = {torch.float64: 1, torch.float32: 3}


def clock_tail_len(dtype: torch.dtype, world_size: int) -> int:
    """Slots a blocking collective's buffer carries for the workers' launch clocks on the
    virtual clock (0: this dtype cannot carry them exactly; a separate all-reduce does)."""
    return _CLOCK_PARTS.get(dtype, 0) * world_size if world_size > 1 else 0


def _to_float32(x: float) -> float:
    return struct.unpack("f", struct.pack("f", x))[0]


def _encode_clock(x: float, parts: int) -> list[float]:
    """`x` as `parts` numbers of the payload's dtype whose float64 sum is exactly `x`."""
    if parts == 1:
        return [x]
    hi = _to_float32(x)
    mid = _to_float32(x - hi)
    return [hi, mid, x - hi - mid]  # the remainder has <= 5 significant bits: exact in float32


def device_accounts(
    seconds: Callable[[object, object], float],
    launch,
    done,
    wait_begin,
    wait_end,
    blocking: bool,
) -> tuple[float, float]:
    """(exposed, hidden) seconds of one collective timed on a device (module doc): `seconds(a,
    b)` is the device time from mark a to mark b. Exposed: how long the compute stream stood
    between `wait_begin` and `wait_end` (it waited for the collective there, nothing else);
    hidden (non-blocking only): the part of the collective's run, from `launch` to `done`, that
    the compute stream spent computing, i.e. up to `wait_begin`."""
    exposed = max(0.0, seconds(wait_begin, wait_end))
    if blocking:
        return exposed, 0.0
    ran = seconds(launch, done)
    computed = seconds(launch, wait_begin)
    return exposed, max(0.0, min(ran, computed))


class DeviceMarks:
    """Marks on a CUDA device's timeline (`torch.cuda.Event(enable_timing=True)`), for
    `_Collective`: `mark()` on the current (compute) stream, `done(work)` on a side stream that
    waits for a collective (so the mark completes when the collective does, whatever the
    compute stream is doing), `ready(mark)` without waiting, `seconds(a, b)` between two
    completed marks. Written against torch's event API only, so a fake with the same four
    methods (tests/test_device_ledger.py) exercises the same accounting on a CPU."""

    def __init__(self, device: torch.device):
        self.device = device
        self.side = torch.cuda.Stream(device)

    def mark(self):
        event = torch.cuda.Event(enable_timing=True)
        event.record(torch.cuda.current_stream(self.device))
        return event

    def done(self, work):
        event = torch.cuda.Event(enable_timing=True)
        with torch.cuda.stream(self.side):
            work.wait()  # the side stream (not the host, not the compute stream) waits
            event.record(self.side)
        return event

    def ready(self, mark) -> bool:
        return mark.query()

    def seconds(self, a, b) -> float:
        return a.elapsed_time(b) / 1e3  # waits for b if it has not completed


@dataclass
class _DeviceWait:
    """A device-timed wait whose accounts are read once its marks have completed."""

    launch: object
    done: object
    wait_begin: object
    wait_end: object
    blocking: bool
    marks: object  # whose `seconds` and `ready` read them


def _timed(method):
    """Add the real duration of a call of `method` (of a Comm, or of a Pending of one) to the
    Comm's `ledger.call_s`; nested calls count once."""

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        comm = self if isinstance(self, Comm) else self._comm
        with comm.calls():
            return method(self, *args, **kwargs)

    return wrapper


class _Collective:
    """One accounted all-reduce in flight, with the times the clock model needs.

    Real clock: `earliest` is launch + modeled duration (0 without network emulation). On the
    host (CPU tensors) the real completion time is stamped by a callback on the work's future;
    on a device the collective is timed with marks on the device's streams instead (`marks`,
    module doc), because a CUDA future completes when the collective is enqueued. Virtual
    clock: every worker needs every launch clock c_j to compute the same completion
    max_j c_j + T. A blocking collective carries them in a tail of its own buffer (`wire`: rank
    j writes c_j in its slots, the others zeros, so the SUM delivers every c_j exactly): one
    collective per sync. A non-blocking one sends them in a second, small all-reduce (MAX,
    float64) launched with it, so `is_completed()` can answer without waiting for the payload.

    `launch_at` (virtual clock): the launch clock when the collective was, in the modeled
    timeline, started earlier than now (sync_sgd's gradient buckets, ready mid-backward);
    `after`: a collective this one queues behind on the worker's link (it starts no earlier
    than that one completes: the buckets of one step share the network).
    """

    def __init__(
        self,
        comm: Comm,
        flat: torch.Tensor,
        async_op: bool,
        wire: torch.Tensor | None = None,
        nbytes: int | None = None,
        launch_at: float | None = None,
        after: _Collective | None = None,
    ):
        clock, m = comm.clock, comm.world_size
        self.comm, self.flat = comm, flat
        self.launch = clock.now() if launch_at is None or not clock.virtual else launch_at
        self.after = after if clock.virtual else None
        # the modeled duration is that of the bytes on the wire (compressed when a Codec is on)
        nbytes = flat.numel() * flat.element_size() if nbytes is None else nbytes
        self.duration = clock.duration(nbytes, m)
        self.real_done: float | None = None
        self.work = self.clock_work = None
        self.clocks = None
        self.latest = self.launch  # max_j c_j, once the launch clocks have arrived
        self.tail: torch.Tensor | None = None
        self.completion: float | None = None  # virtual clock, once known
        self.begin = self.launch  # virtual clock: when the link starts carrying it
        # Device timing (real clock, CUDA tensors, no emulated duration): the launch mark
        self.marks = None if clock.virtual else comm._marks_for(flat)
        if self.marks is not None and self.duration > 0:
            self.marks = None  # emulation sleeps on the host: timed there (wait())
        self.launch_mark = self.marks.mark() if self.marks is not None and m > 1 else None
        wire = flat if wire is None else wire
        if wire.numel() > flat.numel():  # the launch clocks ride in the payload's collective
            self.tail = wire[flat.numel() :]
            parts = self.tail.numel() // m
            self.tail.zero_()
            values = torch.tensor(_encode_clock(self.launch, parts), dtype=wire.dtype)
            self.tail[comm.rank * parts : (comm.rank + 1) * parts].copy_(values)
        if m > 1:
            self.work = comm.group.all_reduce(wire, "sum", async_op=True)
            if clock.virtual and self.tail is None:
                self.clocks = torch.tensor([self.launch], dtype=torch.float64, device=comm.device)
                self.clock_work = comm.group.all_reduce(self.clocks, "max", async_op=True)
            elif async_op and self.launch_mark is None and comm._completes_on_host(flat):
                # (not on NCCL: a CUDA future completes when the collective is enqueued)
                self.work.get_future().add_done_callback(self._stamp)
        else:
            self.real_done = self.launch

    def _stamp(self, _future) -> None:
        self.real_done = time.perf_counter()

    def _completion(self) -> float:
        """Virtual clock: max(max_j c_j, completion of the collective queued before it) + T,
        known once the launch clocks have arrived."""
        if self.completion is not None:
            return self.completion
        if self.tail is not None:
            self.work.wait()
            values = self.tail.tolist()  # float64 sums of each rank's parts: exact
            parts = len(values) // self.comm.world_size
            self.latest = max(
                sum(values[j * parts : (j + 1) * parts]) for j in range(self.comm.world_size)
            )
            self.tail = None
        if self.clock_work is not None:
            self.clock_work.wait()
            self.clock_work = None
            self.latest = self.clocks.item()
        self.begin = self.latest
        if self.after is not None:
            self.begin = max(self.begin, self.after._completion())
            self.after = None
        self.completion = self.begin + self.duration
        return self.completion

    def is_completed(self) -> bool:
        clock = self.comm.clock
        if clock.virtual:
            return clock.now() >= self._completion()
        if self.work is not None and not self.work.is_completed():
            return False
        return clock.now() >= self.launch + self.duration

    def wait(self, blocking: bool) -> None:
        """Wait until the collective is complete; account exposed and hidden time."""
        clock, ledger = self.comm.clock, self.comm.ledger
        if clock.virtual:
            completion = self._completion()
            if self.work is not None:
                self.work.wait()  # real time, not modeled time: costs nothing on this clock
            start = clock.now()
            if not blocking:
                # from when it could start (its own launch, or the link freeing up)
                began = max(self.launch, self.begin)
                ledger.hidden_s += max(0.0, min(completion, start) - began)
            ledger.exposed_s += max(0.0, completion - start)
            ledger.completed_s = max(ledger.completed_s, completion)
            clock.t = max(start, completion)
            return
        if self.launch_mark is not None:  # on a device: timed by marks, accounted later
            marks = self.marks
            done = marks.done(self.work)
            wait_begin = marks.mark()
            self.work.wait()  # the compute stream waits; the host does not
            wait_end = marks.mark()
            self.comm._device_waits.append(
                _DeviceWait(self.launch_mark, done, wait_begin, wait_end, blocking, marks)
            )
            self.comm.settle(block=False)
            return
        if self.flat.is_cuda:
            # the compute queued before the wait belongs to compute, not to this wait: drain
            # it before the timer starts (the reference synchronises before its timers)
            torch.cuda.current_stream(self.flat.device).synchronize()
        start = clock.now()
        if self.work is not None:
            self.work.wait()
            if self.flat.is_cuda:
                torch.cuda.current_stream(self.flat.device).synchronize()
        earliest = self.launch + self.duration
        if clock.now() < earliest:  # network emulation: sleep off the modeled remainder
            time.sleep(earliest - clock.now())
        end = clock.now()
        if not blocking:
            # on NCCL the real completion is not stamped (the future completes at enqueue):
            # the modeled completion stands for it
            real = self.real_done
            done = max(real or start, earliest)
            ledger.hidden_s += max(0.0, min(done, start) - self.launch)
        ledger.exposed_s += end - start


class _Arrived:
    """A collective restored from a checkpoint (`Pending.restore`): its sum is here; on the
    virtual clock it still completes at the modeled time it had when it was saved, so waiting
    for it accounts exactly what the uninterrupted run accounted."""

    def __init__(self, comm: Comm, launch: float, latest: float, duration: float):
        self.comm, self.launch, self.latest, self.duration = comm, launch, latest, duration

    def is_completed(self) -> bool:
        clock = self.comm.clock
        return not clock.virtual or clock.now() >= self.latest + self.duration

    def wait(self, blocking: bool) -> None:
        clock, ledger = self.comm.clock, self.comm.ledger
        if not clock.virtual:  # wall time of a previous process: nothing left to wait for
            return
        completion, start = self.latest + self.duration, clock.now()
        if not blocking:
            ledger.hidden_s += max(0.0, min(completion, start) - self.launch)
        ledger.exposed_s += max(0.0, completion - start)
        ledger.completed_s = max(ledger.completed_s, completion)
        clock.t = max(start, completion)


class Pending:
    """A collective in flight. `wait()` blocks (the blocked time is exposed communication)."""

    def __init__(self, comm: Comm, collective, flat: torch.Tensor, like):
        self._comm, self._collective, self._flat, self._like = comm, collective, flat, like
        self._done = False

    def snapshot(self) -> dict:
        """What a checkpoint keeps of this collective: the sum, once the network has delivered
        it, and its times on the clock. Waits in real time only: this worker's clock and
        ledger are untouched, so `restore()` continues exactly where this Pending stands.
        Every rank must have launched the collective (a collective of the same step)."""
        c = self._collective
        launch = latest = duration = 0.0
        if isinstance(c, _Collective):
            if c.work is not None:
                c.work.wait()
            launch, duration = c.launch, c.duration
            latest = c._completion() - duration if self._comm.clock.virtual else launch
        elif c is not None:  # a bookkeeping collective
            c.wait()
        return {
            "sum": self._flat.clone(),
            "divided": self._done,
            "shapes": [tuple(t.shape) for t in self._like],
            "accounted": isinstance(c, _Collective),
            "launch": launch,
            "latest": latest,
            "duration": duration,
        }

    @classmethod
    def restore(cls, comm: Comm, snap: dict) -> Pending:
        """The Pending of `snapshot()`, on `comm` (after a restart)."""
        like = [torch.empty(s, device="meta") for s in snap["shapes"]]
        collective = (
            _Arrived(comm, snap["launch"], snap["latest"], snap["duration"])
            if snap["accounted"]
            else None
        )
        pending = cls(comm, collective, snap["sum"].clone(), like)
        pending._done = snap["divided"]
        return pending

    @_timed
    def is_completed(self) -> bool:
        """Has the average arrived? On the virtual clock: has this worker's clock reached the
        collective's modeled completion (timing.md)."""
        if self._done:
            return True
        if isinstance(self._collective, _Collective | _Arrived):
            return self._collective.is_completed()
        return self._collective is None or self._collective.is_completed()

    def completes_by(self, t: float) -> bool:
        """Virtual clock: whether the collective's modeled completion is at or before `t`
        (waits in real time for the launch clocks only; this worker's clock and ledger are
        untouched). A bookkeeping collective, or one already waited for: True."""
        c = self._collective
        if self._done or not isinstance(c, _Collective | _Arrived):
            return True
        completion = c._completion() if isinstance(c, _Collective) else c.latest + c.duration
        return completion <= t

    def peek(self) -> list[torch.Tensor]:
        """The average this collective delivers, as new tensors shaped like the inputs, without
        waiting for it on the run's clock: this worker's clock, ledger and the Pending itself
        are untouched (a later `wait()` accounts as if there had been no peek). For a model as
        it stood at a time the collective had completed by, on the virtual clock (budget.py):
        call it only when `completes_by` says so."""
        if self._done:
            return [t.clone() for t in unflatten(self._flat, self._like)]
        c = self._collective
        work = c.work if isinstance(c, _Collective) else c
        if work is not None and not isinstance(work, _Arrived):
            work.wait()  # real time only
        flat = self._flat / self._comm.world_size
        if isinstance(c, _Collective | _Arrived) and self._comm.codec.active:
            self._comm.codec.roundtrip_(flat, [t.numel() for t in self._like])
        return [t.clone() for t in unflatten(flat, self._like)]

    def wait(self) -> list[torch.Tensor]:
        """Block until the average has arrived; return it shaped like the inputs."""
        return unflatten(self.wait_flat(), self._like)

    @_timed
    def wait_flat(self) -> torch.Tensor:
        """`wait()`, returning the average as the one flat buffer it arrived in (no copy)."""
        if not self._done:
            if isinstance(self._collective, _Collective | _Arrived):
                self._collective.wait(blocking=False)
            elif self._collective is not None:  # a bookkeeping collective: not accounted
                self._collective.wait()
            self._flat.div_(self._comm.world_size)
            if isinstance(self._collective, _Collective | _Arrived) and self._comm.codec.active:
                # the all-gather phase carries the average in the wire format too
                self._comm.codec.roundtrip_(self._flat, [t.numel() for t in self._like])
            self._done = True
        return self._flat


class Comm:
    """Averaging over the workers of `group`, with a ledger of bytes, collectives and waits.

    `clock` is the worker's clock (experiments/training/clock.py): real (optionally emulating the
    network) or virtual; without one, plain wall time. `timer` reads the real time that
    `ledger.call_s` accounts (default `time.perf_counter`; a `clock.DeviceTimer` for device
    time). `marks`: how collectives on a device are timed (default: `DeviceMarks`, CUDA events,
    for CUDA tensors; none for CPU tensors). `account=False` is for bookkeeping
    collectives (evaluation, metric reduction) that are not part of the algorithm: they are not
    in `comm/bytes`, take no modeled time and are not in the exposed time. `compression` is the
    wire format of the accounted averages (`Codec`; `comm.compression` in the config).
    `group` is where the collectives go (algorithms/group.py): a `Group` (the worker threads of
    `cluster=sim`), a torch.distributed process group, or None: this thread's default
    (`group.use`), else torch.distributed's default group.
    """

    def __init__(
        self,
        group: Group | None = None,
        clock=None,
        compression: str = "none",
        timer: Callable[[], float] | None = None,
        marks=None,
    ):
        self.codec = Codec(compression)
        # Device timing of collectives on CUDA tensors (module doc): `DeviceMarks` per device,
        # made when first needed; `marks` given: used for every tensor (tests: a fake clock).
        self._marks = marks
        self._device_marks: dict[torch.device, DeviceMarks] = {}
        self._device_waits: list[_DeviceWait] = []
        self.timer = timer if timer is not None else time.perf_counter
        self._depth = 0  # calls in progress (nested calls are timed once)
        self.group = as_group(group)
        self.world_size = self.group.world_size
        self.rank = self.group.rank
        self.clock = clock if clock is not None else WallClock()
        self.ledger = Ledger()
        # Preallocated flat buffers (hot path: no model-sized allocation per sync), keyed by
        # (slot, dtype, device, numel). Blocking collectives share slot None: their buffer is
        # copied out before they return. An async slot holds two buffers used in turn.
        self._buffers: dict[tuple, torch.Tensor] = {}
        self._turn: dict[tuple, int] = {}

    def _completes_on_host(self, flat: torch.Tensor) -> bool:
        """Whether a collective on `flat` completes on the host: CPU tensors, and gloo on CUDA
        tensors (gloo copies them to the host and its `wait()` blocks the host until done).
        NCCL's does not: its `wait()` only makes the compute stream wait."""
        if not flat.is_cuda:
            return True
        dist_backend = getattr(getattr(self.group, "dist", None), "get_backend", None)
        if dist_backend is None:
            return False
        return dist_backend(self.group.pg) == "gloo"

    def _marks_for(self, flat: torch.Tensor):
        """How a collective on `flat` is timed on the real clock: marks on its device (CUDA
        with NCCL), or None (the host's clock: CPU tensors; gloo on CUDA tensors, whose wait
        blocks the host, so marks would be recorded after the stall they should bracket)."""
        if self._marks is not None:
            return self._marks
        if self._completes_on_host(flat):
            return None
        marks = self._device_marks.get(flat.device)
        if marks is None:
            marks = self._device_marks[flat.device] = DeviceMarks(flat.device)
        return marks

    def settle(self, block: bool = True) -> float:
        """Fold the device-timed waits (module doc) into the ledger: those whose marks have
        completed, or (`block`) all of them, waiting for the device. Returns the exposed
        seconds added. The loop calls it at each evaluation, after its device sync (so it
        waits for nothing there); on the CPU there is nothing to settle."""
        added, keep = 0.0, []
        for w in self._device_waits:
            marks = w.marks
            if not block and not (marks.ready(w.wait_end) and marks.ready(w.done)):
                keep.append(w)
                continue
            exposed, hidden = device_accounts(
                marks.seconds, w.launch, w.done, w.wait_begin, w.wait_end, w.blocking
            )
            self.ledger.exposed_s += exposed
            self.ledger.hidden_s += hidden
            added += exposed
        self._device_waits = keep
        return added

    @contextmanager
    def calls(self):
        """Time the enclosed code as time spent in this Comm (`ledger.call_s`); nested uses
        count once."""
        if self._depth:
            yield
            return
        self._depth += 1
        start = self.timer()
        try:
            yield
        finally:
            self._depth -= 1
            self.ledger.call_s += self.timer() - start

    def _buffer(
        self, tensors: list[torch.Tensor], slot: str | None, extra: int = 0, turns: int = 2
    ) -> torch.Tensor:
        """A flat buffer for `tensors` (+ `extra` slots), reused across calls (see `mean_async`
        for slots and `turns`)."""
        t0 = tensors[0]
        key = (slot, t0.dtype, t0.device, sum(t.numel() for t in tensors) + extra)
        if slot is not None:
            turn = self._turn[key] = (self._turn.get(key, -1) + 1) % turns
            key = (*key, turn)
        buf = self._buffers.get(key)
        if buf is None:
            buf = self._buffers[key] = torch.empty(key[3], dtype=key[1], device=key[2])
        return buf

    def _launch(
        self,
        flat: torch.Tensor,
        account: bool,
        async_op: bool,
        wire: torch.Tensor | None = None,
        sizes: Sequence[int] | None = None,
        launch_at: float | None = None,
        after: _Collective | None = None,
    ):
        """Start a SUM all-reduce of `flat` (sent as `wire` when the launch clocks ride along);
        returns the handle (None when alone). Accounted: `flat` (tensors of `sizes` values) goes
        through the codec first, and the ledger and the clock see its wire bytes (`launch_at`,
        `after`: `_Collective`)."""
        if account:
            sizes = [flat.numel()] if sizes is None else sizes
            self.codec.roundtrip_(flat, sizes)  # what each worker's contribution decodes to
            nbytes = self.codec.wire_bytes(sizes, flat.element_size())
            self.ledger.bytes += nbytes
            self.ledger.collectives += 1
            self.ledger.peak_bytes = max(self.ledger.peak_bytes, nbytes)
            return _Collective(self, flat, async_op, wire, nbytes, launch_at, after)
        if self.world_size == 1:
            return None
        return self.group.all_reduce(flat, "sum", async_op=async_op)

    def _sum_blocking(self, tensors: list[torch.Tensor], account: bool) -> torch.Tensor:
        """One blocking SUM all-reduce of `tensors` as one flat buffer; returns the buffer (a
        reused one: read it before the next collective)."""
        n = sum(t.numel() for t in tensors)
        tail = clock_tail_len(tensors[0].dtype, self.world_size)
        tail = tail if account and self.clock.virtual else 0
        wire = self._buffer(tensors, None, extra=tail)
        flat = flatten(tensors, out=wire.narrow(0, 0, n) if tail else wire)
        sizes = [t.numel() for t in tensors]
        handle = self._launch(flat, account, async_op=False, wire=wire, sizes=sizes)
        if isinstance(handle, _Collective):
            handle.wait(blocking=True)
        return flat

    def _decoded(self, flat: torch.Tensor, tensors: list[torch.Tensor], account: bool):
        """The reduced buffer as it arrives: in the wire format when accounted (module doc)."""
        if account and self.codec.active:
            self.codec.roundtrip_(flat, [t.numel() for t in tensors])
        return flat

    @_timed
    def mean_(self, tensors: Sequence[torch.Tensor], *, account: bool = True) -> None:
        """Replace every tensor by its average over the workers (blocking, one collective)."""
        tensors = list(tensors)
        total = self._sum_blocking(tensors, account).div_(self.world_size)
        copy_into_(tensors, self._decoded(total, tensors, account))

    @_timed
    def sum_(self, tensors: Sequence[torch.Tensor], *, account: bool = True) -> None:
        """Replace every tensor by its sum over the workers (blocking, one collective)."""
        tensors = list(tensors)
        copy_into_(tensors, self._decoded(self._sum_blocking(tensors, account), tensors, account))

    @_timed
    def mean_async(
        self,
        tensors: Sequence[torch.Tensor],
        *,
        account: bool = True,
        slot: str | None = None,
        launch_at: float | None = None,
        after: Pending | None = None,
        turns: int = 2,
    ) -> Pending:
        """Start averaging a snapshot of `tensors` in the background; `.wait()` returns it.

        The inputs are copied into a flat buffer first, so they may change while the
        collective runs (the worker keeps training on them). Without `slot` the buffer is new.
        With a `slot` (a name of the caller's), the slot's two preallocated buffers take turns:
        the averages `wait()` returns stay valid until the second-next `mean_async` on the
        same slot, which fits an algorithm with at most one average in flight and one in use;
        `turns=1`: one buffer, for a caller that reads each average before the slot's next
        `mean_async` (sync_sgd's buckets: the memory of DDP's buckets, not twice it).

        Virtual clock only (ignored on the real one, where the times are measured):
        `launch_at` is the modeled launch time when it is earlier than the clock's now (a
        gradient bucket ready mid-backward, algorithms/sync_sgd.py); `after` an accounted
        average this one queues behind on the link (it starts once that one completes).
        """
        tensors = list(tensors)
        out = self._buffer(tensors, slot, turns=turns) if slot is not None else None
        flat = flatten(tensors, out=out)
        sizes = [t.numel() for t in tensors]
        previous = after._collective if after is not None else None
        previous = previous if isinstance(previous, _Collective) else None
        handle = self._launch(
            flat, account, async_op=True, sizes=sizes, launch_at=launch_at, after=previous
        )
        return Pending(self, handle, flat, tensors)

    @_timed
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
            self.group.broadcast(flat, src)
            copy_into_(group, flat)

    @_timed
    def sum_scalars(self, values: Sequence[float], *, op: str = "sum") -> list[float]:
        """Reduce a few Python numbers over the workers with `op` in sum | min | max
        (bookkeeping: never accounted)."""
        flat = torch.tensor(list(values), dtype=torch.float64, device=self.device)
        if self.world_size > 1:
            self.group.all_reduce(flat, op)
        return flat.tolist()

    @property
    def device(self) -> torch.device:
        """Where the bookkeeping tensors go: the group's device (CUDA for NCCL)."""
        return self.group.device
