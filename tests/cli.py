"""Run the suite's commands as a user would, in a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def child_env(extra: dict | None = None) -> dict[str, str]:
    """The environment of a command under test: quiet W&B, unbuffered output, and none of a
    launcher's worker identity (a test run inside torchrun or srun must not inherit it)."""
    env = {**os.environ, "WANDB_SILENT": "true", "PYTHONUNBUFFERED": "1", **(extra or {})}
    for key in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    return env


def popen_run_py(*args: str, env_extra: dict | None = None) -> subprocess.Popen:
    """`python run.py ARGS` started in the background (for signals and timing); pipes open."""
    return subprocess.Popen(
        [sys.executable, "run.py", *args],
        cwd=REPO,
        env=child_env(env_extra),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def run_py(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """`python run.py ARGS` from the repository root; output captured (stdout not a tty)."""
    return subprocess.run(
        [sys.executable, "run.py", *args],
        cwd=REPO,
        env=child_env(),
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


def run_dir_of(out_root, *overrides: str) -> Path:
    """The run directory `python run.py OVERRIDES out_root=OUT_ROOT` uses (named by its
    resolved config, experiments/config/identity.py), without running it."""
    from hydra import compose, initialize_config_dir

    import experiments  # noqa: F401 - the schema and the resolvers

    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose(
            "config", overrides=[*overrides, f"out_root={out_root}"], return_hydra_config=True
        )
    return Path(str(cfg.hydra.run.dir)).absolute()
