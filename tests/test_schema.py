"""The config's schema (experiments/config/schema.py): every option typed, the algorithms' schemas
from their Config dataclasses, keys Hydra lets through refused, and docs/config.md generated from
it."""

from __future__ import annotations

import dataclasses
import enum
import pickle
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pytest
from omegaconf import OmegaConf

import algorithms
from experiments.config import schema
from experiments.config.config_doc import document
from experiments.errors import UserError
from tests.compose import composed as compose_config

REPO = Path(__file__).resolve().parents[1]
CONF = REPO / "conf"
GROUPS = ("dataset", "model", "partition", "network", "cluster", "algorithm")


def composed(*overrides: str):
    return compose_config(*overrides)


def test_docs_config_md_is_generated_from_the_schema_and_up_to_date():
    committed = (REPO / "docs" / "config.md").read_text()
    assert committed == document(), (
        "docs/config.md is stale: python -m experiments.config.config_doc > docs/config.md"
    )
    # every key of the default config is documented, with a meaning
    for key in ("`tau`", "`compute.slowdown`", "`comm.compression`", "`wandb.group`", "`rerun`"):
        (line,) = [row for row in committed.splitlines() if row.startswith(f"| {key} ")]
        assert line.rstrip(" |").split("|")[-1].strip(), f"{key} has no meaning"
    assert "`algorithm.rank`" in committed and "r: rank of the approximation" in committed


@pytest.mark.parametrize(
    "group, option",
    [(g, p.stem) for g in GROUPS for p in sorted((CONF / g).glob("*.yaml"))],
)
def test_every_group_option_is_typed_by_its_schema(group, option):
    node = composed(f"{group}={option}")[group]
    kind = OmegaConf.get_type(node)
    assert dataclasses.is_dataclass(kind), f"conf/{group}/{option}.yaml has no schema"
    assert set(node.keys()) == {f.name for f in dataclasses.fields(kind)}


@pytest.mark.parametrize("name", sorted(algorithms.REGISTRY))
def test_an_algorithms_schema_is_its_config_dataclass(name):
    """Built from algorithms.REGISTRY: a new algorithm (or a new knob) needs no schema edit."""
    made = schema.algorithm_schema(name)
    config = algorithms.REGISTRY[name].Config
    assert [f.name for f in dataclasses.fields(made)] == [
        "name",
        *(f.name for f in dataclasses.fields(config)),
    ]
    for f in dataclasses.fields(config):
        (mine,) = [g for g in dataclasses.fields(made) if g.name == f.name]
        assert mine.default == f.default  # the Config's defaults are the schema's
    # SLURM jobs receive the ConfigStore pickled: the generated classes travel by reference
    assert pickle.loads(pickle.dumps(made)) is getattr(schema, made.__name__)


def test_field_types_omegaconf_cannot_hold_are_adapted():
    @dataclass
    class Config:
        momentum: Literal["none", "keep"] = "none"
        window: int | None = None
        ranks: tuple[int, ...] = (1, 2)
        anything: complex = 1j

    hints = typing.get_type_hints(Config)
    kind = schema._omegaconf_type(hints["momentum"], "algorithm_test", "momentum")
    assert issubclass(kind, enum.Enum) and [m.value for m in kind] == ["none", "keep"]
    assert kind("keep") == "keep"  # a str enum: compares equal to the plain string
    assert schema._omegaconf_type(hints["window"], "o", "w") == typing.Optional[int]  # noqa: UP045
    assert schema._omegaconf_type(hints["ranks"], "o", "r") == list[int]
    assert schema._omegaconf_type(hints["anything"], "o", "a") is typing.Any
    node = OmegaConf.structured(dataclasses.make_dataclass("T", [("m", kind, "none")]))
    with pytest.raises(Exception, match="expected one of"):
        node.m = "sometimes"


def test_keys_that_hydra_lets_through_are_found():
    cfg = composed("algorithm=local_sgd", "+foo=1", "+compute.bar=2", "+algorithm.alpha=0.5")
    assert sorted(schema.unknown_keys(cfg)) == ["algorithm.alpha", "compute.bar", "foo"]
    with pytest.raises(UserError, match="algorithm local_sgd has no option alpha"):
        schema.check_keys(composed("algorithm=local_sgd", "+algorithm.alpha=0.5"))
    with pytest.raises(UserError, match=r"^unknown key foo"):
        schema.check_keys(composed("+foo=1"))
    assert schema.unknown_keys(composed()) == []
    # free-form mappings take any key
    assert (
        schema.unknown_keys(composed("cluster=slurm", "+cluster.additional_parameters.x=1")) == []
    )


def test_meanings_come_from_the_field_comments():
    meanings = schema.field_comments(schema.Config)
    assert meanings["tau"] == "local updates per round, for every round-based algorithm"
    assert meanings["lr"].startswith("Base LR for a global batch of 128")
    assert "time/train_s" in meanings["timing"]
    powersgd = schema.field_comments(algorithms.REGISTRY["powersgd"].Config)
    assert powersgd["rank"].startswith("r: rank of the approximation")


def test_enum_values_are_plain_strings_in_the_resolved_config():
    plain = OmegaConf.to_container(composed("timing=virtual"), resolve=True)
    assert plain["timing"] == "virtual" and f"{plain['timing']}" == "virtual"
    assert OmegaConf.to_yaml(OmegaConf.create({"t": plain["timing"]})).strip() == "t: virtual"
