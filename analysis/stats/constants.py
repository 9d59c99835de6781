"""The numbers every test of analysis.stats is made with: the level of every claim, the power
at which a minimum detectable difference is stated, and the size and seed of the resampling
(the exact tests' drawn patterns and permutations, the ratios' bootstrap)."""

ALPHA = 0.05  # every claim's level
POWER = 0.8  # the power at which the minimum detectable difference is stated
BOOTSTRAP_RESAMPLES = 9999
BOOTSTRAP_SEED = 0  # a report regenerated from the same runs prints the same intervals
