"""A run's identity (experiments/config/identity.py): the digest of what shapes the run, nothing
else."""

from __future__ import annotations

import math

from experiments.config.identity import digest, identity_config, is_identity_key

BASE = {
    "seed": 0,
    "lr": 0.1,
    "algorithm": {"name": "local_sgd", "momentum_at_sync": "keep"},
    "network": {"name": "ideal", "bandwidth_gbps": math.inf},
    "dataset": {"name": "cifar10", "root": "/data", "download": True},
    "out_root": "outputs",
    "wandb": {"mode": "offline"},
    "cluster": {"name": "local", "backend": "auto"},
    "checkpoint": {"poll_steps": 20},
    "scale": {"name": "cpu", "target_acc": 0.9},
}


def with_(**changes):
    cfg = {k: (dict(v) if isinstance(v, dict) else v) for k, v in BASE.items()}
    for dotted, value in changes.items():
        *parents, leaf = dotted.split("__")
        node = cfg
        for key in parents:
            node = node[key]
        node[leaf] = value
    return cfg


def test_keys_that_change_the_run_change_the_digest():
    base = digest(BASE)
    assert len(base) == 10
    for change in (
        {"seed": 1},
        {"lr": 0.2},
        {"algorithm__momentum_at_sync": "reset"},
        {"network__bandwidth_gbps": 1.0},
        {"dataset__name": "digits"},
        {"scale__name": "paper"},
    ):
        assert digest(with_(**change)) != base, change


def test_where_and_how_a_run_is_recorded_does_not():
    base = digest(BASE)
    for change in (
        {"out_root": "/elsewhere"},
        {"wandb__mode": "disabled"},
        {"cluster__name": "slurm"},
        {"checkpoint__poll_steps": 5},
        {"dataset__root": "/other"},
        {"scale__target_acc": 0.5},
    ):
        assert digest(with_(**change)) == base, change


def test_identity_config_leaves_the_input_alone_and_key_order_does_not_matter():
    cfg = with_()
    ident = identity_config(cfg)
    assert "out_root" not in ident and "root" not in ident["dataset"]
    assert cfg["dataset"]["root"] == "/data"
    reordered = dict(reversed(list(BASE.items())))
    assert digest(reordered) == digest(BASE)


def test_is_identity_key():
    assert is_identity_key("algorithm.rank") and is_identity_key("seed")
    assert not is_identity_key("wandb.mode") and not is_identity_key("cluster.nodes")
    assert not is_identity_key("out_root")


def test_tau_is_left_out_for_an_algorithm_that_does_not_read_it():
    sync = with_(algorithm={"name": "sync_sgd", "bucket_mb": 25.0})
    assert digest({**sync, "tau": 2}) == digest({**sync, "tau": 4})  # one run, one digest
    assert "tau" not in identity_config({**sync, "tau": 2})
    local = with_()
    assert digest({**local, "tau": 2}) != digest({**local, "tau": 4})
    # a name the registry does not know keeps tau: nothing of its runs is merged
    other = with_(algorithm={"name": "not_registered"})
    assert digest({**other, "tau": 2}) != digest({**other, "tau": 4})
