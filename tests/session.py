"""Work done once a test session, shared by pytest-xdist's processes.

A module-scoped fixture runs once in each xdist process that runs one of its tests: `make
test`'s three processes computed tests/test_sim.py's gloo runs three times (~27 s each) and
tests/test_torch_free.py's pre-flight answers three times. `once_a_session` does the work in the
first process to ask, into the session's shared temporary directory, under a lock; the others
wait for it and read what it left."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from filelock import FileLock


def once_a_session(
    factory: pytest.TempPathFactory, worker_id: str, name: str, make: Callable[[Path], None]
) -> Path:
    """The folder `name`, filled by `make(folder)` once this session. Without xdist
    (`worker_id` "master") a fresh folder of this process. A `make` that raises leaves no
    folder behind: the next process to ask tries again (and fails the same way)."""
    if worker_id == "master":
        folder = factory.mktemp(name)
        make(folder)
        return folder
    shared = factory.getbasetemp().parent  # this session's, common to its processes
    folder, done = shared / name, shared / f"{name}.done"
    with FileLock(shared / f"{name}.lock"):
        if not done.is_file():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            try:
                make(folder)
            except BaseException:
                shutil.rmtree(folder, ignore_errors=True)
                raise
            done.touch()
    return folder
