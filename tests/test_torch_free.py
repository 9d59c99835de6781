"""Bad input is answered without importing torch (issue 26): composing the config against its
schema and every check of the pre-flight before `check_machine` (experiments/preflight.py) import
neither torch nor W&B nor pandas, so `python run.py tau=0` says what is wrong before any of them
would load. Checked in fresh interpreters: this test process has imported torch long ago."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import algorithms
from tests.cli import REPO, child_env

HEAVY = ("torch", "wandb", "pandas")

#: every algorithm's config composed and checked as run.py's pre-flight checks it (check_config:
#: keys, values, launcher, output root), then the run's name; prints what got imported
VALIDATE_EVERY_ALGORITHM = """
import json, sys
from hydra import compose, initialize_config_dir
import algorithms
from experiments.config.identity import run_name
from experiments.preflight import check_config

names = sorted(algorithms.CONFIGS)
with initialize_config_dir(config_dir=sys.argv[1], version_base="1.3"):
    for name in names:
        cfg = compose(
            config_name="config",
            overrides=[f"algorithm={name}", f"out_root={sys.argv[2]}"],
            return_hydra_config=True,
        )
        plain, run_dir, launcher, here = check_config(cfg)
        assert plain["algorithm"]["name"] == name and here and launcher is None
        run_name(plain)
heavy = sorted(m for m in HEAVY if m in sys.modules)
print(json.dumps({"checked": names, "heavy": heavy}))
"""

#: run.py's own program on ARGS in this interpreter (run.py as `runpy` runs it: its cli, no
#: os._exit), then what the process had imported when it ended, and the workers' forkserver
#: that run.py started on the way (`startup.warm`) if it is still alive
RUN_PY = """
import json, os, runpy, sys
from multiprocessing import forkserver
from experiments.workers import startup
servers, warm = [], startup.warm
def warm_and_note():
    warm()
    servers.append(forkserver._forkserver._forkserver_pid)
startup.warm = warm_and_note
sys.argv = ["run.py", *sys.argv[1:]]
try:
    runpy.run_path("run.py", run_name="__main__")
    code = 0
except SystemExit as e:
    code = e.code
heavy = sorted(m for m in HEAVY if m in sys.modules)
def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
left = [pid for pid in servers if alive(pid)]
print(json.dumps({"code": code, "heavy": heavy, "servers": len(servers), "left": left}))
"""


def fresh(code: str, *args: str) -> tuple[dict, str]:
    proc = subprocess.run(
        [sys.executable, "-c", f"HEAVY = {HEAVY!r}\n{code}", *args],
        cwd=REPO,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.stdout.strip(), proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


def test_validating_every_algorithms_config_imports_no_torch(tmp_path):
    result, stderr = fresh(VALIDATE_EVERY_ALGORITHM, str(REPO / "conf"), str(tmp_path))
    assert result["checked"] == sorted(algorithms.CONFIGS), stderr
    assert len(result["checked"]) == 14
    assert result["heavy"] == [], f"imported while validating: {result['heavy']}"


@pytest.mark.parametrize(
    "args, line",
    [
        (["tau=0"], "error: tau must be an integer >= 1, got 0"),
        (["algorithm=nope"], "error: unknown algorithm 'nope'; choose from bmuf, cocod_sgd"),
        (["foo=1"], "error: unknown key foo: no code reads it"),
        (["algorithm=easgd", "algorithm.alpha=0.5"], "error: easgd needs workers * alpha < 1"),
        (["out_root={blocker}/out"], "error: output directory {blocker}/out/runs is not writable"),
    ],
)
def test_bad_input_is_answered_without_torch(tmp_path, args, line):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    args, line = [a.format(blocker=blocker) for a in args], line.format(blocker=blocker)
    if not any(a.startswith("out_root=") for a in args):
        args.append(f"out_root={tmp_path / 'out'}")
    result, stderr = fresh(RUN_PY, *args)
    assert result["code"] == 2, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(line), stderr
    assert result["heavy"] == [], f"imported before the answer: {result['heavy']}"
    # run.py started its workers' forkserver before composing, and stopped it on the refusal
    # (startup.stop_server): it would go on importing torch with the command's pipes open
    # (tests/cli.py's in-process commands start none)
    assert result["servers"] >= 1 and result["left"] == [], result


#: run.py's handler of a stop signal before any worker runs, called for SIGHUP: what it raises,
#: and what it imported
SIGHUP_HANDLER = """
import json, signal, sys
import run
try:
    run._raise_stop(signal.SIGHUP, None)
    raised = None
except BaseException as e:
    raised = type(e).__name__
heavy = sorted(m for m in HEAVY if m in sys.modules)
print(json.dumps({"raised": raised, "heavy": heavy}))
"""


def test_the_sighup_handler_imports_nothing():
    """A handler runs between two instructions of the main thread, in the middle of whatever it
    was importing: SIGHUP while Hydra composed (numpy half imported) made the handler's own
    import of torch fail ("partially initialized module 'numpy'", exit 2, 2 times in 40)."""
    result, stderr = fresh(SIGHUP_HANDLER)
    assert result == {"raised": "Stopped", "heavy": []}, stderr


def test_the_rules_take_their_facts_from_the_torch_free_configs():
    """REGISTRY (the rules, torch) and CONFIGS (torch-free) are one table: each rule's Config is
    the one the schema and the pre-flight read, and so are its `periodic` and
    `checkpoint_anywhere`."""
    assert list(algorithms.REGISTRY) == list(algorithms.CONFIGS)
    for name, rule in algorithms.REGISTRY.items():
        config = algorithms.CONFIGS[name]
        assert rule.Config is config, name
        assert rule.__name__ == algorithms.rule_name(name)
        assert (rule.periodic, rule.checkpoint_anywhere) == (
            config.periodic,
            config.checkpoint_anywhere,
        )
    non_periodic = {n for n, r in algorithms.REGISTRY.items() if not r.periodic}
    assert non_periodic == {"sync_sgd", "powersgd", "pseudo_sync"}
    assert {n for n, r in algorithms.REGISTRY.items() if not r.checkpoint_anywhere} == {
        "osp",
        "losp",
    }


def test_the_dtype_limits_named_without_torch_are_torchs():
    import torch

    from experiments.preflight import DTYPE_MAX

    assert DTYPE_MAX == {
        "float32": torch.finfo(torch.float32).max,
        "float64": torch.finfo(torch.float64).max,
    }
