"""Issue 50 for tuning: the tuning file is written whole or not at all (class 4), and a tuning
whose points did not all finish writes nothing (class 2): analysis/tuning/tune.py,
tune_preset.py."""

from __future__ import annotations

import errno
import os

import pytest
import yaml

from analysis.tuning import tune, tune_preset
from experiments.errors import UserError


def test_a_failed_write_leaves_the_previous_tuning_file_and_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / "cpu.yaml"
    path.write_text("lr: {osp: {chosen: 0.1}}\nrule: x\n")

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "replace", full)
    monkeypatch.setattr(os, "rename", full)
    with pytest.raises(UserError, match=r"disk full writing .*cpu\.yaml|cpu\.yaml"):
        tune.write_tuned({"lr": {"osp": {"chosen": 0.2}}}, path)
    assert yaml.safe_load(path.read_text())["lr"]["osp"]["chosen"] == 0.1
    assert [p.name for p in tmp_path.iterdir()] == ["cpu.yaml"]


def test_every_asked_point_must_have_all_its_seeds():
    document = {
        "lr": {
            "osp": {"points": {0.1: {"n": 2}, 0.2: {"n": 1}}},
            "losp": {"points": {0.1: {"n": 2}, 0.2: {"n": 2}}},
        }
    }
    asked = {"osp": {0.1, 0.2}, "losp": {0.1, 0.2}, "sync_sgd": {0.1}}
    assert tune_preset.missing_runs(document, asked) == [
        "osp lr 0.2 (1 of 2 seeds)",
        "sync_sgd (no finished run)",
    ]
    assert tune_preset.missing_runs(document, {"losp": {0.1, 0.2}}) == []


def test_a_tuning_with_a_failed_point_writes_no_tuning_file(tmp_path, monkeypatch, capsys):
    # the sweep "ran" (exit 1: a point failed) and one algorithm has half its seeds
    document = {"lr": {"sync_sgd": {"chosen": 0.1, "edge": False, "points": {0.1: {"n": 1}}}}}
    monkeypatch.setattr(tune_preset, "plan", lambda preset, scale: (["sync_sgd"], {}))
    monkeypatch.setattr(tune_preset, "start_grid", lambda preset, scale: (0.1,))
    monkeypatch.setattr(tune_preset, "run_sweep", lambda cmd: 1)
    monkeypatch.setattr(tune_preset, "tune", lambda *a, **k: (tmp_path / "scratch", document))
    out = tmp_path / "t.yaml"
    argv = ["tune", "--scale", "smoke", "--out-root", str(tmp_path / "o"), "--out", str(out)]
    assert tune_preset.main(argv) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: 1 tuning point(s) did not finish: sync_sgd lr 0.1 (1 of 2")
    assert not out.exists()


def test_check_out_lets_a_retune_replace_a_tuning_file_and_refuses_another_file(tmp_path):
    retune = tmp_path / "old.yaml"
    retune.write_text("lr: {osp: {chosen: 0.1}}\nrule: r\n")
    assert tune.check_out(retune) == retune
    other = tmp_path / "other.yaml"
    other.write_text("lr: {osp: {chosen: 0.1}}\n")  # no rule: not a file tuning wrote
    with pytest.raises(UserError, match="is not a tuning file"):
        tune.check_out(other)
