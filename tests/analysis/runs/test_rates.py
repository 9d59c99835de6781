"""The line under a table saying at which base LR its rows ran (analysis/runs/rates.py, issue 35
item 5: no method runs at an LR other than its tuned one without the table saying so)."""

from __future__ import annotations

import pandas as pd
import yaml

import experiments.config.tuned as tuned
from analysis.runs.rates import rate_lines

ROWS = ["algorithm.name", "tau"]


def _runs(*rows: tuple[str, int, float], preset: str = "table1", scale: str = "cpu"):
    return pd.DataFrame(
        [
            {
                "algorithm.name": a,
                "tau": tau,
                "config.lr": lr,
                "experiment_name": preset,
                "scale.name": scale,
            }
            for a, tau, lr in rows
        ]
    )


def _write(path, lr: dict, setting: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    entries = {a: {"chosen": v} for a, v in lr.items()}
    path.write_text(yaml.safe_dump({"setting": setting, "lr": entries}))


def test_rows_at_their_tuned_rate_name_the_file_and_its_setting(tmp_path, monkeypatch):
    monkeypatch.setattr(tuned, "TUNED_DIR", tmp_path)
    setting = {"epochs": 5, "tau": 4, "seeds": [100, 101]}
    _write(tmp_path / "cpu.yaml", {"easgd": 0.025, "local_sgd": 0.05}, setting)
    runs = _runs(("easgd", 1, 0.025), ("easgd", 2, 0.025), ("local_sgd", 1, 0.05))
    (line,) = rate_lines(runs, ROWS)
    assert line.startswith("base LR: each method's tuned rate (easgd, local_sgd; ")
    assert "cpu.yaml: tuned at the demo's setting (5 epochs, tau 4, seeds 100, 101)" in line


def test_a_row_off_its_tuned_rate_is_said_with_both_rates(tmp_path, monkeypatch):
    monkeypatch.setattr(tuned, "TUNED_DIR", tmp_path)
    _write(tmp_path / "cpu.yaml", {"overlap_local_sgd": 0.0125}, {"epochs": 5, "tau": 4})
    runs = _runs(("overlap_local_sgd", 1, 0.15), ("overlap_local_sgd", 2, 0.0125))
    lines = rate_lines(runs, ROWS)
    assert len(lines) == 2
    assert lines[1].startswith("overlap_local_sgd tau=1: base LR 0.15, not its tuned 0.0125 (")


def test_methods_without_a_tuning_file_are_said_untuned(tmp_path, monkeypatch):
    monkeypatch.setattr(tuned, "TUNED_DIR", tmp_path)  # empty: no file at all
    runs = _runs(("osp", 1, 0.1), ("sync_sgd", 1, 0.1), scale="fmnist", preset="losp")
    assert rate_lines(runs, ROWS) == [
        "base LR 0.1: untuned at this scale (osp, sync_sgd: no tuning file lists them)."
    ]


def test_a_presets_own_file_is_named_with_its_tuning_seeds(tmp_path, monkeypatch):
    monkeypatch.setattr(tuned, "TUNED_DIR", tmp_path)
    _write(
        tmp_path / "fmnist" / "losp.yaml",
        {"osp": 0.2},
        {"preset": "losp", "tuned_at": {"tau": 2}, "seeds": [100, 101]},
    )
    runs = _runs(
        ("osp", 1, 0.2), ("osp", 4, 0.2), ("sync_sgd", 1, 0.1), scale="fmnist", preset="losp"
    )
    lines = rate_lines(runs, ROWS)
    assert lines[0].endswith("tuned at this preset's setting at tau 2, seeds 100, 101).")
    assert lines[0].startswith("base LR: each method's tuned rate (osp; ")
    assert lines[1].startswith("base LR 0.1: untuned at this scale (sync_sgd")
