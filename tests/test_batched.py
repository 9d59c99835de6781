"""`cluster.batched=true` (experiments/workers/batched.py): the in-process workers' forward and
backward passes as one pass over stacked replicas (the suite's models grouped by replica, any
other model through vmap), their SGD steps as one update.

- The pass itself: every worker's loss and gradient equal the ones its own replica computes
  alone (float64, 1e-12), for equal and unequal batch shapes, grouped (TinyCNN, ResNet-18)
  and through vmap; its parameters and buffers are
  views of the stacked tensors (the optimizer's update lands there); gradient-ready hooks fire
  once per parameter.
- The optimizer step: one torch SGD update of the stacked tensors leaves every worker where
  its own SGD would (momentum, Nesterov, dampening, weight decay; 1e-12), its state holding
  rows of the stacked buffer; workers whose settings differ step their own; gradients or
  buffers an algorithm or a restore replaced are taken as they are.
- Same trajectories: for every algorithm it serves, a batched run logs the metrics of the same
  run with one thread per worker (tests/test_sim.py's configuration: heterogeneous workers,
  stragglers, a slow network; float64 within 1e-12, float32 the same accuracy curves).
- A batched run stopped and resumed equals the uninterrupted one, and its checkpoint holds
  each worker's own tensors (parameters and momentum buffers), not the stacked ones.
- A worker that raises ends the run at once: the others stop in the batched pass (a hung one
  times out naming it: tests/test_sim.py, with and without batching).
- What it cannot run is a one-line error before the run starts: OSP/LOSP (collectives at
  rank-dependent steps), worker processes.
"""

from __future__ import annotations

import copy
import json
import re
import threading
import time
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import algorithms
from experiments.errors import WorkerFailed
from experiments.training.models import ResNet18, TinyCNN
from experiments.workers.batched import BatchedSteps
from tests.test_sim import DTYPES, assert_same_rows, config, rows, sim_run

ROOT = Path(__file__).resolve().parents[1]
SERVED = sorted(n for n, c in algorithms.REGISTRY.items() if c.checkpoint_anywhere)


def _in_threads(m: int, work) -> list:
    """work(rank) in m threads; their results in rank order (a thread's exception re-raised)."""
    out: list = [None] * m
    errors: list[BaseException] = []

    def run(rank: int) -> None:
        try:
            out[rank] = work(rank)
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(r,)) for r in range(m)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    return out


class VmapOnly(TinyCNN):
    """TinyCNN without the grouped-replicas declaration: the batched pass is torch.func.vmap."""

    replicas_groupable = False


MODELS = {
    "grouped": lambda: TinyCNN(1, 10, width=4),
    "vmap": lambda: VmapOnly(1, 10, width=4),
    # shortcut convolutions, four stages, the linear head (8x8 inputs: a 1x1 last stage)
    "resnet18-grouped": lambda: ResNet18(10, 1, width=2),
}


@pytest.mark.parametrize("sizes", [(8, 8, 8), (8, 5, 8)], ids=["equal", "unequal"])
@pytest.mark.parametrize("kind", list(MODELS))
def test_each_worker_gets_the_loss_and_gradient_of_its_own_replica(sizes, kind):
    """Both batched passes: the m replicas as one grouped model (the suite's models), and
    torch.func.vmap (any other model); a last, partial batch replica by replica."""
    torch.manual_seed(0)
    m = len(sizes)
    replicas = [MODELS[kind]().double() for _ in range(m)]  # different weights
    alone = copy.deepcopy(replicas)
    g = torch.Generator().manual_seed(1)
    batches = [
        (
            torch.randn(n, 1, 8, 8, generator=g, dtype=torch.float64),
            torch.randint(0, 10, (n,), generator=g),
        )
        for n in sizes
    ]
    steps = BatchedSteps(m, timeout_s=60)
    fired = [[] for _ in range(m)]

    def work(rank: int):
        model = replicas[rank]
        model.train()
        steps.adopt(rank, model)
        for p in model.parameters():
            p.register_post_accumulate_grad_hook(lambda p, r=rank: fired[r].append(p))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        x, y = batches[rank]
        loss = steps.forward_backward(rank, model, opt, x, y)
        opt.step()  # in place on the views: the stacked tensors move
        return loss

    losses = _in_threads(m, work)
    for r, (model, ref) in enumerate(zip(replicas, alone, strict=True)):
        ref.train()
        x, y = batches[r]
        loss = F.cross_entropy(ref(x), y)
        loss.backward()
        torch.testing.assert_close(losses[r], loss.detach(), rtol=0, atol=1e-12)
        for (name, p), q in zip(model.named_parameters(), ref.parameters(), strict=True):
            torch.testing.assert_close(p.grad, q.grad, rtol=0, atol=1e-12)
            # the worker's parameter is row r of the stacked one (after its own update)
            assert p.data_ptr() == steps.params[name][r].data_ptr()
            torch.testing.assert_close(p.detach(), (q - 0.1 * q.grad).detach(), rtol=0, atol=1e-12)
        for (name, b), c in zip(model.named_buffers(), ref.buffers(), strict=True):
            assert b.data_ptr() == steps.buffers[name][r].data_ptr()
            torch.testing.assert_close(b, c, rtol=0, atol=1e-12)  # BN statistics moved alike
        assert sorted(map(id, fired[r])) == sorted(map(id, model.parameters()))
    assert (steps._grouped_model(m) is not None) == kind.endswith("grouped")


def test_consecutive_passes_do_not_accumulate_gradients():
    """Two steps in a row with momentum: the trajectory of each replica trained alone (the
    stacked gradient is cleared before each pass, never accumulated)."""
    torch.manual_seed(0)
    m = 2
    replicas = [TinyCNN(1, 10, width=4).double() for _ in range(m)]
    alone = copy.deepcopy(replicas)
    steps = BatchedSteps(m, timeout_s=60)
    g = torch.Generator().manual_seed(2)
    data = [
        [
            (
                torch.randn(n, 1, 8, 8, generator=g, dtype=torch.float64),
                torch.randint(0, 10, (n,), generator=g),
            )
            for n in (6, 6)
        ]
        for _ in range(m)
    ]

    def work(rank: int):
        model = replicas[rank]
        steps.adopt(rank, model)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        for x, y in data[rank]:
            steps.forward_backward(rank, model, opt, x, y)
            opt.step()
        return [p.detach().clone() for p in model.parameters()]

    got = _in_threads(m, work)
    for r, ref in enumerate(alone):
        opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
        for x, y in data[r]:
            opt.zero_grad()
            F.cross_entropy(ref(x), y).backward()
            opt.step()
        for p, q in zip(got[r], ref.parameters(), strict=True):
            torch.testing.assert_close(p, q.detach(), rtol=0, atol=1e-12)


def _sgd_trajectories(m: int, settings: list[dict], between=None, steps_n: int = 3):
    """Each of m workers takes steps_n batched passes, each followed by the loop's batched
    optimizer step with its SGD `settings[rank]` (`between(rank, step, model, opt)` runs in
    between), against each replica trained alone with its own torch SGD. Returns (the batched
    workers' parameters, the replicas' parameters, the BatchedSteps, how many times a worker's
    own optimizer.step ran, the workers' optimizers)."""
    torch.manual_seed(0)
    replicas = [TinyCNN(1, 10, width=4).double() for _ in range(m)]
    alone = copy.deepcopy(replicas)
    steps = BatchedSteps(m, timeout_s=60)
    g = torch.Generator().manual_seed(3)
    data = [
        [
            (
                torch.randn(6, 1, 8, 8, generator=g, dtype=torch.float64),
                torch.randint(0, 10, (6,), generator=g),
            )
            for _ in range(steps_n)
        ]
        for _ in range(m)
    ]
    own_steps, opts = [0] * m, [None] * m

    def work(rank: int):
        model = replicas[rank]
        steps.adopt(rank, model)
        opt = opts[rank] = torch.optim.SGD(model.parameters(), **settings[rank])
        plain = opt.step

        def counted(*a, **k):
            own_steps[rank] += 1
            return plain(*a, **k)

        opt.step = counted
        for i, (x, y) in enumerate(data[rank]):
            steps.forward_backward(rank, model, opt, x, y)
            if between is not None:
                between(rank, i, model, opt)
            steps.optimizer_step(rank, opt)
        return [p.detach().clone() for p in model.parameters()]

    got = _in_threads(m, work)
    want = []
    for r, ref in enumerate(alone):
        opt = torch.optim.SGD(ref.parameters(), **settings[r])
        for i, (x, y) in enumerate(data[r]):
            opt.zero_grad()
            F.cross_entropy(ref(x), y).backward()
            if between is not None:
                between(r, i, ref, opt)
            opt.step()
        want.append([p.detach().clone() for p in ref.parameters()])
    return got, want, steps, own_steps, opts


def _assert_same(got, want):
    for r, (a, b) in enumerate(zip(got, want, strict=True)):
        for p, q in zip(a, b, strict=True):
            torch.testing.assert_close(p, q, rtol=0, atol=1e-12, msg=f"worker {r}")


@pytest.mark.parametrize(
    "settings",
    [
        dict(lr=0.1, momentum=0.9, weight_decay=5e-4),
        dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-3),
        dict(lr=0.1, momentum=0.5, dampening=0.3),
        dict(lr=0.1, weight_decay=1e-3),  # no momentum buffers
    ],
    ids=["momentum", "nesterov", "dampening", "plain"],
)
def test_one_batched_update_equals_each_workers_own_sgd_steps(settings):
    """The loop's optimizer step, batched: one torch SGD update of the stacked tensors leaves
    every worker's parameters where its own optimizer would have, step after step, and its
    optimizer state holds its row of the stacked momentum buffer (views, no copies)."""
    m = 3
    got, want, steps, own_steps, opts = _sgd_trajectories(m, [settings] * m)
    _assert_same(got, want)
    assert own_steps == [0] * m  # no worker stepped on its own
    momentum = settings.get("momentum", 0) != 0
    assert bool(steps.momentum) == momentum
    for r, opt in enumerate(opts):
        for name, p in opt_named(steps, r, opt):
            buf = opt.state[p].get("momentum_buffer")
            if momentum:
                assert buf.data_ptr() == steps.momentum[0, name][r].data_ptr(), name
            else:
                assert buf is None


def opt_named(steps: BatchedSteps, rank: int, opt) -> list:
    names = {id(p): n for n, p in steps._own[rank]}
    return [(names[id(p)], p) for p in opt.param_groups[0]["params"]]


def test_workers_whose_optimizers_differ_each_step_their_own():
    """Settings that differ between workers (one learning rate here): no stacked update can
    stand for the m steps, so each worker steps its own optimizer, with the same result."""
    settings = [dict(lr=0.1, momentum=0.9), dict(lr=0.2, momentum=0.9)]
    got, want, steps, own_steps, _ = _sgd_trajectories(2, settings)
    _assert_same(got, want)
    assert own_steps == [3, 3]
    assert not steps.momentum


def test_gradients_and_buffers_an_algorithm_replaced_are_taken_as_they_are():
    """An algorithm that sets gradient tensors of its own (not rows of the stacked gradient),
    or momentum buffers (a checkpoint's, restored): the batched update stacks what the workers
    hold, and the buffers become rows of the stacked one again."""

    def between(rank, step, model, opt):
        for p in model.parameters():
            p.grad = p.grad * (1 + rank)  # a new tensor
        if step == 1:  # what a restore does: the state's tensors replaced by copies
            opt.load_state_dict(copy.deepcopy(opt.state_dict()))

    settings = dict(lr=0.1, momentum=0.9, weight_decay=5e-4)
    got, want, steps, own_steps, opts = _sgd_trajectories(2, [settings] * 2, between)
    _assert_same(got, want)
    assert own_steps == [0, 0]
    for r, opt in enumerate(opts):
        for name, p in opt_named(steps, r, opt):
            assert opt.state[p]["momentum_buffer"].data_ptr() == (
                steps.momentum[0, name][r].data_ptr()
            )


def cases() -> dict[str, tuple[str, list[str]]]:
    return {
        f"{name}-{dtype}": (name, [f"algorithm={name}", f"dtype={dtype}"])
        for name in SERVED
        for dtype in DTYPES
    }


@pytest.mark.parametrize("label", list(cases()))
def test_a_batched_run_equals_the_run_with_a_thread_per_worker(tmp_path, label):
    name, overrides = cases()[label]
    threads = config("sim", *overrides)
    batched = config("sim", *overrides, "cluster.batched=true")
    assert sim_run(threads, tmp_path / "threads") == "completed"
    assert sim_run(batched, tmp_path / "batched") == "completed"
    assert_same_rows(
        rows(tmp_path / "batched"), rows(tmp_path / "threads"), threads["dtype"], label
    )


def test_a_batched_run_stopped_and_resumed_equals_the_uninterrupted_run(tmp_path):
    pinned = ("algorithm=overlap_local_sgd", "dtype=float64", "cluster.batched=true")
    full = config("sim", *pinned)
    cut = config("sim", *pinned, "checkpoint.simulate_signal_at_step=5")
    assert sim_run(full, tmp_path / "full") == "completed"
    assert sim_run(cut, tmp_path / "cut") != "completed"
    # each worker's file holds its own tensors: as many values as the model, not m times
    latest = json.loads((tmp_path / "cut" / "checkpoint" / "latest.json").read_text())
    assert latest["step"] > 0
    state = torch.load(
        next((tmp_path / "cut" / "checkpoint").glob("**/rank1*")), weights_only=False
    )
    for name, t in state["model"].items():
        assert t.untyped_storage().nbytes() == t.numel() * t.element_size(), name
    buffers = [s["momentum_buffer"] for s in state["optimizer"]["state"].values()]
    assert buffers  # the stacked momentum buffers' rows, copied out
    for t in buffers:
        assert t.untyped_storage().nbytes() == t.numel() * t.element_size()
    assert sim_run(cut, tmp_path / "cut") == "completed"
    assert rows(tmp_path / "cut") == rows(tmp_path / "full")


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["cluster=sim", "algorithm=osp"], r"osp starts its collectives at rank-dependent steps"),
        (["cluster=sim", "algorithm=losp"], r"losp starts its collectives at rank-dependent steps"),
        (["cluster=local"], r"cluster\.batched=true .* needs cluster\.in_process=true"),
        (
            ["cluster=sim", "cluster.batched=sometimes"],
            r"cluster\.batched must be auto, true or false",
        ),
    ],
    ids=["osp", "losp", "processes", "bad-value"],
)
def test_what_batched_cannot_run_is_a_one_line_error(tmp_path, overrides, message):
    from tests.cli import run_py_here  # run.py in this process: refused before any worker

    done = run_py_here(
        "scale=smoke",
        "dataset=synthetic",
        "wandb.mode=disabled",
        "cluster.batched=true",
        f"out_root={tmp_path}",
        *overrides,  # a later cluster.batched wins
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and re.match(r"^error: " + ".*" + message, lines[0]), lines
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    "value, workers, device, algorithm, expected",
    [
        ("auto", 4, "cpu", "local_sgd", False),  # threads are faster at 4 on a CPU
        ("auto", 16, "cpu", "local_sgd", True),
        ("auto", 16, "cpu", "osp", False),  # rank-dependent steps: threads
        ("auto", 4, "cuda", "local_sgd", True),
        ("auto", 1, "cuda", "local_sgd", False),  # nothing to batch
        ("true", 2, "cpu", "local_sgd", True),
        (True, 2, "cpu", "local_sgd", True),  # YAML's boolean, as an override writes it
        ("false", 16, "cuda", "local_sgd", False),
    ],
)
def test_auto_batches_where_it_pays_and_the_algorithm_allows(
    value, workers, device, algorithm, expected
):
    from experiments.workers.batched import wanted

    cfg = {"cluster": {"batched": value, "in_process": True}, "workers": workers}
    assert wanted(cfg, algorithms.REGISTRY[algorithm], torch.device(device)) is expected


def test_a_raising_batched_worker_ends_the_run_at_once_naming_its_rank(tmp_path, monkeypatch):
    """The others wait for it in the batched pass: they stop there, not after dist_timeout_s."""
    monkeypatch.setenv("COMMSGD_INJECT_FAULT", "1:7:raise")
    # a timeout far beyond the test's patience: only the abort can end the others' wait
    cfg = config(
        "sim", "algorithm=local_sgd", "epochs=50", "cluster.batched=true", "dist_timeout_s=300"
    )
    started = time.monotonic()
    with pytest.raises(WorkerFailed) as failed:
        sim_run(cfg, tmp_path / "run")
    assert str(failed.value).startswith(
        "worker 1 (rank 1) failed: RuntimeError: injected fault at step 7"
    ), failed.value
    deadline = started + 60
    while [t for t in threading.enumerate() if t.name.startswith("commsgd-worker-")]:
        assert time.monotonic() < deadline
        time.sleep(0.05)
