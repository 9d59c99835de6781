"""A preset's grid names its points by the columns analysis/runs/load.py gives the runs: a config
key named like a metric (`lr`, the base LR; the metrics' `lr` is the current one) is `config.lr`,
and the points are composed with the sweep's own overrides (`cluster=sim` sets the clock). Before,
table1's extra grid `{algorithm: overlap_local_sgd, tau: 1, lr: 0.15}` left every one of its 60
points "without a result" although all 60 runs had completed."""

from analysis.runs.grid import PointConfigs, compose_preset, expand_sweeps, grid_column
from experiments.config.tuned import load_tuned


def test_a_config_key_named_like_a_metric_is_its_config_column():
    assert grid_column("lr") == "config.lr"
    assert grid_column("+lr") == "config.lr"
    assert grid_column("tau") == "tau"
    assert grid_column("algorithm") == "algorithm.name"
    assert grid_column("algorithm.outer_lr") == "algorithm.outer_lr"


def test_table1_points_carry_the_base_lr_and_the_sweeps_clock():
    preset = compose_preset("table1", "cpu", overrides=["cluster=sim"])
    points = expand_sweeps(preset.sweeps)
    assert len(points) == 60
    paper_point = [p for p in points if p.get("config.lr") == 0.15]
    assert len(paper_point) == 3 and all(p["tau"] == 1 for p in paper_point)
    configs = PointConfigs("table1", "cpu", overrides=["cluster=sim"])
    cfg = configs(points[0])
    # the base LR chosen for the point's algorithm at table1's own setting
    # (conf/tuned/cpu/table1.yaml), named as the runs' frame names it
    tuned = load_tuned("cpu", "table1")["lr"][points[0]["algorithm.name"]]["chosen"]
    assert cfg["config.lr"] == tuned and "lr" not in cfg
    assert cfg["timing"] == "virtual"  # cluster=sim's clock, as the sweep ran the points
    assert PointConfigs("table1", "cpu")(points[0])["timing"] == "real"
