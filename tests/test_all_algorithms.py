"""What every algorithm of the registry owes the loop, checked on all of them at once:
consensus after finish() (algorithms.md section 11, identity 6), a
real 2-worker end-to-end run of each from the command line."""

from __future__ import annotations

import json

import pytest
import torch

import algorithms
from algorithms.comm import Comm
from experiments.training.models import TinyCNN
from tests.steps import flat_params, hook_steps, rank_batches

STEPS = 7  # not a multiple of tau: every algorithm ends mid-round
TAU = 3


def _run_every_algorithm(rank: int, world_size: int) -> dict:
    results = {}
    torch.manual_seed(0)
    initial = flat_params(TinyCNN(1, 4, width=4).double())
    for name, cls in algorithms.REGISTRY.items():
        torch.manual_seed(0)
        model = TinyCNN(in_channels=1, num_classes=4, width=4).double()
        cfg = algorithms.make_config(name, {})
        opt = cls.local_optimizer(
            cfg, model, lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-4
        )
        algo = cls(model, opt, Comm(), cfg, tau=TAU)
        hook_steps(algo, model, opt, rank_batches(rank, STEPS, seed_base=100))
        algo.finish()
        params = flat_params(model)
        moved = (params - initial).abs().max()
        eval_params = flat_params(algo.eval_model())
        results[name] = (params, eval_params, float(moved), algo.comm.ledger.collectives)
    return results


@pytest.mark.dist
def test_every_algorithm_ends_in_consensus():
    from tests.workers import run_workers

    per_rank = run_workers(_run_every_algorithm, 2)
    assert set(per_rank[0]) == set(algorithms.REGISTRY)
    for name in algorithms.REGISTRY:
        (p0, e0, moved, collectives), (p1, e1, _, _) = per_rank[0][name], per_rank[1][name]
        assert (p0 - p1).abs().max() < 1e-12, f"{name}: workers disagree after finish()"
        assert (e0 - e1).abs().max() < 1e-12, f"{name}: eval models disagree after finish()"
        assert moved > 1e-4, f"{name}: training did not move the parameters"
        assert collectives > 0, f"{name}: no communication at all"


def test_every_algorithm_has_a_config_file_and_a_docstring_with_deviations():
    from pathlib import Path

    conf = Path(__file__).resolve().parents[1] / "conf" / "algorithm"
    for name, cls in algorithms.REGISTRY.items():
        assert (conf / f"{name}.yaml").is_file(), name
        module = __import__(cls.__module__, fromlist=["__doc__"])
        assert module.__doc__ and "Deviations" in module.__doc__, name


@pytest.mark.e2e
def test_every_algorithm_runs_end_to_end_with_two_workers(tmp_path):
    from tests.cli import run_py

    names = ",".join(algorithms.REGISTRY)
    proc = run_py("-m", "dataset=synthetic", "scale=smoke", "wandb.mode=disabled", "tau=2",
                  f"algorithm={names}", f"out_root={tmp_path}", timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "terminate called" not in proc.stderr
    runs = sorted(p for p in (tmp_path / "runs").iterdir() if p.is_dir())
    assert len(runs) == len(algorithms.REGISTRY)
    for run_dir in runs:
        summary = json.loads((run_dir / "summary.json").read_text())
        rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
        assert summary["status"] == "completed", run_dir.name
        assert summary["comm/bytes"] > 0 and summary["world_size"] == 2
        assert rows[-1]["train/loss"] < rows[0]["train/loss"], run_dir.name
        assert summary["final/test_acc"] > 0.2, run_dir.name  # 10 classes: chance is 0.1
