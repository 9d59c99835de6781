"""Overlap-Local-SGD (algorithms/overlap_local_sgd.py): the anchor momentum on hand values, and
on real gloo workers the closed form of the anchor, identity 3 (alpha = beta = 0 = independent
local training), consensus after finish(), the ledger and the state_dict round trip."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest
import torch

from algorithms.comm import Comm
from algorithms.overlap_local_sgd import Config, OverlapLocalSGD, anchor_message, anchor_momentum
from experiments.training.models import TinyCNN
from tests import steps
from tests.steps import close, flat

STEPS, TAU, CHECKPOINT_AT = 9, 2, 4  # rounds end at t = 1, 3, 5, 7; t = 8 is a partial round
CONFIGS = {"momentum": (0.6, 0.7), "plain": (0.5, 0.0), "zero": (0.0, 0.0)}  # (alpha, beta)
D = torch.float64


# ---- pure functions, hand values -------------------------------------------------------------


def test_anchor_momentum_is_stored_in_units_of_the_lr():
    z, x = [torch.tensor([1.0, 2.0], dtype=D)], [torch.tensor([0.5, 3.0], dtype=D)]
    v = anchor_momentum(None, z, x, beta=0.7, lr=0.5)  # first round: (z - x) / eta
    assert torch.equal(v[0], torch.tensor([1.0, -2.0], dtype=D))
    v = anchor_momentum(v, z, x, beta=0.7, lr=0.25)  # 0.7 v + (z - x) / 0.25
    assert torch.allclose(v[0], torch.tensor([0.7 + 2.0, -1.4 - 4.0], dtype=D), atol=1e-15)
    # m * s_i = z - eta v = [1 - 0.25 * 2.7, 2 + 0.25 * 5.4]
    msg = anchor_message(z, v, lr=0.25)
    assert torch.allclose(msg[0], torch.tensor([0.325, 3.35], dtype=D), atol=1e-15)


def test_beta_zero_message_is_the_pulled_model():
    z, x = [torch.tensor([4.0, -1.0], dtype=D)], [torch.tensor([2.0, 1.0], dtype=D)]
    v = anchor_momentum([torch.tensor([9.0, 9.0], dtype=D)], z, x, beta=0.0, lr=0.1)
    assert torch.allclose(anchor_message(z, v, lr=0.1)[0], x[0], atol=1e-14)


@pytest.mark.parametrize(
    "options, match",
    [
        ({"alpha": 1.2}, "alpha must be a number in \\[0, 1\\]"),
        ({"alpha": -0.1}, "alpha must be a number in \\[0, 1\\]"),
        ({"alpha": "0.5"}, "alpha must be a number"),
        ({"beta": 1.0}, "beta must be a number in \\[0, 1\\)"),
        ({"beta": -0.5}, "beta must be a number in \\[0, 1\\)"),
        ({"beta": None}, "beta must be a number"),
    ],
)
def test_config_rejects_bad_values(options, match):
    with pytest.raises(ValueError, match=match):
        Config(**options)


@pytest.mark.parametrize("tau, alpha", [(1, 0.5), (2, 0.6), (16, 0.6)])
def test_default_alpha_follows_tau(tau, alpha):
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    algo = OverlapLocalSGD(model, opt, SimpleNamespace(world_size=4), Config(), tau=tau)
    assert (algo.alpha, algo.beta) == (alpha, 0.7)
    assert OverlapLocalSGD(model, opt, None, Config(alpha=0.3), tau=tau).alpha == 0.3


# ---- real workers ----------------------------------------------------------------------------


def _lr(t: int) -> float:
    return 0.05 if t < 5 else 0.02  # decays between the rounds at t = 3 and t = 5


def _build(cfg: Config, seed: int = 0):
    torch.manual_seed(seed)
    model = TinyCNN(in_channels=1, num_classes=4, width=4).double()
    opt = OverlapLocalSGD.local_optimizer(
        cfg, model, lr=_lr(0), momentum=0.9, nesterov=True, weight_decay=1e-4
    )
    return model, opt, OverlapLocalSGD(model, opt, Comm(), cfg, tau=TAU)


def _step(model, opt, algo, t: int, batch) -> torch.Tensor:
    """One step of the loop's hook sequence at _lr(t); returns the parameters before after_step."""
    return steps.hook_step(algo, model, opt, t, batch, lr=_lr)[1]


def _train(rank: int, alpha: float, beta: float) -> dict:
    cfg = Config(alpha=alpha, beta=beta)
    model, opt, algo = _build(cfg)
    ref = copy.deepcopy(model)  # plain local training, no communication (identity 3)
    ref_opt = torch.optim.SGD(
        ref.parameters(), lr=_lr(0), momentum=0.9, nesterov=True, weight_decay=1e-4
    )
    no_comm = SimpleNamespace(
        params=list(ref.parameters()), before_step=lambda t: None, after_step=lambda t: None
    )
    batches = steps.rank_batches(rank, STEPS)
    out = {"x0": flat(algo.params), "rounds": [], "gap_to_local": 0.0}

    def after(t: int, before: torch.Tensor) -> None:
        _step(ref, ref_opt, no_comm, t, batches[t])
        gap = (flat(model.parameters()) - flat(ref.parameters())).abs().max().item()
        out["gap_to_local"] = max(out["gap_to_local"], gap)
        if algo.round_ends(t):  # (x before the pull, x after, the anchor z_r used, eta_r)
            out["rounds"].append((before, flat(algo.params), flat(algo.anchor), _lr(t)))

    # at CHECKPOINT_AT an anchor is in flight: state_dict() must fold it in
    saved = steps.train_saving(algo, model, opt, batches, CHECKPOINT_AT, _lr, after)
    out.update(steps.finish_recorded(algo))
    out["eval_is_local"] = algo.eval_model() is model

    model2, opt2, algo2 = _build(cfg, seed=1)  # other weights: the load must matter
    out["final_resumed"] = steps.resume_and_finish(
        saved, model2, opt2, algo2, batches[CHECKPOINT_AT:], CHECKPOINT_AT, lr=_lr
    )
    return out


def _train_all(rank: int, world_size: int) -> dict:
    return {name: _train(rank, *ab) for name, ab in CONFIGS.items()}


@pytest.fixture(scope="module")
def runs():
    from tests.workers import run_workers

    return run_workers(_train_all, 3)


@pytest.mark.dist
@pytest.mark.parametrize("name", ["momentum", "plain"])
def test_anchor_follows_the_closed_form(runs, name):
    per_rank = [r[name] for r in runs]
    alpha, beta = CONFIGS[name]
    anchor, u, prev_lr = per_rank[0]["x0"], None, None  # z_0 = x_0: the first pull is to x_0
    for r in range(STEPS // TAU):
        lr = per_rank[0]["rounds"][r][3]
        for w in per_rank:
            before, after, used, _ = w["rounds"][r]
            assert close(used, anchor), f"round {r}: anchor differs from the closed form"
            assert close(after, (1 - alpha) * before + alpha * anchor)  # (eq. 1)
        mean_pulled = sum(w["rounds"][r][1] for w in per_rank) / len(per_rank)
        if beta == 0:  # the anchor is the mean of the pulled models
            mean_before = sum(w["rounds"][r][0] for w in per_rank) / len(per_rank)
            assert close(mean_pulled, (1 - alpha) * mean_before + alpha * anchor)
        # (eq. 4): u_r = beta (eta_r / eta_{r-1}) u_{r-1} + (xbar'_r - z_r); z_{r+1} = z_r + u_r
        u = mean_pulled - anchor if u is None else beta * lr / prev_lr * u + mean_pulled - anchor
        anchor, prev_lr = anchor + u, lr
    assert prev_lr != per_rank[0]["rounds"][0][3]  # the LR did change between rounds


@pytest.mark.dist
@pytest.mark.parametrize("name", list(CONFIGS))
def test_finish_leaves_the_mean_model_on_every_worker(runs, name):
    per_rank = [r[name] for r in runs]
    mean_last = sum(w["last"] for w in per_rank) / len(per_rank)
    for w in per_rank:
        assert torch.equal(w["final"], per_rank[0]["final"])  # identity 6: consensus
        assert close(w["final"], mean_last)
        assert w["eval_is_local"]


@pytest.mark.dist
@pytest.mark.parametrize("name", list(CONFIGS))
def test_ledger_one_model_per_round(runs, name):
    for w in (r[name] for r in runs):
        # finish(): one exact blocking average
        steps.assert_rounds_then_finish(w, STEPS // TAU)


@pytest.mark.dist
@pytest.mark.parametrize("name", list(CONFIGS))
def test_state_dict_round_trip_resumes_identically(runs, name):
    for w in (r[name] for r in runs):
        assert torch.equal(w["final_resumed"], w["final"])


@pytest.mark.dist
def test_zero_pull_and_momentum_is_independent_local_training(runs):
    for r in runs:
        assert r["zero"]["gap_to_local"] < 1e-12
        assert r["momentum"]["gap_to_local"] > 1e-4  # the others do communicate
