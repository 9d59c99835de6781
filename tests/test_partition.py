"""Partitions as invariants: equal sizes, disjoint, covering, reproducible, skewed as specified."""

import json

import numpy as np
import pytest

from experiments.data.partition import data_card, dirichlet, iid, make_partition, noniid
from experiments.errors import UserError


def cifar10_like_labels(per_class: int = 5000, num_classes: int = 10, seed: int = 0) -> np.ndarray:
    """CIFAR-10's label counts in a scrambled order (the scheme must not depend on the order)."""
    labels = np.repeat(np.arange(num_classes), per_class)
    return np.random.default_rng(seed).permutation(labels)


def check_equal_disjoint(shards: list[np.ndarray], n: int, num_workers: int) -> None:
    q = n // num_workers
    assert len(shards) == num_workers
    assert all(s.dtype == np.int64 and len(s) == q for s in shards)
    joined = np.concatenate(shards)
    assert len(np.unique(joined)) == len(joined)
    assert joined.min() >= 0 and joined.max() < n


@pytest.mark.parametrize(
    "cfg",
    [{"name": "iid"}, {"name": "noniid", "dominant_fraction": 0.5}, {"name": "dirichlet"}],
    ids=lambda c: c["name"],
)
@pytest.mark.parametrize("n,num_workers", [(1000, 8), (1003, 8), (997, 7)])
def test_equal_sizes_and_disjoint(cfg, n, num_workers):
    labels = np.arange(n) % 10
    shards = make_partition(cfg, labels, num_workers, seed=3)
    check_equal_disjoint(shards, n, num_workers)
    if n % num_workers == 0:
        assert sorted(np.concatenate(shards).tolist()) == list(range(n))


@pytest.mark.parametrize("name", ["iid", "noniid", "dirichlet"])
def test_deterministic_from_seed(name):
    labels = cifar10_like_labels(per_class=200)
    a = make_partition({"name": name}, labels, 10, seed=1)
    b = make_partition({"name": name}, labels, 10, seed=1)
    c = make_partition({"name": name}, labels, 10, seed=2)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert not all(np.array_equal(x, y) for x, y in zip(a, c, strict=True))


def test_iid_matches_reference_random_shuffle():
    # The reference DataPartitioner: random.Random(seed).shuffle(range(N)), consecutive chunks.
    import random

    order = list(range(100))
    random.Random(1234).shuffle(order)
    shards = iid(np.zeros(100, dtype=int), 4, seed=1234)
    assert [s.tolist() for s in shards] == [order[i : i + 25] for i in range(0, 100, 25)]


def test_noniid_paper_scale():
    labels = cifar10_like_labels()
    shards = noniid(labels, 16, seed=1234)
    check_equal_disjoint(shards, 50_000, 16)
    assert len(np.unique(np.concatenate(shards))) == 50_000
    card = data_card(labels, shards, 10)
    assert [w["dominant_class"] for w in card["workers"]] == [*range(10), 1, 3, 5, 7, 9, 2]
    for w in card["workers"]:
        assert w["num_samples"] == 3125
        assert w["label_hist"][w["dominant_class"]] >= 2000
        assert all(h > 0 for h in w["label_hist"])  # the leftover deal spreads every class


def test_noniid_class_order_is_ascending_not_first_appearance():
    # Label 9 appears first; its worker must still be worker 9, not worker 0.
    labels = np.concatenate([np.full(100, 9), np.repeat(np.arange(9), 100)])
    card = data_card(labels, noniid(labels, 10, seed=0, dominant_fraction=0.8), 10)
    assert [w["dominant_class"] for w in card["workers"]] == list(range(10))


def test_noniid_takes_dominant_samples_in_dataset_order():
    labels = cifar10_like_labels(per_class=50)
    shards = noniid(labels, 10, seed=0, dominant_fraction=0.6)  # q = 50, d = 30
    first_of_class0 = np.flatnonzero(labels == 0)[:30]
    assert set(first_of_class0) <= set(shards[0].tolist())


def test_noniid_infeasible_names_the_numbers():
    labels = np.repeat(np.arange(10), [5000, 5000, 5000, 3100, 5000, 5000, 5000, 5000, 5000, 5000])
    with pytest.raises(UserError) as info:
        noniid(labels, 16, seed=0)  # q = 2881, d = 1844; class 3 dominant for 2 workers
    message = str(info.value)
    assert "class 3" in message and "2 workers" in message and "3100" in message
    assert "\n" not in message


@pytest.mark.parametrize("fraction", [0.0, -0.1, 1.5])
def test_noniid_rejects_bad_fraction(fraction):
    with pytest.raises(UserError, match="dominant_fraction"):
        noniid(np.arange(100) % 10, 4, seed=0, dominant_fraction=fraction)


def test_make_partition_rejects_bad_requests():
    labels = np.arange(10) % 2
    with pytest.raises(UserError, match="10 training samples over 11 workers"):
        make_partition({"name": "iid"}, labels, 11, seed=0)
    with pytest.raises(UserError, match="over 0 workers"):
        make_partition({"name": "iid"}, labels, 0, seed=0)
    with pytest.raises(UserError, match="shards"):
        make_partition({"name": "shards"}, labels, 2, seed=0)
    with pytest.raises(UserError, match="concentration"):
        make_partition({"name": "dirichlet", "concentration": 0}, labels, 2, seed=0)


def distance_from_uniform(shards: list[np.ndarray], labels: np.ndarray) -> np.ndarray:
    """Per worker: total-variation distance of its label histogram from the uniform one."""
    card = data_card(labels, shards, 10)
    hists = np.array([w["label_hist"] for w in card["workers"]]) / len(shards[0])
    return np.abs(hists - 0.1).sum(axis=1) / 2


def test_dirichlet_skew_follows_concentration():
    labels = cifar10_like_labels(per_class=2000)
    # iid shards of 2000 sit at ~0.025 from uniform (sampling noise). At concentration 1e4
    # Dirichlet is a little further, mostly on the last worker, which takes whatever is left.
    baseline = distance_from_uniform(iid(labels, 10, seed=0), labels)
    near_iid = distance_from_uniform(dirichlet(labels, 10, seed=0, concentration=1e4), labels)
    assert near_iid.max() < 0.1 and near_iid.mean() < 2 * baseline.mean()
    skewed = distance_from_uniform(dirichlet(labels, 10, seed=0, concentration=0.1), labels)
    assert skewed.mean() > 0.5


def test_dirichlet_equal_sizes_when_classes_run_out():
    # Very skewed draws exhaust classes early; later workers must still get exactly q.
    labels = np.repeat(np.arange(5), [400, 10, 10, 10, 70])
    shards = dirichlet(labels, 5, seed=7, concentration=0.01)
    check_equal_disjoint(shards, 500, 5)
    assert len(np.unique(np.concatenate(shards))) == 500


def test_data_card_contents():
    labels = np.array([0, 0, 1, 2, 2, 2, 1])
    shards = [np.array([0, 1, 2]), np.array([3, 4, 5])]
    card = data_card(labels, shards, num_classes=4)
    assert card == {
        "num_workers": 2,
        "samples_per_worker": 3,
        "unused_samples": 1,
        "workers": [
            {
                "rank": 0,
                "num_samples": 3,
                "label_hist": [2, 1, 0, 0],
                "dominant_class": 0,
                "dominant_share": 2 / 3,
            },
            {
                "rank": 1,
                "num_samples": 3,
                "label_hist": [0, 0, 3, 0],
                "dominant_class": 2,
                "dominant_share": 1.0,
            },
        ],
    }
    assert json.loads(json.dumps(card)) == card


def test_default_partition_seed_is_the_references_whatever_the_run_seed():
    """The docstring's claim: the default `partition.seed` (1234) on CIFAR-10's 50,000 samples
    with 16 workers gives the reference DataPartitioner's shards (Random(1234).shuffle, chunks
    of 3125), and the node's seed, not a run seed, decides them."""
    import random

    from experiments.data.partition import REFERENCE_SEED

    assert REFERENCE_SEED == 1234
    order = list(range(50_000))
    random.Random(1234).shuffle(order)
    reference = [order[k * 3125 : (k + 1) * 3125] for k in range(16)]
    labels = cifar10_like_labels()
    shards = make_partition({"name": "iid"}, labels, 16)
    assert [s.tolist() for s in shards] == reference
    pinned = make_partition({"name": "iid", "seed": 1234}, labels, 16)
    assert all(np.array_equal(a, b) for a, b in zip(shards, pinned, strict=True))
    with pytest.raises(UserError, match="partition.seed must be an integer >= 0"):
        make_partition({"name": "iid", "seed": -1}, labels, 16)


@pytest.mark.parametrize("partition", ["iid", "noniid", "dirichlet"])
def test_two_run_seeds_share_shards_two_partition_seeds_do_not(partition):
    """What the runner does with a composed config (experiments.checks.machine.check_data and its
    workers' `make_partition(cfg["partition"], labels, workers)`): the run's `seed` leaves the
    shards and the data card alone; `partition.seed` moves them."""
    from experiments.checks.machine import check_data
    from experiments.data.datasets import load_dataset
    from tests.compose import resolved

    def plain(*overrides: str) -> dict:
        return resolved(f"partition={partition}", *overrides)

    extra = ("partition.dominant_fraction=0.35",) if partition == "noniid" else ()
    configs = [plain(*extra), plain("seed=1", *extra), plain("partition.seed=7", *extra)]
    assert configs[0]["partition"]["seed"] == 1234
    labels = load_dataset(configs[0]["dataset"]).train_labels
    shards = [make_partition(c["partition"], labels, c["workers"]) for c in configs]
    same = [np.array_equal(a, b) for a, b in zip(shards[0], shards[1], strict=True)]
    other = [np.array_equal(a, b) for a, b in zip(shards[0], shards[2], strict=True)]
    assert all(same) and not any(other)
    cards = [check_data(c)[1] for c in configs]
    assert cards[0] == cards[1]
    assert cards[0]["partition"]["seed"] == 1234 and cards[2]["partition"]["seed"] == 7
