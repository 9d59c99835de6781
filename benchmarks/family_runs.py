"""Benchmark families 7 to 9 (benchmarks/families.py), whole runs from the outside: workers in
one process (sim), the Makefile's workflows end to end (workflows), and the one-line refusal
of bad input without torch (bad_input)."""

from __future__ import annotations

import time
from pathlib import Path

from benchmarks import harness as h
from benchmarks.section import (
    Context,
    Figure,
    Section,
    Settings,
    _fmt_ratio,
)

# ---------------------------------------------------------------------------------------------
# 7. workers in one process


#: A run that is all fixed cost: 2 workers, 1 step each, one evaluation on 64 samples.
TINY_RUN = [
    "scale=smoke",
    "dataset=synthetic",
    "dataset.num_train=64",
    "dataset.num_test=64",
    "epochs=1",
    "timing=virtual",
    "compute.step_time_s=0.01",
]
#: How worker processes were started before issue 16 (experiments/workers/startup.py): a fresh
#: interpreter per worker, torch._dynamo imported by the first optimizer step.
BEFORE = {"COMMSGD_START_METHOD": "spawn", "COMMSGD_EAGER_DYNAMO": "0"}


def _wall_of_run(overrides: list[str], env: dict | None = None) -> float:
    """Seconds from starting `python run.py OVERRIDES` to its exit (a fresh out_root)."""
    return _timed_run(overrides, env)[0]


def _timed_run(overrides: list[str], env: dict | None = None) -> tuple[float, dict]:
    """`_wall_of_run`, and the summary of its seed-0 run ({} when there is none)."""
    import json
    import sys
    import tempfile

    with tempfile.TemporaryDirectory(prefix="bench-start-") as out:
        cmd = [sys.executable, "run.py", *h.QUIET, *overrides, f"out_root={out}"]
        t0 = time.perf_counter()
        h.run_command(cmd, timeout=600, env=env)
        wall = time.perf_counter() - t0
        first = sorted(Path(out, "runs").glob("*-seed0-*/summary.json"))
        return wall, json.loads(first[0].read_text()) if first else {}


def sim(s: Settings, ctx: Context) -> Section:
    sec = Section(
        "sim",
        "7. Workers in one process",
        "Fixed cost of a run: seconds from starting `python run.py` to its exit, for a run "
        "that is nothing but fixed cost (smoke scale, 2 workers, one step each, one evaluation "
        "of 64 samples, W&B off): `cluster=sim` (threads of one process), `cluster=local` "
        "(worker processes forked from a forkserver with torch and the suite preloaded, "
        "torch._dynamo kept out of the optimizer path: experiments/workers/startup.py) and the "
        "same processes started as before issue 16 (`COMMSGD_START_METHOD=spawn "
        "COMMSGD_EAGER_DYNAMO=0`: a fresh interpreter per worker), interleaved, medians. "
        "Throughput: m workers of the cpu-scale model (ResNet-18 width 8, batch 32 each, "
        "synthetic 1x8x8 data, local_sgd without syncs) with `cluster=sim` (a thread per worker; "
        "and with `cluster.batched=true`: their forward and backward passes as one pass of the "
        "replicas grouped as one model, their SGD steps as one update, "
        "experiments/workers/batched.py), against one worker "
        "training the global batch of m x 32 as one model (`cluster=sim workers=1`: the same "
        "process, all cores for its intra-op threads); samples per second from the wall-clock "
        "between metrics rows watched from outside (the virtual clock's times are modeled), "
        "epoch 1 left out, interleaved, ratio of medians. Mechanisms: the same step measured "
        "in one process for one model, the m replicas one after the other, in m threads, and "
        "batched with vmap (`benchmarks/sim.py`, the numbers behind experiments/workers/sim.py's "
        "design note).",
        ["figure", "workload", "measured", "contrast", "ratio", "per rep", "target"],
    )
    reps = 1 if s.smoke else 3
    # On a GPU machine the 2 worker processes share its first GPU (gloo on CUDA tensors): one
    # GPU per worker would refuse a one-GPU machine, as `make gpu-check` found.
    local = ["cluster=local"]
    if s.device == "cuda":
        local += ["cluster.device=cuda", "cluster.workers_per_gpu=2"]
    walls: dict[str, list[float]] = {"sim": [], "local": [], "before": []}
    for _ in range(reps):
        if not s.smoke:  # smoke mode: the two ways of today only
            walls["before"].append(_wall_of_run([*TINY_RUN, *local], BEFORE))
        walls["local"].append(_wall_of_run([*TINY_RUN, *local]))
        walls["sim"].append(_wall_of_run([*TINY_RUN, "cluster=sim", f"cluster.device={s.device}"]))
    before = h.median(walls["before"] or walls["local"])
    for key, label, target, limit in (
        ("sim", "fixed cost of a run, in-process (s)", "<= 2", 2.0),
        ("local", "fixed cost of a run, multi-process (s)", "<= 5", 5.0),
    ):
        value = h.median(walls[key])
        sec.rows.append(
            [
                label,
                "smoke, 2 workers, 1 step",
                f"{value:.2f} s",
                f"{before:.2f} s before",
                _fmt_ratio(value / before),
                ", ".join(f"{w:.2f}" for w in walls[key]),
                target,
            ]
        )
        sec.figures.append(Figure(label, value, target, limit))
        sec.figures.append(Figure(f"{label.split(' (')[0]} / before issue 16", value / before))

    sizes = [2] if s.smoke else [4, 16]
    for m, batched in [(m, b) for m in sizes for b in (False, True)]:
        ratio, per_rep, sim_sps, one_sps = _throughput(s, m, batched)
        target, limit = {4: (">= 0.8", 0.8), 16: (">= 0.6", 0.6)}.get(m, ("", None))
        name = f"throughput, {m} workers in one process / one model on the global batch"
        if batched:
            name += " (cluster.batched=true)"
        sec.rows.append(
            [
                name,
                f"resnet18 width {8 if not s.smoke else 'tiny'}, batch 32 x {m}",
                f"{sim_sps:.0f} samples/s",
                f"{one_sps:.0f} samples/s",
                _fmt_ratio(ratio),
                ", ".join(_fmt_ratio(x) for x in per_rep),
                target,
            ]
        )
        sec.figures.append(Figure(name, ratio, target, limit, at_least=True))
    if s.device == "cpu":
        from benchmarks import sim as mech

        for m in sizes:
            r = mech.measure(m, width=8, batch=32, reps=2 if s.smoke else 10)
            sec.rows.append(
                [
                    f"mechanisms, {m} replicas (prototype)",
                    "resnet18 width 8, batch 32 each",
                    ", ".join(f"{k} {v:.1f} ms" for k, v in r["ms"].items()),
                    "",
                    ", ".join(f"{k} {v:.2f}" for k, v in r["ratio"].items() if k != "one"),
                    "",
                    "",
                ]
            )
            for side in ("threads", "vmap"):
                label = f"mechanisms, {m} replicas: {side} / one model"
                sec.figures.append(Figure(label, r["ratio"][side]))
        sec.rows.append(
            [
                "GPU: 16 workers of ResNet-18 width 64 (batch 128 each) in one process / one "
                "model on batch 16 x 128; a paper-scale table1 epoch",
                "--device cuda",
                "pending",
                "",
                "",
                "",
                ">= 0.6; < 60 s",
            ]
        )
        sec.notes.append(
            "GPU rows: pending here (no GPU). `python -m benchmarks --device cuda --only sim` "
            "measures them: the throughput of 16 workers of the paper-scale ResNet-18 (width "
            "64, batch 128 each, 3x32x32 synthetic data) in one process on one GPU against one "
            "model on batch 2048, and the wall-clock of one epoch of table1 at the paper scale "
            "(16 workers, 50,000 CIFAR-sized synthetic samples, overlap_local_sgd, tau = 2)."
        )
    else:
        ratio, per_rep, sim_sps, one_sps = _throughput(s, 16, batched=True)
        name = (
            "GPU: 16 workers in one process (cluster.batched=true) / one model on the global batch"
        )
        sec.rows.append(
            [
                name,
                "resnet18 width 64, batch 128 x 16, one GPU",
                f"{sim_sps:.0f} samples/s",
                f"{one_sps:.0f} samples/s",
                _fmt_ratio(ratio),
                ", ".join(_fmt_ratio(x) for x in per_rep),
                ">= 0.6",
            ]
        )
        sec.figures.append(Figure(name, ratio, ">= 0.6", 0.6, at_least=True))
        epoch_s = _paper_epoch_s(s)
        sec.rows.append(
            [
                "GPU: one epoch of table1 at the paper scale (s)",
                "16 workers, 50,000 samples, overlap_local_sgd tau=2",
                f"{epoch_s:.1f} s",
                "",
                "",
                "",
                "< 60",
            ]
        )
        sec.figures.append(Figure("GPU: paper-scale table1 epoch (s)", epoch_s, "< 60", 60.0))
    return sec


def _throughput(
    s: Settings, m: int, batched: bool = False
) -> tuple[float, list[float], float, float]:
    """(median ratio of samples/s, per-rep ratios, samples/s in-process, of one model) for m
    workers in one process (`batched`: cluster.batched=true, experiments/workers/batched.py)
    against one model on the global batch (see `sim`)."""
    steps_per_epoch = 2 if s.smoke else 12
    if s.device == "cuda":
        batch, model = 128, ["model=resnet18", "model.width=64"]
        data = ["dataset=synthetic", "dataset.channels=3", "dataset.image_size=32"]
        cluster = ["cluster=sim", "cluster.device=cuda"]
    else:
        batch = 32
        model = ["model=tiny_cnn"] if s.smoke else ["model=resnet18", "model.width=8"]
        data = ["dataset=synthetic", "dataset.channels=1", "dataset.image_size=8"]
        cluster = ["cluster=sim"]
    common = [
        *cluster,
        *data,
        *model,
        f"dataset.num_train={m * batch * steps_per_epoch}",
        "dataset.num_test=64",
        "algorithm=local_sgd",
        "tau=100000",  # no sync: the compute of m replicas against one model's
        f"epochs={2 if s.smoke else 4}",
        "eval_every=1",
        "timing=virtual",
        "compute.step_time_s=0.01",
    ]
    ratios, sim_sps, one_sps = [], [], []
    for _ in range(1 if s.smoke else s.reps):
        (many,) = h.suite(
            [
                *common,
                f"workers={m}",
                f"batch_size={batch}",
                f"cluster.batched={str(batched).lower()}",
            ],
            watch=True,
        )
        (one,) = h.suite([*common, "workers=1", f"batch_size={m * batch}"], watch=True)
        a = m * batch / h.median(many.epoch_wall_step_s())
        b = m * batch / h.median(one.epoch_wall_step_s())
        sim_sps.append(a)
        one_sps.append(b)
        ratios.append(a / b)
    return h.median(sim_sps) / h.median(one_sps), ratios, h.median(sim_sps), h.median(one_sps)


def _paper_epoch_s(s: Settings) -> float:
    """Wall-clock seconds of one epoch of table1 at the paper scale, in one process on the GPU
    (CIFAR-sized synthetic data: the GPU machine may not hold CIFAR-10)."""
    (run,) = h.suite(
        [
            "experiment=table1",
            "scale=paper",
            "cluster=sim",
            "cluster.device=cuda",
            "dataset=synthetic",
            "dataset.channels=3",
            "dataset.image_size=32",
            "dataset.num_train=50000",
            "dataset.num_test=10000",
            "algorithm=overlap_local_sgd",
            "tau=2",
            "epochs=3",
            "eval_every=1",
            "cluster.batched=true",
        ],
        watch=True,
    )
    steps = h.median(run.epoch_wall_step_s())  # seconds per step, epochs 2 and 3
    return steps * (run.rows[1]["step"] - run.rows[0]["step"])


# ---------------------------------------------------------------------------------------------
# 8. workflows


def workflows(s: Settings, ctx: Context) -> Section:
    sec = Section(
        "workflows",
        "8. The demo and a table, end to end",
        "Wall-clock of the commands a user types, after set-up, into a temporary OUT and "
        "RESULTS: `make demo` (one real multi-process run, then the comparison with its workers "
        "in one process) and `make table1 SCALE=cpu CLUSTER=sim` (the 60 runs of Table 1 at the "
        "cpu scale's `scale.table_workers`, then the report). In smoke mode a reduced version "
        "of each (not a measurement).",
        ["command", "measured", "target"],
    )
    import shutil
    import sys
    import tempfile

    make = shutil.which("make")
    commands = [
        ("make demo (s)", ["demo"], "<= 60", 60.0),
        ("make table1 SCALE=cpu CLUSTER=sim (s)", ["table1", "SCALE=cpu", "CLUSTER=sim"],
         "<= 300", 300.0),
    ]  # fmt: skip
    for name, args, target, limit in commands[:1] if s.smoke else commands:
        with tempfile.TemporaryDirectory(prefix="bench-make-") as tmp:
            # STAMP= : the set-up is done (the running interpreter is the suite's)
            cmd = [make, "-s", *args, "STAMP=", f"PY={sys.executable}", f"OUT={tmp}/out",
                   f"RESULTS={tmp}/results"]  # fmt: skip
            if s.smoke:
                cmd = _smoke_workflow(args[0], tmp)
            t0 = time.perf_counter()
            h.run_command(cmd, timeout=3600)
            wall = time.perf_counter() - t0
        sec.rows.append([("smoke: " if s.smoke else "") + name, f"{wall:.0f} s", target])
        sec.figures.append(Figure(name, wall, target, limit))
    return sec


def _smoke_workflow(what: str, tmp: str) -> list[str]:
    """A few runs of the same commands' path (smoke mode)."""
    import sys

    preset = "demo" if what == "demo" else "table1"
    return [sys.executable, "-m", "experiments.sweep", preset, "--scale", "smoke", "--cluster",
            "sim", "--out-root", f"{tmp}/out", "--results", f"{tmp}/results", "seed=0",
            "algorithm=overlap_local_sgd", "tau=2", "epochs=1"]  # fmt: skip


def bad_input(s: Settings, ctx: Context) -> Section:
    sec = Section(
        "bad_input",
        "9. Bad input",
        "Seconds from starting `python run.py ARGS` to its exit with code 2 and its one-line "
        "error, output read through pipes as a script reads it, median of 5 (issue 26: "
        "composing the config and the pre-flight's checks import no torch; "
        "tests/test_torch_free.py checks the imports). Absolute seconds: on a shared machine "
        "they include the neighbours.",
        ["command", "median", "per rep", "target"],
    )
    import statistics
    import subprocess
    import sys
    import tempfile

    for args in (["algorithm=nope"], ["tau=0"]):
        walls = []
        with tempfile.TemporaryDirectory(prefix="bench-bad-input-") as out:
            for _ in range(5):
                cmd = [sys.executable, "run.py", *args, f"out_root={out}"]
                t0 = time.perf_counter()
                proc = subprocess.run(cmd, cwd=h.REPO, env=h.child_env(), capture_output=True)
                walls.append(time.perf_counter() - t0)
                if proc.returncode != 2 or len(proc.stderr.splitlines()) != 1:
                    raise RuntimeError(f"{' '.join(cmd)}: exit {proc.returncode}: {proc.stderr}")
        name = f"python run.py {' '.join(args)} (s)"
        median = statistics.median(walls)
        sec.rows.append([name, f"{median:.2f} s", " ".join(f"{w:.2f}" for w in walls), "< 1"])
        interval = h.bootstrap_interval(walls, statistics.median)
        sec.figures.append(Figure(name, median, "< 1", 1.0, interval=interval, reps=len(walls)))
    return sec
