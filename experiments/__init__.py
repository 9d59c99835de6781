"""The experiment machinery. Importing the package registers the suite's OmegaConf resolvers,
so that every place that composes the config (run.py, the analysis, the tests) resolves it the
same way."""

from omegaconf import OmegaConf


def run_name(overrides: str) -> str:
    """The run directory's name: its overrides ("default" with none), one path segment."""
    return overrides.replace("/", "%2F") or "default"


def ceil_div(a, b) -> int:
    """cluster=slurm: tasks per node = workers / nodes, rounded up (validated in the job)."""
    return -(-int(a) // int(b))


OmegaConf.register_new_resolver("run_name", run_name, replace=True)
OmegaConf.register_new_resolver("ceil_div", ceil_div, replace=True)
