"""Each method of a preset tuned at the preset's own setting: `make tune PRESET=<name> SCALE=<s>`.

    python -m analysis.tune_preset losp --scale fmnist [--cluster sim] [--out-root outputs]

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

then chooses by analysis.tune's rule (RULE: the best mean final validation accuracy, ties within
the seeds' spread broken by the earlier time to the target, then the smaller LR) and writes
`conf/tuned/<scale>/<preset>.yaml` (for the preset `tune`, the demo's setting: the scale's own
file `conf/tuned/<scale>.yaml`, which presets without a file and ad-hoc runs read), which the
preset's runs read (experiments/config/tuned.py:
the preset's file, else the scale's). A choice at the grid's edge extends that method's grid by
one point (x2 or /2) and runs it, at most MAX_EXTEND times, so every committed choice lies
inside its grid (a choice still at an edge after that is flagged `edge: true` and said). The
runs go to `<out-root>/tune/<preset>/runs`; rerunning resumes (finished points are skipped).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from analysis.grid import compose_preset
from analysis.tune import print_choices, tune, write_tuned
from experiments.config.tuned import tuned_path
from experiments.errors import UserError, one_line_errors, refuse_inert_flags
from experiments.store.provenance import REPO, command_line

GRID = (0.05, 0.1, 0.2)
SEEDS = (100, 101)
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
    """The preset whose tuning file the tuning writes and whose runs analysis.tune reads
    (`tune_<preset>`): None for the scale's own tuning (SCALE_PRESET: conf/tuned/<scale>.yaml,
    runs named `tune`)."""
    return None if preset == SCALE_PRESET else preset


def experiment_name(preset: str) -> str:
    """The tune runs' `experiment_name`, as analysis.tune reads them."""
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


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m analysis.tune_preset", description=__doc__)
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
        argv if argv is not None else sys.argv[1:], args.out_root, module="analysis.tune_preset"
    )
    try:
        algorithms, tune_at = plan(args.preset, args.scale)
    except UserError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    out = Path(args.out_root).resolve() / "tune" / args.preset
    grid = start_grid(args.preset, args.scale)
    todo = {name: grid for name in algorithms}
    own = own_file(args.preset)
    for round_ in range(MAX_EXTEND + 1):
        if not args.no_run:
            # one sweep per set of grids: the first all of GRID, then each edge's next point
            for grid in sorted({tuple(g) for g in todo.values()}):
                names = [a for a in algorithms if tuple(todo.get(a, ())) == grid]
                cmd = sweep_command(
                    args.preset, args.scale, args.cluster, out, names, grid, tune_at, args.overrides
                )
                print("$ " + " ".join(cmd[1:]), flush=True)
                code = subprocess.run(cmd, cwd=REPO).returncode
                if code not in (0, 1):  # 1: some point failed (counted as the rule says)
                    print(f"error: the tune sweep stopped (exit {code})", file=sys.stderr)
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
    path = write_tuned(document, args.out or tuned_path(args.scale, own))
    print_choices(document, path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
