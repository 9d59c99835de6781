"""PowerSGD (algorithms/powersgd.py): the math on hand-computed tensors, the closed form of the
bytes sent, and real gloo runs for the identity with sync SGD (algorithms.md section 11 #2),
invariance to the scale of the initial factors when the rank exceeds a gradient's rank,
replicas, the ledger and the state round trip. The comparison with torch's `powerSGD_hook` is in
tests/test_references.py."""

from __future__ import annotations

import copy

import pytest
import torch

from algorithms.comm import Comm
from algorithms.powersgd import (
    Config,
    PowerSGD,
    draw_queries,
    floats_per_step,
    orthonormalize,
    orthonormalize_columns,
    power_step,
    split_bn_params,
)
from algorithms.sync_sgd import SyncSGD
from experiments.training.models import ResNet18, TinyCNN
from tests.steps import (
    POWERSGD_CASES,
    flat_params,
    hook_steps,
    matrix_net,
    max_spread,
    powersgd_case_batches,
    rank_batches,
)

STEPS = 10
TINY_SHAPES = [(4, 1, 3, 3), (4,), (4,), (8, 4, 3, 3), (8,), (8,), (4, 8), (4,)]


# --- pure functions -------------------------------------------------------------------------


def test_orthonormalize_columns_by_hand_and_orthonormal():
    out = orthonormalize_columns(torch.tensor([[3.0, 1.0], [4.0, 2.0]], dtype=torch.float64))
    # col 1 = [3, 4] / 5; col 2 = [1, 2] - 2.2 * [0.6, 0.8] = [-0.32, 0.24], norm 0.4 (QR: up to
    # the sign of each column)
    expected = torch.tensor([[0.6, -0.8], [0.8, 0.6]], dtype=torch.float64)
    signs = torch.sign((out * expected).sum(dim=0))
    assert torch.allclose(out * signs, expected, atol=1e-15)
    p = torch.randn(7, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    before = p.clone()
    u = orthonormalize_columns(p)
    assert torch.allclose(u.T @ u, torch.eye(3, dtype=torch.float64), atol=1e-14)
    assert torch.allclose(torch.triu(u.T @ p), u.T @ p, atol=1e-13)  # same span, P = U R
    assert torch.equal(p, before)  # pure: the input is not modified


def test_orthonormalize_completes_a_rank_deficient_basis():
    """A column with no signal (here: zero, or in the span of the others) still comes out as a
    unit vector orthogonal to the rest; Gram-Schmidt with max(norm, eps) left it zero, and with
    (norm + eps) a vector of arbitrary length."""
    p = torch.tensor([[1.0, 0.0, 2.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]], dtype=torch.float64)
    dependent = torch.tensor([[1.0, 2.0], [2.0, 4.0], [0.0, 0.0]], dtype=torch.float64)
    for m in (p, dependent):
        u = orthonormalize_columns(m)
        assert torch.isfinite(u).all()
        assert torch.allclose(u.T @ u, torch.eye(m.shape[1], dtype=torch.float64), atol=1e-14)
        assert torch.allclose(u @ (u.T @ m), m, atol=1e-14)  # the projection keeps P
    u = orthonormalize_columns(p)
    assert torch.allclose(
        u[:, 0].abs(), torch.tensor([1.0, 1.0, 0.0], dtype=torch.float64) / 2**0.5
    )


def test_orthonormalize_batches_by_shape_and_keeps_the_order():
    gen = torch.Generator().manual_seed(3)
    shapes = [(5, 2), (6, 3), (5, 2), (6, 3), (4, 1)]
    ms = [torch.randn(*s, generator=gen, dtype=torch.float64) for s in shapes]
    out = orthonormalize(ms)
    for m, u in zip(ms, out, strict=True):
        assert u.shape == m.shape
        assert torch.allclose(u, torch.linalg.qr(m).Q, atol=1e-15)


def test_approximation_plus_residual_is_the_input_and_full_rank_is_exact():
    gen = torch.Generator().manual_seed(1)
    m = torch.randn(6, 4, generator=gen, dtype=torch.float64)
    q = torch.randn(4, 1, generator=gen, dtype=torch.float64)
    p, q_new = power_step(m, q)
    approx = p @ q_new.T
    e = m - approx
    assert torch.allclose(approx + e, m, atol=1e-15)
    # Ghat = P P^T M, so the residual is orthogonal to P and smaller than M
    assert (p.T @ e).abs().max() < 1e-13
    assert 0 < e.norm() < m.norm()
    # full rank (r' = min(rows, cols)) reproduces M, tall and wide
    for shape in ((6, 4), (3, 9)):
        m = torch.randn(*shape, generator=gen, dtype=torch.float64)
        q = torch.randn(shape[1], min(shape), generator=gen, dtype=torch.float64)
        p, q_new = power_step(m, q)
        assert torch.allclose(p @ q_new.T, m, atol=1e-12)
    # a rank-2 matrix is exact at rank 2
    low = torch.randn(5, 2, generator=gen, dtype=torch.float64) @ torch.randn(
        2, 7, generator=gen, dtype=torch.float64
    )
    p, q_new = power_step(low, torch.randn(7, 2, generator=gen, dtype=torch.float64))
    assert torch.allclose(p @ q_new.T, low, atol=1e-12)


def test_floats_per_step_closed_form():
    # TinyCNN(1, 4, width=4): rank 1: 13 + 4 + 4 + 44 + 8 + 8 + 12 + 4
    assert floats_per_step(TINY_SHAPES, 1) == 97
    # rank 8 is full rank: (4+9)*4 + 8 + (8+36)*8 + 16 + (4+8)*4 + 4
    assert floats_per_step(TINY_SHAPES, 8) == 52 + 8 + 352 + 16 + 48 + 4
    shapes = [p.shape for p in ResNet18().parameters()]
    assert sum(torch.Size(s).numel() for s in shapes) == 11_173_962
    # algorithms.md section 6
    got = {r: floats_per_step(shapes, r) for r in (1, 2, 4, 8)}
    assert got == {1: 45_935, 2: 82_260, 4: 154_910, 8: 300_210}


def test_queries_identical_for_a_seed_and_shaped_cols_by_rank():
    like = [torch.zeros(1, dtype=torch.float64)] * 2
    a = draw_queries([(4, 9), (3, 2)], 3, seed=0, like=like)
    b = draw_queries([(4, 9), (3, 2)], 3, seed=0, like=like)
    assert [q.shape for q in a] == [(9, 3), (2, 2)]
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    assert not torch.equal(a[0], draw_queries([(4, 9)], 3, seed=1, like=like[:1])[0])


def test_local_optimizer_exempts_the_block_bns_as_the_reference_regex():
    """paper-code/train.py: re.match(r".*\\.bn\\d+\\.(weight|bias)", name): a dot before `bn`."""
    model = ResNet18(width=4)
    names = dict((id(p), n) for n, p in model.named_parameters())
    decayed, exempt = split_bn_params(model.named_parameters(), True)
    exempt_names = {names[id(p)] for p in exempt}
    decayed_names = {names[id(p)] for p in decayed}
    assert "layer1.0.bn1.weight" in exempt_names and "layer1.0.bn2.bias" in exempt_names
    assert len(exempt_names) == 2 * 8 * 2  # bn1/bn2 (weight, bias) of the 8 blocks
    assert {"bn1.weight", "bn1.bias"} <= decayed_names  # the stem BN: no dot before `bn`
    assert "layer2.0.shortcut.1.weight" in decayed_names
    assert "linear.bias" in decayed_names
    kw = dict(lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-4)
    opt = PowerSGD.local_optimizer(Config(), model, **kw)
    assert [g["weight_decay"] for g in opt.param_groups] == [1e-4, 0.0]
    assert len(opt.param_groups[1]["params"]) == len(exempt)
    opt = PowerSGD.local_optimizer(Config(bn_no_weight_decay=False), model, **kw)
    assert len(opt.param_groups) == 1
    assert len(opt.param_groups[0]["params"]) == len(list(model.parameters()))


@pytest.mark.parametrize(
    "options, match",
    [
        ({"rank": 0}, "rank must be an integer >= 1"),
        ({"rank": 1.5}, "rank must be an integer >= 1"),
        ({"rank": True}, "rank must be an integer >= 1"),
        ({"start_step": -1}, "start_step must be >= 0"),
        ({"start_step": 2.0}, "start_step must be an integer"),
        ({"error_feedback": "yes"}, "error_feedback must be true or false"),
        ({"warm_start": 1}, "warm_start must be true or false"),
        ({"log_residual": "no"}, "log_residual must be true or false"),
    ],
)
def test_config_rejects_bad_values(options, match):
    with pytest.raises(ValueError, match=match):
        Config(**options)


# --- real gloo workers ----------------------------------------------------------------------


def _build(cls, cfg):
    torch.manual_seed(0)
    model = TinyCNN(in_channels=1, num_classes=4, width=4).double()
    opt = cls.local_optimizer(cfg, model, lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-4)
    comm = Comm()
    return model, opt, comm, cls(model, opt, comm, cfg, tau=1)


def _powersgd_worker(rank: int, world_size: int):
    batches = rank_batches(rank, STEPS)
    out = {}

    # identity 2: full rank (8 >= min(rows, cols) of every matrix), no error feedback
    model, opt, _, algo = _build(SyncSGD, SyncSGD.Config())
    _, out["sync"] = hook_steps(algo, model, opt, batches)
    cfg = Config(rank=8, error_feedback=False)
    model, opt, comm, algo = _build(PowerSGD, cfg)
    _, out["full"] = hook_steps(algo, model, opt, batches)
    out["full_ledger"] = comm.ledger

    # rank 1 with error feedback: Ghat + e = grad + e_prev on every worker, at every step
    model, opt, comm, algo = _build(PowerSGD, Config(rank=1, log_residual=True))
    gaps = []
    seen = {}

    def probe(t, when):
        grads = [p.grad.reshape(s) for p, s in zip(algo.matrices, algo.shapes, strict=True)]
        if when == "before":
            seen["m"] = [g + e for g, e in zip(grads, algo.memories, strict=True)]
        else:
            sums = [g + e for g, e in zip(grads, algo.memories, strict=True)]
            gaps.append(
                max((a - b).abs().max().item() for a, b in zip(sums, seen["m"], strict=True))
            )

    _, out["rank1"] = hook_steps(
        algo,
        model,
        opt,
        batches,
        on_backward=lambda t: probe(t, "before"),  # before algo.before_step(t)
        on_before_step=lambda t: probe(t, "after"),
    )
    out["rank1_gaps"] = gaps
    out["rank1_ledger"] = comm.ledger
    out["rank1_metrics"] = algo.metrics()
    algo.finish()
    out["rank1_final"] = flat_params(model)
    # the residual norms are opt-in: by default no metric and the same trajectory
    model, opt, _, algo = _build(PowerSGD, Config(rank=1))
    _, out["rank1_quiet"] = hook_steps(algo, model, opt, batches)
    out["quiet_metrics"] = algo.metrics()

    # plain averaging before start_step, fresh queries every step
    cfg = Config(rank=2, warm_start=False, start_step=3)
    model, opt, comm, algo = _build(PowerSGD, cfg)
    _, out["late"] = hook_steps(algo, model, opt, batches)
    out["late_ledger"] = comm.ledger

    # state round trip: checkpoint after 5 steps, restore into fresh objects
    model, opt, _, algo = _build(PowerSGD, Config(rank=1))
    hook_steps(algo, model, opt, batches[:5])
    # deep copies: a module's and an optimizer's state_dict() hold live references
    saved = copy.deepcopy((model.state_dict(), opt.state_dict(), algo.state_dict()))
    _, out["continued"] = hook_steps(algo, model, opt, batches[5:], first_t=5)
    model, opt, _, algo = _build(PowerSGD, Config(rank=1))
    model.load_state_dict(saved[0])
    opt.load_state_dict(saved[1])
    algo.load_state_dict(saved[2])
    _, out["restored"] = hook_steps(algo, model, opt, batches[5:], first_t=5)
    return out


@pytest.mark.dist
def test_powersgd_on_gloo_workers():
    from tests.workers import run_workers

    results = run_workers(_powersgd_worker, 2)
    numel = sum(torch.Size(s).numel() for s in TINY_SHAPES)
    for r in results:
        # identity 2 of algorithms.md section 11: full rank without EF = sync SGD
        gap = max((a - b).abs().max().item() for a, b in zip(r["sync"], r["full"], strict=True))
        assert gap < 1e-9
        assert (r["sync"][0] - r["sync"][-1]).abs().max() > 1e-3  # training moved
        # the residual memory holds exactly what the approximation missed
        assert max(r["rank1_gaps"]) < 1e-12
        assert 0 < r["rank1_metrics"]["residual_rel"] < 1
        assert r["quiet_metrics"] == {}
        for a, b in zip(r["rank1"], r["rank1_quiet"], strict=True):
            assert torch.equal(a, b)
        # the ledger: floats_per_step values of 8 bytes, 3 collectives per step (identity 7)
        for key, rank in (("full_ledger", 8), ("rank1_ledger", 1)):
            assert r[key].bytes == STEPS * floats_per_step(TINY_SHAPES, rank) * 8
            assert r[key].collectives == 3 * STEPS
        late = r["late_ledger"]
        assert late.bytes == 3 * numel * 8 + 7 * floats_per_step(TINY_SHAPES, 2) * 8
        assert late.collectives == 3 + 3 * 7
        # checkpoint round trip
        for a, b in zip(r["continued"], r["restored"], strict=True):
            assert torch.equal(a, b)
    # compressed, it is not sync SGD any more
    assert (results[0]["rank1"][-1] - results[0]["sync"][-1]).abs().max() > 1e-6
    # replicas identical after every step (global momentum), and after finish (identity 6)
    for key in ("rank1", "late", "full"):
        for t in range(STEPS):
            assert max_spread([r[key][t] for r in results]) < 1e-12
    assert max_spread([r["rank1_final"] for r in results]) < 1e-12


# --- invariance to the scale of the initial factors -------------------------------------------


def _scaled_factor_runs(rank: int, world_size: int, old_gram_schmidt: bool = False) -> dict:
    """For each of POWERSGD_CASES: its steps from the initial factors Q and from 3 Q (error
    feedback, warm start)."""
    if old_gram_schmidt:  # tests: the check must fail with the orthogonalisation it replaced
        from tests.test_references import _install_old_gram_schmidt

        _install_old_gram_schmidt()
    out = {}
    for name, (data, hidden, lr, r, steps) in POWERSGD_CASES.items():
        batches = powersgd_case_batches(data, rank, steps)
        for scale in (1.0, 3.0):
            model = matrix_net(hidden)
            cfg = Config(rank=r)
            opt = PowerSGD.local_optimizer(
                cfg, model, lr=lr, momentum=0.9, nesterov=True, weight_decay=1e-4
            )
            algo = PowerSGD(model, opt, Comm(), cfg, tau=1)
            algo.qs = [scale * q for q in algo.qs]
            _, out[name, scale] = hook_steps(algo, model, opt, batches)
    return out


@pytest.mark.dist
def test_run_is_invariant_to_the_scale_of_its_initial_factors():
    """P Q^T depends on the span of P only; with an orthonormalisation that returns a basis
    whatever P's rank, scaling Q changes nothing but rounding. Gram-Schmidt with max(norm, eps)
    broke this at rank 4 on the 4-class classifier (algorithms.md section 12.14; 7e-4 here)."""
    from tests.workers import run_workers

    for out in run_workers(_scaled_factor_runs, 2):
        for name in POWERSGD_CASES:
            one, three = out[name, 1.0], out[name, 3.0]
            gap = max((a - b).abs().max().item() for a, b in zip(one, three, strict=True))
            assert gap < 1e-9, (name, gap)
            assert (one[0] - one[-1]).abs().max() > 1e-2, name  # training moved


def _all_ones_component(rank: int, world_size: int, old_gram_schmidt: bool = False) -> list:
    """Random labels, rank 4 (above the classifier's gradient rank 3), lr 0.05, 50 steps: after
    every step, the largest column sum of the classifier's error memory and of its update P Q^T
    (their component along the all-ones direction of the 4 classes)."""
    if old_gram_schmidt:
        from tests.test_references import _install_old_gram_schmidt

        _install_old_gram_schmidt()
    model = matrix_net()
    cfg = Config(rank=4)
    opt = PowerSGD.local_optimizer(cfg, model, lr=0.05, momentum=0.9, nesterov=True, weight_decay=0)
    algo = PowerSGD(model, opt, Comm(), cfg, tau=1)
    classifier = len(algo.matrices) - 1
    sums = []

    def record(t):
        update = algo.matrices[classifier].grad
        memory = algo.memories[classifier]
        sums.append(max(update.sum(0).abs().max().item(), memory.sum(0).abs().max().item()))

    hook_steps(algo, model, opt, rank_batches(rank, 50), on_before_step=record)
    return sums


@pytest.mark.dist
def test_error_feedback_has_no_component_the_loss_does_not_see():
    """A classifier's logits are blind to adding the same row to every class's weights, so its
    gradient's columns sum to zero; its compressed update and its error memory must too. With
    Gram-Schmidt and max(norm, eps) the spare fourth column of P died, and the error memory
    grew a component along the all-ones direction (to 4e-2 in 50 steps here)."""
    from tests.workers import run_workers

    for sums in run_workers(_all_ones_component, 2):
        assert max(sums) < 1e-12, max(sums)
