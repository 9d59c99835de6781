"""Rerun a sample of the committed points and compare them with their records (issue 33).

    python -m analysis.reproduce.verify [RESULT_DIR ...] [--points sample|all] [--out DIR]
    make verify                                  (every result's sample, <= 10 min on 2 cores)

Each point is one committed run (a line of the result's `runs.jsonl.gz`); it is trained again with
`python run.py` from the overrides that made it (its `out_root` replaced by a scratch folder, W&B
off), and its new record is compared with the committed one:

- **the same run**: the rerun's identity digest must equal the record's (or today's digest of
  the record's config, for a record made before the identity left out a key the algorithm does
  not read, experiments/config/identity.py). Another digest means the checkout composes another
  configuration for those overrides (conf/ or the code changed since the result was made):
  the point is not that run any more, which is a difference;
- **what no platform changes**: status, steps, bytes communicated: equal;
- **identical** where the platform fingerprint (experiments/store/fingerprint.py) equals the
  record's: every evaluation's test accuracy, test loss and training loss, bit for bit. One
  platform, one configuration: one trajectory; anything else is a defect;
- **within tolerance** where the fingerprint differs: the final test accuracy within
  TOLERANCE_SDS x the seed-to-seed standard deviation of the point's row (the committed runs
  that differ from it only in the seed), and never closer than MIN_TOLERANCE (a few test
  images). Why so wide: another CPU (or ISA cap, or MKL/oneDNN version) rounds differently in
  its kernels' sums; after hundreds of SGD steps that first-bit difference has grown into a
  trajectory as different as another seed's, so the committed spread across seeds is the
  yardstick. Bit-identity across CPU classes was measured not to be had at an acceptable cost
  (docs/reproducing.md);
- **every verdict unchanged**: the result's claims are recomputed with the reruns in place of
  their records, and each verdict (holds / does not hold / cannot tell) must be the committed one.

What a different platform may change: the digits of every accuracy and loss (kernels' rounding:
ATen's vector ISA, oneDNN's convolutions, MKL's GEMM), and times to a target on the virtual clock
(it books the measured time of each algorithm's own step); never the identity, the steps, the
bytes, or a verdict. On a time budget (`budget=time`) a rerun whose calibration measured another
algorithm time makes other numbers of steps, and sends other bytes, by T: there its steps and
bytes are not compared, its accuracy is (within tolerance).

One line per point and per result, and first the platform and the checkout (its commit and
the tracked files it modified: a modified checkout is named, not hidden behind "identical");
exit 0 when everything reproduces, 1 with the differing points named, 2 for bad input (one
`error:` line, before any rerun): a result without its `provenance.txt` or its records, a
damaged record, a `--run` that names no finished committed run, a result none of whose points
is in the sample (a check of nothing is no pass), an `--out` that is a file or lies in a
result or a committed results tree. Ctrl-C is exit 130, stop signal N 128 + N (one `error:`
line, analysis/stops.py): the rerun in progress is stopped with its process group (its
workers too), and nothing is said of its point.

What it writes: the reruns' records, in a scratch folder (`--out DIR`, else the system's
temporary folder) removed when it ends; never a committed file.
"""

from __future__ import annotations

if __name__ == "__main__":  # a stop while the analysis imports (seconds): one line, no work
    from analysis.stops import stop_early

    stop_early("verify")

import json  # noqa: E402 - after the stop handlers above
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from analysis.reproduce.recompute import (
    PROVENANCE,
    checkout_line,
    chosen_results,
    modified_files,
    outcome,
    parse_results_args,
    quiet_report,
    refuse_out,
    report_args,
    results_parser,
    results_trees,
)
from analysis.runs.load import find_runs
from analysis.runs.records import RECORDS, dumps, read_records, run_record
from analysis.stops import stoppable
from experiments.config.identity import digest, identity_config
from experiments.errors import UserError, refuse_inert_flags
from experiments.store import records as run_records
from experiments.store.fingerprint import describe
from experiments.store.provenance import REPO
from experiments.sweep import kill_group
from experiments.workers.startup import stops_held

TOLERANCE_SDS = 3.0
MIN_TOLERANCE = 0.01
# The stated sample: for each preset, the points `make verify` reruns, as config values a record
# must match (dotted keys). One seed of every algorithm of the demo; a few points of the others,
# chosen across their algorithms and settings: 27 runs of the committed results (fig4's PowerSGD
# at each rank, low_comm's DiLoCo on each network; docs/reproducing.md says how long).
SAMPLE: dict[str, list[dict[str, Any]]] = {
    "demo": [{"seed": 0}],
    "table1": [
        {"algorithm.name": "local_sgd", "tau": 2, "seed": 0},
        {"algorithm.name": "overlap_local_sgd", "tau": 4, "seed": 1},
    ],
    "table2": [{"algorithm.name": "cocod_sgd", "tau": 2, "seed": 0}],
    "fig4": [{"algorithm.name": "powersgd", "seed": 0}],
    "fig5": [{"algorithm.name": "overlap_local_sgd", "seed": 0}],
    "low_comm": [{"algorithm.name": "diloco", "seed": 0}],
    # the verdicts' presets (fmnist): one point each, the methods their claims are about
    "controls": [{"algorithm.name": "losp", "seed": 0}],
    "losp": [{"algorithm.name": "losp", "tau": 2, "seed": 0}],
    "overlap_straggler": [{"algorithm.name": "overlap_local_sgd", "seed": 0}],
    "pseudo_sync": [{"algorithm.name": "pseudo_sync", "workers": 4, "seed": 0}],
    "pseudo_sync_speed": [{"algorithm.name": "pseudo_sync", "seed": 0}],
    "overlap_sync": [{"algorithm.name": "overlap_local_sgd", "tau": 1, "seed": 0}],
}
# Overrides that say where or how a run is watched, not what it computes: replaced for a rerun.
SCRATCH_KEYS = ("out_root", "wandb", "progress", "rerun", "hydra")
EXACT = ("test/acc", "test/loss", "train/loss")
CLAIM_LINE = re.compile(r"- \*\*(?P<verdict>[a-z ]+)\*\*: .*\(`(?P<name>[^`]+)`\)")


def _get(config: Mapping[str, Any], dotted: str) -> Any:
    node: Any = config
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def select(
    records: Sequence[dict[str, Any]], preset: str, everything: bool, runs: Sequence[str] = ()
) -> list[dict]:
    """The records of the points to rerun: those named in `runs`, else all, else those matching
    the preset's SAMPLE."""
    finished = [r for r in records if r["summary"].get("status") in ("completed", "diverged")]
    if runs:
        return [r for r in finished if r["run"] in runs]
    if everything:
        return finished
    wanted = SAMPLE.get(preset, [])
    return [r for r in finished if any(_matches(r["config"], w) for w in wanted)]


def _matches(config: Mapping[str, Any], wanted: Mapping[str, Any]) -> bool:
    return all(_get(config, k) == v for k, v in wanted.items())


def row_key(config: Mapping[str, Any]) -> str:
    """The configuration of a run without its seed: the runs of one table row share it."""
    ident = identity_config(config)
    ident.pop("seed", None)
    return json.dumps(ident, sort_keys=True, default=str)


def tolerance(record: dict, records: Sequence[dict]) -> tuple[float, str]:
    """The final accuracy's tolerance across platforms for `record`, and how it was derived."""
    key = row_key(record["config"])
    accs = [
        float(r["summary"]["final/test_acc"])
        for r in records
        if row_key(r["config"]) == key and r["summary"].get("final/test_acc") is not None
    ]
    if len(accs) < 2:
        return MIN_TOLERANCE, f"{MIN_TOLERANCE} (the row has {len(accs)} seed: no spread)"
    sd = statistics.stdev(accs)
    tol = max(TOLERANCE_SDS * sd, MIN_TOLERANCE)
    how = f"{TOLERANCE_SDS:g} x the row's seed sd {sd:.4f} (n = {len(accs)})"
    if tol == MIN_TOLERANCE:
        how += f", floor {MIN_TOLERANCE}"
    return tol, how


def rerun_overrides(record: dict, out_root: Path) -> list[str]:
    """The overrides that made the run, with its outputs sent to `out_root` and W&B off."""
    kept = [
        o
        for o in record.get("overrides") or []
        if o.lstrip("+~").split("=", 1)[0].split(".", 1)[0] not in SCRATCH_KEYS
    ]
    return [*kept, f"out_root={out_root}", "wandb.mode=disabled", "progress=false"]


# How long a stopped rerun gets to stop on its Ctrl-C (run.py: at once without a checkpoint)
# before its process group is killed.
STOP_GRACE_S = 10.0


def rerun(record: dict, out_root: Path) -> dict[str, Any]:
    """Train the point again; its new record (as `records.run_record` reads it). A stop of this
    command (Ctrl-C, a stop signal: raised here by analysis/stops.py) stops the rerun first:
    its own process group (run.py, its workers), Ctrl-C then, after STOP_GRACE_S, SIGKILL."""
    overrides = rerun_overrides(record, out_root)
    # a session of its own: a stop reaches it from here once, not also from the terminal
    proc = subprocess.Popen(
        [sys.executable, str(REPO / "run.py"), *overrides],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
        start_new_session=True,
    )
    try:
        _, stderr = proc.communicate()
    except BaseException:
        with stops_held():
            _stop_group(proc)
        raise
    finally:
        kill_group(proc, only_left=True)  # nothing of the rerun outlives it (a worker run.py left)
    if proc.returncode != 0:
        said = (stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
        raise UserError(f"the rerun failed (exit {proc.returncode}): {said}")
    ident = record["summary"].get("identity")
    # Its identity then, or today's digest of its config: a run recorded before the identity
    # left a key out (tau of a tau-less method) is today's run of that digest.
    same = {ident, digest(record["config"])}
    made = [run_record(d, record["run"], out_root) for d in find_runs(out_root)]
    for new in made:
        if new["summary"].get("identity") in same:
            return new
    found = [new["summary"].get("identity") for new in made]
    raise UserError(
        f"the rerun is another run (identity {', '.join(map(str, found)) or 'none'}, the record's "
        f"{ident}): conf/ or the code composes another configuration for its overrides now"
    )


def _stop_group(proc: subprocess.Popen) -> None:
    """Ctrl-C to the rerun's process group; SIGKILL after STOP_GRACE_S."""
    try:
        os.killpg(proc.pid, signal.SIGINT)
    except OSError:
        pass
    try:
        proc.wait(timeout=STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        kill_group(proc)


def _acc(value: Any) -> str:
    return "none" if value is None else f"{value:.4f}"


def compare_point(record: dict, new: dict, records: Sequence[dict]) -> tuple[bool, str]:
    """(reproduces, one line) for a point and its rerun."""
    old_s, new_s = record["summary"], new["summary"]
    exact = ("status", "steps", "comm/bytes")
    # a time budget ends at T on a clock that books the algorithm's measured work: with
    # another measurement the workers make other numbers of steps (and bytes) by T, and on
    # the record's own platform other digits: its accuracy is compared within tolerance
    clock = _clock_differs(old_s, new_s)
    if clock:
        exact = ("status",)
    for key in exact:
        if old_s.get(key) != new_s.get(key):
            return False, f"{key} {new_s.get(key)!r}, committed {old_s.get(key)!r}"
    old_p, new_p = old_s.get("platform") or {}, new_s.get("platform") or {}
    acc_old, acc_new = old_s.get("final/test_acc"), new_s.get("final/test_acc")
    if old_p.get("key") and old_p.get("key") == new_p.get("key") and not clock:
        for name in EXACT:
            a = [m.get(name) for m in record["metrics"]]
            b = [m.get(name) for m in new["metrics"]]
            if a != b:
                first = (
                    next(i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y)
                    if len(a) == len(b)
                    else 0
                )
                return False, (
                    f"not identical on the record's own platform [{old_p['key']}]: {name} at "
                    f"evaluation {first + 1}: {b[first] if b else None!r}, committed "
                    f"{a[first] if a else None!r}"
                )
        return (
            True,
            f"identical (final acc {_acc(acc_new)}; platform [{new_p['key']}] = the record's)",
        )
    if acc_old is None or acc_new is None:  # a run with no final accuracy (none evaluated)
        same = acc_old is None and acc_new is None
        line = f"final acc {_acc(acc_new)}, committed {_acc(acc_old)}"
        return same, ("within tolerance: " if same else "") + line
    tol, how = tolerance(record, records)
    diff = abs(float(acc_new) - float(acc_old))
    where = f"platform [{new_p.get('key')}], the record's [{old_p.get('key') or 'not recorded'}]"
    line = (
        f"final acc {acc_new:.4f}, committed {acc_old:.4f}: |diff| {diff:.4f} "
        f"{'<=' if diff <= tol else '>'} {tol:.4f} = {how}; {where}"
    )
    return diff <= tol, ("within tolerance: " if diff <= tol else "") + line


def _clock_differs(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """A time budget's run (budget=time) whose virtual clock the rerun calibrated otherwise:
    another measured algorithm time (or step time) per step."""
    if old.get("budget/time_s") is None:
        return False
    return any(
        old.get(key) != new.get(key) for key in ("compute/algo_time_s", "compute/step_time_s")
    )


def verdicts(records: Sequence[dict], result: Path, work: Path, tag: str) -> dict[str, str]:
    """Claim name -> verdict of the result's report made from `records`."""
    bundle = work / f"{tag}-{RECORDS}"
    run_records.write_bytes_atomic(bundle, dumps(list(records)))
    out = work / f"{tag}-report"
    args = report_args(result, out)
    args[args.index(str(result / RECORDS))] = str(bundle)
    failure = quiet_report(args)
    if failure:
        raise UserError(f"{tag}: {failure}")
    found = {}
    if not (out / "claims.md").is_file():
        if (result / "claims.md").is_file():  # the committed result has claims: a part missing
            raise UserError(f"{tag}: the report made no claims.md, the result has one")
        return found
    for line in run_records.read_text(out / "claims.md").splitlines():
        # claims.md (analysis.claims.claims_markdown): "- **<verdict>**: <text> (`<name>`). ..."
        match = CLAIM_LINE.match(line)
        if match:
            found[match["name"]] = match["verdict"]
    return found


def verify_result(
    result: Path, records: Sequence[dict], points: Sequence[dict], work: Path
) -> list[str]:
    """Rerun `points` of `result` (its `records`, `select`ed); the names of those that did not
    reproduce (and `<result> claims` where a verdict changed)."""
    name = f"{result.resolve().parent.name}/{result.resolve().name}"
    failed: list[str] = []
    reruns: dict[str, dict] = {}
    for record in points:
        started = time.monotonic()
        scratch = work / name.replace("/", "-") / record["run"].replace("/", "-")
        try:
            new = rerun(record, scratch)
        except UserError as error:
            failed.append(f"{name} {record['run']}")
            print(f"{name} {record['run']}: DIFFERS: {error}", flush=True)
            continue
        reruns[record["run"]] = new
        ok, line = compare_point(record, new, records)
        took = time.monotonic() - started
        if not ok:
            failed.append(f"{name} {record['run']}")
            line = f"DIFFERS: {line}"
        print(f"{name} {record['run']}: {line} ({took:.0f} s)", flush=True)
    if reruns:
        try:
            before = verdicts(records, result, work, "committed")
            after = verdicts([reruns.get(r["run"], r) for r in records], result, work, "reruns")
        except UserError as error:
            failed.append(f"{name} claims")
            print(f"{name}: DIFFERS: the verdicts could not be recomputed: {error}", flush=True)
            return failed
        changed = [
            f"{c}: {before[c]} -> {after.get(c)}" for c in before if after.get(c) != before[c]
        ]
        if changed:
            failed.append(f"{name} claims")
            print(f"{name}: DIFFERS: verdicts changed with the reruns: {'; '.join(changed)}")
        else:
            print(f"{name}: {len(before)} claim verdicts unchanged with the reruns in place")
    return failed


def chosen_points(
    dirs: Sequence[Path], everything: bool, runs: Sequence[str]
) -> list[tuple[Path, list[dict], list[dict]]]:
    """Each result to verify with its records and the points to rerun; a UserError (before any
    rerun) for a result missing a part or with a damaged record, a --run that names no finished
    committed run, and a result none of whose points would be rerun: a check of nothing is no
    pass. With --run, the results holding none of the runs named are left out."""
    chosen = []
    names: dict[str, str] = {}
    for d in dirs:
        if not (d / RECORDS).is_file():
            raise UserError(f"{d}: no {RECORDS}: nothing to verify against")
        records = read_records(d / RECORDS)
        names |= {r["run"]: r["summary"]["status"] for r in records}
        points = select(records, d.resolve().parent.name, everything, runs)
        chosen.append((d, records, points))
    for run in runs:
        where = f"its {RECORDS}" if len(dirs) == 1 else f"the {RECORDS} of {len(dirs)} results"
        if run not in names:
            raise UserError(f"{dirs[0] if len(dirs) == 1 else 'verify'}: no committed run {run} "
                            f"in {where}")  # fmt: skip
        if names[run] not in ("completed", "diverged"):
            raise UserError(f"run {run} is {names[run]}, not finished: nothing to rerun")
    for d, _, points in chosen:
        if not (d / PROVENANCE).is_file():
            raise UserError(f"{d}: no {PROVENANCE} (nothing says how the result was made)")
        if not points and not runs:
            what = (
                "finished run"
                if everything
                else "point of the sample (SAMPLE in analysis/reproduce/verify.py)"
            )
            raise UserError(f"{d}: no {what} among its committed runs: nothing to verify")
    return [c for c in chosen if c[2]]


@stoppable("verify")
def main(argv: Sequence[str] | None = None) -> int:
    parser = results_parser("python -m analysis.reproduce.verify", __doc__)
    parser.add_argument(
        "--points",
        choices=("sample", "all"),
        default=None,
        help="sample (default): analysis/reproduce/verify.py's SAMPLE; all: every finished run",
    )
    parser.add_argument(
        "--run",
        action="append",
        default=[],
        metavar="NAME",
        help="rerun only this committed run (its name in runs.jsonl.gz; repeatable)",
    )
    parser.add_argument("--out", type=Path, default=None, metavar="DIR", help="scratch folder")
    args = parse_results_args(parser, argv)
    refuse_inert_flags(
        parser,
        [
            ("--points", args.points is not None and bool(args.run),
             "with --run (the runs it names are the points rerun)"),
        ],
    )  # fmt: skip
    try:
        dirs = chosen_results(args)
        chosen = chosen_points(dirs, args.points == "all", args.run)
        if args.out is not None:
            refuse_out(args.out, dirs, results_trees(args), "the reruns' scratch")
            try:
                args.out.mkdir(parents=True, exist_ok=True)
            except OSError as error:
                raise UserError(f"--out {args.out}: {error.strerror or error}") from None
    except UserError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    from experiments.store.fingerprint import platform_fingerprint
    from experiments.store.records import git_commit

    print(f"this platform: {describe(platform_fingerprint())}", flush=True)
    commit = git_commit()
    modified = modified_files() if commit.endswith("-dirty") else []
    print(checkout_line(commit, modified), flush=True)
    failed: list[str] = []
    try:
        work = tempfile.TemporaryDirectory(prefix="verify-", dir=args.out)
    except OSError as error:
        print(f"error: --out {args.out}: {error.strerror or error}", file=sys.stderr)
        return 2
    with work:
        for result, records, points in chosen:
            failed += verify_result(result, records, points, Path(work.name))
    points = sum(len(p) for _, _, p in chosen)
    where = f" on a checkout with {len(modified)} modified tracked files" if modified else ""
    return outcome(
        failed,
        f"{len(failed)} point(s) do not reproduce",
        f"every verified point reproduces ({points} points of {len(chosen)} results{where})",
    )


if __name__ == "__main__":
    raise SystemExit(main())
