"""Pairing by seed is sound: a seed gives every method the same partition, the same data order
and augmentation on each worker and the same initial model, so the claims' paired tests
(analysis/stats/) compare methods on the same luck. A different seed changes the order and
the model (the partition is `partition.seed`'s, as in the reference code)."""

from __future__ import annotations

import pytest
import torch
from omegaconf import OmegaConf

from experiments.config import schema
from experiments.data.datasets import load_dataset
from experiments.data.partition import make_partition
from experiments.worker import initial_model, worker_loader
from tests.compose import composed

METHODS = ("sync_sgd", "local_sgd", "osp", "eamsgd", "powersgd", "overlap_local_sgd")


def _config(algorithm: str, seed: int) -> dict:
    cfg = composed(
        f"algorithm={algorithm}",
        f"seed={seed}",
        "dataset=digits",
        "partition=noniid",
        "partition.dominant_fraction=0.35",
        "workers=4",
        "tau=2",
    )
    return OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)


def _what_a_seed_fixes(algorithm: str, seed: int) -> tuple[list, list, list, dict]:
    cfg = _config(algorithm, seed)
    job = schema.from_record(cfg)
    bundle = load_dataset(cfg["dataset"])
    shards = make_partition(cfg["partition"], bundle.train_labels, cfg["workers"])
    orders, first_batches = [], []
    for rank in range(cfg["workers"]):
        loader = worker_loader(job, bundle, shards, rank, True, torch.device("cpu"))
        orders.append(list(iter(loader.sampler)))
        first_batches.append(next(iter(loader))[0])
    model = initial_model(job, bundle).state_dict()
    return [s.tolist() for s in shards], orders, first_batches, model


def _same_model(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_a_seed_gives_every_method_the_same_data_and_initial_model() -> None:
    shards, orders, batches, model = _what_a_seed_fixes(METHODS[0], seed=3)
    for algorithm in METHODS[1:]:
        other = _what_a_seed_fixes(algorithm, seed=3)
        assert other[0] == shards, algorithm
        assert other[1] == orders, algorithm
        assert all(torch.equal(a, b) for a, b in zip(other[2], batches, strict=True)), algorithm
        assert _same_model(other[3], model), algorithm


@pytest.mark.parametrize("algorithm", ["local_sgd", "losp"])
def test_another_seed_changes_the_order_and_the_model_not_the_partition(algorithm) -> None:
    shards, orders, _, model = _what_a_seed_fixes(algorithm, seed=0)
    shards_1, orders_1, _, model_1 = _what_a_seed_fixes(algorithm, seed=1)
    assert shards_1 == shards  # partition.seed, whatever the run's seed
    assert all(a != b for a, b in zip(orders_1, orders, strict=True))
    assert not _same_model(model_1, model)
