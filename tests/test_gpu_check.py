"""`make gpu-check` (benchmarks/gpu_check.py, issue 15 item 5): its CPU branch, which CI runs,
and the plan of what it exercises on a GPU."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.cli import module_here

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU branch needs a machine without GPU")
def test_without_a_gpu_it_says_so_in_one_line_and_writes_nothing(tmp_path):
    out = tmp_path / "GPU-CHECK.md"
    proc = module_here("benchmarks.gpu_check", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "GPU check not run: no CUDA device on this machine (torch.cuda.is_available() is False)"
    ]
    assert not out.exists()


def test_the_make_target_runs_the_script():
    makefile = (REPO / "Makefile").read_text()
    assert "gpu-check:" in makefile
    recipe = makefile.split("gpu-check:", 1)[1].split("\n\n", 1)[0]
    assert "-m benchmarks.gpu_check" in recipe


def test_it_covers_every_cuda_path_a_one_gpu_machine_reaches():
    """The checks of the issue: placement, the ledger on events, the measured-step clock,
    every algorithm (processes sharing the GPU and in-process workers), dtypes and the
    benchmarks' CUDA path; every registry algorithm is in the all-algorithms run."""
    import inspect

    from benchmarks import gpu_check

    names = [name for name, _ in gpu_check.CHECKS]
    assert names == [
        "placement",
        "ledger on CUDA events",
        "clocks on the GPU",
        "every algorithm",
        "dtypes",
        "benchmarks --device cuda --smoke",
    ]
    source = inspect.getsource(gpu_check.check_algorithms)
    assert "algorithms.REGISTRY" in source and "cluster=sim" in source
    assert "cluster.workers_per_gpu=2" in source
    assert "--device" in inspect.getsource(gpu_check.check_bench)


def test_the_report_lists_every_check_with_its_status():
    from benchmarks.gpu_check import Check, report

    checks = [
        Check("placement", "ok", 1.2, ["1 worker, auto: nccl on cuda:0"]),
        Check("every algorithm", "FAILED", 3.0, [], "Traceback ...\nAssertionError: boom"),
        Check("dtypes", "skipped (budget)"),
    ]
    text = report(checks, {"gpu": "1 x H200"}, 12.0)
    assert "| placement | ok | 1 | 1 worker, auto: nccl on cuda:0 |" in text
    assert "| every algorithm | FAILED | 3 | AssertionError: boom |" in text
    assert "| dtypes | skipped (budget) | 0 |  |" in text
    assert "## every algorithm: failed" in text


def test_a_failed_part_keeps_the_parts_that_passed(monkeypatch):
    """The first GPU check (an H100, 2026-12-06) lost the 2-process part's line when the
    in-process part failed: each part now says whether it passed, and the check fails."""
    import algorithms
    from benchmarks import gpu_check
    from benchmarks import harness as h

    class Run:
        def __init__(self, name):
            self.config = {"algorithm": {"name": name}}

    def suite(overrides, **_):
        if "cluster=sim" in overrides:
            raise RuntimeError("run.py -m ...\nexit 1:\nerror: algorithm=powersgd: worker 2 failed")
        return [Run(name) for name in algorithms.REGISTRY]

    monkeypatch.setattr(h, "suite", suite)
    with pytest.raises(gpu_check.Partly) as e:
        gpu_check.check_algorithms(gpu_check.Budget(60))
    first, second = e.value.measured
    assert first.startswith("2 processes, gloo on CUDA tensors: all ")
    assert second.startswith("4 in-process workers (cluster=sim) on the GPU: FAILED: error: ")
    assert "powersgd" in second
