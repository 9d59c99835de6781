"""Faults, with real processes: a worker killed or raising, a hung worker, Ctrl-C on a run and on
a sweep, two processes on one run directory, and (slow) 50 start/stop cycles without an abort or
a leak; bad input of every kind and a full disk (run.py in this process: refused before any
worker starts), an interrupted write, an unreadable record in the analysis. Nothing hangs,
nothing half-written is marked complete, no finished result is lost."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import warnings
from pathlib import Path

import pytest

from tests import zygote
from tests.cli import launched_env, popen_run_py, run_dir_of, run_py, run_py_here
from tests.cli import run_py_with_workers_here as run_here

# e2e: the tests with real processes. Bad input is answered before any worker starts: those
# commands run in this process (tests/cli.py, run_py_here).

FAST = ["scale=smoke", "dataset=synthetic", "wandb.mode=disabled", "progress=false"]


def children(pid: int) -> set[int]:
    """Every live descendant of `pid` (from /proc)."""
    parent_of = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            parent_of[int(entry.name)] = int(fields[1])
    out, frontier = set(), {pid}
    while frontier:
        frontier = {p for p, parent in parent_of.items() if parent in frontier} - out
        out |= frontier
    return out


def alive(pids) -> set[int]:
    out = set()
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            out.add(pid)
    return out


def gone(pids, within: float = 30.0) -> set[int]:
    """The processes of `pids` still alive after up to `within` seconds (the kernel reaps
    them; on a loaded machine that takes a moment): the empty set when none is left."""
    deadline = time.monotonic() + within
    while alive(pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    return alive(pids)


def popen(*args: str, env_extra: dict | None = None) -> subprocess.Popen:
    return popen_run_py(*args, env_extra=env_extra)


def wait_for_training(proc, root: Path, timeout: float = 120) -> Path:
    """The run directory, once its first evaluation is on disk."""
    deadline = time.monotonic() + timeout
    while True:
        found = [p for p in root.glob("runs/*/metrics.jsonl") if p.stat().st_size]
        if found:
            return found[0].parent
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the run did not start training"
        time.sleep(0.05)


def workers_of(proc) -> list[int]:
    """The worker processes of a run.py: the children of its forkserver (experiments/
    startup.py), not the server itself nor multiprocessing's resource tracker."""
    pids = []
    for pid in children(proc.pid):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
            parent = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except OSError:
            continue
        if "forkserver" in cmdline and parent != proc.pid:
            pids.append(pid)
    return sorted(pids)


def summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


LONG = [*FAST, "epochs=200", "dataset.num_train=512"]


@pytest.mark.e2e
@pytest.mark.parametrize("how", ["sigkill", "raise", "hang"])
def test_a_dead_or_hung_worker_ends_the_run_fast_and_leaves_nothing(tmp_path, how):
    env = {"COMMSGD_INJECT_FAULT": "1:40:raise"} if how == "raise" else None
    proc = popen(*LONG, "dist_timeout_s=5", f"out_root={tmp_path}", env_extra=env)
    run_dir = wait_for_training(proc, tmp_path)
    everything = children(proc.pid)
    if how != "raise":
        victim = workers_of(proc)[-1]
        os.kill(victim, signal.SIGKILL if how == "sigkill" else signal.SIGSTOP)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 1, out + err
    # The run ends for the fault, not for its 200 epochs or the control group's 600 s: the
    # last line names the fault (idle: a dead worker ends it in about a second, a hung one in
    # dist_timeout_s, 5 s, plus 3 s of grace; no wall-clock bound here, a loaded machine is
    # slower).
    last = err.strip().splitlines()[-1]
    if how == "sigkill":
        assert last == "error: worker 1 (rank 1) was killed by SIGKILL"
    elif how == "raise":
        assert last.startswith("error: worker 1 (rank 1) failed: RuntimeError: injected fault")
    else:  # rank 0 waits dist_timeout_s for the stopped rank 1, which is named
        assert last.startswith(
            "error: worker 1 (rank 1) stopped answering: rank 0 timed out waiting for it"
        ), err[-2000:]
    s = summary(run_dir)
    assert s["status"] == "failed" and "rank" in s["error"]
    assert not gone(everything), alive(everything)  # no worker left behind


@pytest.mark.e2e
def test_ctrl_c_stops_a_sweep_and_the_rerun_does_only_the_missing_points(tmp_path):
    sweep = ["-m", *FAST, "seed=0,1,2", "epochs=100", "dataset.num_train=512"]
    proc = popen(*sweep, f"out_root={tmp_path}")
    point = [*FAST, "epochs=100", "dataset.num_train=512"]
    first, second, third = (run_dir_of(tmp_path, *point, f"seed={s}") for s in range(3))
    deadline = time.monotonic() + 600
    while not (first / "summary.json").exists() or summary(first)["status"] != "completed":
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.1)
    # then wait for the second point to be training
    deadline = time.monotonic() + 120
    while not ((second / "metrics.jsonl").exists() and (second / "metrics.jsonl").stat().st_size):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    everything = children(proc.pid)
    proc.send_signal(signal.SIGINT)  # what Ctrl-C in the terminal delivers
    out, err = proc.communicate(timeout=300)
    # At once (idle, a second or two), not at the end of the sweep: the point in training
    # is stopped and the third never starts (asserted below).
    assert proc.returncode == 130, out + err
    assert err.strip().splitlines()[-1].startswith("error: interrupted by Ctrl-C")
    assert "Traceback" not in err
    assert not gone(everything)
    assert summary(second)["status"] == "failed"
    assert not third.exists()
    finished = (first / "summary.json").read_bytes()

    rerun = run_here(*sweep, f"out_root={tmp_path}")  # run.py here, its workers real
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert f"skip {first}: already completed" in rerun.stdout
    assert rerun.stdout.count(": completed  final/test_acc") == 2  # seeds 1 and 2 only
    assert (first / "summary.json").read_bytes() == finished  # the finished result untouched


@pytest.mark.e2e
def test_ctrl_c_with_checkpointing_on_saves_and_resumes(tmp_path):
    proc = popen(*LONG, "checkpoint_every=1", f"out_root={tmp_path}")
    run_dir = wait_for_training(proc, tmp_path)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 3, out + err
    assert "interrupted by SIGINT" in err and "checkpoint saved" in err
    assert (run_dir / "checkpoint" / "latest.json").exists()
    assert summary(run_dir)["interrupted"]["requeue"] is None  # no SLURM here


def _choices(group: str) -> str:
    """The options of a config group as the error lists them (every option of conf/<group>)."""
    conf = Path(__file__).resolve().parents[1] / "conf" / group
    return ", ".join(sorted(p.stem for p in conf.glob("*.yaml")))


BAD = [
    (["algorithm=foo"], f"error: unknown algorithm 'foo'; choose from {_choices('algorithm')}"),
    (["dataset=foo"], f"error: unknown dataset 'foo'; choose from {_choices('dataset')}"),
    (["partition=foo"], "error: unknown partition 'foo'; choose from dirichlet, iid, noniid"),
    (["network=foo"], f"error: unknown network 'foo'; choose from {_choices('network')}"),
    (["tau=abc"], "error: tau must be an integer, got 'abc'"),
    (["tau=0"], "error: tau must be an integer >= 1, got 0"),
    (["workers=0"], "error: workers must be an integer >= 1, got 0"),
    (["workers=two"], "error: workers must be an integer, got 'two'"),
    (["epochs=-1"], "error: epochs must be an integer >= 1, got -1"),
    (["batch_size=0"], "error: batch_size must be an integer >= 1, got 0"),
    (["lr=abc"], "error: lr must be a number, got 'abc'"),
    (["lr=-0.1"], "error: lr must be a number > 0, got -0.1"),
    (["lr=nan"], "error: lr must be a finite number, got nan"),
    (["lr=inf"], "error: lr must be a finite number, got inf"),
    (["weight_decay=nan"], "error: weight_decay must be a finite number, got nan"),
    (["compute.factor=inf"], "error: compute.factor must be a finite number, got inf"),
    (["algorithm=easgd", "algorithm.alpha=2"], "error: algorithm.alpha must be in [0, 1], got 2"),
    (["algorithm=easgd", "algorithm.alpha=nan"], "error: algorithm.alpha must be a finite"),
    (
        ["algorithm=overlap_local_sgd", "algorithm.beta=x"],
        "error: algorithm.beta must be a number, got 'x'",
    ),
    (["algorithm=powersgd", "algorithm.rank=0"], "error: algorithm.rank must be an integer >= 1"),
    (
        ["dataset=digits", "partition=noniid", "partition.dominant_fraction=0.99", "workers=8"],
        "error: noniid partition infeasible: class 0 is dominant for 1 workers",
    ),
    (["dataset.num_train=3", "workers=4"], "error: cannot split 3 training samples over 4"),
    (
        ["dataset=cifar10", "dataset.root=/nonexistent", "dataset.download=false"],
        "error: CIFAR-10 not found in /nonexistent/cifar-10-batches-py",
    ),
    (["out_root=/proc/none"], "error: output directory /proc/none/runs is not writable"),
]


@pytest.mark.parametrize(("args", "message"), BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_input_is_one_line_exit_2_and_no_record(tmp_path, args, message):
    out_root = [] if any(a.startswith("out_root=") for a in args) else [f"out_root={tmp_path}"]
    proc = run_py_here(*FAST, *args, *out_root)
    assert proc.returncode == 2, proc.stdout[-1000:] + proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(message), proc.stderr
    assert not list(tmp_path.glob("runs/*/summary.json"))  # no record, let alone a completed one


def test_full_output_disk_is_refused_before_any_work(tmp_path):
    mount = tmp_path / "small"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)]).returncode:
        pytest.skip("cannot mount a small tmpfs here (not root?)")
    try:
        proc = run_py_here(*FAST, f"out_root={mount}")
    finally:
        subprocess.run(["umount", str(mount)])
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith(f"error: output directory {mount}/runs is full: ")
    assert len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.e2e
def test_rendezvous_port_in_use_is_one_line(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = run_py(
            *FAST, "workers=1", f"out_root={tmp_path}", timeout=120, env=launched_env(port)
        )
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        f"error: rendezvous port {port} (MASTER_PORT) is already in use on "
        f"{socket.gethostname()}: set MASTER_PORT to a free port"
    )


@pytest.mark.e2e
def test_a_second_process_on_the_same_run_directory_is_refused(tmp_path):
    from experiments.store.records import RunLock

    run_dir = run_dir_of(tmp_path, *FAST)
    run_dir.mkdir(parents=True)
    with RunLock(run_dir):  # as a run of another sweep would hold it
        proc = run_py(*FAST, f"out_root={tmp_path}", timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        f"error: run directory {run_dir} is in use by pid {os.getpid()} on "
        f"{socket.gethostname()}; wait for that run to end, or choose another out_root"
    )
    assert not (run_dir / "summary.json").exists()
    proc = run_py(*FAST, f"out_root={tmp_path}", timeout=120)  # released: the run goes ahead
    assert proc.returncode == 0 and summary(run_dir)["status"] == "completed"


def test_an_interrupted_write_leaves_the_previous_file(tmp_path, monkeypatch):
    from experiments.errors import OutputError
    from experiments.store import records
    from experiments.store.log import JsonlSink

    records.write_json_atomic(tmp_path / "summary.json", {"status": "running"})
    sink = JsonlSink(tmp_path)
    sink.log({"test/acc": 0.5}, 10)
    before_summary = (tmp_path / "summary.json").read_bytes()
    before_metrics = (tmp_path / "metrics.jsonl").read_bytes()

    def crash(*args, **kwargs):  # the process dies (or the disk fills) mid-write
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(records.os, "fsync", crash)
    with pytest.raises(OutputError, match=r"^disk full writing .*summary.json$"):
        records.update_summary(tmp_path, status="completed")
    with pytest.raises(OutputError, match=r"^disk full writing .*metrics.jsonl$"):
        sink.log({"test/acc": 0.6}, 20)
    assert (tmp_path / "summary.json").read_bytes() == before_summary
    assert (tmp_path / "metrics.jsonl").read_bytes() == before_metrics
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.jsonl", "summary.json"]


def test_the_analysis_skips_and_reports_unreadable_records(tmp_path):
    from analysis.runs.load import load_runs

    def make(name, summary_text, config_text="algorithm:\n  name: sync_sgd\ntau: 1\n"):
        run = tmp_path / name
        run.mkdir()
        (run / "summary.json").write_text(summary_text)
        (run / "config.yaml").write_text(config_text)
        row = {"step": 10, "epoch": 1, "test/acc": 0.5, "train/loss": 1.0}
        (run / "metrics.jsonl").write_text(json.dumps(row) + "\n" + '{"step": 2')
        return run

    make("good", json.dumps({"status": "completed", "final/test_acc": 0.5}))
    make("torn-summary", '{"status": "compl')
    make("bad-config", json.dumps({"status": "completed"}), "algorithm: [unclosed\n")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        frame = load_runs(tmp_path)
    assert sorted(set(frame["run_dir"])) == [str(tmp_path / "good")]
    messages = " ".join(str(w.message) for w in caught)
    assert "torn-summary: unreadable summary.json skipped" in messages
    assert "bad-config: unreadable config skipped" in messages


@pytest.mark.e2e
@pytest.mark.slow
def test_fifty_start_stop_cycles_without_an_abort_or_a_leak(tmp_path):
    """A known gloo behaviour: it may abort at teardown ("terminate called without an active
    exception"). 50 consecutive 2-worker runs (one sweep) must all complete cleanly."""
    before = children(os.getpid())
    proc = run_py(
        "-m",
        *FAST,
        "seed=range(0,50)",
        "dataset.num_train=64",
        "epochs=1",
        f"out_root={tmp_path}",
        timeout=1200,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "terminate called" not in proc.stderr and "Traceback" not in proc.stderr
    statuses = [summary(p.parent)["status"] for p in tmp_path.glob("runs/*/summary.json")]
    assert statuses == ["completed"] * 50
    # the tests' zygote, if this command started it, is no process of the run (tests/zygote.py)
    assert gone(children(os.getpid()) - before - {zygote.helper_pid()}) == set()
