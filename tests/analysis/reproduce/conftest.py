"""A committed result to check again, made once a session: pseudo_sync_speed at the smoke scale
on seeds 0 and 1 (`python -m experiments.sweep`), read by the replication's and the robustness
check's end-to-end tests (tests/session.py: one sweep for both, whichever asks first)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli import python
from tests.session import once_a_session

FAST = ("dataset=synthetic", "compute.algo_time_s=0.001", "wandb.mode=disabled", "progress=false")


@pytest.fixture(scope="session")
def committed_smoke(tmp_path_factory, worker_id) -> Path:
    """A `results` folder holding pseudo_sync_speed/smoke (claims.json, runs.jsonl.gz), seeds
    0 and 1. Shared: a test reads it and writes elsewhere (no --publish)."""

    def make(folder: Path) -> None:
        done = python(
            "-m", "experiments.sweep", "pseudo_sync_speed", "--scale", "smoke",
            "--out-root", str(folder / "out"), "--results", str(folder / "results"),
            "seed=0,1", *FAST,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]

    return once_a_session(tmp_path_factory, worker_id, "committed-smoke", make) / "results"
