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

from experiments.records import METRICS, write_text_atomic


class Sink(Protocol):
    def log(self, metrics: dict[str, Any], step: int) -> None: ...

    def close(self) -> None: ...


class JsonlSink:
    """metrics.jsonl: one JSON object per evaluation. Each call rewrites the file atomically
    (temporary file, fsync, rename: a few hundred rows at most), so a crash mid-write leaves the
    previous valid file, never a torn line.

    A rerun of an unfinished run starts the file afresh; a run resumed from a checkpoint at
    step `keep_until_step` keeps the rows up to that step and continues after them, so no row is
    lost or written twice (the rows logged after the checkpoint are logged again).
    """

    def __init__(self, run_dir: Path, keep_until_step: int | None = None):
        self.path = Path(run_dir) / METRICS
        self.lines: list[str] = []
        if keep_until_step is not None and self.path.exists():
            for line in self.path.read_text().splitlines():
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:  # a line cut short by a crash of an older version
                    continue
                if isinstance(row, dict) and row.get("step", math.inf) <= keep_until_step:
                    self.lines.append(line)
        self._write()

    def _write(self) -> None:
        write_text_atomic(self.path, "".join(line + "\n" for line in self.lines))

    def log(self, metrics: dict[str, Any], step: int) -> None:
        row = {"step": step, **{k: _clean(v) for k, v in metrics.items()}}
        self.lines.append(json.dumps(row, sort_keys=True))
        self._write()

    def close(self) -> None:
        pass


def _clean(v: Any) -> Any:
    # JSON has no NaN/inf; a diverged run's loss is recorded as null.
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


class WandbSink:
    def __init__(
        self, run_dir: Path, cfg: dict[str, Any], run_name: str, run_id: str | None = None
    ):
        import wandb

        wb = cfg["wandb"]
        self._wandb = wandb
        self._run = wandb.init(
            # the run's fixed id: a resumed run continues the same W&B run (ecosystem.md sec. 2)
            id=run_id,
            resume="allow" if run_id else None,
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


def make_sinks(
    run_dir: Path,
    cfg: dict[str, Any],
    run_name: str,
    wandb_id: str | None = None,
    keep_until_step: int | None = None,
) -> MultiSink:
    sinks: list[Sink] = [JsonlSink(run_dir, keep_until_step)]
    if cfg["wandb"]["mode"] != "disabled":
        sinks.append(WandbSink(run_dir, cfg, run_name, wandb_id))
    return MultiSink(sinks)
