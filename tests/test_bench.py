"""`python -m benchmarks --quick` (what `make bench` runs, a few steps per run): every family
runs, the Markdown table and its JSON are written, and every figure is a finite positive number.
The targets are checked by running the full benchmarks, not here."""

from __future__ import annotations

import json
import math

import pytest

from benchmarks.families import FAMILIES
from tests.cli import module

pytestmark = pytest.mark.e2e


def test_quick_benchmarks_write_every_figure(tmp_path):
    out = tmp_path / "RESULTS.md"
    proc = module("benchmarks", "--quick", "--out", str(out), timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

    text = out.read_text()
    assert "| figure | measured | target | verdict |" in text
    assert "GPU figures" in text and "pending" in text
    results = json.loads(out.with_suffix(".json").read_text())
    assert results["errors"] == {}
    assert set(results["sections"]) == set(FAMILIES)
    for key, section in results["sections"].items():
        assert section["rows"], key
        assert section["title"] in text
        assert section["figures"], key
        for figure in section["figures"]:
            value = figure["value"]
            assert isinstance(value, int | float) and math.isfinite(value) and value > 0, (
                key,
                figure,
            )
    assert results["meta"]["command"].startswith("python -m benchmarks --quick")
