"""Outer optimizers on Local SGD (algorithms/outer.py, local_sgd.py: bmuf, slowmo, diloco): the
outer step against torch and the papers' formulas, the presets against their spelled-out
`local_sgd` equivalents, BMUF against algorithms.md section 2's rule written out by hand, and
compressed rounds, on real gloo workers in float64."""

from __future__ import annotations

import pytest
import torch

import algorithms
from algorithms.base import Algorithm
from algorithms.comm import Comm
from algorithms.outer import OuterConfig, OuterOptimizer
from experiments.training.models import TinyCNN
from tests.steps import assert_model_sized, flat_params, hook_steps, rank_batches
from tests.workers import run_workers

STEPS, TAU = 11, 3  # three rounds and a partial one closed by finish()


def lr_schedule(t: int) -> float:
    """A step decay between rounds: the LR division of SlowMo/BMUF matters."""
    return 0.05 if t < 6 else 0.02


def _train(rank: int, world_size: int, name: str, options: dict, compression: str = "none"):
    torch.manual_seed(0)
    model = TinyCNN(in_channels=1, num_classes=4, width=4).double()
    opt = torch.optim.SGD(
        model.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-4
    )
    comm = Comm(compression=compression)
    if name == "section2_reference":
        algo = Section2BMUF(model, opt, comm, options, tau=TAU)
    else:
        algo = algorithms.build(name, options, model, opt, comm, TAU)
    _, params = hook_steps(algo, model, opt, rank_batches(rank, STEPS), lr=lr_schedule)
    algo.finish()
    return params, flat_params(model), comm.ledger


class Section2BMUF(Algorithm):
    """algorithms.md section 2's BMUF rule, written out as the reference code runs it (per-worker
    momentum v_i, all-reduce of the message z - eta v_i), independently of algorithms/outer.py:

        v_i = (z - x_i)/eta  (first)  else  beta_g*v_i + (z - x_i)/eta
        z   = z - eta*mean_j v_j          (all-reduce of (z - eta*v_i)/m)
        x_i = z
    """

    periodic = True

    def __init__(self, model, optimizer, comm, options, tau):
        super().__init__(model, optimizer, comm, None, tau)
        self.beta = options["beta_g"]
        self.z = [p.detach().clone() for p in self.params]
        self.v = None
        self.in_round = False

    def after_step(self, t: int) -> None:
        self.in_round = True
        if self.round_ends(t):
            self.sync()

    @torch.no_grad()
    def sync(self) -> None:
        eta = self.optimizer.param_groups[0]["lr"]
        fresh = [(z - x) / eta for z, x in zip(self.z, self.params, strict=True)]
        if self.v is None:
            self.v = fresh
        else:
            self.v = [self.beta * v + f for v, f in zip(self.v, fresh, strict=True)]
        message = [z - eta * v for z, v in zip(self.z, self.v, strict=True)]
        self.comm.mean_(message)
        self.z = message
        for x, z in zip(self.params, self.z, strict=True):
            x.copy_(z)
        self.in_round = False

    def finish(self) -> None:
        if self.in_round:
            self.sync()


BETA = 0.7  # the reference code's --gmf 0.7
RUNS = {  # label: (registry name, options, compression); all trained in one spawn of 2 workers
    "diloco": ("diloco", {}, "none"),
    "diloco_spelled": (
        "local_sgd",
        {"outer": "nesterov", "outer_lr": 0.7, "outer_momentum": 0.9},
        "none",
    ),
    "diloco_plain_step": (
        "diloco",
        {"outer": "momentum", "outer_lr": 1.0, "outer_momentum": 0.0},
        "none",
    ),
    "local_sgd": ("local_sgd", {}, "none"),
    "section2": ("section2_reference", {"beta_g": BETA}, "none"),
    "gmf": ("local_sgd", {"outer": "momentum", "outer_momentum": BETA}, "none"),
    "bmuf": ("bmuf", {"outer_momentum": BETA}, "none"),
    "slowmo": ("slowmo", {"outer_momentum": BETA}, "none"),
    **{
        f"{name}_{c}": (name, {}, c)
        for name in ("local_sgd", "diloco")
        for c in ("fp16", "bf16", "int8")
    },
}


def _train_all(rank: int, world_size: int, runs: dict) -> dict:
    return {label: _train(rank, world_size, *run) for label, run in runs.items()}


@pytest.fixture(scope="module")
def runs() -> dict:
    """label -> [rank 0's (params per step, final params, ledger), rank 1's]."""
    per_rank = run_workers(_train_all, 2, RUNS)
    return {label: [r[label] for r in per_rank] for label in RUNS}


def _max_diff(a, b) -> float:
    return max((x - y).abs().max().item() for x, y in zip(a, b, strict=True))


@pytest.mark.dist
def test_presets_equal_their_local_sgd_spelling_and_the_plain_outer_step_is_local_sgd(runs):
    diloco, spelled = runs["diloco"], runs["diloco_spelled"]
    plain, local = runs["diloco_plain_step"], runs["local_sgd"]
    numel = local[0][1].numel()
    for rank in range(2):
        # algorithm=diloco is algorithm=local_sgd with DiLoCo's outer knobs: the same numbers
        assert all(
            torch.equal(a, b) for a, b in zip(diloco[rank][0], spelled[rank][0], strict=True)
        )
        # an outer step with LR 1 and no momentum is the plain average (identity, float64)
        assert _max_diff(plain[rank][0], local[rank][0]) < 1e-12
        assert (plain[rank][1] - local[rank][1]).abs().max() < 1e-12
        # ... while DiLoCo's Nesterov step is not
        assert _max_diff(diloco[rank][0], local[rank][0]) > 1e-4
        # one model-sized all-reduce per round either way (pseudo-gradients or models)
        for result in (diloco, plain, local):
            assert_model_sized(result[rank][2], STEPS // TAU + 1, numel)
    # consensus after finish() (identity 6)
    for result in (diloco, plain, local):
        assert (result[0][1] - result[1][1]).abs().max() < 1e-12


@pytest.mark.dist
def test_bmuf_and_gmf_follow_section_2_rule_written_by_hand(runs):
    reference = runs["section2"]
    gmf, bmuf, slowmo = runs["gmf"], runs["bmuf"], runs["slowmo"]
    for rank in range(2):
        for result in (gmf, bmuf, slowmo):
            assert _max_diff(result[rank][0], reference[rank][0]) < 1e-12
            assert (result[rank][1] - reference[rank][1]).abs().max() < 1e-12
            # bytes per round = the closed form: one model-sized all-reduce, + finish()'s
            assert_model_sized(result[rank][2], STEPS // TAU + 1, reference[rank][1].numel())
    # the global momentum changed the trajectory (rounds 2 and 3 carry momentum)
    assert _max_diff(runs["local_sgd"][0][0], reference[0][0]) > 1e-4


def test_bmuf_default_block_momentum_is_one_minus_one_over_workers():
    cfg = algorithms.make_config("bmuf", {})
    assert OuterOptimizer(cfg, workers=4).momentum == 0.75
    assert OuterOptimizer(cfg, workers=16).momentum == 1 - 1 / 16
    assert OuterOptimizer(cfg, workers=4).divide_by_lr
    assert not OuterOptimizer(algorithms.make_config("diloco", {}), workers=4).divide_by_lr


def test_nesterov_outer_step_is_torch_sgd_on_z_with_the_pseudo_gradient():
    gen = torch.Generator().manual_seed(0)
    z0 = [torch.randn(3, 2, generator=gen, dtype=torch.float64), torch.randn(4, generator=gen)]
    deltas = [[torch.randn_like(t) for t in z0] for _ in range(3)]
    ours = [t.clone() for t in z0]
    buffers = [None, None]
    outer = OuterOptimizer(OuterConfig("nesterov", 0.7, 0.9), workers=2)
    theirs = [torch.nn.Parameter(t.clone()) for t in z0]
    opt = torch.optim.SGD(theirs, lr=0.7, momentum=0.9, nesterov=True)
    for r, delta in enumerate(deltas):
        outer.step(ours, delta, buffers, inner_lr=0.1 * (r + 1))  # the inner LR is ignored
        for p, d in zip(theirs, delta, strict=True):
            p.grad = d.clone()
        opt.step()
        assert all(torch.equal(a, b.detach()) for a, b in zip(ours, theirs, strict=True))


def test_momentum_outer_step_is_slowmo_algorithm_1_with_changing_lr():
    z = torch.tensor([1.0, -2.0], dtype=torch.float64)
    deltas = [torch.tensor([0.3, 0.1]), torch.tensor([-0.2, 0.4]), torch.tensor([0.05, 0.0])]
    lrs, alpha, beta = [0.1, 0.1, 0.01], 0.8, 0.6
    ours, buffers = [z.clone()], [None]
    outer = OuterOptimizer(OuterConfig("momentum", alpha, beta), workers=2)
    u, ref = torch.zeros(2, dtype=torch.float64), z.clone()
    for delta, eta in zip(deltas, lrs, strict=True):
        outer.step(ours, [delta.double()], buffers, inner_lr=eta)
        u = beta * u + delta.double() / eta  # SlowMo Algorithm 1
        ref = ref - alpha * eta * u
        assert torch.allclose(ours[0], ref, rtol=0, atol=1e-15)
        assert torch.allclose(buffers[0], u, rtol=0, atol=1e-12)  # u, in units of 1/LR


def test_outer_config_rejects_bad_values_in_one_line():
    cases = [
        ({"outer": "adam"}, "algorithm.outer must be one of none, momentum, nesterov"),
        ({"outer": "momentum", "outer_lr": 0}, "algorithm.outer_lr must be a number > 0"),
        ({"outer": "momentum", "outer_momentum": 1.0}, "outer_momentum must be null or a number"),
        ({"outer_lr": 0.5}, "act only with algorithm.outer=momentum or nesterov"),
        ({"outer": "nesterov", "outer_momentum": 0}, "nesterov needs algorithm.outer_momentum > 0"),
        ({"outer_divide_by_lr": "yes"}, "outer_divide_by_lr must be null, true or false"),
    ]
    for options, message in cases:
        with pytest.raises(ValueError, match=message):
            algorithms.make_config("local_sgd", options)


@pytest.mark.dist
@pytest.mark.parametrize("name", ["local_sgd", "diloco"])
def test_compressed_rounds_send_pseudo_gradients_in_the_wire_format(runs, name):
    exact, fp16, int8 = runs[name], runs[f"{name}_fp16"], runs[f"{name}_int8"]
    numel = exact[0][1].numel()
    syncs = STEPS // TAU + 1
    for rank in range(2):
        assert fp16[rank][2].bytes == syncs * 2 * numel  # 2 bytes per value
        assert fp16[rank][2].collectives == int8[rank][2].collectives == syncs
        assert int8[rank][2].bytes < syncs * (numel + 4 * 50)  # a byte + scales (<50 tensors)
        # the change of a round is quantised, not the weights: the trajectory stays close
        # (fp16: 2^-11 of a round's change; int8: 1/254 of each tensor's largest change)
        err16 = (fp16[rank][1] - exact[rank][1]).abs().max().item()
        err8 = (int8[rank][1] - exact[rank][1]).abs().max().item()
        assert 0 < err16 < 1e-4 and 0 < err8 < 1e-2, (err16, err8)
    for result in (fp16, int8):
        assert (result[0][1] - result[1][1]).abs().max() < 1e-12  # consensus after finish()


@pytest.mark.dist
def test_compressed_local_sgd_keeps_changes_that_a_bf16_model_average_would_round_away(runs):
    exact, bf16 = runs["local_sgd"], runs["local_sgd_bf16"]
    torch.manual_seed(0)
    x0 = flat_params(TinyCNN(in_channels=1, num_classes=4, width=4).double())
    change = exact[0][1] - x0
    # weights whose whole training moved them by less than half a bf16 ulp of themselves: a
    # bf16 wire carrying the weights would round these changes to nothing, round after round
    tiny = change.abs() < x0.abs() * 2.0**-9
    assert tiny.sum() > 10
    # the pseudo-gradient is quantised relative to the change itself: they survive
    error = (bf16[0][1] - exact[0][1]).abs()
    assert (error[tiny] / change[tiny].abs()).median() < 0.05
