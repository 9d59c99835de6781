"""What the algorithm tests share: per-rank random batches, the training loop's hook sequence,
finish() and a checkpoint resume around it, and the closed form of a ledger of model-sized
collectives.

Everything here runs inside spawned gloo workers too (tests/workers.py), so it stays plain
module-level functions.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Iterable, Sequence

import torch
import torch.nn.functional as F


def rank_batches(
    rank: int,
    steps: int,
    seed_base: int = 1000,
    classes: int = 4,
    global_labels: bool = False,
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """`steps` batches (x, y) of this rank's own data: x of shape (8, 1, 8, 8) in float64, y of 8
    labels in [0, classes), both drawn from a torch.Generator seeded `seed_base + rank`.

    global_labels: draw y from torch's global RNG instead (tests/test_osp_losp.py does: its
    labels follow the global seed, so they are the same on every rank).
    """
    gen = torch.Generator().manual_seed(seed_base + rank)
    labels = None if global_labels else gen
    return [
        (
            torch.randn(8, 1, 8, 8, generator=gen, dtype=torch.float64),
            torch.randint(0, classes, (8,), generator=labels),
        )
        for _ in range(steps)
    ]


def prototype_batches(
    rank: int, steps: int, noise: float = 1.0, seed_base: int = 1000
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Learnable data in rank_batches' shapes: 4 class prototypes (8x8, the same on every rank)
    plus Gaussian noise of std `noise`, the label the class; 8 samples per batch, drawn from a
    generator seeded `seed_base + rank`."""
    protos = torch.randn(
        4, 1, 8, 8, generator=torch.Generator().manual_seed(7), dtype=torch.float64
    )
    gen = torch.Generator().manual_seed(seed_base + rank)
    out = []
    for _ in range(steps):
        y = torch.randint(0, 4, (8,), generator=gen)
        x = protos[y] + noise * torch.randn(8, 1, 8, 8, generator=gen, dtype=torch.float64)
        out.append((x, y))
    return out


# PowerSGD's comparisons (tests/test_powersgd.py, tests/test_references.py), on matrix_net:
# name -> (data, hidden width, lr, rank, steps). Two regimes. Rounding differences between two
# correct runs (another order of operations, a query orthogonalised or scaled) are amplified by
# PowerSGD's subspace tracking whenever two singular values of a compressed gradient nearly
# cross, which says nothing about either run. Learnable data keeps the singular values apart:
# ranks 1, 2 and 4 are compared there over 50 steps (differences stay near 1e-12). Random
# labels (loss at chance, gradients without a dominant structure) are where Gram-Schmidt with
# max(norm, eps) broke: the 4-class classifier's spare column died and error feedback grew a
# component along the all-ones direction of the classes, which the loss does not see (1e-3
# apart from torch's hook, and from itself with its factors x3). There, with Householder QR,
# rounding differences stay below 1e-13 for 30 steps at lr 0.01 and reach 1e-9 by step 50:
# rank 4 is compared over those 30 steps.
POWERSGD_CASES = {
    "learnable, rank 1": ("prototypes", 8, 0.05, 1, 50),
    "learnable, rank 2": ("prototypes", 8, 0.05, 2, 50),
    "learnable, rank 4": ("prototypes", 8, 0.05, 4, 50),
    "random labels, rank 4": ("random", 8, 0.01, 4, 30),
}


def powersgd_case_batches(data: str, rank: int, steps: int) -> list:
    """The batches of a POWERSGD_CASES data regime."""
    if data == "prototypes":
        return prototype_batches(rank, steps)
    return rank_batches(rank, steps)


def matrix_net(hidden: int = 8, classes: int = 4, seed: int = 0) -> torch.nn.Module:
    """A float64 net of matrices only (no bias, no BatchNorm) for the (rank_batches) 8x8 inputs:
    conv 1->4 (3x3), tanh, linear 256->`hidden`, tanh, linear `hidden`->`classes`. The
    classifier's gradient has rank <= classes - 1 (its rows sum to zero), below PowerSGD's rank
    `classes`."""
    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.Conv2d(1, 4, 3, padding=1, bias=False),
        torch.nn.Tanh(),
        torch.nn.Flatten(),
        torch.nn.Linear(256, hidden, bias=False),
        torch.nn.Tanh(),
        torch.nn.Linear(hidden, classes, bias=False),
    ).double()


def flat(tensors: Iterable[torch.Tensor]) -> torch.Tensor:
    """The tensors, detached and concatenated into one new 1-D tensor."""
    return torch.cat([t.detach().reshape(-1) for t in tensors])


def flat_params(model: torch.nn.Module) -> torch.Tensor:
    """The model's parameters as one new 1-D tensor."""
    return flat(model.parameters())


Hook = Callable[[int], object] | None


def hook_step(
    algo,
    model: torch.nn.Module,
    opt: torch.optim.Optimizer,
    t: int,
    batch: tuple[torch.Tensor, torch.Tensor],
    *,
    lr: Callable[[int], float] | None = None,
    on_backward: Hook = None,
    on_before_step: Hook = None,
) -> tuple[float, torch.Tensor]:
    """Step t of the training loop's hook sequence: forward, cross_entropy, zero_grad, backward,
    algo.before_step(t), opt.step(), algo.after_step(t).

    lr: when given, every param group's learning rate is set to lr(t) first.
    on_backward, on_before_step: called as f(t) right after backward() and right after
    algo.before_step(t) (before opt.step()).
    Returns the loss and the parameters (`algo.params`, flattened) after the local opt.step(),
    before algo.after_step(t) communicated.
    """
    if lr is not None:
        for group in opt.param_groups:
            group["lr"] = lr(t)
    loss = F.cross_entropy(model(batch[0]), batch[1])
    opt.zero_grad()
    loss.backward()
    if on_backward is not None:
        on_backward(t)
    algo.before_step(t)
    if on_before_step is not None:
        on_before_step(t)
    opt.step()
    before = flat(algo.params)
    algo.after_step(t)
    return loss.item(), before


def hook_steps(
    algo,
    model: torch.nn.Module,
    opt: torch.optim.Optimizer,
    batches: Sequence[tuple[torch.Tensor, torch.Tensor]],
    first_t: int = 0,
    *,
    lr: Callable[[int], float] | None = None,
    on_backward: Hook = None,
    on_before_step: Hook = None,
    sleep_s: float = 0.0,
    on_after_step: Hook = None,
) -> tuple[list[float], list[torch.Tensor]]:
    """hook_step for every batch, at steps first_t, first_t + 1, ...; returns the loss and the
    flattened model parameters after every step.

    sleep_s: seconds to sleep after each algo.after_step(t) (a slow worker); on_after_step is
    called as f(t) after that, before the parameters are recorded. The other options are
    hook_step's.
    """
    losses, params = [], []
    for t, batch in enumerate(batches, first_t):
        loss, _ = hook_step(
            algo,
            model,
            opt,
            t,
            batch,
            lr=lr,
            on_backward=on_backward,
            on_before_step=on_before_step,
        )
        if sleep_s:
            time.sleep(sleep_s)
        if on_after_step is not None:
            on_after_step(t)
        losses.append(loss)
        params.append(flat_params(model))
    return losses, params


def train_saving(
    algo,
    model: torch.nn.Module,
    opt: torch.optim.Optimizer,
    batches: Sequence[tuple[torch.Tensor, torch.Tensor]],
    checkpoint_at: int,
    lr: Callable[[int], float],
    after: Callable[[int, torch.Tensor], None],
) -> list[dict]:
    """hook_step at lr(t) for every batch, from step 0, calling after(t, before) after each
    (`before`: hook_step's parameters before algo.after_step(t)); returns the state_dicts of
    model, opt and algo saved right before step checkpoint_at (resume_and_finish's `states`:
    the round-based algorithms' tests take them with a round in flight)."""
    saved: list[dict] = []
    for t, batch in enumerate(batches):
        if t == checkpoint_at:
            saved = [copy.deepcopy(s.state_dict()) for s in (model, opt, algo)]
        after(t, hook_step(algo, model, opt, t, batch, lr=lr)[1])
    return saved


def finish_recorded(algo) -> dict:
    """algo.finish() with what the tests check around it: the parameters (`algo.params`) right
    before ("last") and after ("final"), and copies of the ledger before ("ledger_rounds") and
    after ("ledger")."""
    out = {"last": flat(algo.params), "ledger_rounds": copy.copy(algo.comm.ledger)}
    algo.finish()
    out["ledger"] = copy.copy(algo.comm.ledger)
    out["final"] = flat(algo.params)
    return out


def resume_and_finish(
    states: Sequence[dict],
    model: torch.nn.Module,
    opt: torch.optim.Optimizer,
    algo,
    batches: Sequence[tuple[torch.Tensor, torch.Tensor]],
    first_t: int,
    *,
    lr: Callable[[int], float] | None = None,
) -> torch.Tensor:
    """Loads the state_dicts `states` (of a model, its optimizer and its algorithm, in that
    order) into model, opt and algo, runs hook_steps on batches from step first_t, then
    algo.finish(); returns the final parameters (`algo.params`, flattened)."""
    for obj, state in zip((model, opt, algo), states, strict=True):
        obj.load_state_dict(state)
    hook_steps(algo, model, opt, batches, first_t, lr=lr)
    algo.finish()
    return flat(algo.params)


def close(a: torch.Tensor, b: torch.Tensor, atol: float = 1e-12) -> bool:
    """torch.allclose with an absolute tolerance only (rtol = 0)."""
    return torch.allclose(a, b, atol=atol, rtol=0)


def max_spread(per_rank: Sequence[torch.Tensor]) -> float:
    """The largest absolute difference of any rank's tensor from rank 0's."""
    return max((p - per_rank[0]).abs().max().item() for p in per_rank)


def assert_model_sized(ledger, collectives: int, numel: int, itemsize: int = 8) -> None:
    """The ledger holds exactly `collectives` collectives, each sending one model of `numel`
    values of `itemsize` bytes (float64 by default)."""
    got, want = (ledger.bytes, ledger.collectives), (collectives * numel * itemsize, collectives)
    assert got == want, f"(bytes, collectives) = {got}, the closed form is {want}"


def assert_rounds_then_finish(worker: dict, rounds: int) -> None:
    """`rounds` model-sized collectives before finish() (worker["ledger_rounds"]), and finish()
    adds one more (worker["ledger"]), the model's size being that of worker["x0"]: the closed
    form of the round-based algorithms' ledgers, as their workers record them
    (tests/test_cocod_sgd.py, tests/test_easgd.py, tests/test_overlap_local_sgd.py)."""
    numel = worker["x0"].numel()
    assert_model_sized(worker["ledger_rounds"], rounds, numel)
    assert_model_sized(worker["ledger"], rounds + 1, numel)
