"""What a forked `python run.py` costs with its workers' forkserver forked (tests/zygote.py) and
exec'd (`COMMSGD_TEST_FORKED_SERVER=0`), side by side: docs/tests.md quotes it.

    python -m tests.zygote_cost [N]      (N pairs, default 5; prints one line per side)

Each side runs N tiny runs (2 local workers, synthetic data, one epoch), A and B interleaved,
each forked from its own zygote; the CPU-seconds are everything the zygote and the commands
started, reaped (this process made a child subreaper) and counted once the zygote is stopped.
"""

from __future__ import annotations

import ctypes
import os
import resource
import sys
import tempfile
import time

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


def side(server: str, pairs: int, out: str) -> tuple[float, float]:
    """(CPU-seconds, wall seconds) of `pairs` runs with COMMSGD_TEST_FORKED_SERVER=`server`,
    the zygote's own start included."""
    from tests import zygote
    from tests.cli import child_env

    cpu, start = _cpu(), time.monotonic()
    for seed in range(pairs):
        env = child_env({"COMMSGD_TEST_FORKED_SERVER": server})
        proc = zygote.run(["run.py", *TINY, f"seed={seed}", f"out_root={out}/{server}"],
                          cwd=zygote.REPO, env=env, capture_output=True, text=True)  # fmt: skip
        if proc.returncode != 0:
            raise SystemExit(f"error: a run failed: {proc.stderr.strip().splitlines()[-1:]}")
    wall = time.monotonic() - start
    time.sleep(1.5)  # the zygote reaps its waiters once a second
    zygote._ZYGOTE.stop()
    zygote._ZYGOTE = None
    _reap()
    return _cpu() - cpu, wall


def main() -> None:
    pairs = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    ctypes.CDLL("libc.so.6").prctl(36, 1)  # PR_SET_CHILD_SUBREAPER: the orphans come here
    totals = {"1": [0.0, 0.0], "0": [0.0, 0.0]}
    with tempfile.TemporaryDirectory() as out:
        for order in (("1", "0"), ("0", "1")):  # A B, then B A
            for server in order:
                cpu, wall = side(server, pairs, out)
                totals[server][0] += cpu
                totals[server][1] += wall
    for server, name in (("1", "server forked"), ("0", "server exec'd")):
        cpu, wall = totals[server]
        print(f"{name}: {2 * pairs} runs, {cpu:.1f} CPU-s, {wall:.1f} s "
              f"({cpu / (2 * pairs):.2f} CPU-s a run, the zygote's start included)")  # fmt: skip


if __name__ == "__main__":
    main()
