"""A preset's committed claims tested again on seeds the suite never used (issue 49).

    python -m analysis.reproduce.replicate PRESET [--scale fmnist] [--seeds 200-207]
        [--results results] [--out-root outputs] [--cluster sim] [--jobs N] [--publish]
        [key=value ...]
    make replicate PRESET=losp                         (at VERDICT_SCALE; PUBLISH=1: committed)

A verdict rests on one set of seeds; a reviewer asks whether it holds on another. This reruns the
preset's whole sweep as committed (its setting, its grids, the rates in its tuning file) on
`--seeds`, which must be disjoint from the committed runs' seeds (read from the result's
`runs.jsonl.gz`) and from the tuning seeds (analysis.runs.grid.TUNING_SEEDS); by default as
many seeds as the committed result has, from FRESH_FROM up. The runs go to
`<out-root>/replicate/<preset>/runs`, their report (`python -m experiments.sweep`, the same
claims) to `<out-root>/replicate/results/<preset>/<scale>/`, and beside it:

- `replication.json`: per claim its committed verdict, the replication's and whether it
  replicates (`replicates`: true or false for a decisive committed verdict, holds or does not
  hold: it replicates when the fresh seeds give the same verdict; null for a committed "cannot
  tell", which has nothing to replicate), with the replication's deciding line;
- `replication.md`: the same as a table, and the count of decisive verdicts that replicate.

`--publish` (`make replicate PUBLISH=1`) copies that folder, whole, to
`<results>/<preset>/<scale>/replication/` (a previous one is replaced at once), where the
verdicts page (analysis/reports/verdict_page.py) reads it: a decisive verdict that does not
replicate is shown and counted as such, not as decided. It needs a clean checkout, and runs made
from one, as the sweep's own `--publish`.

Bad input is refused before any run (exit 2, one `error:` line): an unknown preset, no committed
result (or a damaged `claims.json` or records), seeds that are not whole numbers or that overlap
the committed or tuning seeds, `--publish` on a modified checkout. Exit codes: 0 written (whether
or not every verdict replicates: that is the result); 1 a point of the sweep failed (its report
and this comparison are not written); 2 bad input; 130 / 128 + N a stop (passed on to the sweep,
whose run checkpoints: the same command resumes it).
"""

from __future__ import annotations

import sys

if __name__ == "__main__":  # a stop while the analysis imports (seconds): one line, no work
    from analysis.stops import stop_early

    stop_early("replicate")

import argparse  # noqa: E402 - after the stop handlers above
import json  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402
from collections.abc import Sequence  # noqa: E402
from pathlib import Path  # noqa: E402

from analysis.reports.staging import swap_folder  # noqa: E402
from analysis.reports.verdict_page import DECISIVE, REPLICATION, read_claims  # noqa: E402
from analysis.runs.grid import TUNING_SEEDS  # noqa: E402
from analysis.runs.records import RECORDS, read_records  # noqa: E402
from analysis.stops import run_sweep, stoppable  # noqa: E402
from experiments.errors import UserError, one_line_errors  # noqa: E402
from experiments.store.provenance import REPO, command_line  # noqa: E402
from experiments.store.records import git_commit, write_text_atomic  # noqa: E402
from experiments.workers.startup import stops_held  # noqa: E402

#: The first seed of a replication by default: above the evaluation seeds (0-9, the presets'
#: `seed` lists) and the tuning seeds (100-101).
FRESH_FROM = 200
#: The folder a published replication takes inside its result and its comparison (the verdicts
#: page reads them); a "cannot tell" (not in DECISIVE) has nothing to replicate.
FOLDER, JSON = REPLICATION
MD = "replication.md"


def seeds_text(seeds: Sequence[int]) -> str:
    """`0-7` for a run of consecutive seeds, else `0, 3, 5`."""
    s = sorted(seeds)
    if len(s) > 2 and s == list(range(s[0], s[-1] + 1)):
        return f"{s[0]}-{s[-1]}"
    return ", ".join(str(x) for x in s)


def parse_seeds(text: str) -> list[int]:
    """`200-207` or `200,201,205`: whole numbers >= 0, each once; a UserError otherwise."""
    try:
        if "-" in text.strip().lstrip("-"):
            low, high = (int(part) for part in text.split("-"))
            seeds = list(range(low, high + 1))
        else:
            seeds = [int(part) for part in text.split(",")]
    except ValueError:
        raise UserError(
            f"--seeds {text!r}: give a range (200-207) or a list (200,201,205)"
        ) from None
    if not seeds or min(seeds) < 0 or len(set(seeds)) != len(seeds):
        raise UserError(f"--seeds {text!r}: seeds must be whole numbers >= 0, each once")
    return seeds


def committed_seeds(result: Path) -> list[int]:
    """The seeds of the committed result's runs (its records; a UserError names what is
    missing or damaged)."""
    records = result / RECORDS
    if not records.is_file():
        raise UserError(f"{records}: missing (the committed result has no records to replicate)")
    return sorted({int(r["config"]["seed"]) for r in read_records(records)})


def choose_seeds(asked: str | None, committed: Sequence[int]) -> list[int]:
    """`--seeds`, or as many as `committed` from FRESH_FROM up; refused when they overlap the
    committed or the tuning seeds."""
    fresh = list(range(FRESH_FROM, FRESH_FROM + len(committed)))  # above the tuning seeds
    seeds = parse_seeds(asked) if asked else fresh
    for used, what in ((committed, "the committed runs'"), (TUNING_SEEDS, "the tuning")):
        shared = sorted(set(seeds) & set(used))
        if shared:
            raise UserError(
                f"--seeds {seeds_text(seeds)} overlap {what} seeds ({seeds_text(shared)}): a "
                "replication needs seeds its verdicts were not found or tuned on"
            )
    return seeds


def compare(committed: list[dict], replicated: list[dict]) -> list[dict]:
    """Per committed claim: its verdict, the replication's, and whether it replicates (None
    for a committed claim that is not decisive, or that the replication did not check)."""
    again = {c["name"]: c for c in replicated}
    out = []
    for claim in committed:
        new = again.get(claim["name"])
        verdict = new["verdict"] if new else "not checked"
        decisive = claim["verdict"] in DECISIVE
        out.append(
            {
                "name": claim["name"],
                "text": claim["text"],
                "committed": claim["verdict"],
                "replication": verdict,
                "replicates": (verdict == claim["verdict"]) if decisive and new else None,
                "line": ((new or {}).get("deciding") or {}).get("line", ""),
            }
        )
    return out


def markdown(doc: dict) -> str:
    """replication.md: the comparison as a table, and the count."""
    decisive = [c for c in doc["claims"] if c["replicates"] is not None]
    held = sum(c["replicates"] for c in decisive)
    lines = [
        f"# Replication of {doc['preset']} at {doc['scale']} on seeds {doc['seeds_text']}",
        "",
        f"`{doc['command']}`: the preset's sweep as committed (its setting, its tuned rates) on "
        f"seeds {doc['seeds_text']} (n = {len(doc['seeds'])}), disjoint from the committed runs' "
        f"seeds ({doc['committed_seeds_text']}) and the tuning seeds. A decisive verdict (holds, "
        "does not hold) replicates when the fresh seeds give the same verdict; a committed "
        '"cannot tell" has nothing to replicate (its replication is shown).',
        "",
        "| claim | committed | replication | replicates | the replication's deciding comparison |",
        "|---|---|---|---|---|",
    ]
    for c in doc["claims"]:
        mark = {True: "yes", False: "**no**", None: "–"}[c["replicates"]]
        line = c["line"].replace("|", "\\|") or "–"
        lines.append(f"| {c['name']} | {c['committed']} | {c['replication']} | {mark} | {line} |")
    lines += ["", f"Replicated: {held} of {len(decisive)} decisive verdicts."]
    return "\n".join(lines) + "\n"


def publish(made: Path, result: Path, folder: str = FOLDER) -> Path:
    """Copy the folder `made` (a replication; analysis/reproduce/robustness.py's check) into
    `result/folder`, whole: staged beside it, then swapped in in one step with the stop signals
    held (analysis/reports/staging.py `swap_folder`, as a report's folder): a stop or a failure
    leaves the previous one."""
    target = result / folder
    stage = Path(tempfile.mkdtemp(prefix=f".{folder}.", suffix=".tmp", dir=result))
    try:
        shutil.copytree(made, stage, dirs_exist_ok=True)
        with stops_held():
            if target.exists():
                swap_folder(stage, target)  # the previous one now at `stage`, removed below
            else:
                os.rename(stage, target)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return target


def check_preset(name: str) -> None:
    """A UserError naming the presets when `name` is not one of conf/experiment/."""
    presets = sorted(p.stem for p in (REPO / "conf" / "experiment").glob("*.yaml"))
    if name not in presets:
        raise UserError(f"unknown preset {name!r}; presets: {', '.join(presets)}")


def check_clean(what: str) -> None:
    """A UserError when the checkout has modified tracked files: `what` (published) must come
    from a commit."""
    if git_commit(REPO).endswith("-dirty"):
        raise UserError(
            "--publish (PUBLISH=1) needs a clean checkout: tracked files are modified (git "
            f"status); {what} must come from a commit"
        )


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m analysis.reproduce.replicate", description=__doc__)
    p.add_argument("preset", help="a preset of conf/experiment/ with a committed result")
    p.add_argument("--scale", default="fmnist")
    p.add_argument("--seeds", help=f"default: as many as committed, from {FRESH_FROM} up")
    p.add_argument("--results", default="results", help="where the committed result is")
    p.add_argument("--out-root", default="outputs", help="runs and report under OUT/replicate")
    p.add_argument("--cluster", default="sim", help="sim (default) | local | slurm")
    p.add_argument("--jobs", type=int, default=1, help="concurrent sweeps (experiments.sweep)")
    p.add_argument("--publish", action="store_true", help="copy into <results>/<preset>/<scale>")
    p.add_argument("overrides", nargs="*", help="extra key=value overrides for every run")
    one_line_errors(p)
    return p


@stoppable("replicate")
def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_intermixed_args(argv)
    command = command_line(
        argv if argv is not None else sys.argv[1:],
        args.out_root,
        module="analysis.reproduce.replicate",
    )
    try:
        check_preset(args.preset)
        result = Path(args.results) / args.preset / args.scale
        claims = result / "claims.json"
        if not claims.is_file():
            raise UserError(
                f"{claims}: missing (no committed result of {args.preset} at {args.scale} to "
                "replicate)"
            )
        committed = read_claims(claims)
        used = committed_seeds(result)
        seeds = choose_seeds(args.seeds, used)
        if any(o.split("=", 1)[0].lstrip("+~") == "seed" for o in args.overrides):
            raise UserError("give the seeds with --seeds, not seed=")
        if args.publish:
            check_clean("a published replication")
    except UserError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    root = Path(args.out_root) / "replicate"
    made = root / "results" / args.preset / args.scale
    cmd = [
        sys.executable,
        "-m",
        "experiments.sweep",
        args.preset,
        "--scale",
        args.scale,
        "--cluster",
        args.cluster,
        "--out-root",
        str(root.resolve()),
        "--results",
        str((root / "results").resolve()),
        *(["--jobs", str(args.jobs)] if args.jobs != 1 else []),
        f"seed={','.join(str(s) for s in seeds)}",
        *args.overrides,
    ]
    for stale in (made / JSON, made / MD):  # a comparison must never sit beside another report
        stale.unlink(missing_ok=True)
    print(f"replicate {args.preset} at {args.scale} on seeds {seeds_text(seeds)}", flush=True)
    print("$ " + " ".join(cmd[1:]), flush=True)
    code = run_sweep(cmd)
    if code != 0:
        print(
            f"error: the replication's sweep ended with exit code {code}: no comparison written "
            "(the same command resumes it)",
            file=sys.stderr,
        )
        return code if code in (1, 2) else 1
    try:
        replicated = read_claims(made / "claims.json")
    except UserError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    doc = {
        "preset": args.preset,
        "scale": args.scale,
        "command": command,
        "seeds": seeds,
        "seeds_text": seeds_text(seeds),
        "committed_seeds": used,
        "committed_seeds_text": seeds_text(used),
        "claims": compare(committed, replicated),
    }
    write_text_atomic(made / JSON, json.dumps(doc, indent=1) + "\n")
    write_text_atomic(made / MD, markdown(doc))
    mark = {True: "replicates", False: "does NOT replicate", None: "(not decisive)"}
    for c in doc["claims"]:
        print(f"{c['name']}: {c['committed']} -> {c['replication']}: {mark[c['replicates']]}")
    print(f"written: {made / MD}")
    if args.publish:
        if not publishable([root / args.preset / "runs"], args, made / MD):
            return 1
        print(f"published: {publish(made, result)}")
    return 0


def publishable(runs: Sequence[Path], args: argparse.Namespace, written: Path) -> bool:
    """Whether what `--publish` would copy came from a commit: no run under the `runs` folders
    made on a modified checkout, and the checkout clean now; else one `error:` line."""
    from experiments.sweep import dirty_runs

    dirty = [d for folder in runs for d in dirty_runs(folder, args.preset, args.scale)]
    if not dirty and not git_commit(REPO).endswith("-dirty"):
        return True
    print(
        f"error: --publish: {len(dirty) or 'no'} run(s) made on a modified checkout"
        f"{f' ({dirty[0]})' if dirty else ', but the checkout is modified now'}: "
        f"not published; {written} is written",
        file=sys.stderr,
    )
    return False


if __name__ == "__main__":
    sys.exit(main())
