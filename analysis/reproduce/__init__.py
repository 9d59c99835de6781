"""Reproduction of the committed results.

- recompute.py: every committed result rebuilt from its committed records alone and compared
  byte for byte (`python -m analysis.reproduce.recompute`, `make recompute`; `--update` rewrites
  them after a change to a report);
- verify.py: a sample of the committed points trained again and compared with their records
  (`python -m analysis.reproduce.verify`, `make verify`);
- replicate.py: a preset's committed claims tested again on seeds never used, each verdict
  said to replicate or not (`python -m analysis.reproduce.replicate`, `make replicate`);
- robustness.py: a preset's committed claims tested again at other learning rates on the same
  seeds, each decisive verdict said to be robust to the rate or where it is not (`python -m
  analysis.reproduce.robustness`, `make robustness`);
- power.py: a preset's claims that cannot tell run again at the n that reaches their margin (at
  most 24), on the committed seeds and the next ones (`python -m analysis.reproduce.power`,
  `make power`).

Imports: analysis.reports (the report it reruns), analysis.runs, analysis.stops and the lower
floors; not analysis.tuning."""
