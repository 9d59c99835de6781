"""A preset's decisive verdicts checked at other learning rates (issue 49 item 2).

    python -m analysis.reproduce.robustness PRESET [--scale fmnist] [--methods a,b]
        [--results results] [--out-root outputs] [--cluster sim] [--publish] [key=value ...]
    make robustness PRESET=losp                        (at VERDICT_SCALE; PUBLISH=1: committed)

A verdict between two methods at their tuned rates is a verdict about that pair of rates too
(docs/statistics.md, "Robust to the knobs that were chosen"). This tests the committed result's
claims again at other rates, on the same seeds, one change of rate at a time:

- **neighbours**: each method at its neighbouring grid rates (its committed rate / FACTOR and x
  FACTOR, the tuning grid's step: analysis/tuning/tune_preset.py), the other methods at theirs;
- **shared**: every method at one rate, the grid rate nearest the geometric mean of the
  methods' committed rates (`shared_rate`: the suite's choice of a middle ground); where the
  committed rates are already one rate (the controls), every method at each of its
  neighbours instead.

A point tests a claim only where it changes the rate of one of the methods the claim compares
(analysis.claims CLAIM_METHODS; every point for a claim that does not name them), and an
identity (IDENTITIES: OSP and LOSP on the ideal network, one algorithm under two names) only
where its methods share a rate (`tests`): elsewhere the comparison is the committed one, or
not the claim's.

Only the runs of a method whose rate changes are made: its part of the preset's sweep (its
grid, or the extra grid that names it) with `lr` set, on the committed seeds, into
`<out-root>/robustness/<preset>/<method>-lr<rate>/runs` (a rate shared by two points runs once).
The others are the committed runs themselves: each point's report (`python -m
analysis.reports.report`, the preset's claims) reads them from the result's `runs.jsonl.gz`,
less the methods that changed. The tuning runs cannot stand in: they are on other seeds (100-101)
and a validation split, so none pairs with a committed run.

Per claim, `robustness.json` and `robustness.md` (under `<out-root>/robustness/results/<preset>/
<scale>/`, each point's claims.md beside them in `points/`): its committed verdict, its verdict
at every point, the points that test it (`tests`), and for a decisive one (holds, does not
hold) `robust` (the same verdict at every point that tests it) and the points where it holds
again. `--methods` changes only the methods named (the others keep their committed rates at
every point; there is then no shared point, unless the named methods share one rate: then they
also move together to each neighbour, which tests an identity such as the controls' OSP = LOSP
with `--methods osp,losp`), and extends the published check: its points that this one does not
redo are kept, with their verdicts and the command that made them (`commands`), where it is on
the same seeds at the same committed rates. `--publish`
(`make robustness PUBLISH=1`) copies that folder, whole, to `<results>/<preset>/<scale>/
robustness/`, where the verdicts page reads it; it needs a clean checkout and runs made from one.

Bad input is refused before any run (exit 2, one `error:` line): an unknown preset, no committed
result (or damaged records, a method with more than one committed rate), a `--methods` name the
result does not have, `seed=` or `lr=` among the overrides, `--publish` on a modified checkout.
Exit codes: 0 written (whether or not every verdict is robust: that is the result); 1 a run or a
point's report failed (nothing compared); 2 bad input; 130 / 128 + N a stop (passed on to the
runs, which checkpoint: the same command resumes).
"""

from __future__ import annotations

import sys

if __name__ == "__main__":  # a stop while the analysis imports (seconds): one line, no work
    from analysis.stops import stop_early

    stop_early("robustness")

import argparse  # noqa: E402 - after the stop handlers above
import json  # noqa: E402
import math  # noqa: E402
import shutil  # noqa: E402
from collections.abc import Mapping, Sequence  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

from analysis.claims.rules import base_verdict  # noqa: E402
from analysis.reports.verdict_page import DECISIVE, ROBUSTNESS, read_claims  # noqa: E402
from analysis.reproduce.replicate import (  # noqa: E402
    check_clean,
    check_preset,
    publish,
    publishable,
    seeds_text,
)
from analysis.runs.grid import compose_preset  # noqa: E402
from analysis.runs.records import RECORDS, dumps, read_records  # noqa: E402
from analysis.stops import run_sweep, stoppable  # noqa: E402
from experiments.errors import UserError, one_line_errors  # noqa: E402
from experiments.store.provenance import REPO, command_line  # noqa: E402
from experiments.store.records import write_text_atomic  # noqa: E402

#: The tuning grid's step (analysis/tuning/tune_preset.py: x2 around the scales' default 0.1):
#: a method's neighbouring grid rates are its rate / FACTOR and x FACTOR.
FACTOR = 2.0
#: The grid every rate of the suite lies on: GRID_ANCHOR x FACTOR^k.
GRID_ANCHOR = 0.1
FOLDER, JSON = ROBUSTNESS
MD = "robustness.md"


@dataclass(frozen=True)
class Point:
    """One set of rates: `name` (as the page says it) and the methods whose rate changes."""

    name: str
    rates: tuple[tuple[str, float], ...]  # (method, rate), sorted by method

    @property
    def slug(self) -> str:
        return "-".join(f"{m}-lr{r:g}" for m, r in self.rates)


def method_rates(records: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Each method's committed base LR (`lr`, per 128 samples) from the result's records; a
    UserError for a method run at more than one (a rate sweep is not a tuned pair)."""
    seen: dict[str, set[float]] = {}
    for record in records:
        config = record["config"]
        seen.setdefault(str(config["algorithm"]["name"]), set()).add(float(config["lr"]))
    several = {m: sorted(r) for m, r in seen.items() if len(r) > 1}
    if several:
        m, r = next(iter(sorted(several.items())))
        listed = ", ".join(f"{x:g}" for x in r)
        raise UserError(
            f"{m} ran at {len(r)} rates in the committed result ({listed}): robustness starts "
            "from one rate per method"
        )
    return {m: next(iter(r)) for m, r in sorted(seen.items())}


def on_grid(rate: float) -> float:
    """The grid rate (GRID_ANCHOR x FACTOR^k) nearest `rate` on a log scale, to 12 digits."""
    k = round(math.log(rate / GRID_ANCHOR, FACTOR))
    return float(f"{GRID_ANCHOR * FACTOR**k:.12g}")


def shared_rate(rates: Mapping[str, float]) -> float | None:
    """The shared point's rate: the grid rate nearest the geometric mean of the methods' rates;
    None when they are one rate already (the committed point is the shared one)."""
    if len(set(rates.values())) <= 1:
        return None
    logs = [math.log(r) for r in rates.values()]
    return on_grid(math.exp(sum(logs) / len(logs)))


def points(rates: Mapping[str, float], methods: Sequence[str] | None = None) -> list[Point]:
    """The other rate sets to check: each of `methods` (default: every method) at its
    neighbouring grid rates, then, when every method may change, the shared rate; where the
    methods share one rate already, every method at each of its neighbours instead (the runs
    of the per-method points: no more runs). With `methods`, the same among them: where they
    share one rate (OSP and LOSP in the controls, an identity's two names), they move together
    too, the others keep theirs."""
    chosen = list(methods) if methods else sorted(rates)
    out = []
    for m in chosen:
        for scale, word in ((1 / FACTOR, "/"), (FACTOR, "x")):
            rate = float(f"{rates[m] * scale:.12g}")
            out.append(Point(f"{m} lr {rate:g} ({word}{FACTOR:g})", ((m, rate),)))
    if len(chosen) > 1 and len({rates[m] for m in chosen}) == 1:
        common = rates[chosen[0]]
        who = "every method" if not methods else ", ".join(sorted(chosen))
        for scale, word in ((1 / FACTOR, "/"), (FACTOR, "x")):
            rate = float(f"{common * scale:.12g}")
            both = tuple((m, rate) for m in sorted(chosen))
            out.append(Point(f"{who} lr {rate:g} ({word}{FACTOR:g}), shared", both))
    shared = shared_rate(rates) if not methods else None
    if shared is not None:
        changed = tuple((m, shared) for m in sorted(rates) if rates[m] != shared)
        same = next((i for i, p in enumerate(out) if p.rates == changed), None)
        if same is None:
            out.append(Point(f"shared lr {shared:g}", changed))
        else:  # one method off the shared rate: that neighbour is the shared point too
            out[same] = Point(f"{out[same].name}, shared", changed)
    return out


def method_grids(preset: str, scale: str, method: str, overrides: Sequence[str] = ()) -> list:
    """The overrides that give `method`'s part of the preset's sweep, one list a grid: the main
    grid where its `algorithm` names `method`, and each extra grid that does (an extra grid is
    the main one with its own values: one without `algorithm` takes the main grid's)."""
    composed = compose_preset(preset, scale, overrides=overrides)
    main = _names(composed.params.get("algorithm", ""))
    grids = []
    if method in main:
        grids.append(["hydra.sweeper.grids=[]", f"algorithm={method}"])
    for extra in composed.extra_sweeps:
        names = _names(extra["algorithm"]) if "algorithm" in extra else main
        if method in names:
            values = [f"{k}={_text(v)}" for k, v in extra.items() if k != "algorithm"]
            grids.append(["hydra.sweeper.grids=[]", f"algorithm={method}", *values])
    if not grids:
        raise UserError(f"{method}: not in {preset}'s sweep (its grid or an extra grid)")
    return grids


def _names(value: Any) -> list[str]:
    """An `algorithm` sweep value as names: "a,b" or [a, b] -> [a, b]."""
    return [v.strip() for v in _text(value).split(",") if v.strip()]


def _text(value: Any) -> str:
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value)
    return str(value)


def run_folder(root: Path, method: str, rate: float) -> Path:
    return root / f"{method}-lr{rate:g}"


def tests(claim: str, point: Point, rates: Mapping[str, float]) -> bool:
    """Whether `point` tests `claim`: it changes the rate of one of the methods the claim
    compares (analysis.claims CLAIM_METHODS; a claim that does not name them: every point),
    and, for an identity (IDENTITIES: one algorithm under two names), gives its methods one
    rate. Elsewhere the claim's comparison is the committed one, or not the claim's."""
    from analysis.claims.rules import CLAIM_METHODS, IDENTITIES

    methods = CLAIM_METHODS.get(claim)
    if methods is None:
        return True
    changed = dict(point.rates)
    if not set(changed) & methods:
        return False
    if claim in IDENTITIES:
        return len({changed.get(m, rates.get(m)) for m in methods if m in rates}) <= 1
    return True


def compare(
    committed: list[dict],
    at: Mapping[str, list[dict]],
    pts: Sequence[Point],
    rates: Mapping[str, float],
) -> list[dict]:
    """Per committed claim: its verdict at every point, the points that test it (`tests`), and
    for a decisive one whether those give it again (`robust`; None where no point tests it)
    and which do (`same_at`)."""
    import analysis.claims  # noqa: F401 - registers every claim's methods

    out = []
    for claim in committed:
        verdicts = {}
        for name, claims in at.items():
            found = next((c for c in claims if c["name"] == claim["name"]), None)
            verdicts[name] = found["verdict"] if found else "not checked"
        tested = [p.name for p in pts if p.name in verdicts and tests(claim["name"], p, rates)]
        decisive = claim["verdict"] in DECISIVE
        same = [name for name in tested if base_verdict(verdicts[name]) == claim["verdict"]]
        out.append(
            {
                "name": claim["name"],
                "text": claim["text"],
                "committed": claim["verdict"],
                "points": verdicts,
                "tests": tested,
                "robust": (len(same) == len(tested)) if decisive and tested else None,
                "same_at": same if decisive else [],
            }
        )
    return out


def markdown(doc: dict) -> str:
    """robustness.md: per claim its verdict at the committed rates and at every other point."""
    names = [p["name"] for p in doc["points"]]
    decisive = [c for c in doc["claims"] if c["robust"] is not None]
    lines = [
        f"# Robustness to the learning rate: {doc['preset']} at {doc['scale']}",
        "",
        " then ".join(f"`{c}`" for c in doc.get("commands", [doc["command"]]))
        + ": the committed claims tested again on the committed seeds "
        f"({doc['seeds_text']}) at other rates, one change at a time. Committed rates: "
        + ", ".join(f"{m} {r:g}" for m, r in doc["rates"].items())
        + ". Points: "
        + "; ".join(
            f"{p['name']}: " + ", ".join(f"{m} {r:g}" for m, r in p["rates"].items())
            for p in doc["points"]
        )
        + ". A decisive verdict is robust when every point that tests it gives it again; a "
        "verdict in parentheses is at a point that does not test the claim (none of the "
        "methods it compares changed its rate, or an identity's two names were given two "
        "rates). The runs of the methods whose rate did not change are the committed ones.",
        "",
        "| claim | committed | " + " | ".join(names) + " | robust |",
        "|---|---|" + "---|" * len(names) + "---|",
    ]
    for c in doc["claims"]:
        mark = {True: "yes", False: "**no**", None: "–"}[c["robust"]]
        tested = c.get("tests", names)
        cells = " | ".join(c["points"][n] if n in tested else f"({c['points'][n]})" for n in names)
        lines.append(f"| {c['name']} | {c['committed']} | {cells} | {mark} |")
    robust = sum(bool(c["robust"]) for c in decisive)
    lines += ["", f"Robust to the rate: {robust} of {len(decisive)} decisive verdicts."]
    return "\n".join(lines) + "\n"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m analysis.reproduce.robustness", description=__doc__)
    p.add_argument("preset", help="a preset of conf/experiment/ with a committed result")
    p.add_argument("--scale", default="fmnist")
    p.add_argument("--methods", help="comma-separated: change only these methods' rates")
    p.add_argument("--results", default="results", help="where the committed result is")
    p.add_argument("--out-root", default="outputs", help="runs and reports under OUT/robustness")
    p.add_argument("--cluster", default="sim", help="sim (default) | local | slurm")
    p.add_argument("--publish", action="store_true", help="copy into <results>/<preset>/<scale>")
    p.add_argument("overrides", nargs="*", help="extra key=value overrides for every run")
    one_line_errors(p)
    return p


@dataclass
class Plan:
    committed: list[dict]
    records: list[dict]
    rates: dict[str, float]
    seeds: list[int]
    points: list[Point]
    grids: dict[str, list]


def plan(args: argparse.Namespace) -> Plan:
    """Every check before any run, and what to run (a UserError names bad input)."""
    check_preset(args.preset)
    result = committed_result(args, " to check")
    for override in args.overrides:
        key = override.split("=", 1)[0].lstrip("+~")
        if key in ("seed", "lr"):
            raise UserError(f"{key}= is the committed result's: not an override here")
    if args.publish:
        check_clean("a published robustness check")
    committed = read_claims(result / "claims.json")
    records = read_records(result / RECORDS)
    rates = method_rates(records)
    methods = [m.strip() for m in args.methods.split(",")] if args.methods else None
    unknown = sorted(set(methods or ()) - set(rates))
    if unknown:
        raise UserError(
            f"--methods {','.join(unknown)}: not in the committed result "
            f"(its methods: {', '.join(rates)})"
        )
    seeds = sorted({int(r["config"]["seed"]) for r in records})
    pts = points(rates, methods)
    changed = sorted({m for p in pts for m, _ in p.rates})
    base = [f"cluster={args.cluster}", *args.overrides]
    grids = {m: method_grids(args.preset, args.scale, m, base) for m in changed}
    return Plan(committed, records, rates, seeds, pts, grids)


def committed_result(args: argparse.Namespace, purpose: str = "") -> Path:
    """`<results>/<preset>/<scale>`, the committed result `args` names; a UserError where its
    claims.json or its records are missing (`purpose`: what the message says it was for)."""
    result = Path(args.results) / args.preset / args.scale
    for need in (result / "claims.json", result / RECORDS):
        if not need.is_file():
            raise UserError(
                f"{need}: missing (no committed result of {args.preset} at {args.scale}{purpose})"
            )
    return result


@stoppable("robustness")
def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_intermixed_args(argv)
    command = command_line(
        argv if argv is not None else sys.argv[1:],
        args.out_root,
        module="analysis.reproduce.robustness",
    )
    try:
        p = plan(args)
    except UserError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    root = (Path(args.out_root) / "robustness").resolve()
    made = root / "results" / args.preset / args.scale
    for stale in (made / JSON, made / MD):  # a comparison must never sit beside other reports
        stale.unlink(missing_ok=True)
    shutil.rmtree(made / "points", ignore_errors=True)  # nor a rate set of an earlier check
    print(
        f"robustness of {args.preset} at {args.scale}: {len(p.points)} points on seeds "
        f"{seeds_text(p.seeds)}; committed rates "
        + ", ".join(f"{m} {r:g}" for m, r in p.rates.items()),
        flush=True,
    )
    runs = root / args.preset
    todo = sorted({(m, r) for point in p.points for m, r in point.rates})
    for method, rate in todo:  # each method at each new rate once, whichever points need it
        for grid in p.grids[method]:
            cmd = sweep_command(
                args,
                *grid,
                f"seed={','.join(str(s) for s in p.seeds)}",
                f"lr={rate:g}",
                f"out_root={run_folder(runs, method, rate)}",
            )
            print("$ " + " ".join(cmd[1:]), flush=True)
            code = run_sweep(cmd)
            if code != 0:
                print(
                    f"error: the runs of {method} at lr {rate:g} ended with exit code {code}: "
                    "nothing compared (the same command resumes them)",
                    file=sys.stderr,
                )
                return code if code in (1, 2) else 1
    at: dict[str, list[dict]] = {}
    for point in p.points:
        at[point.name] = point_claims(args, p, point, runs, root)
        if at[point.name] is None:
            return 1
    pts, commands = list(p.points), [command]
    if args.methods:  # the points of the published check that this one does not redo stay
        earlier = published_points(args, p, made / "points")
        if earlier is not None:
            kept = [pt for pt in earlier[0] if pt.name not in at]
            pts = kept + pts
            at = {**{pt.name: earlier[1][pt.name] for pt in kept}, **at}
            commands = [*earlier[2], command]
            print(f"kept from the published check: {len(kept)} points", flush=True)
    doc = {
        "preset": args.preset,
        "scale": args.scale,
        "command": command,
        "commands": commands,
        "seeds": p.seeds,
        "seeds_text": seeds_text(p.seeds),
        "rates": p.rates,
        "points": [{"name": pt.name, "rates": dict(pt.rates)} for pt in pts],
        "claims": compare(p.committed, at, pts, p.rates),
    }
    write_text_atomic(made / JSON, json.dumps(doc, indent=1) + "\n")
    write_text_atomic(made / MD, markdown(doc))
    mark = {True: "robust", False: "NOT robust", None: "(not decisive)"}
    for c in doc["claims"]:
        same = ", ".join(c["same_at"]) or "none"
        where = f" (the same at: {same})" if c["robust"] is False else ""
        said = mark[c["robust"]]
        if c["robust"] is None and c["committed"] in DECISIVE:
            said = "(no rate set here tests it)"
        print(f"{c['name']}: {c['committed']}: {said}{where}")
    print(f"written: {made / MD}")
    if args.publish:
        if not publishable([run_folder(runs, m, r) / "runs" for m, r in todo], args, made / MD):
            return 1
        result = Path(args.results) / args.preset / args.scale
        print(f"published: {publish(made, result, FOLDER)}")
    return 0


def published_points(
    args: argparse.Namespace, p: Plan, points_md: Path
) -> tuple[list[Point], dict[str, list[dict]], list[str]] | None:
    """The points of the published check of this result (`<results>/<preset>/<scale>/
    robustness/`), its claims' verdicts at each and the commands that made them, with each
    point's claims.md copied into `points_md`; None where there is none, or it was made on
    other seeds or at other committed rates (then it is not this result's: said)."""
    folder = Path(args.results) / args.preset / args.scale / FOLDER
    if not (folder / JSON).is_file():
        return None
    doc = json.loads((folder / JSON).read_text())
    if doc.get("seeds") != p.seeds or doc.get("rates") != dict(p.rates):
        print(
            f"the published check in {folder} is on other seeds or rates: replaced, not extended",
            flush=True,
        )
        return None
    pts = [Point(pt["name"], tuple(pt["rates"].items())) for pt in doc["points"]]
    at = {
        pt.name: [{"name": c["name"], "verdict": c["points"][pt.name]} for c in doc["claims"]]
        for pt in pts
    }
    points_md.mkdir(parents=True, exist_ok=True)
    for pt in pts:
        if (folder / "points" / f"{pt.slug}.md").is_file():
            shutil.copyfile(folder / "points" / f"{pt.slug}.md", points_md / f"{pt.slug}.md")
    return pts, at, list(doc.get("commands", [doc["command"]]))


def sweep_command(args: argparse.Namespace, *words: str) -> list[str]:
    """`python run.py -m` of the preset at its scale and cluster, with `words` (the grid, the
    seeds, the rate, the out_root) and the command's extra overrides."""
    return [
        sys.executable,
        str(REPO / "run.py"),
        "-m",
        f"experiment={args.preset}",
        f"scale={args.scale}",
        f"cluster={args.cluster}",
        *words,
        *args.overrides,
    ]


def report_command(args: argparse.Namespace, roots: Sequence[str], out: Path) -> list[str]:
    """The preset's report (its claims) over `roots` (records files and runs folders) into
    `out`, as the sweep's report would run it (the same cluster and overrides)."""
    return [
        sys.executable,
        "-m",
        "analysis.reports.report",
        "--experiment",
        args.preset,
        "--scale",
        args.scale,
        *roots,
        "--out",
        str(out),
        *(f"--set={o}" for o in [f"cluster={args.cluster}", *args.overrides]),
    ]


def point_claims(
    args: argparse.Namespace, p: Plan, point: Point, runs: Path, root: Path
) -> list[dict] | None:
    """The claims of one point: its report over the committed records of the methods that keep
    their rate and the new runs of those that change; None (said) when the report failed."""
    changed = dict(point.rates)
    work = root / "points" / args.preset / args.scale / point.slug
    work.mkdir(parents=True, exist_ok=True)
    kept = work / RECORDS  # the committed runs of the methods that keep their rate
    keep = [r for r in p.records if str(r["config"]["algorithm"]["name"]) not in changed]
    kept.write_bytes(dumps(keep))
    roots = [str(kept), *(str(run_folder(runs, m, r) / "runs") for m, r in point.rates)]
    out = work / "report"
    report = report_command(args, roots, out)
    print(f"{point.name}: $ " + " ".join(report[1:]), flush=True)
    code = run_sweep(report)  # as a sweep's command: its own process group, stops passed on
    if code != 0:
        print(
            f"error: the report of {point.name} ended with exit code {code} (its line above): "
            "nothing compared",
            file=sys.stderr,
        )
        return None
    made = root / "results" / args.preset / args.scale / "points"
    made.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(out / "claims.md", made / f"{point.slug}.md")
    return read_claims(out / "claims.json")


if __name__ == "__main__":
    sys.exit(main())
