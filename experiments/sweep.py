"""Run a preset's sweep, only the points without a finished record, then write its report.

    python -m experiments.sweep table1 --scale cpu [--cluster local] [key=value ...]

is what `make table1`, `make table2`, `make figures` and `make report` call. It runs
`python run.py -m experiment=<name> scale=<scale> cluster=<cluster>` into
`<out-root>/<name>/runs` (Hydra's sweep; a point whose directory holds a completed or diverged
run is skipped, so an interrupted sweep resumes where it stopped and no finished result is
recomputed or overwritten), then each of the preset's `extra_sweeps` (a Hydra sweep is a
cartesian product; e.g. fig4's PowerSGD ranks), then
`python -m analysis.report --experiment <name> --scale <scale>` into `<results>/<name>/<scale>/`.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from omegaconf import OmegaConf

REPO = Path(__file__).resolve().parents[1]
CONF = REPO / "conf"


def fail(message: str) -> None:
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.sweep", description=__doc__)
    parser.add_argument("experiment", help="a preset of conf/experiment/")
    parser.add_argument("--scale", default="cpu", help="smoke | cpu | paper (default cpu)")
    parser.add_argument("--cluster", default="local", help="local | slurm (default local)")
    parser.add_argument("--out-root", default="outputs", help="run records go to OUT/<name>/runs")
    parser.add_argument("--results", default="results", help="tables and figures go here")
    parser.add_argument("--no-run", action="store_true", help="only write the report")
    parser.add_argument("overrides", nargs="*", help="extra key=value overrides for every run")
    args = parser.parse_intermixed_args(argv)

    presets = sorted(p.stem for p in (CONF / "experiment").glob("*.yaml"))
    if args.experiment not in presets:
        fail(f"unknown experiment {args.experiment!r}; presets: {', '.join(presets)}")
    scales = sorted(p.stem for p in (CONF / "scale").glob("*.yaml"))
    if args.scale not in scales:
        fail(f"unknown scale {args.scale!r}; choose from {', '.join(scales)}")
    clusters = sorted(p.stem for p in (CONF / "cluster").glob("*.yaml"))
    if args.cluster not in clusters:
        fail(f"unknown cluster {args.cluster!r}; choose from {', '.join(clusters)}")

    preset = OmegaConf.load(CONF / "experiment" / f"{args.experiment}.yaml")
    extra_sweeps = [list(s) for s in preset.get("extra_sweeps", [])]
    runs_root = Path(args.out_root) / args.experiment
    base = [
        sys.executable,
        str(REPO / "run.py"),
        "-m",
        f"experiment={args.experiment}",
        f"scale={args.scale}",
        f"cluster={args.cluster}",
        f"out_root={runs_root}",
        *args.overrides,
    ]
    if not args.no_run:
        for sweep in [[], *extra_sweeps]:
            print("$ " + " ".join(base[1:] + sweep), flush=True)
            proc = subprocess.run(base + sweep, cwd=REPO)
            if proc.returncode != 0:
                print(
                    f"error: the sweep of {args.experiment} stopped (exit {proc.returncode}); "
                    "rerun the same command to resume it",
                    file=sys.stderr,
                )
                return proc.returncode
    out = Path(args.results) / args.experiment / args.scale
    report = [
        sys.executable,
        "-m",
        "analysis.report",
        "--experiment",
        args.experiment,
        "--scale",
        args.scale,
        str(runs_root / "runs"),
        "--out",
        str(out),
    ]
    code = subprocess.run(report, cwd=REPO).returncode
    provenance = out / "provenance.txt"
    if code == 0 and provenance.exists():
        # The report records its own command; add the one that ran the sweep.
        sweep = "python -m experiments.sweep " + " ".join(
            argv if argv is not None else sys.argv[1:]
        )
        with provenance.open("a") as f:
            f.write(f"sweep command: {sweep}\n")
    return code


if __name__ == "__main__":
    sys.exit(main())
