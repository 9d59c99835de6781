"""Time to target on a time budget, measured: the interpolated crossing against dense evaluation,
and what the evaluation costs.

    python -m benchmarks.crossing [--out benchmarks/RESULTS-budget.md] [--runs DIR ...]

1. The estimator (experiments/store/crossing.py). Runs of the losp preset's setting at fmnist
   (4 workers, one 3x slower, 1 Gbps, tau 2, the time budget of `make losp`) evaluated DENSE
   times more often than the preset (every eval_every_s / DENSE). On each, the crossing of the
   target accuracy read three ways: the dense points' interpolated crossing (the reference: its
   points are DENSE times closer), the preset's points (every DENSE-th of them) interpolated,
   which is what the report uses, and the preset's points' first time at or above the target
   (the steps budget's rule). The table gives each one's error against the reference.
2. The evaluation's cost: for every finished time-budget run under --runs (default: the
   committed records of results/losp/fmnist and results/overlap_straggler/fmnist are not runs;
   pass the runs folders of a `make losp`), its evaluation's real time (copies and scoring,
   `time/eval_s`) over its loop's real time (`time/wall_s`), and the points it scored.

Written by hand (not a benchmarks family): it measures results, not the suite's speed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

from experiments.store.crossing import crossing_time

REPO = Path(__file__).resolve().parents[1]
DENSE = 6
TARGET = 0.75  # the fmnist scale's target accuracy
SETTING = [
    "experiment=losp", "scale=fmnist", "cluster=sim", "tau=2", "compute.slowdown=one_slow",
    "wandb.mode=disabled", "progress=false",
]  # fmt: skip
CASES = [("osp", 0), ("osp", 1), ("losp", 0), ("sync_sgd", 0)]


def dense_run(out: Path, algorithm: str, seed: int, every: float) -> list[dict]:
    """The metric rows of one run of the setting evaluated every `every` seconds."""
    args = [*SETTING, f"algorithm={algorithm}", f"seed={seed}", f"budget.eval_every_s={every}"]
    proc = subprocess.run(
        [sys.executable, "run.py", *args, f"out_root={out}"],
        cwd=REPO, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if proc.returncode != 0:
        raise SystemExit(f"run failed: {' '.join(args)}: {proc.stderr.strip()[-500:]}")
    run_dir = next(p for p in (out / "runs").iterdir() if p.name.startswith(algorithm)
                   and f"seed{seed}-" in p.name)  # fmt: skip
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return sorted(rows, key=lambda r: r["time/train_s"])


def crossings(rows: list[dict]) -> tuple[float | None, float | None, float | None]:
    """(reference, preset's points interpolated, preset's points' first) crossing times."""
    t = [r["time/train_s"] for r in rows]
    a = [r["test/acc"] for r in rows]
    thin = [i for i in range(len(rows)) if (i + 1) % DENSE == 0 or i == len(rows) - 1]
    tt, aa = [t[i] for i in thin], [a[i] for i in thin]
    return (
        crossing_time(t, a, TARGET, interpolate=True),
        crossing_time(tt, aa, TARGET, interpolate=True),
        crossing_time(tt, aa, TARGET, interpolate=False),
    )


def eval_shares(roots: list[Path]) -> list[tuple[str, float, int]]:
    """(run, evaluation's share of the loop's real time, points) of each time-budget run."""
    out = []
    for root in roots:
        for summary_path in sorted(root.glob("*/summary.json")):
            s = json.loads(summary_path.read_text())
            if s.get("status") == "completed" and s.get("time/wall_s"):
                share = s["time/eval_s"] / s["time/wall_s"]
                out.append((summary_path.parent.name, share, s["budget/points"]))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.crossing", description=__doc__)
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "RESULTS-budget.md")
    parser.add_argument("--work", type=Path, default=REPO / "outputs" / "bench" / "crossing")
    parser.add_argument("--runs", type=Path, nargs="*", default=[], help="runs folders (part 2)")
    args = parser.parse_args(argv)
    every = 12.0 / 40  # the preset's spacing: T / (8 x 5 passes), T = 12 s at fmnist
    lines = [
        "# Time to target on a time budget (python -m benchmarks.crossing)",
        "",
        f"Crossing of test accuracy {TARGET} (fmnist, `make losp`'s setting at tau 2), from",
        f"runs evaluated every {every / DENSE:.3f} s; the preset evaluates every {every:.2f} s.",
        "Errors against the dense points' interpolated crossing, in virtual seconds.",
        "",
        "| run | reference (s) | preset's points, interpolated | preset's points, first at/above |",
        "|---|---|---|---|",
    ]
    errors_interp, errors_first = [], []
    for algorithm, seed in CASES:
        rows = dense_run(args.work, algorithm, seed, every / DENSE)
        ref, interp, first = crossings(rows)
        if ref is None or interp is None or first is None:
            lines.append(f"| {algorithm} seed {seed} | never | | |")
            continue
        errors_interp.append(interp - ref)
        errors_first.append(first - ref)
        lines.append(
            f"| {algorithm} seed {seed} | {ref:.3f} | {interp - ref:+.3f} | {first - ref:+.3f} |"
        )
    if errors_interp:
        lines += [
            "",
            f"Mean absolute error: interpolated {statistics.mean(map(abs, errors_interp)):.3f} s, "
            f"first point {statistics.mean(map(abs, errors_first)):.3f} s "
            f"(largest {max(map(abs, errors_interp)):.3f} s and "
            f"{max(map(abs, errors_first)):.3f} s).",
        ]
    for root in args.runs:
        shares = eval_shares([root])
        if not shares:
            continue
        values = [s / (1 - s) for _, s, _ in shares]  # evaluation over training
        points = sorted({p for _, _, p in shares})
        lines += [
            "",
            f"{root}: evaluation (copies and scoring) over training, real time, {len(shares)} "
            f"runs, {'-'.join(str(p) for p in (points[0], points[-1]) if p)} points a run: "
            f"median {statistics.median(values):.1%}, range {min(values):.1%}-{max(values):.1%}.",
        ]
    text = "\n".join(lines) + "\n"
    print(text)
    args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
