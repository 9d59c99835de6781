"""One run, or a sweep of runs: `python run.py key=value ...`, `python run.py -m ...`.

Hydra composes the config against its schema (experiments/schema.py); every error of the
command line or of a value is one `error: ...` line and exit code 2 before any run directory
exists (experiments/preflight.py). Each run then starts `workers` processes (or is one worker,
under torchrun/srun), trains, and leaves its record in `<out_root>/runs/<name>-<digest>`, named
by its resolved config (experiments/identity.py): a rerun finds and skips a finished run of the
same config, a changed config gets a new directory. A sweep (`-m`) runs every point through
hydra_plugins/commsgd_sweeper: a failing point is recorded and the others run; the sweep exits
non-zero at the end with one line per failed point. See README.md and docs/config.md.

Exit codes: 0 completed or diverged; 1 a worker failed; 2 bad input; 3 stopped by a signal with
a checkpoint (rerun to resume); 130 Ctrl-C without a checkpoint.
"""

from __future__ import annotations

import os
import sys
import traceback
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

import experiments  # noqa: F401 - registers the schema and the resolvers (run_name, out_dir)
from experiments.errors import Cancelled, Interrupted, UserError, WorkerFailed

EXIT_FAILED = 1  # a worker failed
EXIT_USER = 2  # bad input, before any worker starts
EXIT_INTERRUPTED = 3  # stopped on a signal with a checkpoint: rerun the command to resume
EXIT_CANCELLED = 130  # Ctrl-C without a checkpoint


def hydra_files(cfg: DictConfig) -> dict[str, str]:
    """Hydra's record of the job (`.hydra/`: config.yaml unresolved, hydra.yaml,
    overrides.yaml), written by the runner once the run directory is its to write."""
    hydra_cfg = HydraConfig.instance().cfg
    return {
        "config.yaml": OmegaConf.to_yaml(cfg),
        "hydra.yaml": OmegaConf.to_yaml(hydra_cfg),
        "overrides.yaml": OmegaConf.to_yaml(hydra_cfg.hydra.overrides.task),
    }


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> dict[str, Any]:
    """One Hydra job: run the configuration. A single run exits with its code. In a sweep a
    failure is the point's outcome, returned to the sweeper, so that the other points run;
    a stop on a signal or Ctrl-C ends the sweep too (SystemExit)."""
    from experiments.runner import run

    hc = HydraConfig.get()
    in_sweep = hc.mode == RunMode.MULTIRUN
    run_dir = hc.runtime.output_dir
    try:
        return {"status": run(cfg, run_dir, hydra_files(cfg)), "run_dir": run_dir}
    except UserError as e:
        code, message = EXIT_USER, str(e)
    except WorkerFailed as e:
        if e.details:
            print(e.details, file=sys.stderr)
        code, message = EXIT_FAILED, str(e)
    except Interrupted:  # rank 0 has said why, and that a rerun resumes
        sys.exit(EXIT_INTERRUPTED)
    except Cancelled as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(EXIT_CANCELLED)
    except Exception as e:  # a bug: its traceback, then in a sweep the next point
        if not in_sweep:
            raise
        traceback.print_exc()
        code, message = EXIT_FAILED, f"{type(e).__name__}: {e}".splitlines()[0]
    if not in_sweep:
        print(f"error: {message}", file=sys.stderr)
        sys.exit(code)
    print(f"{run_dir}: failed: {message}", file=sys.stderr, flush=True)
    return {"status": "failed", "error": message, "exit_code": code, "run_dir": run_dir}


def cli() -> None:
    """run.py's entry: Hydra's own errors (composition, overrides, interpolation) as one line
    and exit code 2. HYDRA_FULL_ERROR makes Hydra raise them instead of printing several
    lines and exiting 1; the job's own errors are handled in `main`."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from experiments.preflight import describe

    os.environ["HYDRA_FULL_ERROR"] = "1"
    from experiments import startup

    if startup.starts_processes(sys.argv[1:]):
        startup.warm()  # the workers' forkserver imports torch while Hydra composes the config
    try:
        main()
    except (UserError, HydraException, OmegaConfBaseException) as e:
        print(f"error: {describe(e)}", file=sys.stderr)
        sys.exit(EXIT_USER)


if __name__ == "__main__":
    cli()
