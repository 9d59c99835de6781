"""Performance benchmarks of the suite: `make bench` = `python -m benchmarks`.

Every figure is a ratio of two measurements made side by side in one invocation (see
benchmarks/RESULTS.md for what each one means and the latest numbers):

- `harness.py`   run.py in a subprocess and its run records; medians; the machine's description
- `baselines.py` plain PyTorch (DDP, single process) on the suite's own composed config
- `memory.py`    in-process peak-memory harness (gloo workers, the algorithms' hooks)
- `families.py`  the six benchmark families
- `quick.py`     `make bench-quick`: the headline ratios only, <= 10 min (RESULTS-quick.md)
- `report.py`    Markdown and JSON output
"""
