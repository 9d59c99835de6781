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
from tests import zygote
from tests.cli import REPO, child_env, run_py

SWEEP = [
    "-m",
    "cluster=sim",
    "scale=smoke",
    "dataset=synthetic",
    "wandb.mode=disabled",
    "progress=false",
    "algorithm=local_sgd,osp",
    "compute.slowdown=lognormal",  # drawn from the seed: osp's seeds train one at a time
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
        zygote.popen(  # forked from the tests' zygote where it may be (torch imported once)
            ["run.py", *SWEEP, f"out_root={out}", f"hydra.sweeper.shard={k}/2"],
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


def test_a_share_killed_from_outside_ends_the_sweep_in_one_line_naming_it(monkeypatch, capsys):
    """A run.py killed by a signal it cannot handle (the out-of-memory killer's SIGKILL: at
    scale=fmnist a share held an 8-seed x 8-worker lock-step group, 8.8 GB, and one of two
    shares was killed) ends the sweep, once the others ended, with no report and one line that
    names the share, the signal and the likely cause; exit code 128 + the signal. Before, the
    line said "stopped (exit -9)" and the exit code was 247."""
    import signal

    from experiments import sweep

    child = subprocess.run(
        [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"]
    )
    assert child.returncode == -signal.SIGKILL  # what run_children hands back for such a child
    reports = []
    monkeypatch.setattr(sweep, "run_children", lambda commands: [0, child.returncode])
    monkeypatch.setattr(sweep, "failed_points", lambda *a: reports.append("report") or [])
    code = sweep.main(["demo", "--scale", "smoke", "--cluster", "sim", "--jobs", "2"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 128 + signal.SIGKILL
    assert len(err) == 1 and err[0].startswith("error: the sweep of demo: share 2 of 2 was killed")
    assert "SIGKILL" in err[0] and "out-of-memory" in err[0] and "rerun the same command" in err[0]
    assert reports == []  # no report step

    monkeypatch.setattr(sweep, "run_children", lambda commands: [-signal.SIGSEGV])
    assert sweep.main(["demo", "--scale", "smoke", "--cluster", "sim"]) == 128 + signal.SIGSEGV
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: the sweep of demo: its run.py was killed by SIGSEGV;"), err


def test_a_stop_waits_for_the_checkpoint_and_a_second_stop_ends_it_at_once(tmp_path, monkeypatch):
    """A stop is passed on to the running command, which is given GRACE_S to reach its next safe
    step and checkpoint (a lock-step group of 8 seeds x 8 workers at scale=fmnist needed about a
    minute on a loaded machine; the 8 s given before killed one before its checkpoint); a second
    stop ends it AGAIN_GRACE_S later. Real processes: one that checkpoints in its own time after
    the stop, one that never ends by itself."""
    import os
    import signal
    import threading

    from experiments import sweep

    monkeypatch.setattr(sweep, "GRACE_S", 1000.0)  # only a second stop can end the second child
    monkeypatch.setattr(sweep, "AGAIN_GRACE_S", 1.0)

    def stops_later(*delays: float) -> None:
        for delay in delays:
            threading.Timer(delay, os.kill, (os.getpid(), signal.SIGTERM)).start()

    def child(body: str) -> list[str]:
        ready = tmp_path / "ready"
        code = (
            f"import os, signal, time, pathlib\nlog = pathlib.Path({str(tmp_path / 'log')!r})\n"
            f"{body}\npathlib.Path({str(ready)!r}).write_text(str(os.getpid()))\n"
            "while True: time.sleep(0.05)\n"
        )
        return [sys.executable, "-c", code]

    def when_ready(then) -> None:  # the child's handler is in place before the first stop
        (tmp_path / "ready").unlink(missing_ok=True)  # (the previous child's)

        def wait():
            while not (tmp_path / "ready").exists():
                threading.Event().wait(0.02)
            then()

        threading.Thread(target=wait, daemon=True).start()

    # 1. One stop: the command checkpoints (1.5 s later) and ends itself; the sweep waits for it.
    checkpoints = (
        "def stop(signum, frame):\n"
        "    time.sleep(1.5); log.write_text('checkpoint saved'); os._exit(3)\n"
        "signal.signal(signal.SIGTERM, stop)"
    )
    when_ready(lambda: stops_later(0.0))
    with pytest.raises(sweep.Stop):
        sweep.run_children([child(checkpoints)])
    assert (tmp_path / "log").read_text() == "checkpoint saved"

    # 2. A command that does not end: the second stop kills it (GRACE_S is 1000 s here).
    (tmp_path / "log").unlink()
    never = (
        "def stop(signum, frame):\n"
        "    with log.open('a') as f: f.write('stop\\n')\n"
        "signal.signal(signal.SIGTERM, stop)"
    )
    when_ready(lambda: stops_later(0.1, 0.6))
    with pytest.raises(sweep.Stop) as stopped:
        sweep.run_children([child(never)])
    assert stopped.value.signum == signal.SIGTERM
    assert (tmp_path / "log").read_text() == "stop\nstop\n"  # both passed on, then killed
    with pytest.raises(ProcessLookupError):  # ended and reaped
        os.kill(int((tmp_path / "ready").read_text()), 0)


def test_killing_time_is_grace_s_after_the_first_stop_or_again_grace_s_after_a_second():
    from experiments.sweep import AGAIN_GRACE_S, GRACE_S, killing_time

    assert not killing_time([], 1e9)
    assert not killing_time([(15, 100.0)], 100.0 + GRACE_S - 1)
    assert killing_time([(15, 100.0)], 100.0 + GRACE_S + 1)
    assert not killing_time([(15, 100.0), (2, 150.0)], 150.0 + AGAIN_GRACE_S - 1)
    assert killing_time([(15, 100.0), (2, 150.0)], 150.0 + AGAIN_GRACE_S + 1)
    assert AGAIN_GRACE_S < GRACE_S
