"""Fault injection, to try the suite's failure handling on purpose (and for its tests):

    COMMSGD_INJECT_FAULT=<rank>:<step>:<kind> python run.py ...

makes worker <rank> fail when it reaches local step <step>: `raise` (a RuntimeError), `exit`
(os._exit(7), as a crash without a Python exception would), or `kill` (SIGKILL to itself, as the
OOM killer would). Unset, it costs one integer comparison per step.
"""

from __future__ import annotations

import os
import signal

VARIABLE = "COMMSGD_INJECT_FAULT"
KINDS = ("raise", "exit", "kill")


class Fault:
    def __init__(self, rank: int):
        self.step = -1
        spec = os.environ.get(VARIABLE)
        if not spec:
            return
        try:
            fault_rank, step, kind = spec.split(":")
            fault_rank, step = int(fault_rank), int(step)
        except ValueError:
            raise ValueError(f"{VARIABLE} must be <rank>:<step>:<kind>, got {spec!r}") from None
        if kind not in KINDS:
            raise ValueError(f"{VARIABLE}: kind must be one of {', '.join(KINDS)}, got {kind!r}")
        if fault_rank == rank:
            self.step, self.kind = step, kind

    def check(self, step: int) -> None:
        if step != self.step:
            return
        if self.kind == "raise":
            raise RuntimeError(f"injected fault at step {step} ({VARIABLE})")
        if self.kind == "exit":
            os._exit(7)
        os.kill(os.getpid(), signal.SIGKILL)
