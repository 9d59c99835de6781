"""Reports: the runs of a preset or a sweep -> tables, figures, claims.md and provenance, and the
pages made from reports.

- report.py: the report pipeline (`python -m analysis.reports.report`, `make <preset>`):
  `report`, `report_experiment`, `write_provenance`; staging.py writes a report whole or not at
  all (`staged_report`, `check_out`, `report_files`);
- tables.py (the tables: final accuracy, time to target, the presets' columns) and
  table_cells.py (how a cell is written);
- figures.py (learning curves, accuracy against time, the time breakdown), figure_layout.py
  (colours, sizes, small multiples), utilization.py (where each worker's time went) and
  report_figures.py (which figures a report draws);
- adhoc.py: the comparison an ad-hoc sweep ends with (`python run.py -m algorithm=losp,osp ...`);
- wandb_report.py: W&B comparison reports (`python -m analysis.reports.wandb_report`);
- verdict_page.py: results/README.md from the results' claims.json
  (`python -m analysis.reports.verdict_page`).

Imports: analysis.claims, analysis.stats, analysis.runs, analysis.stops and the lower floors."""
