"""Checkpoints and the requests to stop: what makes a preempted run continue exactly.

Layout in the run directory (docs/records.md: `checkpoint/` when checkpointing is on):

    checkpoint/latest.json            which step directory is complete, with its files' sha256,
                                      the step, the world size and the run's trajectory config
    checkpoint/step-000000123/rank0.pt   one file per worker, all of the same step
    ...

What a worker's file holds (experiments/training/loop.py builds it): the model (parameters and
BatchNorm buffers), the local optimizer (momentum), the algorithm's whole state (algorithms/base.py:
anchors, centres, error-feedback memories, PowerSGD factors, stale snapshots, counters, metric sums,
and the collectives in flight as snapshots), the worker's RNG streams (torch CPU and CUDA, and the
data sampler's generator as of the start of the epoch, plus the batches already taken in it),
the clock (virtual time), the ledger and the loop's accounts. Restored, the run continues on the
same trajectory: on CPU its metrics equal those of the uninterrupted run (tests/test_resume.py).
The data order and augmentation of an epoch come from the sampler's generator as of the epoch's
start (experiments/data/datasets.py), so a resume mid-epoch is exact with data-loader worker
processes too. Not exact: real-clock times are measured, not restored.

Writing (`save`): every worker writes its file atomically (temporary name, then rename), the
workers exchange the files' digests on the control group, then rank 0 replaces `latest.json`
atomically and removes older step directories. A crash at any point leaves the previous
complete checkpoint in force, and no temporary file (a full disk: an OutputError naming the
file). Reading (`verify`, `load`): a missing, corrupt, incompatible or damaged checkpoint
(`latest.json` that is not an object or lacks a field, a file that passes its digest but does
not load) is a `CheckpointError` naming the file, before any worker starts, never a silent
restart from scratch nor a traceback inside the workers.

When (experiments/training/loop.py): every `checkpoint_every` epochs at an evaluation point, and
when a worker receives a stop signal (STOPS, the one table: SIGUSR1/SIGUSR2, SLURM's warning before
a time limit; SIGTERM, preemption or scancel; SIGHUP, a closed terminal; SIGINT, Ctrl-C: only
when `checkpoint_every` > 0, else it stops the run at once, as a second Ctrl-C always does).
The workers agree on one step (`Stopper`):
- at every evaluation point, where every algorithm is at rest after `drain()`, with one blocking
  MAX all-reduce of the request flags on the control group;
- between steps, for algorithms whose collectives in flight were launched by every rank
  (`Algorithm.checkpoint_anywhere`), with a non-blocking poll every `checkpoint.poll_steps`
  steps: the poll launched at step s is read at step s + poll_steps, so no worker waits for a
  slower one beyond what the algorithm already does. OSP/LOSP stop at the next evaluation point.
The control group is a separate gloo group (with `cluster=sim`, a second in-process group:
algorithms/group.py), so its collectives are never matched against the algorithm's (written
by hand: torch.distributed has no preemption support; submitit's own handler checkpoints from
rank 0 only, as W&B and submitit expect).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import sys
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch

from algorithms.group import Group, as_group
from experiments.errors import OutputError, UserError
from experiments.store.records import (
    DamagedRecord,
    detach_closed_terminal,
    read_json_object,
    write_bytes_atomic,
    write_json_atomic,
)

DIR = "checkpoint"
LATEST = "latest.json"
FORMAT = 1

# Keys that do not change a run's trajectory: a checkpoint stays valid when they change (the same
# keys are left out of the run directory's name: conf/config.yaml, override_dirname).
NOT_TRAJECTORY = (
    "wandb",
    "progress",
    "out_root",
    "threads_per_worker",
    "cluster",
    "dist_timeout_s",
    "checkpoint_every",
    "checkpoint",
)
NOT_TRAJECTORY_DATASET = ("root", "download", "verify_checksums")


class CheckpointError(UserError):
    """A checkpoint that cannot be used: one line naming the file."""


def trajectory_config(cfg: dict[str, Any]) -> dict[str, Any]:
    """The part of the config that decides the run's trajectory."""
    out = {k: v for k, v in cfg.items() if k not in NOT_TRAJECTORY}
    if isinstance(out.get("dataset"), dict):
        out["dataset"] = {
            k: v for k, v in out["dataset"].items() if k not in NOT_TRAJECTORY_DATASET
        }
    return json.loads(json.dumps(out, default=str))


def _flat(d: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(d, dict):
        return {prefix: d}
    out: dict[str, Any] = {}
    for k, v in d.items():
        out.update(_flat(v, f"{prefix}{k}."))
    return out


def _differences(a: dict, b: dict) -> list[str]:
    fa, fb = _flat(a), _flat(b)
    keys = sorted(set(fa) | set(fb))
    return [
        f"{k.rstrip('.')}: {fa.get(k, '(absent)')!r} -> {fb.get(k, '(absent)')!r}"
        for k in keys
        if fa.get(k, "(absent)") != fb.get(k, "(absent)")
    ]


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def latest_path(run_dir: Path) -> Path:
    return Path(run_dir) / DIR / LATEST


def read_meta(run_dir: Path) -> dict | None:
    """The latest complete checkpoint's description, None when the run has none; a
    CheckpointError naming the file when it is not one (damaged, truncated, a field missing or
    of the wrong type, another format)."""
    path = latest_path(run_dir)
    try:
        meta = read_json_object(path)
    except FileNotFoundError:
        return None
    except DamagedRecord as error:
        raise CheckpointError(
            f"checkpoint {path} is unreadable ({error.why}); delete {path.parent} to start over"
        ) from None
    problem = _meta_problem(meta)
    if problem:
        raise CheckpointError(
            f"checkpoint {path} is unreadable ({problem}); delete {path.parent} to start over"
        )
    return meta


# The fields of latest.json and their types (a damaged or hand-edited file fails here, in one
# line, not inside the workers).
_META_FIELDS = {
    "step": int,
    "epoch": int,
    "dir": str,
    "world_size": int,
    "files": dict,
    "config": dict,
}


def _meta_problem(meta: dict) -> str | None:
    if meta.get("format") != FORMAT:
        return f"format {meta.get('format')!r}, this code reads format {FORMAT}"
    for key, kind in _META_FIELDS.items():
        if key not in meta:
            return f"no {key!r}"
        value = meta[key]
        if not isinstance(value, kind) or isinstance(value, bool):
            return f"{key!r} is not {'an integer' if kind is int else kind.__name__}: {value!r}"[
                :200
            ]
    if meta["step"] < 0 or meta["world_size"] < 1:
        return f"step {meta['step']} or world size {meta['world_size']} out of range"
    if Path(meta["dir"]).name != meta["dir"] or not meta["dir"].startswith("step-"):
        return f"'dir' is not a step directory: {meta['dir']!r}"
    for rank, entry in meta["files"].items():
        if not (
            isinstance(entry, dict)
            and isinstance(entry.get("sha256"), str)
            and isinstance(entry.get("bytes"), int)
        ):
            return f"files[{rank!r}] has no sha256 and bytes"
    return None


def verify(
    run_dir: Path, cfg: dict[str, Any], ranks: list[int] | None = None, load_files: bool = False
) -> dict | None:
    """Check the latest checkpoint against this run (config, world size, files and digests of
    `ranks`, all when None); return its description, or None when there is none. `load_files`:
    also load each file (a file can pass its digest and still not load: written by another
    version of torch, or not a training state), so that a checkpoint that cannot be used is an
    error before any worker starts."""
    meta = read_meta(run_dir)
    if meta is None:
        return None
    where = latest_path(run_dir)
    diff = _differences(meta["config"], trajectory_config(cfg))
    if diff:
        shown = "; ".join(diff[:3]) + (f"; and {len(diff) - 3} more" if len(diff) > 3 else "")
        raise CheckpointError(
            f"checkpoint {where} belongs to another configuration ({shown}); "
            f"delete {where.parent} to start over"
        )
    if meta["world_size"] != cfg["workers"]:
        raise CheckpointError(
            f"checkpoint {where} was written by {meta['world_size']} workers, this run has "
            f"{cfg['workers']}"
        )
    for rank in range(meta["world_size"]) if ranks is None else ranks:
        entry = meta["files"].get(str(rank))
        path = where.parent / meta["dir"] / f"rank{rank}.pt"
        if entry is None or not path.is_file():
            raise CheckpointError(f"checkpoint file {path} is missing; delete {where.parent}")
        if path.stat().st_size != entry["bytes"] or _sha256(path) != entry["sha256"]:
            raise CheckpointError(
                f"checkpoint file {path} is corrupt (size or sha256 differs from {where}); "
                f"delete {where.parent} to start over"
            )
        if load_files:
            load(run_dir, meta, rank, whole=True)  # checked, then dropped: one at a time
    return meta


# What a worker's file holds (experiments/training/loop.py, capture()).
STATE_KEYS = ("model", "optimizer", "algorithm", "rng", "clock", "ledger", "times", "position")


def load(run_dir: Path, meta: dict, rank: int, whole: bool = False) -> dict[str, Any]:
    """This worker's saved state (tensors and plain values only: `weights_only`); a
    CheckpointError naming the file when it does not load, or (`whole`) is not a whole
    training state (STATE_KEYS)."""
    path = Path(run_dir) / DIR / meta["dir"] / f"rank{rank}.pt"
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # any unpickling failure is a corrupt file
        why = " ".join(str(e).split())[:200] or type(e).__name__
        raise CheckpointError(
            f"checkpoint file {path} is unreadable ({why}); delete {path.parent.parent} to "
            "start over"
        ) from None
    missing = [k for k in STATE_KEYS if not isinstance(state, dict) or k not in state]
    if whole and missing:
        raise CheckpointError(
            f"checkpoint file {path} is not a training state (no {missing[0]!r}); delete "
            f"{path.parent.parent} to start over"
        )
    return state


def save(
    run_dir: Path,
    state: dict[str, Any],
    *,
    rank: int,
    world_size: int,
    step: int,
    epoch: int,
    reason: str,
    cfg: dict[str, Any],
    group: Group | None,
    commits: list[dict[str, Any]] | None = None,
) -> Path:
    """Write this worker's `state` for `step`; collective over the control `group`. Returns the
    step directory once every worker's file is on disk and `latest.json` points to it, with
    `commits` (rank 0's: the run's `git_commits`, the commits its steps so far ran on)."""
    root = Path(run_dir) / DIR
    name = f"step-{step:09d}"
    step_dir = root / name
    try:
        step_dir.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise OutputError(step_dir, error) from None
    path = step_dir / f"rank{rank}.pt"
    # temporary file, fsync, rename; on a failure (a full disk) no temporary is left behind
    write_bytes_atomic(path, writer=lambda f: torch.save(state, f))
    entry = {"sha256": _sha256(path), "bytes": path.stat().st_size}
    entries: list[Any] = [entry]
    if world_size > 1:
        entries = as_group(group).all_gather_object(entry)
    if rank == 0:
        write_json_atomic(
            root / LATEST,
            {
                "format": FORMAT,
                "step": step,
                "epoch": epoch,
                "dir": name,
                "reason": reason,
                "world_size": world_size,
                "files": {str(r): e for r, e in enumerate(entries)},
                "saved_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "torch_version": torch.__version__,
                "config": trajectory_config(cfg),
                **({"git_commits": commits} if commits else {}),
            },
        )
        for old in root.glob("step-*"):  # only the latest is kept
            if old.name != name:
                for f in old.iterdir():
                    f.unlink(missing_ok=True)
                old.rmdir()
    if world_size > 1:
        as_group(group).barrier()  # nobody leaves before latest.json names the new step
    return step_dir


def remove(run_dir: Path) -> None:
    """Delete the run's checkpoint once its result is final (it would never be used again, and
    at paper scale it is the largest thing in the run directory)."""
    root = Path(run_dir) / DIR
    if root.exists():
        shutil.rmtree(root)


@dataclass(frozen=True)
class Stop:
    """What one signal asks of a run: stop at the next step the workers agree on, with a
    checkpoint, and say so (`sender`: who sends it). The run's summary then says `failed` with
    `interrupted by <SIGNAL> at step <n>; checkpoint saved: rerun to resume` and an
    `interrupted` entry; run.py exits with code 3 (experiments/errors.py). `requeue`: rank 0
    then requeues the SLURM job (`scontrol requeue`), whose next start resumes."""

    sender: str
    requeue: bool


# The one table of the signals a cluster or a terminal sends (docs/records.md, "Failures, exit
# codes, determinism"). Ctrl-C (SIGINT) checkpoints only with `checkpoint_every` > 0; without it,
# and at a second Ctrl-C, the run stops at once (exit code 130; the last checkpoint, if any,
# stays for a rerun). A stop signal that comes before the workers train (start-up) stops the run the
# same way at its first safe step; one that comes while run.py has started no worker yet ends
# it at once, with the record saying so (nothing to save: a rerun starts it). SIGKILL cannot be
# caught: the summary stays `running` and `analysis.runs.status` reports the run as failed once its
# heartbeat is stale.
STOPS: dict[signal.Signals, Stop] = {
    signal.SIGUSR1: Stop("SLURM's time-limit warning (sbatch --signal=USR1@120)", requeue=True),
    signal.SIGUSR2: Stop("submitit's time-limit warning", requeue=True),
    signal.SIGTERM: Stop("preemption, scancel, kill, a container stopping", requeue=False),
    signal.SIGHUP: Stop("the terminal closed (a lost ssh session)", requeue=False),
    signal.SIGINT: Stop("Ctrl-C", requeue=False),
}
STOP_SIGNALS = {sig: stop.requeue for sig, stop in STOPS.items()}


class Stopper:
    """Stop requests of this worker and the workers' agreement on where to stop (module doc).

    Flags travel as numbers: 0 none, 1 stop, 2 stop and requeue; all workers act on the MAX.
    `simulate_at_step` raises rank 0's flag at that step as if SIGUSR1 had arrived (to try the
    resume path on a laptop, and for the tests); a run resumed past that step ignores it.
    """

    def __init__(
        self,
        *,
        rank: int,
        world_size: int,
        group: Group | None,
        poll_steps: int,
        anywhere: bool,
        simulate_at_step: int | None = None,
        start_step: int = 0,
        checkpoint_on_interrupt: bool = True,
        timeout_s: float = 30.0,
    ):
        self.rank, self.world_size, self.group = rank, world_size, group
        self.poll_steps, self.anywhere = poll_steps, anywhere
        self.simulate_at_step = (
            simulate_at_step
            if simulate_at_step is not None and simulate_at_step > start_step and rank == 0
            else None
        )
        self.checkpoint_on_interrupt = checkpoint_on_interrupt
        # The control group's own timeout is long (set-up, checkpoints); the agreements of the
        # training loop wait no longer than the training's collectives (`dist_timeout_s`).
        self.timeout = timedelta(seconds=timeout_s)
        self.flag = 0
        self.signal_name: str | None = None
        self.agreed = 0  # the MAX of the flags, once the workers decided to stop
        self._poll: tuple[Any, torch.Tensor] | None = None
        self._previous: dict[int, Any] = {}

    @property
    def group(self) -> Group | None:
        """The control group (a `Group`; a torch.distributed group is wrapped). Unset: None
        alone, else torch.distributed's default group."""
        if self._group is None and self.world_size > 1:
            return as_group(None)
        return self._group

    @group.setter
    def group(self, group) -> None:
        self._group = None if group is None else as_group(group)

    def forget_simulation_before(self, step: int) -> None:
        """A run resumed at `step` has already stopped for a simulated signal before it."""
        if self.simulate_at_step is not None and self.simulate_at_step <= step:
            self.simulate_at_step = None

    def install(self) -> None:
        """Catch the stop signals (main thread only; restored by `close()`)."""
        for sig in STOP_SIGNALS:
            self._previous[sig] = signal.signal(sig, self._handler)

    def _handler(self, signum: int, frame) -> None:
        if signum == signal.SIGINT and (self.flag or not self.checkpoint_on_interrupt):
            # a second Ctrl-C, or one while checkpointing is off: stop now, no checkpoint
            raise KeyboardInterrupt
        if signum == signal.SIGHUP:
            detach_closed_terminal()
        name = signal.Signals(signum).name
        if not self.flag and self.rank == 0:  # one line for all (each rank records it)
            try:
                print(
                    f"rank {self.rank}: {name}: stopping at the next safe step with a checkpoint",
                    file=sys.stderr,
                    flush=True,
                )
            except OSError:  # no console to say it on: the record says it
                pass
        if not self.flag:
            self.signal_name = name
        self.flag = max(self.flag, 2 if STOP_SIGNALS[signum] else 1)

    def _local(self, step: int) -> int:
        if self.simulate_at_step is not None and step >= self.simulate_at_step and not self.flag:
            self.flag, self.signal_name = 2, "SIGUSR1 (simulated)"
        return self.flag

    def _decide(self, value: float) -> bool:
        self.agreed = int(value)
        return self.agreed > 0

    def poll(self, step: int) -> bool:
        """At a step boundary: should every worker stop here? (Same answer on every rank.)"""
        if not self.anywhere:
            return False
        if self.world_size == 1:
            return self._decide(self._local(step))
        if step % self.poll_steps != 0:
            return False
        decision = False
        if self._poll is not None:
            work, flags = self._poll
            work.wait(self.timeout)
            decision = self._decide(flags.item())
            self._poll = None
        if not decision:
            flags = torch.tensor([float(self._local(step))], dtype=torch.float64)
            work = self.group.all_reduce(flags, "max", async_op=True)
            self._poll = (work, flags)
        return decision

    def agree(self, step: int) -> bool:
        """At an evaluation point (every worker at rest): should every worker stop now?"""
        self._settle()
        flags = torch.tensor([float(self._local(step))], dtype=torch.float64)
        if self.world_size > 1:
            work = self.group.all_reduce(flags, "max", async_op=True)
            work.wait(self.timeout)
        return self._decide(flags.item())

    def _settle(self) -> None:
        if self._poll is not None:
            self._poll[0].wait(self.timeout)
            self._poll = None

    @property
    def requeue(self) -> bool:
        return self.agreed >= 2

    def close(self, clean: bool = True) -> None:
        """Wait for the poll in flight (every rank launched it; not after a failure, when a peer
        may be gone) and restore the handlers."""
        if clean:
            self._settle()
        self._poll = None
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        self._previous = {}


def slurm_job() -> str | None:
    """This SLURM job as `scontrol` names it (`ARRAY_TASK` for an array task), or None outside
    SLURM."""
    env = os.environ
    if "SLURM_JOB_ID" not in env:
        return None
    if "SLURM_ARRAY_JOB_ID" in env and "SLURM_ARRAY_TASK_ID" in env:
        return f"{env['SLURM_ARRAY_JOB_ID']}_{env['SLURM_ARRAY_TASK_ID']}"
    return env["SLURM_JOB_ID"]


def requeue_slurm_job(job: str) -> str | None:
    """Ask SLURM to requeue `job` (rank 0, after the checkpoint and the records: `scontrol
    requeue` ends the running job at once and queues it again, and the new start resumes from
    the checkpoint in the same run directory). Returns None, or why it failed."""
    import subprocess

    try:
        subprocess.run(["scontrol", "requeue", job], check=True, timeout=60, capture_output=True)
    except (OSError, subprocess.SubprocessError) as e:
        return f"requeue of job {job} failed ({e}); resubmit the same command to resume"
    return None
