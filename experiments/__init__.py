"""The experiment machinery. Importing the package registers the config's schema in Hydra's
ConfigStore (experiments/config/schema.py) and the suite's OmegaConf resolvers, so that every place
that composes the config (run.py, the analysis, the tests) composes and resolves it the same
way."""

import os
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from experiments.config import schema  # noqa: F401 - registers the structured configs
from experiments.config.tuned import tuned_lr

NAME_MAX, PATH_MAX = 255, 4096  # bytes of a path component, of a path (Linux)


def out_dir(out_root: str) -> str:
    """The output root as every part of the suite uses it (the run directory Hydra makes, the
    pre-flight's checks, the run's records, the sweep's record): resolved once, here: `~`
    expanded, made absolute (against the current directory). Refused in one line: empty (it
    would write into the current directory or the file-system root), `~user` of no user,
    control characters, a component over 255 bytes or a path over 4096 bytes (no file system
    takes them)."""
    from experiments.errors import UserError

    text = str(out_root)
    if not text.strip():
        raise UserError("out_root is empty: name a directory (default: outputs)")
    if any(ord(c) < 32 or ord(c) == 127 for c in text):
        raise UserError(f"out_root holds a control character: {text!r}")
    path = os.path.expanduser(text)
    if path.startswith("~"):
        raise UserError(f"out_root={text}: no such user ({text.split('/')[0]})")
    path = os.path.abspath(path)
    encoded = os.fsencode(path)
    for part in encoded.split(b"/"):
        if len(part) > NAME_MAX:
            shown = os.fsdecode(part)[:24]
            raise UserError(
                f"out_root has a component of {len(part)} bytes ({shown}...): at most "
                f"{NAME_MAX} bytes"
            )
    if len(encoded) > PATH_MAX - NAME_MAX - 64:  # room for runs/<name>/<file>
        raise UserError(
            f"out_root is {len(encoded)} bytes long: at most {PATH_MAX - NAME_MAX - 64} (the "
            "run directories and files go below it)"
        )
    return path


def resolved_job(root: DictConfig) -> dict:
    """The resolved job config of a composed config `root` (its `hydra` node left out): plain
    containers, enums as strings."""
    job = OmegaConf.masked_copy(root, [k for k in root.keys() if k != "hydra"])
    return OmegaConf.to_container(job, resolve=True, enum_to_str=True)


def run_name(*, _root_: DictConfig) -> str:
    """The run directory's name, from the whole resolved config (experiments/config/identity.py),
    or the directory of the same run recorded under an earlier identity rule
    (experiments/config/identity.py, `run_dir_name`)."""
    from experiments.config.identity import run_dir_name

    job = resolved_job(_root_)
    return run_dir_name(Path(out_dir(job["out_root"])) / "runs", job)


def ceil_div(a, b) -> int:
    """cluster=slurm: tasks per node = workers / nodes, rounded up (validated in the job)."""
    from experiments.errors import UserError

    if int(b) < 1:
        raise UserError(f"cluster.nodes must be an integer >= 1, got {b!r}")
    return -(-int(a) // int(b))


OmegaConf.register_new_resolver("out_dir", out_dir, replace=True)
OmegaConf.register_new_resolver("run_name", run_name, replace=True)
OmegaConf.register_new_resolver("ceil_div", ceil_div, replace=True)
OmegaConf.register_new_resolver("tuned_lr", tuned_lr, replace=True)
