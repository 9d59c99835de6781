"""OSP: overlapped parameter-server synchronisation (algorithms.md section 7, [A] + [I]).

Haozhao Wang, Song Guo, Ruixuan Li. "OSP: Overlapping Computation and Communication in Parameter
Server for Fast Machine Learning". ICPP 2019. doi:10.1145/3337821.3337828.

THE RULE BELOW IS THE SUITE'S INTERPRETATION [I], NOT THE PAPER'S TEXT. Neither the OSP nor the
LOSP paper body is available; only the LOSP abstract is ([A]: OSP overlaps the worker's wait for
the global model with computation and allows "adaptive multiple local updates"). Everything
below, from what is pushed to what the worker does when the aggregate arrives, is algorithms.md
section 7's reading of that sentence.

Notation (paper-style symbol -> here):

    x_i      this worker's parameters (`self.params`), trained by the local torch SGD
    w_r      the global (parameter-server) model after r aggregates: `global_model`, a replica
             kept identical on every worker (same w_0 = x_0, same all-reduced aggregates)
    A_i      local progress not yet pushed, positive in the descent direction:
             A_i = base - x_i, with `base` the reference point (no copy per step)
    U_i      the pushed update (A_i at push time)
    tau      local steps before a push: top-level `tau`
    eta_s    server learning rate: `algorithm.server_lr`
    W        longest overlap window, in local steps: `algorithm.max_overlap_steps` (4*tau)
    m        number of workers

Round r (the algorithm's own counter; rounds are not aligned to the loop's step count):

    (1) tau local steps; each adds x_before - x_after to A            (A = base - x)
    (2) push U_i = A (`comm.mean_async`), then A = 0 (base = x):
            w_{r+1} = w_r - eta_s * mean_j U_j                          (PS aggregate)
    (3) overlap window: after each further local step (A keeps growing), check whether the
        aggregate has arrived (`arrived()`); after W window steps, wait (exposed communication)
    (4) on arrival: x = compensate(w_{r+1}, w_r, A, mode); A is kept and pushed next round.
        OSP: mode "none", x = w_{r+1}: the window progress is dropped from x but still reaches
        the global model, one round late, through the next push.

`compensate` (shared with LOSP, algorithms/losp.py) with A as defined above (descent-positive):

    none:      x = w_{r+1}
    delta:     x = w_{r+1} - A                      re-apply own not-yet-pushed progress
    gradient:  x = w_{r+1} - (A + lam * A*A*(w_{r+1} - w_r))     (DC-ASGD-style, elementwise)

Sign convention: algorithms.md writes LOSP's rule as "x = w_{r+1} + A" while it defines
A += x_before - x_after (positive along the descent); its meaning is "re-apply the worker's own
progress", which with that definition of A is x = w_{r+1} - A. The code uses the latter.

State (`state`): `global_model` (w), `base` (A = base - x), `num_round_steps` (local steps in
the current round so far), `num_pushes`, `num_rounds`, and the sums behind `metrics()`. In flight,
never saved: `pending` (the push), `num_window_steps`, `pending_is_regular`. Pushes start at
rank-dependent steps, so no step is safe for all ranks except after a `drain()`
(`checkpoint_anywhere = False`): checkpoints are taken at evaluation points, and `state_dict()`
refuses to run with a push in flight.

Deviations from the paper and the reference code (all [I]):
- PS semantics computed with collectives: the push is an all-reduce average of the U_i, so
  every worker holds w; there is no server process. The timing model prices it as a PS when
  `network.topology=ps` (timing.md).
- Every push carries one control value after the model-sized payload (n + 1 values per push in
  the ledger): 0 for a round's push, 1 for a push made inside `drain()` / `finish()`. Why:
  whether a window has steps depends on `Work.is_completed()`, i.e. on the machine, so the ranks
  may have made different numbers of pushes when the loop stops (they differ by at most one,
  and a fast worker may stop while a slow one still trains). A rank in `drain()`/`finish()`
  keeps answering the others' pushes (with zeros in `drain()`, its unpushed A first in
  `finish()`) until one push carries the flag of every rank; each rank's k-th collective is
  thus always its k-th push, and all ranks leave together. A scalar agreement would not do:
  on the same process group gloo matches it against another rank's in-flight push (a size
  mismatch abort); on a separate group it deadlocks against a rank blocked in its window wait.
- `drain()` is therefore a collective (every rank calls it at the same loop step) and costs at
  least one push. It leaves no push in flight and equal push counts on every rank: a round
  push in flight is received as usual (its window ends early); the drain's own zero pushes
  only move w, so x, A and the round's step count are kept. Any other collective on the group
  (evaluation, checkpoint) must come after a `drain()` on every rank; a rank that drains
  early answers the others' round pushes with zeros until they get there.
- `finish()`: pushes every rank's remaining A (so the global model holds all progress), then
  x = w on every rank: exact consensus, since w is the same on all ranks bit for bit (the
  runner broadcasts x_0 = w_0 and every rank applies the same all-reduced aggregates). LOSP
  ends on this w too, not on a compensated model.
- Rounds start at the arrival, so their local steps are tau + window; the window check runs
  after each local step (the hook after the optimizer), and also right after the push (an
  aggregate that is already there gives an empty window). W = 0 waits at once.
- Momentum buffers are the local torch SGD's and are never averaged or reset; BatchNorm
  running statistics are never communicated (as all repo algorithms).
- On a time budget (experiments/training/budget.py) there is no drain before an evaluation:
  `model_at(t)` is w with every aggregate whose modeled completion is at or before t.
- Evaluation: `eval_model()` is the parameter-server model w (the PS semantics' model; the
  local x_i hold unpushed progress, and LOSP's are compensated), with this worker's BN buffers
  (then averaged over the workers, as for every consensus model). w is the same on every rank
  after the loop's `drain()` / `finish()`. The local models are `test/acc_local`.
- Trajectories depend on `eval_every`: the evaluation's bookkeeping collectives need every
  rank at rest, so each evaluation point drains (a collective `drain()`: the push in flight is
  received at once, which ends the overlap window early, and the drain's own push costs
  modeled time). Removing that would need the evaluation to run beside pushes that start at
  rank-dependent steps, which deadlocks on one process group (see above) and mixes w_r and
  w_{r+1} across ranks; the presets evaluate every epoch, and results hold for that.
- Arrival is `Pending.is_completed()` on the run's clock (timing.md): with `timing=real` the
  collective has completed (and, with `emulate_network`, its modeled duration has passed);
  with `timing=virtual` the worker's virtual clock has reached the modeled completion, so with
  `network=ideal` and homogeneous workers the window is empty and OSP equals `local_sgd` with
  the same tau (algorithms.md section 11, identity 4; tests/test_timing.py).

Metrics: `local_steps` (mean local steps per round completed since the last call, tau plus the
window) and `window_steps` (mean window length), this worker's values.
"""

from __future__ import annotations

import copy

import torch

from algorithms.base import Algorithm
from algorithms.comm import Pending, copy_into_, flatten
from algorithms.osp_config import COMPENSATIONS, Config


def compensate(
    w_new: torch.Tensor, w_old: torch.Tensor, progress: torch.Tensor, mode: str, lam: float = 0.0
) -> torch.Tensor:
    """The worker's new local model when aggregate w_new (which replaced w_old) arrives while
    `progress` (A, descent-positive) is not yet pushed. Elementwise; returns a new tensor."""
    if mode == "none":  # OSP: x = w_{r+1}
        return w_new.clone()
    if mode == "delta":  # LOSP: x = w_{r+1} - A (re-apply own progress)
        return w_new - progress
    if mode == "gradient":  # x = w_{r+1} - (A + lam * A*A*(w_{r+1} - w_r))
        return w_new - (progress + lam * progress * progress * (w_new - w_old))
    raise ValueError(f"compensation must be one of {', '.join(COMPENSATIONS)}, got {mode!r}")


class OSP(Algorithm):
    Config = Config
    state = (
        "global_model",
        "base",
        "num_round_steps",
        "num_pushes",
        "num_rounds",
        "_steps_logged",
        "_windows_logged",
        "_rounds_logged",
    )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        w = self.cfg.max_overlap_steps
        self.max_overlap_steps = 4 * self.tau if w is None else w
        self.global_model = [p.detach().clone() for p in self.params]  # w_0 = x_0
        self.base = [p.detach().clone() for p in self.params]  # A = base - x = 0
        self.num_round_steps = 0  # local steps of the current round, window included
        self.num_pushes = 0  # pushes launched (round pushes and drain/finish pushes)
        self.num_rounds = 0  # rounds completed (aggregate of a round's push applied)
        self.pending: Pending | None = None
        self.pending_is_regular = False  # the push in flight is a round's push (flag 0)
        self.num_window_steps = 0
        self._steps_logged, self._windows_logged, self._rounds_logged = 0, 0, 0

    # The compensation applied on arrival; LOSP reads its config.
    def compensation(self) -> tuple[str, float]:
        return "none", 0.0

    def arrived(self) -> bool:
        """Whether the in-flight aggregate is here, on the run's clock (real: the collective
        completed; virtual: this worker's clock reached its modeled completion)."""
        return self.pending.is_completed()

    def after_step(self, t: int) -> None:
        self.num_round_steps += 1
        if self.pending is None:
            if self.num_round_steps == self.tau:  # (1) done: (2) push
                self._push(self._progress(), regular=True)
                self._reset_base()
                self.num_window_steps = 0
                self._maybe_receive()
        else:  # (3) a window step
            self.num_window_steps += 1
            self._maybe_receive()

    def _maybe_receive(self) -> None:
        if self.num_window_steps >= self.max_overlap_steps or self.arrived():
            self._receive()

    def _progress(self) -> list[torch.Tensor]:
        """A = base - x, materialised."""
        return [b - p.detach() for b, p in zip(self.base, self.params, strict=True)]

    def _reset_base(self) -> None:
        with torch.no_grad():
            for b, p in zip(self.base, self.params, strict=True):
                b.copy_(p)

    def _push(self, update: list[torch.Tensor], regular: bool) -> None:
        p0 = self.params[0]
        flag = torch.full((1,), 0.0 if regular else 1.0, dtype=p0.dtype, device=p0.device)
        self.pending = self.comm.mean_async(update + [flag], slot="update")
        self.pending_is_regular = regular
        self.num_pushes += 1

    def _receive(self) -> int:
        """Wait for the push in flight, apply it; return how many ranks flagged it."""
        *mean_update, flag = self.pending.wait()
        flags = round(flag.item() * self.comm.world_size)
        mode, lam = self.compensation()
        with torch.no_grad():
            for i, p in enumerate(self.params):
                w_old = self.global_model[i]
                w_new = w_old - self.cfg.server_lr * mean_update[i]  # (2)
                if self.pending_is_regular:  # (4) the round ends here
                    a = self.base[i] - p
                    x = compensate(w_new, w_old, a, mode, lam)
                    p.copy_(x)
                    self.base[i] = x + a  # keeps base - x = A: A is pushed next round
                self.global_model[i] = w_new
        if self.pending_is_regular:
            self.num_rounds += 1
            self._steps_logged += self.num_round_steps
            self._windows_logged += self.num_window_steps
            self._rounds_logged += 1
            self.num_round_steps = 0
        self.pending, self.num_window_steps = None, 0
        return flags

    def _settle(self, final: bool) -> None:
        """Collective: answer pushes until one carries every rank's flag (see the docstring).
        final: push this rank's A (then A = 0); otherwise push zeros and keep A."""
        while True:
            if self.pending is None:
                if final:
                    self._push(self._progress(), regular=False)
                    self._reset_base()
                else:
                    self._push([torch.zeros_like(p) for p in self.params], regular=False)
            if self._receive() == self.comm.world_size:
                return

    def drain(self) -> None:
        self._settle(final=False)

    def finish(self) -> None:
        self._settle(final=True)
        with torch.no_grad():  # x = w: identical on every rank
            for p, w, b in zip(self.params, self.global_model, self.base, strict=True):
                p.copy_(w)
                b.copy_(w)
        self.num_round_steps = 0

    def eval_model(self) -> torch.nn.Module:
        """A copy of the model whose parameters are w (identical on every rank once drained)
        and whose BN buffers are this worker's."""
        if self.pending is not None:
            raise RuntimeError("OSP/LOSP evaluate w only after drain(): a push is in flight")
        model = copy.deepcopy(self.model)
        copy_into_([p for p in model.parameters() if p.requires_grad], flatten(self.global_model))
        return model

    def model_at(self, t: float) -> torch.nn.Module:
        """w as it stood at virtual time `t` (the time budget's evaluation, no drain): w_r,
        plus the aggregate in flight when it completed by `t` (every rank computes the same w
        for the same `t`, whether or not it has received that aggregate yet); this worker's BN
        buffers."""
        w = self.global_model
        if self.pending is not None and self.pending.completes_by(t):
            *mean_update, _flag = self.pending.peek()
            w = [w_r - self.cfg.server_lr * u for w_r, u in zip(w, mean_update, strict=True)]
        model = copy.deepcopy(self.model)
        copy_into_([p for p in model.parameters() if p.requires_grad], flatten(w))
        return model

    def state_dict(self) -> dict:
        if self.pending is not None:
            raise RuntimeError("OSP/LOSP state is saved only after drain(): a push is in flight")
        return super().state_dict()

    def metrics(self) -> dict[str, float]:
        if self._rounds_logged == 0:
            return {}
        out = {
            "local_steps": self._steps_logged / self._rounds_logged,
            "window_steps": self._windows_logged / self._rounds_logged,
        }
        self._steps_logged, self._windows_logged, self._rounds_logged = 0, 0, 0
        return out
