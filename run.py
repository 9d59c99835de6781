"""One run, or a Hydra sweep of runs: `python run.py key=value ...`, `python run.py -m ...`.

Each Hydra job validates its config, then starts `workers` processes (or is one worker, under
torchrun/srun), trains, and leaves its record in a directory named after its overrides
(`<out_root>/runs/<overrides>`), so a rerun of a sweep finds and skips its finished runs.
See README.md and ../shared/docs/contract.md.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

import experiments  # noqa: F401 - registers the config's resolvers (run_name, ceil_div)
from experiments.errors import Interrupted, UserError

EXIT_INTERRUPTED = 3  # stopped on a signal with a checkpoint: rerun the command to resume


def check_output_root(argv: list[str]) -> None:
    """Fail with one line, before Hydra creates anything, when out_root cannot be written.

    Hydra itself would crash with a traceback while making the run directory.
    """
    roots = [a.split("=", 1)[1] for a in argv if a.startswith("out_root=")] or ["outputs"]
    for root in roots[-1].split(","):
        path = Path(root).expanduser() / "runs"
        try:
            path.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=path, prefix=".write-test-"):
                pass
        except OSError as e:
            print(f"error: output directory {path} is not writable: {e.strerror}", file=sys.stderr)
            sys.exit(2)


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> None:
    from experiments.runner import run

    try:
        run(cfg, HydraConfig.get().runtime.output_dir)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    except Interrupted:  # rank 0 has said why, and that a rerun resumes
        sys.exit(EXIT_INTERRUPTED)


if __name__ == "__main__":
    check_output_root(sys.argv[1:])
    main()
