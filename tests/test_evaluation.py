"""Evaluation (experiments/training/evaluate.py, the loop's evaluation points): fresh BatchNorm
statistics
for an eval model no worker trained (EASGD's centre), drawn on a fixed set of training batches
without touching the training's RNG; and the last evaluation's local accuracy taken before
finish() (issue 13 items 3 and 4)."""

from __future__ import annotations

import copy

import pytest
import torch
from torch.utils.data import DataLoader, Dataset, TensorDataset

from algorithms.base import Algorithm
from algorithms.comm import Comm
from algorithms.easgd import EAMSGD
from algorithms.easgd import Config as EASGDConfig
from algorithms.local_sgd import LocalSGD
from experiments.training.evaluate import (
    consensus_copy,
    evaluate,
    fixed_batches,
    loss_and_correct,
    recompute_bn_,
    scratch_copy,
)
from experiments.training.models import TinyCNN
from tests.steps import hook_steps, prototype_batches

D = torch.float64


class _Augmented(Dataset):
    """x + noise drawn from torch's global RNG at every access (a random augmentation)."""

    def __init__(self, n: int):
        self.x = torch.arange(n, dtype=D).view(n, 1)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int):
        return self.x[i] + torch.rand(1, dtype=D), 0


def test_fixed_batches_are_fixed_and_leave_the_training_rng_alone():
    data = _Augmented(50)
    torch.manual_seed(123)
    before = torch.get_rng_state()
    a = fixed_batches(data, batch_size=8, num_batches=4, seed=0)
    assert torch.equal(torch.get_rng_state(), before)  # the training's stream is untouched
    b = fixed_batches(data, batch_size=8, num_batches=4, seed=0)
    assert [x.shape for x in a] == [(8, 1)] * 4
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))  # the same set every time
    ids = torch.cat(a).floor().long().flatten()
    assert len(set(ids.tolist())) == 32  # drawn without replacement ...
    assert ids.tolist() != sorted(ids.tolist())  # ... in a random order, not the shard's
    c = fixed_batches(data, batch_size=8, num_batches=4, seed=1)
    assert not torch.equal(torch.cat(a), torch.cat(c))
    # a shard with fewer samples: its whole batches; smaller than one batch: one batch of it all
    assert [x.shape[0] for x in fixed_batches(data, batch_size=8, num_batches=20)] == [8] * 6
    assert [x.shape[0] for x in fixed_batches(_Augmented(5), batch_size=8)] == [5]


def test_recompute_bn_is_the_average_over_the_batches():
    torch.manual_seed(0)
    model = TinyCNN(1, 4, width=4).double()
    model.eval()  # the mode is kept
    conv, bn = model.features[0], model.features[1]
    with torch.no_grad():
        bn.running_mean.fill_(5.0)  # stale statistics, e.g. of other weights
        bn.running_var.fill_(9.0)
    gen = torch.Generator().manual_seed(1)
    batches = [torch.randn(6, 1, 8, 8, generator=gen, dtype=D) for _ in range(3)]
    params = copy.deepcopy([p.detach() for p in model.parameters()])
    recompute_bn_(model, batches, torch.device("cpu"), D)
    with torch.no_grad():
        acts = [conv(x) for x in batches]
    means = torch.stack([a.mean(dim=(0, 2, 3)) for a in acts])
    variances = torch.stack([a.var(dim=(0, 2, 3), unbiased=True) for a in acts])
    assert torch.allclose(bn.running_mean, means.mean(0), atol=1e-12, rtol=0)
    assert torch.allclose(bn.running_var, variances.mean(0), atol=1e-12, rtol=0)
    assert bn.momentum == 0.1 and not model.training
    assert all(torch.equal(a, b) for a, b in zip(params, model.parameters(), strict=True))


# ---- on real gloo workers --------------------------------------------------------------------


def _tiny(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return TinyCNN(1, 4, width=4).double()


def _test_data(n: int = 64) -> TensorDataset:
    batches = prototype_batches(rank=99, steps=n // 8, noise=1.5)
    return TensorDataset(torch.cat([x for x, _ in batches]), torch.cat([y for _, y in batches]))


def _centre_evaluation(rank: int, world_size: int) -> dict:
    """EAMSGD (its local models pulled apart from the centre by alpha) after 12 steps: the loop's
    evaluate() with fresh BN statistics, with the workers' averaged buffers, and the pieces an
    independent computation needs."""
    model = _tiny()
    cfg = EASGDConfig(alpha=0.3)
    opt = EAMSGD.local_optimizer(cfg, model, lr=0.1, momentum=0.9, nesterov=True, weight_decay=0)
    comm = Comm()
    algo = EAMSGD(model, opt, comm, cfg, tau=3)
    hook_steps(algo, model, opt, prototype_batches(rank, 12, noise=1.5))
    assert algo.eval_needs_fresh_bn()
    test = _test_data()
    full = DataLoader(test, batch_size=16)
    shard = DataLoader(torch.utils.data.Subset(test, range(rank, len(test), world_size)), 16)
    xs, ys = zip(*prototype_batches(rank, 5, noise=1.5), strict=True)
    train = TensorDataset(torch.cat(xs), torch.cat(ys))
    batches = fixed_batches(train, batch_size=8, num_batches=3)
    buffers_before = [b.clone() for b in model.buffers()]
    cpu = torch.device("cpu")
    fresh = evaluate(model, algo.eval_model(), comm, shard, cpu, D, bn_batches=batches)
    stale = evaluate(model, algo.eval_model(), comm, shard, cpu, D)
    full_counts = loss_and_correct(model, full, cpu, D)
    last = evaluate(model, algo.eval_model(), comm, shard, cpu, D, local_counts=full_counts)
    untouched = all(torch.equal(a, b) for a, b in zip(buffers_before, model.buffers(), strict=True))
    centre = algo.eval_model()
    recompute_bn_(centre, batches, cpu, D)
    return {
        "fresh": fresh,
        "stale": stale,
        "last": last,
        "centre_state": copy.deepcopy(centre.state_dict()),
        "own_buffers_untouched": untouched,
        "shard_counts": loss_and_correct(model, shard, cpu, D),
        "full_counts": full_counts,
    }


@pytest.mark.dist
def test_centre_is_evaluated_with_statistics_recomputed_on_it():
    from tests.workers import run_workers

    results = run_workers(_centre_evaluation, 2)
    # the independent computation: the centre with each worker's recomputed statistics,
    # parameters and float buffers averaged over the workers, on the whole test set
    states = [r["centre_state"] for r in results]
    expected_model = _tiny()
    avg = {
        k: (sum(s[k] for s in states) / len(states)) if v.is_floating_point() else v
        for k, v in states[0].items()
    }
    expected_model.load_state_dict(avg)
    loss, correct, count = loss_and_correct(
        expected_model, DataLoader(_test_data(), batch_size=16), torch.device("cpu"), D
    )
    for r in results:
        assert r["fresh"]["test/acc"] == pytest.approx(correct / count, abs=1e-12)
        assert r["fresh"]["test/loss"] == pytest.approx(loss / count, abs=1e-12)
        assert r["fresh"]["test/loss"] != pytest.approx(r["stale"]["test/loss"], abs=1e-6)
        assert r["fresh"]["test/acc_local"] == r["stale"]["test/acc_local"]
        assert r["own_buffers_untouched"]  # the training model's BN buffers are not touched
    # before the last evaluation: each local model on its own shard, the counts pooled
    correct = sum(r["shard_counts"][1] for r in results)
    count = sum(r["shard_counts"][2] for r in results)
    assert count == len(_test_data())  # the shards cover the test set once
    assert results[0]["fresh"]["test/acc_local"] == pytest.approx(correct / count, abs=1e-12)
    # the last: each local model on the whole test set, the accuracies averaged
    acc_local = sum(r["full_counts"][1] / r["full_counts"][2] for r in results) / 2
    assert results[0]["last"]["test/acc_local"] == pytest.approx(acc_local, abs=1e-12)
    assert results[0]["last"]["test/acc_local"] != pytest.approx(correct / count, abs=1e-6)


class _ScrambleAtFinish(LocalSGD):
    """Local SGD whose finish() records the local model's test counts, then replaces the model by
    zeros: the consensus after finish() is then a constant predictor, unlike the local models."""

    def finish(self) -> None:
        self.counts_before_finish = loss_and_correct(
            self.model, self.test_full, torch.device("cpu"), D
        )
        with torch.no_grad():
            for p in self.params:
                p.zero_()


def _train_then_scramble(rank: int, world_size: int) -> dict:
    from experiments.training.clock import Compute, Network, RealClock
    from experiments.training.loop import LoopSettings, train
    from experiments.training.schedule import Schedule

    model = _tiny()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True)
    comm = Comm(clock=RealClock(rank, Network(), Compute(None, (1.0,) * world_size)))
    algo = _ScrambleAtFinish(model, opt, comm, LocalSGD.Config(), tau=100)  # never averages
    xs, ys = zip(*prototype_batches(rank, 6, noise=1.5), strict=True)
    train_loader = DataLoader(TensorDataset(torch.cat(xs), torch.cat(ys)), batch_size=8)
    test = _test_data()
    algo.test_full = DataLoader(test, batch_size=16)
    shard = DataLoader(torch.utils.data.Subset(test, range(rank, len(test), world_size)), 16)
    rows = []

    class Sink:
        def log(self, row, step):
            rows.append(dict(row))

    settings = LoopSettings(
        epochs=2,
        eval_every=1,
        schedule=Schedule(0.1, 8, world_size, 2, warmup_epochs=0, lr_decay_at=(), lr_decay=1),
        dtype=D,
        progress=False,
    )
    cpu = torch.device("cpu")
    summary = train(algo, comm, train_loader, algo.test_full, shard, cpu, settings, Sink())
    labels = test.tensors[1]
    return {
        "summary": summary,
        "rows": rows,
        "before": algo.counts_before_finish,
        "class0": (labels == 0).double().mean().item(),
    }


@pytest.mark.dist
def test_final_local_accuracy_is_taken_before_finish():
    from tests.workers import run_workers

    results = run_workers(_train_then_scramble, 2)
    local = sum(r["before"][1] / r["before"][2] for r in results) / 2
    for r in results:
        summary, last = r["summary"], r["rows"][-1]
        assert summary["final/test_acc_local"] == pytest.approx(local, abs=1e-12)
        assert last["test/acc_local"] == summary["final/test_acc_local"]
        # the consensus after finish(): all-zero weights predict class 0 everywhere
        assert summary["final/test_acc"] == pytest.approx(r["class0"], abs=1e-12)
        # the local models before finish() are not that constant predictor (after finish()
        # they are: before issue 13 the summary held its accuracy)
        assert summary["final/test_acc_local"] != pytest.approx(r["class0"], abs=1e-3)
        assert summary["time/eval_s"] > 0


def test_every_eval_model_that_is_not_a_worker_model_asks_for_fresh_statistics():
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    assert not Algorithm(model, opt, None, Algorithm.Config()).eval_needs_fresh_bn()
    comm = type("C", (), {"world_size": 4})()
    assert EAMSGD(model, opt, comm, EASGDConfig(), tau=2).eval_needs_fresh_bn()
    assert not EAMSGD(model, opt, comm, EASGDConfig(centre_bn="average"), 2).eval_needs_fresh_bn()
    with pytest.raises(ValueError, match="centre_bn must be one of recompute, average"):
        EASGDConfig(centre_bn="fresh")


def test_the_evaluation_copy_is_kept_and_always_holds_the_model_s_current_values():
    """`scratch_copy` (the consensus is computed on it): one copy per evaluated module, reused,
    with every parameter, buffer and the training mode of the model as it is now; a module
    whose tensors changed shape gets a new copy; the model itself is never touched."""
    torch.manual_seed(0)
    model = TinyCNN(1, 10, width=4).to(D)
    first = scratch_copy(model)
    assert first is not model
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.fill_(3.0)
            m.num_batches_tracked.fill_(5)
    model.eval()
    second = scratch_copy(model)
    assert second is first and not second.training
    for a, b in zip(second.state_dict().values(), model.state_dict().values(), strict=True):
        assert torch.equal(a, b) and a.data_ptr() != b.data_ptr()
    before = copy.deepcopy(model.state_dict())
    from algorithms.group import ThreadGroup

    (alone,) = ThreadGroup.create(1, 30.0)
    averaged = consensus_copy(model, Comm(group=alone))  # one worker: the average is the model
    assert averaged is first
    for a, b in zip(model.state_dict().values(), before.values(), strict=True):
        assert torch.equal(a, b)
    model.linear = torch.nn.Linear(model.linear.in_features, 3).to(D)  # a new copy
    third = scratch_copy(model)
    assert third is not first and third.linear.out_features == 3
    assert torch.equal(third.linear.weight, model.linear.weight)
