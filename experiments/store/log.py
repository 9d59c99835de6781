"""Metric sinks: `log(metrics, step)` and `close(outcome, exit_code)`; rank 0 only.

The JSONL file in the run directory is always written and is the source of truth; W&B mirrors
it (mode `disabled`, `offline` (default) or `online`), shaped for comparison reports:

- group: `wandb.group`, else `experiment_name` (a preset); an ad-hoc sweep sets `wandb.group` to
  its start time and the keys it varies (hydra_plugins/commsgd_sweeper); job type: the algorithm;
- name: the run directory's readable part (the algorithm, its non-default knobs, tau, seed);
- tags: `key=value` for every series key (experiments/config/identity.py SERIES_KEYS: the algorithm
  and each of its knobs, tau, workers, network, partition, compute.slowdown, comm.compression),
  plus scale, dataset and timing;
- x-axes: `time/train_s` for every `test/*` and `train/*` metric (on the run's clock: modeled
  with timing=virtual, measured with timing=real); `epoch` is defined too;
- summary: status, final and best test accuracy, final training loss, steps, the step of a
  divergence and the exit code; a failed run finishes with its non-zero exit code, an
  interrupted one (checkpoint saved, a rerun resumes) is marked preempting (exit code 3).

W&B starts in a thread of its own (importing wandb and starting its service take seconds, even
offline): the training does not wait for it; rows logged before it is up are kept and sent
once it is; an error of its start is raised at the next row or at the end.
"""

from __future__ import annotations

import json
import math
import threading
from pathlib import Path
from typing import Any, Protocol

from experiments.store.records import METRICS, write_text_atomic

EXIT_FAILED, EXIT_INTERRUPTED = 1, 3  # run.py's exit codes
# What the W&B run summary gets from the training's result.
SUMMARY_KEYS = (
    "status",
    "final/test_acc",
    "final/test_acc_local",
    "best/test_acc",
    "final/train_loss",
    "steps",
    "diverged_at_step",
    "time/train_s",
    "comm/bytes",
)


class Sink(Protocol):
    def log(self, metrics: dict[str, Any], step: int) -> None: ...

    def close(self, outcome: dict[str, Any] | None = None, exit_code: int = 0) -> None:
        """End the sink: `outcome` is the training's result (None when training raised);
        `exit_code` the program's exit code for this run."""


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

    def close(self, outcome: dict[str, Any] | None = None, exit_code: int = 0) -> None:
        pass


def _clean(v: Any) -> Any:
    # JSON has no NaN/inf; a diverged run's loss is recorded as null.
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def wandb_tags(cfg: dict[str, Any]) -> list[str]:
    """`key=value` for every series key of `cfg` (`.name` dropped: `network=ethernet1g`), then
    scale, dataset and timing; W&B allows 64 characters a tag."""
    from experiments.config.identity import series

    tags = [f"{key.removesuffix('.name')}={_tag_value(v)}" for key, v in series(cfg).items()]
    tags += [
        f"scale={(cfg.get('scale') or {}).get('name', 'custom')}",
        f"dataset={cfg['dataset']['name']}",
        f"timing={cfg['timing']}",
    ]
    return [t[:64] for t in tags]


def _tag_value(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if value is None:
        return "null"
    if isinstance(value, list):
        return ",".join(_tag_value(v) for v in value)
    return str(value)


class WandbSink:
    def __init__(
        self, run_dir: Path, cfg: dict[str, Any], run_name: str, run_id: str | None = None
    ):
        self._run = None
        self._error: BaseException | None = None
        self._pending: list[tuple[dict[str, Any], int]] = []
        self._starting = threading.Thread(
            target=self._start,
            args=(run_dir, cfg, run_name, run_id),
            name="commsgd-wandb-init",
            daemon=True,
        )
        self._starting.start()

    def _start(self, run_dir: Path, cfg: dict[str, Any], run_name: str, run_id: str | None):
        try:
            self._run = self._init(run_dir, cfg, run_name, run_id)
        except BaseException as e:  # raised in the training's thread (_ready)
            self._error = e

    def _ready(self, wait: bool) -> bool:
        """Whether the W&B run is up (waiting for it with `wait`); its start's error, raised."""
        if wait:
            self._starting.join()
        if self._starting.is_alive():
            return False
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        for metrics, step in self._pending:
            self._run.log(metrics, step=step)
        self._pending = []
        return True

    @staticmethod
    def _init(run_dir: Path, cfg: dict[str, Any], run_name: str, run_id: str | None):
        import wandb

        wb = cfg["wandb"]
        run = wandb.init(
            # the run's fixed id: a resumed run continues the same W&B run (ecosystem.md sec. 2)
            id=run_id,
            resume="allow" if run_id else None,
            project=wb["project"],
            entity=wb.get("entity"),
            mode=wb["mode"],
            dir=str(run_dir),
            group=wb.get("group") or cfg.get("experiment_name"),
            job_type=cfg["algorithm"]["name"],
            name=run_name,
            tags=wandb_tags(cfg),  # to filter and group by in a W&B comparison report
            config=cfg,
            settings=wandb.Settings(silent=True, console="off"),
            # seeds in lock-step (experiments/workers/sim.py) are S runs of one process at once:
            # each its own W&B run (the default would hand every later one the first)
            reinit="create_new",
        )
        # Accuracy and loss against the run's training time (virtual or measured: `timing`).
        run.define_metric("time/train_s")
        run.define_metric("epoch")
        for pattern in ("test/*", "train/*"):
            run.define_metric(pattern, step_metric="time/train_s")
        return run

    def log(self, metrics: dict[str, Any], step: int) -> None:
        if self._ready(wait=False):
            self._run.log(metrics, step=step)
        else:
            self._pending.append((dict(metrics), step))

    def close(self, outcome: dict[str, Any] | None = None, exit_code: int = 0) -> None:
        self._ready(wait=True)
        if outcome is None:  # training raised: the run failed
            summary = {"status": "failed", "exit_code": exit_code or EXIT_FAILED}
        else:
            summary = {k: outcome.get(k) for k in SUMMARY_KEYS if k in outcome}
            if outcome.get("status") == "interrupted":
                exit_code = exit_code or EXIT_INTERRUPTED
                self._run.mark_preempting()
            summary["exit_code"] = exit_code
        self._run.summary.update({k: _clean(v) for k, v in summary.items()})
        self._run.finish(exit_code=summary["exit_code"])


class MultiSink:
    def __init__(self, sinks: list[Sink]):
        self.sinks = sinks

    def log(self, metrics: dict[str, Any], step: int) -> None:
        for s in self.sinks:
            s.log(metrics, step)

    def close(self, outcome: dict[str, Any] | None = None, exit_code: int = 0) -> None:
        for s in self.sinks:
            s.close(outcome, exit_code)


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
