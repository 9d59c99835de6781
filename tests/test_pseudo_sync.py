"""Pseudo-synchronous SGD (algorithms/pseudo_sync.py): the smoothing math by hand, the local
optimizer of `momentum=none|keep`, and real gloo runs for the identity with one-step-delayed
synchronous SGD with the rule's start-up (algorithms.md section 11 #5: G_0 at step 0, nothing at
step 1, G_{t-1} from step 2), each G_t applied once, replicas, the confidence range, the ledger,
consensus and the state round trip."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from algorithms.comm import Comm
from algorithms.pseudo_sync import (
    Config,
    PseudoSync,
    adaptive_confidence,
    blend_local,
    cosine,
    smooth,
)
from experiments.training.models import TinyCNN
from tests.steps import assert_model_sized, flat, hook_steps, max_spread, rank_batches

STEPS = 10
C_MAX = 0.7
LR, MOMENTUM, WD = 0.05, 0.9, 1e-4


# --- pure functions -------------------------------------------------------------------------


def _t(*values) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64)


def test_cosine_and_confidence_by_hand():
    assert cosine(_t(1, 0), _t(1, 1)).item() == pytest.approx(2**-0.5, abs=1e-15)
    assert cosine(_t(0, 0), _t(1, 1)).item() == 0.0  # zero vector: no confidence
    assert adaptive_confidence(_t(3, 4), _t(3, 4), 0.9).item() == pytest.approx(0.9)
    assert adaptive_confidence(_t(1, 0), _t(-1, 0), 0.9).item() == 0.0  # clipped at 0
    # cos([1, 0], [3, 4]) = 0.6 < c_max
    assert adaptive_confidence(_t(1, 0), _t(3, 4), 0.9).item() == pytest.approx(0.6, abs=1e-15)


def test_smooth_and_blend_by_hand():
    assert torch.allclose(smooth(_t(1, 2), _t(3, -2), 0.25), _t(2.5, -1.0))
    assert torch.equal(smooth(_t(1, 2), _t(3, -2), 0.0), _t(3, -2))  # c = 0: the fresh average
    # S + (g - G) / m with m = 4
    assert torch.allclose(blend_local(_t(1, 1), _t(5, 0), _t(1, 4), 4), _t(2, 0))


@pytest.mark.parametrize(
    "options, match",
    [
        ({"confidence": "cosine"}, "confidence must be one of adaptive, fixed"),
        ({"c": 1.5}, r"c must be a number in \[0, 1\]"),
        ({"c": -0.1}, r"c must be a number in \[0, 1\]"),
        ({"c_max": 2}, r"c_max must be a number in \[0, 1\]"),
        ({"c_max": "0.9"}, r"c_max must be a number in \[0, 1\]"),
        ({"blend_local": "no"}, "blend_local must be true or false"),
        ({"momentum": "nesterov"}, "momentum must be one of none, keep"),
    ],
)
def test_config_rejects_bad_values(options, match):
    with pytest.raises(ValueError, match=match):
        Config(**options)


def test_local_optimizer_has_no_momentum_unless_kept():
    model = torch.nn.Linear(2, 1)
    kw = {"lr": 0.1, "momentum": 0.9, "nesterov": True, "weight_decay": 1e-4}
    plain = PseudoSync.local_optimizer(Config(), model, **kw).param_groups[0]
    assert (plain["momentum"], plain["nesterov"], plain["weight_decay"]) == (0.0, False, 1e-4)
    kept = PseudoSync.local_optimizer(Config(momentum="keep"), model, **kw).param_groups[0]
    assert (kept["momentum"], kept["nesterov"], kept["weight_decay"]) == (0.9, True, 1e-4)


# --- real gloo workers ----------------------------------------------------------------------


def _model_and_opt(cfg: Config | None = None):
    cfg = cfg if cfg is not None else Config()
    torch.manual_seed(0)
    model = TinyCNN(in_channels=1, num_classes=4, width=4).double()
    opt = PseudoSync.local_optimizer(
        cfg, model, lr=LR, momentum=MOMENTUM, nesterov=True, weight_decay=WD
    )
    return model, opt


def _build(cfg: Config):
    model, opt = _model_and_opt(cfg)
    comm = Comm()
    return model, opt, comm, PseudoSync(model, opt, comm, cfg, tau=1)


def _pseudo_sync_worker(rank: int, world_size: int):
    batches = rank_batches(rank, STEPS)
    out = {}

    # identity 5: fixed c = 0, without and with the run's momentum
    for momentum in ("none", "keep"):
        model, opt, comm, algo = _build(Config(confidence="fixed", c=0.0, momentum=momentum))
        _, out["delayed", momentum] = hook_steps(algo, model, opt, batches)
    out["delayed_ledger"] = comm.ledger

    # adaptive: record c_t and the applied direction
    model, opt, comm, algo = _build(Config(c_max=C_MAX))
    confidences, applied = [], []

    def record(t):
        confidences.append(None if algo.last_confidence is None else algo.last_confidence.item())
        applied.append(flat(p.grad for p in model.parameters()))

    _, out["adaptive"] = hook_steps(algo, model, opt, batches, on_before_step=record)
    out["confidences"], out["applied"] = confidences, applied
    out["metrics"] = algo.metrics()
    out["metrics_again"] = algo.metrics()
    algo.finish()
    out["adaptive_final"] = flat(model.parameters())
    out["adaptive_ledger"] = comm.ledger

    # blend_local: replicas drift, finish() restores consensus with one extra average
    model, opt, comm, algo = _build(Config(blend_local=True))
    _, out["blend"] = hook_steps(algo, model, opt, batches)
    algo.finish()
    out["blend_final"] = flat(model.parameters())
    out["blend_collectives"] = comm.ledger.collectives

    # state round trip: the checkpoint after 5 steps holds the drained in-flight gradient
    model, opt, _, algo = _build(Config(c_max=C_MAX))
    hook_steps(algo, model, opt, batches[:5])
    saved = copy.deepcopy((model.state_dict(), opt.state_dict(), algo.state_dict()))
    _, out["continued"] = hook_steps(algo, model, opt, batches[5:], first_t=5)
    model, opt, _, algo = _build(Config(c_max=C_MAX))
    model.load_state_dict(saved[0])
    opt.load_state_dict(saved[1])
    algo.load_state_dict(saved[2])
    _, out["restored"] = hook_steps(algo, model, opt, batches[5:], first_t=5)
    return out


def _delayed_sgd_reference(
    world_size: int, delayed: bool = True, momentum: str = "none"
) -> list[torch.Tensor]:
    """Synchronous SGD with a one-step-delayed averaged gradient, in one process: every worker
    computes its gradient on the common model and the average G_t is formed at once. Step 0
    applies G_0, step 1 applies nothing (a zero gradient: weight decay alone), step t >= 2
    applies G_{t-1}: every G_t but the last is applied exactly once. `delayed=False`: plain
    synchronous SGD. `momentum`: the local optimizer of pseudo_sync's `algorithm.momentum`."""
    model, opt = _model_and_opt(Config(momentum=momentum))
    params = list(model.parameters())
    batches = [rank_batches(rank, STEPS) for rank in range(world_size)]
    previous, trajectory = None, []
    for t in range(STEPS):
        grads = []
        for rank in range(world_size):
            x, y = batches[rank][t]
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            grads.append([p.grad.clone() for p in params])
        fresh = [sum(g[i] for g in grads) / world_size for i in range(len(params))]
        if not delayed or t == 0:
            apply = fresh
        elif t == 1:
            apply = [torch.zeros_like(g) for g in fresh]
        else:
            apply = previous
        for p, g in zip(params, apply, strict=True):
            p.grad = g.clone()
        opt.step()
        previous = fresh
        trajectory.append(flat(params))
    return trajectory


@pytest.mark.dist
def test_pseudo_sync_on_gloo_workers():
    from tests.workers import run_workers

    world_size = 2
    results = run_workers(_pseudo_sync_worker, world_size)
    references = {m: _delayed_sgd_reference(world_size, momentum=m) for m in ("none", "keep")}
    reference = references["none"]
    numel = reference[0].numel()
    for r in results:
        # identity 5 of algorithms.md section 11, with the start-up of the rule
        for momentum, ref in references.items():
            got = r["delayed", momentum]
            gap = max((a - b).abs().max().item() for a, b in zip(got, ref, strict=True))
            assert gap < 1e-10, momentum
        # one gradient-sized collective per step (float64 here)
        for ledger in (r["delayed_ledger"], r["adaptive_ledger"]):
            assert_model_sized(ledger, STEPS, numel)
        # adaptive confidence: none at steps 0 and 1 (nothing to compare yet), then in range
        c = r["confidences"]
        assert c[0] is None and c[1] is None
        assert all(0.0 <= v <= C_MAX for v in c[2:])
        assert len(set(c[2:])) > 1  # it adapts
        assert r["metrics"]["confidence"] == pytest.approx(sum(c[2:]) / (STEPS - 2))
        assert r["metrics_again"] == {}
        # G_0 is applied once: at step 0; step 1 applies nothing; step 2 applies S_2, which
        # mixes G_0 and G_1 with weights c_2 and 1 - c_2
        applied = r["applied"]
        assert applied[0].abs().max() > 1e-3
        assert torch.count_nonzero(applied[1]) == 0
        assert not torch.allclose(applied[2], applied[0], atol=1e-6, rtol=0)
        # blend_local: one extra average at finish()
        assert r["blend_collectives"] == STEPS + 1
        for a, b in zip(r["continued"], r["restored"], strict=True):
            assert torch.equal(a, b)
    # training moved, and the delay matters
    assert (reference[0] - reference[-1]).abs().max() > 1e-3
    assert (
        reference[-1] - _delayed_sgd_reference(world_size, delayed=False)[-1]
    ).abs().max() > 1e-4
    assert (reference[-1] - references["keep"][-1]).abs().max() > 1e-4  # momentum mattered
    # replicas identical every step without blend_local, drifting with it; consensus at the end
    for t in range(STEPS):
        assert max_spread([r["adaptive"][t] for r in results]) < 1e-12
        assert max_spread([r["delayed", "none"][t] for r in results]) < 1e-12
    assert max(max_spread([r["blend"][t] for r in results]) for t in range(STEPS)) > 1e-6
    assert max_spread([r["adaptive_final"] for r in results]) < 1e-12
    assert max_spread([r["blend_final"] for r in results]) < 1e-12
