"""From a resolved config to a finished run directory.

`run(cfg, run_dir)` is what run.py calls in the Hydra job:
1. check that a launcher (torchrun/srun) started as many workers as the config says;
2. skip the run when its directory holds a finished run of the same identity (its digest,
   experiments/config/identity.py), checked again once the directory is locked, so that two
   identical commands never both train; with `rerun=true`, move that record aside instead
   (records.supersede) and run again;
3. validate every value and the data (one-line `UserError`s, before any worker starts);
4. write the resolved config, Hydra's `.hydra/` files, the identity, the data card and
   `status: running`;
5. start the workers (processes; threads of this process with `cluster.in_process`,
   experiments/workers/sim.py; or become one, under torchrun/srun) and train, each worker as
   experiments/worker.py sets it up (`worker_main`, `train_worker`);
6. rank 0 writes the final summary (experiments/worker.py); a crash leaves `status: failed`,
   never `completed`.
"""

from __future__ import annotations

import platform
import signal
import sys
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from experiments.checks.machine import check_data, launcher_env
from experiments.config.identity import digest, identity_config
from experiments.config.schema import Config, record, typed
from experiments.errors import (
    EXIT_FAILED,
    Cancelled,
    Interrupted,
    OneLine,
    OutputError,
    Stopped,
    UserError,
    WorkerFailed,
)
from experiments.preflight import check_job, describe
from experiments.store import checkpoint as ckpt
from experiments.store.records import (
    CONFIG,
    DATA_CARD,
    IDENTITY,
    METRICS,
    DamagedRecord,
    RunLock,
    finished_status,
    git_sha,
    now,
    read_summary,
    read_text,
    release_reserve,
    reserve,
    resumed_segments,
    summary_commit,
    supersede,
    update_summary,
    write_json_atomic,
    write_text_atomic,
)
from experiments.worker import train_worker, worker_main
from experiments.workers import dist as d
from experiments.workers import startup


def run(cfg: DictConfig, run_dir: str | Path, hydra_files: dict[str, str] | None = None) -> str:
    """Run one configuration into `run_dir`; return the final status. A run directory with a
    checkpoint and no finished result is resumed (experiments/store/checkpoint.py). `hydra_files`:
    Hydra's record of the job, written to `.hydra/` when the run starts (never over a finished
    record)."""
    run_dir = Path(run_dir)
    job = typed(cfg)
    plain = record(job)  # what the run writes and the pre-flight checks, value by value
    rerun = job.rerun  # a request, not part of the record
    ident = digest(plain)
    # Every value again, and what the launcher (torchrun/srun) decided against the config (a
    # 2-process torchrun of `workers=4` would record 2 workers under the 4-worker run's
    # identity): a job that runs elsewhere (a SLURM array task) was checked on another machine.
    # In the process that ran the pre-flight this costs nothing (the data is cached).
    check_job(plain, launcher_env())
    worker = d.external_worker()
    is_main = worker is None or worker.rank == 0
    status = finished_status(run_dir, ident, rerun)
    if status is not None and not rerun:
        if is_main:
            print(f"skip {run_dir}: already {status}", flush=True)
        return status
    lock = RunLock(run_dir) if is_main else None
    if lock is not None:
        try:
            run_dir.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise OutputError(run_dir, error) from None
        lock.acquire()
    try:
        if is_main:
            # Again under the lock: an identical command may have finished it meanwhile.
            status = finished_status(run_dir, ident, rerun)
            if status is not None and not rerun:
                print(f"skip {run_dir}: already {status}", flush=True)
                return status
            if status is not None:
                moved = supersede(run_dir)
                print(f"rerun {run_dir}: the previous record moved to {moved}", flush=True)
        return _run(job, plain, run_dir, worker, is_main, ident, hydra_files or {})
    finally:
        if lock is not None:
            release_reserve(run_dir)
            lock.release()


def run_lockstep(points: list[tuple[DictConfig, Path, dict[str, str]]]) -> list[dict[str, Any]]:
    """Run S points of a sweep that differ only in their seed together, their workers' passes
    one batched pass (experiments/workers/sim.py, `run_lockstep`), each point's record what it
    would be run alone. `points`: each one's config, run directory and Hydra files. Returns each
    point's outcome as run.py's job returns it: `{"status", "run_dir"}`, with `error` and
    `exit_code` when it failed. A point that is finished is skipped, one that cannot start
    fails alone; a stop on a signal or Ctrl-C ends them all (raised, as `run` raises it)."""
    from experiments.workers import sim

    outcomes: list[dict[str, Any] | None] = [None] * len(points)
    # (index, typed job, its record, dir, data)
    ready: list[tuple[int, Config, dict[str, Any], Path, Any]] = []
    starts: list[int] = []  # each ready one's first step (a resumed run's checkpoint step)
    locks: list[tuple[RunLock, Path]] = []

    def failed(i: int, run_dir: Path, error: BaseException) -> None:
        code = error.exit_code if isinstance(error, OneLine | WorkerFailed) else EXIT_FAILED
        message = str(error) if isinstance(error, OneLine | WorkerFailed) else describe(error)
        print(f"{run_dir}: failed: {message}", file=sys.stderr, flush=True)
        outcomes[i] = {"status": "failed", "error": message, "exit_code": code}
        outcomes[i]["run_dir"] = str(run_dir)

    try:
        for i, (cfg, run_dir, files) in enumerate(points):
            run_dir = Path(run_dir)
            outcomes[i] = {"status": "failed", "run_dir": str(run_dir)}
            job = typed(cfg)
            plain = record(job)
            rerun = job.rerun
            ident = digest(plain)
            started = False
            try:
                check_job(plain, launcher_env())
                lock = RunLock(run_dir)
                try:
                    run_dir.mkdir(parents=True, exist_ok=True)
                except OSError as error:
                    raise OutputError(run_dir, error) from None
                lock.acquire()
                locks.append((lock, run_dir))
                status = finished_status(run_dir, ident, rerun)
                if status is not None and not rerun:
                    print(f"skip {run_dir}: already {status}", flush=True)
                    outcomes[i] = {"status": status, "run_dir": str(run_dir)}
                    continue
                if status is not None:
                    print(f"rerun {run_dir}: the previous record moved to {supersede(run_dir)}")
                meta = ckpt.verify(run_dir, plain, ranks=None, load_files=True)
                if meta is not None:
                    check_metrics(run_dir, meta["step"])
                bundle, card = check_data(plain)
                _start_record(job, plain, run_dir, ident, files, meta, card)
                started = True
                ready.append((i, job, plain, run_dir, bundle))
                starts.append(0 if meta is None else int(meta["step"]))
            except Exception as e:
                failed(i, run_dir, _ended(run_dir, e, started))
        stop: BaseException | None = None  # an interruption or Ctrl-C: every run's
        if ready:
            how = "rank by rank" if sim.by_rank(ready[0][2]) else "in one batched pass"
            print(f"lockstep: {len(ready)} seeds of one config {how}", flush=True)
            with late_stops_ignored():
                results = sim.run_lockstep([r[2:] for r in ready], train_worker, starts)
            for (i, job, _, run_dir, _), result in zip(ready, results, strict=True):
                try:
                    if isinstance(result, BaseException):
                        raise result
                    status = _spawned_status(run_dir, job, [signal.SIGINT] if result else [])
                except Exception as e:
                    error = _ended(run_dir, e, True)
                    if isinstance(error, Cancelled | Interrupted):
                        stop = stop or error
                    else:
                        failed(i, run_dir, error)
                    continue
                if status == "interrupted":  # rank 0 has said why
                    summary = read_summary(run_dir) or {}  # the record: its keys as written
                    error = summary.get("error", "interrupted")
                    stop = stop or Interrupted(f"{run_dir}: {error}", said=True)
                    continue
                summary = read_summary(run_dir)
                print(outcome_line(run_dir, summary), flush=True)
                outcomes[i] = {"status": summary["status"], "run_dir": str(run_dir)}
        if stop is not None:
            raise stop
    finally:
        for lock, run_dir in locks:
            release_reserve(run_dir)
            lock.release()
    return [o for o in outcomes if o is not None]


def _run(
    job: Config,
    plain: dict[str, Any],
    run_dir: Path,
    worker: d.Worker | None,
    is_main: bool,
    ident: str,
    hydra_files: dict[str, str],
) -> str:
    if worker is None and not job.cluster.in_process:
        startup.warm()  # the worker processes' forkserver imports torch while we go on
    if worker is not None:
        d.check_rendezvous_port(worker)
    # A checkpoint that cannot be used is an error before any worker starts (never a silent
    # restart from scratch, never a traceback inside the workers): its files are loaded once
    # here; launched workers check their own file again.
    ranks = None if worker is None else [worker.rank]
    meta = ckpt.verify(run_dir, plain, ranks=ranks, load_files=True)
    if meta is not None and is_main:
        check_metrics(run_dir, meta["step"])
    bundle, card = check_data(plain)

    started = False  # whether the record says `running`
    try:
        if is_main:
            _start_record(job, plain, run_dir, ident, hydra_files, meta, card)
            started = True
        if worker is None:
            with late_stops_ignored():
                if job.cluster.in_process:
                    from experiments.workers import sim

                    ctrl_c = sim.run(plain, run_dir, bundle, train_worker)
                    stops = [signal.SIGINT] if ctrl_c else []
                else:
                    # In-memory datasets travel to the workers with their arguments: loading
                    # them again in every process (importing scikit-learn) would cost seconds
                    # per run.
                    shared = bundle if job.dataset.name != "cifar10" else None
                    stops = d.spawn(worker_main, job.workers, (plain, str(run_dir), shared))
                status = _spawned_status(run_dir, job, stops)
        else:
            status = worker_main(
                worker.rank, worker.world_size, plain, str(run_dir), bundle, worker
            )
    except BaseException as e:
        raise _ended(run_dir, e, started and is_main) from None
    if status == "interrupted":  # rank 0 has said why (before a requeue could end the job)
        summary = read_summary(run_dir) or {}
        raise Interrupted(f"{run_dir}: {summary.get('error', 'interrupted')}", said=True)
    if not is_main:
        return status
    summary = read_summary(run_dir)
    print(outcome_line(run_dir, summary), flush=True)
    return summary["status"]


def _start_record(
    job: Config,
    plain: dict[str, Any],
    run_dir: Path,
    ident: str,
    hydra_files: dict[str, str],
    meta: dict[str, Any] | None,
    card: dict[str, Any],
) -> None:
    """Rank 0, before any worker starts: the resolved config, Hydra's files, the identity, the
    data card and `status: running` (with the space of the final summary reserved). `plain` is
    `job`'s record (schema.record): what config.yaml and the identity hold."""
    reserve(run_dir)  # the space of the final summary, should the disk fill up
    (run_dir / ".hydra").mkdir(exist_ok=True)
    for name, text in hydra_files.items():
        write_text_atomic(run_dir / ".hydra" / name, text)
    write_text_atomic(run_dir / CONFIG, OmegaConf.to_yaml(OmegaConf.create(plain)))
    write_json_atomic(run_dir / IDENTITY, identity_config(plain))
    write_json_atomic(run_dir / DATA_CARD, card)
    previous = read_summary(run_dir) or {}  # a record (summary.json): its keys as written
    resumed = previous.get("resumed", [])
    if meta is not None:
        resumed = [*resumed, {"from_step": meta["step"], "at": now(), "host": _host()}]
    # each commit its steps ran on: the checkpoint's segments, then this start's
    commits = resumed_segments(meta, previous, git_sha())
    update_summary(
        run_dir,
        drop=("error", "interrupted", "finished_at"),
        status="running",
        identity=ident,
        world_size=job.workers,
        git_sha=summary_commit(commits),
        git_commits=commits,
        torch_version=torch.__version__,
        host=_host(),
        started_at=previous.get("started_at") if meta is not None else now(),
        resumed=resumed,
        wandb_id=previous.get("wandb_id") or _wandb_id(),
        data_card=card,
    )
    what = f"resume from step {meta['step']} ({meta['reason']})" if meta else "run"
    print(
        f"{what} {run_dir}: {job.algorithm.name} tau={job.tau} workers={job.workers} "
        f"dataset={job.dataset.name} model={job.model.name} epochs={job.epochs}",
        flush=True,
    )


@contextmanager
def late_stops_ignored():
    """Around the workers' run: a stop signal that comes after they ended, while run.py reads
    their outcome, is too late to stop anything (the run's record and exit code stand; a sweep
    stops at the next Ctrl-C). Outside, run.py's own handlers (run.py, cli) are back."""
    previous = {sig: signal.getsignal(sig) for sig in d.forwarded_signals()}
    for sig in previous:  # spawn() puts its forwarding handlers in place, then these again
        signal.signal(sig, signal.SIG_IGN)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def check_metrics(run_dir: Path, step: int) -> None:
    """A run resumed from a checkpoint keeps its metrics.jsonl rows up to the checkpoint's step
    (experiments/store/log.py): a file that is not text would lose them, so it is an error here."""
    try:
        read_text(run_dir / METRICS)
    except FileNotFoundError:
        pass
    except DamagedRecord as e:
        raise UserError(
            f"{e}: resuming from step {step} would lose its rows; delete {run_dir} to start over"
        ) from None


def _spawned_status(run_dir: Path, job: Config, stops: list[int]) -> str:
    """The status of a run whose spawned workers all exited cleanly, from its record: a stop
    they checkpointed is `interrupted`; without a result, a Ctrl-C cancelled it."""
    try:
        summary = read_summary(run_dir) or {}
    except UserError:
        summary = {}
    if summary.get("interrupted"):
        return "interrupted"
    status = summary.get("status")
    if status in ("completed", "diverged"):
        return status
    if signal.SIGINT in stops:
        raise Cancelled(ctrl_c_message(run_dir, job, stops.count(signal.SIGINT)))
    raise WorkerFailed(f"the workers ended without a result (status {status!r})")


def ctrl_c_message(run_dir: Path, job: Config, presses: int) -> str:
    """What a Ctrl-C that stopped the run at once (checkpointing off, or a second Ctrl-C) left:
    the checkpoint a rerun resumes from, if there is one."""
    try:
        meta = ckpt.read_meta(run_dir)
    except UserError:
        meta = None
    twice = " twice (stopped at once)" if presses > 1 else ""
    if meta is not None:
        return (
            f"interrupted by Ctrl-C{twice}; the checkpoint of step {meta['step']} stays: rerun "
            "to resume from it"
        )
    if job.checkpoint_every == 0 and presses <= 1:
        return "interrupted by Ctrl-C (no checkpoint: checkpoint_every=0)"
    return f"interrupted by Ctrl-C{twice}, before its first checkpoint: a rerun starts over"


def _ended(run_dir: Path, error: BaseException, recorded: bool) -> BaseException:
    """How run.py reports `error`, which ended the run, after its record says so (`recorded`:
    the summary says `running`; a finished summary is never touched): a stop signal before any
    worker trained is an interruption (exit code 3), a Ctrl-C a cancellation (130)."""
    if isinstance(error, Stopped):
        name = signal.Signals(error.signum).name
        said = f"interrupted by {name} before training started; nothing to save: rerun to start it"
        error = Interrupted(f"{run_dir}: {said}")
        fields = {
            "error": said,
            "interrupted": {"signal": name, "step": 0, "at": now(), "requeue": None},
        }
    elif isinstance(error, Interrupted):  # a stop signal ended workers without a checkpoint
        fields = {"error": str(error)}
        error = Interrupted(f"{run_dir}: {error}")
    elif isinstance(error, KeyboardInterrupt):
        error = Cancelled("interrupted by Ctrl-C before training started")
        fields = {"error": str(error)}
    elif isinstance(error, OneLine | WorkerFailed | Cancelled):
        fields = {"error": str(error)[:2000]}
    else:
        fields = {"error": f"{type(error).__name__}: {error}"[:2000]}
    if recorded:
        record_failure(run_dir, fields)
    return error


def record_failure(run_dir: Path, fields: dict[str, Any]) -> None:
    """Write `status: failed` and why (the run's final record: the reserved space is released
    for it on a full disk), unless the summary already holds a finished result. A summary that
    cannot be written even then stays `running`; `analysis.runs.status` reports it failed once its
    heartbeat is stale."""
    try:
        if (read_summary(run_dir) or {}).get("status") in ("completed", "diverged"):
            return
    except UserError:
        pass
    try:
        update_summary(run_dir, final=True, status="failed", **fields)
    except OutputError:
        pass


def _host() -> str:
    return platform.node()


def _wandb_id() -> str:
    """The run's W&B id, fixed at its first start so that a resumed run continues the same W&B
    run (`resume="allow"`) instead of starting a new one."""
    return uuid.uuid4().hex[:12]


def outcome_line(run_dir: Path, s: dict) -> str:
    """One line saying how the run ended, for the console."""
    if s["status"] == "diverged":
        return f"{run_dir}: diverged at step {s.get('diverged_at_step')} (non-finite loss)"
    return (
        f"{run_dir}: {s['status']}  final/test_acc {s['final/test_acc']:.4f}  "
        f"time/train_s {s['time/train_s']:.1f}  comm/bytes {s['comm/bytes']}"
    )
