"""What the test modules share: the SLURM cluster, started once for the session
(tests/slurm_cluster.py; defined here, once: a fixture imported into two test modules is two
fixtures, and the second module's start stopped the first one's cluster), and under
pytest-xdist (`make test`'s `-n 3 --dist loadgroup`) the SLURM tests kept in one xdist worker,
as they share that one started cluster (a second worker would start a second one on the same
machine, which stops the first), and each xdist worker's share of the cores."""

from __future__ import annotations

import os

import pytest

from tests.slurm_cluster import slurm_cluster  # noqa: F401 - the session fixture

# The modules whose tests share the started cluster (marked `slurm`).
SLURM_MODULES = ("tests/test_slurm.py::", "tests/test_slurm_cluster.py::")


def pytest_configure(config: pytest.Config) -> None:
    """In an xdist worker: torch's CPU threads are the worker's share of the cores, as the
    suite gives each in-process worker its share (experiments/workers/sim.py). With torch's
    default, one thread per core in each of `make test-quick`'s two processes, the two processes'
    threads took turns on two cores: `make test-quick` took 197 CPU-s and 103.5 s, against
    166 CPU-s and 87.8 s with this (back to back). A run sets its own threads
    (`threads_per_worker`) and puts these back. (More processes than cores, as `make test`'s
    three on 2: one thread each.)"""
    from experiments.workers.allocator import configure

    configure()  # as every entry point of the suite (run.py): before torch allocates
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1 and "PYTEST_XDIST_WORKER" in os.environ:
        import torch

        torch.set_num_threads(max(1, (os.cpu_count() or 1) // workers))


@pytest.hookimpl(optionalhook=True)  # (a hook of xdist: none without it)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """`--dist loadgroup` with the SLURM tests as one group. By hand, not by the
    `xdist_group` mark: with pytest 9.2 the mark no longer groups anything (xdist 3.8 writes
    the group into a node id field pytest no longer reads; pytest-dev/pytest-xdist#1386), and
    the SLURM tests then ran in both workers, each starting a cluster that stopped the other's.
    Every other test is its own unit, as with `--dist load`."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class SlurmTogether(LoadGroupScheduling):
        def _split_scope(self, nodeid: str) -> str:
            if nodeid.startswith(SLURM_MODULES):
                return "slurm"
            return super()._split_scope(nodeid)

    return SlurmTogether(config, log)


@pytest.fixture(scope="session")
def worker_id(request: pytest.FixtureRequest) -> str:
    """pytest-xdist's fixture of this name (its process's id, "master" without workers), also
    where xdist is not loaded (`-p no:xdist`: `make test TEST_JOBS=0`), which tests/session.py's
    users need: the same value xdist gives."""
    return getattr(request.config, "workerinput", {}).get("workerid", "master")
