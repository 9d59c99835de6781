"""The suite's Hydra sweeper (conf/config.yaml: `override hydra/sweeper: commsgd`): every point
of a sweep runs, whatever happens to the others.

Hydra's basic sweeper composes every point before launching any (one that does not compose,
e.g. `tau=abc,1`, ends the sweep), lets a job's `sys.exit` end the sweep, runs only the
`hydra.sweeper.params` grid, and overwrites `multirun.yaml` at each sweep. This one:

1. expands the points: the main grid (`params`, then the command line's overrides, a later
   value of a key replacing an earlier one, as the basic sweeper does), then each of the
   preset's extra `grids`, each on top of the main one (its keys win), every point once;
2. checks each point on its own (experiments/preflight.py: it composes, its keys exist, its
   values are valid, W&B can log in): a point that fails is recorded with its one-line reason;
3. skips a point whose run directory holds a finished run of the same identity (no SLURM job is
   submitted for it), a point whose config another point already stands for, and a tau-less
   method (sync SGD, PowerSGD, pseudo-sync) at a second tau: it ignores tau, so that is the
   same run again (it meets the round-based methods at every tau in the report);
4. launches the rest through the configured launcher (basic, or submitit_slurm), in batches of
   `max_batch_size`; a job that fails is recorded, never ends the sweep (a stop on a signal or
   Ctrl-C does: it is the user's);
5. writes `<record_dir>/<start time>/multirun.yaml` and `sweep.json` (each point, its run
   directory and how it ended), a new folder per sweep;
6. ends with one `error: <point>: <reason>` line per failed point and a non-zero exit code (2
   when every failure was bad input, else 1).

A preset's grid is a list of grids (conf/experiment/*.yaml):

    hydra:
      sweeper:
        params:                       # the main grid, as for Hydra's basic sweeper
          algorithm: local_sgd,easgd,overlap_local_sgd
          tau: 1,2,4
          seed: 0,1,2
        grids:                        # more points: each grid on top of the main one
          - {algorithm: powersgd, algorithm.rank: "2,4,8"}

A point the main grid should not have is left out by splitting the main grid into grids (the
union of grids is any set of points); an extra point with other values (Overlap-Local-SGD at
tau = 1 with lr = 0.15) is one more grid: `{algorithm: overlap_local_sgd, tau: 1, lr: 0.15}`.
A command-line override replaces the main grid's value of its key; the extra grids keep theirs.
In an ad-hoc sweep (no preset: `experiment_name` is `default`), each point gets
`wandb.group` = the sweep's start time and the keys it varies, unless the command line sets it.
"""

# No `from __future__ import annotations`: Hydra loads plugins without registering their module,
# and dataclasses cannot resolve string annotations then.

import itertools
import logging
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any  # noqa: UP035 - OmegaConf reads these annotations

from hydra.core.config_store import ConfigStore
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from hydra.core.utils import JobStatus
from hydra.errors import HydraException
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf

log = logging.getLogger(__name__)


@dataclass
class CommsgdSweeperConf:
    _target_: str = "hydra_plugins.commsgd_sweeper.commsgd_sweeper.CommsgdSweeper"
    max_batch_size: int | None = None  # points per launch (a SLURM job array); null = all
    params: dict[str, Any] | None = None  # the main grid: override key -> sweep text
    grids: list[dict[str, Any]] = field(default_factory=list)  # more grids, on top of params
    record_dir: str | None = None  # where each sweep's folder goes; null = no record
    # "k/N": run only the k-th of N shares of the sweep (experiments/sweep.py --jobs); null = all
    shard: str | None = None


ConfigStore.instance().store(
    group="hydra/sweeper", name="commsgd", node=CommsgdSweeperConf, provider="commsgd"
)


@dataclass
class Outcome:
    """How one point of the sweep ended."""

    overrides: list[str]
    point: str  # the point as the user reads it: its values of the keys the sweep varies
    status: str  # skipped | duplicate | failed | completed | diverged | ...
    run_dir: str | None = None
    error: str | None = None
    exit_code: int = 0


class CommsgdSweeper(Sweeper):
    def __init__(
        self,
        max_batch_size: int | None = None,
        params: dict[str, Any] | None = None,
        grids: list[dict[str, Any]] | None = None,
        record_dir: str | None = None,
        shard: str | None = None,
    ) -> None:
        super().__init__()
        self.max_batch_size = max_batch_size
        self.shard = shard
        self.params = _plain(params) or {}
        self.grids = [_plain(g) or {} for g in (_plain(grids) or [])]
        self.record_dir = record_dir
        self.hydra_context: HydraContext | None = None
        self.config: DictConfig | None = None
        self.launcher = None

    def setup(
        self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig
    ) -> None:
        from hydra.core.plugins import Plugins

        self.hydra_context = hydra_context
        self.config = config
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config
        )

    # --- 1. the points ----------------------------------------------------------------------

    def points(self, arguments: list[str]) -> tuple[list[list[str]], list[str]]:
        """Every point of the sweep (its overrides), each once, and the keys that vary."""
        assert self.hydra_context is not None
        parser = OverridesParser.create(config_loader=self.hydra_context.config_loader)
        main = [f"{k}={_text(v)}" for k, v in self.params.items()] + list(arguments)
        points: list[list[str]] = []
        seen: set[tuple[str, ...]] = set()
        values: dict[str, set[str]] = {}
        for grid in [{}, *self.grids]:
            extra = [f"{k}={_text(v)}" for k, v in grid.items()]
            lists: dict[str, list[str]] = {}
            for override in parser.parse_overrides(main + extra):
                key = _key(override)
                lists[key] = _expand(override)
            for combo in itertools.product(*lists.values()):
                point = list(combo)
                if tuple(point) not in seen:
                    seen.add(tuple(point))
                    points.append(point)
                    for item in point:
                        key, _, value = item.partition("=")
                        values.setdefault(key.lstrip("+~"), set()).add(value)
        varying = [k for k, v in values.items() if len(v) > 1]
        varying += [
            k for k in values if k not in varying and any(k not in _keys(p) for p in points)
        ]
        return points, varying

    # --- 2-6 ------------------------------------------------------------------------------

    def sweep(self, arguments: list[str]) -> Any:
        assert self.config is not None and self.launcher is not None
        assert self.hydra_context is not None
        from experiments.errors import said_once
        from experiments.preflight import check, describe
        from experiments.store.records import finished_status

        started = time.localtime()
        points, varying = self.points(arguments)
        outcomes: list[Outcome] = []
        to_launch: list[tuple[list[str], Outcome]] = []
        configs: dict[int, dict[str, Any]] = {}  # id(outcome) -> the point's resolved config
        composed: dict[int, DictConfig] = {}  # id(outcome) -> its composed config
        planned: dict[Any, tuple] = {}  # run directory -> (the point that runs it, its tau)
        group = self._group(arguments, varying, started)
        share, shares = _shard(self.shard)
        units: dict[str, int] = {}  # a point's unit of work -> its index, in the points' order
        over = f" over {', '.join(varying)}" if varying else ""
        part = f" (share {share + 1} of {shares})" if shares > 1 else ""
        print(f"sweep: {len(points)} points{over}{part}", flush=True)
        for index, overrides in enumerate(points):
            label = self._label(overrides, varying)
            outcome = Outcome(overrides=overrides, point=label, status="failed")
            outcomes.append(outcome)
            try:
                cfg = self.hydra_context.config_loader.load_sweep_config(self.config, overrides)
                point = check(cfg, sweep=True)
                unit = units.setdefault(_unit(point), len(units))
                if unit % shares != share:  # another share's: it runs (and is said) there
                    outcome.status = "other share"
                    continue
                outcome.run_dir = str(point.run_dir)
                if point.run_dir in planned:  # another spelling, or a key outside the identity
                    outcome.status = "duplicate"
                    first, tau = planned[point.run_dir]
                    why = ""  # a tau-less method at a second tau: its identity leaves tau out
                    if tau != point.config.get("tau"):
                        why = f"{point.config['algorithm']['name']} ignores tau, "
                    print(f"skip {label}: {why}the same run as {first}", flush=True)
                    continue
                planned[point.run_dir] = (label, point.config.get("tau"))
                status = finished_status(point.run_dir, point.digest, bool(cfg.rerun))
                if status is not None and not cfg.rerun:
                    outcome.status = "skipped"
                    print(f"skip {point.run_dir}: already {status}", flush=True)
                    continue
            except Exception as e:  # any refusal is this point's, never the sweep's
                if index % shares != share:  # said once, by one share
                    outcome.status = "other share"
                    continue
                outcome.error, outcome.exit_code = describe(e), 2
                print(f"failed {label}: {outcome.error}", file=sys.stderr)
                continue
            if group is not None and point.config["experiment_name"] == "default":
                overrides = [*overrides, f"wandb.group='{group}'"]
                OmegaConf.update(cfg, "wandb.group", group, force_add=True)
            outcome.status = "launched"
            to_launch.append((overrides, outcome))
            configs[id(outcome)] = point.config
            composed[id(outcome)] = cfg

        record = self._record_dir(started)
        try:
            to_launch = self._lockstep(to_launch, configs, composed, describe)
            self._launch(to_launch, describe)
        finally:  # also when a stop request (SystemExit) ends the sweep
            self._write_record(record, arguments, outcomes)
        if self.config.get("experiment_name") == "default":
            self._compare(outcomes)
        failed = [o for o in outcomes if o.status == "failed"]
        # one line per reason (each point said its own as it failed, above)
        for line in said_once([(o.point, o.error) for o in failed]):
            print(f"error: {line}", file=sys.stderr)
        if failed:
            sys.stdout.flush()
            raise SystemExit(2 if all(o.exit_code == 2 for o in failed) else 1)
        return outcomes

    def _compare(self, outcomes: list[Outcome]) -> None:
        """An ad-hoc sweep ends with its comparison (analysis/reports/adhoc.py); a failure to make
        it is one line, never the sweep's."""
        from analysis.reports.adhoc import sweep_comparison

        dirs = [o.run_dir for o in outcomes if o.run_dir and o.status != "failed"]
        if len({*dirs}) < 2:
            return
        target = OmegaConf.select(self.config, "scale.target_acc", default=None)
        runs = str(Path(str(OmegaConf.select(self.config, "out_root", default="outputs"))) / "runs")
        command = f"python -m analysis.reports.report {runs} --out {Path(runs).parent / 'report'}"
        try:
            lines = sweep_comparison(dirs, None if target is None else float(target), command)
        except Exception as e:  # the runs are the result; the summary is a courtesy
            print(f"note: no comparison: {type(e).__name__}: {e}", file=sys.stderr)
            return
        if lines:
            print("\n" + "\n".join(lines), flush=True)

    def _launch(self, to_launch: list[tuple[list[str], Outcome]], describe) -> None:
        size = self.max_batch_size or len(to_launch) or 1
        index = 0
        for start in range(0, len(to_launch), size):
            batch = to_launch[start : start + size]
            try:
                results = self.launcher.launch([o for o, _ in batch], initial_job_idx=index)
            except Exception as e:  # e.g. submitit: a job that died without a result
                for _, outcome in batch:
                    outcome.status, outcome.exit_code = "failed", 1
                    outcome.error = (
                        f"the launcher failed: {describe(e)} (python -m analysis.runs.status)"
                    )
                continue
            finally:
                index += len(batch)
            for (_, outcome), result in zip(batch, results, strict=True):
                if result.status == JobStatus.COMPLETED and isinstance(result.return_value, dict):
                    value = result.return_value
                    outcome.status = str(value.get("status"))
                    outcome.run_dir = value.get("run_dir", outcome.run_dir)
                    if outcome.status == "failed":
                        outcome.error = value.get("error")
                        outcome.exit_code = int(value.get("exit_code", 1))
                else:
                    outcome.status, outcome.exit_code = "failed", 1
                    outcome.error = describe(result._return_value)

    def _lockstep(
        self,
        to_launch: list[tuple[list[str], Outcome]],
        configs: dict[int, Any],
        composed: dict[int, DictConfig],
        describe,
    ) -> list[tuple[list[str], Outcome]]:
        """Run together, in this process, the points that differ only in their seed, where the
        workers are threads of this process (cluster=sim with Hydra's basic launcher) and can
        compute in lock-step (experiments/workers/sim.py, run_lockstep; cluster.lockstep_seeds
        at a time). Returns the points left to the launcher: the others, each alone."""
        launcher = str(self.config.hydra.launcher.get("_target_", ""))
        if not launcher.endswith("BasicLauncher"):
            return to_launch
        from experiments.workers.options import lockstep_seeds

        groups: dict[str, list[tuple[list[str], Outcome]]] = {}
        alone: list[tuple[list[str], Outcome]] = []
        refused: set[str] = set()
        for overrides, outcome in to_launch:
            plain = configs[id(outcome)]
            key = _seed_group(plain)
            if key is None:
                if lockstep_seeds(plain) > 1:  # asked for, but the algorithm cannot
                    refused.add(plain["algorithm"]["name"])
                alone.append((overrides, outcome))
                continue
            groups.setdefault(key, []).append((overrides, outcome))
        if refused:
            print(
                f"lockstep: {', '.join(sorted(refused))} cannot train seeds in lock-step (its "
                "workers' modeled speeds are drawn from the seed, on a time budget or with "
                "collectives at rank-dependent steps, or cluster.batched=false): one run per seed",
                flush=True,
            )
        for members in groups.values():
            size = lockstep_seeds(configs[id(members[0][1])])
            for start in range(0, len(members), size):
                chunk = members[start : start + size]
                if len(chunk) == 1:
                    alone.extend(chunk)
                else:
                    self._run_lockstep(chunk, composed, describe)
        order = {id(o): i for i, (_, o) in enumerate(to_launch)}
        return sorted(alone, key=lambda item: order[id(item[1])])

    def _run_lockstep(
        self, chunk: list[tuple[list[str], Outcome]], composed: dict[int, DictConfig], describe
    ) -> None:
        """The points of `chunk` (seeds of one config) trained together; a stop (a signal,
        Ctrl-C) ends the sweep as it ends a job (run.py's exit codes)."""
        from hydra.core.hydra_config import HydraConfig
        from omegaconf import open_dict

        from experiments.errors import (
            EXIT_CANCELLED,
            EXIT_STOPPED,
            Cancelled,
            Interrupted,
            WorkerFailed,
        )
        from experiments.runner import run_lockstep

        assert self.hydra_context is not None and self.config is not None
        points = []
        for overrides, outcome in chunk:
            cfg = composed[id(outcome)]  # composed and checked above
            with open_dict(cfg):
                cfg.hydra.runtime.output_dir = outcome.run_dir
                cfg.hydra.job.override_dirname = ",".join(overrides)
            HydraConfig.instance().set_config(cfg)  # what Hydra's launcher does for a job
            job = OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"])
            files = {
                "config.yaml": OmegaConf.to_yaml(job),
                "hydra.yaml": OmegaConf.to_yaml(OmegaConf.masked_copy(cfg, ["hydra"])),
                "overrides.yaml": OmegaConf.to_yaml(list(overrides)),
            }
            points.append((job, Path(str(outcome.run_dir)), files, outcome))
        try:
            results = run_lockstep([p[:3] for p in points])
        except Interrupted as e:
            if not e.said:
                print(str(e), file=sys.stderr, flush=True)
            raise SystemExit(EXIT_STOPPED) from None
        except Cancelled as e:
            print(f"error: {e}", file=sys.stderr, flush=True)
            raise SystemExit(EXIT_CANCELLED) from None
        except Exception as e:  # the lock-step itself failed: every point of it
            if isinstance(e, WorkerFailed) and e.details:
                print(e.details, file=sys.stderr)
            for *_, outcome in points:
                outcome.status, outcome.exit_code = "failed", 1
                outcome.error = describe(e)
            return
        for (*_, outcome), value in zip(points, results, strict=True):
            outcome.status = str(value.get("status"))
            outcome.run_dir = value.get("run_dir", outcome.run_dir)
            if outcome.status == "failed":
                outcome.error = value.get("error")
                outcome.exit_code = int(value.get("exit_code", 1))

    # --- helpers ----------------------------------------------------------------------------

    def _group(self, arguments: list[str], varying: list[str], started: time.struct_time):
        """The W&B group of an ad-hoc sweep, or None when the command line sets one."""
        if any(a.lstrip("+~").startswith("wandb.group=") for a in arguments):
            return None
        keys = ",".join(varying) if varying else "one point"
        return f"sweep {time.strftime('%Y-%m-%d %H:%M:%S', started)} {keys}".replace("'", "")

    @staticmethod
    def _label(overrides: list[str], varying: list[str]) -> str:
        """A point as the user reads it: its values of the keys the sweep varies."""
        shown = [o for o in overrides if o.partition("=")[0].lstrip("+~") in varying]
        return " ".join(shown or overrides)

    def _record_dir(self, started: time.struct_time) -> Path | None:
        if not self.record_dir:
            return None
        stamp = time.strftime("%Y-%m-%d_%H-%M-%S", started)
        folder = Path(str(self.record_dir)) / f"{stamp}_{os.getpid()}"
        return folder

    def _write_record(
        self, folder: Path | None, arguments: list[str], outcomes: list[Outcome]
    ) -> None:
        if folder is None:
            return
        from experiments.store.records import write_json_atomic, write_text_atomic

        folder.mkdir(parents=True, exist_ok=True)
        assert self.config is not None
        write_text_atomic(folder / "multirun.yaml", OmegaConf.to_yaml(self.config))
        write_json_atomic(
            folder / "sweep.json",
            {
                "command": sys.argv,
                "arguments": list(arguments),
                "points": [o.__dict__ for o in outcomes],
            },
        )


def _shard(text: str | None) -> tuple[int, int]:
    """`hydra.sweeper.shard` "k/N" as (k, N); null: (0, 1), the whole sweep."""
    if text is None:
        return 0, 1
    k, slash, n = str(text).partition("/")
    if slash and k.strip().isdigit() and n.strip().isdigit() and int(k) < int(n):
        return int(k), int(n)
    raise HydraException(f"hydra.sweeper.shard must be k/N with 0 <= k < N, got {text!r}")


def _seed_group(plain: dict[str, Any]) -> str | None:
    """The key of the points whose seeds train in lock-step with this one (its resolved config
    without the seed), or None where it trains alone (cluster.lockstep_seeds 1, or an
    algorithm or cluster that cannot: experiments/workers/sim.py `lockstep`)."""
    import json

    from experiments.workers import sim
    from experiments.workers.options import lockstep_seeds

    if lockstep_seeds(plain) < 2 or not sim.lockstep(plain):
        return None
    return json.dumps({k: v for k, v in plain.items() if k != "seed"}, sort_keys=True, default=str)


def _unit(point: Any) -> str:
    """The unit of work a checked point belongs to, what one share runs whole: its lock-step
    group of seeds (`_seed_group`: they must stay together), else its own run directory."""
    return _seed_group(point.config) or str(point.run_dir)


def _plain(value: Any) -> Any:
    return OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if value is None:
        return "null"
    return str(value)


def _key(override: Override) -> str:
    return override.get_key_element().lstrip("+~")


def _keys(point: list[str]) -> set[str]:
    return {item.partition("=")[0].lstrip("+~") for item in point}


def _expand(override: Override) -> list[str]:
    key = override.get_key_element()
    if override.is_sweep_override():
        if not override.is_discrete_sweep():
            raise HydraException(f"the commsgd sweeper cannot sweep {override.input_line!r}")
        return [f"{key}={value}" for value in override.sweep_string_iterator()]
    return [f"{key}={override.get_value_element_as_str()}"]
