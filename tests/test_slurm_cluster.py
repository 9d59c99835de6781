"""The test SLURM cluster of tests/slurm_cluster.py: two emulated nodes, srun task layout,
submitit (with the sacct stand-in), preemption signals and requeue."""

from __future__ import annotations

import socket
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.slurm


def _script(path: Path, body: str) -> Path:
    path.write_text("#!/bin/bash\nset -euo pipefail\n" + textwrap.dedent(body))
    return path


def test_two_nodes_two_tasks_each(slurm_cluster, tmp_path):
    out = tmp_path / "tasks"
    out.mkdir()
    script = _script(
        tmp_path / "layout.sbatch",
        f"""\
        scontrol show hostnames "$SLURM_JOB_NODELIST" > {tmp_path}/hostnames
        srun bash -c 'echo "$SLURM_PROCID $SLURM_LOCALID $SLURM_NTASKS $(hostname) \
$SLURMD_NODENAME $SLURM_JOB_NODELIST" > {out}/$SLURM_PROCID'
        """,
    )
    job = slurm_cluster.sbatch(
        ["-N", "2", "--ntasks-per-node=2", "-o", tmp_path / "job.out", script], cwd=tmp_path
    )
    assert slurm_cluster.wait(job, timeout=60) == "COMPLETED", (
        tmp_path / "job.out"
    ).read_text() + slurm_cluster.logs()
    rows = [p.read_text().split() for p in sorted(out.iterdir())]
    assert sorted(int(r[0]) for r in rows) == [0, 1, 2, 3]
    assert {r[2] for r in rows} == {"4"}
    by_node: dict[str, list[int]] = {}
    for _procid, localid, _, _, node, nodelist in rows:
        by_node.setdefault(node, []).append(int(localid))
        assert nodelist == "n[1-2]"
    assert {n: sorted(ids) for n, ids in by_node.items()} == {"n1": [0, 1], "n2": [0, 1]}
    hosts = (tmp_path / "hostnames").read_text().split()
    assert hosts == ["n1", "n2"]
    assert {socket.getaddrinfo(h, None)[0][4][0] for h in hosts} == {"127.0.0.1"}  # MASTER_ADDR


def _rank() -> int:
    import submitit

    return submitit.JobEnvironment().global_rank


def _node_of(x: int) -> tuple[int, str]:
    import os

    return x, os.environ["SLURMD_NODENAME"]


def test_submitit_ranks_and_array(slurm_cluster, tmp_path):
    import submitit

    with slurm_cluster.activate():
        executor = submitit.AutoExecutor(folder=tmp_path / "%j", cluster="slurm")
        executor.update_parameters(nodes=2, tasks_per_node=2, timeout_min=5)
        job = executor.submit(_rank)
        assert sorted(job.results()) == [0, 1, 2, 3]
        executor.update_parameters(nodes=1, tasks_per_node=1)
        jobs = executor.map_array(_node_of, [10, 20])
        assert [j.result()[0] for j in jobs] == [10, 20]
        assert {j.result()[1] for j in jobs} <= {"n1", "n2"}


def test_sacct_stand_in_reports_array_tasks(slurm_cluster, tmp_path):
    """submitit's status query: a task that fails without a result is seen as FAILED."""
    from submitit.slurm.slurm import SlurmInfoWatcher

    script = _script(tmp_path / "array.sbatch", "exit $SLURM_ARRAY_TASK_ID\n")
    job = slurm_cluster.sbatch(
        ["--array=0-1", "-o", tmp_path / "array_%a.out", script], cwd=tmp_path
    )
    slurm_cluster.wait(job, timeout=60)
    assert slurm_cluster.states(job) == {f"{job}_0": "COMPLETED", f"{job}_1": "FAILED"}
    cmd = ["sacct", "-o", "JobID,State,NodeList", "--parsable2", "-j", job]
    out = slurm_cluster.run(cmd).stdout
    info = SlurmInfoWatcher().read_info(out)
    assert info[f"{job}_0"]["State"] == "COMPLETED"
    assert info[f"{job}_1"]["State"] == "FAILED"
    assert info[f"{job}_1"]["NodeList"] in ("n1", "n2")


def test_scancel_signal_reaches_srun_tasks(slurm_cluster, tmp_path):
    task = tmp_path / "trap.py"
    task.write_text(
        textwrap.dedent(
            f"""\
            import os, signal, sys, time
            rank = os.environ["SLURM_PROCID"]
            def on_usr1(signum, frame):
                open("{tmp_path}/usr1." + rank, "w").write(str(signum))
                sys.exit(0)
            signal.signal(signal.SIGUSR1, on_usr1)
            open("{tmp_path}/ready." + rank, "w").close()
            time.sleep(120)
            sys.exit(3)
            """
        )
    )
    script = _script(tmp_path / "trap.sbatch", f"srun {sys.executable} {task}\n")
    job = slurm_cluster.sbatch(
        ["-N", "2", "--ntasks-per-node=2", "-o", tmp_path / "job.out", script], cwd=tmp_path
    )
    slurm_cluster.wait_for_files([tmp_path / f"ready.{r}" for r in range(4)], timeout=60)
    slurm_cluster.run(["scancel", "--signal=USR1", job])
    assert slurm_cluster.wait(job, timeout=60) == "COMPLETED", (tmp_path / "job.out").read_text()
    for r in range(4):
        assert (tmp_path / f"usr1.{r}").read_text() == "10"


def test_requeue_runs_the_job_again(slurm_cluster, tmp_path):
    log = tmp_path / "runs.log"
    script = _script(
        tmp_path / "requeue.sbatch",
        f"""\
        echo "start ${{SLURM_RESTART_COUNT:-0}}" >> {log}
        if [ "${{SLURM_RESTART_COUNT:-0}}" = 0 ]; then
            srun bash -c 'touch {tmp_path}/step.started; sleep 120'
        fi
        echo "end ${{SLURM_RESTART_COUNT:-0}}" >> {log}
        """,
    )
    job = slurm_cluster.sbatch(["-N", "1", "-o", tmp_path / "job.out", script], cwd=tmp_path)
    slurm_cluster.wait_for_files([tmp_path / "step.started"], timeout=60)
    slurm_cluster.run(["scontrol", "requeue", job])
    # a requeued job may start again after AuthInfo cred_expire + 1 s (10 s here)
    assert slurm_cluster.wait(job, timeout=90) == "COMPLETED", slurm_cluster.logs()
    assert log.read_text().split("\n") == ["start 0", "start 1", "end 1", ""]
    assert slurm_cluster.info(job)["Restarts"] == "1"
