"""A preset's claims that cannot tell, run again at the n that reaches their margin (issue 49
item 6).

    python -m analysis.reproduce.power PRESET [--scale fmnist] [--max-n 24] [--n N]
        [--results results] [--out-root outputs] [--cluster sim] [--publish] [key=value ...]
    make power PRESET=losp                             (at VERDICT_SCALE; PUBLISH=1: committed)

A claim that cannot tell at the committed n has, in its deciding comparison, the n at which its
minimum detectable difference (80% power) reaches the claim's margin (`n_needed`, analysis/
stats/; the verdicts page prints it beside the MDD). Where that n is at most `--max-n` (24: three
times the verdicts' 8, the suite's choice of what a laptop-scale preset can afford), the claim
was underpowered, not undecidable: this runs the preset's whole sweep as committed (its setting,
its grids, the rates in its tuning file) on the seeds that bring every such claim to its n (the
committed seeds, then the next whole numbers above them, never a tuning seed nor a
replication's, analysis/reproduce/replicate.py FRESH_FROM), and reports the preset's claims over
the committed runs (the result's `runs.jsonl.gz`) and the new ones together. `--n` sets the n
instead (at least the committed n + 1).

The new runs go to `<out-root>/power/<preset>/runs`, the report to `<out-root>/power/report/
<preset>/<scale>/`, and the comparison to `<out-root>/power/results/<preset>/<scale>/`:
`power.json` and `power.md` (per claim: its committed verdict at the committed n, its verdict at
the new n, and `powered`: whether the claim was one that needed it), with the report's
`claims.md` beside them. `--publish` (`make power PUBLISH=1`) copies that folder, whole, to
`<results>/<preset>/<scale>/power/` (replicate's staged swap), where the verdicts page reads it
and shows each powered claim's verdict at its n beside the committed one. The committed result
itself is left as it is: its verdicts, replication and rate checks are at the committed n, and the
page counts those; a claim decided at the larger n is a candidate for the preset's n the next
time it is regenerated.

Nothing to run is not an error: where no claim cannot tell with an n needed of at most
`--max-n`, it says so and exits 0, writing nothing. Bad input is refused before any run (exit 2,
one `error:` line): an unknown preset, no committed result (or damaged records), `--n` not
above the committed n, seeds that would reach the replications' or the tuning's, `seed=` among
the overrides, `--publish` on a modified checkout. Exit codes: 0 written (whatever the
verdicts); 1 a run or the report failed (nothing compared); 2 bad input; 130 / 128 + N a stop
(passed on to the runs, which checkpoint: the same command resumes).
"""

from __future__ import annotations

import sys

if __name__ == "__main__":  # a stop while the analysis imports (seconds): one line, no work
    from analysis.stops import stop_early

    stop_early("power")

import argparse  # noqa: E402 - after the stop handlers above
import json  # noqa: E402
import shutil  # noqa: E402
from collections.abc import Sequence  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402

from analysis.reports.verdict_page import POWER, POWER_MAX_N, powerable, read_claims  # noqa: E402
from analysis.reproduce.replicate import (  # noqa: E402
    FRESH_FROM,
    check_clean,
    check_preset,
    committed_seeds,
    publish,
    publishable,
    seeds_text,
)
from analysis.reproduce.robustness import (  # noqa: E402
    committed_result,
    report_command,
    sweep_command,
)
from analysis.runs.grid import TUNING_SEEDS  # noqa: E402
from analysis.runs.records import RECORDS  # noqa: E402
from analysis.stops import run_sweep, stoppable  # noqa: E402
from experiments.errors import UserError, one_line_errors  # noqa: E402
from experiments.store.provenance import command_line  # noqa: E402
from experiments.store.records import write_text_atomic  # noqa: E402

#: The largest n run for a claim that cannot tell (issue 49: "at most 24").
MAX_N = POWER_MAX_N
FOLDER, JSON = POWER
MD = "power.md"


def powered(committed: Sequence[dict], max_n: int) -> dict[str, int]:
    """Claim name -> its n needed, for the claims that cannot tell and reach their margin at an
    n of at most `max_n` (verdict_page.powerable)."""
    return {c["name"]: c["deciding"]["n_needed"] for c in committed if powerable(c, max_n)}


def more_seeds(committed: Sequence[int], n: int) -> list[int]:
    """The seeds to add to `committed` for `n` in all: the next whole numbers above them, never a
    tuning seed; a UserError where they would reach the replications' (FRESH_FROM up)."""
    out, seed = [], max(committed) + 1
    while len(committed) + len(out) < n:
        if seed not in TUNING_SEEDS:
            out.append(seed)
        seed += 1
    if out and out[-1] >= FRESH_FROM:
        raise UserError(
            f"n = {n} would need seeds up to {out[-1]}: at {FRESH_FROM} and above they are the "
            "replications' (analysis/reproduce/replicate.py)"
        )
    return out


def compare(committed: Sequence[dict], at_n: Sequence[dict], wanted: dict[str, int]) -> list:
    """Per committed claim: its verdict, the verdict at the new n, and whether it needed it."""
    again = {c["name"]: c for c in at_n}
    out = []
    for claim in committed:
        new = again.get(claim["name"])
        out.append(
            {
                "name": claim["name"],
                "text": claim["text"],
                "committed": claim["verdict"],
                "verdict": new["verdict"] if new else "not checked",
                "powered": claim["name"] in wanted,
                "n_needed": wanted.get(claim["name"]),
                "line": ((new or {}).get("deciding") or {}).get("line", ""),
            }
        )
    return out


def markdown(doc: dict) -> str:
    """power.md: the comparison as a table."""
    lines = [
        f"# {doc['preset']} at {doc['scale']} at n = {doc['n']}: the claims that needed it",
        "",
        f"`{doc['command']}`: the preset's sweep as committed on seeds {doc['seeds_text']} "
        f"(n = {doc['n']}: the committed seeds {doc['committed_seeds_text']} and "
        f"{seeds_text(doc['added_seeds'])}), for the claims that cannot tell at n = "
        f"{doc['committed_n']} and reach their margin at an n of at most {doc['max_n']} (the n "
        "their deciding comparison needs for its minimum detectable difference, at 80% power, "
        "to reach the margin). Every claim is listed; the verdicts page shows the powered "
        "ones'.",
        "",
        f"| claim | committed (n = {doc['committed_n']}) | n needed | at n = {doc['n']} | "
        "deciding comparison |",
        "|---|---|---|---|---|",
    ]
    for c in doc["claims"]:
        want = str(c["n_needed"]) if c["powered"] else "–"
        line = c["line"].replace("|", "\\|") or "–"
        lines.append(f"| {c['name']} | {c['committed']} | {want} | {c['verdict']} | {line} |")
    return "\n".join(lines) + "\n"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m analysis.reproduce.power", description=__doc__)
    p.add_argument("preset", help="a preset of conf/experiment/ with a committed result")
    p.add_argument("--scale", default="fmnist")
    p.add_argument("--max-n", type=int, default=MAX_N, help=f"default {MAX_N}")
    p.add_argument("--n", type=int, help="run at this n instead of the claims' n needed")
    p.add_argument("--results", default="results", help="where the committed result is")
    p.add_argument("--out-root", default="outputs", help="runs and report under OUT/power")
    p.add_argument("--cluster", default="sim", help="sim (default) | local | slurm")
    p.add_argument("--publish", action="store_true", help="copy into <results>/<preset>/<scale>")
    p.add_argument("overrides", nargs="*", help="extra key=value overrides for every run")
    one_line_errors(p)
    return p


@dataclass
class Plan:
    committed: list[dict]
    result: Path
    seeds: list[int]  # the committed ones
    added: list[int]
    wanted: dict[str, int]  # claim -> n needed (the powered claims)
    n: int


def plan(args: argparse.Namespace) -> Plan | None:
    """Every check before any run, and what to run; None where nothing needs running (a
    UserError names bad input)."""
    check_preset(args.preset)
    result = committed_result(args)
    if any(o.split("=", 1)[0].lstrip("+~") == "seed" for o in args.overrides):
        raise UserError("seed= is the committed result's and the n's: not an override here")
    if args.max_n < 2:
        raise UserError(f"--max-n {args.max_n}: at least 2")
    if args.publish:
        check_clean("a published run at the n from power")
    committed = read_claims(result / "claims.json")
    seeds = committed_seeds(result)
    wanted = powered(committed, args.max_n)
    if args.n is not None:
        if args.n <= len(seeds):
            raise UserError(f"--n {args.n}: the committed result has n = {len(seeds)} already")
        n = args.n
    elif wanted:
        n = max(wanted.values())
    else:
        return None
    return Plan(committed, result, seeds, more_seeds(seeds, n), wanted, n)


@stoppable("power")
def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_intermixed_args(argv)
    command = command_line(
        argv if argv is not None else sys.argv[1:], args.out_root, module="analysis.reproduce.power"
    )
    try:
        p = plan(args)
    except UserError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if p is None:
        print(
            f"power of {args.preset} at {args.scale}: no claim that cannot tell reaches its "
            f"margin at an n of at most {args.max_n}: nothing to run"
        )
        return 0
    root = (Path(args.out_root) / "power").resolve()
    made = root / "results" / args.preset / args.scale
    shutil.rmtree(made, ignore_errors=True)  # a comparison never sits beside an earlier one
    runs = root / args.preset
    print(
        f"power of {args.preset} at {args.scale}: n = {p.n} (committed seeds "
        f"{seeds_text(p.seeds)}, adding {seeds_text(p.added)}) for "
        + (", ".join(f"{k} (n = {v} needed)" for k, v in p.wanted.items()) or "--n"),
        flush=True,
    )
    cmd = sweep_command(args, f"seed={','.join(str(s) for s in p.added)}", f"out_root={runs}")
    print("$ " + " ".join(cmd[1:]), flush=True)
    code = run_sweep(cmd)
    if code != 0:
        print(
            f"error: the runs on seeds {seeds_text(p.added)} ended with exit code {code}: nothing "
            "compared (the same command resumes them)",
            file=sys.stderr,
        )
        return code if code in (1, 2) else 1
    out = root / "report" / args.preset / args.scale
    report = report_command(args, [str((p.result / RECORDS).resolve()), str(runs / "runs")], out)
    print("$ " + " ".join(report[1:]), flush=True)
    code = run_sweep(report)  # as a sweep's command: its own process group, stops passed on
    if code != 0:
        print(f"error: the report ended with exit code {code}: nothing compared", file=sys.stderr)
        return 1
    at_n = read_claims(out / "claims.json")
    seeds = [*p.seeds, *p.added]
    doc = {
        "preset": args.preset,
        "scale": args.scale,
        "command": command,
        "n": p.n,
        "max_n": args.max_n,
        "committed_n": len(p.seeds),
        "seeds": seeds,
        "seeds_text": seeds_text(seeds),
        "committed_seeds_text": seeds_text(p.seeds),
        "added_seeds": p.added,
        "claims": compare(p.committed, at_n, p.wanted),
    }
    made.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(out / "claims.md", made / "claims.md")
    write_text_atomic(made / JSON, json.dumps(doc, indent=1) + "\n")
    write_text_atomic(made / MD, markdown(doc))
    for c in doc["claims"]:
        if c["powered"]:
            print(
                f"{c['name']}: {c['committed']} at n = {len(p.seeds)} -> {c['verdict']} at "
                f"n = {p.n}"
            )
    print(f"written: {made / MD}")
    if args.publish:
        if not publishable([runs / "runs"], args, made / MD):
            return 1
        print(f"published: {publish(made, p.result, FOLDER)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
