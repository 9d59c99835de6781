"""The papers' experiments as presets: every preset smoke-runs, and the sweep driver behind
`make table1` & co. resumes an interrupted sweep without recomputing finished runs."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.cli import REPO, in_process, python
from tests.cli import run_py_with_workers_here as run_here  # run.py here, its workers real

PRESETS = sorted(p.stem for p in (REPO / "conf" / "experiment").glob("*.yaml"))


def test_presets_of_the_issue_exist():
    assert {"table1", "table2", "fig4", "fig5", "losp", "pseudo_sync", "demo", "low_comm"} <= set(
        PRESETS
    )
    for name in PRESETS:
        head = (REPO / "conf" / "experiment" / f"{name}.yaml").read_text().splitlines()[1]
        assert head.startswith("# "), f"{name}.yaml must open with a comment naming its source"


@pytest.mark.e2e
@pytest.mark.parametrize("preset", PRESETS)
def test_every_preset_smoke_runs(tmp_path, preset):
    # One point of the preset (a plain run ignores the sweep grid) at the smoke scale.
    proc = run_here(f"experiment={preset}", "scale=smoke", "epochs=1", "wandb.mode=disabled",
                  f"out_root={tmp_path}")  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    (run_dir,) = [p for p in (tmp_path / "runs").iterdir() if p.is_dir()]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "completed"
    config = (run_dir / "config.yaml").read_text()
    assert f"experiment_name: {preset}" in config and "report:" in config


def sweep(*args: str) -> subprocess.CompletedProcess:
    return python("-m", "experiments.sweep", *args)


@pytest.mark.e2e
def test_interrupted_sweep_resumes_only_the_missing_points(tmp_path):
    args = ("demo", "--scale", "smoke", "--out-root", str(tmp_path / "out"), "--results",
            str(tmp_path / "results"), "algorithm=sync_sgd,local_sgd", "seed=0", "epochs=1",
            "wandb.mode=disabled")  # fmt: skip
    first = sweep(*args)
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
    runs = {p.name: p for p in (tmp_path / "out" / "demo" / "runs").iterdir() if p.is_dir()}
    assert len(runs) == 2
    done = next(p for n, p in runs.items() if "sync_sgd" in n)
    cut = next(p for n, p in runs.items() if "local_sgd" in n)
    kept = (done / "summary.json").read_bytes()
    # the sweep was killed while local_sgd was training
    summary = json.loads((cut / "summary.json").read_text())
    (cut / "summary.json").write_text(json.dumps({**summary, "status": "running"}))

    second = sweep(*args)
    assert second.returncode == 0, second.stderr[-2000:]
    assert f"skip {done}: already completed" in second.stdout
    assert f"run {cut}:" in second.stdout and f"run {done}:" not in second.stdout
    assert (done / "summary.json").read_bytes() == kept  # never recomputed nor rewritten
    assert json.loads((cut / "summary.json").read_text())["status"] == "completed"
    table = tmp_path / "results" / "demo" / "smoke" / "table.md"
    assert table.is_file() and "local_sgd" in table.read_text()
    provenance = (table.parent / "provenance.txt").read_text()
    assert "sweep command: python -m experiments.sweep demo --scale smoke" in provenance


def sweep_here(*args: str) -> subprocess.CompletedProcess:
    """`python -m experiments.sweep ARGS` in this process (tests/cli.py, in_process): for a
    command refused before any run starts."""
    from experiments.sweep import main

    return in_process(lambda: main(list(args)))


def test_unknown_cluster_or_preset_is_a_clear_error(tmp_path):
    proc = sweep_here("table1", "--cluster", "pbs", "--out-root", str(tmp_path))
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "error: unknown cluster 'pbs'; choose from local, sim, slurm"
    ]
    proc = sweep_here("table9", "--out-root", str(tmp_path))
    assert proc.returncode == 2 and "presets: controls, demo, fig4" in proc.stderr
    assert not Path(tmp_path).joinpath("table1").exists()


@pytest.mark.parametrize("scale", ["smoke", "cpu", "paper"])
def test_every_preset_composes_and_validates_at_every_scale(scale):
    from experiments.preflight import validate
    from tests.compose import resolved

    for preset in PRESETS:
        plain = resolved(f"experiment={preset}", f"scale={scale}")
        validate(plain)
        assert plain["experiment_name"] == preset
        assert plain["report"]["target_acc"] == plain["scale"]["target_acc"]
        if scale == "paper":
            assert (
                plain["dataset"]["name"] == "cifar10"
                and plain["workers"] >= 16
                or (
                    preset == "pseudo_sync"  # weak scaling sweeps the worker count itself
                )
            )
