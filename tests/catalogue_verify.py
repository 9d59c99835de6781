"""The catalogue's cases of issue 50 (the results tools as safe as the training engine) for `python
-m analysis.reproduce.verify` (make verify): tests/test_catalogue.py runs them with the others
(tests/catalogue.py's machinery).

Each case works on a copy of the committed demo result (tests/catalogue_recompute.py's helpers).
The refusals rerun nothing; the stop cases rerun one point made long (smoke scale, synthetic
data, 100 epochs) and stop it while it starts or trains: the rerun, its workers too, must end."""

from __future__ import annotations

import signal

from tests.catalogue import (
    Case,
    Ctx,
    Result,
    planted,
    plants,
    running_run_py,
    send,
    then,
    when,
    workers,
)
from tests.catalogue_recompute import (
    BINARY,
    FINISHED_LINE,
    RECORDS,
    altered_record,
    checks,
    demo_result,
    output_has,
    records_of,
    write_records,
)

FIRST = "cocod_sgd-tau4-seed0-32b703af34"  # the demo result's first record (seed 0: sampled)
LONG_RERUN = ["scale=smoke", "dataset=synthetic", "epochs=100", "dataset.num_train=512", "seed=0"]


def V(name: str, cls: str, args: str, line: str = "", code: int = 2, **kw) -> Case:
    kw.setdefault("fast_args", False)
    kw.setdefault("out_root", False)
    return Case(f"verify-{name}", cls, tuple(args.split()), code=code, line=line, cmd="verify",
                **kw)  # fmt: skip


def _set(path: str, value):
    def change(record: dict) -> None:
        *parents, last = path.split(".")
        node = record
        for key in parents:
            node = node[key]
        node[last] = value

    return change


def first_rerun_long(ctx: Ctx) -> None:
    """The result holds its first record alone, rerun as a long smoke run."""
    path = ctx.tmp / "results" / "demo" / "cpu" / RECORDS
    (record,) = [r for r in records_of(path) if r["run"] == FIRST]
    record["overrides"] = list(LONG_RERUN)
    write_records(path, [record])


def duplicated(ctx: Ctx) -> None:
    path = ctx.tmp / "results" / "demo" / "cpu" / RECORDS
    records = records_of(path)
    write_records(path, [records[0], *records])


def rerun_training(ctx: Ctx) -> bool:
    """The rerun's workers are up (it trains, or starts to)."""
    return bool(workers(ctx))


def importing(ctx: Ctx) -> bool:
    from tests.catalogue import catches

    return catches(ctx.proc.pid, signal.SIGTERM)


def no_scratch_left(ctx: Ctx, result: Result) -> None:
    left = list((ctx.tmp / "scratch").iterdir()) if (ctx.tmp / "scratch").exists() else []
    assert not left, f"{ctx.case.id}: the reruns' scratch stayed: {left}"


def modified_checkout(monkeypatch, ctx: Ctx) -> None:
    """A checkout with a modified tracked file, which verify must name."""
    import analysis.reproduce.verify
    import experiments.store.records

    monkeypatch.setattr(analysis.reproduce.verify, "modified_files", lambda: ["analysis/claims/"])
    monkeypatch.setattr(
        experiments.store.records, "git_commit", lambda repo=None: "0" * 40 + "-dirty"
    )


def stopped(sig: int) -> str:
    what = "interrupted by Ctrl-C" if sig == signal.SIGINT else f"stopped by {sig.name}"
    return rf"^error: verify: {what}; {FINISHED_LINE}$"


RESULT = "{tmp}/results/demo/cpu"
LONG = plants(demo_result(), first_rerun_long)
# no verdict on the whole ("every verified point reproduces", "... do not reproduce"): the words,
# not "reproduce" alone, which a checkout's modified files (tests/analysis/reproduce/...) contain
STOP_CHECK = checks(
    no_scratch_left,
    output_has(absent=("DIFFERS", FIRST, "point reproduces", "not reproduce")),
)

CASES: list[Case] = [
    # --- class 1: --out onto a file, a result, a committed results tree: refused first
    V(
        "out-a-file",
        "results-out",
        f"{RESULT} --out {{tmp}}/notes.txt",
        r"^error: --out \S+/notes.txt is a file, not a folder",
        setup=plants(demo_result(), planted("notes.txt", "mine")),
    ),
    V(
        "out-its-own-records-file",
        "results-out",
        f"{RESULT} --out {RESULT}/runs.jsonl.gz",
        r"^error: --out \S+/runs.jsonl.gz is a file, not a folder",
        setup=demo_result(),
    ),
    V(
        "out-inside-the-result",
        "results-out",
        f"{RESULT} --out {RESULT}/scratch",
        r"^error: --out \S+/scratch is inside the result \S+/demo/cpu \(the command's input\)",
        setup=demo_result(),
    ),
    V(
        "out-inside-the-results-tree",
        "results-out",
        "--results {tmp}/results --out {tmp}/results/scratch",
        r"^error: --out \S+ is inside the committed results tree ",
        setup=demo_result(),
    ),
    V(
        "out-below-a-file",
        "results-out",
        f"{RESULT} --out {{tmp}}/notes.txt/scratch",
        r"^error: --out \S+/notes.txt/scratch: Not a directory$",
        setup=plants(demo_result(), planted("notes.txt", "mine")),
    ),
    # --- class 2: a check of nothing, or less than asked, fails before any rerun
    V(
        "run-names-nothing",
        "results-checks",
        f"{RESULT} --run nothing-like-it",
        r"^error: \S+/demo/cpu: no committed run nothing-like-it in its runs.jsonl.gz$",
        setup=demo_result(),
    ),
    V(
        "run-names-nothing-of-two-results",
        "results-checks",
        "{tmp}/results/demo/a {tmp}/results/demo/b --run nothing-like-it",
        r"^error: verify: no committed run nothing-like-it in the runs.jsonl.gz of 2 results$",
        setup=plants(demo_result("results/demo/a"), demo_result("results/demo/b")),
    ),
    V(
        "run-names-an-unfinished-run",
        "results-checks",
        f"{RESULT} --run {FIRST}",
        rf"^error: run {FIRST} is failed, not finished: nothing to rerun$",
        setup=plants(demo_result(), altered_record(_set("summary.status", "failed"))),
    ),
    V(
        "a-preset-without-a-sample",
        "results-checks",
        "{tmp}/results/newpreset/cpu",
        r"^error: \S+/newpreset/cpu: no point of the sample "
        r"\(SAMPLE in analysis/reproduce/verify.py\) "
        r"among its committed runs: nothing to verify$",
        setup=demo_result("results/newpreset/cpu"),
    ),
    V(
        "a-result-without-provenance",
        "results-checks",
        RESULT,
        r"^error: \S+/demo/cpu: no provenance.txt \(nothing says how the result was made\)$",
        setup=demo_result(drop=("provenance.txt",)),
    ),
    V(
        "a-result-without-records-in-the-tree",
        "results-checks",
        "--results {tmp}/results",
        r"^error: \S+/demo/b: no runs.jsonl.gz: nothing to verify against$",
        setup=plants(demo_result("results/demo/a"), demo_result("results/demo/b", drop=(RECORDS,))),
    ),
    V(
        "all-points-of-a-result-with-none-finished",
        "results-checks",
        f"{RESULT} --points all",
        r"^error: \S+/demo/cpu: no finished run among its committed runs: nothing to verify$",
        setup=plants(demo_result(), lambda ctx: _all_failed(ctx)),
    ),
    V(
        "names-the-modified-files-of-the-checkout",
        "results-checks",
        f"{RESULT} --run {FIRST} --out {{tmp}}/scratch",
        code=1,
        setup=plants(demo_result(), altered_record(_set("overrides", ["foo=1"]))),
        patch=modified_checkout,
        check=output_has(
            "; 1 modified tracked files: analysis/claims/",
            f"demo/cpu {FIRST}: DIFFERS: the rerun failed (exit 2)",
        ),
    ),
    # --- class 3: Ctrl-C and the stop signals: one line, the signal's code, the rerun and its
    # workers stopped, nothing said of the point
    V(
        "term-while-the-rerun-trains",
        "results-stops",
        f"{RESULT} --run {FIRST} --out {{tmp}}/scratch",
        stopped(signal.SIGTERM),
        code=143,
        setup=LONG,
        inproc=False,
        one_line=True,
        act=then(when(rerun_training), send(signal.SIGTERM)),
        check=STOP_CHECK,
    ),
    V(
        "int-while-the-rerun-starts",
        "results-stops",
        f"{RESULT} --run {FIRST} --out {{tmp}}/scratch",
        stopped(signal.SIGINT),
        code=130,
        setup=LONG,
        inproc=False,
        one_line=True,
        act=then(when(running_run_py), send(signal.SIGINT)),
        check=STOP_CHECK,
    ),
    V(
        "hup-while-the-rerun-trains",
        "results-stops",
        f"{RESULT} --run {FIRST} --out {{tmp}}/scratch",
        stopped(signal.SIGHUP),
        code=129,
        setup=LONG,
        inproc=False,
        one_line=True,
        act=then(when(rerun_training), send(signal.SIGHUP)),
        check=STOP_CHECK,
    ),
    V(
        "term-while-importing",
        "results-stops",
        f"{RESULT} --run {FIRST} --out {{tmp}}/scratch",
        r"^error: verify: stopped by SIGTERM; ",
        code=143,
        setup=LONG,
        inproc=False,
        one_line=True,
        act=then(when(importing), send(signal.SIGTERM)),
        check=no_scratch_left,
    ),
    # --- class 4: the reruns' scratch is the command's alone, and gone once it ends
    V(
        "a-second-stop-while-the-rerun-stops",
        "results-atomic",
        f"{RESULT} --run {FIRST} --out {{tmp}}/scratch",
        r"^error: verify: (interrupted|stopped) ",
        code=(130, 143),
        setup=LONG,
        inproc=False,
        one_line=True,
        act=then(when(rerun_training), send(signal.SIGINT, signal.SIGTERM, gap=0.2)),
        check=STOP_CHECK,
    ),
    # --- class 5: damaged or empty inputs, refused with their path (and line)
    V(
        "records-not-gzip",
        "results-inputs",
        RESULT,
        r"^error: \S+/runs.jsonl.gz: not a gzip-compressed JSON-lines file",
        setup=plants(demo_result(), planted(f"results/demo/cpu/{RECORDS}", BINARY)),
    ),
    V(
        "records-empty",
        "results-inputs",
        RESULT,
        r"^error: \S+/runs.jsonl.gz: empty \(0 bytes\)",
        setup=plants(demo_result(), planted(f"results/demo/cpu/{RECORDS}", b"")),
    ),
    V(
        "records-a-folder",
        "results-inputs",
        RESULT,
        r"^error: \S+/demo/cpu: no runs.jsonl.gz: nothing to verify against$",
        setup=plants(demo_result(), planted(f"results/demo/cpu/{RECORDS}", None)),
    ),
    V(
        "records-a-run-twice",
        "results-inputs",
        RESULT,
        rf"^error: \S+/runs.jsonl.gz:2: run {FIRST} is recorded twice$",
        setup=plants(demo_result(), duplicated),
    ),
    V(
        "provenance-a-folder",
        "results-inputs",
        RESULT,
        r"^error: \S+/demo/cpu: no provenance.txt ",
        setup=plants(demo_result(), planted("results/demo/cpu/provenance.txt", None)),
    ),
    # --- class 6: fields of the wrong type: one line naming the file, line and field
    V(
        "records-summary-a-list",
        "results-bad-input",
        RESULT,
        r"^error: \S+/runs.jsonl.gz:1: not a run record \(\S+: summary is a list, not an object\)$",
        setup=plants(demo_result(), altered_record(_set("summary", []))),
    ),
    V(
        "records-final-acc-a-string",
        "results-bad-input",
        RESULT,
        r"^error: \S+:1: not a run record \(\S+: summary.final/test_acc is a string, not a number",
        setup=plants(demo_result(), altered_record(_set("summary.final/test_acc", "0.9"))),
    ),
    V(
        "records-platform-a-string",
        "results-bad-input",
        RESULT,
        r"summary.platform is a string, not an object\)$",
        setup=plants(demo_result(), altered_record(_set("summary.platform", "cpu"))),
    ),
    V(
        "records-overrides-a-string",
        "results-bad-input",
        RESULT,
        r"overrides is not a list of strings\)$",
        setup=plants(demo_result(), altered_record(_set("overrides", "seed=0"))),
    ),
    V(
        "records-metrics-row-a-list",
        "results-bad-input",
        RESULT,
        r"metrics row 1 is a list, not an object\)$",
        setup=plants(demo_result(), altered_record(lambda r: r["metrics"].__setitem__(0, []))),
    ),
    V(
        "records-run-an-absolute-path",
        "results-bad-input",
        RESULT,
        r"run '/etc/x' is not a path below the runs root\)$",
        setup=plants(demo_result(), altered_record(_set("run", "/etc/x"))),
    ),
]


def _all_failed(ctx: Ctx) -> None:
    path = ctx.tmp / "results" / "demo" / "cpu" / RECORDS
    records = records_of(path)
    for record in records:
        record["summary"]["status"] = "failed"
    write_records(path, records)
