"""OSP and LOSP (algorithms.md section 7, the suite's interpretation [I]): the compensation
rule on hand-computed tensors, the round/window rule on a one-parameter model with constant
gradients, identity 4 (empty window = local_sgd), consensus after finish() when the ranks'
windows differ, the collective drain, bytes, state_dict round trip and bad config values."""

from __future__ import annotations

import copy

import pytest
import torch

from algorithms.comm import Comm
from algorithms.local_sgd import LocalSGD
from algorithms.losp import LOSP
from algorithms.losp import Config as LOSPConfig
from algorithms.osp import OSP, compensate
from algorithms.osp import Config as OSPConfig
from experiments.training.models import TinyCNN
from tests.steps import flat_params, hook_steps, rank_batches

# ---------------------------------------------------------------------------- pure functions


def test_compensate_by_hand():
    w_old = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64)
    w_new = torch.tensor([0.5, -1.0, 0.5], dtype=torch.float64)
    a = torch.tensor([0.2, -0.4, 3.0], dtype=torch.float64)  # descent-positive progress
    assert torch.equal(compensate(w_new, w_old, a, "none"), w_new)
    # delta: x = w_new - A
    expected = torch.tensor([0.3, -0.6, -2.5], dtype=torch.float64)
    assert torch.allclose(compensate(w_new, w_old, a, "delta"), expected, atol=1e-15)
    # gradient, lam = 0.5: A + lam*A*A*(w_new - w_old)
    #   [0.2 + 0.5*0.04*(-0.5), -0.4 + 0.5*0.16*1, 3 + 0.5*9*0] = [0.19, -0.32, 3]
    expected = w_new - torch.tensor([0.19, -0.32, 3.0], dtype=torch.float64)
    got = compensate(w_new, w_old, a, "gradient", lam=0.5)
    assert torch.allclose(got, expected, atol=1e-15)
    # lam = 0 is delta; the result is a new tensor, the inputs are untouched
    assert torch.equal(compensate(w_new, w_old, a, "gradient", lam=0.0), w_new - a)
    assert compensate(w_new, w_old, a, "none").data_ptr() != w_new.data_ptr()
    assert torch.equal(w_new, torch.tensor([0.5, -1.0, 0.5], dtype=torch.float64))
    with pytest.raises(ValueError, match="delta, none, gradient"):
        compensate(w_new, w_old, a, "both")


def test_config_defaults_and_bad_values():
    assert OSPConfig() == OSPConfig(max_overlap_steps=None, server_lr=1.0)
    assert LOSPConfig() == LOSPConfig(None, 1.0, "delta", 0.04)
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    assert OSP(model, opt, None, OSPConfig(), tau=3).max_overlap_steps == 12  # None -> 4*tau
    assert LOSP(model, opt, None, LOSPConfig(max_overlap_steps=0), tau=3).max_overlap_steps == 0
    for bad in (-1, 1.5, True, "4"):
        with pytest.raises(ValueError, match="max_overlap_steps must be an integer >= 0"):
            OSPConfig(max_overlap_steps=bad)
    for bad in (0, -0.1, float("nan"), "1"):
        with pytest.raises(ValueError, match="server_lr must be a number > 0"):
            LOSPConfig(server_lr=bad)
    with pytest.raises(ValueError, match="compensation must be one of delta, none, gradient"):
        LOSPConfig(compensation="dc")
    for bad in (-0.01, float("nan")):
        with pytest.raises(ValueError, match="lam must be a number >= 0"):
            LOSPConfig(lam=bad)


def test_yaml_keys_equal_config_fields():
    import dataclasses
    from pathlib import Path

    import yaml

    conf = Path(__file__).resolve().parents[1] / "conf" / "algorithm"
    for name, cls in (("osp", OSPConfig), ("losp", LOSPConfig)):
        node = yaml.safe_load((conf / f"{name}.yaml").read_text())
        assert node.pop("name") == name
        # the schema that types the node (experiments/config/schema.py), then the file's own values
        assert node.pop("defaults") == [f"/schema/algorithm/{name}@_here_", "_self_"]
        assert node == dataclasses.asdict(cls())


# -------------------------------------------------- deterministic arrival for the tests below


class _Fixed:
    """Test-only: the aggregate 'arrives' after exactly `window` window steps (None: never, so
    the worker waits after max_overlap_steps), independent of the machine's timing."""

    window: int | None = None

    def arrived(self) -> bool:
        return self.window is not None and self.num_window_steps >= self.window


class FixedOSP(_Fixed, OSP):
    pass


class FixedLOSP(_Fixed, LOSP):
    pass


class _Scalar(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.p = torch.nn.Parameter(torch.zeros(1, dtype=torch.float64))


def _hand_case(cls, options: dict, g: float):
    """x_0 = 0, loss = g * x (constant gradient g), plain SGD with eta = 0.25, tau = 2, every
    window exactly one step, 6 loop steps then finish(). Records x, A and w after each step."""
    model = _Scalar()
    opt = torch.optim.SGD(model.parameters(), lr=0.25)
    comm = Comm()
    algo = cls(model, opt, comm, cls.Config(max_overlap_steps=8, **options), tau=2)
    algo.window = 1
    trace = []
    for t in range(6):
        opt.zero_grad()
        (g * model.p).sum().backward()
        algo.before_step(t)
        opt.step()
        algo.after_step(t)
        a = algo.base[0] - model.p.detach()
        trace.append((model.p.item(), a.item(), algo.global_model[0].item(), algo.num_pushes))
    metrics = algo.metrics()
    algo.finish()
    return trace, model.p.item(), metrics, comm.ledger, algo.num_pushes


def _hand_cases(rank: int, world_size: int):
    g = (1.0, 3.0)[rank]  # mean gradient 2
    return {
        "osp": _hand_case(FixedOSP, {}, g),
        "delta": _hand_case(FixedLOSP, {}, g),
        "gradient": _hand_case(FixedLOSP, {"compensation": "gradient", "lam": 0.5}, g),
        "none": _hand_case(FixedLOSP, {"compensation": "none"}, g),
    }


# Shared by every mode (constant gradients: A and w do not depend on the compensation).
# Step 1 ends round 1's tau steps: push A = 0.5g (mean 1.0), A = 0; step 2 is the window
# (A = 0.25g), then w_1 = 0 - 1.0 arrives. Steps 3-4: A = 0.75g is pushed (mean 1.5, the window's
# 0.25g included); step 5 is the window again and w_2 = -1.0 - 1.5 = -2.5 arrives (-2.0 had the
# window progress been lost). finish() pushes the last A = 0.25g (mean 0.5): w_3 = -3.0 = x.
_A = {1: 0.0, 2: 0.25, 4: 0.0, 5: 0.25}  # in units of g, after step t
_W = {1: 0.0, 2: -1.0, 4: -1.0, 5: -2.5}
_X = {  # x after steps 1, 2, 4 and 5 on ranks 0 (g=1) and 1 (g=3)
    # OSP: x = w_{r+1}; the window progress leaves x
    "osp": {1: (-0.5, -1.5), 2: (-1.0, -1.0), 4: (-1.5, -2.5), 5: (-2.5, -2.5)},
    "none": {1: (-0.5, -1.5), 2: (-1.0, -1.0), 4: (-1.5, -2.5), 5: (-2.5, -2.5)},
    # delta: x = w_{r+1} - A
    "delta": {1: (-0.5, -1.5), 2: (-1.25, -1.75), 4: (-1.75, -3.25), 5: (-2.75, -3.25)},
    # gradient, lam 0.5: x = w - (A + 0.5*A*A*(w - w_old)), A = 0.25g
    #   step 2: -1 - 0.25g + 0.03125g^2 ; step 5: -2.5 - 0.25g + 0.046875g^2
    "gradient": {
        1: (-0.5, -1.5),
        2: (-1.21875, -1.46875),
        4: (-1.71875, -2.96875),
        5: (-2.703125, -2.828125),
    },
}


@pytest.mark.dist
def test_window_progress_dropped_by_osp_reapplied_by_losp_by_hand():
    from tests.workers import run_workers

    results = run_workers(_hand_cases, 2)
    for mode, expected_x in _X.items():
        for rank, g in enumerate((1.0, 3.0)):
            trace, final, metrics, ledger, pushes = results[rank][mode]
            for t in _A:
                x, a, w, _ = trace[t]
                assert a == _A[t] * g and w == _W[t], (mode, rank, t)
                assert x == expected_x[t][rank], (mode, rank, t, x)
            assert [step[3] for step in trace] == [0, 1, 1, 1, 2, 2]
            assert final == -3.0  # consensus: the global model with every push in it
            # two rounds of tau + 1 window steps, then the closing push of finish()
            assert metrics == {"local_steps": 3.0, "window_steps": 1.0}
            assert pushes == 3 and ledger.collectives == 3
            assert ledger.bytes == 3 * (1 + 1) * 8  # one parameter + the control value, float64


# ------------------------------------------------- identity 4, uneven windows, drain, round trip


def _tiny():
    torch.manual_seed(0)
    model = TinyCNN(in_channels=1, num_classes=4, width=4).double()
    opt = torch.optim.SGD(
        model.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-4
    )
    return model, opt


def _batches(rank: int, steps: int):
    """This file's labels come from the global RNG (not the rank's generator)."""
    return rank_batches(rank, steps, global_labels=True)


def _identity_runs(rank: int, world_size: int, steps: int):
    out = {}
    for tau in (2, 3):
        variants = {
            "local_sgd": (LocalSGD, LocalSGD.Config()),
            "osp": (OSP, OSPConfig(max_overlap_steps=0)),
            "losp_delta": (LOSP, LOSPConfig(max_overlap_steps=0)),
            "losp_none": (LOSP, LOSPConfig(max_overlap_steps=0, compensation="none")),
            "losp_gradient": (
                LOSP,
                LOSPConfig(max_overlap_steps=0, compensation="gradient", lam=0.5),
            ),
        }
        for name, (cls, cfg) in variants.items():
            model, opt = _tiny()
            algo = cls(model, opt, Comm(), cfg, tau=tau)
            losses, params = hook_steps(algo, model, opt, _batches(rank, steps))
            algo.finish()
            out[tau, name] = (losses, params, flat_params(model))
    return out


@pytest.mark.dist
def test_empty_window_equals_local_sgd():
    """Identity 4 of algorithms.md section 11 with the window forced empty (on the virtual clock
    with network=ideal it holds too: tests/test_timing.py); 11 steps: the last round is cut by
    finish()."""
    from tests.workers import run_workers

    steps = 11
    results = run_workers(_identity_runs, 2, steps)
    for rank in range(2):
        for tau in (2, 3):
            ref_losses, ref_params, ref_final = results[rank][tau, "local_sgd"]
            for name in ("osp", "losp_delta", "losp_none", "losp_gradient"):
                losses, params, final = results[rank][tau, name]
                assert max(abs(a - b) for a, b in zip(losses, ref_losses, strict=True)) < 1e-10
                for a, b in zip(params, ref_params, strict=True):
                    assert (a - b).abs().max().item() < 1e-10, (rank, tau, name)
                assert (final - ref_final).abs().max().item() < 1e-10
    # not trivially constant, and the replicas only agree right after a round
    assert abs(results[0][2, "osp"][0][0] - results[0][2, "osp"][0][-1]) > 1e-3
    assert (results[0][3, "losp_delta"][1][3] - results[1][3, "losp_delta"][1][3]).abs().max() > 0


def _protocol_runs(rank: int, world_size: int):
    out = {}
    numel = flat_params(_tiny()[0]).numel()

    # (a) uneven windows: the aggregate never 'arrives' early, rank 0 waits at once (W = 0),
    # rank 1 takes 3 window steps per round; 10 steps, tau 2. Rank 0 makes 5 round pushes,
    # rank 1 only 2, so rank 1's finish() answers rank 0's pushes 3-5 before the flag push 6.
    model, opt = _tiny()
    comm = Comm()
    algo = FixedLOSP(model, opt, comm, LOSPConfig(max_overlap_steps=(0, 3)[rank]), tau=2)
    hook_steps(algo, model, opt, _batches(rank, 10))
    algo.finish()
    out["uneven"] = (flat_params(model), algo.num_pushes, algo.num_rounds, comm.ledger, numel)

    # (b) the same with a drain() and an evaluation-style scalar collective after step 5, where
    # rank 0 waits for push 2 that rank 1 makes only after step 6
    model, opt = _tiny()
    comm = Comm()
    algo = FixedOSP(model, opt, comm, OSPConfig(max_overlap_steps=(0, 3)[rank]), tau=2)
    seen = {}

    def drain_and_eval(t):
        if t == 5:
            algo.drain()
            seen["pending"] = algo.pending
            seen["pushes"] = algo.num_pushes
            seen["sum"] = comm.sum_scalars([rank + 1.0])

    hook_steps(algo, model, opt, _batches(rank, 10), on_after_step=drain_and_eval)
    algo.finish()
    out["drain"] = (flat_params(model), seen, algo.num_pushes, comm.ledger)

    # (c) real arrival (Work.is_completed) with rank 1 slowed down: the windows follow the
    # machine; a drain + scalar collective mid-run, then finish()
    model, opt = _tiny()
    comm = Comm()
    algo = OSP(model, opt, comm, OSPConfig(), tau=2)
    seen = {}

    def drain_mid(t):
        if t == 11:
            algo.drain()
            seen["sum"] = comm.sum_scalars([1.0])
            seen["metrics"] = algo.metrics()

    hook_steps(
        algo, model, opt, _batches(rank, 24), sleep_s=(0.0, 0.004)[rank], on_after_step=drain_mid
    )
    algo.finish()
    out["real"] = (flat_params(model), seen, algo.num_pushes, comm.ledger)

    # (d) state_dict round trip mid-round (5 steps, tau 2, one-step windows): a fresh object on
    # a copy of the model and optimizer continues exactly like the original
    batches = _batches(rank, 10)
    model, opt = _tiny()
    cfg = LOSPConfig(compensation="gradient", lam=0.5)
    algo = FixedLOSP(model, opt, Comm(), cfg, tau=2)
    algo.window = 1
    hook_steps(algo, model, opt, batches[:5])
    with pytest.raises(RuntimeError, match="drain"):  # a push may be in flight: no snapshot
        algo._push([torch.zeros_like(p) for p in algo.params], regular=False)
        algo.state_dict()
    with pytest.raises(RuntimeError, match="drain"):  # ... and no evaluation of w
        algo.eval_model()
    algo._receive()
    algo.drain()  # where the loop checkpoints OSP/LOSP: after a drain on every rank
    evaluated = algo.eval_model()  # where the loop evaluates: w, with this worker's BN buffers
    out["evaluated"] = (
        flat_params(evaluated),
        torch.cat([w.reshape(-1) for w in algo.global_model]),
        flat_params(model),
        all(torch.equal(a, b) for a, b in zip(evaluated.buffers(), model.buffers(), strict=True)),
        algo.eval_needs_fresh_bn(),
    )
    state = algo.state_dict()
    model2, opt2 = copy.deepcopy(model), None
    opt_state = copy.deepcopy(opt.state_dict())
    _, original = hook_steps(algo, model, opt, batches[5:], first_t=5)
    opt2 = torch.optim.SGD(
        model2.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-4
    )
    opt2.load_state_dict(opt_state)
    algo2 = FixedLOSP(model2, opt2, Comm(), cfg, tau=2)
    algo2.window = 1
    algo2.load_state_dict(state)
    _, resumed = hook_steps(algo2, model2, opt2, batches[5:], first_t=5)
    out["round_trip"] = (original, resumed, sorted(state))
    return out


@pytest.mark.dist
def test_finish_drain_consensus_bytes_and_round_trip_with_uneven_windows():
    from tests.workers import run_workers

    r0, r1 = run_workers(_protocol_runs, 2)

    # (a) finish() completes, identical parameters, identical push sequences
    (x0, p0, n0, l0, numel), (x1, p1, n1, l1, _) = r0["uneven"], r1["uneven"]
    assert torch.equal(x0, x1)
    assert (p0, p1) == (6, 6) and (n0, n1) == (5, 2)
    for ledger in (l0, l1):  # one collective per push: the model plus one control value
        assert ledger.collectives == 6 and ledger.bytes == 6 * (numel + 1) * 8

    # (b) drain() leaves nothing in flight and equal push counts, so the scalar collective
    # after it matches across ranks
    (x0, s0, p0, l0), (x1, s1, p1, l1) = r0["drain"], r1["drain"]
    assert s0["pending"] is None and s1["pending"] is None
    assert s0["pushes"] == s1["pushes"] and s0["sum"] == s1["sum"] == [3.0]
    assert torch.equal(x0, x1) and p0 == p1
    assert l0.collectives == l1.collectives == p0

    # (c) real timing: whatever the windows were, the ranks end together and agree
    (x0, s0, p0, l0), (x1, s1, p1, l1) = r0["real"], r1["real"]
    assert torch.equal(x0, x1) and torch.isfinite(x0).all()
    assert p0 == p1 and l0.collectives == l1.collectives == p0
    assert s0["sum"] == s1["sum"] == [2.0]
    for metrics in (s0["metrics"], s1["metrics"]):
        assert set(metrics) == {"local_steps", "window_steps"}
        assert metrics["local_steps"] == pytest.approx(2 + metrics["window_steps"])
        assert 0 <= metrics["window_steps"] <= 8  # max_overlap_steps = 4 * tau

    # the evaluated model is the parameter-server model w (the same on both ranks after the
    # drain), not the local model x = w - A that LOSP holds; BN buffers: this worker's
    (e0, w0, x0, own0, fresh0), (e1, w1, x1, own1, _) = r0["evaluated"], r1["evaluated"]
    assert torch.equal(e0, w0) and torch.equal(e1, w1) and torch.equal(w0, w1)
    assert (x0 - w0).abs().max() > 1e-6 and (x1 - w1).abs().max() > 1e-6
    assert own0 and own1 and not fresh0

    # (d) state_dict -> fresh object -> load_state_dict -> the same next steps
    for r in (r0, r1):
        original, resumed, keys = r["round_trip"]
        assert keys == sorted((*OSP.state, "inflight"))
        for a, b in zip(original, resumed, strict=True):
            assert torch.equal(a, b)


# ------------------------------------------------- the time budget's w as it stood at t (model_at)


def _model_at_case(rank: int, world_size: int):
    """x_0 = 0, loss g * x, SGD eta 0.25, tau 1; rank 1 three times slower (steps of 0.25 and
    0.75 s) and a push taking 0.1 s: the first round's aggregate completes at 0.75 + 0.1.
    Rank 0 asks for w at 0.8 and 0.9 right after its first step (its clock at 0.25), long
    before it receives anything."""
    from experiments.training.clock import Compute, Network, VirtualClock

    model = _Scalar()
    opt = torch.optim.SGD(model.parameters(), lr=0.25)
    clock = VirtualClock(rank, Network(latency_s=0.05), Compute(step_time_s=0.25, slowdown=(1, 3)))
    comm = Comm(clock=clock)
    algo = OSP(model, opt, comm, OSP.Config(max_overlap_steps=8), tau=1)
    g = (1.0, 3.0)[rank]
    seen = {}
    for t in range(3 if rank == 0 else 1):
        opt.zero_grad()
        (g * model.p).sum().backward()
        clock.local_step(t, 0.0)
        opt.step()
        algo.after_step(t)
        if rank == 0 and t == 0:
            exposed, now = comm.ledger.exposed_s, clock.now()
            seen = {
                "at_0.8": algo.model_at(0.8).p.item(),
                "at_0.9": algo.model_at(0.9).p.item(),
                "w": algo.global_model[0].item(),
                "untouched": (algo.pending is not None, comm.ledger.exposed_s == exposed,
                              clock.now() == now),
            }  # fmt: skip
    algo.finish()
    return seen, algo.global_model[0].item()


@pytest.mark.dist
def test_model_at_t_holds_every_aggregate_completed_by_t_received_or_not():
    from tests.workers import run_workers

    (seen, final), _ = run_workers(_model_at_case, 2)
    # pushed: A = 0.25 (rank 0) and 0.75 (rank 1), mean 0.5: w_1 = -0.5, complete at 0.85
    assert seen["w"] == 0.0  # not received yet on rank 0 (its clock is at 0.25)
    assert seen["at_0.8"] == 0.0 and seen["at_0.9"] == -0.5
    assert seen["untouched"] == (True, True, True)  # nothing waited, nothing accounted
    assert final < -0.5  # finish() received it, then pushed the windows' progress
