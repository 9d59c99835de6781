"""Tuning at a preset's own setting (issue 35 item 5): `make tune PRESET=<name> SCALE=<scale>`
(analysis/tune_preset.py) and the preset's tuning file read before the scale's
(experiments/config/tuned.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

import experiments.config.tuned as tuned
from analysis import tune_preset
from analysis.grid import compose_preset
from experiments.errors import UserError
from tests.fixtures import make_fixtures as fx


def _root(algorithm: str, experiment: str | None = "losp"):
    return OmegaConf.create(
        {
            "scale": {"name": "fmnist"},
            "algorithm": {"name": algorithm},
            "experiment_name": experiment,
        }
    )


def test_a_presets_own_tuning_file_wins_then_the_scales_then_the_default(tmp_path, monkeypatch):
    monkeypatch.setattr(tuned, "TUNED_DIR", tmp_path)
    assert tuned.tuned_lr(0.1, _root_=_root("osp")) == 0.1  # no file at all
    (tmp_path / "fmnist.yaml").write_text(
        yaml.safe_dump({"lr": {"osp": {"chosen": 0.05}, "losp": {"chosen": 0.05}}})
    )
    assert tuned.tuned_lr(0.1, _root_=_root("osp")) == 0.05  # the scale's
    (tmp_path / "fmnist").mkdir()
    (tmp_path / "fmnist" / "losp.yaml").write_text(yaml.safe_dump({"lr": {"osp": {"chosen": 0.2}}}))
    assert tuned.tuned_lr(0.1, _root_=_root("osp")) == 0.2  # the preset's own
    assert tuned.tuned_lr(0.1, _root_=_root("losp")) == 0.05  # not in it: the scale's
    assert tuned.tuned_lr(0.1, _root_=_root("osp", "controls")) == 0.05  # another preset
    assert tuned.tuned_lr(0.1, _root_=_root("osp", None)) == 0.05  # no preset
    assert tuned.tuned_lr(0.1, _root_=_root("sync_sgd")) == 0.1  # in neither
    assert tuned.tuned_file("fmnist", "losp") == tmp_path / "fmnist" / "losp.yaml"
    assert tuned.tuned_file("fmnist", "controls") == tmp_path / "fmnist.yaml"


def test_the_plan_tunes_every_algorithm_of_the_preset_at_its_tune_at():
    algorithms, tune_at = tune_preset.plan("losp", "fmnist")
    assert algorithms == ["local_sgd", "osp", "losp", "sync_sgd"]  # the extra grid's sync too
    assert tune_at == {"tau": 2}
    algorithms, tune_at = tune_preset.plan("pseudo_sync", "fmnist")
    assert algorithms == ["sync_sgd", "pseudo_sync"] and tune_at == {"workers": 4}


def test_a_preset_with_a_swept_key_left_open_is_refused_naming_it():
    # table1 sweeps tau over 1, 2, 4, 8 and says nothing about which to tune at
    with pytest.raises(UserError, match=r"preset table1 sweeps tau: .*report\.tune_at: \{tau: "):
        tune_preset.plan("table1", "cpu")


def test_the_tune_sweep_runs_the_presets_setting_on_disjoint_seeds_and_a_validation_split():
    command = tune_preset.sweep_command(
        "losp", "fmnist", "sim", Path("/o"), ["osp", "losp"], (0.05, 0.1), {"tau": 2}
    )
    args = dict(a.split("=", 1) for a in command[3:])
    assert args["experiment"] == "losp" and args["scale"] == "fmnist"
    assert args["hydra.sweeper.grids"] == "[]"  # the algorithms are listed instead
    assert args["algorithm"] == "osp,losp" and args["lr"] == "0.05,0.1" and args["tau"] == "2"
    assert float(args["dataset.validation_fraction"]) > 0
    assert args["experiment_name"] == "tune_losp"
    tuning = {int(s) for s in args["seed"].split(",")}
    for preset in ("losp", "pseudo_sync", "controls"):
        evaluation = compose_preset(preset, "fmnist").params["seed"]
        assert not tuning & {int(s) for s in str(evaluation).split(",")}, preset


def test_a_choice_at_the_grid_edge_asks_for_the_next_point_beyond_it():
    def entry(chosen, points, edge):
        return {"chosen": chosen, "edge": edge, "points": {p: {} for p in points}}

    document = {
        "lr": {
            "a": entry(0.05, (0.05, 0.1, 0.2), True),
            "b": entry(0.2, (0.05, 0.1, 0.2), True),
            "c": entry(0.1, (0.05, 0.1, 0.2), False),
        }
    }
    assert tune_preset.extension(document) == {"a": 0.025, "b": 0.4}


def test_the_choice_is_written_to_the_presets_file_with_its_setting(tmp_path, capsys):
    runs = tmp_path / "tune" / "losp" / "runs"
    finals = {0.05: (0.70, 0.72), 0.1: (0.80, 0.81), 0.2: (0.75, 0.74)}
    for lr, accs in finals.items():
        for seed, final in zip((100, 101), accs, strict=True):
            config = fx.make_config(
                "osp",
                2,
                seed,
                experiment="tune_losp",
                lr=lr,
                dataset__validation_fraction=0.15,
                compute__slowdown="one_slow",
            )
            fx.write_run(runs / f"osp-{lr}-{seed}", config, final)
    # a run of the preset itself (not a tune run) is not a grid point
    fx.write_run(runs / "eval", fx.make_config("osp", 2, 0, experiment="losp", lr=0.4), 0.99)
    out = tmp_path / "losp.yaml"
    argv = ["losp", "--scale", "smoke", "--out-root", str(tmp_path), "--out", str(out)]
    assert tune_preset.main([*argv, "--no-run"]) == 0
    document = yaml.safe_load(out.read_text())
    assert document["lr"]["osp"]["chosen"] == 0.1 and document["lr"]["osp"]["edge"] is False
    assert document["setting"]["preset"] == "losp"
    assert document["setting"]["tuned_at"] == {"tau": 2}
    assert document["setting"]["seeds"] == [100, 101]
    assert document["setting"]["compute.slowdown"] == "one_slow"
    assert "tuned at tau = 2" in document["not_tuned"]
    assert "osp                lr 0.1: validation acc 0.805" in capsys.readouterr().out


def test_make_tune_with_a_preset_runs_the_preset_driver():
    import subprocess

    dry = subprocess.run(
        ["make", "-n", "tune", "PRESET=losp", "SCALE=fmnist"],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[1],
        check=True,
    ).stdout
    assert "-m analysis.tune_preset losp --scale fmnist --cluster sim" in dry
    assert "experiments.sweep tune" not in dry


def test_the_committed_preset_tuning_files_are_interior_on_disjoint_seeds_and_read():
    from tests.compose import composed

    repo = Path(__file__).resolve().parents[1]
    files = sorted((repo / "conf" / "tuned").glob("*/*.yaml"))
    assert files, "no conf/tuned/<scale>/<preset>.yaml: make tune PRESET=... writes them"
    for path in files:
        scale, preset = path.parent.name, path.stem
        document = yaml.safe_load(path.read_text())
        setting = document["setting"]
        assert setting["preset"] == preset and setting["scale"] == scale, path
        assert not document["commit"].endswith("-dirty"), path
        assert not any(sha.endswith("-dirty") for sha in document["run_commits"]), path
        evaluation = str(compose_preset(preset, scale).params["seed"]).split(",")
        assert not set(setting["seeds"]) & {int(s) for s in evaluation}, path
        for algorithm, entry in document["lr"].items():
            tried = sorted(entry["points"])
            assert tried[0] < entry["chosen"] < tried[-1] and not entry["edge"], (path, algorithm)
            cfg = composed(f"experiment={preset}", f"scale={scale}", f"algorithm={algorithm}")
            assert cfg.lr == entry["chosen"], (path, algorithm)
