"""Fair tuning: each method's learning rate chosen on a validation split, never the test set.

- tune.py: the rule and the tuning files (`python -m analysis.tuning.tune`: experiment=tune ->
  conf/tuned/<scale>.yaml);
- tune_preset.py: each method tuned at a preset's own setting (`make tune PRESET=<name>`,
  `python -m analysis.tuning.tune_preset`).

Imports: analysis.reports (tables' time to target), analysis.runs, analysis.stops and the lower
floors; not analysis.reproduce."""
