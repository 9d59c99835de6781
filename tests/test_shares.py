"""A sweep in shares (`python -m experiments.sweep --jobs N`, `make <preset> JOBS=N`): N
concurrent sweeps, share k running every N-th unit of work (`hydra.sweeper.shard=k/N`,
hydra_plugins/commsgd_sweeper): a lock-step group of seeds stays whole in one share, a run that
trains alone is a unit of its own; every point runs once, in exactly one share, and what a
share does not run it neither runs nor reports."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from hydra.errors import HydraException

from experiments.sweep import shares
from hydra_plugins.commsgd_sweeper.commsgd_sweeper import _shard
from tests.cli import REPO, child_env, run_py

SWEEP = [
    "-m",
    "cluster=sim",
    "scale=smoke",
    "dataset=synthetic",
    "wandb.mode=disabled",
    "progress=false",
    "algorithm=local_sgd,osp",
    "seed=0,1,2",
]


def test_a_share_is_k_of_n():
    assert _shard(None) == (0, 1)
    assert _shard("1/3") == (1, 3)
    for bad in ("3/3", "-1/2", "1", "a/2", "1/0"):
        with pytest.raises(HydraException, match="hydra.sweeper.shard must be k/N"):
            _shard(bad)


def test_the_driver_divides_the_cores_unless_told():
    command = ["python", "run.py", "-m", "experiment=losp"]
    assert shares(command, 1, []) == [command]
    two = shares(command, 2, [])
    threads = f"threads_per_worker={max(1, (__import__('os').cpu_count() or 1) // 2)}"
    assert two == [
        [*command, threads, "hydra.sweeper.shard=0/2"],
        [*command, threads, "hydra.sweeper.shard=1/2"],
    ]
    assert shares(command, 2, ["threads_per_worker=3"])[1] == [
        *command,
        "hydra.sweeper.shard=1/2",
    ]


@pytest.mark.e2e
def test_two_shares_run_every_point_once_and_keep_a_lockstep_group_whole(tmp_path):
    out = tmp_path / "out"
    procs = [
        subprocess.Popen(
            [sys.executable, "run.py", *SWEEP, f"out_root={out}", f"hydra.sweeper.shard={k}/2"],
            cwd=REPO,
            env=child_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for k in range(2)
    ]
    said = [p.communicate(timeout=900) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [e[-2000:] for _, e in said]
    first, second = (o for o, _ in said)
    # units in the points' order: local_sgd's three seeds (one lock-step group), then each osp
    # seed alone: share 0 has the group and osp seed 1, share 1 osp seeds 0 and 2
    assert "(share 1 of 2)" in first and "(share 2 of 2)" in second
    assert first.count("lockstep: 3 seeds of one config in one batched pass") == 1, first
    assert "lockstep: 3 seeds" not in second
    ran = [
        sorted(
            line.split("/runs/")[1].split(":")[0]
            for line in o.splitlines()
            if line.startswith("run ")
        )
        for o in (first, second)
    ]
    assert [n.split("-")[0] + "-" + n.split("-")[-2] for n in ran[0]] == [
        "local_sgd-seed0", "local_sgd-seed1", "local_sgd-seed2", "osp-seed1"
    ]  # fmt: skip
    assert [n.split("-")[0] + "-" + n.split("-")[-2] for n in ran[1]] == ["osp-seed0", "osp-seed2"]
    summaries = [json.loads(p.read_text()) for p in (out / "runs").glob("*/summary.json")]
    assert sorted(s["status"] for s in summaries) == ["completed"] * 6
    records = [json.loads(p.read_text()) for p in (out / "sweeps").glob("*/sweep.json")]
    statuses = sorted(pt["status"] for r in records for pt in r["points"])
    assert statuses == ["completed"] * 6 + ["other share"] * 6

    again = run_py(*SWEEP, f"out_root={out}", "hydra.sweeper.shard=1/2")  # nothing left to do
    assert again.returncode == 0, again.stderr[-2000:]
    assert "run " not in again.stdout and again.stdout.count(": already completed") == 2
