"""End to end: `run.py` with real worker processes, its run records, sweeps, skipping finished
runs, determinism, W&B offline, CIFAR-10 on files in its own format, and the table."""

from __future__ import annotations

import json
import math

import pytest

from tests.cifar_files import write_cifar10
from tests.cli import module, run_dir_of, run_py

pytestmark = pytest.mark.e2e

FAST = ("dataset=synthetic", "scale=smoke", "wandb.mode=disabled")
METRIC_KEYS = {
    "step", "epoch", "train/loss", "test/loss", "test/acc", "test/acc_local", "lr",
    "time/train_s", "time/compute_s", "time/comm_exposed_s", "comm/bytes",
}  # fmt: skip
SUMMARY_KEYS = {
    "status", "final/test_acc", "best/test_acc", "final/train_loss", "steps", "time/train_s",
    "comm/bytes", "world_size", "git_sha", "torch_version", "data_card",
}  # fmt: skip


def metrics(run_dir) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def summary(run_dir) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def assert_clean_exit(proc) -> None:
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    # orderly shutdown: no abort at teardown (gloo can abort at process exit), no stray traceback
    assert "terminate called" not in proc.stderr
    assert "Traceback" not in proc.stderr


def test_local_sgd_run_writes_the_contract_records_and_learns(tmp_path):
    proc = run_py(*FAST, "algorithm=local_sgd", "tau=2", "epochs=4", f"out_root={tmp_path}")
    assert_clean_exit(proc)
    run_dir = run_dir_of(tmp_path, *FAST, "algorithm=local_sgd", "tau=2", "epochs=4")
    assert run_dir.name.startswith("local_sgd-tau2-seed0-")  # readable, then the digest
    assert run_dir.is_dir(), sorted(p.name for p in (tmp_path / "runs").iterdir())
    for name in ("config.yaml", ".hydra/config.yaml", ".hydra/overrides.yaml", "metrics.jsonl",
                 "summary.json", "data_card.json", "identity.json"):  # fmt: skip
        assert (run_dir / name).is_file(), name

    rows = metrics(run_dir)
    assert [r["epoch"] for r in rows] == [1, 2, 3, 4]
    for row in rows:
        assert METRIC_KEYS <= set(row)
        assert 0 <= row["test/acc"] <= 1 and 0 <= row["test/acc_local"] <= 1
        assert math.isfinite(row["train/loss"])
    assert rows[-1]["train/loss"] < rows[0]["train/loss"]
    # synthetic: 2048 samples / 2 workers = 1024 each, batch 32 -> 32 steps per epoch
    assert rows[-1]["step"] == 4 * 32
    assert rows[-1]["comm/bytes"] > rows[0]["comm/bytes"] > 0

    s = summary(run_dir)
    assert SUMMARY_KEYS <= set(s)
    assert s["status"] == "completed" and s["world_size"] == 2 and s["steps"] == 128
    assert s["final/test_acc"] == rows[-1]["test/acc"] > 0.3  # 10 classes: chance is 0.1
    assert s["best/test_acc"] == max(r["test/acc"] for r in rows)
    hists = [w["label_hist"] for w in s["data_card"]["workers"]]
    assert [sum(h) for h in hists] == [1024, 1024]
    # 64 rounds of one model-sized float32 all-reduce (tau=2, 128 steps)
    assert s["comm/collectives"] == 64 and s["comm/bytes"] % 64 == 0
    assert "epoch 4/4" in proc.stdout and "step 128/128" in proc.stdout  # plain progress lines

    # a rerun finds the finished run and leaves it alone
    before = (run_dir / "summary.json").read_bytes(), (run_dir / "metrics.jsonl").read_bytes()
    again = run_py(*FAST, "algorithm=local_sgd", "tau=2", "epochs=4", f"out_root={tmp_path}")
    assert_clean_exit(again)
    assert f"skip {run_dir}: already completed" in again.stdout
    after = (run_dir / "summary.json").read_bytes(), (run_dir / "metrics.jsonl").read_bytes()
    assert after == before


def test_local_sgd_tau1_equals_sync_sgd_and_runs_are_deterministic(tmp_path):
    common = (*FAST, "epochs=2", "dtype=float64")
    runs = {}
    for name, extra in (("sync", ("algorithm=sync_sgd",)), ("local", ("algorithm=local_sgd",
                        "tau=1")), ("sync_again", ("algorithm=sync_sgd",))):  # fmt: skip
        out = tmp_path / name
        assert_clean_exit(run_py(*common, *extra, f"out_root={out}"))
        (run_dir,) = (out / "runs").iterdir()
        runs[name] = metrics(run_dir)
    for a, b in zip(runs["sync"], runs["local"], strict=True):
        # identity 1 of algorithms.md section 11, through the whole program in float64
        assert a["train/loss"] == pytest.approx(b["train/loss"], abs=1e-9)
        assert a["test/loss"] == pytest.approx(b["test/loss"], abs=1e-9)
        assert a["comm/bytes"] == b["comm/bytes"]
    for a, b in zip(runs["sync"], runs["sync_again"], strict=True):
        # same overrides, same numbers: seeds fix init, shards, data order
        for key in ("train/loss", "test/loss", "test/acc", "test/acc_local"):
            assert a[key] == b[key]


def test_sweep_then_table_and_figure(tmp_path):
    proc = run_py("-m", *FAST, "algorithm=sync_sgd,local_sgd", "tau=4", "seed=0,1",
                  f"out_root={tmp_path}")  # fmt: skip
    assert_clean_exit(proc)
    runs = sorted(p.name for p in (tmp_path / "runs").iterdir() if p.is_dir())
    assert len(runs) == 4, runs
    assert not (tmp_path / "runs" / "multirun.yaml").exists()  # the sweep's own record instead
    (record,) = (tmp_path / "sweeps").iterdir()
    assert (record / "multirun.yaml").is_file() and (record / "sweep.json").is_file()
    report = module(
        "analysis.reports.report", str(tmp_path / "runs"), "--out", str(tmp_path / "report")
    )
    assert report.returncode == 0, report.stderr
    assert "sync_sgd" in report.stdout and "local_sgd" in report.stdout
    for name in ("table.md", "table.csv", "test_acc.png", "test_acc.pdf"):
        assert (tmp_path / "report" / name).stat().st_size > 0
    csv = (tmp_path / "report" / "table.csv").read_text()
    assert ",2" in csv  # n = 2 seeds per row


def test_wandb_offline_mirrors_the_run(tmp_path):
    proc = run_py("dataset=synthetic", "scale=smoke", "epochs=1", "wandb.mode=offline",
                  f"out_root={tmp_path}")  # fmt: skip
    assert_clean_exit(proc)
    (run_dir,) = (tmp_path / "runs").iterdir()
    offline = list((run_dir / "wandb").glob("offline-run-*"))
    assert len(offline) == 1
    assert list(offline[0].glob("*.wandb")), "no W&B offline record written"
    assert summary(run_dir)["status"] == "completed"


def test_cifar10_from_files_in_its_own_format(tmp_path):
    data_root = tmp_path / "cifar"
    write_cifar10(data_root, per_batch=16)  # 80 training, 16 test images
    proc = run_py("scale=smoke", "wandb.mode=disabled", "dataset=cifar10",
                  f"dataset.root={data_root}", "dataset.verify_checksums=false",
                  "dataset.num_workers=0", "epochs=1", "batch_size=8",
                  f"out_root={tmp_path / 'out'}")  # fmt: skip
    assert_clean_exit(proc)
    (run_dir,) = (tmp_path / "out" / "runs").iterdir()
    s = summary(run_dir)
    assert s["status"] == "completed"
    assert s["data_card"]["dataset"] == "cifar10"
    assert [w["num_samples"] for w in s["data_card"]["workers"]] == [40, 40]
    assert s["steps"] == 5  # 40 samples per worker, batch 8


def test_torchrun_started_workers_give_the_same_run(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    from tests.cli import REPO

    args = ("epochs=2", *FAST)
    torchrun = Path(sys.executable).with_name("torchrun")
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    proc = subprocess.run(
        [str(torchrun), "--standalone", "--nproc-per-node", "2", "run.py", *args,
         f"out_root={tmp_path / 'tr'}"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert_clean_exit(run_py(*args, f"out_root={tmp_path / 'spawn'}"))
    (tr_dir,) = (tmp_path / "tr" / "runs").iterdir()
    (sp_dir,) = (tmp_path / "spawn" / "runs").iterdir()
    assert tr_dir.name == sp_dir.name
    assert summary(tr_dir)["status"] == "completed" and summary(tr_dir)["world_size"] == 2
    for a, b in zip(metrics(tr_dir), metrics(sp_dir), strict=True):
        assert a["train/loss"] == pytest.approx(b["train/loss"], rel=1e-5)
        assert a["comm/bytes"] == b["comm/bytes"]


def test_diverged_run_exits_0_with_status_diverged(tmp_path):
    proc = run_py(*FAST, "lr=1e6", "epochs=3", f"out_root={tmp_path}")
    assert_clean_exit(proc)
    (run_dir,) = (tmp_path / "runs").iterdir()
    s = summary(run_dir)
    assert s["status"] == "diverged"
    assert s["epochs"] == 1  # both workers stopped together at the end of the first epoch
    assert 0 <= s["diverged_at_step"] < 32 and s["steps"] == 32  # 32 steps per epoch
    assert f"diverged at step {s['diverged_at_step']}" in proc.stdout
    assert metrics(run_dir)[0]["train/loss"] is None  # NaN is recorded as null
