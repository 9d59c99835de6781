"""SLURM as a cluster user runs it (issue 15 item 7), without a SLURM: the two SLURM paths make
the same run for the same configuration, and the Makefile passes the job's shape on."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from experiments.config.identity import run_name
from tests.test_config import composed

REPO = Path(__file__).resolve().parents[1]
POINT = ("experiment=table1", "scale=paper", "algorithm=overlap_local_sgd", "tau=2")


def sbatch_overrides(nodes: int, ntasks: int) -> list[str]:
    """The overrides slurm/train.sbatch puts before the user's on its srun line, expanded by
    bash with SLURM's variables as a job of `nodes` x `ntasks / nodes` tasks sees them."""
    script = (REPO / "slurm" / "train.sbatch").read_text()
    (line,) = re.findall(r'run\.py (.*?) "\$@"', script.replace("\\\n", " "))
    env = {**os.environ, "SLURM_NNODES": str(nodes), "SLURM_NTASKS": str(ntasks)}
    out = subprocess.run(
        ["bash", "-c", f"printf '%s\\n' {line}"], env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def test_sbatch_and_the_launcher_make_the_same_run_for_the_same_point():
    """docs/cluster.md's `sbatch -N 2 --ntasks-per-node=8 ... train.sbatch experiment=table1
    scale=paper ...` and `python run.py -m ... cluster=slurm cluster.nodes=2
    cluster.gpus_per_node=8` with the same point: one identity, one run directory."""
    added = sbatch_overrides(nodes=2, ntasks=16)
    assert added == ["cluster=slurm", "cluster.nodes=2", "cluster.tasks_per_node=8", "workers=16"]
    via_sbatch = composed(*added, *POINT)
    via_launcher = composed(*POINT, "cluster=slurm", "cluster.nodes=2", "cluster.gpus_per_node=8")
    laptop = composed(*POINT)  # and the same point started by run.py on one machine
    assert via_sbatch["workers"] == via_launcher["workers"] == 16
    assert run_name(via_sbatch) == run_name(via_launcher) == run_name(laptop)


def test_a_different_task_count_is_a_different_run_and_refused_before_training():
    from experiments.errors import UserError
    from experiments.preflight import check_world_size

    added = sbatch_overrides(nodes=1, ntasks=8)
    assert run_name(composed(*added, *POINT)) != run_name(composed(*POINT))
    with pytest.raises(UserError, match="the launcher started 8 workers but workers=16"):
        check_world_size(16, 8)


def test_every_slurm_example_in_the_docs_runs_the_papers_setting():
    """Every `sbatch ... train.sbatch` and `run.py ... cluster=slurm` command of the docs says
    scale=paper; the sbatch ones start as many tasks as the paper's 16 workers."""
    docs = [
        REPO / "README.md",
        *sorted((REPO / "docs").glob("*.md")),
        REPO / "slurm" / "README.md",
        REPO / "slurm" / "train.sbatch",
    ]
    found = 0
    for path in docs:
        for line in path.read_text().splitlines():
            line = line.lstrip("# ").split("  #")[0]
            if "train.sbatch" in line and line.startswith("sbatch"):
                words = shlex.split(line)
                assert "scale=paper" in words, (path, line)
                nodes = int(words[words.index("-N") + 1])
                per_node = next(w for w in words if w.startswith("--ntasks-per-node="))
                per_node = int(per_node.split("=")[1])
                assert nodes * per_node == 16, (path, line)
                assert any(w.startswith("--gpus-per-node=") for w in words), (path, line)
                found += 1
            elif "cluster=slurm" in line and line.startswith("python run.py"):
                words = shlex.split(line)
                assert "scale=paper" in words and "cluster.gpus_per_node=8" in words, (path, line)
                found += 1
    assert found >= 4


def test_make_passes_the_job_shape_to_every_run_and_refuses_it_off_slurm():
    def make(*args: str) -> subprocess.CompletedProcess:
        # STAMP=Makefile: the venv's stamp is a file that exists; -o Makefile: never remade,
        # else a pyproject.toml newer than the Makefile has make run the stamp's recipe (pip
        # install, with PY=python) to remake its makefile, even under -n
        return subprocess.run(
            ["make", "-n", "-o", "Makefile", *args, "PY=python", "STAMP=Makefile"],
            cwd=REPO,
            capture_output=True,
            text=True,
        )

    out = make("table1", "SCALE=paper", "CLUSTER=slurm", "NODES=2", "GPUS_PER_NODE=8",
               "PARTITION=gpu", "ACCOUNT=proj", "TIMEOUT_MIN=600")  # fmt: skip
    assert out.returncode == 0, out.stderr
    (cmd,) = [ln for ln in out.stdout.splitlines() if "experiments.sweep" in ln]
    words = shlex.split(cmd)
    assert words[words.index("--cluster") + 1] == "slurm"
    assert words[words.index("--out-root") + 1] == "outputs"
    tail = words[words.index("table1") :]  # overrides after the preset's name
    assert tail == ["table1", "cluster.nodes=2", "cluster.gpus_per_node=8",
                    "cluster.partition=gpu", "cluster.account=proj",
                    "cluster.timeout_min=600"]  # fmt: skip
    out = make("table1", "NODES=2")
    assert out.returncode != 0 and "apply to CLUSTER=slurm" in out.stderr
    (cmd,) = [ln for ln in make("table1").stdout.splitlines() if "experiments.sweep" in ln]
    assert "cluster." not in cmd
