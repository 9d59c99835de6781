"""`python -m benchmarks.gpu_check [--out benchmarks/GPU-CHECK.md] [--budget-s 480]`
(`make gpu-check`): every CUDA code path a one-GPU machine can reach, in one prepared script.

Checks, in order (each with its own time limit, all within the budget; one that fails does not
stop the others):

1. placement: experiments/workers/dist.py `place` on this machine's GPUs (one GPU per worker
   with NCCL, k workers per GPU with gloo on CUDA tensors) and run.py's one-line refusal of
   more workers than GPUs, before any worker starts;
2. ledger on CUDA events (algorithms/comm.py): 2 gloo processes on CUDA tensors and one NCCL
   rank: a blocking average behind queued compute (exposed = the stall, not the queue), a
   non-blocking one under compute (hidden > 0), against the host timer the ledger used before;
3. the clocks on the GPU: `timing=virtual compute.step_time_s=measured` (device time of a step,
   experiments/training/calibrate.py) and `timing=real` with 2 workers on one GPU: the ledger
   adds up;
4. every registry algorithm for a few steps: 2 worker processes sharing the GPU (gloo on CUDA
   tensors) and 4 in-process workers on it (`cluster=sim`);
5. dtypes: the suite offers float32 and float64 (no mixed precision); float64 on the GPU;
6. `python -m benchmarks --device cuda --smoke` (the benchmarks' CUDA code path).

It writes a short Markdown report of what ran and what it measured (--out). On a machine
without a CUDA device it says so in one line and exits 0, writing nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

NO_DEVICE = "GPU check not run: no CUDA device on this machine (torch.cuda.is_available() is False)"
SMOKE = ["scale=smoke", "dataset=synthetic", "epochs=1", "eval_every=1"]


@dataclass
class Check:
    name: str
    status: str = "not run"  # ok | FAILED | skipped (budget)
    seconds: float = 0.0
    measured: list[str] = field(default_factory=list)
    error: str = ""


class Partly(Exception):
    """A check some of whose parts failed: `measured` holds every part's line, passed or not."""

    def __init__(self, measured: list[str]):
        super().__init__("; ".join(line for line in measured if "FAILED" in line))
        self.measured = measured


class Budget:
    def __init__(self, seconds: float):
        self.end = time.perf_counter() + seconds

    def left(self) -> float:
        return self.end - time.perf_counter()

    def timeout(self, wanted: float) -> float:
        return max(1.0, min(wanted, self.left()))


# --- 1. placement ------------------------------------------------------------------------------


def check_placement(budget: Budget) -> list[str]:
    import torch

    from benchmarks import harness as h
    from experiments.errors import UserError
    from experiments.workers.dist import place

    gpus = torch.cuda.device_count()
    out = []
    p = place("auto", 0, 1, bound=False)
    assert (p.backend, p.device, p.gpu) == ("nccl", "cuda", 0), p
    out.append(f"1 worker, auto: {p.backend} on cuda:{p.gpu}")
    shared = [place("auto", r, 2 * gpus, workers_per_gpu=2, bound=False) for r in range(2 * gpus)]
    assert all(q.backend == "gloo" and q.gpu == r // 2 for r, q in enumerate(shared)), shared
    out.append(f"{2 * gpus} workers, workers_per_gpu=2: gloo, GPUs {[q.gpu for q in shared]}")
    try:
        place("auto", 0, gpus + 1, bound=False)
        raise AssertionError("more workers than GPUs was accepted")
    except UserError as e:
        out.append(f"{gpus + 1} workers, one GPU each: refused ({e})")
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "run.py", *h.QUIET, *SMOKE, f"workers={gpus + 1}", f"out_root={tmp}"]
        try:
            h.run_command(cmd, timeout=budget.timeout(120))
            raise AssertionError("run.py started more NCCL workers than GPUs")
        except RuntimeError as e:
            text = str(e)
            assert "exit 2" in text and "error:" in text, text[-2000:]
            assert not (Path(tmp) / "runs").exists() or not any((Path(tmp) / "runs").iterdir())
            line = next(ln for ln in text.splitlines() if ln.startswith("error:"))
            out.append(f"run.py workers={gpus + 1}: exit 2 before any worker, `{line[:120]}`")
    return out


# --- 2. the ledger on CUDA events ----------------------------------------------------------------


def _queue_compute(n: int = 150, size: int = 4096):
    """Queue `n` matmuls on the current stream (no host wait); return (start, end) events."""
    import torch

    a = torch.randn(size, size, device="cuda")
    b = torch.randn(size, size, device="cuda") / size**0.5
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(n):
        a = a @ b
    end.record()
    return start, end, a


def _ledger_worker(rank: int, m: int, backend: str, port: int, out_dir: str) -> None:
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    from algorithms.comm import Comm
    from algorithms.group import TorchGroup
    from experiments.training.clock import Compute, Network, RealClock

    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    torch.cuda.set_device(0)
    dist.init_process_group(backend, rank=rank, world_size=m, timeout=timedelta(seconds=120))
    try:
        group = TorchGroup(None)
        if m == 1:  # NCCL on one GPU: one rank; the Comm is told of 2 so that it communicates
            group.world_size = 2
        clock = RealClock(rank, Network(), Compute(None, (1.0,) * max(m, 2)))
        comm = Comm(group=group, clock=clock)
        payload = [torch.ones(2 << 20, device="cuda")]  # 8 MB
        comm.mean_(payload)  # warm-up (NCCL communicators, gloo buffers)
        torch.cuda.synchronize()
        comm.settle()
        result = {}
        for mode in ("blocking", "async"):
            before_exposed, before_hidden = comm.ledger.exposed_s, comm.ledger.hidden_s
            start, end, _ = _queue_compute()
            host0 = time.perf_counter()
            if mode == "blocking":
                comm.mean_(payload)
                host_wait = time.perf_counter() - host0
            else:
                pending = comm.mean_async(payload)
                s2, e2, _ = _queue_compute()  # compute under the collective
                pending.wait()
                host_wait = time.perf_counter() - host0
            torch.cuda.synchronize()
            comm.settle()
            result[mode] = {
                "queued_compute_s": start.elapsed_time(end) / 1e3,
                "exposed_s": comm.ledger.exposed_s - before_exposed,
                "hidden_s": comm.ledger.hidden_s - before_hidden,
                "host_wait_s": host_wait,
            }
        # what the ledger measured before (a host timer around a synchronising wait)
        start, end, _ = _queue_compute()
        t0 = time.perf_counter()
        work = dist.all_reduce(payload[0], async_op=True)
        work.wait()
        torch.cuda.current_stream().synchronize()
        result["host_timer_s"] = time.perf_counter() - t0
        result["host_timer_queued_s"] = start.elapsed_time(end) / 1e3
        (Path(out_dir) / f"{rank}.json").write_text(json.dumps(result))
        dist.barrier()
    finally:
        dist.destroy_process_group()
    os._exit(0)


def _ledger_run(m: int, backend: str, budget: Budget) -> dict:
    import torch.multiprocessing as mp

    from experiments.workers.dist import free_port

    with tempfile.TemporaryDirectory() as tmp:
        ctx = mp.start_processes(
            _ledger_worker,
            args=(m, backend, free_port(), tmp),
            nprocs=m,
            join=False,
            start_method="spawn",
        )
        deadline = time.perf_counter() + budget.timeout(180)
        while not ctx.join(timeout=1):
            if time.perf_counter() > deadline:
                for p in ctx.processes:
                    p.kill()
                raise TimeoutError(f"ledger check ({backend}) did not finish")
        return json.loads((Path(tmp) / "0.json").read_text())


def check_ledger(budget: Budget) -> list[str]:
    out = []
    for m, backend in ((2, "gloo"), (1, "nccl")):
        r = _ledger_run(m, backend, budget)
        b, a = r["blocking"], r["async"]
        label = "gloo, 2 processes on CUDA tensors" if backend == "gloo" else "NCCL, 1 rank"
        out.append(
            f"{label}: blocking average behind {b['queued_compute_s'] * 1e3:.0f} ms of queued "
            f"compute: exposed {b['exposed_s'] * 1e3:.1f} ms (events); the old host timer "
            f"around a synchronising wait: {r['host_timer_s'] * 1e3:.0f} ms"
        )
        out.append(
            f"{label}: non-blocking average under compute: hidden {a['hidden_s'] * 1e3:.1f} ms, "
            f"exposed {a['exposed_s'] * 1e3:.1f} ms"
        )
        # finding 1: the queued compute is not in the exposed time (the old timer had it)
        assert b["exposed_s"] < 0.5 * b["queued_compute_s"], r
        if backend == "gloo":  # (one NCCL rank's all-reduce is a local no-op: ~0 to hide)
            assert a["hidden_s"] > 0, r
    return out


# --- 3. the clocks on the GPU ------------------------------------------------------------------


def check_clocks(budget: Budget) -> list[str]:
    from benchmarks import harness as h

    out = []
    (run,) = h.suite(
        [*SMOKE, "workers=1", "cluster.device=cuda", "timing=virtual",
         "compute.step_time_s=measured", "compute.algo_time_s=measured"],
        timeout=budget.timeout(150),
    )  # fmt: skip
    s = run.summary
    parts = s["time/compute_s"] + s["time/algo_s"] + s["time/comm_exposed_s"]
    assert abs(parts - s["time/train_s"]) <= 1e-9 * s["time/train_s"], s
    out.append(
        f"timing=virtual, measured step on the device: compute/step_time_s "
        f"{s['compute/step_time_s'] * 1e3:.2f} ms; ledger exact"
    )
    (run,) = h.suite(
        [*SMOKE, "workers=2", "cluster.device=cuda", "cluster.workers_per_gpu=2",
         "timing=real", "algorithm=sync_sgd", "epochs=2"],
        timeout=budget.timeout(150),
    )  # fmt: skip
    s = run.summary
    parts = s["time/compute_s"] + s["time/algo_s"] + s["time/comm_exposed_s"] + s["time/data_s"]
    gap = abs(s["time/train_s"] - parts) / s["time/train_s"]
    out.append(
        f"timing=real, sync_sgd, 2 workers on one GPU (gloo): train {s['time/train_s']:.2f} s, "
        f"compute {s['time/compute_s']:.2f} + algo {s['time/algo_s']:.2f} + exposed "
        f"{s['time/comm_exposed_s']:.2f} + data {s['time/data_s']:.2f} (gap {gap:.1%}, "
        f"target <= 2%); hidden {s['time/comm_hidden_s']:.3f} s"
    )
    assert gap <= 0.02, s
    return out


# --- 4. every algorithm ------------------------------------------------------------------------


def check_algorithms(budget: Budget) -> list[str]:
    import algorithms
    from benchmarks import harness as h

    names = list(algorithms.REGISTRY)
    out = []
    for label, overrides in (
        ("2 processes, gloo on CUDA tensors", ["workers=2", "cluster.device=cuda",
                                               "cluster.workers_per_gpu=2"]),
        ("4 in-process workers (cluster=sim) on the GPU", ["cluster=sim", "workers=4",
                                                           "cluster.device=cuda"]),
    ):  # fmt: skip
        t0 = time.perf_counter()
        try:  # one part's failure must not hide whether the other passed
            runs = h.suite(
                [*SMOKE, *overrides, f"algorithm={','.join(names)}"],
                multirun=True,
                timeout=budget.timeout(300),
            )
        except RuntimeError as e:
            out.append(f"{label}: FAILED: {str(e).strip().splitlines()[-1][:200]}")
            continue
        done = sorted(r.config["algorithm"]["name"] for r in runs)
        assert done == sorted(names), (done, names)
        out.append(
            f"{label}: all {len(names)} algorithms completed ({time.perf_counter() - t0:.0f} s)"
        )
    if any("FAILED" in line for line in out):
        raise Partly(out)
    return out


def check_dtypes(budget: Budget) -> list[str]:
    from benchmarks import harness as h
    from experiments.worker import DTYPES

    (run,) = h.suite(
        [*SMOKE, "cluster=sim", "workers=2", "cluster.device=cuda", "dtype=float64"],
        timeout=budget.timeout(120),
    )
    return [
        f"dtype=float64 on the GPU: {run.summary['status']}; mixed precision: not offered by "
        f"the suite (dtype: {' | '.join(DTYPES)})"
    ]


def check_bench(budget: Budget) -> list[str]:
    from benchmarks import harness as h

    with tempfile.TemporaryDirectory() as tmp:
        out_md = Path(tmp) / "RESULTS-gpu-smoke.md"
        cmd = [sys.executable, "-m", "benchmarks", "--device", "cuda", "--smoke", "--out",
               str(out_md)]  # fmt: skip
        try:
            h.run_command(cmd, timeout=budget.timeout(300))
        except RuntimeError:
            if not out_md.with_suffix(".json").exists():
                raise
        figures = json.loads(out_md.with_suffix(".json").read_text())
    n = sum(len(sec["figures"]) for sec in figures["sections"].values())
    out = [f"python -m benchmarks --device cuda --smoke: {len(figures['sections'])} families, "
           f"{n} figures"]  # fmt: skip
    failed = figures.get("errors") or {}
    out += [f"{name}: FAILED: {err.strip().splitlines()[-1][:200]}" for name, err in failed.items()]
    if failed:
        raise Partly(out)
    return out


CHECKS: list[tuple[str, Callable[[Budget], list[str]]]] = [
    ("placement", check_placement),
    ("ledger on CUDA events", check_ledger),
    ("clocks on the GPU", check_clocks),
    ("every algorithm", check_algorithms),
    ("dtypes", check_dtypes),
    ("benchmarks --device cuda --smoke", check_bench),
]


def report(checks: list[Check], meta: dict, total_s: float) -> str:
    lines = ["# GPU check (`make gpu-check`)", ""]
    lines += ["| | |", "|---|---|"]
    lines += [f"| {k} | {str(v).replace('|', '/')} |" for k, v in meta.items()]
    lines += [f"| duration | {total_s:.0f} s |", ""]
    lines += ["| check | status | s | measured |", "|---|---|---|---|"]
    for c in checks:
        if c.measured:
            what = "<br>".join(c.measured)
        else:
            what = c.error.strip().splitlines()[-1][:200] if c.error else ""
        lines.append(f"| {c.name} | {c.status} | {c.seconds:.0f} | {what.replace('|', '/')} |")
    for c in checks:
        if c.error:
            lines += ["", f"## {c.name}: failed", "", "```", c.error[-3000:], "```"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gpu_check", description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/GPU-CHECK.md"))
    parser.add_argument("--budget-s", type=float, default=480.0, help="all checks together")
    args = parser.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print(NO_DEVICE)
        return 0
    from benchmarks import harness as h

    start = time.perf_counter()
    budget = Budget(args.budget_s)
    checks = []
    for name, fn in CHECKS:
        check = Check(name)
        checks.append(check)
        if budget.left() < 10:
            check.status = "skipped (budget)"
            continue
        t0 = time.perf_counter()
        print(f"[gpu-check] {name} ...", file=sys.stderr, flush=True)
        try:
            check.measured = fn(budget)
            check.status = "ok"
        except Partly as e:
            check.measured, check.status = e.measured, "FAILED"
            check.error = traceback.format_exc()
            print(check.error, file=sys.stderr, flush=True)
        except Exception:
            check.status = "FAILED"
            check.error = traceback.format_exc()
            print(check.error, file=sys.stderr, flush=True)
        check.seconds = time.perf_counter() - t0
        print(f"[gpu-check] {name}: {check.status}", file=sys.stderr, flush=True)
    text = report(checks, h.machine(), time.perf_counter() - start)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(text)
    print(f"written: {args.out}", file=sys.stderr)
    return 0 if all(c.status == "ok" for c in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
