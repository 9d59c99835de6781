"""Independent references (issue 13 item 9): each algorithm of the suite against an
implementation it shares no code with, in float64 on 2 real gloo processes.

- `sync_sgd` = torch's `DistributedDataParallel`, bit for bit;
- `local_sgd` = torch's `PeriodicModelAverager`, bit for bit (its warm-up aligned with the
  suite's round ends);
- `powersgd` = torch's `powerSGD_hook` (DDP on gloo) to 1e-9, ranks 1, 2 and 4;
- EASGD, EAMSGD, CoCoD-SGD and Overlap-Local-SGD = a hand port of the reference repository's
  update step (JYWa/Overlap_Local_SGD, `distoptim/`), to 1e-12.

Why 2 processes: torch divides by the world size before its SUM all-reduce, the suite after;
with m = 2 the division is exact, so the two orders give the same bits.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import algorithms
from algorithms.comm import Comm
from algorithms.powersgd import Config as PowerConfig
from algorithms.powersgd import PowerSGD
from experiments.training.models import TinyCNN
from tests.steps import (
    POWERSGD_CASES,
    flat_params,
    hook_steps,
    matrix_net,
    powersgd_case_batches,
    rank_batches,
)

LR, MOMENTUM, WD = 0.05, 0.9, 1e-4

# --- PowerSGD against torch's powerSGD_hook -----------------------------------------------------

# POWERSGD_CASES (tests/steps.py) says which data, rank and number of steps, and why.
# The hook needs start_powerSGD_iter > 1 with error feedback / warm start (DDP rebuilds its
# buckets after iteration 1); the suite's `start_step` starts compressing at the same step.
POWER_START = 2


def aligned_powersgd_hook(initial: dict[int, torch.Tensor]):
    """torch's `powerSGD_hook`, whose first compressed iteration starts from the suite's initial
    factors instead of its own random draw: the Q of each parameter (keyed by data_ptr) is laid
    out in the hook's memory as the hook lays it out (grouped by matrix shape, in the order of
    first appearance in the bucket, then bucket order). The hook orthogonalises it, the suite
    does not: the same nested column spans, so the same P Q^T."""
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as hook

    def aligned(state, bucket):
        index = bucket.index()
        if state.iter == state.start_powerSGD_iter and index not in state.q_memory_dict:
            groups: dict[tuple[int, int], list[torch.Tensor]] = {}
            for p in bucket.parameters():
                groups.setdefault((p.shape[0], p[0].numel()), []).append(p)
            ordered = [p for group in groups.values() for p in group]
            qs = [initial[p.data_ptr()] for p in ordered]
            p_size = sum(p.shape[0] * q.shape[1] for p, q in zip(ordered, qs, strict=True))
            state.p_memory_dict[index] = torch.empty(p_size, dtype=qs[0].dtype)
            state.q_memory_dict[index] = torch.cat([q.reshape(-1) for q in qs])
        return hook.powerSGD_hook(state, bucket)

    return aligned


def _powersgd_vs_hook(rank: int, world_size: int, cases: dict, old_gram_schmidt: bool = False):
    from torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook import PowerSGDState
    from torch.nn.parallel import DistributedDataParallel

    if old_gram_schmidt:  # tests: the check must fail with the orthogonalisation it replaced
        _install_old_gram_schmidt()
    out = {}
    for name, (data, hidden, lr, r, steps) in cases.items():
        batches = powersgd_case_batches(data, rank, steps)
        model = matrix_net(hidden)
        cfg = PowerConfig(rank=r, start_step=POWER_START)
        opt = PowerSGD.local_optimizer(
            cfg, model, lr=lr, momentum=MOMENTUM, nesterov=True, weight_decay=WD
        )
        algo = PowerSGD(model, opt, Comm(), cfg, tau=1)
        initial = [q.clone() for q in algo.qs]
        _, suite = hook_steps(algo, model, opt, batches)

        ref = matrix_net(hidden)
        ddp = DistributedDataParallel(ref)
        state = PowerSGDState(
            process_group=None,
            matrix_approximation_rank=r,
            start_powerSGD_iter=POWER_START,
            min_compression_rate=0,  # compress every matrix
            use_error_feedback=True,
            warm_start=True,
            orthogonalization_epsilon=0,
        )
        matrices = [p for p in ref.parameters() if p.ndim > 1]
        ddp.register_comm_hook(
            state,
            aligned_powersgd_hook(
                {p.data_ptr(): q for p, q in zip(matrices, initial, strict=True)}
            ),
        )
        ref_opt = torch.optim.SGD(
            ddp.parameters(), lr=lr, momentum=MOMENTUM, nesterov=True, weight_decay=WD
        )
        reference = []
        for x, y in batches:
            ref_opt.zero_grad()
            F.cross_entropy(ddp(x), y).backward()
            ref_opt.step()
            reference.append(flat_params(ref))
        out[name] = (suite, reference, state.iter, steps)
    return out


def _install_old_gram_schmidt() -> None:
    """The orthogonalisation PowerSGD used before issue 13: modified Gram-Schmidt dividing each
    column by max(norm, 1e-8)."""
    import algorithms.powersgd as powersgd

    def gram_schmidt(matrix: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
        out = matrix.clone()
        for i in range(out.shape[1]):
            col = out[:, i : i + 1]
            col.div_(col.norm().clamp(min=eps))
            if i + 1 < out.shape[1]:
                rest = out[:, i + 1 :]
                rest.sub_(col * (col * rest).sum(dim=0, keepdim=True))
        return out

    powersgd.orthonormalize = lambda ms: [gram_schmidt(m) for m in ms]


def _trajectory_gap(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    return max((x - y).abs().max().item() for x, y in zip(a, b, strict=True))


@pytest.mark.dist
def test_powersgd_equals_torch_powersgd_hook():
    """Started from the same factors, with error feedback, warm start, orthogonalisation epsilon
    0 and every matrix compressed (min_compression_rate 0), from step 2 on both sides. What
    differs and does not matter: the hook orthogonalises its warm-started query every step (same
    spans, same P Q^T); its error feedback covers the whole bucket, 1-D tensors included (the
    model has none: no bias, no BatchNorm; with them the uncompressed 1-D average would carry a
    memory whose mean over the workers is zero); it divides by the world size before its SUM
    all-reduces (exact for 2 workers). Fails with the old Gram-Schmidt (1e-3 on random labels)."""
    from tests.workers import run_workers

    for out in run_workers(_powersgd_vs_hook, 2, POWERSGD_CASES):
        for name, (suite, reference, hook_iters, steps) in out.items():
            assert hook_iters == steps  # the hook ran (and compressed from step 2)
            assert len(suite) == len(reference) == steps
            gap = _trajectory_gap(suite, reference)
            assert gap < 1e-9, (name, gap)
            assert (suite[0] - suite[-1]).abs().max() > 1e-2, name  # training moved


# --- sync_sgd against DistributedDataParallel, local_sgd against PeriodicModelAverager ----------

REF_STEPS = 30


def _lr(t: int) -> float:
    return LR if t < 12 else LR / 5  # a decay mid-run


def _tiny(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return TinyCNN(in_channels=1, num_classes=4, width=4).double()


def _sgd(params) -> torch.optim.SGD:
    return torch.optim.SGD(params, lr=_lr(0), momentum=MOMENTUM, nesterov=True, weight_decay=WD)


def _suite_run(name: str, rank: int, tau: int, steps: int, options: dict | None = None):
    """The suite's algorithm `name` on TinyCNN: the parameters after every step, and the BN
    buffers at the end."""
    model = _tiny()
    cls = algorithms.REGISTRY[name]
    cfg = algorithms.make_config(name, options or {})
    opt = cls.local_optimizer(
        cfg, model, lr=_lr(0), momentum=MOMENTUM, nesterov=True, weight_decay=WD
    )
    algo = cls(model, opt, Comm(), cfg, tau=tau)
    _, params = hook_steps(algo, model, opt, rank_batches(rank, steps), lr=_lr)
    return params, [b.clone() for b in model.buffers()]


def _torch_runs(rank: int, world_size: int) -> dict:
    from torch.distributed.algorithms.model_averaging.averagers import PeriodicModelAverager
    from torch.nn.parallel import DistributedDataParallel

    batches = rank_batches(rank, REF_STEPS)
    out = {"sync_sgd": _suite_run("sync_sgd", rank, 1, REF_STEPS)}

    # DDP: its reducer averages the gradients in buckets during backward; BN buffers stay local
    # as in the suite (broadcast_buffers=False)
    model = _tiny()
    ddp = DistributedDataParallel(model, broadcast_buffers=False)
    opt = _sgd(ddp.parameters())
    params = []
    for t, (x, y) in enumerate(batches):
        for group in opt.param_groups:
            group["lr"] = _lr(t)
        opt.zero_grad()
        F.cross_entropy(ddp(x), y).backward()
        opt.step()
        params.append(flat_params(model))
    out["ddp"] = (params, [b.clone() for b in model.buffers()])

    # local_sgd against PeriodicModelAverager: torch's averager averages at its step counts s
    # with s >= warmup_steps and (s - warmup_steps) % period == 0 (counting calls from 0); with
    # warmup_steps = tau - 1 that is after local steps tau, 2 tau, ...: the suite's round ends
    tau = 3
    out["local_sgd"] = _suite_run("local_sgd", rank, tau, REF_STEPS)
    model = _tiny()
    opt = _sgd(model.parameters())
    averager = PeriodicModelAverager(period=tau, warmup_steps=tau - 1)
    params = []
    for t, (x, y) in enumerate(batches):
        for group in opt.param_groups:
            group["lr"] = _lr(t)
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
        averager.average_parameters(model.parameters())
        params.append(flat_params(model))
    out["averager"] = (params, [b.clone() for b in model.buffers()])
    return out


@pytest.fixture(scope="module")
def torch_runs():
    from tests.workers import run_workers

    return run_workers(_torch_runs, 2)


@pytest.mark.dist
@pytest.mark.parametrize("suite, reference", [("sync_sgd", "ddp"), ("local_sgd", "averager")])
def test_equals_torch_bit_for_bit(torch_runs, suite, reference):
    for out in torch_runs:
        (ours, our_buffers), (theirs, their_buffers) = out[suite], out[reference]
        assert len(ours) == len(theirs) == REF_STEPS
        for t, (a, b) in enumerate(zip(ours, theirs, strict=True)):
            assert torch.equal(a, b), (suite, t, (a - b).abs().max().item())
        assert all(torch.equal(a, b) for a, b in zip(our_buffers, their_buffers, strict=True))
        assert (ours[0] - ours[-1]).abs().max() > 1e-3  # training moved
    # local SGD: the workers differ between rounds, so the averaging is what makes them agree
    a, b = torch_runs[0]["local_sgd"][0], torch_runs[1]["local_sgd"][0]
    assert (a[3] - b[3]).abs().max() > 1e-6 and torch.equal(a[5], b[5])


# --- a hand port of the reference repository (JYWa/Overlap_Local_SGD, distoptim/) ---------------
#
# Written as the reference writes it (comm_helpers.py; distoptim/EASGD.py, CoCoDSGD.py,
# OverlapLocalSGD.py, HEAD 93ff6b7), with two changes:
# - threads: the reference's `average()` ends with `buf_ready.set()`, which makes its daemon
#   thread all-reduce `comm_buf` in place, and the next `average()` starts with
#   `comm_finish.wait()`. Nothing touches `comm_buf` in between, so the port all-reduces it at
#   once, blocking (`_launch`): the same values at the next round.
# - rounds: the reference tests `itr != 0 and itr % cp == 0` with `itr` counting calls from 0,
#   so its first round is cp + 1 steps long. The port's counter starts at 1 (`itr = 1`): the test
#   then holds after local steps cp, 2 cp, ..., the suite's round ends.
# EASGD's `average()` also loses its `if req:` block (the released code's NameError).


def ref_flatten_tensors(tensors):
    if len(tensors) == 1:
        return tensors[0].view(-1).clone()
    flat = torch.cat([t.view(-1) for t in tensors], dim=0)
    return flat


def ref_unflatten_tensors(flat, tensors):
    outputs = []
    offset = 0
    for tensor in tensors:
        numel = tensor.numel()
        outputs.append(flat.narrow(0, offset, numel).view_as(tensor))
        offset += numel
    return tuple(outputs)


def ref_communicate(tensors, communication_op):
    flat_tensor = ref_flatten_tensors(tensors)
    communication_op(tensor=flat_tensor)
    for f, t in zip(ref_unflatten_tensors(flat_tensor, tensors), tensors, strict=True):
        t.set_(f)


class _RefOptimizer(torch.optim.Optimizer):
    """The constructor and `step()` shared verbatim by the reference's optimizers."""

    def __init__(self, params, alpha, tau, size, lr, momentum=0, dampening=0, weight_decay=0,
                 nesterov=False, gmf=0):  # fmt: skip
        self.alpha = alpha
        self.gmf = gmf
        self.size = size
        self.comm_buf = []
        self.itr = 1  # the reference: 0 (see above)
        self.cp = tau
        defaults = dict(lr=lr, momentum=momentum, dampening=dampening,
                        weight_decay=weight_decay, nesterov=nesterov)  # fmt: skip
        super().__init__(params, defaults)
        for group in self.param_groups:
            for p in group["params"]:
                param_state = self.state[p]
                buf = param_state["anchor_model"] = torch.clone(p.data).detach()
                self.comm_buf.append(buf)

    def step(self, closure=None):
        for group in self.param_groups:
            weight_decay = group["weight_decay"]
            momentum = group["momentum"]
            dampening = group["dampening"]
            nesterov = group["nesterov"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                d_p = p.grad.data
                if weight_decay != 0:
                    d_p.add_(p.data, alpha=weight_decay)
                if momentum != 0:
                    param_state = self.state[p]
                    if "momentum_buffer" not in param_state:
                        buf = param_state["momentum_buffer"] = torch.clone(d_p).detach()
                    else:
                        buf = param_state["momentum_buffer"]
                        buf.mul_(momentum).add_(d_p, alpha=1 - dampening)
                    if nesterov:
                        d_p = d_p.add(buf, alpha=momentum)
                    else:
                        d_p = buf
                p.data.add_(d_p, alpha=-group["lr"])

    def _launch(self):  # the thread's body, at once: communicate(buff, dist.all_reduce)
        import torch.distributed as dist

        ref_communicate(self.comm_buf, dist.all_reduce)


class RefEASGD(_RefOptimizer):
    def average(self):
        step_flag = self.itr != 0 and self.itr % self.cp == 0
        self.itr += 1
        if step_flag:
            beta = 1 / self.size - self.alpha - self.alpha**2 / (1 - self.alpha)
            gamma = self.alpha / (1 - self.alpha)
            for group in self.param_groups:
                for p in group["params"]:
                    param_state = self.state[p]
                    buf = param_state["anchor_model"]
                    p.data.mul_(1 - self.alpha).add_(buf, alpha=self.alpha)
                    buf.mul_(beta).add_(p.data, alpha=gamma)
            self._launch()


class RefCoCoDSGD(_RefOptimizer):
    def average(self):
        step_flag = self.itr != 0 and self.itr % self.cp == 0
        self.itr += 1
        if step_flag:
            for group in self.param_groups:
                for p in group["params"]:
                    param_state = self.state[p]
                    old_data = param_state["anchor_model"]
                    if "local_anchor_model" not in param_state:
                        param_state["local_anchor_model"] = torch.clone(old_data).detach()
                    buf = param_state["local_anchor_model"]
                    # update(anchor)
                    old_data.add_(p.data).sub_(buf)
                    # update training params
                    p.data.copy_(old_data)
                    # update local_anchor_model
                    buf.copy_(old_data)
                    old_data.div_(self.size)
            self._launch()


class RefOverlapLocalSGD(_RefOptimizer):
    def average(self):
        step_flag = self.itr != 0 and self.itr % self.cp == 0
        self.itr += 1
        if step_flag:
            for group in self.param_groups:
                lr = group["lr"]
                for p in group["params"]:
                    param_state = self.state[p]
                    old_data = param_state["anchor_model"]
                    p.data.mul_(1 - self.alpha).add_(old_data, alpha=self.alpha)
                    if "global_momentum_buffer" not in param_state:
                        buf = param_state["global_momentum_buffer"] = torch.clone(p.data).detach()
                        buf.sub_(old_data)
                        buf.div_(-lr)
                    else:
                        buf = param_state["global_momentum_buffer"]
                        buf.mul_(self.gmf).sub_(p.data, alpha=1 / lr).add_(old_data, alpha=1 / lr)
                    old_data.add_(buf, alpha=-lr)
                    old_data.div_(self.size)
            self._launch()


PORT_STEPS, PORT_TAU = 14, 3  # rounds end after steps 3, 6, 9, 12; the LR decays at step 12
PORTS = {
    # suite name: (suite options, reference class, its alpha, its gmf, local momentum)
    "easgd": ({"alpha": 0.2}, RefEASGD, 0.2, 0.0, 0.0),
    "eamsgd": ({"alpha": 0.2}, RefEASGD, 0.2, 0.0, MOMENTUM),
    "cocod_sgd": ({}, RefCoCoDSGD, 0.0, 0.0, MOMENTUM),
    "overlap_local_sgd": ({"alpha": 0.6, "beta": 0.7}, RefOverlapLocalSGD, 0.6, 0.7, MOMENTUM),
}


def _port_runs(rank: int, world_size: int) -> dict:
    out = {}
    batches = rank_batches(rank, PORT_STEPS)
    for name, (options, ref_cls, alpha, gmf, momentum) in PORTS.items():
        suite, _ = _suite_run(name, rank, PORT_TAU, PORT_STEPS, options)
        model = _tiny()
        opt = ref_cls(model.parameters(), alpha=alpha, tau=PORT_TAU, size=world_size,
                      lr=_lr(0), momentum=momentum, weight_decay=WD, nesterov=momentum > 0,
                      gmf=gmf)  # fmt: skip
        reference = []
        for t, (x, y) in enumerate(batches):  # the reference's train(): lr, step, average
            for group in opt.param_groups:
                group["lr"] = _lr(t)
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()
            opt.average()
            reference.append(flat_params(model))
        out[name] = (suite, reference)
    return out


@pytest.mark.dist
def test_equals_a_hand_port_of_the_reference_code():
    from tests.workers import run_workers

    results = run_workers(_port_runs, 2)
    for name in PORTS:
        for out in results:
            suite, reference = out[name]
            gap = max((a - b).abs().max().item() for a, b in zip(suite, reference, strict=True))
            assert gap < 1e-12, (name, gap)
            assert (suite[0] - suite[-1]).abs().max() > 1e-3, name  # training moved
        # the rounds communicated: the workers' models depend on each other's data
        a, b = results[0][name][0], results[1][name][0]
        assert (a[-1] - b[-1]).abs().max() > 1e-6, name
