"""The exact tests that decide where a t-test cannot (no spread: 0/0): the sign-flip
permutation test of a mean of paired differences, every sign pattern enumerated (up to
`EXACT_MAX` values, else as many drawn with a fixed seed), and the two-sample permutation test
of a difference of means (`scipy.stats.permutation_test`). Both give one-sided p-values."""

from __future__ import annotations

import numpy as np
from scipy import stats

from analysis.stats.constants import BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED

EXACT_MAX = 16  # up to 2^16 sign patterns enumerated; above, as many drawn at random


def sign_flip(x: np.ndarray, direction: int) -> float:
    """One-sided p of the sign-flip permutation test of mean(x) = 0: the share of sign patterns
    whose mean is at least as far on `direction`'s side as the observed one (exact up to
    EXACT_MAX values, else as many patterns drawn with a fixed seed)."""
    n = len(x)
    if n <= EXACT_MAX:
        signs = ((np.arange(2**n)[:, None] >> np.arange(n)) & 1) * 2 - 1
    else:
        rng = np.random.default_rng(BOOTSTRAP_SEED)
        signs = rng.choice([-1, 1], size=(2**EXACT_MAX, n))
        signs[0] = 1
    means = (signs * x).mean(axis=1)
    observed, tol = float(x.mean()), 1e-12 * max(1.0, float(np.abs(x).max()))
    share = means >= observed - tol if direction > 0 else means <= observed + tol
    return float(np.mean(share))


def permutation(x: np.ndarray, y: np.ndarray, alternative: str) -> float:
    """One-sided p of the two-sample permutation test of mean(x) - mean(y) (exact for small
    samples)."""
    result = stats.permutation_test(
        (x, y),
        lambda u, v, axis=-1: np.mean(u, axis=axis) - np.mean(v, axis=axis),
        permutation_type="independent",
        vectorized=True,
        alternative=alternative,
        n_resamples=BOOTSTRAP_RESAMPLES,
        rng=np.random.default_rng(BOOTSTRAP_SEED),
    )
    return float(result.pvalue)
