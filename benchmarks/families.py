"""The six benchmark families. Each returns a `Section`: its table, its figures (ratios, each
measured side by side in this invocation) and the notes that explain them.

    overhead  sync_sgd vs DistributedDataParallel; local_sgd (tau = 1000) vs plain training
    overlap   overlap methods under an emulated network sized to one compute step, vs ideal
    volume    bytes per step of every algorithm vs its closed form; PowerSGD compression
    memory    peak memory per worker vs plain training; model-sized copies held
    clock     timing=virtual vs timing=real, wall-clock per step
    scaling   steps per second with 1, 2, 4 and 8 workers on this machine
    sim       workers in one process (cluster=sim): fixed cost of a run, throughput vs one model
    workflows `make demo` and `make table1 SCALE=cpu CLUSTER=sim`, end to end
    bad_input `python run.py algorithm=nope` and `tau=0`: the one-line error without torch

Each family lives in a module of its own group (the shared types and statistics in
benchmarks/section.py, families 1-2 in family_overhead.py, 3-6 in family_cost.py, 7-9 in
family_runs.py); `FAMILIES` names them in the order they run, and every name the benchmarks'
other modules and tests use is importable from here.
"""

from __future__ import annotations

from collections.abc import Callable

from benchmarks.family_cost import (
    HELD_BY_DESIGN,
    clock,
    closed_form_bytes,
    memory,
    memory_model,
    memory_spec,
    scaling,
    volume,
)
from benchmarks.family_overhead import (
    WIDE_MODEL_NOTE,
    OverheadPairs,
    _step_row,
    not_emulated,
    overhead,
    overhead_pairs,
    overlap,
    overlap_overrides,
)
from benchmarks.family_runs import (
    TINY_RUN,
    _timed_run,
    _wall_of_run,
    bad_input,
    sim,
    workflows,
)
from benchmarks.section import (
    HALF_WIDTH,
    MAX_WORKERS,
    OVERLAP_SEEDS,
    Context,
    Figure,
    Section,
    Settings,
    _interleaved,
    _ms,
    _pair_spread,
    _pooled_ratio,
    cuda_placement,
    finite_positive,
)

FAMILIES: dict[str, Callable[[Settings, Context], Section]] = {
    "overhead": overhead,
    "overlap": overlap,
    "volume": volume,
    "memory": memory,
    "clock": clock,
    "scaling": scaling,
    "sim": sim,
    "workflows": workflows,
    "bad_input": bad_input,
}

# The names other modules (benchmarks/quick.py, benchmarks/report.py, benchmarks/__main__.py)
# and tests/test_bench.py read from here.
__all__ = ["FAMILIES", "HELD_BY_DESIGN", "clock", "closed_form_bytes", "memory", "memory_model"]
__all__ += ["memory_spec", "scaling", "volume", "WIDE_MODEL_NOTE", "OverheadPairs", "_step_row"]
__all__ += ["overhead", "overhead_pairs", "overlap", "overlap_overrides", "not_emulated"]
__all__ += ["TINY_RUN"]
__all__ += [
    "_timed_run",
    "_wall_of_run",
    "bad_input",
    "sim",
    "workflows",
    "HALF_WIDTH",
    "MAX_WORKERS",
]
__all__ += ["OVERLAP_SEEDS", "Context", "Figure", "Section", "Settings", "_interleaved", "_ms"]
__all__ += ["_pair_spread", "_pooled_ratio", "cuda_placement", "finite_positive"]
