"""cluster.batched (experiments/workers/batched.py) as the pre-flight checks it: torch-free, as
everything run.py checks before the model and the devices (experiments/preflight.py), so that
bad input is answered without importing torch."""

from __future__ import annotations

from typing import Any

from experiments.errors import UserError

# cluster.batched=auto batches on a GPU, and on a CPU from this many workers: measured on 2
# cores (`python -m benchmarks --only sim`), a thread per worker is faster at 4 workers (0.88 of
# one model's speed against 0.69 batched) and slower at 16 (0.26 against 0.65).
AUTO_MIN_WORKERS_CPU = 8
CHOICES = ("auto", "true", "false")


def lockstep_seeds(cfg: dict[str, Any]) -> int:
    """cluster.lockstep_seeds: the most seeds of one config a sweep trains in one batched pass
    (experiments/workers/sim.py); 1 where the cluster has no in-process workers."""
    c = cfg["cluster"]
    return int(c.get("lockstep_seeds") or 1) if c.get("in_process") else 1


def choice(cfg: dict[str, Any]) -> str:
    """cluster.batched as one of CHOICES (a YAML boolean or its spelling as a string)."""
    return str(cfg["cluster"]["batched"]).lower()


def check(cfg: dict[str, Any], algorithm_config: type) -> None:
    """One-line errors for a configuration that cluster.batched cannot run (`algorithm_config`:
    the algorithm's Config class, or its rule class: both tell `checkpoint_anywhere`)."""
    seeds = cfg["cluster"]["lockstep_seeds"]
    if isinstance(seeds, bool) or not isinstance(seeds, int) or seeds < 1:
        raise UserError(f"cluster.lockstep_seeds must be a whole number >= 1, got {seeds!r}")
    value = choice(cfg)
    if value not in CHOICES:
        raise UserError(
            f"cluster.batched must be auto, true or false, got {cfg['cluster']['batched']!r}"
        )
    if value != "true":
        return
    if not cfg["cluster"].get("in_process"):
        raise UserError(
            "cluster.batched=true batches the workers of one process: it needs "
            "cluster.in_process=true (cluster=sim)"
        )
    if not algorithm_config.checkpoint_anywhere:
        raise UserError(
            f"cluster.batched=true computes every worker's step together, but "
            f"{cfg['algorithm']['name']} starts its collectives at rank-dependent steps "
            "(algorithms/base.py, checkpoint_anywhere): use cluster.batched=false or auto"
        )
