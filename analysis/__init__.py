"""Run records -> tidy frames, statistics, claims, tables, figures and reports, in rooms by job.
Each room imports only from the rooms above it in this list (tests/test_layout.py):

- stops.py: Ctrl-C and the stop signals of every results command (one line, the shell's code);
- runs/: reading runs and records (load, grids, like-with-like, rates, convergence, the
  committed runs.jsonl.gz, `python -m analysis.runs.status`);
- stats/: the statistics every comparison uses (paired tests, exact tests, power, Holm);
- claims/: the papers' claims and the controls, checked on a preset's runs;
- reports/: tables, figures, the report pipeline (`python -m analysis.reports.report`), ad-hoc
  sweep comparisons, W&B reports and the verdicts page;
- reproduce/ and tuning/ (neither imports the other): `make recompute`/`make verify`, and
  `make tune`.

docs/extending.md maps the whole suite and says where to start for the common changes."""
