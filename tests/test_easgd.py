"""EASGD / EAMSGD (algorithms/easgd.py): the centre algebra on hand values, and on real gloo
workers the rule, identity 3 (alpha = 0 = independent local training), consensus after finish(),
the ledger and the state_dict round trip."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from algorithms.comm import Comm
from algorithms.easgd import EAMSGD, EASGD, Config, centre_message, stability_error
from algorithms.mixing import pull_toward_
from experiments.training.models import TinyCNN
from tests import steps
from tests.steps import flat

STEPS, TAU, CHECKPOINT_AT = 10, 3, 4  # rounds end at t = 2, 5, 8; t = 9 is a partial round
VARIANTS = {"easgd": EASGD, "eamsgd": EAMSGD}
D = torch.float64


# ---- pure functions, hand values -------------------------------------------------------------


def test_pull_toward_moves_a_fraction_of_the_way():
    x = [torch.tensor([1.0, 5.0], dtype=D), torch.tensor([[2.0]], dtype=D)]
    pull_toward_(x, [torch.tensor([3.0, 1.0], dtype=D), torch.tensor([[-2.0]], dtype=D)], 0.25)
    assert torch.equal(x[0], torch.tensor([1.5, 4.0], dtype=D))  # 0.75*1 + 0.25*3, 0.75*5 + 0.25
    assert torch.equal(x[1], torch.tensor([[1.0]], dtype=D))
    before = torch.tensor([0.1, -7.3], dtype=D)
    y = [before.clone()]
    pull_toward_(y, [torch.tensor([1e3, 2.0], dtype=D)], 0.0)
    assert torch.equal(y[0], before)  # weight 0 is exactly a no-op (identity 3)


def test_centre_message_sums_to_the_synchronous_easgd_centre():
    # m = 2, alpha = 1/4: gamma = 1/3, c = 1/2 - 1/4 - (1/16)/(3/4) = 1/6
    m, alpha, z = 2, 0.25, torch.tensor([3.0], dtype=D)
    before = [torch.tensor([7.0], dtype=D), torch.tensor([-1.0], dtype=D)]
    pulled = [x.clone() for x in before]
    for x in pulled:
        pull_toward_([x], [z], alpha)
    assert [x.item() for x in pulled] == [6.0, 0.0]  # 0.75*7 + 0.75, 0.75*(-1) + 0.75
    messages = [centre_message([z], [x], alpha, m)[0] for x in pulled]
    # m * s_i = m c z + m gamma x_i = z/3 + 2 x_i/3 -> 5 and 1
    assert torch.allclose(messages[0], torch.tensor([5.0], dtype=D), atol=1e-15)
    assert torch.allclose(messages[1], torch.tensor([1.0], dtype=D), atol=1e-15)
    # the mean is z_{r+1} = (1 - m alpha) z + alpha sum_j x_j(before pull) = 1.5 + 1.5 = 3
    assert torch.allclose((messages[0] + messages[1]) / m, torch.tensor([3.0], dtype=D))


def test_centre_message_algebra_random_values():
    gen = torch.Generator().manual_seed(0)
    m, alpha = 5, 0.13
    z = torch.randn(7, generator=gen, dtype=D)
    before = [torch.randn(7, generator=gen, dtype=D) for _ in range(m)]
    pulled = [x.clone() for x in before]
    for x in pulled:
        pull_toward_([x], [z], alpha)
    mean = sum(centre_message([z], [x], alpha, m)[0] for x in pulled) / m
    expected = (1 - m * alpha) * z + alpha * sum(before)
    assert torch.allclose(mean, expected, atol=1e-13, rtol=0)


# ---- config, check, local optimizer ----------------------------------------------------------


@pytest.mark.parametrize("alpha", [-0.1, 1.5, "0.1", True])
def test_config_rejects_bad_alpha(alpha):
    with pytest.raises(ValueError, match="algorithm.alpha must be"):
        Config(alpha=alpha)


def test_centre_bn_config_and_fresh_statistics():
    with pytest.raises(ValueError, match="algorithm.centre_bn must be one of recompute, average"):
        Config(centre_bn="stale")
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    comm = SimpleNamespace(world_size=4)
    for cls in VARIANTS.values():
        assert cls(model, opt, comm, Config(), tau=2).eval_needs_fresh_bn()  # the default
        assert not cls(model, opt, comm, Config(centre_bn="average"), tau=2).eval_needs_fresh_bn()


def test_yaml_keys_equal_config_fields():
    import dataclasses
    from pathlib import Path

    import yaml

    conf = Path(__file__).resolve().parents[1] / "conf" / "algorithm"
    for name in VARIANTS:
        node = yaml.safe_load((conf / f"{name}.yaml").read_text())
        assert node.pop("name") == name
        # the schema that types the node (experiments/config/schema.py), then the file's own values
        assert node.pop("defaults") == [f"/schema/algorithm/{name}@_here_", "_self_"]
        assert node == dataclasses.asdict(Config())


def test_check_rejects_unstable_centre_update():
    with pytest.raises(ValueError) as e:
        EASGD.check(Config(alpha=0.1), {"workers": 16})
    assert str(e.value) == (
        "easgd needs workers * alpha < 1 (got 16 x 0.1 = 1.6): the centre update "
        "z <- (1 - m*alpha) z + ... is unstable"
    )
    with pytest.raises(ValueError, match="eamsgd needs workers \\* alpha < 1"):
        EAMSGD.check(Config(alpha=0.25), {"workers": 4})  # m * alpha = 1 exactly
    EASGD.check(Config(alpha=0.05), {"workers": 16})
    EASGD.check(Config(), {"workers": 16})
    assert stability_error("easgd", 0.0, 16) is None


def test_alpha_resolved_from_the_worker_count():
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    algo = EASGD(model, opt, SimpleNamespace(world_size=16), Config(), tau=2)
    assert algo.alpha == pytest.approx(0.9 / 16)
    with pytest.raises(ValueError, match="easgd needs workers"):
        EASGD(model, opt, SimpleNamespace(world_size=4), Config(alpha=0.3), tau=2)


def test_local_optimizers():
    model = torch.nn.Linear(2, 1)
    kw = {"lr": 0.1, "momentum": 0.9, "nesterov": True, "weight_decay": 1e-4}
    plain = EASGD.local_optimizer(Config(), model, **kw).param_groups[0]
    assert (plain["momentum"], plain["nesterov"], plain["weight_decay"]) == (0.0, False, 1e-4)
    nesterov = EAMSGD.local_optimizer(Config(), model, **kw).param_groups[0]
    assert (nesterov["momentum"], nesterov["nesterov"], nesterov["weight_decay"]) == (
        0.9,
        True,
        1e-4,
    )


# ---- real workers ----------------------------------------------------------------------------


def _lr(t: int) -> float:
    return 0.05 if t < 5 else 0.02  # a decay mid-run: alpha must not follow it


def _build(cls, cfg: Config, seed: int = 0):
    torch.manual_seed(seed)
    model = TinyCNN(in_channels=1, num_classes=4, width=4).double()
    opt = cls.local_optimizer(cfg, model, lr=_lr(0), momentum=0.9, nesterov=True, weight_decay=1e-4)
    return model, opt, cls(model, opt, Comm(), cfg, tau=TAU)


def _step(model, opt, algo, t: int, batch) -> torch.Tensor:
    """One step of the loop's hook sequence at _lr(t); returns the parameters before after_step."""
    return steps.hook_step(algo, model, opt, t, batch, lr=_lr)[1]


def _train(rank: int, world_size: int, label: str, alpha: float | None) -> dict:
    cls, cfg = VARIANTS[label], Config(alpha=alpha)
    model, opt, algo = _build(cls, cfg)
    batches = steps.rank_batches(rank, STEPS)
    out = {"x0": flat(algo.params), "alpha": algo.alpha, "rounds": []}

    def after(t: int, before: torch.Tensor) -> None:
        if algo.round_ends(t):  # (x before the pull, x after, the centre z_r used)
            out["rounds"].append((before, flat(algo.params), flat(algo.centre)))

    # at CHECKPOINT_AT a centre is in flight: state_dict() must fold it in
    saved = steps.train_saving(algo, model, opt, batches, CHECKPOINT_AT, _lr, after)
    # "last": a partial round was computed after the last sync
    out.update(steps.finish_recorded(algo))
    centre_model = algo.eval_model()
    out["eval_params"] = flat(centre_model.parameters())
    out["eval_buffers_are_own"] = all(
        torch.equal(a, b) for a, b in zip(centre_model.buffers(), model.buffers(), strict=True)
    )
    out["bn_mean"] = flat([model.features[1].running_mean])

    model2, opt2, algo2 = _build(cls, cfg, seed=1)  # other weights: the load must matter
    out["final_resumed"] = steps.resume_and_finish(
        saved, model2, opt2, algo2, batches[CHECKPOINT_AT:], CHECKPOINT_AT, lr=_lr
    )
    return out


def _train_both(rank: int, world_size: int) -> dict:
    return {
        "easgd": _train(rank, world_size, "easgd", 0.2),
        "eamsgd": _train(rank, world_size, "eamsgd", None),
        "identity": _independent(rank),
    }


def _independent(rank: int) -> dict:
    """alpha = 0 next to plain local training without any communication, same data."""
    out = {}
    for label, cls in VARIANTS.items():
        cfg = Config(alpha=0.0)
        model, opt, algo = _build(cls, cfg)
        ref = copy.deepcopy(model)
        ref_opt = None
        if cls.local_momentum:
            ref_opt = torch.optim.SGD(
                ref.parameters(), lr=_lr(0), momentum=0.9, nesterov=True, weight_decay=1e-4
            )
        gap = 0.0
        for t, (x, y) in enumerate(steps.rank_batches(rank, STEPS)):
            _step(model, opt, algo, t, (x, y))
            ref.zero_grad()
            F.cross_entropy(ref(x), y).backward()
            with torch.no_grad():
                if ref_opt is None:  # the original EASGD's local step: x -= eta (g + wd x)
                    for p in ref.parameters():
                        p.sub_(_lr(t) * (p.grad + 1e-4 * p))
                else:
                    for group in ref_opt.param_groups:
                        group["lr"] = _lr(t)
                    ref_opt.step()
            gap = max(gap, (flat(model.parameters()) - flat(ref.parameters())).abs().max().item())
        out[label] = gap
        algo.finish()
    return out


@pytest.fixture(scope="module")
def runs():
    from tests.workers import run_workers

    return run_workers(_train_both, 3)


@pytest.mark.dist
@pytest.mark.parametrize("label", list(VARIANTS))
def test_rule_is_synchronous_easgd_with_hidden_communication(runs, label):
    per_rank = [r[label] for r in runs]
    m, alpha = len(per_rank), per_rank[0]["alpha"]
    assert alpha == (0.2 if label == "easgd" else pytest.approx(0.9 / m))
    centre = per_rank[0]["x0"]  # z_0 = x_0
    for r in range(STEPS // TAU):
        befores = [w["rounds"][r][0] for w in per_rank]
        for w, before in zip(per_rank, befores, strict=True):
            _, after, used = w["rounds"][r]
            assert torch.allclose(used, centre, atol=1e-12, rtol=0), f"round {r}: stale centre"
            # (eq. 1) elastic pull toward the same z_r everywhere
            assert torch.allclose(after, (1 - alpha) * before + alpha * used, atol=1e-12, rtol=0)
        # (eq. 3): the centre the next round receives
        centre = (1 - m * alpha) * centre + alpha * sum(befores)
    # finish(): the partial last round is closed by one more elastic round, x_i <- z
    centre = (1 - m * alpha) * centre + alpha * sum(w["last"] for w in per_rank)
    for w in per_rank:
        assert torch.allclose(w["final"], centre, atol=1e-12, rtol=0)
        assert torch.equal(w["final"], per_rank[0]["final"])  # identity 6: consensus
        assert torch.equal(w["eval_params"], w["final"])  # eval_model() is the centre
        assert w["eval_buffers_are_own"]
    # BN running statistics are never averaged
    assert not torch.allclose(per_rank[0]["bn_mean"], per_rank[1]["bn_mean"])


@pytest.mark.dist
@pytest.mark.parametrize("label", list(VARIANTS))
def test_ledger_one_model_per_round(runs, label):
    for w in (r[label] for r in runs):
        # finish() closes the partial round: one more model-sized all-reduce
        steps.assert_rounds_then_finish(w, STEPS // TAU)


@pytest.mark.dist
@pytest.mark.parametrize("label", list(VARIANTS))
def test_state_dict_round_trip_resumes_identically(runs, label):
    for w in (r[label] for r in runs):
        assert torch.equal(w["final_resumed"], w["final"])


@pytest.mark.dist
def test_zero_alpha_is_independent_local_training(runs):
    for r in runs:
        assert r["identity"]["easgd"] < 1e-12
        assert r["identity"]["eamsgd"] < 1e-12
