"""`python -m benchmarks [--quick] [--smoke] [--out benchmarks/RESULTS.md] [--only NAME ...]`

Runs the benchmark families (benchmarks/families.py), prints the results as Markdown and writes
them to --out (and the figures as JSON next to it). --quick: the quick bench, only the headline
ratios (benchmarks/quick.py, ~15 min on 2 cores), to benchmarks/RESULTS-quick.md. --smoke: a
few steps per run, for the tests (alone: every family; with --quick: the headline rows); no
figure is a measurement there. Exit status 1 when a family failed to run (a missed target is a
result, not a failure).
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
import traceback
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    from experiments.workers.allocator import configure

    configure()  # as run.py: the in-process rows compute as the suite's runs do
    from benchmarks import families, harness, report

    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument(
        "--quick", action="store_true", help="the headline ratios only (~15 min on 2 cores)"
    )
    parser.add_argument(
        "--smoke", action="store_true", help="a few steps per run (tests: not a measurement)"
    )
    parser.add_argument(
        "--out",
        type=Path,
        help="Markdown output (default benchmarks/RESULTS.md; --quick: "
        "benchmarks/RESULTS-quick.md; --smoke: outputs/bench/RESULTS-smoke.md)",
    )
    parser.add_argument(
        "--only", nargs="+", choices=list(families.FAMILIES), metavar="NAME",
        help=f"run only these families: {', '.join(families.FAMILIES)}",
    )  # fmt: skip
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--reps", type=int, help="interleaved repetitions per A/B pair (least)")
    parser.add_argument(
        "--max-reps",
        type=int,
        help="headline pairs repeat until their 95%% interval is within +-2%%, up to this many "
        "(default 12)",
    )
    parser.add_argument(
        "--jobs", type=int, help="families run at once (default 1; quick mode 3: not measured)"
    )
    args = parser.parse_args(argv)
    if args.quick and (args.only or args.jobs):
        parser.error("--quick runs its own rows, one at a time: no --only or --jobs")
    if args.quick and not args.smoke:
        # rows (c) train on Fashion-MNIST: refuse before any work where it is not installed
        from experiments.data.fashion_mnist import place
        from experiments.errors import UserError

        try:
            place({})
        except UserError as e:
            parser.error(f"the quick bench's fmnist rows need the data: {e}")
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            parser.error("--device cuda: no CUDA device here")
    default = "benchmarks/RESULTS.md"
    if args.smoke:
        default = "outputs/bench/RESULTS-smoke" + ("-quick" if args.quick else "") + ".md"
    elif args.quick:
        default = "benchmarks/RESULTS-quick.md"
    out = args.out or Path(default)
    reps = args.reps or (1 if args.smoke else 3 if args.quick else 5)
    settings = families.Settings(
        smoke=args.smoke,
        device=args.device,
        reps=reps,
        max_reps=max(reps, args.max_reps or (reps if args.smoke else 12)),
    )
    names = args.only or list(families.FAMILIES)
    command = "python -m benchmarks " + shlex.join(argv if argv is not None else sys.argv[1:])
    meta = {"command": command.strip(), **harness.machine()}
    meta["mode"] = {
        (False, False): "full",
        (True, False): "quick: the headline ratios",
        (False, True): "smoke: every family, a few steps per run (not a measurement)",
        (True, True): "quick rows at smoke sizes: a few steps per run (not a measurement)",
    }[args.quick, args.smoke]
    meta["device"] = args.device
    if args.quick:
        return _quick(settings, meta, out)

    ctx: dict = {}

    def run_family(name: str):
        t0 = time.perf_counter()
        print(f"[bench] {name} ...", file=sys.stderr, flush=True)
        try:
            return families.FAMILIES[name](settings, ctx), None
        except Exception:  # one family's failure must not lose the others' figures
            err = traceback.format_exc()
            print(err, file=sys.stderr, flush=True)
            return None, err
        finally:
            print(f"[bench] {name}: {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)

    start = time.perf_counter()
    jobs = args.jobs or (3 if args.smoke else 1)
    if jobs > 1:  # smoke mode: its figures are not measurements, so families may overlap
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(jobs) as pool:
            outcomes = list(pool.map(run_family, names))
    else:  # measurements: one family at a time, nothing else of ours on the machine
        outcomes = [run_family(name) for name in names]
    sections = [sec for sec, _ in outcomes if sec is not None]
    errors = {name: err for name, (_, err) in zip(names, outcomes, strict=True) if err}
    meta["duration"] = f"{time.perf_counter() - start:.0f} s"
    meta["load_avg_after"] = harness.machine()["load_avg"]
    text = report.write(out, sections, meta, errors, harness.FAILURES)
    print(text)
    print(f"written: {out} and {out.with_suffix('.json')}", file=sys.stderr)
    return 1 if errors else 0


def _quick(settings, meta: dict, out: Path) -> int:
    """The quick bench (benchmarks/quick.py): its rows one at a time, then its file."""
    from benchmarks import harness, quick, report

    start = time.perf_counter()
    errors: dict[str, str] = {}
    sections = []
    try:
        sections.append(quick.run(settings))
    except Exception:  # the file still says what failed, with the machine and the command
        errors["quick"] = traceback.format_exc()
        print(errors["quick"], file=sys.stderr, flush=True)
    meta["duration"] = f"{time.perf_counter() - start:.0f} s"
    meta["load_avg_after"] = harness.machine()["load_avg"]
    text = report.write(out, sections, meta, errors, harness.FAILURES, intro=quick.INTRO)
    print(text)
    print(f"written: {out} and {out.with_suffix('.json')}", file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
