"""CoCoD-SGD (algorithms/cocod_sgd.py): the fold on hand values, and on real gloo workers the rule
against a hand-rolled float64 reference, its invariants, consensus after finish(), the ledger and
the state_dict round trip."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from algorithms.cocod_sgd import CoCoDSGD, Config, add_progress_
from algorithms.comm import Comm
from experiments.training.models import TinyCNN
from tests import steps
from tests.steps import close, flat

STEPS, TAU, CHECKPOINT_AT = 10, 3, 4  # rounds end at t = 2, 5, 8; t = 9 is a partial round
D = torch.float64


# ---- pure function, hand values; config ------------------------------------------------------


def test_add_progress_is_average_plus_own_progress():
    x = [torch.tensor([5.0, 1.0], dtype=D)]
    add_progress_(x, [torch.tensor([2.0, 2.0], dtype=D)], [torch.tensor([4.0, -1.0], dtype=D)])
    assert torch.equal(x[0], torch.tensor([3.0, 4.0], dtype=D))  # z + (x - y) = 2 + 1, 2 + 2
    x0 = torch.tensor([0.1, -0.7], dtype=D)
    x, y = [x0.clone()], [torch.tensor([1 / 3, 1e5], dtype=D)]
    add_progress_(x, y, y)  # z = y (first round): bit-for-bit no-op
    assert torch.equal(x[0], x0)


def test_config_has_no_knobs():
    assert dataclasses.fields(Config) == ()
    with pytest.raises(TypeError):
        Config(alpha=0.5)


# ---- real workers ----------------------------------------------------------------------------


def _lr(t: int) -> float:
    return 0.05 if t < 5 else 0.02


def _build(seed: int = 0):
    torch.manual_seed(seed)
    model = TinyCNN(in_channels=1, num_classes=4, width=4).double()
    opt = CoCoDSGD.local_optimizer(
        Config(), model, lr=_lr(0), momentum=0.9, nesterov=True, weight_decay=1e-4
    )
    return model, opt, CoCoDSGD(model, opt, Comm(), Config(), tau=TAU)


def _train(rank: int, world_size: int) -> dict:
    model, opt, algo = _build()
    batches = steps.rank_batches(rank, STEPS)
    out = {"x0": flat(algo.params), "rounds": []}

    def after(t: int, before: torch.Tensor) -> None:
        if algo.round_ends(t):  # (x before the fold, x after, the average z used)
            out["rounds"].append((before, flat(algo.params), flat(algo.average)))
            assert torch.equal(flat(algo.snapshot), out["rounds"][-1][1])  # y_i <- x_i

    # at CHECKPOINT_AT an average is in flight: state_dict() must fold it in
    saved = steps.train_saving(algo, model, opt, batches, CHECKPOINT_AT, _lr, after)
    out.update(steps.finish_recorded(algo))
    out["eval_is_local"] = algo.eval_model() is model

    model2, opt2, algo2 = _build(seed=1)  # other weights: the load must matter
    out["final_resumed"] = steps.resume_and_finish(
        saved, model2, opt2, algo2, batches[CHECKPOINT_AT:], CHECKPOINT_AT, lr=_lr
    )
    return out


def _reference(x0: torch.Tensor, befores: list[list[torch.Tensor]], last: list[torch.Tensor]):
    """The rule written out for all workers at once: befores[r][i] is worker i's model at the end
    of round r before the fold. Returns the models after each fold, the averages used, and the
    model finish() must leave."""
    m = len(last)
    snapshot, average = [x0] * m, x0  # y_i = z = x_0
    afters, averages = [], []
    for before in befores:
        after = [b + (average - y) for b, y in zip(before, snapshot, strict=True)]  # (eq. 1)
        afters.append(after)
        averages.append(average)
        snapshot, average = after, sum(after) / m  # (eq. 2): arrives at the next round
    final = sum(x + (average - y) for x, y in zip(last, snapshot, strict=True)) / m
    return afters, averages, final


@pytest.fixture(scope="module")
def runs():
    from tests.workers import run_workers

    return run_workers(_train, 3)


@pytest.mark.dist
def test_rule_matches_the_reference_and_its_invariants(runs):
    m, rounds = len(runs), STEPS // TAU
    befores = [[w["rounds"][r][0] for w in runs] for r in range(rounds)]
    got_afters = [[w["rounds"][r][1] for w in runs] for r in range(rounds)]
    got_averages = [runs[0]["rounds"][r][2] for r in range(rounds)]
    afters, averages, final = _reference(runs[0]["x0"], befores, [w["last"] for w in runs])
    for r in range(rounds):
        for i, w in enumerate(runs):
            assert close(got_afters[r][i], afters[r][i]), f"round {r}, worker {i}"
            assert close(w["rounds"][r][2], averages[r])
        if r == 0:  # z = y = x_0: the first round leaves the models untouched, bit for bit
            assert all(torch.equal(w["rounds"][0][1], w["rounds"][0][0]) for w in runs)
            continue
        # the average moves by the mean progress of the previous round:
        # z_{r+1} = z_r + mean_j (x_j(before the fold) - y_j)
        snapshots = got_afters[r - 2] if r > 1 else [runs[0]["x0"]] * m
        progress = [b - y for b, y in zip(befores[r - 1], snapshots, strict=True)]
        assert close(got_averages[r], got_averages[r - 1] + sum(progress) / m)
        # right after the fold, workers differ only by their own progress since the last round
        own = [b - y for b, y in zip(befores[r], got_afters[r - 1], strict=True)]
        assert close(got_afters[r][1] - got_afters[r][0], own[1] - own[0])
    for w in runs:
        assert torch.equal(w["final"], runs[0]["final"])  # identity 6: consensus
        assert close(w["final"], final)
        assert w["eval_is_local"]


@pytest.mark.dist
def test_ledger_one_model_per_round(runs):
    for w in runs:
        # finish(): one exact blocking average after the last fold
        steps.assert_rounds_then_finish(w, STEPS // TAU)


@pytest.mark.dist
def test_state_dict_round_trip_resumes_identically(runs):
    for w in runs:
        assert torch.equal(w["final_resumed"], w["final"])
