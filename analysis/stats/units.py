"""How the statistics write a value in its unit: accuracies to three decimals, ratios in percent
(a difference of two in points of percent), bytes in decimal units (`human_bytes`, which the
reports' tables write their byte cells with too), seconds to three significant digits; `UNITS`
maps a column to its unit, `unit_of` finds the sides' unit."""

from __future__ import annotations

import math
from collections.abc import Sequence

UNITS = {"acc": "acc", "ratio": "ratio", "efficiency": "ratio", "peak": "bytes"}
UNITS["bytes_per_step"] = "bytes"
UNITS["fast_idle"] = "ratio"  # a share of the budget, shown in percent


def unit_of(a: Sequence[float], b: Sequence[float], plain: str = "acc") -> str:
    """The unit of the sides' column: accuracies, ratios, bytes, else seconds; `plain` when the
    sides do not say (plain lists)."""
    column = getattr(b, "column", "") or getattr(a, "column", "")
    return UNITS.get(column, "s") if column else plain


def value_text(value: float, unit: str) -> str:
    if value is None or math.isnan(value):
        return "–"
    if unit == "acc":
        return f"{value:.3f}"
    if unit == "ratio":
        return f"{100 * value:.1f}%"
    if unit == "bytes":
        return human_bytes(value)
    return f"{value:.3g} s"


def magnitude_text(value: float, unit: str) -> str:
    """A difference's size in its unit (a ratio's in points of percent)."""
    if unit == "ratio":
        return f"{100 * value:.2g} points"
    if unit in ("acc",):
        return f"{value:.3f}"
    return value_text(value, unit)


def signed_text(value: float, unit: str) -> str:
    if value is None or math.isnan(value):
        return "–"
    if unit == "acc":
        return f"{value:+.3f}"
    if unit == "ratio":  # a difference of two ratios: in points of percent
        return f"{100 * value:+.1f} points"
    return f"{value:+.3g}" + (" s" if unit == "s" else "")


def p_text(p: float | None) -> str:
    if p is None or math.isnan(p):
        return "–"
    return "< 0.001" if p < 0.001 else f"= {p:.3f}"


def human_bytes(number: float) -> str:
    """Bytes in decimal units, three significant digits: "512 B", "12.3 MB", "1.23 GB"."""
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(number) < 999.5 or unit == "TB":
            return f"{number:.0f} {unit}" if unit == "B" else f"{number:.3g} {unit}"
        number /= 1000
    raise AssertionError("unreachable")
