"""The one exception type for mistakes in the user's input.

A `UserError` is printed as a single line on stderr and ends the program with exit code 2 before
any worker starts (contract.md, "Exit codes"): bad config values, missing data, infeasible
partitions. Everything else is a bug or an environment failure and keeps its traceback.
"""


class UserError(Exception):
    """A problem with the user's input, reported as one line (no traceback)."""


class Interrupted(Exception):
    """The run stopped on a request (a signal) after saving a checkpoint: rerunning the same
    command resumes it. run.py prints one line and exits with code 3."""


class WorkerFailed(Exception):
    """A worker process raised or died: the message names its rank and the cause; `details`
    holds the worker's traceback when it had one."""

    def __init__(self, message: str, details: str = ""):
        super().__init__(message)
        self.details = details


class Cancelled(Exception):
    """The user stopped the run (Ctrl-C) without a checkpoint: run.py exits with code 130."""
