"""The W&B mirror is fit for a comparison report (issue 12 item 5): accuracy and loss against
`time/train_s`, the outcome in the run summary, a failed run finished with its exit code, an
interrupted one marked, series knobs in name and tags, a readable group for ad-hoc sweeps.
Read from the offline record W&B writes (`run-<id>.wandb`: LevelDB-style log blocks of
protobuf records)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from tests.cli import child_env, run_py, run_py_here

FAST = ("scale=smoke", "dataset=synthetic", "wandb.mode=offline", "progress=false", "epochs=1")


def wandb_records(run_dir: Path) -> dict[str, list]:
    """The records of the run's offline W&B file, by type (run, metric, summary, exit, ...)."""
    from wandb.proto import wandb_internal_pb2 as pb

    (path,) = run_dir.glob("wandb/offline-run-*/run-*.wandb")
    data = path.read_bytes()
    assert data[:4] == b":W&B"
    out: dict[str, list] = {}
    pos, block, pending = 7, 32768, b""
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if (length, kind) == (0, 0):
            pos += left
            continue
        chunk, pos = data[pos + 7 : pos + 7 + length], pos + 7 + length
        if kind in (2, 3):  # first, middle
            pending += chunk
            continue
        record = pb.Record()
        record.ParseFromString(pending + chunk)
        pending = b""
        name = record.WhichOneof("record_type")
        out.setdefault(name, []).append(getattr(record, name))
    return out


def summary_of(records: dict[str, list]) -> dict:
    summary = {}
    for update in records.get("summary", []):
        for item in update.update:
            if item.key:
                summary[item.key] = json.loads(item.value_json)
    return summary


def only_run(root: Path) -> Path:
    (run_dir,) = [p for p in (root / "runs").iterdir() if p.is_dir() and p.name[0] != "."]
    return run_dir


@pytest.mark.e2e
def test_a_completed_run_is_ready_for_a_comparison_report(tmp_path):
    proc = run_py(*FAST, "algorithm=powersgd", "algorithm.rank=2", f"out_root={tmp_path}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    records = wandb_records(only_run(tmp_path))
    metrics = {(m.name or m.glob_name): m.step_metric for m in records["metric"]}
    assert metrics["test/*"] == "time/train_s" and metrics["train/*"] == "time/train_s"
    assert "time/train_s" in metrics and "epoch" in metrics
    summary = summary_of(records)
    record = json.loads((only_run(tmp_path) / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["exit_code"] == 0
    assert summary["final/test_acc"] == record["final/test_acc"]
    assert summary["best/test_acc"] == record["best/test_acc"]
    assert "diverged_at_step" in summary
    # what a comparison report's table and panels read (analysis/reports/wandb_report.py)
    assert isinstance(summary["converged"], bool) and summary["comm/bytes"] > 0
    assert summary["target_acc"] == 0.5 and "time_to_target_s" in summary  # scale=smoke's
    (run,) = records["run"]
    config = {item.key: json.loads(item.value_json) for item in run.config.update}
    assert config["git_sha"] == record["git_sha"]  # the commit a report's run set filters on
    assert run.display_name == "powersgd-rank2-seed0"  # the knob that differs names the series
    tags = set(run.tags)
    assert {"algorithm=powersgd", "algorithm.rank=2", "network=ideal", "partition=iid"} <= tags
    assert {"workers=2", "compute.slowdown=none", "tau=1", "scale=smoke"} <= tags
    assert run.run_group == "default" and run.job_type == "powersgd"  # a run outside a preset
    assert records["exit"][-1].exit_code == 0


@pytest.mark.e2e
def test_a_failed_run_finishes_with_its_exit_code(tmp_path):
    from tests.cli import python

    proc = python(
        "run.py",
        *FAST,
        "epochs=3",
        f"out_root={tmp_path}",
        env=child_env({"COMMSGD_INJECT_FAULT": "0:40:raise"}),
        timeout=300,
    )
    assert proc.returncode == 1, proc.stderr[-2000:]
    records = wandb_records(only_run(tmp_path))
    assert summary_of(records)["status"] == "failed"
    assert records["exit"][-1].exit_code == 1


@pytest.mark.e2e
def test_an_interrupted_run_is_marked_with_exit_code_3(tmp_path):
    proc = run_py(
        *FAST, "epochs=2", "checkpoint.simulate_signal_at_step=40", f"out_root={tmp_path}"
    )
    assert proc.returncode == 3, proc.stderr[-2000:]
    records = wandb_records(only_run(tmp_path))
    summary = summary_of(records)
    assert summary["status"] == "interrupted" and summary["exit_code"] == 3
    assert records["exit"][-1].exit_code == 3


@pytest.mark.e2e
def test_an_ad_hoc_sweep_gets_a_readable_group(tmp_path):
    proc = run_py("-m", *FAST, "tau=1,2", "algorithm=local_sgd", f"out_root={tmp_path}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    groups = set()
    for run_dir in (tmp_path / "runs").iterdir():
        if run_dir.is_dir() and not run_dir.name.startswith("."):
            (run,) = wandb_records(run_dir)["run"]
            groups.add(run.run_group)
    (group,) = groups  # one group for the sweep, naming when it started and what it varies
    assert group.startswith("sweep 20") and group.endswith(" tau"), group


def test_online_without_credentials_is_one_line_before_any_worker(tmp_path):
    env = {"WANDB_API_KEY": "", "NETRC": str(tmp_path / "no-netrc"), "HOME": str(tmp_path)}
    # refused before any worker starts: run.py in this process (tests/cli.py, run_py_here)
    proc = run_py_here(*FAST[:2], "wandb.mode=online", f"out_root={tmp_path / 'o'}", env=env)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "error: wandb.mode=online needs W&B credentials: set WANDB_API_KEY or run `wandb login` "
        "(or run with wandb.mode=offline and `wandb sync` the records later)"
    ]
    assert not (tmp_path / "o").exists()  # nothing was made
    # in a sweep: each point is refused before any is launched, the sweep says so at the end
    proc = run_py_here(
        "-m", *FAST[:2], "wandb.mode=online", "seed=0,1", f"out_root={tmp_path / 'o'}", env=env
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == (
        "error: seed=0, seed=1: wandb.mode=online needs W&B credentials: set WANDB_API_KEY or "
        "run `wandb login` (or run with wandb.mode=offline and `wandb sync` the records later)"
    )  # one reason said once (experiments/errors.py, said_once), each point's own line above
    assert not list((tmp_path / "o").glob("runs/*"))


def test_tags_name_every_series_key():
    from experiments.store.log import wandb_tags

    cfg = {
        "algorithm": {"name": "overlap_local_sgd", "alpha": 0.5, "beta": 0.7},
        "tau": 2,
        "workers": 4,
        "network": {"name": "ethernet1g"},
        "partition": {"name": "noniid", "dominant_fraction": 0.64},
        "compute": {"slowdown": [1, 1, 3, 1]},
        "comm": {"compression": "fp16"},
        "scale": {"name": "cpu"},
        "dataset": {"name": "digits"},
        "timing": "virtual",
    }
    assert wandb_tags(cfg) == [
        "algorithm=overlap_local_sgd",
        "algorithm.alpha=0.5",
        "algorithm.beta=0.7",
        "tau=2",
        "workers=4",
        "network=ethernet1g",
        "partition=noniid",
        "compute.slowdown=1,1,3,1",
        "comm.compression=fp16",
        "scale=cpu",
        "dataset=digits",
        "timing=virtual",
    ]
