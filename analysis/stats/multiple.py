"""Several comparisons, one claim: `combine` (holds when every comparison holds, an
intersection-union test), and Holm's step-down correction of the claim's "does not hold"s:
`holm` itself, `corrected` (a claim checked twice, collecting then deciding), `after_holm` (the
step every comparison passes through), and `deciding` (the comparison a verdict rests on)."""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import Any

from analysis.stats.comparison import Comparison
from analysis.stats.constants import ALPHA


def combine(verdicts: Iterable[bool | None]) -> bool | None:
    """Holds if every one holds, does not hold if one does not, cannot tell otherwise (and
    cannot tell for none at all)."""
    verdicts = list(verdicts)
    if any(v is False for v in verdicts):
        return False
    return True if verdicts and all(v is True for v in verdicts) else None


# --- Holm over one claim's comparisons ----------------------------------------------------------

# A claim is checked twice (`corrected`): the first pass collects its comparisons' p-values of
# "does not hold", the second makes every comparison again with Holm's decision for its own.
_SEEN: contextvars.ContextVar[list | None] = contextvars.ContextVar("seen", default=None)
_DECIDED: contextvars.ContextVar[dict | None] = contextvars.ContextVar("decided", default=None)


def holm(p_values: Sequence[float], alpha: float = ALPHA) -> list[bool]:
    """Holm's step-down: which of the hypotheses with these p-values are rejected at family-wise
    level `alpha` (the i-th smallest against alpha / (k - i), stopping at the first kept)."""
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    rejected = [False] * len(p_values)
    for rank, i in enumerate(order):
        if p_values[i] > alpha / (len(p_values) - rank):
            break
        rejected[i] = True
    return rejected


def corrected(check: Callable[[], Any]) -> tuple[Any, list[Comparison]]:
    """Run `check` with Holm's correction of every "does not hold" it finds (the package's
    docstring): once to collect its comparisons, once more to decide. Returns what `check`
    returned the second time and the comparisons it made then (the corrected ones)."""
    token = _SEEN.set([])
    try:
        check()
        seen = _SEEN.get()
    finally:
        _SEEN.reset(token)
    tests = {c.key: c for c in seen if c.p_against is not None}
    keys = list(tests)
    rejected = holm([tests[k].p_against for k in keys])
    token = _DECIDED.set({"k": len(keys), **dict(zip(keys, rejected, strict=True))})
    again = _SEEN.set([])
    try:
        return check(), list(_SEEN.get())
    finally:
        _SEEN.reset(again)
        _DECIDED.reset(token)


def deciding(comparisons: Sequence[Comparison], holds: bool | None) -> Comparison | None:
    """The comparison a claim's verdict rests on, for a one-line summary: for "holds" the
    weakest of those that hold (the largest p), for "does not hold" the first that does not,
    for "cannot tell" the first that cannot (a test made, before one that was not)."""
    if not comparisons:
        return None
    if holds is True:
        held = [c for c in comparisons if c.holds is True]
        return max(held, key=lambda c: -1.0 if c.p is None else c.p) if held else None
    wanted = [c for c in comparisons if c.holds is holds]
    made = [c for c in wanted if not c.why]
    return (made or wanted or [None])[0]


def after_holm(c: Comparison) -> Comparison:
    """The step every comparison made passes through: noted for `corrected`'s first pass; on its
    second, a "does not hold" that Holm's correction over the claim's tests does not reject
    becomes "cannot tell"."""
    seen, decided = _SEEN.get(), _DECIDED.get()
    if seen is not None:
        seen.append(c)
    if decided is None or c.holds is not False or c.p_against is None:
        return c
    k = decided["k"]
    if decided.get(c.key, True) or k < 2:
        return c
    note = f"{c.note}; does not hold alone, not after Holm over {k} tests"
    return replace(c, holds=None, note=note)


def aside(test: Callable[[], Comparison]) -> Comparison:
    """`test()` made outside the claim's Holm family: neither collected by `corrected` nor
    corrected by it (a comparison shown beside a verdict that does not rest on it)."""
    seen, decided = _SEEN.set(None), _DECIDED.set(None)
    try:
        return test()
    finally:
        _SEEN.reset(seen)
        _DECIDED.reset(decided)
