"""An algorithm is added in one place (issue 38 item 2): a toy method registered in the
registry (algorithms.TABLE, here patched for this test only, no file of the suite changed) goes
through a sweep, the comparison table, the figures and W&B's grouping with nothing else told of
it: its config group is the Config's schema, its row and legend place the registry's order, its
colour the registry's, its tau handling its Config's `periodic`."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import matplotlib.colors as mcolors
import pytest
import torch
from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

import algorithms
from algorithms.base import Algorithm
from algorithms.base_config import Config as AlgorithmConfig
from analysis.reports.figures import curves_figure
from analysis.reports.tables import final_accuracy_table
from analysis.runs.load import ALGORITHMS, TAU_LESS, load_runs, load_summaries
from experiments.config import schema
from tests.cli import run_py_here
from tests.test_wandb import wandb_records

TOY, COLOUR = "toy", "#117733"  # Paul Tol's green: no method of the suite has it


@dataclasses.dataclass
class ToyConfig(AlgorithmConfig):
    periodic = True  # rounds of `tau` local steps: tau is part of its runs' identity and rows
    # Share of the round's average each worker takes (1 = Local SGD's plain average).
    pull: float = 0.5


class Toy(Algorithm):
    """Local SGD with a partial pull: every `tau` steps, x_i <- x_i + pull * (mean_j x_j - x_i)."""

    Config = ToyConfig

    def after_step(self, t: int) -> None:
        if self.round_ends(t):
            self.finish()

    @torch.no_grad()
    def finish(self) -> None:
        mean = [p.detach().clone() for p in self.params]
        self.comm.mean_(mean)
        for x, m in zip(self.params, mean, strict=True):
            x.add_(m - x, alpha=self.cfg.pull)


@pytest.fixture
def toy(monkeypatch: pytest.MonkeyPatch) -> None:
    """The toy in the registry and its config group in Hydra's ConfigStore, for this test only:
    what adding an entry to algorithms.TABLE and `conf/algorithm/toy.yaml` does for a real one."""
    registry = algorithms.REGISTRY  # built now (the rules imported), so the toy can join it
    monkeypatch.setitem(algorithms.TABLE, TOY, algorithms.Entry(ToyConfig, "toy.Toy", COLOUR))
    monkeypatch.setitem(algorithms.CONFIGS, TOY, ToyConfig)
    monkeypatch.setitem(registry, TOY, Toy)
    monkeypatch.setattr(schema, f"algorithm_{TOY}", None, raising=False)  # removed after
    node = OmegaConf.structured(schema.algorithm_schema(TOY))
    node.name = TOY
    store = ConfigStore.instance()
    store.store(group="schema/algorithm", name=TOY, node=schema.algorithm_schema(TOY))
    store.store(group="algorithm", name=TOY, node=node)
    yield
    del store.repo["schema"]["algorithm"][f"{TOY}.yaml"]
    del store.repo["algorithm"][f"{TOY}.yaml"]
    if not store.repo["algorithm"]:
        del store.repo["algorithm"]


def test_a_toy_algorithm_registered_in_one_place_flows_through_sweep_table_figures_and_wandb(
    toy: None, tmp_path: Path
) -> None:
    assert ALGORITHMS[-1] == TOY and TOY not in TAU_LESS  # read from the registry when used
    done = run_py_here(
        "-m", f"algorithm={TOY},sync_sgd", "tau=1,2", "scale=smoke",
        "dataset=synthetic", "dataset.num_train=256", "epochs=1", "cluster=sim",
        "wandb.mode=offline", "progress=false", f"out_root={tmp_path}",
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    # the sweep: the toy at both taus (it reads tau), sync SGD once (it does not)
    assert "sync_sgd ignores tau, the same run as" in done.stdout
    runs = [p.name.rsplit("-", 1)[0] for p in runs_dirs(tmp_path)]
    assert runs == ["sync_sgd-seed0", "toy-tau1-seed0", "toy-tau2-seed0"]

    # the table: a row per tau, after the baseline (the registry's order)
    summaries = load_summaries(tmp_path / "runs")
    table = final_accuracy_table(summaries).reset_index()
    assert [tuple(r) for r in table[["algorithm.name", "tau"]].itertuples(index=False)] == [
        ("sync_sgd", "-"),
        (TOY, 1),
        (TOY, 2),
    ]
    assert "| toy" in done.stdout  # the comparison the ad-hoc sweep ends with
    # the figures: its curves in its colour
    figure = curves_figure(load_runs(tmp_path / "runs"))
    colours = {
        line.get_gid().split(":", 1)[1]: mcolors.to_hex(line.get_color())
        for ax in figure.axes
        for line in ax.get_lines()
        if (line.get_gid() or "").startswith("mean:")
    }
    assert colours == {"sync_sgd": "#000000", TOY: COLOUR}
    # W&B: each toy run's job type is its name, in the sweep's group with the others
    records = {p.name.rsplit("-", 1)[0]: wandb_records(p)["run"][0] for p in runs_dirs(tmp_path)}
    assert {name: run.job_type for name, run in records.items()} == {
        "sync_sgd-seed0": "sync_sgd",
        "toy-tau1-seed0": TOY,
        "toy-tau2-seed0": TOY,
    }
    assert len({run.run_group for run in records.values()}) == 1
    assert f"algorithm={TOY}" in records["toy-tau2-seed0"].tags
    identity = json.loads((runs_dirs(tmp_path)[-1] / "identity.json").read_text())
    assert identity["algorithm"] == {"name": TOY, "pull": 0.5} and identity["tau"] == 2


def runs_dirs(out_root: Path) -> list[Path]:
    return sorted(p for p in (out_root / "runs").iterdir() if p.is_dir() and p.name[0] != ".")
