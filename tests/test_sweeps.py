"""Sweeps run every point (issue 12 item 2; hydra_plugins/commsgd_sweeper): a point that fails
(a bad value, a value that does not even compose, a worker crash) is recorded with its
one-line reason, the others run, the sweep ends non-zero with one line per failed point, and
its rerun runs only what is missing; a preset's extra grids run with it; each sweep keeps its
own record."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli import child_env, python, run_dir_of, run_py
from tests.cli import run_py_with_workers_here as run_here  # run.py here, its workers real

pytestmark = pytest.mark.e2e

TINY = ("scale=smoke", "dataset=synthetic", "wandb.mode=disabled", "progress=false",
        "dataset.num_train=256")  # fmt: skip


def runs(root: Path) -> list[Path]:
    return sorted(p for p in (root / "runs").iterdir() if p.is_dir() and p.name[0] != ".")


def status(run_dir: Path) -> str:
    return json.loads((run_dir / "summary.json").read_text())["status"]


def test_bad_points_are_recorded_the_others_run_and_a_rerun_does_only_the_missing(tmp_path):
    """`python run.py -m scale=smoke tau=0,1` stopped at tau=0 (the job called sys.exit) and
    never ran tau=1; a rerun hit the same point first again."""
    sweep = ("-m", *TINY, "algorithm=local_sgd", "epochs=1", "tau=0,abc,1", f"out_root={tmp_path}")
    proc = run_py(*sweep)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-2:] == [
        "error: tau=0: tau must be an integer >= 1, got 0",
        "error: tau=abc: tau must be an integer, got 'abc'",
    ]
    assert "Traceback" not in proc.stderr
    (done,) = runs(tmp_path)
    assert done == run_dir_of(tmp_path, *TINY, "algorithm=local_sgd", "epochs=1", "tau=1")
    assert status(done) == "completed"
    finished = (done / "summary.json").read_bytes()
    (record,) = (tmp_path / "sweeps").iterdir()
    points = json.loads((record / "sweep.json").read_text())["points"]
    assert [(p["status"], p["error"]) for p in points] == [
        ("failed", "tau must be an integer >= 1, got 0"),
        ("failed", "tau must be an integer, got 'abc'"),
        ("completed", None),
    ]

    again = run_py(*sweep)
    assert again.returncode == 2
    assert f"skip {done}: already completed" in again.stdout
    assert "Launching" not in again.stdout + again.stderr  # nothing was launched
    assert (done / "summary.json").read_bytes() == finished
    # each sweep its own record: the first one's multirun.yaml is still there
    assert len([p for p in (tmp_path / "sweeps").iterdir() if (p / "multirun.yaml").is_file()]) == 2


def test_a_crashing_point_does_not_stop_the_sweep(tmp_path):
    # the fault fires at step 10: the 1-epoch point (4 steps) completes, the 5-epoch one dies
    proc = python(
        "run.py",
        "-m",
        *TINY,
        "epochs=5,1",
        f"out_root={tmp_path}",
        env=child_env({"COMMSGD_INJECT_FAULT": "1:10:raise"}),
    )
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: epochs=5: worker 1 (rank 1) failed: RuntimeError: injected")
    crashed = run_dir_of(tmp_path, *TINY, "epochs=5")
    assert status(crashed) == "failed"
    assert status(run_dir_of(tmp_path, *TINY, "epochs=1")) == "completed"  # ran after it


def test_a_presets_extra_grids_run_with_it_and_one_config_runs_once(tmp_path):
    """`python run.py -m experiment=fig4` missed PowerSGD's ranks 2, 4, 8 (only
    experiments/sweep.py ran the preset's extra sweeps)."""
    proc = run_here("-m", "experiment=fig4", *TINY, "epochs=1", "seed=0", "algorithm=sync_sgd",
                  "dist_timeout_s=30,31", f"out_root={tmp_path}")  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    names = sorted(p.name.rsplit("-", 1)[0] for p in runs(tmp_path))
    # the main grid (sync_sgd from the command line) and both extra grids: PowerSGD's ranks and
    # the paper's sync SGD averaging after backward (bucket_mb=0)
    assert names == ["powersgd-rank2-seed0", "powersgd-rank4-seed0", "powersgd-rank8-seed0",
                     "sync_sgd-bucket_mb0-seed0", "sync_sgd-seed0"]  # fmt: skip
    assert all(status(p) == "completed" for p in runs(tmp_path))
    # a key that is not part of a run's identity makes no new run: each run once
    assert proc.stdout.count("the same run as") == 5


def test_the_make_driver_runs_every_point_reports_what_finished_and_fails_at_the_end(tmp_path):
    proc = python(
        "-m", "experiments.sweep", "demo", "--scale", "smoke",
        "--out-root", str(tmp_path / "out"), "--results", str(tmp_path / "results"),
        "algorithm=sync_sgd", "seed=0", "tau=0,1", "epochs=1", *TINY[1:],
    )  # fmt: skip
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert lines[-2] == "error: tau=0: tau must be an integer >= 1, got 0"
    assert lines[-1].startswith("error: 1 point(s) of demo failed (above); the report covers")
    table = tmp_path / "results" / "demo" / "smoke" / "table.md"
    assert table.is_file() and "sync_sgd" in table.read_text()
