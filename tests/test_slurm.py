"""The suite on a real SLURM (tests/slurm_cluster.py: a controller and two `slurmd -N n1/n2`
daemons on this machine): `sbatch slurm/train.sbatch` across two nodes, a sweep through Hydra's
submitit launcher (`cluster=slurm`), and a job signalled mid-run that checkpoints, requeues
itself, resumes and ends with the metrics of an uninterrupted run."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.cli import REPO, run_dir_of, run_py

pytestmark = pytest.mark.slurm

FAST = ["scale=smoke", "dataset=synthetic", "wandb.mode=disabled", "progress=false"]


def run_dirs(root: Path) -> list[Path]:
    return sorted(p.parent for p in root.glob("runs/*/summary.json"))


def rows(run_dir: Path) -> list[dict]:
    out = []
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        row.pop("time/eval_s")
        out.append(row)
    return out


def job_output(path: Path, cluster) -> str:
    text = path.read_text() if path.exists() else "(no job output)"
    return text[-4000:] + "\n" + cluster.logs()


def test_sbatch_two_nodes_two_tasks_each_trains_with_world_size_4(slurm_cluster, tmp_path):
    out = tmp_path / "job.out"
    job = slurm_cluster.sbatch(
        [
            "-N",
            "2",
            "--ntasks-per-node=2",
            "-o",
            str(out),
            str(REPO / "slurm" / "train.sbatch"),
            *FAST,
            "epochs=2",
            f"out_root={tmp_path}",
        ],
        cwd=REPO,
    )
    assert slurm_cluster.wait(job, timeout=300) == "COMPLETED", job_output(out, slurm_cluster)
    (run,) = run_dirs(tmp_path)
    # the run `python run.py ... workers=4` would make: srun's world size is its `workers`
    assert run.name == run_dir_of(tmp_path, *FAST, "epochs=2", "workers=4").name
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["world_size"] == 4
    assert [r["epoch"] for r in rows(run)] == [1, 2]
    text = out.read_text()
    assert "2 nodes (n[1-2]), 4 workers" in text and "completed" in text


def test_hydra_submitit_launcher_runs_a_two_point_sweep(slurm_cluster, tmp_path):
    with slurm_cluster.activate():
        proc = run_py(
            "-m",
            *FAST,
            "cluster=slurm",
            "cluster.nodes=2",
            "workers=4",
            "cluster.timeout_min=10",
            "algorithm=sync_sgd,local_sgd",
            "tau=2",
            f"out_root={tmp_path}",
            timeout=600,
        )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:] + slurm_cluster.logs()
    runs = run_dirs(tmp_path)
    assert [r.name for r in runs] == [
        run_dir_of(tmp_path, *FAST, f"algorithm={a}", "tau=2", "workers=4").name
        for a in ("local_sgd", "sync_sgd")
    ]  # cluster.* keys are not part of the identity: the same run as on a laptop
    for run in runs:
        summary = json.loads((run / "summary.json").read_text())
        assert summary["status"] == "completed" and summary["world_size"] == 4, summary
    # one job array, each task a 2 x 2 job: submitit's folder holds the array's logs
    logs = list((tmp_path / "runs" / ".submitit").glob("*_*/*_log.out"))
    assert len(logs) == 2 * 4, logs


def test_signalled_job_checkpoints_requeues_resumes_and_matches(slurm_cluster, tmp_path):
    args = [
        *FAST,
        "dataset=digits",
        "timing=virtual",
        "compute.step_time_s=0.01",
        # the algorithm's time pinned: a measured one (the calibration's wall clock) differs
        # between the two runs compared below, and so would every time of the ledger
        "compute.algo_time_s=0.001",
        "network=ethernet1g",
        "algorithm=overlap_local_sgd",
        "tau=2",
        "epochs=40",
        "checkpoint_every=0",  # only the signal's checkpoint: the resume must come from it
        # one thread per worker both here and under srun (1 task per node would get 2): CPU
        # kernels reduce in a thread-count-dependent order, and the comparison is exact
        "threads_per_worker=1",
    ]
    out = tmp_path / "job.out"
    job = slurm_cluster.sbatch(
        [
            "-N",
            "2",
            "--ntasks-per-node=1",
            "-o",
            str(out),
            str(REPO / "slurm" / "train.sbatch"),
            *args,
            f"out_root={tmp_path / 'cut'}",
        ],
        cwd=REPO,
    )
    deadline = time.monotonic() + 300
    while (
        not list((tmp_path / "cut").glob("runs/*/metrics.jsonl"))
        or not next((tmp_path / "cut").glob("runs/*/metrics.jsonl")).stat().st_size
    ):
        assert time.monotonic() < deadline, job_output(out, slurm_cluster)
        assert slurm_cluster.state(job) in ("PENDING", "RUNNING"), job_output(out, slurm_cluster)
        time.sleep(0.2)
    slurm_cluster.run(["scancel", "--signal=USR1", job])
    assert slurm_cluster.wait(job, timeout=400) == "COMPLETED", job_output(out, slurm_cluster)
    assert slurm_cluster.info(job).get("Restarts") == "1", slurm_cluster.info(job)
    (run,) = run_dirs(tmp_path / "cut")
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "completed", summary
    (resume,) = summary["resumed"]
    assert 0 < resume["from_step"] < 40 * 36
    text = out.read_text()
    assert "checkpoint saved: rerun to resume (job " in text and "requeued)" in text, text
    assert f"resume from step {resume['from_step']}" in text

    # the same run, uninterrupted, on this machine (no SLURM): the same metrics, row for row
    full = run_py(*args, "workers=2", f"out_root={tmp_path / 'full'}", timeout=300)
    assert full.returncode == 0, full.stderr[-3000:]
    (reference,) = run_dirs(tmp_path / "full")
    assert reference.name == run.name
    assert rows(run) == rows(reference)
