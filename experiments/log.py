"""Metric sinks: `log(metrics, step)` and `close()`; rank 0 only.

The JSONL file in the run directory is always written and is the source of truth; W&B mirrors
it (mode `disabled`, `offline` (default) or `online`; project from the config, group = the
experiment, job type = the algorithm).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Protocol

from experiments.records import METRICS


class Sink(Protocol):
    def log(self, metrics: dict[str, Any], step: int) -> None: ...

    def close(self) -> None: ...


class JsonlSink:
    """Appends one JSON object per call to metrics.jsonl, flushed at once."""

    def __init__(self, run_dir: Path):
        self.path = Path(run_dir) / METRICS
        self._f = self.path.open("w")  # a rerun of an unfinished run starts its record afresh

    def log(self, metrics: dict[str, Any], step: int) -> None:
        row = {"step": step, **{k: _clean(v) for k, v in metrics.items()}}
        self._f.write(json.dumps(row, sort_keys=True) + "\n")
        self._f.flush()

    def close(self) -> None:
        self._f.close()


def _clean(v: Any) -> Any:
    # JSON has no NaN/inf; a diverged run's loss is recorded as null.
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


class WandbSink:
    def __init__(self, run_dir: Path, cfg: dict[str, Any], run_name: str):
        import wandb

        wb = cfg["wandb"]
        self._wandb = wandb
        self._run = wandb.init(
            project=wb["project"],
            entity=wb.get("entity"),
            mode=wb["mode"],
            dir=str(run_dir),
            group=cfg.get("experiment_name"),
            job_type=cfg["algorithm"]["name"],
            name=run_name,
            # tags to filter and group by in a W&B comparison report
            tags=[
                f"tau={cfg['tau']}",
                f"partition={cfg['partition']['name']}",
                f"scale={cfg.get('scale', {}).get('name', 'custom')}",
                f"timing={cfg['timing']}",
            ],
            config=cfg,
            settings=wandb.Settings(silent=True, console="off"),
        )

    def log(self, metrics: dict[str, Any], step: int) -> None:
        self._run.log(metrics, step=step)

    def close(self) -> None:
        self._run.finish()


class MultiSink:
    def __init__(self, sinks: list[Sink]):
        self.sinks = sinks

    def log(self, metrics: dict[str, Any], step: int) -> None:
        for s in self.sinks:
            s.log(metrics, step)

    def close(self) -> None:
        for s in self.sinks:
            s.close()


def make_sinks(run_dir: Path, cfg: dict[str, Any], run_name: str) -> MultiSink:
    sinks: list[Sink] = [JsonlSink(run_dir)]
    if cfg["wandb"]["mode"] != "disabled":
        sinks.append(WandbSink(run_dir, cfg, run_name))
    return MultiSink(sinks)
