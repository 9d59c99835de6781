"""The C allocator's settings for a training process, set where each process starts (run.py,
the sweep, the benchmarks, the tests): glibc's malloc keeps the memory it frees instead of
giving it back to the kernel after every large tensor.

Why (issue 48, measured with perf and `time`'s system time on 2 cores): PyTorch's CPU tensors
come from the C library's malloc. glibc serves every block of 128 KiB or more (its dynamic
threshold rises to at most 32 MiB) with its own `mmap` and returns it with `munmap` when freed,
so each evaluation pass of seeds in lock-step (activations of ~51 MB a layer) maps, faults in
page by page and unmaps its buffers at every layer: a third of the process's CPU time was kernel
time. With mapping off (`M_MMAP_MAX` 0: every block from the heap) and the heap kept
(`M_TRIM_THRESHOLD` 1 GiB: a freed top of the heap is kept up to that size), a buffer freed by
one layer is reused by the next, with no system call and no page fault. The numbers do not
change (the same kernels on the same values, only other addresses: tests/test_allocator.py
trains the same run both ways); the cost is a resident size that stays at its peak.

PyTorch's own caching allocator does the same on a GPU; on a CPU it has none, and the C
library's settings are the documented way (mallopt(3)): the environment variables
`MALLOC_MMAP_MAX_` and `MALLOC_TRIM_THRESHOLD_` for processes started from here (read by glibc
when a process starts: the forkserver and the worker processes, run.py's of a sweep, SLURM's
tasks, which inherit the environment) and `mallopt` for this process, whose malloc has started.

A user who set any `MALLOC_*` variable chose the allocator's behaviour: nothing is changed
(benchmarks/memory.py sets its own, so that a freed buffer leaves the resident size).
`COMMSGD_MALLOC=default` turns these settings off. Another C library (macOS, musl): nothing is
done. Torch-free (ctypes only), so the entry points call it before importing torch."""

from __future__ import annotations

import ctypes
import ctypes.util
import os

# mallopt(3)'s parameter numbers (glibc's malloc.h) and the values set
M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4
SETTINGS = {
    "MALLOC_MMAP_MAX_": (M_MMAP_MAX, 0),
    "MALLOC_TRIM_THRESHOLD_": (M_TRIM_THRESHOLD, 1 << 30),
}
OFF = "COMMSGD_MALLOC"  # =default: leave the C library's defaults

_applied: bool | None = None  # this process: None (not asked yet), or what `configure` did


def _glibc():
    """The C library when it is glibc (it has `mallopt` and `gnu_get_libc_version`), else None."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.gnu_get_libc_version  # noqa: B018 - glibc's own symbol
        return libc
    except (OSError, AttributeError):
        return None


def configure() -> bool:
    """Keep freed memory in this process and in the processes it starts (module docstring).
    Returns whether the settings are in force (False: the user chose others, turned them off,
    or the C library is not glibc). Once per process; later calls return the first answer."""
    global _applied
    if _applied is not None:
        return _applied
    ours = {name: str(value) for name, (_, value) in SETTINGS.items()}
    # another process of the suite's (its parent) set these: they are ours, in force already
    chosen = any(v != ours.get(k) for k, v in os.environ.items() if k.startswith("MALLOC_"))
    libc = None if chosen or os.environ.get(OFF) == "default" else _glibc()
    _applied = libc is not None
    if libc is not None:
        for name, (param, value) in SETTINGS.items():
            libc.mallopt(param, value)
            os.environ[name] = str(value)
    return _applied
