"""Streaming DiLoCo (algorithms/streaming_diloco.py): the schedule and the fragments as pure
functions; on real gloo workers in float64, the identity with DiLoCo (one fragment, no delay,
alpha 0), torchft's regression scenario against histories computed by hand from the paper's
rule, consensus after finish(), and the per-fragment bytes and times of the ledger."""

from __future__ import annotations

import math

import pytest
import torch

import algorithms
from algorithms.comm import Comm
from algorithms.streaming_diloco import split_fragments
from algorithms.streaming_diloco_config import (
    Config,
    check_schedule,
    fragment_offsets,
    resolve_delay,
    smallest_gap,
)
from experiments.training.models import TinyCNN
from tests.steps import flat_params, hook_steps, rank_batches
from tests.workers import run_workers

# ---------------------------------------------------------------------------------------------
# Pure functions


def test_fragment_offsets_stagger_the_syncs_within_a_round():
    assert fragment_offsets(6, 2) == [3, 6]  # torchft: every sync_every / P steps, in turn
    assert fragment_offsets(6, 1) == [6]
    assert fragment_offsets(7, 3) == [2, 4, 7]
    assert fragment_offsets(3, 3) == [1, 2, 3]
    assert fragment_offsets(1, 2) == [1, 1]  # fewer steps than fragments: they share steps
    assert fragment_offsets(3, 4) == [1, 1, 2, 3] and smallest_gap(3, 4) == 1
    assert smallest_gap(7, 3) == 2 and smallest_gap(6, 2) == 3 and smallest_gap(8, 3) == 2


def test_split_fragments_is_contiguous_balanced_and_never_empty():
    sizes = [100, 1, 100, 1, 300, 10, 500, 10]
    for fragments in range(1, len(sizes) + 1):
        groups = split_fragments(sizes, fragments)
        assert [i for g in groups for i in g] == list(range(len(sizes)))  # in order, all
        assert all(groups) and len(groups) == fragments
    two = split_fragments(sizes, 2)
    assert two == [[0, 1, 2, 3, 4, 5], [6, 7]]  # 512 | 510 of 1022 values
    assert split_fragments([1, 1], 2) == [[0], [1]]  # torchft's mock model: a layer each
    assert split_fragments([1000, 1, 1], 3) == [[0], [1], [2]]  # a huge first tensor
    with pytest.raises(ValueError, match="fragments=3 exceeds the model's 2 parameter tensors"):
        split_fragments([5, 5], 3)


def test_delay_default_and_schedule_errors():
    assert resolve_delay(Config(fragments=2), tau=4) == 1
    assert resolve_delay(Config(fragments=2), tau=3) == 0  # no room to overlap
    assert resolve_delay(Config(fragments=2, sync_delay=0), tau=40) == 0
    check_schedule(Config(fragments=2, sync_delay=2), tau=6)
    with pytest.raises(ValueError, match="sync_delay=3 must be < 3, the fewest steps"):
        check_schedule(Config(fragments=2, sync_delay=3), tau=6)
    check_schedule(Config(fragments=3), tau=2)  # fragments share steps, no delay
    with pytest.raises(ValueError, match="sync_delay=1 must be < 1"):
        check_schedule(Config(fragments=3, sync_delay=1), tau=2)
    for options, message in (
        ({"fragments": 0}, "algorithm.fragments must be an integer >= 1"),
        ({"sync_delay": -1}, "algorithm.sync_delay must be null or an integer >= 0"),
        ({"mix_alpha": 1.5}, r"algorithm.mix_alpha must be a number in \[0, 1\]"),
        ({"outer": "sgd"}, "algorithm.outer must be one of"),
    ):
        with pytest.raises(ValueError, match=message):
            algorithms.make_config("streaming_diloco", options)


# ---------------------------------------------------------------------------------------------
# torchft's regression scenario (torchft/diloco_regression_test.py, DiLoCoMockedUpdateTest)

SCENARIO_STEPS, SCENARIO_TAU = 15, 6  # torchft records 16 parameter snapshots, sync_every 6
SCENARIOS = [(d, a) for d in (0, 1) for a in (0.0, 0.5, 1.0)]


def paper_rule_history(delay: int, alpha: float, fragments: int = 2, tau: int = 6):
    """The parameter histories of the scenario computed by hand from the paper's rule: two
    one-value fragments starting at 1, constant gradient 2, inner LR 1, outer SGD with LR 2 and
    no momentum; fragment p is launched (Delta_p = z_p - x_p) after step (p+1) tau / P - delay
    of each round and applied after step (p+1) tau / P: z_p -= 2 Delta_p, then
    x_p = alpha x_p + (1 - alpha) z_p. Both replicas see the same gradients, so the average of
    their Delta_p is their own. Returns the local values and the outer values after each step
    0..SCENARIO_STEPS (index 0: the initial weights)."""
    x, z, delta = [1.0] * fragments, [1.0] * fragments, [None] * fragments
    every = tau // fragments
    xs, zs = [list(x)], [list(z)]
    for step in range(1, SCENARIO_STEPS + 1):
        x = [v - 1.0 * 2.0 for v in x]
        for p in range(fragments):
            due = (p + 1) * every
            if (step + delay) % tau == due % tau and step + delay >= due:
                delta[p] = z[p] - x[p]
            if step % tau == due % tau and step >= due:
                z[p] = z[p] - 2.0 * delta[p]
                x[p] = alpha * x[p] + (1 - alpha) * z[p]
        xs.append(list(x))
        zs.append(list(z))
    return xs, zs


def test_paper_rule_history_matches_the_rule_on_a_worked_example():
    # delay 0, alpha 0: fragment 0 after step 3: x = 1 - 6 = -5, Delta = 6, z = 1 - 12 = -11
    xs, zs = paper_rule_history(0, 0.0)
    assert xs[3] == [-11.0, -5.0] and zs[3] == [-11.0, 1.0]
    # fragment 1 after step 6: x = 1 - 12 = -11, Delta = 12, z = 1 - 24 = -23
    assert xs[6] == [-17.0, -23.0] and zs[6] == [-11.0, -23.0]
    # delay 1, alpha 0.5: fragment 0 launched after step 2 (x = -3, Delta = 4, z = -7),
    # applied after step 3: x = (-5 + -7) / 2
    xs, zs = paper_rule_history(1, 0.5)
    assert xs[3] == [-6.0, -5.0] and zs[3] == [-7.0, 1.0]


class MockLinear(torch.nn.Module):
    """torchft's MockLinear: one weight of ones; the scenario sets its gradient to 2."""

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(1, 1, dtype=torch.float64))


def _scenario(rank: int, world_size: int) -> dict:
    out = {}
    for delay, alpha in SCENARIOS:
        model = torch.nn.Sequential(MockLinear(), MockLinear())
        opt = torch.optim.SGD(model.parameters(), lr=1.0)  # inner LR 1, plain SGD
        options = {
            "outer": "momentum",  # plain outer SGD (torchft's MockOptimizer): z -= 2 Delta
            "outer_lr": 2.0,
            "outer_momentum": 0.0,
            "outer_divide_by_lr": False,
            "fragments": 2,
            "sync_delay": delay,
            "mix_alpha": alpha,
        }
        algo = algorithms.build("streaming_diloco", options, model, opt, Comm(), SCENARIO_TAU)
        xs = [[p.item() for p in model.parameters()]]
        zs = [[z[0].item() for z in algo.outer_model]]
        for t in range(SCENARIO_STEPS):
            opt.zero_grad()
            for p in model.parameters():
                p.grad = torch.full_like(p, 2.0)  # constant gradient 2, as torchft's mock
            algo.before_step(t)
            opt.step()
            algo.after_step(t)
            xs.append([p.item() for p in model.parameters()])
            zs.append([z[0].item() for z in algo.outer_model])
        out[(delay, alpha)] = (xs, zs, algo.comm.ledger.collectives)
    return out


@pytest.mark.dist
def test_torchft_regression_scenario_matches_the_paper_rule_by_hand():
    per_rank = run_workers(_scenario, 2)
    for delay, alpha in SCENARIOS:
        xs_ref, zs_ref = paper_rule_history(delay, alpha)
        for rank in range(2):
            xs, zs, collectives = per_rank[rank][(delay, alpha)]
            assert xs == xs_ref, (delay, alpha, rank)  # exact: small integers and halves
            assert zs == zs_ref, (delay, alpha, rank)
            # fragment syncs after steps 3, 6, 9, 12, 15 (launched 0 or 1 step before)
            assert collectives == 5
    # the scenario's cases differ: delay and alpha both matter
    finals = {k: per_rank[0][k][0][-1] for k in SCENARIOS}
    assert len({tuple(v) for v in finals.values()}) == len(SCENARIOS) - 1  # alpha 1: delay moot


# ---------------------------------------------------------------------------------------------
# DiLoCo identity, consensus, bytes and time on a TinyCNN

STEPS, TAU = 11, 4
SLOW_GBPS = 1e-4  # a fragment's all-reduce takes a modeled ~ step or more
STEP_S = 0.01


def _tiny(rank: int, name: str, options: dict, tau: int, steps: int, clock=None):
    torch.manual_seed(0)
    model = TinyCNN(in_channels=1, num_classes=4, width=4).double()
    opt = torch.optim.SGD(
        model.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-4
    )
    comm = Comm(clock=clock)
    algo = algorithms.build(name, options, model, opt, comm, tau)
    on_backward = None if clock is None else (lambda t: clock.local_step(t, 0.0))
    _, params = hook_steps(algo, model, opt, rank_batches(rank, steps), on_backward=on_backward)
    ledger_rounds = (comm.ledger.bytes, comm.ledger.collectives)
    algo.finish()
    sizes = [[x.numel() for x in f] for f in getattr(algo, "fragment_params", [])]
    return params, flat_params(model), comm.ledger, ledger_rounds, sizes


def _tinies(rank: int, world_size: int) -> dict:
    from experiments.training.clock import Compute, Network, VirtualClock

    clock = VirtualClock(rank, Network("slow", 0.0, SLOW_GBPS), Compute(STEP_S, (1.0, 1.0)))
    one = {"fragments": 1, "sync_delay": 0, "mix_alpha": 0.0}
    return {
        "diloco": _tiny(rank, "diloco", {}, TAU, STEPS),
        "streaming_one": _tiny(rank, "streaming_diloco", one, TAU, STEPS),
        "streaming": _tiny(rank, "streaming_diloco", {"fragments": 3}, 6, 14),
        "shared": _tiny(rank, "streaming_diloco", {"fragments": 3}, 2, 5),
        "timed": _tiny(rank, "streaming_diloco", {"sync_delay": 1}, TAU, 8, clock),
        "timed_clock": clock.now(),
    }


@pytest.fixture(scope="module")
def tinies() -> list[dict]:
    return run_workers(_tinies, 2)


@pytest.mark.dist
def test_one_fragment_without_delay_or_mixing_is_diloco(tinies):
    for rank in range(2):
        d_steps, d_final, d_ledger, _, _ = tinies[rank]["diloco"]
        s_steps, s_final, s_ledger, _, _ = tinies[rank]["streaming_one"]
        diff = max((a - b).abs().max().item() for a, b in zip(d_steps, s_steps, strict=True))
        assert diff < 1e-12 and (d_final - s_final).abs().max() < 1e-12
        assert (d_ledger.bytes, d_ledger.collectives) == (s_ledger.bytes, s_ledger.collectives)
    assert (tinies[0]["diloco"][1] - tinies[1]["diloco"][1]).abs().max() < 1e-12


@pytest.mark.dist
def test_fragments_sync_in_turn_bytes_closed_form_and_consensus(tinies):
    # 3 fragments, tau 6, 14 steps, delay null = 1 (6 // 3 = 2): fragment p launched after
    # steps 2p + 1 + 6k, applied after 2p + 2 + 6k: 7 fragment syncs (3 + 3 + fragment 0 at 14)
    results = [r["streaming"] for r in tinies]
    params, final, ledger, (bytes_rounds, collectives_rounds), sizes = results[0]
    numel = final.numel()
    frag = [sum(s) for s in sizes]
    assert len(frag) == 3 and sum(frag) == numel and max(frag) < numel
    assert collectives_rounds == 7
    assert bytes_rounds == 8 * (2 * numel + frag[0])  # float64: two full rounds + fragment 0
    # finish(): one collective per fragment with local steps since its last launch (fragment 0
    # was launched after step 13 and step 14 followed: all three), never more than a fragment
    assert ledger.collectives == 10 and ledger.bytes == bytes_rounds + 8 * numel
    assert ledger.peak_bytes == 8 * max(frag)
    assert (results[0][1] - results[1][1]).abs().max() < 1e-12  # consensus (identity 6)
    # between syncs the replicas differ: each fragment keeps half its local progress (alpha)
    assert (results[0][0][7] - results[1][0][7]).abs().max() > 1e-6


@pytest.mark.dist
def test_fewer_steps_than_fragments_share_steps(tinies):
    # 3 fragments, tau 2: fragments 0 and 1 after steps 1, 3, 5, fragment 2 after 2, 4 (each
    # its own collective, no delay); finish() closes fragment 2 only (0 and 1 just synced)
    results = [r["shared"] for r in tinies]
    _, final, ledger, (bytes_rounds, collectives), sizes = results[0]
    frag = [8 * sum(s) for s in sizes]
    assert collectives == 8 and bytes_rounds == 3 * (frag[0] + frag[1]) + 2 * frag[2]
    assert ledger.collectives == 9 and ledger.bytes == bytes_rounds + frag[2]
    assert (results[0][1] - results[1][1]).abs().max() < 1e-12


@pytest.mark.dist
def test_each_fragment_is_its_own_accounted_collective_on_the_virtual_clock(tinies):
    # 2 fragments, tau 4, delay 1, 8 steps: fragment 0 launched after steps 1, 5 and applied
    # after 2, 6; fragment 1 launched after 3, 7 and applied after 4, 8; then finish() closes
    # the round with one blocking collective per fragment (the whole model, no latency here).
    _, final, ledger, (bytes_rounds, collectives), sizes = tinies[0]["timed"]
    frag_bytes = [8 * sum(s) for s in sizes]
    assert collectives == 4 and bytes_rounds == 2 * sum(frag_bytes)
    durations = [b * 8 / (SLOW_GBPS * 1e9) for b in frag_bytes]  # ring, m = 2, no latency
    # a fragment's all-reduce overlaps one step: that much is hidden, the rest exposed
    hidden = 2 * sum(min(t, STEP_S) for t in durations)
    exposed = 2 * sum(max(0.0, t - STEP_S) for t in durations)
    closing = 8 * final.numel() * 8 / (SLOW_GBPS * 1e9)
    assert max(durations) > STEP_S  # part of a sync is exposed: the case is not trivial
    assert math.isclose(ledger.hidden_s, hidden, rel_tol=1e-9)
    assert math.isclose(ledger.exposed_s, exposed + closing, rel_tol=1e-9)
    assert math.isclose(tinies[0]["timed_clock"], 8 * STEP_S + exposed + closing, rel_tol=1e-9)
    assert tinies[1]["timed_clock"] == tinies[0]["timed_clock"]
    assert ledger.collectives == 6 and ledger.peak_bytes == max(frag_bytes)
