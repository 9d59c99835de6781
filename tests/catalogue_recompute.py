"""The catalogue's cases of issue 50 (the results tools as safe as the training engine) for `python
-m analysis.recompute` (make recompute): tests/test_catalogue.py runs them with the others
(tests/catalogue.py's machinery)."""

from __future__ import annotations

from tests.catalogue import Case

CASES: list[Case] = []
