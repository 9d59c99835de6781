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
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from tests.catalogue import (
    MODULES,
    Case,
    Ctx,
    Result,
    checkpointed,
    evaluated,
    importing,
    plants,
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


def bad_fault(name: str, value: str, line: str) -> Case:
    """run.py with the fault injection COMMSGD_INJECT_FAULT=<value> malformed: refused with
    `line`."""
    return V(f"fault-{name}", "", line, env={"COMMSGD_INJECT_FAULT": value})


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
    bad_fault(
        "garbage",
        "garbage",
        r"^error: COMMSGD_INJECT_FAULT must be <rank>:<step>:<kind> \(e.g. 1:40:raise\), "
        r"got 'garbage'$",
    ),
    bad_fault(
        "step-text", "0:x:raise", r"^error: COMMSGD_INJECT_FAULT must be <rank>:<step>:<kind>"
    ),
    bad_fault(
        "kind",
        "0:1:boom",
        r"^error: COMMSGD_INJECT_FAULT: kind must be one of raise, exit, kill, hang, got 'boom'$",
    ),
    bad_fault(
        "rank", "5:1:raise", r"^error: COMMSGD_INJECT_FAULT names rank 5, but the run has 2 workers"
    ),
    bad_fault(
        "negative", "-1:1:raise", r"^error: COMMSGD_INJECT_FAULT: rank and step must be >= 0"
    ),
    bad_fault(
        "fields", "1:2:raise:4", r"^error: COMMSGD_INJECT_FAULT must be <rank>:<step>:<kind>"
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
        interpreter=True,
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
        interpreter=True,
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

        from analysis.runs.status import run_status

        (run,) = [p for p in (ctx.data["mount"] / "runs").iterdir() if p.name[0] != "."]
        s = json.loads((run / "summary.json").read_text())
        assert s["status"] == "failed" and re.search(pattern, s["error"]), s
        st = run_status(run, 600)
        assert st["status"] == "failed" and re.search(pattern, st["detail"]), st

    return check


def still_running_read_as_failed(ctx: Ctx, result: Result) -> None:
    """Nothing can be written on a read-only disk, the final summary neither: it still says
    `running`, and analysis.runs.status reads it as failed once its heartbeat is stale."""
    from analysis.runs.status import run_status

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


# --- issue 36: provenance across a resume, flags and keys that cannot act, reports written all
# at once, stops that leave no process behind, refusals before any work, fast validation ----

FIXTURE_RUNS = Path(__file__).parent / "fixtures" / "runs" / "demo"
CLEAN = "1" * 40  # a commit of a clean checkout
DIRTY = "0" * 40 + "-dirty"  # the commit of a checkout with modified tracked files
RESULTS = Path(__file__).parents[1] / "results"


def demo_runs(where: str = "runs", sha: str = "fixture", commits=None, metrics=None):
    """The fixtures' finished demo run (scale smoke) under `<case folder>/<where>`, its summary's
    `git_sha` and `git_commits` as given, its metrics.jsonl replaced by `metrics` when given."""

    def setup(ctx: Ctx) -> None:
        root = ctx.tmp / where
        root.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(FIXTURE_RUNS, root, dirs_exist_ok=True)
        run = sorted(root.iterdir())[0]
        summary = json.loads((run / "summary.json").read_text())
        summary["git_sha"] = sha
        if commits is not None:
            summary["git_commits"] = commits
        (run / "summary.json").write_text(json.dumps(summary))
        if metrics is not None:
            (run / "metrics.jsonl").write_text(metrics)
        ctx.data["results"] = snapshot(RESULTS)

    return setup


def checkout(commit: str):
    """In-process: the checkout's commit is `commit` (a clean or a modified checkout), for the
    report's and the sweep's checks."""

    def patch(monkeypatch, ctx: Ctx) -> None:
        import analysis.reports.report
        import experiments.store.records

        monkeypatch.setattr(analysis.reports.report, "git_commit", lambda repo=None: commit)
        monkeypatch.setattr(experiments.store.records, "git_commit", lambda repo: commit)

    return patch


def nothing_at(*names: str):
    def check(ctx: Ctx, result: Result) -> None:
        for name in names:
            assert not (ctx.tmp / name).exists(), f"{name} was written"
        if "results" in ctx.data:  # the checkout's results/ untouched
            assert snapshot(RESULTS) == ctx.data["results"]

    return check


def previous_report(where: str = "rep"):
    """A previous report in `<case folder>/<where>`: what a failed report must leave."""

    def setup(ctx: Ctx) -> None:
        folder = ctx.tmp / where
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "table.md").write_text("the previous report\n")
        (folder / "test_acc.png").write_bytes(b"previous figure")

    return setup


def previous_or_complete(where: str = "rep"):
    """The report folder is the previous report, or the new one complete (a stop that came
    while it was put in place is taken after): never a part of one."""

    def check(ctx: Ctx, result: Result) -> None:
        folder = ctx.tmp / where
        names = sorted(p.name for p in folder.iterdir())
        if (folder / "table.md").read_text() == "the previous report\n":
            assert names == ["table.md", "test_acc.png"], names
        else:
            assert {"table.md", "table.csv", "runs.jsonl.gz", "test_acc.png"} <= set(names)

    return check


def report_tmp(where: str = "rep"):
    """The report is being written (its folder beside --out exists)."""
    return lambda ctx: any(ctx.tmp.glob(f".{where}.*.tmp"))


def run_records_resumable(ctx: Ctx, result: Result) -> None:
    """Once every process of the command's session ended: every run it left is finished, or
    failed (a rerun of the same command runs it again), from the checkpoint its stop saved
    when it says so; nothing is marked complete that is not, no record says `running`."""
    from tests.catalogue import session_processes

    deadline = time.monotonic() + 15
    while session_processes(ctx.proc.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if "stopped_at" in ctx.data:  # the whole tree ended within 10 s of the stop
        took = time.monotonic() - ctx.data["stopped_at"]
        assert not session_processes(ctx.proc.pid) and took < 10, f"ended {took:.1f} s after"
    for path in ctx.tmp.rglob("runs/*/summary.json"):
        summary = json.loads(path.read_text())
        if summary["status"] in ("completed", "diverged"):
            assert (path.parent / "metrics.jsonl").stat().st_size, path
            continue
        assert summary["status"] == "failed", summary
        if "checkpoint saved" in summary["error"]:
            assert (path.parent / "checkpoint" / "latest.json").is_file(), summary


def sweep_evaluated(ctx: Ctx) -> bool:
    """`make demo`'s sweep trains (a run beside its first, real-process point evaluated)."""
    return sum(1 for p in ctx.tmp.rglob("runs/*/metrics.jsonl") if p.stat().st_size) >= 2


def evaluated_anywhere(ctx: Ctx) -> bool:
    return any(p.stat().st_size for p in ctx.tmp.rglob("runs/*/metrics.jsonl"))


def stopped_run(*args: str):
    """A first run of the case's config, stopped by a simulated SIGUSR1 at step 20 (exit 3):
    a checkpoint to resume from, written on this checkout, then marked as written on a modified
    one (its latest.json's `git_commits`, the summary's `git_sha`), or as written before the
    commits were recorded (`old`)."""
    old = "old" in args

    def setup(ctx: Ctx) -> None:
        from tests.cli import run_py

        first = [*ctx.overrides(), "checkpoint.simulate_signal_at_step=20", f"out_root={ctx.out}"]
        proc = run_py(*first, timeout=600)
        assert proc.returncode == 3, proc.stderr[-2000:]
        run = ctx.run_dir()
        latest = run / "checkpoint" / "latest.json"
        meta = json.loads(latest.read_text())
        ctx.data["step"] = meta["step"]
        if old:
            meta.pop("git_commits")
        else:
            meta["git_commits"] = [{"git_sha": DIRTY, "from_step": 0}]
        latest.write_text(json.dumps(meta))
        summary = json.loads((run / "summary.json").read_text())
        summary["git_sha"] = DIRTY
        if old:
            summary.pop("git_commits")
        (run / "summary.json").write_text(json.dumps(summary))

    return setup


def names_both_commits(ctx: Ctx, result: Result) -> None:
    """The resumed run names the checkpoint's (modified) commit for its first steps and this
    checkout's for the rest, is marked -dirty, and a report that must be clean refuses it."""
    from analysis.reports.report import main as report_main
    from experiments.store.records import git_sha
    from tests.cli import in_process

    summary = summary_of(ctx)
    assert summary["status"] == "completed", summary
    assert summary["git_commits"] == [
        {"git_sha": DIRTY, "from_step": 0},
        {"git_sha": git_sha(), "from_step": ctx.data["step"]},
    ], summary["git_commits"]
    assert summary["git_sha"].endswith("-dirty"), summary["git_sha"]
    runs, out = str(ctx.out / "runs"), str(ctx.tmp / "rep")
    mp = pytest.MonkeyPatch()
    try:
        checkout(CLEAN)(mp, ctx)
        done = in_process(
            lambda: report_main([runs, "--out", out, "--require-clean"]), monkeypatch=mp
        )
    finally:
        mp.undo()
    assert done.returncode == 2 and "made from a modified checkout" in done.stderr, done
    assert not Path(out).exists()


PROVENANCE_REFUSED = (
    r"^error: 1 of the 1 runs made from a modified checkout, in all or part of their steps "
    rf"\({DIRTY}\): rerun them from a commit"
)
add(
    Case(
        "report-refuses-a-run-resumed-on-a-clean-tree",
        "provenance",
        ("{tmp}/runs", "--out", "{tmp}/rep", "--require-clean"),
        cmd="report",
        setup=demo_runs(
            sha=CLEAN,
            commits=[{"git_sha": DIRTY, "from_step": 0}, {"git_sha": CLEAN, "from_step": 24}],
        ),
        patch=checkout(CLEAN),
        line=PROVENANCE_REFUSED,
        check=nothing_at("rep"),
    ),
    Case(
        "preset-report-refuses-a-dirty-middle-segment",
        "provenance",
        ("{tmp}/runs", "--out", "{tmp}/rep", "--require-clean", "--experiment", "demo"),
        cmd="report",
        setup=demo_runs(
            sha=CLEAN,
            commits=[
                {"git_sha": CLEAN, "from_step": 0},
                {"git_sha": DIRTY, "from_step": 8},
                {"git_sha": CLEAN, "from_step": 16},
            ],
        ),
        patch=checkout(CLEAN),
        line=PROVENANCE_REFUSED,
        check=nothing_at("rep"),
    ),
    Case(
        "report-refuses-an-old-record-marked-dirty",
        "provenance",
        ("{tmp}/runs", "--out", "{tmp}/rep", "--require-clean"),
        cmd="report",
        setup=demo_runs(sha=DIRTY),
        patch=checkout(CLEAN),
        line=PROVENANCE_REFUSED,
        check=nothing_at("rep"),
    ),
    Case(
        "publish-refuses-runs-of-a-dirty-segment-before-running",
        "provenance",
        ("demo", "--scale", "smoke", "--cluster", "sim", "--out-root", "{tmp}/out", "--publish"),
        cmd="sweep",
        setup=demo_runs(
            "out/demo/runs",
            sha=CLEAN,
            commits=[{"git_sha": DIRTY, "from_step": 0}, {"git_sha": CLEAN, "from_step": 24}],
        ),
        patch=checkout(CLEAN),
        line=r"^error: --publish: 1 finished run\(s\) of demo at scale smoke in .*/out/demo/runs "
        rf"ran \(in part\) on a modified checkout \({DIRTY}\): rerun them from a commit",
        check=nothing_at("out/demo/sweeps", "out/results"),
    ),
    Case(
        "publish-check-passes-runs-of-clean-segments",
        "provenance",
        ("demo", "--scale", "smoke", "--out-root", "{tmp}/out", "--publish", "--check"),
        cmd="sweep",
        setup=demo_runs(
            "out/demo/runs",
            sha=CLEAN,
            commits=[{"git_sha": CLEAN, "from_step": 0}, {"git_sha": CLEAN, "from_step": 24}],
        ),
        patch=checkout(CLEAN),
        code=0,
        line=r"^check: demo at scale smoke may run \(nothing was run\)$",
        check=nothing_at("out/demo/sweeps", "out/results"),
    ),
    Case(
        "provenance-names-each-commit-of-a-resumed-run",
        "provenance",
        ("demo", "--scale", "smoke", "--no-run", "--out-root", "{tmp}/out"),
        cmd="sweep",
        setup=demo_runs(
            "out/demo/runs",
            sha=CLEAN + "-dirty",
            commits=[{"git_sha": DIRTY, "from_step": 0}, {"git_sha": CLEAN, "from_step": 24}],
        ),
        code=0,
        one_line=False,
        check=lambda ctx, r: (
            re.search(
                rf"^run commits: .*{DIRTY} \(1 runs\).*{CLEAN} \(1 runs\)",
                (ctx.out / "results" / "demo" / "smoke" / "provenance.txt").read_text(),
                re.M,
            )
            or pytest.fail((ctx.out / "results" / "demo" / "smoke" / "provenance.txt").read_text())
        ),
    ),
    Case(
        "resume-after-a-checkpoint-of-a-modified-tree",
        "provenance",
        ("cluster=sim",),
        setup=stopped_run(),
        code=0,
        status="completed",
        inproc=False,
        check=names_both_commits,
    ),
    Case(
        "resume-of-a-checkpoint-without-commits",
        "provenance",
        ("cluster=sim", "seed=1"),
        setup=stopped_run("old"),
        code=0,
        status="completed",
        inproc=False,
        check=names_both_commits,
        slow=True,
    ),
)

# --- flags and keys that cannot act: refused in one line -----------------------------------


def F(name: str, cmd: str, args: str, line: str, **kw) -> Case:
    return Case(name, "flags", tuple(args.split()), cmd=cmd, line=line, **kw)


INERT = r"^error: {} has no effect {} .*\(python -m {} --help\)$"


def inert(flag: str, when: str, cmd: str) -> str:
    """The one line of a flag that has no effect, said by `python -m <MODULES[cmd]>`."""
    return INERT.format(flag, when, re.escape(MODULES[cmd]))


def without_experiment(flag: str, value: str, cmd: str = "report") -> Case:
    """`python -m analysis.<cmd> RUNS --out REP <flag> <value>` (demo runs): <flag> acts only
    with --experiment, so it is refused in one line and nothing is written at REP."""
    return F(
        f"{cmd.replace('_', '-')}-{flag[2:]}-without-experiment",
        cmd,
        f"{{tmp}}/runs --out {{tmp}}/rep {flag} {value}",
        inert(flag, "without --experiment NAME", cmd),
        setup=demo_runs(),
        check=nothing_at("rep"),
    )


add(
    without_experiment("--scale", "smoke"),
    without_experiment("--set", "cluster=sim"),
    without_experiment("--out-root", "{tmp}"),
    without_experiment("--conf", "conf"),
    F(
        "report-unknown-flag-in-one-line",
        "report",
        "{tmp}/runs --out {tmp}/rep --requre-clean",
        r"^error: unrecognized arguments: --requre-clean \(python -m analysis.reports.report "
        r"--help\)$",
        setup=demo_runs(),
    ),
    F(
        "status-scale-without-experiment",
        "status",
        "{tmp} --scale smoke",
        inert("--scale", "without --experiment NAME", "status"),
    ),
    F(
        "status-stale-after-0",
        "status",
        "{tmp} --stale-after 0",
        r"^error: --stale-after must be a number of minutes > 0, got 0",
    ),
    F(
        "recompute-results-with-dirs",
        "recompute",
        "{tmp}/a --results {tmp}",
        inert("--results", "with RESULT_DIRs named", "recompute"),
    ),
    F(
        "verify-results-with-dirs",
        "verify",
        "{tmp}/a --results {tmp}",
        inert("--results", "with RESULT_DIRs named", "verify"),
    ),
    F(
        "verify-points-with-run",
        "verify",
        "--run x --points all",
        inert("--points", "with --run", "verify"),
    ),
    without_experiment("--set", "cluster=sim", "wandb_report"),
    F(
        "tune-preset-cluster-without-a-run",
        "tune_preset",
        "losp --no-run --cluster local",
        inert("--cluster", "with --no-run", "tune_preset"),
    ),
    F(
        "tune-preset-overrides-without-a-run",
        "tune_preset",
        "losp --no-run tau=2",
        inert("key=value overrides", "with --no-run", "tune_preset"),
    ),
    F(
        "sweep-jobs-0",
        "sweep",
        "demo --jobs 0 --out-root {tmp}/out",
        r"^error: --jobs must be a whole number >= 1, got 0$",
    ),
    F(
        "sweep-unknown-flag-in-one-line",
        "sweep",
        "demo --pubish",
        r"^error: unrecognized arguments: --pubish \(python -m experiments.sweep --help\)$",
    ),
    F(
        "run-resolve-without-cfg",
        "run",
        "--resolve",
        r"^error: --resolve has no effect here: it resolves what --cfg shows",
    ),
    F(
        "run-package-without-cfg",
        "run",
        "--package algorithm",
        r"^error: --package has no effect here: it picks the package --cfg or --info shows",
    ),
)


def K(name: str, args: str, line: str, **kw) -> Case:
    return Case(name, "keys", tuple(args.split()), line=line, **kw)


add(
    K(
        "factor-without-slow-workers",
        "timing=virtual compute.factor=4",
        r"^error: compute.factor applies to compute.slowdown=one_slow or half_slow only "
        r"\(compute.slowdown=none\)$",
    ),
    K(
        "sigma-without-lognormal",
        "timing=virtual compute.slowdown=one_slow compute.sigma=1",
        r"^error: compute.sigma applies to compute.slowdown=lognormal or lognormal_steps only",
    ),
    K(
        "straggler-factor-without-stragglers",
        "timing=virtual compute.straggler_factor=3",
        r"^error: compute.straggler_factor applies only with compute.straggler_prob > 0",
    ),
    K(
        "algo-time-on-the-real-clock",
        "compute.algo_time_s=0.01",
        r"^error: compute.algo_time_s applies to timing=virtual only",
    ),
    K(
        "step-time-on-the-real-clock",
        "compute.step_time_s=0.01",
        r"^error: compute.step_time_s has no effect on the real clock \(timing=real\) without "
        r"emulate_compute=true",
    ),
    K(
        "network-on-the-real-clock",
        "network=wan",
        r"^error: network=wan has no effect on the real clock \(timing=real\) without "
        r"emulate_network=true",
    ),
    K(
        "latency-on-the-real-clock",
        "network.latency_s=0.001",
        r"^error: network.latency_s has no effect on the real clock",
    ),
    K(
        "ps-servers-without-ps",
        "cluster=sim network.ps_servers=4",
        r"^error: network.ps_servers applies to network.topology=ps only \(this network's "
        r"topology is allreduce\)$",
    ),
    K(
        "poll-steps-without-checkpointing",
        "checkpoint.on_signal=false checkpoint.poll_steps=5",
        r"^error: checkpoint.poll_steps has no effect with checkpointing off",
    ),
    K(
        "simulated-signal-without-checkpointing",
        "checkpoint.on_signal=false checkpoint.simulate_signal_at_step=5",
        r"^error: checkpoint.simulate_signal_at_step has no effect with checkpointing off",
    ),
    K(
        "lockstep-seeds-on-worker-processes",
        "cluster.lockstep_seeds=4",
        r"^error: cluster.lockstep_seeds applies to in-process workers \(cluster=sim\) only: "
        r"cluster=local runs each seed alone$",
    ),
    K(
        "batched-on-worker-processes",
        "cluster.batched=false",
        r"^error: cluster.batched applies to in-process workers \(cluster=sim\) only",
    ),
    K(
        "decay-points-without-decay",
        "lr_decay=1 lr_decay_at=[0.5]",
        r"^error: lr_decay_at has no effect with lr_decay=1",
    ),
    K(
        "decay-without-decay-points",
        "lr_decay=0.5 lr_decay_at=[]",
        r"^error: lr_decay has no effect with lr_decay_at=\[\]",
    ),
    K(
        "inert-key-of-a-sweep-point",
        "-m tau=1,2 compute.factor=3",
        r"compute.factor applies to compute.slowdown=one_slow or half_slow only",
        one_line=False,
    ),
)

# --- reports written all at once (a full disk, a bad --out, a signal) ----------------------


def savefig_disk_full(monkeypatch, ctx: Ctx) -> None:
    """Every figure write fails as on a full disk (ENOSPC), after the table was written."""
    import errno

    import matplotlib.figure

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", full)


def replaced_whole(ctx: Ctx, result: Result) -> None:
    names = sorted(p.name for p in (ctx.tmp / "rep").iterdir())
    assert "claims.md" not in names and "table.md" in names, names  # the stale file is gone
    assert (ctx.tmp / "rep" / "table.md").read_text() != "the previous report\n"


def spec_kept(ctx: Ctx, result: Result) -> None:
    assert (ctx.tmp / "rep" / "wandb_report.json").read_text() == "{}"
    assert (ctx.tmp / "rep" / "table.md").read_text() != "the previous report\n"


def others_kept(ctx: Ctx, result: Result) -> None:
    assert (ctx.tmp / "rep" / "notes" / "mine.txt").read_text() == "mine"
    assert (ctx.tmp / "rep" / "table.md").read_text() != "the previous report\n"


REPORT = ("{tmp}/runs", "--out", "{tmp}/rep")


def R(name: str, args: tuple[str, ...] = REPORT, **kw) -> Case:
    return Case(name, "reports", args, cmd="report", **kw)


def over_previous(name: str, check: Callable, *plants_: Callable) -> Case:
    """A report written over a previous one in the same --out folder, with what `plants_` put
    there beside it: it succeeds, and `check` says what became of them."""
    return R(
        name,
        setup=plants(demo_runs(), previous_report(), *plants_),
        code=0,
        one_line=False,
        check=check,
    )


add(
    R(
        "out-is-a-file",
        setup=plants(demo_runs(), lambda ctx: (ctx.tmp / "rep").write_text("a file")),
        line=r"^error: --out .*/rep is a file, not a folder: name a folder for the report$",
    ),
    R(
        "out-cannot-be-made",
        ("{tmp}/runs", "--out", "/proc/none/rep"),
        setup=demo_runs(),
        line=r"^error: cannot write the report into /proc/none/rep: ",
    ),
    R(
        "disk-full-writing-a-figure",
        setup=plants(demo_runs(), previous_report()),
        patch=savefig_disk_full,
        line=r"^error: disk full writing the report: the previous report in .*/rep is unchanged$",
    ),
    R(
        "disk-full-writing-a-preset-report",
        (*REPORT, "--experiment", "demo"),
        setup=demo_runs(),
        patch=savefig_disk_full,
        line=r"^error: disk full writing the report: nothing written$",
        check=nothing_at("rep"),
    ),
    R(
        "disk-full-on-a-small-disk",
        ("{tmp}/runs", "--out", "{tmp}/mnt/rep"),
        setup=plants(demo_runs(), small_tmpfs("48k")),
        line=r"^error: disk full writing the report: nothing written$",
        check=nothing_at("mnt/rep"),
    ),
    R(
        "ctrl-c-while-writing",
        setup=plants(demo_runs(), previous_report()),
        act=then(when(report_tmp()), send(signal.SIGINT)),
        inproc=False,
        code=130,
        line=r"^error: interrupted by Ctrl-C",
        one_line=True,
        check=previous_or_complete(),
    ),
    R(
        "term-while-writing",
        setup=plants(demo_runs(), previous_report()),
        code=143,
        act=then(when(report_tmp()), send(signal.SIGTERM)),
        inproc=False,
        line=r"^error: stopped by SIGTERM",
        check=previous_or_complete(),
    ),
    R(
        "term-before-the-report-started",
        setup=plants(demo_runs(), previous_report()),
        code=143,
        act=then(when(importing), send(signal.SIGTERM)),
        inproc=False,
        line=r"^error: stopped by SIGTERM before the report started: nothing written$",
    ),
    over_previous(
        "a-previous-report-is-replaced-whole",
        replaced_whole,
        lambda ctx: (ctx.tmp / "rep" / "claims.md").write_text("stale"),
    ),
    over_previous(
        "a-w-and-b-spec-beside-the-report-is-kept",
        spec_kept,
        lambda ctx: (ctx.tmp / "rep" / "wandb_report.json").write_text("{}"),
    ),
    over_previous(
        "a-folder-with-other-files-keeps-them",
        others_kept,
        lambda ctx: (ctx.tmp / "rep" / "notes").mkdir(),
        lambda ctx: (ctx.tmp / "rep" / "notes" / "mine.txt").write_text("mine"),
    ),
)

# --- stops of make, the sweep driver and run.py: the whole process tree ends -----------------

SIGTERM = signal.SIGTERM
SWEEP_STOPPED = r"^error: the sweep of demo {} while its {}: finished runs are kept, no report "
# two points of the demo's grid (fewer to compose and check), each long enough to be stopped
SIM_SWEEP = (
    "demo", "--scale", "smoke", "--cluster", "sim", "--out-root", "{tmp}/out",
    "algorithm=local_sgd", "seed=0,1", "epochs=40",
)  # fmt: skip


def stop_when(condition, sig: int):
    """Once `condition` holds, `sig` to the command (its time noted: the tree must end within
    10 s of it)."""

    def act(ctx: Ctx) -> None:
        when(condition)(ctx)
        ctx.data["stopped_at"] = time.monotonic()
        ctx.proc.send_signal(sig)

    return act


def T(name: str, args: tuple, act, code, line: str, **kw) -> Case:
    kw.setdefault("check", run_records_resumable)
    kw.setdefault("cmd", "sweep")
    return Case(
        name, "stops", args, act=act, code=code, line=line, inproc=False, session=True,
        one_line=False, finishes=True, **kw,
    )  # fmt: skip


add(
    T(
        "term-the-sweep-driver-with-worker-processes",
        (
            "demo",
            "--scale",
            "smoke",
            "--cluster",
            "local",
            "--out-root",
            "{tmp}/out",
            "algorithm=local_sgd",
            "seed=0",
            "epochs=40",
        ),  # fmt: skip
        stop_when(evaluated_anywhere, signal.SIGTERM),
        3,
        SWEEP_STOPPED.format("stopped by SIGTERM", "runs ran"),
        slow=True,
    ),
    T(
        "term-the-sweep-driver",
        SIM_SWEEP,
        stop_when(evaluated_anywhere, signal.SIGTERM),
        3,
        SWEEP_STOPPED.format("stopped by SIGTERM", "runs ran"),
    ),
    T(
        "ctrl-c-to-the-sweep-driver",
        SIM_SWEEP,
        stop_when(evaluated_anywhere, signal.SIGINT),
        130,
        SWEEP_STOPPED.format("interrupted by Ctrl-C", "runs ran"),
        slow=True,
    ),
    T(
        "kill-the-sweep-driver",
        SIM_SWEEP,
        stop_when(evaluated_anywhere, signal.SIGKILL),
        -signal.SIGKILL,
        "",
    ),
    T(
        "term-the-sweep-driver-during-its-report",
        ("demo", "--scale", "smoke", "--no-run", "--out-root", "{tmp}/out"),
        then(when(lambda ctx: any(ctx.out.glob("results/demo/.smoke.*.tmp"))), send(SIGTERM)),
        3,
        SWEEP_STOPPED.format("stopped by SIGTERM", "report was written"),
        setup=demo_runs("out/demo/runs"),
        check=lambda ctx, r: (
            not (ctx.out / "results" / "demo" / "smoke").exists()
            or (ctx.out / "results" / "demo" / "smoke" / "runs.jsonl.gz").is_file()
            or pytest.fail("a part of a report")
        ),
    ),
    T(
        "term-make-demo-while-its-sweep-runs",
        ("demo", "SCALE=smoke", "OUT={tmp}/out"),
        stop_when(sweep_evaluated, signal.SIGTERM),
        (-signal.SIGTERM, 2),
        "",
        cmd="make",
        slow=True,
    ),
)

# --- refusals that need no work, before any work --------------------------------------------


def checks_first(target: str, *checked: str):
    """`make -n <target> PUBLISH=1`: the sweep's --check of each preset comes before the first
    command that works (a run, a sweep)."""

    def check(ctx: Ctx, result: Result) -> None:
        lines = [
            line for line in result.stdout.splitlines() if "python" in line and "#" not in line[:2]
        ]
        first_work = next(i for i, line in enumerate(lines) if "--check" not in line)
        checks = [line for line in lines[:first_work] if "experiments.sweep" in line]
        for preset in checked:  # "<preset>" at any scale, "<preset>@<scale>" at that one
            name, _, scale = preset.partition("@")
            assert any(
                f"--publish {name} --check" in line and f"--scale {scale or ''}" in line
                for line in checks
            ), (preset, lines)

    return check


add(
    Case(
        "make-demo-checks-publish-first",
        "order",
        ("-n", "demo", "PUBLISH=1", "SCALE=smoke", "OUT={tmp}/out"),
        cmd="make",
        code=0,
        inproc=False,
        one_line=False,
        check=checks_first("demo", "demo"),
    ),
    Case(
        "make-report-checks-every-preset-first",
        "order",
        ("-n", "report", "PUBLISH=1", "OUT={tmp}/out"),
        cmd="make",
        code=0,
        inproc=False,
        one_line=False,
        check=checks_first(
            "report",
            "controls@fmnist",
            "controls@cpu",
            "table1@cpu",
            "table1@fmnist",
            "table2@cpu",
            "table2@fmnist",
            "fig4",
            "fig4@fmnist",
            "fig5",
            "fig5@fmnist",
            "low_comm",
            "low_comm@fmnist",
            "losp@fmnist",
            "pseudo_sync",
        ),
    ),
    Case(
        "make-figures-checks-both-first",
        "order",
        ("-n", "figures", "PUBLISH=1", "OUT={tmp}/out"),
        cmd="make",
        code=0,
        inproc=False,
        one_line=False,
        check=checks_first("figures", "fig4", "fig5"),
    ),
    Case(
        "publish-check-on-a-modified-checkout",
        "order",
        ("demo", "--scale", "smoke", "--out-root", "{tmp}/out", "--publish", "--check"),
        cmd="sweep",
        patch=checkout(DIRTY),
        line=r"^error: --publish \(PUBLISH=1\) needs a clean checkout",
        check=nothing_at("out/demo", "out/results"),
    ),
    Case(
        "publish-on-a-modified-checkout-before-any-run",
        "order",
        ("demo", "--scale", "smoke", "--cluster", "sim", "--out-root", "{tmp}/out", "--publish"),
        cmd="sweep",
        patch=checkout(DIRTY),
        line=r"^error: --publish \(PUBLISH=1\) needs a clean checkout",
        check=nothing_at("out/demo", "out/results"),
    ),
    Case(
        "results-folder-is-a-file",
        "order",
        (
            "demo",
            "--scale",
            "smoke",
            "--cluster",
            "sim",
            "--out-root",
            "{tmp}/out",
            "--results",
            "{tmp}/res",
        ),  # fmt: skip
        cmd="sweep",
        setup=lambda ctx: (
            (ctx.tmp / "res" / "demo").mkdir(parents=True),
            (ctx.tmp / "res" / "demo" / "smoke").write_text("x"),
        ),
        line=r"^error: the report's folder .*/res/demo/smoke is a file: move it away",
        check=nothing_at("out/demo"),
    ),
    Case(
        "results-folder-cannot-be-written",
        "order",
        (
            "demo",
            "--scale",
            "smoke",
            "--cluster",
            "sim",
            "--out-root",
            "{tmp}/out",
            "--results",
            "/proc/none",
        ),  # fmt: skip
        cmd="sweep",
        line=r"^error: the report's folder /proc/none/demo/smoke cannot be written \(/proc: ",
        check=nothing_at("out/demo"),
    ),
    Case(
        "check-alone-runs-nothing",
        "order",
        ("demo", "--scale", "smoke", "--out-root", "{tmp}/out", "--check"),
        cmd="sweep",
        code=0,
        line=r"^check: demo at scale smoke may run \(nothing was run\)$",
        check=nothing_at("out/demo"),
    ),
)

# --- the torch-free checks of every kind of key (tests/test_torch_free.py times them) --------

add(
    V("sim-bad-algorithm-knob", "cluster=sim algorithm=easgd algorithm.alpha=2", r"alpha must"),
    V("sim-bad-network", "cluster=sim network.latency_s=-1", r"network.latency_s must be >= 0"),
    V("sim-bad-dataset", "cluster=sim dataset.num_train=0", r"dataset.num_train must be an"),
    V("sim-bad-device", "cluster=sim cluster.device=tpu", r"cluster.device must be auto, cpu"),
    V("local-bad-device", "cluster.device=tpu", r"^error: cluster.device must be one of auto"),
    V("workers-per-gpu-0", "cluster.workers_per_gpu=0", r"cluster.workers_per_gpu must be an"),
    V("slurm-timeout-0", "cluster=slurm cluster.timeout_min=0", r"cluster.timeout_min must be"),
    V("slurm-gpus-neg", "cluster=slurm cluster.gpus_per_node=-1", r"cluster.gpus_per_node must"),
    V("scale-table-workers-0", "scale.table_workers=0", r"scale.table_workers must be an"),
    V("scale-noniid-2", "scale.noniid_fraction=2", r"scale.noniid_fraction must be in"),
    V("scale-table-seeds-abc", "scale.table_seeds=abc", r"scale.table_seeds must be seeds"),
    V("bucket-neg", "algorithm.bucket_mb=-1", r"^error: algorithm.bucket_mb must be a number >="),
    V("slowdown-of-words", "timing=virtual compute.slowdown=[a,b]", r"compute.slowdown must be"),
    V("cifar-loader-workers-neg", "dataset=cifar10 dataset.num_workers=-1", r"num_workers must"),
    V("partition-seed-neg", "partition.seed=-1", r"^error: partition.seed must be an integer"),
    V("width-0-under-slurm", "cluster=slurm model.width=0", r"model.width must be an integer"),
    V(
        "fashion-mnist-missing-under-sim",
        "cluster=sim dataset=fashion_mnist dataset.root={tmp}/nowhere dataset.source={tmp}/none",
        r"^error: Fashion-MNIST not found in .*/nowhere/FashionMNIST/raw",
    ),
    Case(
        "full-under-sim",
        "output",
        ("cluster=sim", "out_root={tmp}/mnt"),
        setup=small_tmpfs("1m"),
        line=r"^error: output directory .*/mnt/runs is full: \S+ MB free, a run needs at least",
        out_root=False,
    ),
)

# --- records read at face value: an empty metrics file, a run outside out_root ----------------


def outside_noted(ctx: Ctx, result: Result) -> None:
    said = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert len(said) == 1 and re.match(
        r"warning: hydra.run.dir puts this run in .*/elsewhere/r, outside .*/out/runs ", said[0]
    ), result.stderr
    summary = json.loads((ctx.tmp / "elsewhere" / "r" / "summary.json").read_text())
    assert summary["status"] == "completed"


add(
    Case(
        "zero-byte-metrics-is-not-a-complete-run",
        "records",
        ("{tmp}/runs", "--check"),
        cmd="status",
        setup=demo_runs(metrics=""),
        code=1,
        one_line=False,
        check=lambda ctx, r: (
            "completed, but its metrics.jsonl is empty" in r.stdout or pytest.fail(r.stdout)
        ),
    ),
    Case(
        "zero-byte-metrics-left-out-of-a-report",
        "records",
        ("{tmp}/runs", "{tmp}/more", "--out", "{tmp}/rep"),
        cmd="report",
        setup=plants(demo_runs(), demo_runs("more", metrics="")),
        code=0,
        one_line=False,
        check=lambda ctx, r: (
            re.search(
                r"^warning: .*/more/.*: completed, but its metrics.jsonl is empty: run "
                r"skipped$",
                r.stderr,
                re.M,
            )  # fmt: skip
            or pytest.fail(r.stderr)
        ),
    ),
    Case(
        "run-dir-outside-out-root-is-said",
        "records",
        ("hydra.run.dir={tmp}/elsewhere/r", "epochs=1"),
        code=0,
        inproc=False,
        one_line=False,
        status="any",
        check=outside_noted,
    ),
)


# --- issue 50: the results tools (their cases in a module each) -------------------------------

from tests import catalogue_pages, catalogue_recompute, catalogue_tuning, catalogue_verify  # noqa: E402

for _module in (catalogue_recompute, catalogue_verify, catalogue_pages, catalogue_tuning):
    add(*_module.CASES)


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
    # issue 36's classes, each with several variants
    for cls in ("provenance", "flags", "keys", "reports", "stops", "order", "records"):
        assert counts[cls] >= 3, counts
    # issue 50's: every results command in every class it can meet, several variants each
    results = ("out", "checks", "stops", "atomic", "inputs", "bad-input")
    for cls in results:
        assert counts[f"results-{cls}"] >= 3, counts
    commands = Counter((c.cmd, c.cls) for c in CASES if c.cls.startswith("results-"))
    for cmd in ("recompute", "verify", "verdict_page", "report", "tune_preset"):
        for cls in ("out", "stops", "bad-input"):
            assert commands[cmd, f"results-{cls}"] >= 1, (cmd, cls, commands)


# --- every flag of every command: it acts, or is refused where it cannot (issue 36) -----------

ACTS = "acts"
#: each command's flags (argparse's, by their first long name; positionals by their dest): ACTS,
#: or the catalogue case that shows it refused where it cannot act
FLAG_ROLES: dict[str, dict[str, str]] = {
    "analysis.reports.report": {
        "--help": ACTS,
        "roots": ACTS,
        "--out": ACTS,
        "--name": ACTS,
        "--experiment": ACTS,
        "--scale": "flags:report-scale-without-experiment",
        "--set": "flags:report-set-without-experiment",
        "--out-root": "flags:report-out-root-without-experiment",
        "--require-clean": "provenance:report-refuses-a-run-resumed-on-a-clean-tree",
        "--conf": "flags:report-conf-without-experiment",
    },
    "analysis.runs.status": {
        "--help": ACTS,
        "root": ACTS,
        "--experiment": ACTS,
        "--scale": "flags:status-scale-without-experiment",
        "--stale-after": "flags:status-stale-after-0",
        "--check": ACTS,
    },
    "analysis.reproduce.recompute": {
        "--help": ACTS,
        "dirs": ACTS,
        "--results": "flags:recompute-results-with-dirs",
        "--out": ACTS,
        "--update": ACTS,
    },
    "analysis.reproduce.verify": {
        "--help": ACTS,
        "dirs": ACTS,
        "--results": "flags:verify-results-with-dirs",
        "--points": "flags:verify-points-with-run",
        "--run": ACTS,
        "--out": ACTS,
    },
    "analysis.reports.wandb_report": {
        "--help": ACTS,
        "roots": ACTS,
        "--out": ACTS,
        "--experiment": ACTS,
        "--scale": ACTS,  # filters the runs by scale.name on its own
        "--set": "flags:wandb-report-set-without-experiment",
        "--conf": ACTS,  # where a preset found among the runs is composed from
        "--mode": ACTS,
        "--entity": ACTS,  # written into the report's spec offline too
        "--project": ACTS,
    },
    "analysis.tuning.tune_preset": {
        "--help": ACTS,
        "preset": ACTS,
        "--scale": ACTS,
        "--cluster": "flags:tune-preset-cluster-without-a-run",
        "--out-root": ACTS,
        "--out": ACTS,
        "--no-run": ACTS,
        "overrides": "flags:tune-preset-overrides-without-a-run",
    },
    "experiments.sweep": {
        "--help": ACTS,
        "experiment": ACTS,
        "--scale": ACTS,
        "--cluster": ACTS,  # with --no-run too: the report composes the grid with it
        "--out-root": ACTS,
        "--results": "driver:publish-and-results",
        "--publish": "provenance:publish-refuses-runs-of-a-dirty-segment-before-running",
        "--no-run": ACTS,
        "--check": "order:check-alone-runs-nothing",
        "--jobs": "flags:sweep-jobs-0",
        "overrides": ACTS,  # with --no-run too: the report's --set
    },
    "analysis.reports.verdict_page": {"--help": ACTS, "--results": ACTS, "--out": ACTS},
    # listed only (another change owns analysis.tuning.tune): each of its flags acts
    "analysis.tuning.tune": {
        "--help": ACTS,
        "roots": ACTS,
        "--scale": ACTS,
        "--out": ACTS,
        "--command": ACTS,
    },
    "run.py": {
        "--help": ACTS,
        "--hydra-help": ACTS,
        "--version": ACTS,
        "overrides": ACTS,
        "--cfg": ACTS,
        "--resolve": "flags:run-resolve-without-cfg",
        "--package": "flags:run-package-without-cfg",
        "--run": ACTS,
        "--multirun": ACTS,
        "--shell-completion": ACTS,
        "--config-path": ACTS,
        "--config-name": ACTS,
        "--config-dir": ACTS,
        "--experimental-rerun": ACTS,
        "--info": ACTS,
    },
}


class _Captured(Exception):
    def __init__(self, parser):
        super().__init__("captured")
        self.parser = parser


def command_parser(name: str, monkeypatch):
    """The argparse parser of command `name`, as its main() builds it (stopped at parsing)."""
    import argparse
    import importlib

    if name == "run.py":
        from hydra._internal.utils import get_args_parser

        return get_args_parser()

    def capture(self, *args, **kwargs):
        raise _Captured(self)

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", capture)
    monkeypatch.setattr(argparse.ArgumentParser, "parse_intermixed_args", capture)
    try:
        importlib.import_module(name).main([])
    except _Captured as captured:
        return captured.parser
    finally:
        monkeypatch.undo()
    raise AssertionError(f"{name}: main() parsed no arguments")


def flag_names(parser) -> list[str]:
    """Each action's first long option (`--out`), else its first option, else its dest."""
    names = []
    for action in parser._actions:
        options = [o for o in action.option_strings if o.startswith("--")] or action.option_strings
        names.append(options[0] if options else action.dest)
    return names


@pytest.mark.parametrize("name", sorted(FLAG_ROLES))
def test_every_flag_of_every_command_acts_or_is_refused_where_it_cannot(name, monkeypatch):
    """Each command's flags are all in FLAG_ROLES (a new flag gets its line), and each one that
    acts only with another names the catalogue case that refuses it without."""
    flags = flag_names(command_parser(name, monkeypatch))
    assert sorted(flags) == sorted(FLAG_ROLES[name]), f"{name}: declare each flag's role"
    ids = {c.id for c in CASES}
    for flag, role in FLAG_ROLES[name].items():
        assert role == ACTS or role in ids, f"{name} {flag}: no case {role}"


def test_every_key_that_acts_only_with_another_is_refused_without_it():
    """Each entry of the pre-flight's DEPENDENT_KEYS has a `keys` case of the catalogue."""
    from experiments.preflight import DEPENDENT_KEYS

    shown = " ".join(" ".join(c.args) for c in CASES if c.cls == "keys")
    for key, _, _ in DEPENDENT_KEYS:
        assert re.search(rf"(^| ){re.escape(key)}[.=]", shown), f"no keys case sets {key}"
