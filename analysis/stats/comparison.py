"""A comparison's two parts: `Side`, one method's values with where they come from (their
seeds, column, convergence), and `Comparison`, what one test of two sides found (estimate,
interval, p, verdict, power) and how it reads in a report (`Comparison.text`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from analysis.stats.power import MAX_N
from analysis.stats.units import magnitude_text, p_text, signed_text, value_text

VERDICTS = {True: "holds", False: "does not hold", None: "cannot tell"}


class Side(np.ndarray):
    """A side's values with where they come from: `seeds` (one per value, or None), the
    `column` they are of, and what `analysis.runs.convergence` found: `unconverged` runs of
    `runs`."""

    method: str = ""
    unconverged: int = 0
    runs: int = 0
    seeds: tuple | None = None
    column: str = ""

    @classmethod
    def of(
        cls,
        values: Sequence[float],
        method: str = "",
        unconverged: int = 0,
        runs: int = 0,
        seeds: Sequence[float] | None = None,
        column: str = "",
    ) -> Side:
        side = np.asarray(values, dtype=float).view(cls)
        side.method, side.unconverged, side.runs, side.column = method, unconverged, runs, column
        side.seeds = None if seeds is None else tuple(float(s) for s in seeds)
        if side.seeds is not None and len(side.seeds) != len(side):
            raise ValueError(f"{len(side.seeds)} seeds for {len(side)} values")
        return side

    def __array_finalize__(self, obj: Any) -> None:
        self.method = getattr(obj, "method", "")
        self.unconverged = getattr(obj, "unconverged", 0)
        self.runs = getattr(obj, "runs", 0)
        self.seeds = getattr(obj, "seeds", None)
        self.column = getattr(obj, "column", "")


@dataclass(frozen=True)
class Comparison:
    """One test: side a against side b, `estimate` (mean a - b, or a / b for a ratio) with its
    interval [`low`, `high`] at `level`, `p` (None for a bootstrap), `holds` against
    `threshold` in the claimed `direction` (+1: above it, -1: below it, 0: within +-threshold).
    `test` names the test made; `n` the pairs of a paired test; `mdd` its minimum detectable
    difference at POWER and `n_needed` the n at which it would reach `margin`; `p_against` the
    p-value of "does not hold" (what Holm corrects); `note` a correction's word."""

    a: str
    b: str
    a_values: tuple[float, ...]
    b_values: tuple[float, ...]
    estimate: float
    low: float
    high: float
    level: float
    p: float | None
    threshold: float
    direction: int
    kind: str  # "diff" | "ratio" | "equivalence"
    holds: bool | None
    why: str = ""
    test: str = ""  # "paired t" | "sign-flip" | "Welch" | "permutation" | "bootstrap" | "model"
    n: int = 0  # pairs (paired tests), else 0
    mdd: float = math.nan
    margin: float = math.nan
    n_needed: int | None = None
    p_against: float | None = None
    note: str = ""
    unit: str = "acc"  # of the sides' column: acc, s, ratio or bytes (`units.unit_of`)
    sign: str = ""  # an equivalence that cannot tell: the difference's own direction, if any

    @property
    def n_a(self) -> int:
        return len(self.a_values)

    @property
    def n_b(self) -> int:
        return len(self.b_values)

    @property
    def paired(self) -> bool:
        return self.n > 0

    @property
    def key(self) -> tuple:
        return (self.kind, self.a, self.b, self.a_values, self.b_values, self.threshold)

    @property
    def verdict(self) -> str:
        return VERDICTS[self.holds] + (" (by the model)" if self.test == "model" else "")

    def text(self, unit: str | None = None) -> str:
        """ "losp 0.913 vs osp 0.905 (paired, n=8): difference +0.008, 95% CI [+0.002,
        +0.014], paired t p = 0.020; MDD 0.006" (`unit`: acc, ratio, s or bytes; default the
        sides' own)."""
        unit = unit or self.unit
        if self.paired:
            head = (
                f"{self.a} {value_text(mean_of(self.a_values), unit)} vs {self.b} "
                f"{value_text(mean_of(self.b_values), unit)} (paired, n={self.n})"
            )
        else:
            head = (
                f"{self.a} {value_text(mean_of(self.a_values), unit)} (n={self.n_a}) vs "
                f"{self.b} {value_text(mean_of(self.b_values), unit)} (n={self.n_b})"
            )
        if self.why and (math.isnan(self.low) or self.test == "model"):
            return f"{head}: {self.why}"
        lead = f"{self.why}: " if self.why else ""  # a test made, its verdict set aside
        percent = f"{100 * self.level:g}%"
        if self.test == "model":
            what = "ratio" if self.kind == "ratio" else "difference"
            shown = (
                f"{self.estimate:.3g}" if self.kind == "ratio" else signed_text(self.estimate, unit)
            )
            against = f"{self.threshold:g}" if self.kind == "ratio" else ""
            against = f" vs {against}" if against else ""
            return (
                f"{head}: {what} {shown}{against}, by the model (the same value on every seed "
                "of both sides: set by the timing model, not sampled)"
            )
        if self.kind == "ratio":
            body = (
                f"ratio {self.estimate:.3g}, {percent} bootstrap CI [{self.low:.3g}, "
                f"{self.high:.3g}] vs {self.threshold:g}"
            )
        else:
            body = (
                f"difference {signed_text(self.estimate, unit)}, {percent} CI "
                f"[{signed_text(self.low, unit)}, {signed_text(self.high, unit)}]"
            )
            if self.kind == "equivalence":
                body += f" vs margin ±{value_text(self.threshold, unit)}, TOST p {p_text(self.p)}"
                if self.sign:
                    body += f"; the difference itself {self.sign}"
            else:
                against = f" vs {signed_text(self.threshold, unit)}" if self.threshold else ""
                body += f"{against}, {self.test} p {p_text(self.p)}"
        return f"{head}: {lead}{body}{self._power(unit)}{self.note}"

    def _power(self, unit: str) -> str:
        if math.isnan(self.mdd):
            return ""
        what = "smallest provable margin" if self.kind == "equivalence" else "MDD"
        out = f"; {what} {magnitude_text(self.mdd, unit)}"
        n = self.n or min(self.n_a, self.n_b)
        if self.holds is None and not self.why and self.n_needed is not None and self.n_needed > n:
            need = ">" + str(MAX_N) if self.n_needed > MAX_N else str(self.n_needed)
            out += (
                f"; cannot tell at n = {n} (n = {need} needed for MDD ≤ "
                f"{magnitude_text(self.margin, unit)})"
            )
        return out

    def verdict_text(self, unit: str | None = None) -> str:
        """ "cannot tell: <text>"."""
        return f"{self.verdict}: {self.text(unit)}"


def mean_of(values: Sequence[float]) -> float:
    """The mean of `values`; nan for none."""
    return float(np.mean(values)) if len(values) else math.nan
