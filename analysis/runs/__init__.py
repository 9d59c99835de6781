"""Reading runs and records: what every other room of analysis/ starts from.

- load.py: run directories -> one tidy DataFrame (`load_runs`, `load_summaries`, `find_runs`,
  `read_config`, `read_summary`, `read_metrics`, `RecordWarning`);
- records.py: a result's runs in one committed file, runs.jsonl.gz (`read_records`,
  `write_records`, `run_record`, `write_run_dir`);
- grid.py: a preset's sweep grid, to say which of its runs are missing (`compose_preset`,
  `expand_sweeps`, `canonical`);
- compare.py: like with like: the keys that tell runs apart and the labels made of them
  (`split_rows`, `series_label`, `run_values`, `order_key`);
- rates.py: the line under a table saying at which base learning rate its rows ran;
- convergence.py: did a run converge (experiments/store/convergence.py's rule on many runs);
- status.py: how a sweep's runs stand, from their records (`python -m analysis.runs.status`).

Imports: analysis.stops and the suite's lower floors (experiments/, algorithms/) only."""
