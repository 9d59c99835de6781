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
