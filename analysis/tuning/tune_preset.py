"""Each method of a preset tuned at the preset's own setting: `make tune PRESET=<name> SCALE=<s>`.

    python -m analysis.tuning.tune_preset losp --scale fmnist [--cluster sim] [--out-root outputs]

The seed papers compare methods each at its own tuned learning rate; an LR tuned at another
setting (the demo's 5 epochs and tau 4, conf/tuned/<scale>.yaml) need not transfer to a
preset's (its epochs, partition, network, heterogeneity, workers). So this runs, for every
algorithm in the preset's grid, the preset's own setting:

- with its grid fixed where the preset's `report.tune_at` says (e.g. `{tau: 2}`: one LR per
  method for every tau, as the seed papers use one LR for every tau); every other key the preset
  sweeps must take one value, or the command refuses (naming it) before any work;
- on a validation split (`dataset.validation_fraction` VALIDATION, never the test set);
- on the tuning seeds SEEDS, disjoint from the evaluation seeds (0-9, the presets' `seed`
  lists): a verdict is not scored on the seeds its LR was chosen on;
- over the base-LR grid the preset sweeps (`lr` in its sweeper params: experiment=tune's six
  points), else GRID (x2 steps around the scales' default 0.1);

then chooses by analysis.tuning.tune's rule (RULE: the best mean final validation accuracy, ties
within the seeds' spread broken by the earlier time to the target, then the smaller LR) and writes
`conf/tuned/<scale>/<preset>.yaml` (for the preset `tune`, the demo's setting: the scale's own
file `conf/tuned/<scale>.yaml`, which presets without a file and ad-hoc runs read), which the
preset's runs read (experiments/config/tuned.py:
the preset's file, else the scale's). A choice at the grid's edge extends that method's grid by
one point (x2 or /2) and runs it, at most MAX_EXTEND times, so every committed choice lies
inside its grid (a choice still at an edge after that is flagged `edge: true` and said). The
runs go to `<out-root>/tune/<preset>/runs`; rerunning resumes (finished points are skipped).

What it writes and when: the runs (run.py's records), each round's choice beside them
(`<out-root>/tune/<preset>/tuned.yaml`), and the tuning file only at the end, once every
algorithm's every grid point has all its seeds (a failed point is an error naming it: a choice
made without it would be committed as if it had run), whole and at once (analysis.tuning.tune's
`write_tuned`: a stop or a full disk leaves the previous file). `--no-run` chooses from the runs
that finished and names in a `warning:` line the algorithms it found none of. `--out` (and
`--out-root`) are checked before any work (analysis.tuning.tune's `check_out`: not a directory, a
non-tuning file, the runs it reads or the committed results/).

A stop (Ctrl-C, SIGTERM, SIGHUP, SIGUSR1/2) is passed on to the tune sweep running (Ctrl-C as
SIGTERM: its run checkpoints, and a rerun resumes), which runs
in a process group of its own and dies with this command (experiments/sweep.py's `run_child`:
PR_SET_PDEATHSIG, killed GRACE_S after the stop at the latest); then one `error:` line and the
stop's exit code (130 Ctrl-C, 128 + N signal N: analysis/stops.py), the tuning file untouched.
Exit codes: 0 written; 1 a tune run failed (nothing written); 2 bad input; 130/128+N stopped.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from analysis.runs.grid import TUNING_SEEDS, compose_preset
from analysis.stops import run_sweep, stoppable
from analysis.tuning.tune import check_out, print_choices, tune, write_tuned
from experiments.config.tuned import tuned_path
from experiments.errors import UserError, one_line_errors, refuse_inert_flags
from experiments.store.provenance import REPO, command_line

GRID = (0.05, 0.1, 0.2)
SEEDS = TUNING_SEEDS
VALIDATION = 0.15
MAX_EXTEND = 3
#: Keys of a preset's sweep that tuning sweeps itself (the algorithm: each is tuned; the seed:
#: the tuning seeds replace the preset's; the LR: the grid).
OWN = ("algorithm", "seed", "lr")


def _values(text: Any) -> list[str]:
    """A sweeper param's values as text: "1,2,4" -> ["1", "2", "4"]; 0.1 -> ["0.1"]."""
    if isinstance(text, (list, tuple)):
        return [str(v) for v in text]
    return [v.strip() for v in str(text).split(",") if v.strip()]


#: The preset whose tuning is the scale's own file (conf/tuned/<scale>.yaml): the demo's setting.
SCALE_PRESET = "tune"


def own_file(preset: str) -> str | None:
    """The preset whose tuning file the tuning writes and whose runs analysis.tuning.tune reads
    (`tune_<preset>`): None for the scale's own tuning (SCALE_PRESET: conf/tuned/<scale>.yaml,
    runs named `tune`)."""
    return None if preset == SCALE_PRESET else preset


def experiment_name(preset: str) -> str:
    """The tune runs' `experiment_name`, as analysis.tuning.tune reads them."""
    own = own_file(preset)
    return f"tune_{own}" if own else "tune"


def start_grid(preset: str, scale: str) -> tuple[float, ...]:
    """The LR grid tuning starts from: the one the preset's main grid sweeps (`lr` in its params;
    an extra grid's LR, as table1's paper LR at tau = 1, is not a tuning grid), else GRID."""
    swept = _values(compose_preset(preset, scale).params.get("lr", ""))
    return tuple(sorted({float(v) for v in swept})) or GRID


def plan(preset: str, scale: str) -> tuple[list[str], dict[str, Any]]:
    """The preset's algorithms (in grid order) and the overrides that fix its other swept keys
    (`report.tune_at`); a UserError naming a swept key tune_at leaves open."""
    composed = compose_preset(preset, scale)
    tune_at = dict(composed.report.get("tune_at") or {})
    algorithms: list[str] = []
    for sweep in composed.sweeps:
        for name in _values(sweep.get("algorithm", "")):
            if name not in algorithms:
                algorithms.append(name)
    if not algorithms:
        raise UserError(f"preset {preset} sweeps no algorithm: nothing to tune")
    open_keys = sorted(
        {
            key
            for sweep in composed.sweeps
            for key, value in sweep.items()
            if key not in OWN
            and key not in tune_at
            and not key.startswith("algorithm.")  # a method's own knob: tuned at its default
            and len(_values(value)) > 1
        }
    )
    if open_keys:
        raise UserError(
            f"preset {preset} sweeps {', '.join(open_keys)}: tuning needs one setting; say in "
            f"conf/experiment/{preset}.yaml which value to tune at (report.tune_at: "
            f"{{{open_keys[0]}: ...}})"
        )
    return algorithms, tune_at


def sweep_command(
    preset: str,
    scale: str,
    cluster: str,
    out: Path,
    algorithms: Sequence[str],
    grid: Sequence[float],
    tune_at: dict[str, Any],
    overrides: Sequence[str] = (),
) -> list[str]:
    """`python run.py -m` of the tune runs: the preset at `scale`, its extra grids dropped (the
    algorithms are listed), its grid fixed at `tune_at`, on the tuning seeds and a validation
    split, over `grid`."""
    return [
        sys.executable,
        str(REPO / "run.py"),
        "-m",
        f"experiment={preset}",
        f"scale={scale}",
        f"cluster={cluster}",
        "hydra.sweeper.grids=[]",
        f"experiment_name={experiment_name(preset)}",
        f"dataset.validation_fraction={VALIDATION}",
        f"algorithm={','.join(algorithms)}",
        f"seed={','.join(str(s) for s in SEEDS)}",
        f"lr={','.join(f'{v:g}' for v in grid)}",
        *(f"{key}={value}" for key, value in tune_at.items()),
        f"out_root={out}",
        *overrides,
    ]


def extension(document: dict[str, Any]) -> dict[str, float]:
    """The next grid point of each algorithm whose choice lies at its grid's edge: half the
    lowest LR tried, or twice the highest."""
    more = {}
    for algorithm, entry in document["lr"].items():
        if not entry["edge"]:
            continue
        tried = sorted(float(v) for v in entry["points"])
        more[algorithm] = tried[0] / 2 if entry["chosen"] == tried[0] else tried[-1] * 2
    return more


def missing_runs(
    document: dict[str, Any], asked: dict[str, set[float]], seeds: int = len(SEEDS)
) -> list[str]:
    """What the tuning `document` lacks of what was asked (`asked`: algorithm -> the LRs run):
    `<algorithm>` with no finished run, `<algorithm> lr <v> (k of n seeds)` for a grid point
    with fewer finished (or diverged) runs than `seeds`."""
    gaps = []
    for algorithm, rates in asked.items():
        entry = document["lr"].get(algorithm)
        if entry is None:
            gaps.append(f"{algorithm} (no finished run)")
            continue
        points = {float(k): v for k, v in entry["points"].items()}
        for rate in sorted(rates):
            n = int((points.get(rate) or {}).get("n", 0))
            if n < seeds:
                gaps.append(f"{algorithm} lr {rate:g} ({n} of {seeds} seeds)")
    return gaps


@stoppable("analysis.tuning.tune_preset", "the tuning file was not written; rerun to resume")
def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m analysis.tuning.tune_preset", description=__doc__
    )
    parser.add_argument("preset", help="a preset of conf/experiment/ (its report.tune_at)")
    parser.add_argument("--scale", default="fmnist")
    parser.add_argument("--cluster", default=None, help="sim (default) | local | slurm")
    parser.add_argument("--out-root", default="outputs", help="runs go to OUT/tune/<preset>/runs")
    parser.add_argument(
        "--out", help="default: conf/tuned/<scale>/<preset>.yaml (tune: conf/tuned/<scale>.yaml)"
    )
    parser.add_argument("--no-run", action="store_true", help="only choose from finished runs")
    parser.add_argument("overrides", nargs="*", help="extra key=value overrides for every run")
    one_line_errors(parser)
    args = parser.parse_intermixed_args(argv)
    refuse_inert_flags(
        parser,
        [
            ("--cluster", args.no_run and args.cluster is not None,
             "with --no-run (nothing runs: it chooses from the finished runs)"),
            ("key=value overrides", args.no_run and bool(args.overrides),
             "with --no-run (nothing runs: it chooses from the finished runs)"),
        ],
    )  # fmt: skip
    args.cluster = args.cluster or "sim"
    command = command_line(
        argv if argv is not None else sys.argv[1:],
        args.out_root,
        module="analysis.tuning.tune_preset",
    )
    own = own_file(args.preset)
    try:
        out = _runs_folder(args.out_root, args.preset)
        target = check_out(args.out or tuned_path(args.scale, own), [out])
        algorithms, tune_at = plan(args.preset, args.scale)
    except UserError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    grid = start_grid(args.preset, args.scale)
    todo = {name: grid for name in algorithms}
    asked: dict[str, set[float]] = {name: set() for name in algorithms}
    for round_ in range(MAX_EXTEND + 1):
        if not args.no_run:
            # one sweep per set of grids: the first all of GRID, then each edge's next point
            for grid in sorted({tuple(g) for g in todo.values()}):
                names = [a for a in algorithms if tuple(todo.get(a, ())) == grid]
                for name in names:
                    asked[name].update(float(v) for v in grid)
                cmd = sweep_command(
                    args.preset, args.scale, args.cluster, out, names, grid, tune_at, args.overrides
                )
                print("$ " + " ".join(cmd[1:]), flush=True)
                code = run_sweep(cmd)
                if code not in (0, 1):  # 1: some point failed (named below, nothing written)
                    why = "was refused" if code == 2 else "stopped"
                    print(f"error: the tune sweep {why} (exit {code})", file=sys.stderr)
                    return code
        try:
            # each round's choice beside the runs; the checkout's file only once, at the end: a
            # tracked file written between rounds would make the next round's runs `-dirty`
            scratch = out / "tuned.yaml"
            _, document = tune([out / "runs"], args.scale, scratch, command, own, tune_at)
        except UserError as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
        more = extension(document)
        if not more or args.no_run or round_ == MAX_EXTEND:
            break
        print(
            "at the grid's edge, one more point: "
            + ", ".join(f"{a} lr {v:g}" for a, v in more.items()),
            flush=True,
        )
        todo = {a: (v,) for a, v in more.items()}
    if args.no_run:
        absent = [a for a in algorithms if a not in document["lr"]]
        if absent:
            print(
                f"warning: no finished tune run of {', '.join(absent)}: not in the tuning file "
                "(they run at the scale's rate, else the default)",
                file=sys.stderr,
            )
    else:
        gaps = missing_runs(document, asked)
        if gaps:  # a choice without them would be committed as if they had run
            print(
                f"error: {len(gaps)} tuning point(s) did not finish: {'; '.join(gaps[:4])}"
                f"{' ...' if len(gaps) > 4 else ''}; the tuning file was not written (rerun the "
                "same command to retry them)",
                file=sys.stderr,
            )
            return 1
    try:
        path = write_tuned(document, target)
    except UserError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print_choices(document, path)
    return 0


def _runs_folder(out_root: str, preset: str) -> Path:
    """`<out-root>/tune/<preset>`, resolved as run.py's out_root (experiments.out_dir), its
    runs folder makeable and writable (one line, before any work, otherwise)."""
    from experiments import out_dir
    from experiments.preflight import check_output_root_unmade

    try:
        out = Path(out_dir(out_root)) / "tune" / preset
    except UserError as error:
        raise UserError(f"--out-root: {error}") from None
    check_output_root_unmade(out / "runs")
    return out


if __name__ == "__main__":
    from analysis.stops import stop_early

    stop_early("analysis.tuning.tune_preset")  # (pandas and Hydra import for seconds)
    sys.exit(main())
