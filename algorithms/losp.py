"""LOSP: OSP with local compensation (algorithms.md section 7, [A] + [I]).

Haozhao Wang, Zhihao Qu, Song Guo, Ningqi Wang, Ruixuan Li, Weihua Zhuang. "LOSP: Overlap
Synchronization Parallel With Local Compensation for Fast Distributed Training". IEEE JSAC
39(8):2541-2557, 2021. doi:10.1109/JSAC.2021.3087272.

THE RULE BELOW IS THE SUITE'S INTERPRETATION [I], NOT THE PAPER'S TEXT. Only the abstract and
introduction are available ([A]): OSP's overlap with adaptive multiple local updates makes the
model stale; LOSP adds "local compensation" and keeps the sequential-SGD rate with linear speedup.
What the compensation is, and when it is applied, is algorithms.md section 7's reading.

Notation: as in algorithms/osp.py (x_i = params, w_r = `global_model`, A_i = `base` - x_i, the
descent-positive progress not yet pushed, tau = `tau`, eta_s = `algorithm.server_lr`,
W = `algorithm.max_overlap_steps`), plus

    mode     `algorithm.compensation`: delta (default) | none | gradient
    lam      `algorithm.lam` (gradient mode only)

The round is OSP's (push A after tau local steps, keep training in the overlap window, wait after
W window steps); only step (4), what the worker does when w_{r+1} arrives, changes:

    delta:     x = w_{r+1} - A                                  re-apply own unpushed progress
    gradient:  x = w_{r+1} - (A + lam * A*A*(w_{r+1} - w_r))    DC-ASGD-style first-order
                                                                correction of the stale part
    none:      x = w_{r+1}                                      = OSP

A is kept (pushed next round), so the window's progress enters the global model once, through the
push, and the worker's own model already contains it (no double counting: `base` is set so that
base - x = A again).

Sign convention: algorithms.md writes "x = w_{r+1} + A" with A += x_before - x_after; the
intended meaning, "re-apply own progress", is x = w_{r+1} - A with that A. The code does that.

State: OSP's (`global_model`, `base`, `num_round_steps`, `num_pushes`, `num_rounds`).

Deviations from the paper and the reference code: all of OSP's (algorithms/osp.py: PS computed
with collectives, one control value per push, collective `drain()`, `finish()` pushes all and
sets x = w, windows decided by `Pending.is_completed()` on the run's clock, the evaluated model
is w, not the compensated local models, and trajectories depend on `eval_every`),
and [I]: the compensation rule itself and its two alternatives (`none`, `gradient`) are
interpretations; `gradient` borrows DC-ASGD's lam * g*g*(w_new - w_old) with the progress A in
place of the gradient; `finish()` ends on the consensus w, not on a compensated model.
"""

from __future__ import annotations

from algorithms.losp_config import Config
from algorithms.osp import OSP


class LOSP(OSP):
    Config = Config

    def compensation(self) -> tuple[str, float]:
        return self.cfg.compensation, float(self.cfg.lam)
