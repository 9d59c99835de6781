"""What a command forked from the tests' zygote costs with its children forked too (its workers'
forkserver, the Python commands it starts: tests/zygote.py) and exec'd
(`COMMSGD_TEST_FORK_CHILDREN=0`), side by side: docs/tests.md quotes it.

    python -m tests.zygote_cost [--workload tiny|quick-bench] [N]

`tiny` (default N 3): N tiny `python run.py` of 2 local workers per side; `quick-bench` (default
N 1): N `python -m benchmarks --quick --smoke` (what tests/test_bench.py runs; its own `python
run.py` commands are the children). The sides are interleaved (A B, then B A), each forked from
a zygote of its own; the CPU-seconds are everything the zygote and the commands started, reaped
(this process made a child subreaper) and counted once the zygote is stopped.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import resource
import tempfile
import time

from tests import zygote

TINY = ["scale=smoke", "dataset=synthetic", "dataset.num_train=64", "dataset.num_test=64",
        "epochs=1", "timing=virtual", "workers=2", "cluster=local"]  # fmt: skip


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _reap() -> None:
    while True:
        try:
            if os.waitpid(-1, 0)[0] == 0:
                return
        except ChildProcessError:
            return


def _argv(workload: str, i: int, out: str) -> list[str]:
    if workload == "tiny":
        return ["run.py", *TINY, f"seed={i}", f"out_root={out}"]
    return ["-m", "benchmarks", "--quick", "--smoke", "--out", f"{out}/{i}/RESULTS-quick.md"]


def side(workload: str, children: str, n: int, out: str) -> tuple[float, float]:
    """(CPU-seconds, wall seconds) of `n` commands with COMMSGD_TEST_FORK_CHILDREN=`children`,
    the zygote's own start included."""
    from tests.cli import child_env

    cpu, start = _cpu(), time.monotonic()
    for i in range(n):
        env = child_env({zygote.FORK_CHILDREN: children})
        argv = _argv(workload, i, f"{out}/{children}")
        proc = zygote.run(argv, cwd=zygote.REPO, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"error: {argv[:3]} failed: {proc.stderr.strip()[-2000:]}")
    wall = time.monotonic() - start
    time.sleep(1.5)  # the zygote reaps its waiters once a second
    zygote._ZYGOTE.stop()
    zygote._ZYGOTE = None
    _reap()
    return _cpu() - cpu, wall


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.zygote_cost")
    parser.add_argument("--workload", choices=("tiny", "quick-bench"), default="tiny")
    parser.add_argument("n", type=int, nargs="?")
    args = parser.parse_args()
    n = args.n or (3 if args.workload == "tiny" else 1)
    ctypes.CDLL("libc.so.6").prctl(36, 1)  # PR_SET_CHILD_SUBREAPER: the orphans come here
    from experiments.workers.allocator import configure

    configure()  # as tests/conftest.py: the zygote and the commands start with its settings
    totals = {"1": [0.0, 0.0], "0": [0.0, 0.0]}
    with tempfile.TemporaryDirectory() as out:
        for order in (("1", "0"), ("0", "1")):  # A B, then B A
            for children in order:
                cpu, wall = side(args.workload, children, n, out)
                totals[children][0] += cpu
                totals[children][1] += wall
    for children, name in (("1", "children forked"), ("0", "children exec'd")):
        cpu, wall = totals[children]
        print(f"{args.workload}, {name}: {2 * n} commands, {cpu:.1f} CPU-s, {wall:.1f} s "
              f"({cpu / (2 * n):.2f} CPU-s each, the zygote's start included)")  # fmt: skip


if __name__ == "__main__":
    main()
