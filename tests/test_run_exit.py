"""run.py's start-up and exit shortcuts (issue 16's fixed cost of a run): the exit without the
interpreter's teardown still runs the atexit handlers, flushes the output and keeps the exit
code; Hydra's mode-only composition is skipped only where it cannot change the mode."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.compose import composed

REPO = Path(__file__).resolve().parents[1]
CONF = REPO / "conf"


def _python(code: str) -> subprocess.CompletedProcess:
    """`python -c CODE` in the repository, stdout a pipe (block-buffered: nothing flushes it
    but the exit)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_fast_exit_runs_the_atexit_handlers_flushes_and_keeps_the_code():
    done = _python(
        "import atexit, run\n"
        "atexit.register(lambda: print('atexit ran'))\n"
        "print('buffered line')\n"
        "run._exit(5)\n"
    )
    assert done.returncode == 5, done.stderr
    assert done.stdout.splitlines() == ["buffered line", "atexit ran"]


def test_the_fast_exit_of_a_message_is_the_message_and_code_1():
    done = _python("import run\nrun._exit('error: something went wrong')\n")
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == "error: something went wrong"


def test_the_fast_exit_waits_for_a_live_thread_like_the_normal_exit():
    done = _python(
        "import threading, time, run\n"
        "def late():\n"
        "    time.sleep(0.5)\n"
        "    print('thread finished', flush=True)\n"
        "threading.Thread(target=late).start()\n"
        "run._exit(4)\n"
    )
    assert done.returncode == 4, done.stderr
    assert "thread finished" in done.stdout


def test_run_py_takes_the_shortcuts_only_as_its_own_program(monkeypatch):
    """GC deferral, the fast exit and the single composition change the whole process: only
    when the process is `python [options] run.py`, never when another program (pytest's
    catalogue, through runpy) runs run.py in its own process."""
    import run

    monkeypatch.chdir(REPO)
    for argv, expected in (
        (["python", "run.py", "workers=2"], True),
        (["python", "-u", "-X", "importtime", str(REPO / "run.py")], True),
        (["python", "-W", "ignore", "run.py", "-m"], True),
        (["python", "-m", "pytest", "run.py"], False),
        (["python", "-c", "import run"], False),
        (["python", "benchmarks/steps.py"], False),
        (["python"], False),
    ):
        monkeypatch.setattr(sys, "orig_argv", argv)
        assert run._is_the_program() is expected, argv
    assert run._PROGRAM is False  # imported here: a module, not the program


def _presets() -> list[str]:
    return sorted(p.stem for p in (CONF / "experiment").glob("*.yaml"))


@pytest.mark.parametrize("experiment", [None, *_presets()])
def test_no_config_sets_hydra_mode(experiment):
    """run.py skips Hydra's composition that only reads `hydra.mode` (`_compose_once`): right
    only while conf/ leaves the mode to the command line."""
    overrides = [] if experiment is None else [f"experiment={experiment}"]
    cfg = composed(*overrides, hydra=True)
    assert cfg.hydra.mode is None


def test_the_mode_composition_is_skipped_unless_the_command_line_names_the_mode(monkeypatch):
    from hydra._internal.hydra import Hydra

    import run

    calls = []

    def original(self, config_name, overrides):
        calls.append(list(overrides))
        return "composed"

    monkeypatch.setattr(Hydra, "get_mode", original)
    run._compose_once()
    run._compose_once()  # idempotent: not wrapped twice
    assert Hydra.get_mode(None, "config", ["workers=2", "algorithm=osp"]) is None
    assert calls == []
    assert Hydra.get_mode(None, "config", ["workers=2", "hydra.mode=MULTIRUN"]) == "composed"
    assert Hydra.get_mode(None, "config", ["++hydra.mode=RUN"]) == "composed"
    assert calls == [["workers=2", "hydra.mode=MULTIRUN"], ["++hydra.mode=RUN"]]
