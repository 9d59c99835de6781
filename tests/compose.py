"""The suite's config as Hydra composes it, for the tests that read a composed config (its
values, its schema's types, what the suite's code makes of it): composed once per test process
for each command line and state of conf/, a copy on every call.

Why: a composition costs ~0.09 s on an idle core (Hydra's defaults list, YAML, merges and
deep copies), and the quick tests composed 718 times, 173 of them a command line composed
before in the same process (tests/test_config.py and tests/test_schema.py each compose every
group option, test_paper_presets every preset several times): a third of the quick tests' time
was composition. A cached result is the same config: the key is the command line, the conf
directory and the bytes of every file in it (analysis/runs/grid.py `conf_state`: a test that
edits a copied conf/ composes afresh), and, for the Hydra config, the working directory it
records. Each call gets its own deep copy, made before anything was resolved (resolvers such as
`tuned_lr` run when the copy is read). A command line that does not compose raises each time
(not cached). run.py's own composition (tests/cli.py `run_py_here`) is not cached: that is
Hydra's, as a user's command runs it.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from analysis.runs.grid import conf_state

CONF = Path(__file__).resolve().parents[1] / "conf"

_COMPOSED: dict[tuple, DictConfig] = {}


def composed(*overrides: str, conf: Path | str = CONF, hydra: bool = False) -> DictConfig:
    """`compose("config", overrides)` under `conf` (with the `hydra` node when `hydra`): a
    copy of this process's composition of the same command line and conf/."""
    conf = Path(conf)
    key = (str(conf), conf_state(conf), overrides, hydra, os.getcwd() if hydra else None)
    if key not in _COMPOSED:
        from hydra import compose, initialize_config_dir

        import experiments  # noqa: F401 - the schema and the resolvers

        with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
            _COMPOSED[key] = compose("config", overrides=list(overrides), return_hydra_config=hydra)
    return copy.deepcopy(_COMPOSED[key])


def resolved(*overrides: str, conf: Path | str = CONF) -> dict:
    """The composed job config as plain containers, every interpolation resolved."""
    return OmegaConf.to_container(composed(*overrides, conf=conf), resolve=True)  # type: ignore[return-value]
