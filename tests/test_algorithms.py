"""Algorithms on real gloo processes: the identities of algorithms.md section 11, and the
invariants of each update rule (replicas equal when theory says so)."""

from __future__ import annotations

import copy

import pytest
import torch

import algorithms
from algorithms.comm import Comm
from algorithms.local_sgd import Config as LocalConfig
from experiments.training.models import TinyCNN
from tests.steps import assert_model_sized, flat_params, hook_steps, max_spread, rank_batches

STEPS = 10


def _train(rank: int, world_size: int, name: str, options: dict, tau: int, steps: int = STEPS):
    """A few steps of the real hook sequence on a float64 TinyCNN; own data per rank."""
    torch.manual_seed(0)
    model = TinyCNN(in_channels=1, num_classes=4, width=4).double()
    opt = torch.optim.SGD(
        model.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-4
    )
    comm = Comm()
    algo = algorithms.build(name, options, model, opt, comm, tau)
    losses, params = hook_steps(algo, model, opt, rank_batches(rank, steps))
    algo.finish()
    return losses, params, flat_params(model), comm.ledger


@pytest.mark.dist
def test_local_sgd_tau1_follows_sync_sgd_trajectory():
    from tests.workers import run_workers

    sync = run_workers(_train, 2, "sync_sgd", {}, 1)
    local = run_workers(_train, 2, "local_sgd", {}, 1)
    for rank in range(2):
        s_losses, s_params, _, _ = sync[rank]
        l_losses, l_params, _, _ = local[rank]
        assert len(s_losses) == STEPS
        # identity 1 of algorithms.md section 11, in float64
        assert max(abs(a - b) for a, b in zip(s_losses, l_losses, strict=True)) < 1e-10
        assert (
            max((a - b).abs().max().item() for a, b in zip(s_params, l_params, strict=True)) < 1e-10
        )
    # the trajectory is not trivially constant: training moved the loss
    assert abs(sync[0][0][0] - sync[0][0][-1]) > 1e-3


@pytest.mark.dist
def test_sync_sgd_replicas_identical_every_step_and_bytes_closed_form():
    from tests.workers import run_workers

    results = run_workers(_train, 3, "sync_sgd", {}, 1)
    for t in range(STEPS):
        assert max_spread([r[1][t] for r in results]) < 1e-12
    numel = results[0][2].numel()
    for _, _, _, ledger in results:
        # identity 7: one model-sized all-reduce input (float64 here) per step
        assert_model_sized(ledger, STEPS, numel)


@pytest.mark.dist
def test_local_sgd_replicas_equal_right_after_each_sync_only():
    from tests.workers import run_workers

    tau = 3
    results = run_workers(_train, 2, "local_sgd", {}, tau)
    for t in range(STEPS):
        spread = max_spread([r[1][t] for r in results])
        if (t + 1) % tau == 0:
            assert spread < 1e-12, f"replicas differ right after the sync at step {t}"
        else:
            assert spread > 1e-6, f"replicas equal at step {t} although no sync happened"
    # STEPS=10 is not a multiple of tau: finish() closes the last round (identity 6)
    assert max_spread([r[2] for r in results]) < 1e-12
    numel = results[0][2].numel()
    syncs = STEPS // tau + 1  # three full rounds and the closing average
    for r in results:
        assert_model_sized(r[3], syncs, numel)


class _WithUnused(torch.nn.Module):
    """A linear model with a parameter its forward never uses."""

    def __init__(self):
        super().__init__()
        self.used = torch.nn.Linear(3, 1).double()
        self.unused = torch.nn.Parameter(torch.ones(2, dtype=torch.float64))

    def forward(self, x):
        return self.used(x)


def _sync_with_unused_parameter(rank: int, world_size: int):
    torch.manual_seed(0)
    model = _WithUnused()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, weight_decay=0.5)
    algo = algorithms.build("sync_sgd", {}, model, opt, Comm(), 1)
    x = torch.full((4, 3), float(rank + 1), dtype=torch.float64)
    opt.zero_grad(set_to_none=True)
    (model(x) ** 2).sum().backward()
    assert model.unused.grad is None
    algo.before_step(0)
    grads = (model.used.weight.grad.clone(), model.unused.grad.clone())
    opt.step()
    return grads, model.unused.detach().clone(), algo.comm.ledger.collectives


@pytest.mark.dist
def test_sync_sgd_zero_fills_a_parameter_without_gradient():
    from tests.workers import run_workers

    (g0, u0, c0), (g1, u1, c1) = run_workers(_sync_with_unused_parameter, 2)
    assert torch.equal(g0[0], g1[0])  # the used gradient is averaged
    assert torch.equal(g0[1], torch.zeros(2, dtype=torch.float64))  # zero, not a crash
    assert torch.equal(u0, torch.full((2,), 1 - 0.1 * 0.5, dtype=torch.float64))  # decay only
    assert torch.equal(u0, u1) and c0 == c1 == 1


def _momentum_after_sync(rank: int, world_size: int, mode: str):
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1).double()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    algo = algorithms.build("local_sgd", {"momentum_at_sync": mode}, model, opt, Comm(), 1)
    x = torch.full((4, 3), float(rank + 1), dtype=torch.float64)
    (model(x) ** 2).sum().backward()  # every gradient depends on the rank's data
    opt.step()
    before = [opt.state[p]["momentum_buffer"].clone() for p in model.parameters()]
    algo.after_step(0)
    after = [opt.state[p]["momentum_buffer"].clone() for p in model.parameters()]
    return before, after


@pytest.mark.dist
@pytest.mark.parametrize("mode", ["keep", "average", "reset"])
def test_local_sgd_momentum_at_sync(mode):
    from tests.workers import run_workers

    (b0, a0), (b1, a1) = run_workers(_momentum_after_sync, 2, mode)
    for i in range(len(b0)):
        if mode == "keep":
            assert torch.equal(a0[i], b0[i]) and torch.equal(a1[i], b1[i])
            assert not torch.allclose(a0[i], a1[i])
        elif mode == "average":
            assert torch.allclose(a0[i], (b0[i] + b1[i]) / 2) and torch.equal(a0[i], a1[i])
        else:
            assert torch.count_nonzero(a0[i]) == 0 and torch.count_nonzero(a1[i]) == 0


def test_config_rejects_unknown_and_bad_options():
    with pytest.raises(ValueError, match="has no option momentum_sync"):
        algorithms.make_config("local_sgd", {"momentum_sync": "keep"})
    with pytest.raises(ValueError, match="momentum_at_sync must be one of"):
        algorithms.make_config("local_sgd", {"momentum_at_sync": "sometimes"})
    with pytest.raises(ValueError, match="unknown algorithm"):
        algorithms.make_config("nope", {})
    assert algorithms.make_config("local_sgd", {}) == LocalConfig(momentum_at_sync="keep")


def test_registry_names_match_config_files():
    from pathlib import Path

    conf = Path(__file__).resolve().parents[1] / "conf" / "algorithm"
    assert {p.stem for p in conf.glob("*.yaml")} == set(algorithms.REGISTRY)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("name", ["local_sgd", "powersgd"])
def test_local_optimizer_is_foreach_and_bit_identical_to_the_per_tensor_loop(name, dtype):
    """algorithms/base.py FOREACH: the workers' SGD runs torch's multi-tensor implementation
    on CPU too; it must be the per-tensor loop's arithmetic bit for bit (nesterov, weight
    decay, PowerSGD's exempt BN group)."""
    from algorithms import REGISTRY
    from experiments.training.models import build_model

    cls = REGISTRY[name]
    torch.manual_seed(0)
    model = build_model({"name": "resnet18", "width": 8}, 1, 10).to(dtype)
    twin = copy.deepcopy(model)
    kw = {"lr": 0.1, "momentum": 0.9, "nesterov": True, "weight_decay": 1e-4}
    fast = cls.local_optimizer(cls.Config(), model, **kw)
    assert all(g.get("foreach", fast.defaults["foreach"]) for g in fast.param_groups)
    slow = cls.local_optimizer(cls.Config(), twin, **kw)
    for group in slow.param_groups:
        group["foreach"] = False
    gen = torch.Generator().manual_seed(1)
    for _ in range(4):
        x = torch.randn(16, 1, 8, 8, generator=gen, dtype=dtype)
        y = torch.randint(0, 10, (16,), generator=gen)
        for net, opt in ((model, fast), (twin, slow)):
            opt.zero_grad(set_to_none=True)
            torch.nn.functional.cross_entropy(net(x), y).backward()
            opt.step()
    for a, b in zip(model.state_dict().values(), twin.state_dict().values(), strict=True):
        assert torch.equal(a, b)
