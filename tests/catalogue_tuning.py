"""The catalogue's cases of issue 50 (the results tools as safe as the training engine) for tuning
and the presets' inputs: `python -m analysis.tune_preset` (make tune), `python -m
experiments.sweep`, the tuned files and the pre-flight: tests/test_catalogue.py runs them with
the others (tests/catalogue.py's machinery)."""

from __future__ import annotations

from tests.catalogue import Case

CASES: list[Case] = []
