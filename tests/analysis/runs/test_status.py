"""`python -m analysis.runs.status`: the sweep's state from the run records, not from job states."""

from __future__ import annotations

import json
import time

from analysis.runs.status import main, run_status
from tests.cli import module_here


def make_run(root, name, summary=None, heartbeat_age=None, algorithm="sync_sgd"):
    run = root / name
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "config.yaml").write_text(f"algorithm:\n  name: {algorithm}\n")
    (run / "config.yaml").write_text(f"algorithm:\n  name: {algorithm}\ntau: 1\nseed: 0\n")
    if summary is not None:
        (run / "summary.json").write_text(json.dumps(summary))
    if heartbeat_age is not None:
        beat = {"step": 40, "total_steps": 100, "time": time.time() - heartbeat_age}
        (run / "heartbeat.json").write_text(json.dumps(beat))
    return run


def test_each_status_and_its_reason(tmp_path):
    done = make_run(tmp_path, "a", {"status": "completed", "final/test_acc": 0.91})
    div = make_run(tmp_path, "b", {"status": "diverged", "diverged_at_step": 12})
    live = make_run(tmp_path, "c", {"status": "running"}, heartbeat_age=5)
    dead = make_run(tmp_path, "d", {"status": "running"}, heartbeat_age=3600)
    cut = make_run(
        tmp_path,
        "e",
        {"status": "failed", "error": "interrupted by SIGUSR1 at step 30; checkpoint saved"},
    )
    never = make_run(tmp_path, "f")
    stale = 600
    assert run_status(done, stale) == {"status": "completed", "detail": "final/test_acc 0.9100"}
    assert run_status(div, stale)["detail"] == "diverged at step 12"
    s = run_status(live, stale)
    assert s["status"] == "running" and s["detail"].startswith("step 40/100")
    s = run_status(dead, stale)
    assert s["status"] == "failed" and "no heartbeat for 60 min" in s["detail"]
    assert run_status(cut, stale) == {
        "status": "failed",
        "detail": "interrupted by SIGUSR1 at step 30; checkpoint saved",
    }
    assert run_status(never, stale)["status"] == "failed"


def test_cli_lists_missing_points_of_a_preset_and_check_fails(tmp_path, capsys):
    make_run(tmp_path, "algorithm=sync_sgd", {"status": "completed", "final/test_acc": 0.9})
    make_run(tmp_path, "algorithm=osp", {"status": "failed", "error": "boom"}, algorithm="osp")
    code = main([str(tmp_path), "--experiment", "demo", "--scale", "smoke", "--check"])
    out = capsys.readouterr().out.splitlines()
    assert code == 1
    assert out[-1] == "1 completed, 1 failed, 28 missing"  # demo: 10 algorithms x 3 seeds
    assert "missing    algorithm=losp" in "\n".join(out)
    assert not any("algorithm=osp " in line and "missing" in line for line in out)
    assert main([str(tmp_path)]) == 0  # without --check: a report, not a verdict


def test_bad_root_is_one_line(tmp_path):
    proc = module_here("analysis.runs.status", str(tmp_path / "nope"))
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"error: runs root is not a directory: {tmp_path / 'nope'}"
