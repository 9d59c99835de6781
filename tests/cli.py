"""Run the suite's commands as a user would, in a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def run_py(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """`python run.py ARGS` from the repository root; output captured (stdout not a tty)."""
    env = {**os.environ, "WANDB_SILENT": "true", "PYTHONUNBUFFERED": "1"}
    env.pop("RANK", None)
    env.pop("WORLD_SIZE", None)
    return subprocess.run(
        [sys.executable, "run.py", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def module(name: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """`python -m NAME ARGS` from the repository root."""
    return subprocess.run(
        [sys.executable, "-m", name, *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
