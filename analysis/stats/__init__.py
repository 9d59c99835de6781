"""The statistics behind every claim: paired by seed, with power, corrected where one claim
makes several comparisons.

Every method of a preset runs the same seeds, and a seed fixes a run's data order, partition
draw and initial model whatever the algorithm (tests/test_pairing.py checks it), so two methods'
runs of one seed share their luck. A comparison of two sides is therefore made on the per-seed
differences d_i = a_i - b_i (`Side.seeds` says which run is which seed):

- **Paired t-test** of mean(d) against the claim's threshold (`scipy.stats.ttest_1samp`), with
  its 95% interval; holds when the interval lies wholly on the claimed side, does not hold when
  it lies wholly on the other, cannot tell otherwise (a two-sided test at `ALPHA`).
- **No spread is no evidence.** When the differences have no spread (every seed the same
  difference: small n on a coarse test set), the t-test is 0/0; the exact sign-flip
  permutation test of d decides instead (all 2^n sign patterns), whose smallest two-sided
  p-value is 2/2^n: below 0.05 only from n = 6 seeds.
- **Unpaired fallback.** Where the sides do not pair (no seeds, or a seed on a side twice),
  Welch's t-test (`scipy.stats.ttest_ind(equal_var=False)`); with no spread on a side, the
  exact two-sample permutation test (`scipy.stats.permutation_test`) decides.
- **Power.** With each test its minimum detectable difference (MDD): the true difference the
  test finds with 80% power (`POWER`) at `ALPHA`, (t_{1-alpha/2, n-1} + t_{power, n-1}) s/sqrt(n)
  for s the standard deviation of the differences. Where a comparison cannot tell and its MDD
  is above the claim's margin (`EFFECT_ACC` for accuracies, `EFFECT_REL` of the reference's
  mean for times, bytes and ratios, the equivalence margin for "comparable"), the text says
  "cannot tell at n = k (n = N needed for MDD <= margin)", N from the same formula at the
  observed s.
- **Equivalence** ("comparable"): TOST at ALPHA, the 90% interval of mean(d) inside
  +-margin; its power figure is the smallest margin TOST would show at 80% power when the
  methods are equal.
- **Ratios** of means: a percentile bootstrap (paired: the seeds resampled jointly), 95%.
- **By the model.** A quantity the timing model fixes (`MODELED`: comm/compute ratio, exposed
  and training time per epoch, bytes, peaks) that takes one value on every seed of both sides
  is not sampled: it is reported "by the model" with its value, not tested.
- **Several comparisons, one claim** (every tau, every condition): the claim holds when every
  comparison holds, each at ALPHA (an intersection-union test, which needs no correction); a
  "does not hold" of one comparison stands only after Holm's step-down correction over all the
  claim's comparisons (`holm`), else that comparison cannot tell.
- **Convergence** (`convergence_gate`): a comparison of accuracies, or of times to an
  accuracy, cannot tell when more than one run in eight (`GATE_SHARE`) of a side was flagged
  not converged (analysis/runs/convergence.py); the test is made all the same on the same runs
  and shown beside it ("tested regardless: holds", outside the claim's Holm family), and flags
  at or under that share are named under a test that decides.

The package, one job a module, each importing only from those listed before it:

- constants.py: `ALPHA`, `POWER` and the resampling's `BOOTSTRAP_RESAMPLES` and
  `BOOTSTRAP_SEED`, which the tests share;
- units.py: how a value is written in its unit (`UNITS`: accuracy, ratio, bytes, else
  seconds), and `human_bytes`, which the reports' tables use too;
- exact.py: the exact sign-flip and two-sample permutation tests (`EXACT_MAX`);
- power.py: the minimum detectable difference, TOST's smallest provable margin and the n
  needed (`MAX_N`, `MIN_EXACT_N`);
- comparison.py: `Side` (a method's values, seeds, column, convergence) and `Comparison` (what
  one test found, and its text; `VERDICTS`);
- multiple.py: several comparisons, one claim: `combine`, `holm`, `corrected`, `deciding`,
  `aside` (a test outside the claim's family);
- testing.py: the tests of two sides: `compare`, `welch`, `equivalent`, `ratio_below`
  (`EFFECT_ACC`, `EFFECT_REL`, `MODELED`), and the convergence rule (`convergence_gate`,
  `GATE_SHARE`).

It offers all these names (`__all__`), and, for the claims and the verdicts page, a side's
mean and how a value and a difference are written: `_mean`, `_value`, `_magnitude`, `_signed`
(`comparison.mean_of`, `units.value_text`, `units.magnitude_text`, `units.signed_text`).
"""

from analysis.stats.comparison import VERDICTS, Comparison, Side
from analysis.stats.comparison import mean_of as _mean
from analysis.stats.constants import ALPHA, BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED, POWER
from analysis.stats.exact import EXACT_MAX
from analysis.stats.multiple import combine, corrected, deciding, holm
from analysis.stats.power import MAX_N, MIN_EXACT_N
from analysis.stats.testing import (
    EFFECT_ACC,
    EFFECT_REL,
    GATE_SHARE,
    MODELED,
    compare,
    convergence_gate,
    equivalent,
    ratio_below,
    welch,
)
from analysis.stats.units import UNITS, human_bytes
from analysis.stats.units import magnitude_text as _magnitude
from analysis.stats.units import signed_text as _signed
from analysis.stats.units import value_text as _value

__all__ = [
    "ALPHA",
    "BOOTSTRAP_RESAMPLES",
    "BOOTSTRAP_SEED",
    "EFFECT_ACC",
    "EFFECT_REL",
    "EXACT_MAX",
    "GATE_SHARE",
    "MAX_N",
    "MIN_EXACT_N",
    "MODELED",
    "POWER",
    "UNITS",
    "VERDICTS",
    "Comparison",
    "Side",
    "_magnitude",
    "_mean",
    "_signed",
    "_value",
    "combine",
    "compare",
    "convergence_gate",
    "corrected",
    "deciding",
    "equivalent",
    "holm",
    "human_bytes",
    "ratio_below",
    "welch",
]
