"""One run, or a Hydra sweep of runs: `python run.py key=value ...`, `python run.py -m ...`.

Each Hydra job validates its config, then starts `workers` processes (or is one worker, under
torchrun/srun), trains, and leaves its record in a directory named after its overrides
(`<out_root>/runs/<overrides>`), so a rerun of a sweep finds and skips its finished runs.
See README.md and ../shared/docs/contract.md.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

import experiments  # noqa: F401 - registers the config's resolvers (run_name, ceil_div)
from experiments.errors import Cancelled, Interrupted, UserError, WorkerFailed

EXIT_INTERRUPTED = 3  # stopped on a signal with a checkpoint: rerun the command to resume


CONF = Path(__file__).resolve().parent / "conf"
MIN_FREE_MB = float(os.environ.get("COMMSGD_MIN_FREE_MB", 100))  # below: the output disk is full


def check_group_options(argv: list[str]) -> None:
    """Fail with one line for an unknown option of a config group (`algorithm=sgd`), before
    Hydra answers with a multi-line error; sweeps (`algorithm=a,b`) are checked value by value."""
    for arg in argv:
        key, sep, value = arg.partition("=")
        group = key.lstrip("+~")
        if not sep or "(" in value or not (CONF / group).is_dir() or "/" in group:
            continue
        options = sorted(p.stem for p in (CONF / group).glob("*.yaml"))
        for option in value.split(","):
            if option not in options and option != "null":
                print(
                    f"error: unknown {group} {option!r}; choose from {', '.join(options)}",
                    file=sys.stderr,
                )
                sys.exit(2)


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
        free_mb = shutil.disk_usage(path).free / 2**20
        if free_mb < MIN_FREE_MB:
            print(
                f"error: output directory {path} is full: {free_mb:.1f} MB free, a run needs "
                f"at least {MIN_FREE_MB:.0f} MB (COMMSGD_MIN_FREE_MB)",
                file=sys.stderr,
            )
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
    except WorkerFailed as e:
        if e.details:
            print(e.details, file=sys.stderr)
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
    except Cancelled as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(130)


if __name__ == "__main__":
    check_group_options(sys.argv[1:])
    check_output_root(sys.argv[1:])
    main()
