"""Where an equivalence cannot tell, the direction of the difference is stated when the
difference itself is significant (issue 49 item 5: pseudo-sync vs sync SGD was "cannot tell"
with every paired difference below 0), and not otherwise."""

from __future__ import annotations

from analysis.stats import Side, equivalent

SEEDS = list(range(8))
B = [0.88, 0.89, 0.90, 0.88, 0.89, 0.90, 0.90, 0.89]


def side(values, method):
    return Side.of(values, method, 0, len(values), SEEDS, "acc")


def test_a_significant_difference_inside_an_undecided_equivalence_says_its_direction():
    below = [0.86, 0.885, 0.885, 0.87, 0.872, 0.896, 0.888, 0.874]  # -0.020 ... -0.004
    made = equivalent("pseudo_sync", side(below, "pseudo_sync"), "sync_sgd", side(B, "b"), 0.015)
    assert made.holds is None
    assert made.sign.startswith("below 0 (95% CI [-0.017, -0.008], paired t")
    assert "; the difference itself below 0 (95% CI" in made.verdict_text()


def test_no_direction_where_the_difference_is_not_significant_or_the_equivalence_decides():
    spread = [-0.03, 0.03, -0.02, 0.025, -0.01, 0.02, -0.03, 0.01]
    around = [b + d for b, d in zip(B, spread, strict=True)]
    made = equivalent("a", side(around, "a"), "b", side(B, "b"), 0.015)
    assert made.holds is None and made.sign == ""
    same = equivalent("a", side(B, "a"), "b", side(B, "b"), 0.015)
    assert same.holds is True and same.sign == ""
