"""The experiment machinery. Importing the package registers the config's schema in Hydra's
ConfigStore (experiments/schema.py) and the suite's OmegaConf resolvers, so that every place
that composes the config (run.py, the analysis, the tests) composes and resolves it the same
way."""

import os

from omegaconf import DictConfig, OmegaConf

from experiments import schema  # noqa: F401 - registers the structured configs


def out_dir(out_root: str) -> str:
    """The output root as the run uses it: `~` expanded; empty is refused (it would write into
    the current directory or the file-system root)."""
    from experiments.errors import UserError

    text = str(out_root)
    if not text.strip():
        raise UserError("out_root is empty: name a directory (default: outputs)")
    return os.path.expanduser(text)


def resolved_job(root: DictConfig) -> dict:
    """The resolved job config of a composed config `root` (its `hydra` node left out): plain
    containers, enums as strings."""
    job = OmegaConf.masked_copy(root, [k for k in root.keys() if k != "hydra"])
    return OmegaConf.to_container(job, resolve=True, enum_to_str=True)


def run_name(*, _root_: DictConfig) -> str:
    """The run directory's name, from the whole resolved config (experiments/identity.py)."""
    from experiments.identity import run_name as name

    return name(resolved_job(_root_))


def ceil_div(a, b) -> int:
    """cluster=slurm: tasks per node = workers / nodes, rounded up (validated in the job)."""
    return -(-int(a) // int(b))


OmegaConf.register_new_resolver("out_dir", out_dir, replace=True)
OmegaConf.register_new_resolver("run_name", run_name, replace=True)
OmegaConf.register_new_resolver("ceil_div", ceil_div, replace=True)
