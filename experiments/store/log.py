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
- config: the resolved config, plus `git_sha` (the commit the record names);
- summary: status, final and best test accuracy, final training loss, steps, the step of a
  divergence, bytes communicated and the exit code; for a finished run also what a report's
  table computes from the metric rows (`converged`; `target_acc`, `reached_target`,
  `time_to_target_s`); a failed run finishes with its non-zero exit code, an interrupted one
  (checkpoint saved, a rerun resumes) is marked preempting (exit code 3).

analysis/reports/wandb_report.py builds the comparison report on these.

W&B starts in a thread of its own (importing wandb and starting its service take seconds, even
offline): the training does not wait for it; rows logged before it is up are kept and sent
once it is. W&B never fails a run (`WandbSink`): an online start that fails goes on offline, an
error later stops the mirror with one `warning:` line; the records on disk are complete.
"""

from __future__ import annotations

import json
import math
import threading
from pathlib import Path
from typing import Any, Protocol

from experiments.store.convergence import converged, decay_starts, evaluations_before_decays
from experiments.store.crossing import crossing_time, on_time_budget, per_pass
from experiments.store.records import METRICS, SUMMARY, write_text_atomic

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
# W&B online: how long its start may take (its own default: 90 s) before the run's W&B record
# goes on offline, and how long its upload at the end may take before it is left to `wandb sync`.
WANDB_INIT_TIMEOUT_S = 30.0
WANDB_FINISH_TIMEOUT_S = 60.0


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
        f"scale={cfg['scale']['name']}",
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
    """The W&B mirror of one run (module doc). W&B can never fail the run: an online start that
    does not come up (the network lost since the pre-flight checked it) is one `warning:` line
    and the run's W&B record continues offline beside it (`wandb sync` uploads it); a `log` or
    the end that raises is one `warning:` line, then the mirror stops and the training goes on,
    its records complete; the upload at the end waits WANDB_FINISH_TIMEOUT_S at most."""

    def __init__(
        self, run_dir: Path, cfg: dict[str, Any], run_name: str, run_id: str | None = None
    ):
        self._run = None
        self._run_dir = Path(run_dir)
        self._cfg = cfg
        self._sync_dir: str | None = None  # the run's W&B folder, for `wandb sync`
        self._pending: list[tuple[dict[str, Any], int]] = []
        self._starting = threading.Thread(
            target=self._start,
            args=(run_dir, cfg, run_name, run_id),
            name="commsgd-wandb-init",
            daemon=True,
        )
        self._starting.start()

    def _start(self, run_dir: Path, cfg: dict[str, Any], run_name: str, run_id: str | None):
        mode = cfg["wandb"]["mode"]
        try:
            self._run = self._init(run_dir, cfg, run_name, run_id, mode)
        except Exception as e:  # noqa: BLE001 - W&B's errors are many; the run goes on
            if mode != "online":
                _warn(f"{run_dir}: W&B did not start ({_why(e)}): this run is not mirrored")
                return
            # Its own id: W&B's service still holds the id of the start that failed.
            offline_id = f"{run_id}-offline" if run_id else None
            try:
                self._run = self._init(run_dir, cfg, run_name, offline_id, "offline")
            except Exception as again:  # noqa: BLE001
                _warn(f"{run_dir}: W&B did not start ({_why(again)}): this run is not mirrored")
                return
            _warn(
                f"{run_dir}: W&B online did not start ({_why(e)}): this run's W&B record goes "
                f"on offline; `wandb sync {self._sync_dir}` uploads it"
            )

    def _ready(self, wait: bool) -> bool:
        """Whether the W&B run is up (waiting for it with `wait`); the rows logged before it
        was, sent. False for good when it did not start or failed since."""
        if wait:
            self._starting.join()
        if self._starting.is_alive() or self._run is None:
            return False
        pending, self._pending = self._pending, []
        for metrics, step in pending:
            if self._run is None:  # the mirror stopped at a failed row
                break
            self._call("log", lambda m=metrics, s=step: self._run.log(m, step=s))
        return self._run is not None

    def _init(
        self, run_dir: Path, cfg: dict[str, Any], run_name: str, run_id: str | None, mode: str
    ):
        import wandb

        wb = cfg["wandb"]
        settings: dict[str, Any] = {"silent": True, "console": "off"}
        if mode == "online":
            settings["init_timeout"] = WANDB_INIT_TIMEOUT_S  # (W&B's own: 90 s)
        if "finish_timeout" in getattr(wandb.Settings, "model_fields", {}):
            settings.update(finish_timeout=WANDB_FINISH_TIMEOUT_S, finish_timeout_raises=True)
        run = wandb.init(
            # the run's fixed id: a resumed run continues the same W&B run (W&B's resume by id)
            id=run_id,
            resume="allow" if run_id else None,
            project=wb["project"],
            entity=wb.get("entity"),
            mode=mode,
            dir=str(run_dir),
            group=wandb_group(cfg),
            job_type=cfg["algorithm"]["name"],
            name=run_name,
            tags=wandb_tags(cfg),  # to filter and group by in a W&B comparison report
            # the config (its keys group a report's rows: analysis/reports/wandb_report.py) and the
            # commit, which a report's run set filters on
            config={**cfg, "git_sha": _git_sha(run_dir)},
            settings=wandb.Settings(**settings),
            # seeds in lock-step (experiments/workers/sim.py) are S runs of one process at once:
            # each its own W&B run (the default would hand every later one the first)
            reinit="create_new",
        )
        self._sync_dir = str(getattr(run.settings, "sync_dir", None) or Path(run_dir) / "wandb")
        # Accuracy and loss against the run's training time (virtual or measured: `timing`).
        run.define_metric("time/train_s")
        run.define_metric("epoch")
        for pattern in ("test/*", "train/*"):
            run.define_metric(pattern, step_metric="time/train_s")
        return run

    def _call(self, what: str, call: Any) -> None:
        """`call()` on the W&B run; an error is one warning and the end of the mirror."""
        try:
            call()
        except Exception as e:  # noqa: BLE001 - the run goes on without W&B
            _warn(
                f"{self._run_dir}: W&B failed at {what} ({_why(e)}): the run goes on without it, "
                f"its records complete; `wandb sync {self._sync_dir}` uploads what W&B kept"
            )
            self._run = None

    def log(self, metrics: dict[str, Any], step: int) -> None:
        if self._ready(wait=False):
            self._call("log", lambda: self._run.log(metrics, step=step))
        elif self._starting.is_alive():
            self._pending.append((dict(metrics), step))

    def close(self, outcome: dict[str, Any] | None = None, exit_code: int = 0) -> None:
        if not self._ready(wait=True):
            return
        if outcome is None:  # training raised: the run failed
            summary = {"status": "failed", "exit_code": exit_code or EXIT_FAILED}
        else:
            summary = {k: outcome.get(k) for k in SUMMARY_KEYS if k in outcome}
            if outcome.get("status") in ("completed", "diverged"):
                try:
                    summary.update(self._outcome(outcome["status"]))
                except Exception as e:  # noqa: BLE001 - a summary short of these, not a failure
                    _warn(f"{self._run_dir}: W&B summary without convergence ({_why(e)})")
            if outcome.get("status") == "interrupted":
                exit_code = exit_code or EXIT_INTERRUPTED
                self._call("mark_preempting", self._run.mark_preempting)
            summary["exit_code"] = exit_code
        if self._run is not None:
            clean = {k: _clean(v) for k, v in summary.items()}
            self._call("summary", lambda: self._run.summary.update(clean))
        if self._run is not None:
            self._call("finish", lambda: self._run.finish(exit_code=summary["exit_code"]))

    def _outcome(self, status: str) -> dict[str, Any]:
        """What a report reads of a finished run besides SUMMARY_KEYS, as the suite's tables
        compute it from the run's metric rows: `converged` (experiments/store/convergence.py)
        and, with a target accuracy (`report.target_acc`, else `scale.target_acc`),
        `target_acc`, `reached_target` and `time_to_target_s` (training time at the first
        evaluation that reached it). Nothing when the rows cannot be read."""
        try:
            rows = []
            for line in (self._run_dir / METRICS).read_text().splitlines():
                row = json.loads(line)
                if isinstance(row, dict) and isinstance(row.get("test/acc"), int | float):
                    rows.append(row)
            rows.sort(key=lambda r: (r.get("step", 0), r.get("epoch", 0)))
        except (OSError, ValueError):
            return {}
        out: dict[str, Any] = {}
        scored = rows  # every point scores time to target; the rule reads one per pass
        rows = per_pass(rows, self._cfg["epochs"])

        def number(row: dict[str, Any], key: str) -> float:
            value = row.get(key)
            return float(value) if isinstance(value, int | float) else math.nan

        acc = [number(r, "test/acc") for r in rows]
        loss = [number(r, "train/loss") for r in rows]
        lrs = [number(r, "lr") for r in rows]
        if rows and not any(math.isnan(v) for v in lrs):
            decays = evaluations_before_decays(lrs)
        else:  # as analysis/runs/convergence.py reads a run without its LR column
            cfg = self._cfg
            starts = decay_starts(
                cfg["epochs"], cfg["lr_decay_at"], cfg["lr_decay"], cfg["warmup_epochs"]
            )
            epochs = [number(r, "epoch") for r in rows]
            decays = [sum(e <= s for e in epochs) for s in starts]
        out["converged"] = status != "diverged" and converged(acc, loss, decays=decays)
        target = ((self._cfg.get("report") or {}).get("target_acc")) or (
            (self._cfg.get("scale") or {}).get("target_acc")
        )
        if isinstance(target, int | float) and not isinstance(target, bool):
            when = crossing_time(
                [number(r, "time/train_s") for r in scored],
                [number(r, "test/acc") for r in scored],
                float(target),
                interpolate=on_time_budget(scored),
            )
            out["target_acc"] = float(target)
            out["reached_target"] = when is not None
            out["time_to_target_s"] = when
        return out


def wandb_group(cfg: dict[str, Any]) -> str | None:
    """The W&B group of a run: `wandb.group`, else its preset (`experiment_name`)."""
    return cfg["wandb"].get("group") or cfg.get("experiment_name")


def _git_sha(run_dir: Path) -> str | None:
    """The commit the run's record names (summary.json's `git_sha`, written before W&B starts)."""
    try:
        return json.loads((Path(run_dir) / SUMMARY).read_text()).get("git_sha")
    except (OSError, ValueError, AttributeError):
        return None


def _why(error: BaseException) -> str:
    """An error in one line: its type and the first line of its message."""
    lines = str(error).strip().splitlines()
    text = f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__
    return text[:300]


def _warn(line: str) -> None:
    """One `warning:` line on stderr (none where there is no console to say it on)."""
    import sys

    try:
        print(f"warning: {line}", file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass


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
