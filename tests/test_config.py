"""Every option of every config group composes, validates and builds; the scales say what the
issue and the paper say; bad values are caught before any worker starts."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from omegaconf import OmegaConf

import algorithms
from experiments.errors import UserError
from experiments.preflight import validate
from experiments.training.models import build_model
from experiments.training.schedule import decay_epochs, peak_lr
from tests.compose import resolved

CONF = Path(__file__).resolve().parents[1] / "conf"
# conf/local: site defaults; conf/tuned: the tuned learning rates (experiments/config/tuned.py),
# read by a resolver: neither is a group of options.
GROUPS = sorted(p.name for p in CONF.iterdir() if p.is_dir() and p.name not in ("local", "tuned"))


def composed(*overrides: str) -> dict:
    return resolved(*overrides)


def all_options():
    for group in GROUPS:
        for option in sorted(p.stem for p in (CONF / group).glob("*.yaml")):
            yield f"{group}={option}"


@pytest.mark.parametrize("override", list(all_options()))
def test_every_group_option_composes_validates_and_builds(override):
    cfg = composed(override)
    group, option = override.split("=")
    name = cfg[group]["name"] if isinstance(cfg.get(group), dict) else None
    if group not in ("experiment", "scale"):
        assert name == option, f"{group}/{option}.yaml must set name: {option}"
    validate(cfg)
    algo = dict(cfg["algorithm"])
    algorithms.make_config(algo.pop("name"), algo)
    in_channels = 3 if cfg["dataset"]["name"] == "cifar10" else 1
    build_model({**cfg["model"], "width": 2}, in_channels, 10)


def test_groups_named_by_the_contract_exist():
    for group in ("dataset", "model", "partition", "algorithm", "network", "cluster"):
        assert group in GROUPS
    for group in ("experiment", "scale"):
        assert group in GROUPS
    assert {p.stem for p in (CONF / "scale").glob("*.yaml")} == {"smoke", "cpu", "fmnist", "paper"}


def test_default_is_the_cpu_scale_on_the_offline_digits():
    cfg = composed()
    assert cfg["scale"]["name"] == "cpu"
    assert cfg["dataset"]["name"] == "digits"
    assert cfg["algorithm"]["name"] == "sync_sgd"
    assert cfg["wandb"]["mode"] == "offline"


def test_paper_scale_is_the_overlap_local_sgd_setting():
    cfg = composed("scale=paper")
    assert cfg["dataset"]["name"] == "cifar10"
    assert cfg["model"] == {"name": "resnet18", "width": 64}
    assert (cfg["workers"], cfg["batch_size"], cfg["epochs"]) == (16, 128, 300)
    assert peak_lr(cfg["lr"], cfg["batch_size"], cfg["workers"]) == pytest.approx(1.6)
    assert cfg["warmup_epochs"] == 5
    assert decay_epochs(cfg["lr_decay_at"], cfg["epochs"]) == [150, 250]
    assert cfg["lr_decay"] == pytest.approx(0.1)
    assert cfg["nesterov"] is True and cfg["momentum"] == pytest.approx(0.9)
    assert cfg["weight_decay"] == pytest.approx(1e-4)


def test_command_line_beats_scale_and_scale_beats_defaults():
    cfg = composed("scale=paper", "dataset=synthetic", "workers=4")
    assert cfg["dataset"]["name"] == "synthetic" and cfg["workers"] == 4
    assert cfg["epochs"] == 300


@pytest.mark.parametrize(
    "override, message",
    [
        ("tau=0", "tau must be an integer >= 1"),
        ("workers=0", "workers must be an integer >= 1"),
        ("batch_size=0", "batch_size must be an integer >= 1"),
        ("epochs=0", "epochs must be an integer >= 1"),
        ("lr=0", "lr must be a number > 0"),
        ("lr=-0.1", "lr must be a number > 0"),
        ("momentum=1.5", "momentum must be in [0, 1)"),
        ("eval_every=0", "eval_every must be an integer >= 1"),
        ("+algorithm.alpha=0.5", "has no option alpha"),
    ],
)
def test_bad_values_are_user_errors(override, message):
    with pytest.raises(UserError, match=re.escape(message)):
        validate(composed(override))


@pytest.mark.parametrize(
    "override, message",
    [
        ("wandb.mode=sometimes", "wandb.mode must be one of disabled, offline, online"),
        ("dtype=float16", "dtype must be one of float32, float64, got 'float16'"),
        ("timing=sometimes", "timing must be one of real, virtual, got 'sometimes'"),
        ("network.topology=mesh", "network.topology must be one of allreduce, ps"),
        ("cluster.backend=mpi2", "cluster.backend must be one of auto, gloo, nccl"),
        ("comm.compression=fp8", "comm.compression must be one of none, fp16, bf16, int8"),
        ("tau=abc", "tau must be an integer, got 'abc'"),
        ("lr=fast", "lr must be a number, got 'fast'"),
        ("nesterov=maybe", "nesterov must be true or false, got 'maybe'"),
        ("algorithm=powersgd algorithm.rank=x", "algorithm.rank must be an integer, got 'x'"),
        ("foo=1", "unknown key foo"),
        ("algorithm=local_sgd algorithm.alpha=0.5", "algorithm local_sgd has no option alpha"),
    ],
)
def test_types_and_enums_are_checked_while_hydra_composes(override, message):
    """The schema (experiments/config/schema.py): Hydra refuses these while composing, before any
    run directory exists; experiments.preflight.describe makes each one line."""
    from experiments.preflight import describe

    with pytest.raises(Exception) as caught:
        composed(*override.split())
    assert describe(caught.value).startswith(message), describe(caught.value)
    assert "\n" not in describe(caught.value)


def test_no_root_value_is_one_that_every_scale_overrides():
    """issue 12 item 6: `epochs: 10` in conf/config.yaml was never the effective value (every
    scale sets epochs). A value in the root config must be the effective one somewhere."""
    root = OmegaConf.to_container(OmegaConf.load(CONF / "config.yaml"), resolve=False)
    root_keys = set(_flat(root)) - {"defaults"}
    scales = [OmegaConf.to_container(OmegaConf.load(p)) for p in (CONF / "scale").glob("*.yaml")]
    always = set.intersection(*(set(_flat(s)) for s in scales))
    assert not root_keys & always, sorted(root_keys & always)
    assert "epochs" in always and "epochs" not in root_keys  # set by the scale alone
    for scale, epochs in (("smoke", 2), ("cpu", 20), ("paper", 300)):
        assert composed(f"scale={scale}")["epochs"] == epochs


def _flat(d, prefix=""):
    if not isinstance(d, dict):
        return [prefix.rstrip(".")]
    return [k for key, v in d.items() for k in _flat(v, f"{prefix}{key}.")]
