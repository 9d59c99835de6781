"""The fault-and-input catalogue (issue 14): every class of bad input and fault a hostile user
or a cluster can produce, one case a line; tests/catalogue.py runs a case and checks its exit
code, its one-line message, the state of every record and that no process is left behind.

Classes: `launcher` (what torchrun/srun decided against the config), `output` (where records
go), `disk` (a full or failing disk mid-run), `damaged` (records and checkpoints that are not
what the suite wrote), `values` (every value, checked before any worker starts), `cli` (the
command line itself), `signals` (what a cluster or a terminal sends, hangs, crashes), `races`
(two commands on one run), `overflow` (numbers beyond the training's dtype), `driver` (the
sweep driver behind `make table1`), `status` (the status reader).

In-process cases (pre-flight errors, damaged records refused before any worker starts) take a
fraction of a second; the cases that start workers are real processes, marked `slow` where
they take more than a smoke run.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest
import torch

from tests.catalogue import (
    Case,
    Ctx,
    Result,
    checkpointed,
    evaluated,
    importing,
    press,
    run_case,
    send,
    snapshot,
    summary_of,
    then,
    verify,
    when,
    workers,
)

BINARY = b"\x00\x9f\x92\x96\xff\xfe garbage \x00"
LONG = ("epochs=100", "dataset.num_train=512")  # a run that trains long enough to be signalled
CASES: list[Case] = []


def add(*cases: Case) -> None:
    CASES.extend(cases)


# --- setups ---------------------------------------------------------------------------------


def plant(name: str, content: bytes | str):
    """Write `name` (relative to the case's run directory) before the command."""

    def setup(ctx: Ctx) -> None:
        path = ctx.run_dir() / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if name.endswith("/"):
            path.mkdir(exist_ok=True)
        else:
            path.write_bytes(content if isinstance(content, bytes) else content.encode())

    return setup


def plants(*setups):
    def setup(ctx: Ctx) -> None:
        for s in setups:
            s(ctx)

    return setup


STATE = {
    "model": {},
    "optimizer": {},
    "algorithm": {},
    "rng": {},
    "clock": None,
    "ledger": {},
    "times": {},
    "position": {},
}


def checkpoint(mutate=None, files: dict[int, bytes | object] | None = None):
    """A checkpoint of the case's own config (2 workers, step 8) in its run directory, its files
    `files` (default: a whole training state each), then `mutate(meta)` applied to latest.json
    (a dict to change, or bytes to write instead)."""

    def setup(ctx: Ctx) -> None:
        from experiments.store import checkpoint as ckpt

        run = ctx.run_dir()
        plain = ctx.plain()
        plain.pop("rerun")  # a request, not part of the run (experiments/runner.py)
        step_dir = run / "checkpoint" / "step-000000008"
        step_dir.mkdir(parents=True)
        entries = {}
        for rank in (0, 1):
            path = step_dir / f"rank{rank}.pt"
            content = (files or {}).get(rank, STATE)
            if isinstance(content, bytes):
                path.write_bytes(content)
            else:
                torch.save(content, path)
            data = path.read_bytes()
            entries[str(rank)] = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
        meta = {
            "format": ckpt.FORMAT,
            "step": 8,
            "epoch": 1,
            "dir": step_dir.name,
            "reason": "periodic",
            "world_size": 2,
            "files": entries,
            "config": ckpt.trajectory_config(plain),
        }
        changed = mutate(meta) if mutate is not None else None
        latest = run / "checkpoint" / "latest.json"
        if isinstance(changed, bytes):
            latest.write_bytes(changed)
        else:
            latest.write_text(json.dumps(meta))

    return setup


def running_summary(ctx: Ctx) -> None:
    run = ctx.run_dir()
    run.mkdir(parents=True, exist_ok=True)
    (run / "summary.json").write_text(json.dumps({"status": "running"}))


def held_lock(holder: bytes):
    """The case's run directory locked by this process (as another run would hold it), its
    holder file `holder`; released after the command (`check`)."""

    def setup(ctx: Ctx) -> None:
        from filelock import FileLock

        run = ctx.run_dir()
        run.mkdir(parents=True, exist_ok=True)
        lock = FileLock(run / ".lock", timeout=0)
        lock.acquire()
        (run / ".lock.holder").write_bytes(holder)
        ctx.cleanups.append(lock.release)

    return setup


# --- values (class 5): every value checked before any worker starts ------------------------


def V(name: str, args: str, line: str, **kw) -> Case:
    return Case(name, "values", tuple(args.split()), line=line, **kw)


add(
    V("width-0", "model.width=0", r"^error: model.width must be an integer >= 1, got 0$"),
    V("width-neg", "model.width=-1", r"^error: model.width must be an integer >= 1, got -1$"),
    V("width-text", "model.width=abc", r"^error: model.width must be an integer, got 'abc'$"),
    V("width-0-resnet", "model=resnet18 model.width=0", r"model.width must be an integer >= 1"),
    V(
        "width-huge",
        "model.width=100000",
        r"^error: model tiny_cnn with model.width=100000 has \S+ GiB of parameters per worker",
    ),
    V("backend-mpi2", "cluster.backend=mpi2", r"^error: cluster.backend must be one of auto, "),
    V(
        "backend-nccl-no-gpu",
        "cluster.backend=nccl",
        r"^error: cluster.backend=nccl but no GPU is visible \(CUDA_VISIBLE_DEVICES=\)",
        env={"CUDA_VISIBLE_DEVICES": ""},
        inproc=False,  # CUDA reads the variable once per process
    ),
    V("threads-neg", "threads_per_worker=-1", r"^error: threads_per_worker must be null .* -1$"),
    V("threads-0", "threads_per_worker=0", r"^error: threads_per_worker must be null .* got 0$"),
    V("threads-text", "threads_per_worker=many", r"^error: threads_per_worker must be an integer"),
    V("decay-at-text", "lr_decay_at=abc", r"^error: lr_decay_at must be a list \(e.g. "),
    V("decay-at-0", "lr_decay_at=[0]", r"^error: lr_decay_at holds fractions of epochs in \(0, 1]"),
    V("decay-at-2", "lr_decay_at=[2]", r"^error: lr_decay_at holds fractions"),
    V("decay-at-item", "lr_decay_at=[abc]", r"^error: lr_decay_at.*abc"),
    V("interp-missing", "tau=${oops}", r"^error: tau: Interpolation key 'oops' not found$"),
    V("interp-env", "tau=${oc.env:COMMSGD_NOT_SET}", r"^error: tau: .*COMMSGD_NOT_SET"),
    V(
        "interp-out-root",
        "out_root=${oops}",
        r"^error: out_root: Interpolation key 'oops'",
        out_root=False,
    ),
    V("interp-loop", "tau=${tau}", r"^error: tau: .*"),
    V(
        "fault-garbage",
        "",
        r"^error: COMMSGD_INJECT_FAULT must be <rank>:<step>:<kind> \(e.g. 1:40:raise\), "
        r"got 'garbage'$",
        env={"COMMSGD_INJECT_FAULT": "garbage"},
    ),
    V(
        "fault-step-text",
        "",
        r"^error: COMMSGD_INJECT_FAULT must be <rank>:<step>:<kind>",
        env={"COMMSGD_INJECT_FAULT": "0:x:raise"},
    ),
    V(
        "fault-kind",
        "",
        r"^error: COMMSGD_INJECT_FAULT: kind must be one of raise, exit, kill, hang, got 'boom'$",
        env={"COMMSGD_INJECT_FAULT": "0:1:boom"},
    ),
    V(
        "fault-rank",
        "",
        r"^error: COMMSGD_INJECT_FAULT names rank 5, but the run has 2 workers",
        env={"COMMSGD_INJECT_FAULT": "5:1:raise"},
    ),
    V(
        "fault-negative",
        "",
        r"^error: COMMSGD_INJECT_FAULT: rank and step must be >= 0",
        env={"COMMSGD_INJECT_FAULT": "-1:1:raise"},
    ),
    V(
        "fault-fields",
        "",
        r"^error: COMMSGD_INJECT_FAULT must be <rank>:<step>:<kind>",
        env={"COMMSGD_INJECT_FAULT": "1:2:raise:4"},
    ),
    V(
        "wandb-online-no-credentials",
        "wandb.mode=online",
        r"^error: wandb.mode=online needs W&B credentials",
        env={"WANDB_API_KEY": None, "NETRC": "{tmp}/no-netrc"},
    ),
    V("wandb-mode", "wandb.mode=sometimes", r"^error: wandb.mode must be one of disabled, "),
    V("unknown-key", "foo=1", r"^error: unknown key foo: no code reads it"),
    V("unknown-key-plus", "+foo=1", r"^error: unknown key foo: no code reads it"),
    V("unknown-key-plusplus", "++foo=1", r"^error: unknown key foo: no code reads it"),
    V("unknown-nested-plus", "+compute.foo=1", r"^error: unknown key compute.foo"),
    V("unknown-dataset-key", "+dataset.foo=1", r"^error: unknown key dataset.foo"),
    V("unknown-algo-option", "+algorithm.foo=1", r"^error: algorithm sync_sgd has no option foo"),
    V("deleted-key", "~tau", r"^error: tau is missing \(`~tau` deletes it\)"),
    V("deleted-group", "~algorithm", r"^error: algorithm is missing"),
    V("eval-every-0", "eval_every=0", r"^error: eval_every must be an integer >= 1, got 0$"),
    V("eval-batch-0", "eval_batch_size=0", r"^error: eval_batch_size must be an integer >= 1"),
    V("seed-neg", "seed=-1", r"^error: seed must be an integer in \[0, 2\^32\), got -1$"),
    V("seed-huge", "seed=100000000000000000000000", r"^error: seed must be an integer in \[0"),
    V("seed-float", "seed=1.5", r"^error: seed must be an integer, got '1.5'$"),
    V("dataset-seed-neg", "dataset.seed=-1", r"^error: dataset.seed must be an integer in \[0"),
    V("timeout-0", "dist_timeout_s=0", r"^error: dist_timeout_s must be a number of seconds in"),
    V("timeout-huge", "dist_timeout_s=1e300", r"^error: dist_timeout_s must be .* got 1e\+300$"),
    V("timeout-nan", "dist_timeout_s=nan", r"^error: dist_timeout_s must be a finite number"),
    V("ckpt-every-neg", "checkpoint_every=-1", r"^error: checkpoint_every must be an integer >= 0"),
    V(
        "ckpt-every-not-eval",
        "checkpoint_every=3 eval_every=2",
        r"^error: checkpoint_every=3 must be a multiple of eval_every=2",
    ),
    V(
        "poll-0",
        "checkpoint.poll_steps=0",
        r"^error: checkpoint.poll_steps must be an integer >= 1",
    ),
    V(
        "simulate-0",
        "checkpoint.simulate_signal_at_step=0",
        r"^error: checkpoint.simulate_signal_at_step must be null or an integer >= 1",
    ),
    V("on-signal-text", "checkpoint.on_signal=maybe", r"^error: checkpoint.on_signal must be true"),
    V("momentum-1", "momentum=1", r"^error: momentum must be in \[0, 1\), got 1.0$"),
    V("momentum-neg", "momentum=-0.1", r"^error: momentum must be in \[0, 1\)"),
    V("nesterov-no-momentum", "nesterov=true momentum=0", r"^error: nesterov=true needs momentum"),
    V("weight-decay-neg", "weight_decay=-1", r"^error: weight_decay must be >= 0"),
    V("warmup-neg", "warmup_epochs=-1", r"^error: warmup_epochs must be >= 0"),
    V("lr-decay-0", "lr_decay=0", r"^error: lr_decay must be > 0"),
    V("lr-0", "lr=0", r"^error: lr must be a number > 0, got 0"),
    V("lr-neg", "lr=-1", r"^error: lr must be a number > 0, got -1"),
    V("lr-nan", "lr=nan", r"^error: lr must be a finite number, got nan$"),
    V("lr-inf", "lr=inf", r"^error: lr must be a finite number, got inf$"),
    V("lr-text", "lr=abc", r"^error: lr must be a number, got 'abc'$"),
    V("dtype", "dtype=float16", r"^error: dtype must be one of float32, float64, got 'float16'$"),
    V("timing", "timing=sometimes", r"^error: timing must be one of real, virtual"),
    V(
        "emulate-on-virtual",
        "timing=virtual emulate_network=true",
        r"^error: emulate_network / emulate_compute apply to timing=real only$",
    ),
    V("slowdown", "compute.slowdown=bogus", r"^error: .*compute.slowdown.*bogus"),
    V(
        "slowdown-on-the-real-clock",
        "compute.slowdown=one_slow",
        r"^error: compute.slowdown=one_slow has no effect on the real clock \(timing=real\) "
        r"without emulate_compute=true",
    ),
    V(
        "stragglers-on-the-real-clock",
        "compute.straggler_prob=0.2",
        r"^error: compute.straggler_prob has no effect on the real clock",
    ),
    V(
        "step-time-neg",
        "compute.step_time_s=-1",
        r"^error: compute.step_time_s must be a number > 0 or 'measured'",
    ),
    V("factor-inf", "compute.factor=inf", r"^error: compute.factor must be a finite number"),
    V("latency-neg", "network.latency_s=-1", r"^error: network.latency_s must be >= 0"),
    V("bandwidth-0", "network.bandwidth_gbps=0", r"^error: network.bandwidth_gbps must be > 0"),
    V("topology", "network.topology=ring", r"^error: network.topology must be one of allreduce"),
    V(
        "ps-servers-0",
        "network.topology=ps network.ps_servers=0",
        r"^error: network.ps_servers must be >= 1",
    ),
    V("num-train-0", "dataset.num_train=0", r"^error: dataset.num_train must be an integer >= 1"),
    V("num-test-0", "dataset.num_test=0", r"^error: dataset.num_test must be an integer >= 1"),
    V("classes-0", "dataset.num_classes=0", r"^error: dataset.num_classes must be an integer >= 1"),
    V("image-0", "dataset.image_size=0", r"^error: dataset.image_size must be an integer >= 1"),
    V("channels-0", "dataset.channels=0", r"^error: dataset.channels must be an integer >= 1"),
    V("noise-neg", "dataset.noise=-1", r"^error: dataset.noise must be >= 0"),
    V(
        "dirichlet-0",
        "partition=dirichlet partition.concentration=0",
        r"^error: dirichlet concentration must be a finite number > 0",
    ),
    V(
        "noniid-1.5",
        "partition=noniid partition.dominant_fraction=1.5",
        r"^error: noniid dominant_fraction must be in \(0, 1]",
    ),
    V(
        "more-workers-than-samples",
        "workers=100 dataset.num_train=64",
        r"^error: cannot split 64 training samples over 100 workers",
    ),
    V("workers-0", "workers=0", r"^error: workers must be an integer >= 1, got 0$"),
    V("workers-text", "workers=two", r"^error: workers must be an integer, got 'two'$"),
    V("batch-0", "batch_size=0", r"^error: batch_size must be an integer >= 1, got 0$"),
    V("epochs-0", "epochs=0", r"^error: epochs must be an integer >= 1, got 0$"),
    V("tau-0", "tau=0", r"^error: tau must be an integer >= 1, got 0$"),
    V("tau-float", "tau=1.5", r"^error: tau must be an integer, got '1.5'$"),
    V("algorithm-unknown", "algorithm=foo", r"^error: unknown algorithm 'foo'; choose from "),
    V("easgd-alpha", "algorithm=easgd algorithm.alpha=2", r"^error: algorithm.alpha must be in"),
    V("powersgd-rank", "algorithm=powersgd algorithm.rank=0", r"^error: algorithm.rank must be"),
    V("overlap-beta", "algorithm=overlap_local_sgd algorithm.beta=1", r"^error: .*beta"),
    V(
        "losp-compensation",
        "algorithm=losp algorithm.compensation=magic",
        r"^error: algorithm.compensation must be one of",
    ),
    V("compression", "comm.compression=zip", r"^error: comm.compression must be one of none, "),
    V("slurm-nodes-0", "cluster=slurm cluster.nodes=0", r"^error: cluster.nodes must be an int"),
    V(
        "slurm-uneven",
        "cluster=slurm workers=3 cluster.nodes=2",
        r"^error: workers=3 do not fill cluster.nodes=2 x cluster.tasks_per_node=2",
    ),
    V(
        "cluster-unknown",
        "cluster=foo",
        r"^error: unknown cluster 'foo'; choose from local, sim, slurm",
    ),
    V(
        "scale-unknown",
        "scale=foo",
        r"^error: unknown scale 'foo'; choose from cpu, fmnist, paper, smoke",
    ),
    V("dataset-unknown", "dataset=foo", r"^error: unknown dataset 'foo'; choose from cifar10"),
    V("network-unknown", "network=foo", r"^error: unknown network 'foo'; choose from "),
    V("model-unknown", "model=foo", r"^error: unknown model 'foo'; choose from resnet18"),
    V("partition-unknown", "partition=foo", r"^error: unknown partition 'foo'"),
    V("experiment-unknown", "experiment=tabel1", r"^error: unknown experiment 'tabel1'; choose"),
    V(
        "cifar-missing",
        "dataset=cifar10 dataset.root={tmp}/nowhere dataset.download=false",
        r"^error: CIFAR-10 not found in .*/nowhere/cifar-10-batches-py",
    ),
    V(
        "fashion-mnist-missing",
        "dataset=fashion_mnist dataset.root={tmp}/nowhere dataset.source={tmp}/no-package",
        r"^error: Fashion-MNIST not found in .*/nowhere/FashionMNIST/raw .*apt-get install"
        r" dataset-fashion-mnist",
    ),
    V(
        "digits-test-fraction",
        "dataset=digits dataset.test_fraction=1.5",
        r"^error: dataset.test_fraction",
    ),
)

# --- overflow: numbers beyond the training's dtype ------------------------------------------

add(
    Case(
        "algorithm-knob",
        "overflow",
        ("algorithm=diloco", "algorithm.outer_lr=1e300"),
        line=r"^error: algorithm.outer_lr=1e\+300 is beyond what float32 holds \(3.4e\+38\)$",
    ),
    Case(
        "lr-1e300-diverges",
        "overflow",
        ("lr=1e300",),
        code=0,
        line=r": diverged at step 1 \(non-finite loss\)$",
        status="diverged",
        inproc=False,
    ),
    Case(
        "weight-decay-1e300-diverges",
        "overflow",
        ("weight_decay=1e300",),
        code=0,
        line=r": diverged at step \d+ \(non-finite loss\)$",
        status="diverged",
        inproc=False,
    ),
    Case(
        "lr-decay-1e300-diverges",
        "overflow",
        ("lr_decay=1e300", "lr_decay_at=[0.5]"),
        code=0,
        line=r": diverged at step \d+ \(non-finite loss\)$",
        status="diverged",
        inproc=False,
    ),
    Case(
        "lr-1e300-float64-diverges",
        "overflow",
        ("lr=1e300", "dtype=float64"),
        code=0,
        line=r": diverged at step \d+ \(non-finite loss\)$",
        status="diverged",
        inproc=False,
        slow=True,
    ),
)

# --- the command line itself -----------------------------------------------------------------

add(
    Case(
        "unknown-option",
        "cli",
        ("--foo",),
        line=r"^error: unrecognized arguments: --foo.* \(python run.py --help\)$",
    ),
    Case(
        "multirun-after-overrides",
        "cli",
        ("tau=0,-1", "-m"),
        line=r"^error: tau=-1: tau must be an integer >= 1, got -1$",
        one_line=False,
    ),
    Case("override-syntax", "cli", ("tau=[1",), line=r"^error: cannot read the override 'tau=\[1'"),
    Case(
        "unquoted-tilde",
        "cli",
        ("out_root=~/x",),
        line=r"quote a value holding `~`, spaces or non-ASCII characters: out_root='~/x'\)$",
        out_root=False,
    ),
    Case(
        "unquoted-non-ascii",
        "cli",
        ("out_root=/tmp/é",),
        line=r"quote a value .*: out_root='/tmp/é'\)$",
        out_root=False,
    ),
    Case("empty-group", "cli", ("algorithm=",), line=r"^error: .*algorithm"),
    Case(
        "sweep-of-bad-values",
        "cli",
        ("-m", "tau=0,abc"),
        line=r"^error: tau=abc: tau must be an integer, got 'abc'$",
        one_line=False,
    ),
)

# --- outputs that escape their root (class 2) ------------------------------------------------


def small_tmpfs(size: str, options: str = ""):
    def setup(ctx: Ctx) -> None:
        mount = ctx.tmp / "mnt"
        mount.mkdir()
        opts = f"size={size}" + (f",{options}" if options else "")
        if subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(mount)]).returncode:
            pytest.skip("cannot mount a small tmpfs here (not root?)")
        ctx.data["mount"] = mount
        ctx.cleanups.append(lambda: subprocess.run(["umount", "-l", str(mount)]))

    return setup


def home_run(ctx: Ctx, result: Result) -> None:
    """The run went to $HOME/runs-home (the quoted `~` was expanded, once)."""
    (run,) = (ctx.tmp / "home" / "runs-home" / "runs").iterdir()
    assert json.loads((run / "summary.json").read_text())["status"] == "completed"
    assert not (ctx.tmp / "~").exists() and not (Path.cwd() / "~").exists()


def landed(where: str):
    def check(ctx: Ctx, result: Result) -> None:
        (run,) = [p for p in (ctx.tmp / where / "runs").iterdir() if p.name[0] != "."]
        assert json.loads((run / "summary.json").read_text())["status"] == "completed"
        assert str(run) in result.stdout  # the path said is the path used

    return check


add(
    Case(
        "empty",
        "output",
        ("out_root=",),
        line=r"^error: out_root is empty: name a directory",
        out_root=False,
    ),
    Case("blank", "output", ("out_root=' '",), line=r"^error: out_root is empty", out_root=False),
    Case(
        "no-such-user",
        "output",
        ("out_root='~nosuchuser_i14/x'",),
        line=r"^error: out_root=~nosuchuser_i14/x: no such user \(~nosuchuser_i14\)$",
        out_root=False,
    ),
    Case(
        "component-300-bytes",
        "output",
        (f"out_root={{tmp}}/{'x' * 300}",),
        line=r"^error: out_root has a component of 300 bytes \(x+\.\.\.\): at most 255 bytes$",
        out_root=False,
    ),
    Case(
        "component-non-ascii-over-255-bytes",
        "output",
        (f"out_root='{{tmp}}/{'é' * 130}'",),
        line=r"^error: out_root has a component of 260 bytes",
        out_root=False,
    ),
    Case(
        "path-over-4096-bytes",
        "output",
        ("out_root={tmp}/" + "/".join(["d" * 200] * 20),),
        line=r"^error: out_root is \d+ bytes long: at most \d+",
        out_root=False,
    ),
    Case(
        "run-dir-component",
        "output",
        (f"hydra.run.dir={{tmp}}/{'y' * 300}",),
        line=r"^error: the run directory's path has a component of 300 bytes",
        out_root=False,
    ),
    Case(
        "under-proc",
        "output",
        ("out_root=/proc/none",),
        line=r"^error: output directory /proc/none/runs is not writable",
        out_root=False,
    ),
    Case(
        "under-a-file",
        "output",
        ("out_root={tmp}/a_file/out",),
        setup=lambda ctx: (ctx.tmp / "a_file").write_text("x"),
        line=r"^error: output directory .*/a_file/out/runs is not writable: Not a directory$",
        out_root=False,
    ),
    Case(
        "dev-null",
        "output",
        ("out_root=/dev/null",),
        line=r"^error: output directory /dev/null/runs is not writable",
        out_root=False,
    ),
    Case(
        "read-only",
        "output",
        ("out_root={tmp}/mnt",),
        setup=small_tmpfs("1m", "ro"),
        line=r"^error: output directory .*/mnt/runs is not writable: Read-only file system$",
        out_root=False,
    ),
    Case(
        "full",
        "output",
        ("out_root={tmp}/mnt",),
        setup=small_tmpfs("1m"),
        line=r"^error: output directory .*/mnt/runs is full: \S+ MB free, a run needs at least",
        out_root=False,
    ),
    Case(
        "quoted-tilde-runs-at-home",
        "output",
        ("out_root='~/runs-home'", "epochs=1"),
        env={"HOME": "{tmp}/home"},
        setup=lambda ctx: (ctx.tmp / "home").mkdir(),
        code=0,
        line="",
        status="any",
        out_root=False,
        inproc=False,
        check=home_run,
    ),
    Case(
        "quoted-non-ascii-and-spaces",
        "output",
        ("out_root='{tmp}/ré sults'", "epochs=1"),
        code=0,
        status="any",
        out_root=False,
        inproc=False,
        check=landed("ré sults"),
    ),
    Case(
        "relative-to-cwd",
        "output",
        ("out_root=rel/out", "epochs=1"),
        code=0,
        status="any",
        out_root=False,
        inproc=False,
        cwd="tmp",
        check=landed("rel/out"),
    ),
)


# --- the sweep driver (make table1 ...): results under OUT unless asked -----------------------


def fixture_runs(ctx: Ctx) -> None:
    """A finished demo run (the fixtures') under OUT/demo/runs, for a report without running."""
    shutil.copytree(
        Path(__file__).parent / "fixtures" / "runs" / "demo", ctx.tmp / "out" / "demo" / "runs"
    )
    ctx.data["results"] = snapshot(Path(__file__).parents[1] / "results")


def report_under_out(ctx: Ctx, result: Result) -> None:
    table = ctx.tmp / "out" / "results" / "demo" / "smoke" / "table.md"
    assert table.is_file(), result.stdout + result.stderr
    assert f"report: {table.parent}" in result.stdout
    assert snapshot(Path(__file__).parents[1] / "results") == ctx.data["results"]


add(
    Case(
        "report-goes-under-out",
        "driver",
        ("demo", "--scale", "smoke", "--no-run", "--out-root", "{tmp}/out"),
        cmd="sweep",
        code=0,
        setup=fixture_runs,
        check=report_under_out,
        one_line=False,
    ),
    Case(
        "publish-and-results",
        "driver",
        ("demo", "--no-run", "--publish", "--results", "{tmp}/r"),
        cmd="sweep",
        line=r"^error: give --publish \(the checkout's results/\) or --results DIR, not both$",
    ),
    Case(
        "empty-out-root",
        "driver",
        ("demo", "--no-run", "--out-root", ""),
        cmd="sweep",
        line=r"^error: --out-root: out_root is empty",
    ),
    Case(
        "unknown-preset",
        "driver",
        ("nope", "--no-run", "--out-root", "{tmp}/out"),
        cmd="sweep",
        line=r"^error: unknown experiment 'nope'; presets: ",
    ),
)

# --- damaged records and checkpoints (class 4): refused in one line, never recomputed over ----

RERUN = r"\(the run it records may have finished\): rerun=true recomputes it, keeping the damaged"
add(
    *(
        Case(
            f"summary-{name}",
            "damaged",
            setup=plant("summary.json", content),
            line=rf"^error: .*/summary.json: {why} {RERUN}",
        )
        for name, content, why in [
            ("binary", BINARY, r"not UTF-8 text \(byte 1\)"),
            ("list", "[]", "not a JSON object but a list"),
            ("string", '"completed"', "not a JSON object but a string"),
            ("number", "3", "not a JSON object but a number"),
            ("null", "null", "not a JSON object but null"),
            ("torn", '{"status": "compl', r"not JSON \(.*\)"),
            ("empty", "", "empty"),
            (
                "no-status",
                "{}",
                r"no status among running, completed, diverged, failed \(status: None\)",
            ),
            ("status-number", '{"status": 5}', r"no status among .* \(status: 5\)"),
            (
                "status-unknown",
                '{"status": "finished"}',
                r"no status among .* \(status: 'finished'\)",
            ),
        ]
    ),
    Case(
        "summary-directory",
        "damaged",
        setup=plant("summary.json/", b""),
        line=rf"^error: .*/summary.json: a directory, not a file {RERUN}",
    ),
    Case(
        "summary-lost-metrics-kept",
        "damaged",
        setup=plant("metrics.jsonl", '{"step": 32, "test/acc": 0.5}\n'),
        line=rf"^error: .*/summary.json: missing, but the run's other records exist {RERUN}",
    ),
    Case(
        "finished-without-identity",
        "damaged",
        setup=plant("summary.json", '{"status": "completed"}'),
        line=r"^error: run directory .* holds a finished run of another configuration \(identity "
        r"None, this one '\w+'\); move it away",
    ),
    Case(
        "finished-other-identity",
        "damaged",
        setup=plant("summary.json", '{"status": "diverged", "identity": "0123456789"}'),
        line=r"holds a finished run of another configuration \(identity '0123456789'",
    ),
    Case(
        "lock-holder-binary",
        "damaged",
        setup=held_lock(b"\x00\xff pid \x1b[31m 7"),
        line=r"^error: run directory .* is in use by \?. pid \?\[31m 7; wait for that run to end",
        no_dir=False,
    ),
)

CKPT = r"^error: checkpoint .*checkpoint/latest.json is unreadable \({}\); delete .*/checkpoint"


def ckpt_case(name: str, mutate, why: str, **kw) -> Case:
    return Case(
        f"latest-{name}",
        "damaged",
        setup=plants(running_summary, checkpoint(mutate)),
        line=CKPT.format(why),
        **kw,
    )


def without(key):
    def mutate(meta):
        del meta[key]

    return mutate


def setting(key, value):
    def mutate(meta):
        meta[key] = value

    return mutate


add(
    ckpt_case("list", lambda m: b"[]", "not a JSON object but a list"),
    ckpt_case("binary", lambda m: BINARY, r"not UTF-8 text \(byte 1\)"),
    ckpt_case("torn", lambda m: json.dumps(m)[:40].encode(), r"not JSON \(.*\)"),
    ckpt_case("empty-object", lambda m: b"{}", r"format None, this code reads format 1"),
    ckpt_case("format-2", setting("format", 2), r"format 2, this code reads format 1"),
    ckpt_case("no-files", without("files"), r"no 'files'"),
    ckpt_case("no-step", without("step"), r"no 'step'"),
    ckpt_case("no-config", without("config"), r"no 'config'"),
    ckpt_case("step-text", setting("step", "x"), r"'step' is not an integer: 'x'"),
    ckpt_case("files-list", setting("files", []), r"'files' is not dict: \[\]"),
    ckpt_case(
        "world-size-bool", setting("world_size", True), r"'world_size' is not an integer: True"
    ),
    ckpt_case(
        "dir-escapes", setting("dir", "../../x"), r"'dir' is not a step directory: '../../x'"
    ),
    ckpt_case(
        "entry-without-digest",
        lambda m: m["files"].__setitem__("0", {"bytes": 3}),
        r"files\['0'\] has no sha256 and bytes",
    ),
    Case(
        "rank-file-garbage-passing-its-digest",
        "damaged",
        setup=plants(running_summary, checkpoint(files={0: b"not a torch file"})),
        line=r"^error: checkpoint file .*/rank0.pt is unreadable \(.*\); delete .*/checkpoint to",
    ),
    Case(
        "rank-file-not-a-training-state",
        "damaged",
        setup=plants(running_summary, checkpoint(files={1: {"x": torch.zeros(2)}})),
        line=r"^error: checkpoint file .*/rank1.pt is not a training state \(no 'model'\)",
    ),
    Case(
        "rank-file-missing",
        "damaged",
        setup=plants(
            running_summary,
            checkpoint(),
            lambda ctx: (ctx.run_dir() / "checkpoint" / "step-000000008" / "rank1.pt").unlink(),
        ),
        line=r"^error: checkpoint file .*/rank1.pt is missing; delete .*/checkpoint$",
    ),
    Case(
        "rank-file-corrupt",
        "damaged",
        setup=plants(
            running_summary,
            checkpoint(),
            lambda ctx: (ctx.run_dir() / "checkpoint" / "step-000000008" / "rank0.pt").write_bytes(
                b"x" * 10
            ),
        ),
        line=r"^error: checkpoint file .*/rank0.pt is corrupt \(size or sha256 differs",
    ),
    Case(
        "resume-with-binary-metrics",
        "damaged",
        setup=plants(running_summary, checkpoint(), plant("metrics.jsonl", BINARY)),
        line=r"^error: .*/metrics.jsonl: not UTF-8 text \(byte 1\): resuming from step 8 would "
        r"lose its rows; delete .* to start over$",
    ),
    Case(
        "checkpoint-other-world-size",
        "damaged",
        setup=plants(running_summary, checkpoint(setting("world_size", 3))),
        line=r"^error: checkpoint .* was written by 3 workers, this run has 2$",
    ),
    Case(
        "checkpoint-other-config",
        "damaged",
        setup=plants(
            running_summary,
            checkpoint(lambda m: m["config"].__setitem__("lr", 0.5)),
        ),
        line=r"^error: checkpoint .* belongs to another configuration \(lr: 0.5 -> ",
    ),
)

# --- what a launcher decided against the config (class 1) ------------------------------------

TORCHRUN = {"RANK": "0", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29591"}
SRUN = {"SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_JOB_ID": "42"}


def L(name: str, args: str, env: dict, line: str, **kw) -> Case:
    return Case(name, "launcher", tuple(args.split()), env=env, line=line, **kw)


add(
    L(
        "torchrun-fewer",
        "workers=4",
        {**TORCHRUN, "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2"},
        r"^error: the launcher started 2 workers but workers=4: give run.py workers=2, or start "
        r"4 processes",
    ),
    L(
        "torchrun-more",
        "workers=1",
        {**TORCHRUN, "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2"},
        r"^error: the launcher started 2 workers but workers=1",
    ),
    L(
        "srun-tasks",
        "workers=2",
        {**SRUN, "SLURM_NTASKS": "4", "SLURM_NNODES": "1"},
        r"^error: the launcher started 4 workers but workers=2",
    ),
    L(
        "srun-nodes",
        "cluster=slurm workers=2 cluster.nodes=2",
        {**SRUN, "SLURM_NTASKS": "2", "SLURM_NNODES": "1"},
        r"^error: the launcher \(srun\) runs the workers on 1 node\(s\) but cluster.nodes=2: give "
        r"run.py cluster.nodes=1, or start it on 2 node\(s\) \(srun --nodes\)$",
    ),
    L(
        "srun-step-nodes",
        "cluster=slurm workers=4 cluster.nodes=1",
        {**SRUN, "SLURM_NTASKS": "4", "SLURM_NNODES": "2", "SLURM_STEP_NUM_NODES": "2"},
        r"^error: the launcher \(srun\) runs the workers on 2 node\(s\) but cluster.nodes=1",
    ),
    L(
        "srun-one-node-for-two",
        "cluster=slurm workers=4 cluster.nodes=2 cluster.tasks_per_node=2",
        {**SRUN, "SLURM_NTASKS": "4", "SLURM_NNODES": "1"},
        r"^error: the launcher \(srun\) runs the workers on 1 node\(s\) but cluster.nodes=2",
    ),
    L(
        "torchrun-nodes-local",
        "workers=2",
        {**TORCHRUN, "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "1", "GROUP_WORLD_SIZE": "2"},
        r"^error: the launcher \(torchrun\) runs the workers on 2 nodes but cluster=local is one "
        r"machine: give run.py cluster=slurm cluster.nodes=2$",
    ),
    L(
        "torchrun-nodes-slurm",
        "cluster=slurm workers=2 cluster.nodes=1",
        {**TORCHRUN, "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "1", "GROUP_WORLD_SIZE": "2"},
        r"^error: the launcher \(torchrun\) runs the workers on 2 node\(s\) but cluster.nodes=1: "
        r".*\(torchrun --nnodes\)$",
    ),
    L(
        "torchrun-per-node",
        "cluster=slurm workers=4 cluster.nodes=2",
        {**TORCHRUN, "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "1", "GROUP_WORLD_SIZE": "2"},
        r"^error: the launcher \(torchrun\) runs 1 workers per node but "
        r"cluster.tasks_per_node=2: give run.py cluster.tasks_per_node=1$",
    ),
    L(
        "world-size-text",
        "",
        {**TORCHRUN, "WORLD_SIZE": "two"},
        r"^error: the launcher's WORLD_SIZE='two' is not a number; unset it to let run.py start",
    ),
    L(
        "rank-out-of-range",
        "",
        {**TORCHRUN, "RANK": "5", "WORLD_SIZE": "2"},
        r"^error: the launcher \(torchrun\) says rank 5 of 2 workers: not a valid rank$",
    ),
    L(
        "srun-gpus-missing",
        "cluster=slurm workers=2 cluster.gpus_per_node=2",
        {**SRUN, "SLURM_NTASKS": "2", "SLURM_NNODES": "1", "CUDA_VISIBLE_DEVICES": ""},
        r"^error: cluster.gpus_per_node=2 but this task of the job sees no GPU",
        inproc=False,
    ),
    L(
        "torchrun-nccl-no-gpu",
        "workers=2 cluster.backend=nccl",
        {**TORCHRUN, "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2", "CUDA_VISIBLE_DEVICES": ""},
        r"^error: cluster.backend=nccl but no GPU is visible \(CUDA_VISIBLE_DEVICES=\)",
        inproc=False,
    ),
    Case(
        "real-torchrun-fewer",
        "launcher",
        ("workers=4",),
        cmd="torchrun",
        traceback=True,  # torchrun's own report of a failed worker ends in its traceback
        code=1,  # torchrun's own code for a failed worker; the workers said why, exit 2
        inproc=False,
        one_line=False,
        # The first worker to refuse exits 2 and torchrun then stops the other (exit 3, the
        # suite's "signalled"), which under load may happen before that one has printed its own
        # line: so the line is there at least once and the root cause torchrun names is exit 2.
        check=lambda ctx, r: (
            (
                r.stderr.count(
                    "error: the launcher started 2 workers but workers=4: give run.py workers=2"
                )
                >= 1
                and re.search(r"Root Cause.*?exitcode\s*:\s*2\b", r.stderr, re.S) is not None
            )
            or pytest.fail(r.stderr[-2000:])
        ),
    ),
)

# --- signals, hangs and crashes (class 6) ----------------------------------------------------


def interrupted(signame: str, step: str = r"\d+"):
    def check(ctx: Ctx, result: Result) -> None:
        s = summary_of(ctx)
        assert s["status"] == "failed" and s["interrupted"]["signal"] == signame, s
        assert checkpointed(ctx), "no checkpoint saved"

    return check


def no_checkpoint(ctx: Ctx, result: Result) -> None:
    assert not checkpointed(ctx)


def recorded_error(pattern: str):
    def check(ctx: Ctx, result: Result) -> None:
        import re

        s = summary_of(ctx)
        assert s["status"] == "failed" and re.search(pattern, s["error"]), s

    return check


def S(name: str, args: tuple, act, code: int, line: str, **kw) -> Case:
    kw.setdefault("status", "failed")
    kw.setdefault("one_line", False)
    kw.setdefault("slow", True)
    return Case(name, "signals", (*LONG, *args), code=code, line=line, act=act, inproc=False, **kw)


def started(ctx: Ctx) -> bool:
    """The record says running and the workers are being started (not training yet).

    The record first: a child of the forkserver is not yet a worker. While the server imports
    torch, `cuda.pathfinder` calls `ctypes.util.find_library`, which starts `ldconfig -p`; until
    it execs, that child has the server's command line and parent, as a worker does. A signal
    sent then came while run.py still composed ("before the run started", exit 3):
    `hup-while-workers-start` failed so once in a clean clone's `make test`."""
    try:
        running = summary_of(ctx).get("status") == "running"
    except (ValueError, OSError):  # no summary yet: the run has not started
        running = False
    return running and bool(workers(ctx)) and not evaluated(ctx)


STEP_CKPT = r"interrupted by {} at step \d+; checkpoint saved: rerun to resume$"
add(
    S(
        "term-while-importing",
        (),
        then(when(importing), send(signal.SIGTERM)),
        3,
        r"^error: stopped by SIGTERM before the run started: nothing was run; rerun the same",
        status=None,
        one_line=True,
        no_dir=True,
        slow=False,
    ),
    S(
        "int-while-importing",
        (),
        then(when(importing), send(signal.SIGINT)),
        130,
        r"^error: interrupted by Ctrl-C before the run started: nothing was run",
        status=None,
        one_line=True,
        no_dir=True,
        slow=False,
    ),
    S(
        "term-while-workers-start",
        (),
        then(when(started), send(signal.SIGTERM)),
        3,
        r"interrupted by SIGTERM (before training started; nothing to save: rerun to start it|"
        r"at step \d+; checkpoint saved: rerun to resume)$",
    ),
    S(
        "hup-while-workers-start",
        (),
        then(when(started), send(signal.SIGHUP)),
        3,
        r"interrupted by SIGHUP (before training started; nothing to save|at step \d+; "
        r"checkpoint saved)",
    ),
    S(
        "term-training",
        (),
        then(when(evaluated), send(signal.SIGTERM)),
        3,
        STEP_CKPT.format("SIGTERM"),
        check=interrupted("SIGTERM"),
    ),
    S(
        "hup-training",
        (),
        then(when(evaluated), send(signal.SIGHUP)),
        3,
        STEP_CKPT.format("SIGHUP"),
        check=interrupted("SIGHUP"),
    ),
    S(
        "usr1-training",
        (),
        then(when(evaluated), send(signal.SIGUSR1)),
        3,
        STEP_CKPT.format("SIGUSR1"),
        check=interrupted("SIGUSR1"),
    ),
    S(
        "usr2-training",
        (),
        then(when(evaluated), send(signal.SIGUSR2)),
        3,
        STEP_CKPT.format("SIGUSR2"),
        check=interrupted("SIGUSR2"),
    ),
    S(
        "simulated-usr1",
        ("checkpoint.simulate_signal_at_step=40",),
        None,
        3,
        r"interrupted by SIGUSR1 \(simulated\) at step 40; checkpoint saved: rerun to resume$",
        check=interrupted("SIGUSR1 (simulated)"),
        slow=False,
    ),
    S(
        "int-no-checkpointing",
        (),
        then(when(evaluated), send(signal.SIGINT)),
        130,
        r"^error: interrupted by Ctrl-C \(no checkpoint: checkpoint_every=0\)$",
        check=no_checkpoint,
    ),
    S(
        "int-with-checkpointing",
        ("checkpoint_every=1",),
        then(when(evaluated), send(signal.SIGINT)),
        3,
        STEP_CKPT.format("SIGINT"),
        check=interrupted("SIGINT"),
    ),
    S(
        "int-twice-after-a-checkpoint",
        # epochs of 256 steps, a stop only at an evaluation (no poll between): the run neither
        # ends nor stops at the first Ctrl-C's checkpoint before the second one is taken
        (
            "checkpoint_every=1",
            "epochs=3",
            "dataset.num_train=16384",
            "checkpoint.poll_steps=100000",
        ),
        then(when(checkpointed), press(signal.SIGINT, 2)),
        130,
        r"^error: interrupted by Ctrl-C twice \(stopped at once\); the checkpoint of step \d+ "
        r"stays: rerun to resume from it$",
        check=recorded_error(r"the checkpoint of step \d+ stays"),
    ),
    S(
        "term-without-on-signal",
        ("checkpoint.on_signal=false",),
        then(when(evaluated), send(signal.SIGTERM)),
        3,
        r"interrupted by SIGTERM; no checkpoint \(checkpoint.on_signal=false\): a rerun starts",
        check=no_checkpoint,
    ),
    S(
        "worker-sigkill",
        (),
        then(when(evaluated), lambda ctx: os.kill(workers(ctx)[-1], signal.SIGKILL)),
        1,
        r"^error: worker 1 \(rank 1\) was killed by SIGKILL$",
    ),
    S(
        "worker-sigstop",
        ("dist_timeout_s=5",),
        then(when(evaluated), lambda ctx: os.kill(workers(ctx)[-1], signal.SIGSTOP)),
        1,
        r"^error: worker 1 \(rank 1\) stopped answering: rank 0 timed out waiting for it",
    ),
    S(
        "rank1-hangs",
        ("dist_timeout_s=5",),
        None,
        1,
        r"^error: worker 1 \(rank 1\) stopped answering: rank 0 timed out waiting for it \(",
        env={"COMMSGD_INJECT_FAULT": "1:40:hang"},
        check=recorded_error(r"worker 1 \(rank 1\) stopped answering"),
    ),
    S(
        "rank0-hangs",
        ("dist_timeout_s=5",),
        None,
        1,
        r"^error: worker 0 \(rank 0\) stopped answering: rank 1 timed out waiting for it",
        env={"COMMSGD_INJECT_FAULT": "0:40:hang"},
    ),
    S(
        "rank1-raises",
        (),
        None,
        1,
        r"^error: worker 1 \(rank 1\) failed: RuntimeError: injected fault at step 40",
        env={"COMMSGD_INJECT_FAULT": "1:40:raise"},
        slow=False,
        traceback=True,  # not a one-line error: a bug's traceback is its report
    ),
    S(
        "rank0-exits",
        (),
        None,
        1,
        r"^error: worker 0 \(rank 0\) exited with 7$",
        env={"COMMSGD_INJECT_FAULT": "0:40:exit"},
        slow=False,
    ),
    S(
        "rank1-killed",
        (),
        None,
        1,
        r"^error: worker 1 \(rank 1\) was killed by SIGKILL$",
        env={"COMMSGD_INJECT_FAULT": "1:40:kill"},
        slow=False,
    ),
    S(
        "term-a-sweep",
        ("-m", "seed=0,1"),
        then(when(evaluated), send(signal.SIGTERM)),
        3,
        STEP_CKPT.format("SIGTERM"),
        status="any",
        check=lambda ctx, r: (
            len([p for p in (ctx.out / "runs").iterdir() if p.name[0] != "."]) == 1
            or pytest.fail("the sweep went on after the stop")
        ),
    ),
)

# --- disk full and I/O errors mid-run (class 3) ----------------------------------------------


def fill_when(condition):
    """Fill the case's small tmpfs once `condition` holds (the run is writing there)."""

    def act(ctx: Ctx) -> None:
        wait_until = when(condition)
        wait_until(ctx)
        with open(ctx.data["mount"] / "fill", "wb") as f:
            try:
                while True:
                    f.write(b"\0" * 65536)
            except OSError:
                pass

    return act


def plain_dir(ctx: Ctx) -> None:
    mount = ctx.tmp / "mnt"
    mount.mkdir()
    ctx.data["mount"] = mount
    ctx.cleanups.append(lambda: subprocess.run(["umount", "-l", str(mount)], capture_output=True))


def read_only_when(condition):
    """Make the case's folder read-only under the running process (a read-only bind mount of
    itself: new files fail with EROFS, as on a disk the kernel remounted read-only)."""

    def act(ctx: Ctx) -> None:
        when(condition)(ctx)
        mount = str(ctx.data["mount"])
        subprocess.run(["mount", "--bind", mount, mount], check=True)
        subprocess.run(["mount", "-o", "remount,bind,ro", mount], check=True)

    return act


def failed_and_read_as_failed(pattern: str):
    def check(ctx: Ctx, result: Result) -> None:
        import re

        from analysis.status import run_status

        (run,) = [p for p in (ctx.data["mount"] / "runs").iterdir() if p.name[0] != "."]
        s = json.loads((run / "summary.json").read_text())
        assert s["status"] == "failed" and re.search(pattern, s["error"]), s
        st = run_status(run, 600)
        assert st["status"] == "failed" and re.search(pattern, st["detail"]), st

    return check


def still_running_read_as_failed(ctx: Ctx, result: Result) -> None:
    """Nothing can be written on a read-only disk, the final summary neither: it still says
    `running`, and analysis.status reads it as failed once its heartbeat is stale."""
    from analysis.status import run_status

    (run,) = [p for p in (ctx.data["mount"] / "runs").iterdir() if p.name[0] != "."]
    assert json.loads((run / "summary.json").read_text())["status"] == "running"
    st = run_status(run, stale_after_s=600, now=time.time() + 3600)
    assert st["status"] == "failed" and "stale" in st["detail"], st


def D(
    name: str, args: tuple, act, line: str, pattern: str, env=None, check=None, setup=None
) -> Case:
    return Case(
        name,
        "disk",
        (*LONG, *args, "out_root={tmp}/mnt"),
        code=1,
        line=line,
        env={"COMMSGD_MIN_FREE_MB": "0", **(env or {})},
        setup=setup or small_tmpfs("3m"),
        act=act,
        check=check or failed_and_read_as_failed(pattern),
        status="any",
        inproc=False,
        out_root=False,
        slow=True,
    )


def in_mount_evaluated(ctx: Ctx) -> bool:
    return any(p.stat().st_size for p in ctx.data["mount"].glob("runs/*/metrics.jsonl"))


def in_mount_checkpointed(ctx: Ctx) -> bool:
    return any(ctx.data["mount"].glob("runs/*/checkpoint/latest.json"))


add(
    D(
        "full-while-training",
        (),
        fill_when(in_mount_evaluated),
        r"^error: disk full writing .*/mnt/runs/[^/]+/(metrics.jsonl|heartbeat.json)$",
        r"disk full writing",
    ),
    D(
        "full-while-checkpointing",
        ("checkpoint_every=1",),
        fill_when(in_mount_checkpointed),
        r"^error: disk full writing .*/mnt/runs/.*(checkpoint/step-\d+/rank\d.pt|latest.json|"
        r"metrics.jsonl)$",
        r"disk full writing",
    ),
    D(
        "read-only-while-training",
        (),
        read_only_when(in_mount_evaluated),
        r"^error: cannot write .*/mnt/runs/.*: Read-only file system$",
        r"Read-only file system",
        check=still_running_read_as_failed,
        setup=plain_dir,
    ),
    Case(
        "full-before-the-run",
        "disk",
        ("out_root={tmp}/mnt",),
        env={"COMMSGD_MIN_FREE_MB": "0"},
        setup=plants(
            small_tmpfs("64k"),
            lambda ctx: (ctx.data["mount"] / "fill").write_bytes(b"\0" * (60 * 1024)),
        ),
        code=1,
        line=r"^error: disk full writing .*/mnt/runs/[^/]+/\S+$",
        out_root=False,
        status="any",
    ),
)

# --- races (class 7) -------------------------------------------------------------------------


def twin(ctx: Ctx) -> None:
    """An identical command started at the same moment as the case's."""
    from tests.cli import REPO, child_env

    cmd = [os.sys.executable, str(REPO / "run.py"), *ctx.overrides(), f"out_root={ctx.out}"]
    env = child_env({"COMMSGD_CATALOGUE_CASE": ctx.mark})
    ctx.data["twin"] = subprocess.Popen(
        cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def one_trained(ctx: Ctx, result: Result) -> None:
    out, err = ctx.data["twin"].communicate(timeout=600)
    codes = sorted([result.code, ctx.data["twin"].returncode])
    said = out + err + result.stdout + result.stderr
    trained = (out + result.stdout).count(": completed  final/test_acc")
    assert trained == 1, said  # exactly one of the two trained
    assert codes in ([0, 0], [0, 2]), said  # the other skipped it, or found it in use
    if codes == [0, 2]:
        assert "is in use by pid" in said, said
    else:
        assert "already completed" in said, said
    s = summary_of(ctx)
    assert s["status"] == "completed"


def run_first(ctx: Ctx) -> None:
    """The case's command, once, to the end."""
    from tests.cli import run_py

    proc = run_py(*ctx.overrides(), f"out_root={ctx.out}", timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    ctx.data["finished"] = snapshot(ctx.run_dir())


def skipped_untouched(ctx: Ctx, result: Result) -> None:
    assert f"skip {ctx.run_dir()}: already completed" in result.stdout, result.stdout
    assert snapshot(ctx.run_dir()) == ctx.data["finished"]


add(
    Case(
        "two-identical-commands",
        "races",
        ("epochs=1",),
        setup=twin,
        code=(0, 2),
        status="completed",
        check=one_trained,
        inproc=False,
        one_line=False,
        line="",
    ),
    Case(
        "locked-directory",
        "races",
        setup=held_lock(b"pid 4242 on elsewhere"),
        line=r"^error: run directory .* is in use by pid 4242 on elsewhere; wait for that run",
        no_dir=False,
    ),
    Case(
        "finished-run-is-skipped-untouched",
        "races",
        ("epochs=1",),
        setup=run_first,
        code=0,
        inproc=False,
        status="completed",
        check=skipped_untouched,
        line="",
    ),
)

# --- the status reader -----------------------------------------------------------------------


def disk_full_record(ctx: Ctx) -> None:
    run = ctx.tmp / "runs" / "r"
    run.mkdir(parents=True)
    (run / "summary.json").write_text(
        json.dumps({"status": "failed", "error": "disk full writing /x/metrics.jsonl"})
    )
    bad = ctx.tmp / "runs" / "bad"
    bad.mkdir()
    (bad / "summary.json").write_bytes(BINARY)
    (bad / "heartbeat.json").write_bytes(BINARY)


def status_lines(ctx: Ctx, result: Result) -> None:
    assert "failed     r    disk full writing /x/metrics.jsonl" in result.stdout, result.stdout
    assert "summary.json is unreadable: not UTF-8 text" in result.stdout, result.stdout
    assert result.stdout.strip().splitlines()[-1] == "2 failed"


add(
    Case(
        "disk-full-and-binary-records",
        "status",
        ("{tmp}/runs", "--check"),
        cmd="status",
        setup=disk_full_record,
        code=1,
        check=status_lines,
        one_line=False,
    ),
    Case(
        "no-such-root",
        "status",
        ("{tmp}/nope",),
        cmd="status",
        line=r"^error: runs root is not a directory: .*/nope$",
    ),
)


# --- the test ---------------------------------------------------------------------------------


def _param(case: Case):
    # e2e: a case with real processes (its command, a twin, a first run); the in-process cases
    # start none (tests/catalogue.py traps the workers' start)
    marks = [] if case.inproc else [pytest.mark.e2e]
    marks += [pytest.mark.slow] if case.slow else []
    return pytest.param(case, id=case.id, marks=marks)


@pytest.mark.parametrize("case", [_param(c) for c in CASES])
def test_catalogue(case: Case, tmp_path: Path, monkeypatch) -> None:
    ctx = Ctx(tmp_path, case)
    (tmp_path / "out").mkdir()
    try:
        if case.setup is not None:
            case.setup(ctx)
        before = snapshot(tmp_path)
        result = run_case(case, ctx, monkeypatch)
        verify(case, ctx, before, result)
    finally:
        for cleanup in reversed(ctx.cleanups):
            cleanup()


def test_the_catalogue_covers_every_class_with_150_cases() -> None:
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids)), [i for i, n in Counter(ids).items() if n > 1]
    counts = Counter(c.cls for c in CASES)
    assert sum(counts.values()) >= 150, counts
    for cls in ("launcher", "output", "disk", "damaged", "values", "signals", "races"):
        assert counts[cls] >= 2, counts
