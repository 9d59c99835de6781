"""The C allocator's settings (experiments/workers/allocator.py): set where a process starts,
inherited by the processes it starts, left alone where the user chose, and without effect on
what a run computes."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from experiments.workers import allocator
from tests.cli import REPO, child_env, run_dir_of

# In a fresh process: configure, allocate and free 64 MiB, report what glibc's malloc says
# (mallinfo2: hblks = the blocks it serves with mmap, here: the new ones; arena = the heap it
# keeps).
PROBE = """
import ctypes, json, os
from experiments.workers.allocator import configure

class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd",
        "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]

libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = MallInfo2
libc.malloc.restype, libc.free.argtypes = ctypes.c_void_p, [ctypes.c_void_p]
applied = configure()
before = libc.mallinfo2()
block = libc.malloc(64 << 20)
during = libc.mallinfo2()
libc.free(block)
after = libc.mallinfo2()
env = {k: v for k, v in os.environ.items() if k.startswith("MALLOC_")}
mmapped = during.hblks - before.hblks
print(json.dumps({"applied": applied, "mmapped": mmapped, "kept": after.arena, "env": env}))
"""

glibc_only = pytest.mark.skipif(allocator._glibc() is None, reason="the C library is not glibc")


def probe(**env: str) -> dict:
    clean = {k: v for k, v in child_env().items() if not k.startswith("MALLOC_")}
    clean.pop(allocator.OFF, None)
    done = subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=REPO,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@glibc_only
def test_a_large_block_comes_from_the_kept_heap_not_a_mapping():
    ours = probe()
    assert ours["applied"] is True
    assert ours["mmapped"] == 0 and ours["kept"] >= 64 << 20  # freed, and still the process's
    assert ours["env"] == {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(1 << 30)}
    default = probe(**{allocator.OFF: "default"})
    assert default["applied"] is False and default["mmapped"] == 1 and default["env"] == {}


@glibc_only
def test_the_processes_it_starts_inherit_the_settings():
    # the child of a configured process finds the variables set by its parent: in force from
    # glibc's start, nothing left to do
    inherited = probe(MALLOC_MMAP_MAX_="0", MALLOC_TRIM_THRESHOLD_=str(1 << 30))
    assert inherited["applied"] is True and inherited["mmapped"] == 0


def test_a_users_own_malloc_setting_is_left_alone():
    theirs = probe(MALLOC_MMAP_THRESHOLD_="65536")
    assert theirs["applied"] is False
    assert theirs["env"] == {"MALLOC_MMAP_THRESHOLD_": "65536"}
    assert theirs["mmapped"] == 1


@pytest.mark.e2e
def test_a_run_computes_the_same_numbers_either_way(tmp_path):
    """The same run (seeds in lock-step, the allocation-heavy path) with the settings and with
    glibc's defaults: the same metrics, row by row."""
    args = [
        "dataset=synthetic",
        "dataset.num_train=256",
        "model=tiny_cnn",
        "workers=2",
        "epochs=2",
        "cluster=sim",
        "seed=0,1",
        "wandb.mode=disabled",
        "progress=false",
    ]
    rows = {}
    for side, env in (("ours", {}), ("default", {allocator.OFF: "default"})):
        out = tmp_path / side
        clean = {k: v for k, v in child_env(env).items() if not k.startswith("MALLOC_")}
        done = subprocess.run(
            [sys.executable, "run.py", "-m", *args, f"out_root={out}"],
            cwd=REPO,
            env=clean,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, done.stderr
        rows[side] = []
        for seed in (0, 1):
            run = run_dir_of(out, *[a for a in args if not a.startswith("seed")], f"seed={seed}")
            for line in (run / "metrics.jsonl").read_text().splitlines():
                row = json.loads(line)
                rows[side].append(
                    {k: v for k, v in row.items() if not k.startswith(("time/", "compute/"))}
                )
    assert rows["ours"] and rows["ours"] == rows["default"]
