"""Checkpoint and exact resume, with real gloo workers: for every algorithm, a run stopped by a
stop request (mid-epoch where the algorithm allows it, else at the next evaluation point) and
resumed from its checkpoint logs the same metrics, row for row, as the uninterrupted run
(timing=virtual with a slow network, so clocks, ledgers and collectives in flight all matter);
a run that crashed after a periodic checkpoint resumes from it without duplicated rows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch.distributed as dist

import algorithms
from tests.compose import resolved
from tests.workers import run_workers

STEPS_PER_EPOCH = 24  # digits, 2 workers, batch 32 (smoke scale)
# Further cases beyond each algorithm's defaults: label -> (algorithm, overrides).
EXTRA_CASES = {
    # a fragment in flight at the stop: fragment 0 is launched after steps 1, 7, 13, ... and
    # applied 2 steps later, fragment 1 after 4, 10, ... and 6, 12, ... (tau 6)
    "streaming_diloco-delay": ("streaming_diloco", ["tau=6", "algorithm.sync_delay=2"]),
    # compressed averages: blocking (DiLoCo's pseudo-gradients) and in flight (the anchor)
    "diloco-int8": ("diloco", ["comm.compression=int8"]),
    "overlap_local_sgd-bf16": ("overlap_local_sgd", ["comm.compression=bf16"]),
}


def config(*overrides: str) -> dict:
    return resolved(
        "scale=smoke",
        "dataset=digits",
        "wandb.mode=disabled",
        "progress=false",
        "timing=virtual",
        "compute.step_time_s=0.01",
        "compute.algo_time_s=0.001",  # pinned: the uninterrupted run charges the same
        "network=ethernet1g",  # collectives take several steps: windows, overlap
        "tau=2",
        "checkpoint.poll_steps=2",
        *overrides,
    )


def rows(run_dir: Path) -> list[dict]:
    out = []
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        row.pop("time/eval_s")  # wall-clock time of the evaluation: never the same twice
        for key in [k for k in row if k.startswith(("compute/measured", "compute/calibration"))]:
            row.pop(key)  # the virtual clock's raw calibration: absent when its values are pinned
        out.append(row)
    return out


def _train(cfg, run_dir: Path, rank: int, m: int, bundle, group):
    from experiments.store.checkpoint import Stopper
    from experiments.worker import train_worker
    from experiments.workers import dist as d

    run_dir.mkdir(parents=True, exist_ok=True)
    dist.barrier()
    stopper = Stopper(
        rank=rank,
        world_size=m,
        group=group,
        poll_steps=cfg["checkpoint"]["poll_steps"],
        anywhere=True,
        simulate_at_step=cfg["checkpoint"]["simulate_signal_at_step"],
    )
    worker = d.Worker(rank, m, rank, m, external=False)
    return train_worker(cfg, run_dir, worker, "gloo", bundle, stopper)


def _resume_worker(rank: int, m: int, cases: list, crash_cases: list, root: str):
    import experiments.training.loop as loop
    from experiments.data.datasets import load_dataset

    group = dist.new_group(backend="gloo")
    bundle = load_dataset(cases[0][2]["dataset"])
    statuses = {}
    for name, _, full, cut in cases:
        base = Path(root) / name
        a = _train(full, base / "full", rank, m, bundle, group)
        b = _train(cut, base / "cut", rank, m, bundle, group)
        step = json.loads((base / "cut" / "checkpoint" / "latest.json").read_text())["step"]
        c = _train(cut, base / "cut", rank, m, bundle, group)
        statuses[name] = (a, b, c, step)

    # A crash (an exception on every worker at the 4th evaluation) after the periodic
    # checkpoint of epoch 2 and the logged row of epoch 3.
    evaluate = loop.evaluate
    for name, full, crashing in crash_cases:
        base = Path(root) / name
        a = _train(full, base / "full", rank, m, bundle, group)
        calls = []

        def failing(*args, calls=calls, **kwargs):
            calls.append(1)
            if len(calls) == 4:
                raise RuntimeError("injected crash")
            return evaluate(*args, **kwargs)

        loop.evaluate = failing
        try:
            _train(crashing, base / "cut", rank, m, bundle, group)
            b = "no crash"
        except RuntimeError as e:
            b = str(e)
        loop.evaluate = evaluate
        rows_at_crash = len((base / "cut" / "metrics.jsonl").read_text().splitlines())
        c = _train(crashing, base / "cut", rank, m, bundle, group)
        statuses[name] = (a, b, c, rows_at_crash)
    return statuses


@pytest.mark.dist
def test_every_algorithm_resumes_exactly(tmp_path):
    cases = []
    runs = {name: (name, []) for name in sorted(algorithms.REGISTRY)} | EXTRA_CASES
    for label, (name, overrides) in runs.items():
        full = config(f"algorithm={name}", *overrides)
        cut = config(f"algorithm={name}", *overrides, "checkpoint.simulate_signal_at_step=5")
        cases.append((label, name, full, cut))
    crash_cases = [
        (
            f"crash-{name}",
            config(f"algorithm={name}", "epochs=4", "checkpoint_every=2"),
            config(f"algorithm={name}", "epochs=4", "checkpoint_every=2"),
        )
        for name in ("overlap_local_sgd", "losp")
    ]
    statuses = run_workers(_resume_worker, 2, cases, crash_cases, str(tmp_path))
    assert statuses[0] == statuses[1]
    for label, name, _, _ in cases:
        full, cut = tmp_path / label / "full", tmp_path / label / "cut"
        a, b, c, step = statuses[0][label]
        assert (a, b, c) == ("completed", "interrupted", "completed"), label
        if algorithms.REGISTRY[name].checkpoint_anywhere:  # stopped between two steps
            assert step % STEPS_PER_EPOCH != 0 and 5 <= step <= 9, (label, step)
        else:  # OSP/LOSP: at the next evaluation point
            assert step == STEPS_PER_EPOCH, (label, step)
        assert rows(cut) == rows(full), label
        s_full = json.loads((full / "summary.json").read_text())
        s_cut = json.loads((cut / "summary.json").read_text())
        for key in ("final/test_acc", "steps", "time/train_s", "comm/bytes", "comm/ratio"):
            assert s_cut[key] == s_full[key], (label, key)
        assert s_cut["status"] == "completed"
        assert not (cut / "checkpoint").exists()  # a finished run's checkpoint is removed
        if label in ("overlap_local_sgd", "streaming_diloco-delay"):  # in flight at the stop
            assert s_full["time/comm_hidden_s"] > 0, label
        if label == "streaming_diloco-delay":  # a fragment was in flight at the checkpoint
            assert step % 6 in (1, 2, 4, 5), step

    def summary_bytes(label: str) -> int:
        return json.loads((tmp_path / label / "full" / "summary.json").read_text())["comm/bytes"]

    # the compressed cases did send the wire format: about a quarter (int8) and a half (bf16)
    assert 3.9 * summary_bytes("diloco-int8") < summary_bytes("diloco")
    assert summary_bytes("overlap_local_sgd-bf16") == summary_bytes("overlap_local_sgd") // 2
    for name, _, _ in crash_cases:
        a, b, c, rows_at_crash = statuses[0][name]
        assert (a, b, c) == ("completed", "injected crash", "completed"), name
        assert rows_at_crash == 3  # epochs 1-3 logged; the checkpoint is of epoch 2
        full, cut = tmp_path / name / "full", tmp_path / name / "cut"
        assert rows(cut) == rows(full), name  # row 3 dropped at the resume, then logged again
        assert [r["epoch"] for r in rows(cut)] == [1, 2, 3, 4]


def _popen_run_py(*args: str):
    from tests.cli import popen_run_py

    return popen_run_py(*args)


@pytest.mark.e2e
def test_run_py_signalled_checkpoints_exits_3_and_the_rerun_resumes_exactly(tmp_path):
    import signal
    import time

    from tests.cli import run_dir_of
    from tests.cli import run_py_with_workers_here as run_py  # run.py here, workers real

    args = [
        "scale=smoke",
        "wandb.mode=disabled",
        "progress=false",
        "timing=virtual",
        "compute.step_time_s=0.01",
        "network=ethernet1g",
        "algorithm=cocod_sgd",
        "tau=2",
        "epochs=40",
    ]
    run_dir = run_dir_of(tmp_path / "cut", *args)
    proc = _popen_run_py(*args, f"out_root={tmp_path / 'cut'}")
    deadline = time.monotonic() + 120
    while (
        not (run_dir / "metrics.jsonl").exists() or not (run_dir / "metrics.jsonl").stat().st_size
    ):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    proc.send_signal(signal.SIGUSR1)  # to run.py only: it forwards the signal to its workers
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 3, out + err
    assert "Traceback" not in err and "terminate called" not in err
    assert "checkpoint saved: rerun to resume" in err
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["interrupted"]["signal"] == "SIGUSR1"
    meta = json.loads((run_dir / "checkpoint" / "latest.json").read_text())
    assert 0 < meta["step"] < 40 * STEPS_PER_EPOCH

    # a corrupt checkpoint: one line naming the file, exit 2, nothing overwritten
    victim = run_dir / "checkpoint" / meta["dir"] / "rank1.pt"
    intact = victim.read_bytes()
    victim.write_bytes(intact[: len(intact) // 2])
    bad = run_py(*args, f"out_root={tmp_path / 'cut'}")
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines() == [
        f"error: checkpoint file {victim} is corrupt (size or sha256 differs from "
        f"{run_dir / 'checkpoint' / 'latest.json'}); delete {run_dir / 'checkpoint'} to start over"
    ]
    victim.write_bytes(intact)

    resumed = run_py(*args, f"out_root={tmp_path / 'cut'}")
    assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-2000:]
    assert f"resume from step {meta['step']} (stop request)" in resumed.stdout
    # The algorithm's work was measured when the run started (compute.algo_time_s=measured)
    # and the resumed run kept that value: an uninterrupted run pinning it is the same run.
    algo_time = json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[0])
    algo_time = algo_time["compute/algo_time_s"]
    pinned = [*args, f"compute.algo_time_s={algo_time!r}"]
    full = run_py(*pinned, f"out_root={tmp_path / 'full'}")
    assert full.returncode == 0
    full_dir = run_dir_of(tmp_path / "full", *pinned)
    assert rows(run_dir) == rows(full_dir)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "completed" and "interrupted" not in summary
    assert [r["from_step"] for r in summary["resumed"]] == [meta["step"]]
    assert not (run_dir / "checkpoint").exists()
