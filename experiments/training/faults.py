"""Fault injection, to try the suite's failure handling on purpose (and for its tests):

    COMMSGD_INJECT_FAULT=<rank>:<step>:<kind> python run.py ...

makes worker <rank> fail when it reaches local step <step>: `raise` (a RuntimeError), `exit`
(os._exit(7), as a crash without a Python exception would), `kill` (SIGKILL to itself, as the
OOM killer would) or `hang` (SIGSTOP to itself: it stops answering, as a worker stuck in a
driver or on a dead node would). A malformed value, or a rank the run does not have, is a
one-line error before any worker starts (`check`, from the pre-flight). Unset, it costs one
integer comparison per step.
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass

from experiments.errors import UserError

VARIABLE = "COMMSGD_INJECT_FAULT"
KINDS = ("raise", "exit", "kill", "hang")


@dataclass(frozen=True)
class Spec:
    rank: int
    step: int
    kind: str


def parse(text: str | None) -> Spec | None:
    """The fault `text` asks for (None when unset or empty); a UserError when malformed."""
    if not text:
        return None
    parts = text.split(":")
    try:
        if len(parts) != 3:
            raise ValueError
        rank, step, kind = int(parts[0]), int(parts[1]), parts[2]
    except ValueError:
        raise UserError(
            f"{VARIABLE} must be <rank>:<step>:<kind> (e.g. 1:40:raise), got {text!r}"
        ) from None
    if kind not in KINDS:
        raise UserError(f"{VARIABLE}: kind must be one of {', '.join(KINDS)}, got {kind!r}")
    if rank < 0 or step < 0:
        raise UserError(f"{VARIABLE}: rank and step must be >= 0, got {text!r}")
    return Spec(rank, step, kind)


def check(workers: int) -> None:
    """The pre-flight's check of the variable against a run of `workers` workers."""
    spec = parse(os.environ.get(VARIABLE))
    if spec is not None and spec.rank >= workers:
        raise UserError(
            f"{VARIABLE} names rank {spec.rank}, but the run has {workers} workers "
            f"(ranks 0 to {workers - 1})"
        )


class Fault:
    def __init__(self, rank: int):
        self.step = -1
        spec = parse(os.environ.get(VARIABLE))
        if spec is not None and spec.rank == rank:
            self.step, self.kind = spec.step, spec.kind

    def check(self, step: int) -> None:
        if step != self.step:
            return
        if self.kind == "raise":
            raise RuntimeError(f"injected fault at step {step} ({VARIABLE})")
        if self.kind == "exit":
            os._exit(7)
        os.kill(os.getpid(), signal.SIGKILL if self.kind == "kill" else signal.SIGSTOP)
