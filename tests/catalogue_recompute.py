"""The catalogue's cases of issue 50 (the results tools as safe as the training engine) for `python
-m analysis.reproduce.recompute` (make recompute): tests/test_catalogue.py runs them with the others
(tests/catalogue.py's machinery).

Each case works on a copy of the committed demo result (results/demo/cpu) under its own folder:
`{tmp}/results/demo/cpu` by default. A case that recomputes runs the report in seconds; the
refusals run none. tests/catalogue_verify.py uses the same helpers."""

from __future__ import annotations

import gzip
import json
import shutil
import signal
from collections.abc import Callable
from pathlib import Path

from tests.catalogue import Case, Ctx, Result, planted, plants, send, then, when

RESULTS = Path(__file__).resolve().parents[1] / "results"
DEMO = RESULTS / "demo" / "cpu"
RECORDS = "runs.jsonl.gz"
FINISHED_LINE = "what it had finished is kept, nothing of the interrupted work was written"
BINARY = b"\x00\x9f\x92\x96\xff\xfe garbage \x00"


def demo_result(where: str = "results/demo/cpu", drop: tuple[str, ...] = ()) -> Callable:
    """A copy of the committed demo result at `{tmp}/<where>`, without the files `drop`."""

    def setup(ctx: Ctx) -> None:
        target = ctx.tmp / where
        shutil.copytree(DEMO, target)
        for name in drop:
            (target / name).unlink()

    return setup


def records_of(path: Path) -> list[dict]:
    return [json.loads(line) for line in gzip.decompress(path.read_bytes()).splitlines()]


def write_records(path: Path, records: list[dict]) -> None:
    text = "".join(json.dumps(r, sort_keys=True) + "\n" for r in records)
    path.write_bytes(gzip.compress(text.encode(), mtime=0))


def altered_record(change: Callable[[dict], None], where: str = "results/demo/cpu") -> Callable:
    """The result's first record changed by `change` (a field of the wrong type, ...)."""

    def setup(ctx: Ctx) -> None:
        path = ctx.tmp / where / RECORDS
        records = records_of(path)
        change(records[0])
        write_records(path, records)

    return setup


def output_has(*patterns: str, absent: tuple[str, ...] = ()) -> Callable[[Ctx, Result], None]:
    """A check: each of `patterns` is in the command's output (stdout, then stderr: a failed
    check's closing `error:` line), none of `absent`."""

    def check(ctx: Ctx, result: Result) -> None:
        said = result.stdout + result.stderr
        for pattern in patterns:
            assert pattern in said, f"{ctx.case.id}: no {pattern!r} in\n{said}"
        for pattern in absent:
            assert pattern not in said, f"{ctx.case.id}: {pattern!r} in\n{said}"

    return check


def checks(*all_checks: Callable[[Ctx, Result], None]) -> Callable[[Ctx, Result], None]:
    def check(ctx: Ctx, result: Result) -> None:
        for one in all_checks:
            one(ctx, result)

    return check


def absent(*names: str) -> Callable[[Ctx, Result], None]:
    def check(ctx: Ctx, result: Result) -> None:
        for name in names:
            assert not (ctx.tmp / name).exists(), f"{ctx.case.id}: {name} was written"

    return check


def files_and_times(ctx: Ctx, where: str = "results/demo/cpu") -> dict[str, tuple[bytes, int]]:
    return {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in (ctx.tmp / where).iterdir()}


def noted_files(ctx: Ctx) -> None:
    ctx.data["files"] = files_and_times(ctx)


def untouched(ctx: Ctx, result: Result) -> None:
    """The committed result's files as they were, byte for byte and time stamp."""
    assert files_and_times(ctx) == ctx.data["files"], f"{ctx.case.id}: the result was rewritten"


def clean_checkout(monkeypatch, ctx: Ctx) -> None:
    """A checkout without modified tracked files (--update refuses any other)."""
    import analysis.reports.report

    monkeypatch.setattr(analysis.reports.report, "git_commit", lambda repo=None: "1" * 40)


def staging(name: str, out: str = "o/demo") -> Callable[[Ctx], bool]:
    """The report of the result `name` is being written (its folder staged beside its --out)."""
    return lambda ctx: any((ctx.tmp / out).glob(f".{name}.*.tmp"))


def R(name: str, cls: str, args: str, line: str = "", code: int = 2, **kw) -> Case:
    kw.setdefault("fast_args", False)
    kw.setdefault("out_root", False)
    return Case(f"recompute-{name}", cls, tuple(args.split()), code=code, line=line,
                cmd="recompute", **kw)  # fmt: skip


OUT = "--out {tmp}/o"
TREE = "--results {tmp}/results " + OUT
TWO = plants(demo_result("results/demo/a"), demo_result("results/demo/b"))

CASES: list[Case] = [
    # --- class 1: --out onto a committed result, a file, its own input: refused before any work
    R(
        "out-onto-its-results-tree",
        "results-out",
        "--results {tmp}/results --out {tmp}/results",
        r"^error: --out \S+/results is inside the committed results tree ",
        setup=demo_result(),
    ),
    R(
        "out-onto-the-result-named",
        "results-out",
        "{tmp}/results/demo/cpu --out {tmp}/results/demo/cpu",
        r"^error: --out \S+ is inside the result \S+/demo/cpu \(the command's input\)",
        setup=demo_result(),
    ),
    R(
        "out-that-would-replace-the-result",
        "results-out",
        "{tmp}/r/demo/cpu --out {tmp}/r",
        r"^error: --out \S+/r would replace the result \S+/r/demo/cpu \(the command's input\)",
        setup=demo_result("r/demo/cpu"),
    ),
    R(
        "out-a-file",
        "results-out",
        "{tmp}/results/demo/cpu --out {tmp}/notes.txt",
        r"^error: --out \S+/notes.txt is a file, not a folder",
        setup=plants(demo_result(), planted("notes.txt", "mine")),
    ),
    R(
        "out-its-own-records-file",
        "results-out",
        "{tmp}/results/demo/cpu --out {tmp}/results/demo/cpu/runs.jsonl.gz",
        r"^error: --out \S+/runs.jsonl.gz is a file, not a folder",
        setup=demo_result(),
    ),
    R(
        "out-onto-someones-folder",
        "results-out",
        "{tmp}/results/demo/cpu " + OUT,
        r"^error: --out: \S+/o/demo/cpu holds mine.txt, which no recomputation writes",
        setup=plants(demo_result(), planted("o/demo/cpu/mine.txt", "mine")),
    ),
    R(
        "out-inside-the-checkouts-results",
        "results-out",
        f"{{tmp}}/results/demo/cpu --out {RESULTS}/scratch",
        r"^error: --out \S+/results/scratch is inside the committed results tree ",
        setup=demo_result(),
        check=lambda ctx, r: _not_made(RESULTS / "scratch"),
    ),
    R(
        "two-results-into-one-folder",
        "results-out",
        "{tmp}/a/demo/cpu {tmp}/b/demo/cpu " + OUT,
        r"^error: \S+/b/demo/cpu: its recomputation would replace another's in ",
        setup=plants(demo_result("a/demo/cpu"), demo_result("b/demo/cpu")),
    ),
    R(
        "update-out-onto-the-results-tree",
        "results-out",
        "--update {tmp}/results/demo/cpu --out {tmp}/results",
        r"^error: --out \S+ would replace the result",
        setup=demo_result(),
        patch=clean_checkout,
    ),
    R(
        "update-of-an-unchanged-result-touches-nothing",
        "results-out",
        "--update {tmp}/results/demo/cpu " + OUT,
        r"^demo/cpu: unchanged$",
        code=0,
        setup=plants(demo_result(), noted_files),
        patch=clean_checkout,
        check=untouched,
    ),
    # --- class 2: a check of nothing, or of less than asked, fails; a missing part is named
    R(
        "a-result-without-provenance-in-the-tree",
        "results-checks",
        TREE,
        code=1,
        setup=demo_result(drop=("provenance.txt",)),
        check=output_has(
            "demo/cpu: DIFFERS",
            "cpu: no provenance.txt (nothing says how",
            "1 of 1 results do not recompute: demo/cpu",
        ),
    ),
    R(
        "a-result-with-only-its-claims",
        "results-checks",
        TREE,
        code=1,
        setup=planted("results/demo/cpu/claims.json", "{}"),
        check=output_has("no provenance.txt", "no runs.jsonl.gz", "1 of 1 results do not"),
    ),
    R(
        "a-result-without-records-among-others",
        "results-checks",
        TREE,
        code=1,
        setup=plants(demo_result("results/demo/a"), demo_result("results/demo/b", drop=(RECORDS,))),
        check=output_has(
            "demo/a: identical (",
            "demo/b: DIFFERS",
            "b: no runs.jsonl.gz",
            "1 of 2 results do not recompute: demo/b",
        ),
    ),
    R(
        "a-tree-of-empty-folders",
        "results-checks",
        TREE,
        r"^error: no result folders \(<preset>/<scale>/ with files\) under ",
        setup=lambda ctx: (ctx.tmp / "results" / "demo" / "cpu").mkdir(parents=True),
    ),
    R(
        "a-result-dir-that-is-a-file",
        "results-checks",
        "{tmp}/notes.txt " + OUT,
        r"^error: \S+/notes.txt: not a result folder",
        setup=planted("notes.txt", "mine"),
    ),
    R(
        "a-result-named-twice",
        "results-checks",
        "{tmp}/results/demo/cpu {tmp}/results/demo/../demo/cpu " + OUT,
        r"^error: \S+: named twice",
        setup=demo_result(),
    ),
    # --- class 3: Ctrl-C and stop signals: one line, the signal's code, nothing said of the
    # result in progress, the others not begun
    R(
        "int-during-a-report",
        "results-stops",
        TREE,
        rf"^error: recompute: interrupted by "
        rf"Ctrl-C; {FINISHED_LINE}$",
        code=130,
        setup=TWO,
        inproc=False,
        one_line=True,
        act=then(when(staging("a")), send(signal.SIGINT)),
        check=checks(
            output_has(
                absent=("DIFFERS", "demo/a", "demo/b", "results recompute", "not recompute")
            ),
            absent("o/demo/a", "o/demo/b"),
        ),
    ),
    R(
        "term-during-a-report",
        "results-stops",
        TREE,
        rf"^error: recompute: stopped by SIGTERM; "
        rf"{FINISHED_LINE}$",
        code=143,
        setup=TWO,
        inproc=False,
        one_line=True,
        act=then(when(staging("a")), send(signal.SIGTERM)),
        check=checks(
            output_has(absent=("DIFFERS", "demo/a", "results recompute", "not recompute")),
            absent("o/demo/a"),
        ),
    ),
    R(
        "term-after-the-first-result",
        "results-stops",
        TREE,
        r"^error: recompute: stopped by "
        r"SIGTERM; ",
        code=143,
        setup=TWO,
        inproc=False,
        one_line=True,
        act=then(when(staging("b")), send(signal.SIGTERM)),
        check=checks(
            output_has("demo/a: identical (", absent=("demo/b", "DIFFERS")), absent("o/demo/b")
        ),
    ),
    R(
        "hup-while-importing",
        "results-stops",
        TREE,
        r"^error: recompute: stopped by SIGHUP; ",
        code=129,
        setup=demo_result(),
        inproc=False,
        one_line=True,
        act=then(when(lambda ctx: _catches_term(ctx)), send(signal.SIGHUP)),
        check=absent("o/demo/cpu"),
    ),
    R(
        "usr1-during-a-report",
        "results-stops",
        TREE,
        r"^error: recompute: stopped by SIGUSR1; ",
        code=128 + signal.SIGUSR1,
        setup=demo_result(),
        inproc=False,
        one_line=True,
        act=then(when(staging("cpu")), send(signal.SIGUSR1)),
        check=absent("o/demo/cpu"),
    ),
]


def _not_made(path: Path) -> None:
    assert not path.exists(), f"{path} was made"


def _catches_term(ctx: Ctx) -> bool:
    from tests.catalogue import catches

    return catches(ctx.proc.pid, signal.SIGTERM)


def previous_recomputation(ctx: Ctx) -> None:
    """A recomputation of an earlier command in {tmp}/o/demo/cpu, with a file the report
    writes for some presets only (scaling.md): the next one replaces it whole."""
    shutil.copytree(DEMO, ctx.tmp / "o" / "demo" / "cpu")
    (ctx.tmp / "o" / "demo" / "cpu" / "scaling.md").write_text("stale\n")
    ctx.data["previous"] = {
        p.name: p.read_bytes() for p in (ctx.tmp / "o" / "demo" / "cpu").iterdir()
    }


def previous_kept(ctx: Ctx, result: Result) -> None:
    now = {p.name: p.read_bytes() for p in (ctx.tmp / "o" / "demo" / "cpu").iterdir()}
    assert now == ctx.data["previous"], f"{ctx.case.id}: the previous recomputation changed"


def replaced_whole(ctx: Ctx, result: Result) -> None:
    out = ctx.tmp / "o" / "demo" / "cpu"
    assert not (out / "scaling.md").exists(), f"{ctx.case.id}: a stale file stayed"
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in DEMO.iterdir())


def table_tampered(ctx: Ctx) -> None:
    table = ctx.tmp / "results" / "demo" / "cpu" / "table.md"
    table.write_text(table.read_text() + "| tampered |\n")
    ctx.data["records"] = (table.parent / RECORDS).read_bytes()


def updated_table(ctx: Ctx, result: Result) -> None:
    result_dir = ctx.tmp / "results" / "demo" / "cpu"
    assert (result_dir / "table.md").read_bytes() == (DEMO / "table.md").read_bytes()
    assert (result_dir / RECORDS).read_bytes() == ctx.data["records"]
    provenance = (result_dir / "provenance.txt").read_text()
    assert provenance.count("recomputed: from runs.jsonl.gz") == 1, provenance
    assert not [p for p in result_dir.iterdir() if p.name.startswith(".")], "a temporary stayed"


CASES += [
    # --- class 4: what it writes is written whole (staged, renamed), or not at all
    R(
        "replaces-a-previous-recomputation-whole",
        "results-atomic",
        "{tmp}/results/demo/cpu " + OUT,
        r"^all 1 results recompute from their records",
        code=0,
        setup=plants(demo_result(), previous_recomputation),
        check=replaced_whole,
    ),
    R(
        "term-keeps-the-previous-recomputation",
        "results-atomic",
        "{tmp}/results/demo/cpu " + OUT,
        r"^error: recompute: stopped by SIGTERM; ",
        code=143,
        setup=plants(demo_result(), previous_recomputation),
        inproc=False,
        one_line=True,
        act=then(when(staging("cpu")), send(signal.SIGTERM)),
        check=previous_kept,
    ),
    R(
        "update-writes-what-changed-and-names-it",
        "results-atomic",
        "--update {tmp}/results/demo/cpu " + OUT,
        r"^demo/cpu: updated table.md, provenance.txt$",
        code=0,
        setup=plants(demo_result(), table_tampered),
        patch=clean_checkout,
        check=updated_table,
    ),
    R(
        "update-over-a-folder-in-place-of-a-table",
        "results-atomic",
        "--update {tmp}/results/demo/cpu " + OUT,
        r"^error: demo/cpu: \S+/table.md: not a file: the result is not updated$",
        setup=plants(demo_result(), planted("results/demo/cpu/table.md", None)),
        patch=clean_checkout,
    ),
    R(
        "update-refuses-a-result-without-provenance",
        "results-atomic",
        "--update {tmp}/results/demo/cpu " + OUT,
        r"^error: \S+/demo/cpu: no provenance.txt .*: --update cannot recompute it$",
        setup=demo_result(drop=("provenance.txt",)),
        patch=clean_checkout,
    ),
]


def damaged(name: str, where: str, content: bytes | str | None, says: str, **kw) -> Case:
    """A damaged part of the result: a difference naming it (exit 1), no traceback."""
    setup = plants(demo_result(), planted(f"results/demo/cpu/{where}", content))
    check = output_has("demo/cpu: DIFFERS", says, "1 of 1 results do not")
    return R(name, "results-inputs", TREE, code=1, setup=setup, check=check, **kw)


def wrong(name: str, change: Callable[[dict], None], says: str) -> Case:
    """A record with a field of the wrong type: the file, its line and the field named."""
    check = output_has("demo/cpu: DIFFERS", "runs.jsonl.gz:1: not a run record (", says)
    setup = plants(demo_result(), altered_record(change))
    return R(name, "results-bad-input", TREE, code=1, setup=setup, check=check)


def _set(path: str, value) -> Callable[[dict], None]:
    def change(record: dict) -> None:
        *parents, last = path.split(".")
        node = record
        for key in parents:
            node = node[key]
        node[last] = value

    return change


def _metric(key: str, value) -> Callable[[dict], None]:
    def change(record: dict) -> None:
        record["metrics"][0][key] = value

    return change


CASES += [
    # --- class 5: damaged or empty inputs refused with their path (and line)
    damaged("provenance-not-utf8", "provenance.txt", BINARY, "provenance.txt: not UTF-8 text"),
    damaged("provenance-a-folder", "provenance.txt", None, "provenance.txt: not a file"),
    damaged("provenance-empty", "provenance.txt", "", "provenance.txt: no command line"),
    damaged(
        "provenance-unbalanced-quote",
        "provenance.txt",
        "command: python -m analysis.reports.report 'runs --out x\n",
        "its command line does not parse",
    ),
    damaged(
        "provenance-another-command",
        "provenance.txt",
        "command: python run.py -m\n",
        "made by `python run.py -m`, not by analysis.reports.report",
    ),
    damaged("records-empty", RECORDS, b"", "runs.jsonl.gz: empty (0 bytes)"),
    damaged("records-not-gzip", RECORDS, BINARY, "not a gzip-compressed JSON-lines file"),
    damaged("records-a-folder", RECORDS, None, "runs.jsonl.gz: not a file"),
    damaged(
        "records-torn-line",
        RECORDS,
        gzip.compress(b'{"run": "a", "conf'),
        "runs.jsonl.gz:1: not a JSON line",
    ),
    # --- class 6: fields of the wrong type: one line naming them, never a traceback
    wrong("records-summary-a-list", _set("summary", []), "summary is a list, not an object"),
    wrong("records-config-a-string", _set("config", "x"), "config is a string, not an object"),
    wrong("records-metrics-an-object", _set("metrics", {}), "metrics is an object, not a list"),
    wrong(
        "records-metric-a-string",
        _metric("test/acc", "high"),
        "metrics row 1: test/acc is a string, not a number",
    ),
    wrong("records-status-a-number", _set("summary.status", 1), "summary.status is a number"),
    wrong(
        "records-run-leaving-its-folder",
        _set("run", "../../escaped"),
        "run '../../escaped' is not a path below the runs root",
    ),
    wrong("records-run-a-number", _set("run", 7), "run is a number, not a run's name"),
    wrong(
        "records-overrides-an-object",
        _set("overrides", {"a": 1}),
        "overrides is not a list of strings",
    ),
]
