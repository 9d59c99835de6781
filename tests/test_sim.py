"""`cluster=sim` (experiments/workers/sim.py): workers as threads of one process.

- Same trajectories: for every algorithm of the registry, a run with its workers as threads
  and the same run with real gloo worker processes log the same metrics, row for row (float64:
  within 1e-12; float32: the same accuracy curves to 1e-5), on the virtual clock with a slow
  network and heterogeneous workers (fixed slowdowns and random stragglers), so overlap,
  windows and waits all matter.
- A sim run stopped by a stop request and resumed equals the uninterrupted run.
- Failures: a worker thread that raises ends the run at once, naming its rank, with the record
  and exit code of a failed worker process; a collective that waits `dist_timeout_s` names the
  rank that did not arrive; timing=real is a one-line error before anything starts.
"""

from __future__ import annotations

import json
import math
import os
import re
import threading
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from omegaconf import OmegaConf

import algorithms
from experiments.config import schema
from experiments.errors import UserError, WorkerFailed
from tests.compose import composed
from tests.session import once_a_session
from tests.workers import run_workers

WORKERS = 3
# Measured with the wall-clock even on the virtual clock: never the same twice.
WALL_CLOCK_KEYS = ("time/eval_s", "time/wall_s")
DTYPES = ("float64", "float32")


def config(cluster: str, *overrides: str) -> dict:
    cfg = composed(
        f"cluster={cluster}",
        "scale=smoke",
        "dataset=synthetic",
        "dataset.num_train=288",  # 96 per worker: 6 steps per epoch
        "dataset.num_test=64",
        "model.width=4",
        f"workers={WORKERS}",
        "batch_size=16",
        "epochs=3",
        "wandb.mode=disabled",
        "progress=false",
        "timing=virtual",
        "compute.step_time_s=0.01",
        # pinned: a measured algorithm time differs from run to run (the two runs of a
        # comparison would then differ in their times)
        "compute.algo_time_s=0.001",
        "compute.slowdown=[1.0,1.5,3.0]",  # heterogeneous workers ...
        "compute.straggler_prob=0.25",  # ... and random stragglers
        "compute.straggler_factor=4.0",
        "network=ethernet1g",  # a model average takes about a step: overlap matters
        "network.latency_s=0.002",
        "tau=2",
        "checkpoint.poll_steps=2",
        *overrides,
    )
    return OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)


def cases() -> dict[str, tuple[str, list[str]]]:
    """label -> (algorithm, overrides): every registry entry in both dtypes."""
    return {
        f"{name}-{dtype}": (name, [f"algorithm={name}", f"dtype={dtype}"])
        for name in sorted(algorithms.REGISTRY)
        for dtype in DTYPES
    }


def rows(run_dir: Path) -> list[dict]:
    out = []
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        for key in WALL_CLOCK_KEYS:
            row.pop(key, None)
        out.append(row)
    return out


def _gloo_runs(rank: int, m: int, configs: dict, root: str) -> dict:
    """In each gloo worker process: every case, as `run.py`'s worker processes run it."""
    from experiments.data.datasets import load_dataset
    from experiments.store.checkpoint import Stopper
    from experiments.worker import train_worker
    from experiments.workers import dist as d

    control = dist.new_group(backend="gloo")
    bundle = load_dataset(next(iter(configs.values()))["dataset"])
    statuses = {}
    for label, cfg in configs.items():
        run_dir = Path(root) / label
        run_dir.mkdir(parents=True, exist_ok=True)
        dist.barrier()
        stopper = Stopper(rank=rank, world_size=m, group=control, poll_steps=2, anywhere=True)
        worker = d.Worker(rank, m, rank, m, external=False)
        statuses[label] = train_worker(cfg, run_dir, worker, "gloo", bundle, stopper)
    return statuses


@pytest.fixture(scope="module")
def gloo_runs(tmp_path_factory, worker_id) -> Path:
    """Every case with real gloo worker processes (one launch for all of them), once a
    session (tests/session.py)."""

    def launch(root: Path) -> None:
        configs = {label: config("local", *o) for label, (_, o) in cases().items()}
        statuses = run_workers(_gloo_runs, WORKERS, configs, str(root))
        assert all(s == "completed" for s in statuses[0].values()), statuses[0]

    return once_a_session(tmp_path_factory, worker_id, "gloo", launch)


def sim_run(cfg: dict, run_dir: Path) -> str:
    from experiments.data.datasets import load_dataset
    from experiments.store.records import read_summary
    from experiments.worker import train_worker
    from experiments.workers import sim

    run_dir.mkdir(parents=True, exist_ok=True)
    sim.run(cfg, run_dir, load_dataset(cfg["dataset"]), train_worker)
    return read_summary(run_dir)["status"]


def assert_same_rows(sim_rows: list[dict], gloo_rows: list[dict], dtype: str, label: str):
    assert len(sim_rows) == len(gloo_rows) == 3, label
    for a, b in zip(sim_rows, gloo_rows, strict=True):
        assert a.keys() == b.keys(), label
        for key in a:
            x, y = a[key], b[key]
            if dtype == "float32" and key not in ("test/acc", "test/acc_local"):
                # float32: the accuracy curves (below) and the deterministic accounts
                if key.startswith(("comm/bytes", "comm/collectives", "step", "epoch")):
                    assert x == y, (label, key, x, y)
                continue
            if isinstance(x, float) or isinstance(y, float):
                tol = 1e-5 if dtype == "float32" else 1e-12 * max(1.0, abs(y))
                assert math.isclose(x, y, rel_tol=0, abs_tol=tol), (label, a["epoch"], key, x, y)
            else:
                assert x == y, (label, key, x, y)


@pytest.mark.dist
@pytest.mark.parametrize("label", list(cases()))
def test_sim_run_equals_the_gloo_run(gloo_runs, tmp_path, label):
    name, overrides = cases()[label]
    cfg = config("sim", *overrides)
    assert sim_run(cfg, tmp_path / label) == "completed"
    sim_rows, gloo_rows = rows(tmp_path / label), rows(gloo_runs / label)
    assert_same_rows(sim_rows, gloo_rows, cfg["dtype"], label)
    # the heterogeneous clocks did their work: some communication was exposed
    assert gloo_rows[-1]["time/comm_exposed_s"] > 0, label


def test_sim_run_stopped_and_resumed_equals_the_uninterrupted_run(tmp_path):
    for name in ("overlap_local_sgd", "osp"):  # a collective in flight; a stop at an eval point
        pinned = (f"algorithm={name}", "dtype=float64")
        full = config("sim", *pinned)
        cut = config("sim", *pinned, "checkpoint.simulate_signal_at_step=5")
        assert sim_run(full, tmp_path / name / "full") == "completed"
        # interrupted, checkpointed: the record says so (and the status stays `running`:
        # unfinished, a rerun resumes it)
        assert sim_run(cut, tmp_path / name / "cut") != "completed"
        summary = json.loads((tmp_path / name / "cut" / "summary.json").read_text())
        assert summary["interrupted"]["signal"] == "SIGUSR1 (simulated)", summary
        step = json.loads((tmp_path / name / "cut" / "checkpoint" / "latest.json").read_text())
        assert step["step"] > 0
        assert sim_run(cut, tmp_path / name / "cut") == "completed"
        assert rows(tmp_path / name / "cut") == rows(tmp_path / name / "full"), name


def test_a_raising_worker_thread_ends_the_run_naming_its_rank(tmp_path, monkeypatch):
    monkeypatch.setenv("COMMSGD_INJECT_FAULT", "1:7:raise")
    cfg = config("sim", "algorithm=local_sgd", "epochs=50")
    with pytest.raises(WorkerFailed) as failed:  # at the fault, not after the 50 epochs
        sim_run(cfg, tmp_path / "run")
    assert str(failed.value).startswith(
        "worker 1 (rank 1) failed: RuntimeError: injected fault at step 7"
    ), failed.value
    assert "Traceback" in failed.value.details
    deadline = time.monotonic() + 30  # the other workers stop at their next collective
    while [t for t in threading.enumerate() if t.name.startswith("commsgd-worker-")]:
        assert time.monotonic() < deadline
        time.sleep(0.05)


def hang_rank_at_step(monkeypatch, rank: int, step: int) -> threading.Event:
    """Make worker `rank` stop before its step `step`, outside any collective, until the
    returned event is set (at most 60 s)."""
    from experiments.training import faults

    release = threading.Event()
    check, init = faults.Fault.check, faults.Fault.__init__

    def remember_rank(self, r):
        init(self, r)
        self.rank_ = r

    def hang(self, t):
        if self.rank_ == rank and t == step:
            release.wait(60)
        return check(self, t)

    monkeypatch.setattr(faults.Fault, "__init__", remember_rank)
    monkeypatch.setattr(faults.Fault, "check", hang)
    return release


@pytest.mark.parametrize(
    "batched, group",
    [("false", "collectives"), ("true", "batched steps")],
    ids=["threads", "batched"],
)
def test_a_hung_worker_thread_times_out_naming_the_rank_that_did_not_arrive(
    tmp_path, monkeypatch, batched, group
):
    """Batched (experiments/workers/batched.py): the others wait in the batched pass."""
    from experiments.workers import sim

    release = hang_rank_at_step(monkeypatch, rank=2, step=3)
    # The hung thread never ends by itself: the run waits GRACE_S (3 s) for it after the
    # first failure, then reports. What is checked is the report, not how long it waits.
    monkeypatch.setattr(sim, "GRACE_S", 0.5)
    cfg = config("sim", "algorithm=sync_sgd", "dist_timeout_s=2", f"cluster.batched={batched}")
    try:
        with pytest.raises(WorkerFailed) as failed:
            sim_run(cfg, tmp_path / "run")
    finally:
        release.set()
    message = str(failed.value)
    # rank 0 or 1, whichever waited longest first; never the hung rank itself
    assert re.match(
        r"worker ([01]) \(rank \1\) failed: CollectiveTimeout: " + group + ": ", message
    ), message
    assert "rank 2 did not arrive" in message, message


def test_timing_real_with_cluster_sim_is_a_one_line_error():
    from experiments.preflight import validate

    cfg = config("sim", "timing=real")
    with pytest.raises(UserError) as e:
        validate(cfg)
    assert str(e.value).startswith("timing=real with cluster=sim: the workers are threads")
    assert "\n" not in str(e.value)


def test_a_sim_worker_draws_what_a_worker_process_draws():
    """Model initialisation in threads draws the numbers of one process (under the lock)."""
    from experiments.data.datasets import load_dataset
    from experiments.worker import initial_model

    cfg = config("sim")
    job = schema.from_record(cfg)
    bundle = load_dataset(cfg["dataset"])
    torch.manual_seed(123)
    before = torch.get_rng_state()
    models: list = [None] * 4

    def build(i):
        models[i] = torch.cat(
            [p.detach().flatten() for p in initial_model(job, bundle).parameters()]
        )

    threads = [threading.Thread(target=build, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert torch.equal(torch.get_rng_state(), before)  # the global stream is left alone
    torch.manual_seed(cfg["seed"])
    from experiments.training.models import build_model

    want = torch.cat([p.detach().flatten() for p in build_model(cfg["model"], 1, 10).parameters()])
    assert all(torch.equal(m, want) for m in models)


def test_the_forkservers_stop_signals_are_the_checkpoints():
    """experiments/workers/startup.py blocks the stop signals while the forkserver starts (its
    workers inherit the mask): they must be exactly the ones the workers unblock
    (checkpoint.STOPS)."""
    from experiments.store import checkpoint
    from experiments.workers import startup

    assert set(startup.STOP_SIGNALS) == set(checkpoint.STOPS)


def test_a_held_stop_waits_for_the_block_even_with_another_thread_that_could_take_it():
    """startup.stops_held (run.py's `import torch`): the stop's handler runs once the block is
    done, not in it, although another thread that does not block the signal is alive (as
    OpenBLAS's threads are once numpy is imported; the kernel hands them the signal, and
    Python runs the handler in the main thread all the same: blocking it in the main thread
    did not hold it)."""
    import signal

    from experiments.workers import startup

    done, seen = [False], []

    def stop(signum, frame):
        seen.append(done[0])
        raise RuntimeError("stopped")

    previous = signal.signal(signal.SIGUSR2, stop)
    idle = threading.Event()
    other = threading.Thread(target=idle.wait, daemon=True)
    other.start()
    try:
        with pytest.raises(RuntimeError, match="stopped"):
            with startup.stops_held():
                os.kill(os.getpid(), signal.SIGUSR2)
                for _ in range(50):  # instructions between which a handler would run
                    time.sleep(0.001)
                done[0] = True
        assert seen == [True]  # once, after the block
        assert signal.getsignal(signal.SIGUSR2) is stop  # the handler is back
    finally:
        idle.set()
        signal.signal(signal.SIGUSR2, previous)


@pytest.mark.e2e  # a fresh run.py-like process and a worker forked by its forkserver
def test_workers_forked_by_the_forkserver_start_with_the_stop_signals_blocked(tmp_path):
    """A stop that comes while a worker starts up must wait for its handlers: the forkserver
    (started by startup.warm, in a fresh process as run.py starts it) passes the blocked stop
    signals on to every worker it forks."""
    from experiments.workers import startup

    if startup.start_method() != "forkserver":
        pytest.skip("workers are not forked from a forkserver here")
    code = (
        "import multiprocessing, signal\n"
        "from experiments.workers import startup\n"
        "def blocked(queue):\n"
        "    queue.put([int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])])\n"
        "if __name__ == '__main__':\n"
        "    startup.warm()\n"
        "    ctx = multiprocessing.get_context('forkserver')\n"
        "    queue = ctx.SimpleQueue()\n"
        "    child = ctx.Process(target=blocked, args=(queue,))\n"
        "    child.start()\n"
        "    print(sorted(queue.get()))\n"
        "    child.join()\n"
    )
    # A Process that returns, not a Pool: Pool's exit stops its workers with SIGTERM, which a
    # worker forked with the stop signals blocked never receives (the join hung in a CI run).
    blocked = set(json.loads(_fresh_python(tmp_path / "mask_check.py", code)))
    assert {int(s) for s in startup.STOP_SIGNALS} <= blocked, blocked


def test_the_eager_dynamo_stand_in_is_not_imported_by_a_scan_of_the_modules(tmp_path):
    """experiments/workers/startup.py's stand-in for torch._dynamo: an optimizer step and a
    scan of sys.modules (`inspect.getmodule`, which `import wandb` runs through pydantic) leave
    it a stand-in; asking for dynamo itself (a submodule, an attribute) imports the real one.
    In a fresh interpreter: this one may have imported dynamo already."""
    code = (
        "import inspect, sys, torch\n"
        "from experiments.workers.startup import defer_dynamo\n"
        "defer_dynamo()\n"
        "real = lambda: 'torch._dynamo.eval_frame' in sys.modules\n"
        "net = torch.nn.Linear(3, 2)\n"
        "opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)\n"
        "net(torch.ones(1, 3)).sum().backward()\n"
        "opt.step()\n"
        "namespace = {}\n"
        "exec('def made_here(): pass', namespace)\n"
        "assert inspect.getmodule(namespace['made_here']) is None\n"
        "import wandb\n"
        "after_scan = real()\n"
        "import torch._dynamo.config\n"
        "print(after_scan, real(), callable(torch._dynamo.reset))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "COMMSGD_EAGER_DYNAMO"}
    out = _fresh_python(tmp_path / "dynamo_check.py", code, env)
    assert out.split() == ["False", "True", "True"], out


def _fresh_python(script: Path, code: str, env: dict | None = None) -> str:
    """The last line `code` prints, run as `script` by a fresh interpreter from the
    repository root (the suite importable); fails the test when it fails."""
    import subprocess
    import sys

    script.write_text(code)
    root = str(Path(__file__).resolve().parents[1])
    out = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=root,
        env={**(os.environ if env is None else env), "PYTHONPATH": root},
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip().splitlines()[-1]
