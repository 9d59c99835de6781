"""The papers' claims, checked on the runs of a preset, with statistics.

A preset's `report.claims` lists names from `CLAIMS`. Each check takes the runs (one row per run:
`load_summaries` output, config + `summary.*` columns) and the report node, and returns a
`ClaimResult`: holds (True), does not hold (False) or cannot tell (None), one line of evidence
and one line per comparison it made (`details`).

The rules, written into every `claims.md` (`METHOD`):

- Sides. Only completed and diverged runs count. A side of a comparison is one method (the
  algorithm and the knobs that vary within it, e.g. `powersgd (rank=4)`) under one condition:
  like with like, so runs that differ in any other configuration key (`tau`, `compute.slowdown`,
  `workers`, `network.name`, ...: `analysis.runs.compare`) are never compared or pooled across it. A
  tau-less method (`TAU_LESS`: sync SGD, PowerSGD, pseudo-sync) does not depend on `tau`, so its
  runs meet the round-based methods at every tau. n = the runs on a side.
- Tests (`analysis.stats`, which says each in full): paired by seed, since a seed gives every
  method the same data order, partition draw and initial model (tests/test_pairing.py): the
  paired t-test of the per-seed differences and its 95% interval; the exact sign-flip test
  where the differences have no spread (so that no "holds" rests on zero spread: it needs
  n >= 6); Welch's t-test (or an exact permutation test) where the sides do not pair. Each
  test states its minimum detectable difference at 80% power, and where it cannot tell, the n
  that would reach the claim's margin. Ratios of means: a percentile bootstrap (paired where
  the sides pair). A comparison holds when its interval lies wholly on the claimed side of its
  threshold, does not hold when wholly on the other, cannot tell otherwise (alpha = 0.05).
- Equivalence ("comparable accuracy"): paired TOST at alpha (the 90% interval of the
  difference inside +-margin).
- A quantity the timing model fixes, equal on every seed of both sides, is reported "by the
  model", not tested.
- Diverged runs rank below every accuracy: in an accuracy comparison a diverged run counts as
  accuracy 0 (so a method that diverges on some seeds has a low mean and a wide interval, and
  one whose runs all diverged loses to any that completed). Time and communication statistics
  use completed runs only (a diverged run stopped early). Divergence itself is an event, not a
  mean: "X diverges" is an observation (at least one run diverged), stated as such.
- Convergence. A comparison of accuracies (or of times to an accuracy) cannot tell ("not
  converged: cannot tell") when more than one run in eight of a side did not converge
  (`analysis.runs.convergence`; `analysis.stats.convergence_gate`): a run stopped while still
  improving says nothing about where the method ends. The test is made all the same and shown
  beside ("tested regardless: holds"), outside the claim's Holm family; one flagged run in eight
  or fewer is named under a test that decides. Bytes, peaks and time per step do not depend on
  it, and a claim at a fixed budget (steps, or time) compares what the runs reach there.
- No pseudo-replication: a tau-less method run at several taus (the same configuration but for
  a key it ignores) counts once per seed (`per_run` keeps one run per method, condition and
  seed).
- "At every tau" (and every condition): each cell as above, then combined: holds if every cell
  holds (an intersection-union test at alpha, which needs no correction), does not hold if one
  does not after Holm's correction over the claim's comparisons, cannot tell otherwise.

Where: the runs per side in analysis/claims/runs.py, the registry, the result and the comparisons
in analysis/claims/rules.py (`PairClaim`: a claim that compares two algorithms pair by pair is a
definition, checked by one evaluator), the seed papers' tables' claims in
analysis/claims/checks.py, their other claims and the controls in analysis/claims/verdicts.py. This
package gathers them: importing it registers every claim, and the names the report and the
tests use are importable from here.

Imports: analysis.stats, analysis.runs, analysis.stops and the lower floors; nothing of the
reports.
"""

from analysis.claims import checks, verdicts
from analysis.claims.rules import (
    CLAIMS,
    COMPARABLE,
    EQUAL_BYTES,
    FAR_LESS_PEAK,
    LOSP,
    OSP,
    ClaimResult,
    check_claims,
    claims_markdown,
    validate_claims,
    write_claims,
)
from analysis.claims.runs import Cell, cells, per_run
from analysis.stats import ALPHA, combine, compare, equivalent, ratio_below, welch

# The names the reports and the tests read from here; `checks` and `verdicts` are imported for the
# claims they register.
__all__ = ["CLAIMS", "COMPARABLE", "EQUAL_BYTES", "FAR_LESS_PEAK", "LOSP", "OSP", "ClaimResult"]
__all__ += ["check_claims", "claims_markdown", "validate_claims", "write_claims", "Cell"]
__all__ += ["cells", "per_run", "ALPHA", "combine", "compare", "equivalent", "ratio_below"]
__all__ += ["welch", "checks", "verdicts"]
