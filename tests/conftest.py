"""Only for pytest-xdist (`make test`'s `-n 2 --dist loadgroup`): the tests that must share one
process of the session stay in one xdist worker."""

from __future__ import annotations

import pytest


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not config.pluginmanager.hasplugin("xdist"):
        return  # the marker is xdist's (--strict-markers refuses it without)
    # The SLURM tests share one started two-node cluster (tests/slurm_cluster.py, a session
    # fixture): a second xdist worker would start a second one on the same machine.
    for item in items:
        if item.get_closest_marker("slurm") is not None:
            item.add_marker(pytest.mark.xdist_group("slurm"))
