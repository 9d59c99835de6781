"""What a process reads twice it parses once: the preset compositions (analysis/runs/grid.py
`_compose`) and the runs' configs (analysis/runs/load.py `read_config`). A cached answer is the
same answer: an edited conf/ or config.yaml is read afresh, and a caller that changes what it was
given changes nothing another caller gets."""

import os
import shutil
from pathlib import Path

import pytest

from analysis.runs import grid, load
from analysis.runs.grid import CONF_DIR, compose_preset
from experiments.errors import UserError


@pytest.fixture
def conf(tmp_path: Path) -> Path:
    copy = tmp_path / "conf"
    shutil.copytree(CONF_DIR, copy)
    return copy


def test_a_composition_is_made_once_and_each_caller_gets_its_own_copy(conf: Path, monkeypatch):
    import hydra  # _compose imports Hydra's compose where it uses it: counted here

    calls = []
    original = hydra.compose

    def counting(*args, **kwargs):
        calls.append(kwargs.get("overrides"))
        return original(*args, **kwargs)

    monkeypatch.setattr(hydra, "compose", counting)
    first = grid._compose(conf, ["experiment=table1", "scale=cpu"], with_hydra=False)
    first.tau = 999
    again = grid._compose(conf, ["experiment=table1", "scale=cpu"], with_hydra=False)
    assert len(calls) == 1 and again.tau != 999
    grid._compose(conf, ["experiment=table1", "scale=fmnist"], with_hydra=False)
    assert len(calls) == 2  # another command line composes


def test_an_edited_conf_is_composed_afresh_even_at_the_same_size_and_time(conf: Path):
    preset = conf / "experiment" / "table1.yaml"
    text = preset.read_text()
    stat = preset.stat()
    title = compose_preset("table1", "cpu", conf_dir=conf).report["title"]
    edited = text.replace(title, "X" + title[1:], 1)  # the same size as before
    assert len(edited) == len(text) and edited != text
    preset.write_text(edited)
    os.utime(preset, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # and the same time
    assert compose_preset("table1", "cpu", conf_dir=conf).report["title"].startswith("X")


def test_a_command_line_that_does_not_compose_raises_every_time(conf: Path):
    for _ in range(2):
        with pytest.raises(UserError, match="cannot compose"):
            grid._compose(conf, ["experiment=table1", "algorithm=nonesuch"], with_hydra=False)


def test_a_run_config_is_parsed_once_per_text_and_read_afresh_when_rewritten(tmp_path: Path):
    load._parsed_yaml.cache_clear()
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("lr: 0.1\nalgorithm:\n  name: local_sgd\n")
    first = load.read_config(run)
    first["algorithm"]["name"] = "changed by a caller"
    assert load.read_config(run)["algorithm"]["name"] == "local_sgd"
    assert load._parsed_yaml.cache_info().hits == 1
    (run / "config.yaml").write_text("lr: 0.2\nalgorithm:\n  name: local_sgd\n")  # same size
    assert load.read_config(run)["lr"] == 0.2
    (run / "config.yaml").write_text("- a list\n")
    with pytest.raises(load.DamagedRecord, match="not a mapping but a list"):
        load.read_config(run)
