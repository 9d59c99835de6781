"""No avoidable host-device syncs on the hot path (issue 15 item 2), counted on the CPU.

On a GPU every `.item()`, `.tolist()`, `float(tensor)` or `torch.cuda.synchronize()` makes the
host wait for the device's queue, which stalls the pipeline of kernels. Here the calls that would
be syncs on a device are counted (Tensor.item / Tensor.tolist / Tensor.__float__ / __bool__ and
torch.cuda.synchronize wrapped) while every registry algorithm trains a few rounds with 2
in-process workers on the real clock, outside evaluation and `metrics()`. The budget of the
issue: none per step for the gradient methods (sync SGD, PowerSGD, pseudo-sync: the confidence
stays a tensor), at most one per round for the round-based methods (OSP/LOSP: one `.item()` per
receive, the flag its math needs). The virtual clock reads the launch clocks of each collective
(`.tolist()` of the clock tail): its math, and it never runs on a device's hot path in a
measured run. Audit of the rest (algorithms/comm.py, experiments/training/loop.py): the loss is
summed on the device (LossMeter) and read once per evaluation; the progress bar reads it at most
once a second on a terminal; the calibration's timer syncs, once, before training; PowerSGD's
orthogonalisation is one batched QR per shape, its residual norms only with `log_residual`.
"""

from __future__ import annotations

import threading
from collections import Counter

import pytest
import torch

import algorithms
from algorithms.comm import Comm
from experiments.training.loop import forward_backward
from experiments.training.models import TinyCNN
from tests.steps import rank_batches
from tests.workers import run_threads

STEPS, TAU = 8, 2
GRADIENT_METHODS = ("sync_sgd", "powersgd", "pseudo_sync")

_counts: Counter = Counter()
_counting = threading.local()


def _counted(name, fn):
    def wrapper(*args, **kwargs):
        if getattr(_counting, "on", False):
            _counts[(threading.get_ident(), name)] += 1
        return fn(*args, **kwargs)

    return wrapper


@pytest.fixture
def count_syncs(monkeypatch):
    for name in ("item", "tolist", "__float__", "__bool__", "__int__"):
        monkeypatch.setattr(torch.Tensor, name, _counted(name, getattr(torch.Tensor, name)))
    monkeypatch.setattr(torch.cuda, "synchronize", _counted("synchronize", torch.cuda.synchronize))
    _counts.clear()
    return _counts


_INITIAL = None


def _worker(rank: int, group, name: str, out: dict) -> None:
    model = TinyCNN(in_channels=1, num_classes=4, width=4)
    model.load_state_dict(_INITIAL)
    cls = algorithms.REGISTRY[name]
    cfg = algorithms.make_config(name, {})
    opt = cls.local_optimizer(cfg, model, lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.0)
    comm = Comm(group=group)
    algo = cls(model, opt, comm, cfg, tau=TAU)
    batches = [(x.float(), y) for x, y in rank_batches(rank, STEPS)]
    _counting.on = True
    try:
        for t, (x, y) in enumerate(batches):
            forward_backward(model, opt, x, y)  # the training loop's own
            algo.before_step(t)
            opt.step()
            algo.after_step(t)
    finally:
        _counting.on = False
    out[rank] = sum(n for (ident, _), n in _counts.items() if ident == threading.get_ident())


def _train(name: str) -> dict:
    global _INITIAL
    if _INITIAL is None:
        torch.manual_seed(0)
        _INITIAL = TinyCNN(in_channels=1, num_classes=4, width=4).state_dict()
    out: dict = {}
    run_threads(2, lambda r, group: _worker(r, group, name, out))
    return out


@pytest.mark.parametrize("name", sorted(algorithms.REGISTRY))
def test_host_syncs_per_step_and_round(count_syncs, name):
    syncs = _train(name)
    rounds = STEPS // TAU
    for rank, n in syncs.items():
        if name in GRADIENT_METHODS:
            assert n == 0, (name, rank, n)
        else:
            assert n <= rounds, (name, rank, n, dict(count_syncs))
    if name in ("osp", "losp"):  # their receives read a flag: the counter does see syncs
        assert sum(syncs.values()) > 0
