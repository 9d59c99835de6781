"""Tuning at a preset's own setting (issue 35 item 5): `make tune PRESET=<name> SCALE=<scale>`
(analysis/tuning/tune_preset.py) and the preset's tuning file read before the scale's
(experiments/config/tuned.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

import experiments.config.tuned as tuned
from analysis.runs.grid import compose_preset
from analysis.tuning import tune_preset
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
    # the controls sweep tau over 1, 4, 32 and say nothing about which to tune at
    with pytest.raises(UserError, match=r"preset controls sweeps tau: .*report\.tune_at: \{tau: "):
        tune_preset.plan("controls", "fmnist")


def test_every_cpu_preset_can_be_tuned_at_its_own_setting():
    # a method's own knob swept by an extra grid (fig4's PowerSGD ranks) is tuned at its default
    algorithms, tune_at = tune_preset.plan("fig4", "cpu")
    assert algorithms == ["local_sgd", "powersgd", "overlap_local_sgd", "sync_sgd"]
    assert tune_at == {}
    for table in ("table1", "table2"):
        assert tune_preset.plan(table, "cpu")[1] == {"tau": 2}
    assert tune_preset.plan("low_comm", "cpu")[1] == {"network": "ideal"}


def test_tuning_starts_from_the_presets_own_lr_grid_else_the_default_one():
    # experiment=tune sweeps six LRs; table1's extra grid's paper LR (0.15 at tau 1) is no grid
    assert tune_preset.start_grid("tune", "cpu") == (0.00625, 0.0125, 0.025, 0.05, 0.1, 0.2)
    assert tune_preset.start_grid("table1", "cpu") == tune_preset.GRID


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


def test_the_scales_tuning_writes_the_scales_file_from_runs_named_tune(tmp_path):
    runs = tmp_path / "tune" / "tune" / "runs"
    for lr, accs in {0.05: (0.70, 0.72), 0.1: (0.80, 0.81), 0.2: (0.75, 0.74)}.items():
        for seed, final in zip((100, 101), accs, strict=True):
            config = fx.make_config(
                "osp", 4, seed, experiment="tune", lr=lr, dataset__validation_fraction=0.15
            )
            fx.write_run(runs / f"osp-{lr}-{seed}", config, final)
    out = tmp_path / "smoke.yaml"
    argv = ["tune", "--scale", "smoke", "--out-root", str(tmp_path), "--out", str(out), "--no-run"]
    assert tune_preset.main(argv) == 0
    document = yaml.safe_load(out.read_text())
    assert document["lr"]["osp"]["chosen"] == 0.1
    assert "preset" not in document["setting"] and document["setting"]["seeds"] == [100, 101]
    command = tune_preset.sweep_command("tune", "cpu", "sim", Path("/o"), ["osp"], (0.1,), {})
    assert "experiment_name=tune" in command


@pytest.mark.parametrize(
    "args, driver",
    [
        # without a preset: the scale's tuning at the demo's setting, on the tuning seeds
        (["SCALE=cpu"], "-m analysis.tuning.tune_preset tune --scale cpu --cluster sim"),
        (
            ["PRESET=losp", "SCALE=fmnist"],
            "-m analysis.tuning.tune_preset losp --scale fmnist --cluster sim",
        ),
    ],
)
def test_make_tune_runs_the_preset_driver(args, driver):
    import subprocess

    dry = subprocess.run(
        ["make", "-n", "tune", *args],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[3],
        check=True,
    ).stdout
    assert driver in dry
    assert "experiments.sweep tune" not in dry
    assert str(compose_preset("tune", "cpu").params["seed"]) == "100,101"  # never 0-9


def test_the_committed_preset_tuning_files_are_interior_on_disjoint_seeds_and_read():
    from tests.compose import composed

    repo = Path(__file__).resolve().parents[3]
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
