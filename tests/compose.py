"""The suite's config as Hydra composes it, for the tests that read a composed config (its
values, its schema's types, what the suite's code makes of it): composed once per test process
for each command line and state of conf/, a copy on every call.

Why: a composition costs ~0.09 s on an idle core (Hydra's defaults list, YAML, merges and
deep copies), and the quick tests composed 718 times, 173 of them a command line composed
before in the same process (tests/test_config.py and tests/test_schema.py each compose every
group option, test_paper_presets every preset several times): a third of the quick tests' time
was composition. The cache is analysis/runs/grid.py's `composition`, which the reports use: a
cached result is the same config: the key is the command line, the conf directory and the bytes
of every file in it (`conf_state`: a test that edits a copied conf/ composes afresh), and, for
the Hydra config, the working directory it records. Each call gets its own deep copy, made
before anything was resolved (resolvers such as `tuned_lr` run when the copy is read). A command
line that does not compose raises Hydra's error each time (not cached). run.py's own composition
(tests/cli.py `run_py_here`) is not cached: that is Hydra's, as a user's command runs it.
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from analysis.runs.grid import composition

CONF = Path(__file__).resolve().parents[1] / "conf"


def composed(*overrides: str, conf: Path | str = CONF, hydra: bool = False) -> DictConfig:
    """`compose("config", overrides)` under `conf` (with the `hydra` node when `hydra`): a
    copy of this process's composition of the same command line and conf/."""
    import experiments  # noqa: F401 - the schema and the resolvers

    return composition(Path(conf), overrides, hydra)


def resolved(*overrides: str, conf: Path | str = CONF) -> dict:
    """The composed job config as plain containers, every interpolation resolved."""
    return OmegaConf.to_container(composed(*overrides, conf=conf), resolve=True)  # type: ignore[return-value]
