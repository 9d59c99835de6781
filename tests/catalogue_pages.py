"""The catalogue's cases of issue 50 (the results tools as safe as the training engine) for the
pages and readers: `python -m analysis.reports.verdict_page`, `python -m
analysis.reports.wandb_report`,
`python -m analysis.reports.report` and `python -m analysis.runs.status`: tests/test_catalogue.py
runs them with the others (tests/catalogue.py's machinery). The classes: results-out (1: an --out
that would destroy a result or the command's input, refused before any work), results-checks (2: a
result missing a part is an error naming it; a check of nothing fails), results-stops (3: one
line, the signal's exit code, nothing written), results-atomic (4: a failed write leaves the
previous file), results-inputs (5: a damaged claims.json refused with its path and what is
wrong), results-bad-input (6: no traceback)."""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
from collections.abc import Callable
from pathlib import Path

from tests.catalogue import Case, Ctx, Result, importing, planted, plants, send, then, when

FIXTURE_RUNS = Path(__file__).parent / "fixtures" / "runs" / "demo"
TITLE = "# The seed papers' claims: verdicts"
PREVIOUS_PAGE = f"{TITLE}\n\nthe previous page\n"
CLAIM = {
    "name": "control_noniid_below_iid",
    "text": "Positive control: IID above non-IID (a test claim)",
    "verdict": "holds",
    "evidence": "tau=8",
    "test": "paired t-test",
    "comparisons": 1,
    "deciding": {
        "kind": "diff",
        "unit": "acc",
        "test": "paired t",
        "paired": True,
        "n": 8,
        "estimate": 0.03,
        "low": 0.01,
        "high": 0.05,
        "level": 0.95,
        "mdd": 0.02,
        "margin": 0.01,
        "n_needed": 6,
        "why": "",
    },
}
CASES: list[Case] = []


def add(*cases: Case) -> None:
    CASES.extend(cases)


# --- setups ---------------------------------------------------------------------------------


def results(*, claims_json: bytes | str | None = None, claims_md: bool = True) -> Callable:
    """Two result folders under `<case>/results` (controls/cpu, demo/cpu) as a report leaves
    them, and a previous page `results/README.md`; `claims_json` replaces controls/cpu's
    (None: a good one; "": removed; b"dir": a directory in its place)."""

    def setup(ctx: Ctx) -> None:
        root = ctx.tmp / "results"
        for folder, claims in (("controls/cpu", [CLAIM]), ("demo/cpu", [])):
            where = root / folder
            where.mkdir(parents=True)
            (where / "claims.json").write_text(json.dumps({"title": folder, "claims": claims}))
            (where / "claims.md").write_text(f"# {folder}\n")
            (where / "provenance.txt").write_text("command: python -m analysis.reports.report\n")
        target = root / "controls" / "cpu" / "claims.json"
        if claims_json == "":
            target.unlink()
        elif claims_json == b"dir":
            target.unlink()
            target.mkdir()
        elif isinstance(claims_json, bytes):
            target.write_bytes(claims_json)
        elif claims_json is not None:
            target.write_text(claims_json)
        if not claims_md:
            (root / "controls" / "cpu" / "claims.md").unlink()
        (root / "README.md").write_text(PREVIOUS_PAGE)

    return setup


def runs(where: str = "runs") -> Callable:
    """The fixtures' finished demo run under `<case>/<where>`."""

    def setup(ctx: Ctx) -> None:
        shutil.copytree(FIXTURE_RUNS, ctx.tmp / where, dirs_exist_ok=True)

    return setup


def folder(name: str) -> Callable:
    return lambda ctx: (ctx.tmp / name).mkdir(parents=True, exist_ok=True)


def failing_fsync(number: int, only: str = "") -> Callable:
    """In-process: fsync fails with `number` (ENOSPC: a full disk) as an atomic write's
    temporary file is flushed, before its rename; with `only`, for the files whose name holds
    `only` alone (the other writes go on)."""

    def patch(monkeypatch, ctx: Ctx) -> None:
        real = os.fsync

        def fsync(fd: int) -> None:
            if only and only not in os.readlink(f"/proc/self/fd/{fd}"):
                return real(fd)
            raise OSError(number, os.strerror(number))

        monkeypatch.setattr(os, "fsync", fsync)

    return patch


# --- checks ---------------------------------------------------------------------------------


def page_is(text: str | None, where: str = "results/README.md") -> Callable:
    """The page at `where` is `text` (None: absent)."""

    def check(ctx: Ctx, result: Result) -> None:
        path = ctx.tmp / where
        if text is None:
            assert not path.exists(), f"{path} was written"
        else:
            assert path.read_text() == text, path.read_text()[:300]

    return check


def a_new_page(ctx: Ctx, result: Result) -> None:
    page = (ctx.tmp / "results" / "README.md").read_text()
    assert page.startswith(TITLE) and "control_noniid" not in page, page[:300]
    assert "Positive control: IID above non-IID" in page  # the control's row is there


def nothing_at(*names: str) -> Callable:
    def check(ctx: Ctx, result: Result) -> None:
        for name in names:
            assert not (ctx.tmp / name).exists(), f"{name} was written"

    return check


def status_listed(*lines: str, last: str) -> Callable:
    def check(ctx: Ctx, result: Result) -> None:
        out = result.stdout.strip().splitlines()
        for line in lines:
            assert any(line in said for said in out), result.stdout
        assert out[-1] == last, result.stdout

    return check


def mapped(library: str) -> Callable[[Ctx], bool]:
    """The command loaded `library` (a shared object in its memory map): for wandb_report,
    `pydantic_core` is W&B's library, imported in main, past the module's imports."""

    def condition(ctx: Ctx) -> bool:
        try:
            return library in Path(f"/proc/{ctx.proc.pid}/maps").read_text()
        except OSError:
            return False

    return condition


# --- verdict_page ---------------------------------------------------------------------------


def V(name: str, cls: str, args: tuple[str, ...] = (), **kw) -> Case:
    kw.setdefault("setup", results())
    kw.setdefault("fast_args", False)
    kw.setdefault("out_root", False)
    return Case(
        f"verdict_page-{name}", cls, ("--results", "{tmp}/results", *args), cmd="verdict_page", **kw
    )


OUT = "results-out"
add(
    V(
        "out-is-a-directory",
        OUT,
        ("--out", "{tmp}/results"),
        line=r"^error: --out .*/results is a directory: name the page's file",
    ),
    V(
        "out-under-a-missing-folder",
        OUT,
        ("--out", "{tmp}/nope/README.md"),
        line=r"^error: --out .*/nope/README.md: its folder .*/nope does not exist$",
        check=nothing_at("nope"),
    ),
    V(
        "out-onto-its-own-input",
        OUT,
        ("--out", "{tmp}/results/controls/cpu/claims.json"),
        line=r"^error: --out .*/claims.json is inside the result folder .*/results/controls/cpu",
    ),
    V(
        "out-a-new-file-in-a-result-folder",
        OUT,
        ("--out", "{tmp}/results/demo/cpu/verdicts.md"),
        line=r"^error: --out .*/verdicts.md is inside the result folder .*/results/demo/cpu",
        check=nothing_at("results/demo/cpu/verdicts.md"),
    ),
    V(
        "out-onto-a-committed-results-file",
        OUT,
        ("--out", "results/demo/cpu/table.md"),  # the checkout's own committed result
        line=r"^error: --out results/demo/cpu/table.md is inside the result folder .*results/demo",
    ),
    V(
        "out-onto-a-file-that-is-not-a-page",
        OUT,
        ("--out", "{tmp}/notes.md"),
        setup=plants(results(), planted("notes.md")),
        line=r"^error: --out .*/notes.md exists and is not a verdicts page: it is left as it is",
    ),
    V(
        "out-onto-the-checkouts-readme",
        OUT,
        ("--out", "README.md"),
        line=r"^error: --out README.md exists and is not a verdicts page",
    ),
    V(
        "a-previous-page-is-replaced",
        OUT,
        code=0,
        line=r"^wrote .*/results/README.md$",
        check=a_new_page,
    ),
)
CHECKS = "results-checks"
add(
    V(
        "a-result-without-claims-json",
        CHECKS,
        setup=results(claims_json=""),
        line=r"^error: .*/results/controls/cpu/claims.json: missing \(a result folder without",
        check=page_is(PREVIOUS_PAGE),
    ),
    V(
        "a-result-without-claims-md",
        CHECKS,
        setup=results(claims_md=False),
        line=r"^error: .*/results/controls/cpu/claims.md: missing ",
        check=page_is(PREVIOUS_PAGE),
    ),
    V(
        "no-result-at-all",
        CHECKS,
        ("--out", "{tmp}/page.md"),
        setup=folder("results"),
        line=r"^error: no claims.json under .*/results/\*/\*: run the reports first",
        check=nothing_at("page.md"),
    ),
    V(
        "results-is-not-a-directory",
        CHECKS,
        setup=planted("results", "a file"),
        line=r"^error: --results .*/results is not a directory$",
    ),
)
INPUTS = "results-inputs"


def damaged(name: str, content: bytes | str, line: str) -> Case:
    return V(f"claims-json-{name}", INPUTS, setup=results(claims_json=content), line=line)


CJ = r"^error: .*/results/controls/cpu/claims.json: "
add(
    damaged("empty", b"", CJ + "empty$"),
    damaged("binary", b"\x00\x9f\x92\xff garbage", CJ + r"not UTF-8 text"),
    damaged("torn", '{"claims": [{"name": "x", "te', CJ + r"not JSON \("),
    damaged("a-directory", b"dir", CJ + "a directory, not a file$"),
    damaged("a-list", "[]", CJ + "not a JSON object but a list$"),
    damaged("claims-not-a-list", '{"claims": {"a": 1}}', CJ + r"'claims' is an object, not a list"),
    damaged(
        "a-claim-without-its-verdict",
        json.dumps({"claims": [{k: v for k, v in CLAIM.items() if k != "verdict"}]}),
        CJ + r"claims\[0\] has no 'verdict'$",
    ),
    damaged(
        "an-estimate-that-is-text",
        json.dumps({"claims": [{**CLAIM, "deciding": {**CLAIM["deciding"], "estimate": "big"}}]}),
        CJ + r"claims\[0\].deciding.estimate is a string, not a number$",
    ),
    damaged(
        "a-count-that-is-a-fraction",
        json.dumps({"claims": [{**CLAIM, "deciding": {**CLAIM["deciding"], "n": 2.5}}]}),
        CJ + r"claims\[0\].deciding.n is a number, not a count$",
    ),
)
ATOMIC = "results-atomic"
add(
    V(
        "disk-full-keeps-the-previous-page",
        ATOMIC,
        patch=failing_fsync(errno.ENOSPC),
        code=1,
        one_line=True,
        line=r"^error: disk full writing .*/results/README.md: the previous page is unchanged$",
        check=page_is(PREVIOUS_PAGE),
    ),
    V(
        "io-error-keeps-the-previous-page",
        ATOMIC,
        patch=failing_fsync(errno.EIO),
        code=1,
        one_line=True,
        line=r"^error: cannot write .*/results/README.md: Input/output error: the previous",
        check=page_is(PREVIOUS_PAGE),
    ),
    V(
        "disk-full-writing-a-new-page",
        ATOMIC,
        ("--out", "{tmp}/page.md"),
        patch=failing_fsync(errno.ENOSPC),
        code=1,
        one_line=True,
        line=r"^error: disk full writing .*/page.md",
        check=nothing_at("page.md"),
    ),
)
STOPS = "results-stops"


def stop(name: str, cmd: str, args: tuple[str, ...], sig: int, line: str, **kw) -> Case:
    kw.setdefault("act", then(when(importing), send(sig)))
    kw.setdefault("interpreter", True)  # stopped while Python imports: a real interpreter
    return Case(
        f"{cmd}-{name}",
        STOPS,
        args,
        cmd=cmd,
        code=128 + sig,
        line=line,
        inproc=False,
        one_line=True,
        fast_args=False,
        out_root=False,
        **kw,
    )


add(
    stop(
        "term-while-importing",
        "verdict_page",
        ("--results", "{tmp}/results"),
        signal.SIGTERM,
        r"^error: verdict_page: stopped by SIGTERM; ",
        setup=results(),
        check=page_is(PREVIOUS_PAGE),
    ),
    stop(
        "ctrl-c-while-importing",
        "verdict_page",
        ("--results", "{tmp}/results"),
        signal.SIGINT,
        r"^error: verdict_page: interrupted by Ctrl-C; ",
        setup=results(),
        check=page_is(PREVIOUS_PAGE),
    ),
    stop(
        "hup-while-importing",
        "verdict_page",
        ("--results", "{tmp}/results", "--out", "{tmp}/page.md"),
        signal.SIGHUP,
        r"^error: verdict_page: stopped by SIGHUP; ",
        setup=results(),
        check=nothing_at("page.md"),
    ),
    stop(
        "ctrl-c-while-importing",
        "wandb_report",
        ("{tmp}/runs", "--out", "{tmp}/rep"),
        signal.SIGINT,
        r"^error: wandb_report: interrupted by Ctrl-C; ",
        setup=runs(),
        check=nothing_at("rep"),
    ),
    stop(
        "ctrl-c-while-building",
        "wandb_report",
        ("{tmp}/runs", "--out", "{tmp}/rep"),
        signal.SIGINT,
        r"^error: wandb_report: interrupted by Ctrl-C; nothing was written",
        setup=runs(),
        act=then(when(mapped("pydantic_core")), send(signal.SIGINT)),
        check=nothing_at("rep/wandb_report.json"),
    ),
    stop(
        "term-while-building",
        "wandb_report",
        ("{tmp}/runs", "--out", "{tmp}/rep"),
        signal.SIGTERM,
        r"^error: wandb_report: stopped by SIGTERM; nothing was written",
        setup=runs(),
        act=then(when(mapped("pydantic_core")), send(signal.SIGTERM)),
        check=nothing_at("rep/wandb_report.json"),
    ),
    stop(
        "term-while-importing",
        "status",
        ("{tmp}/runs",),
        signal.SIGTERM,
        r"^error: status: stopped by SIGTERM; ",
        setup=runs(),
    ),
    stop(
        "ctrl-c-while-importing",
        "status",
        ("{tmp}/runs", "--check"),
        signal.SIGINT,
        r"^error: status: interrupted by Ctrl-C; ",
        setup=runs(),
    ),
    stop(
        "usr1-while-importing",
        "report",
        ("{tmp}/runs", "--out", "{tmp}/rep"),
        signal.SIGUSR1,
        r"^error: stopped by SIGUSR1 before the report started: nothing written$",
        setup=runs(),
        check=nothing_at("rep"),
    ),
)

# --- wandb_report, report, status -----------------------------------------------------------


def W(name: str, cls: str, args: tuple[str, ...], **kw) -> Case:
    kw.setdefault("setup", runs())
    return Case(f"wandb_report-{name}", cls, args, cmd="wandb_report", **kw)


def R(name: str, cls: str, args: tuple[str, ...], **kw) -> Case:
    kw.setdefault("setup", runs())
    return Case(f"report-{name}", cls, args, cmd="report", **kw)


def S(name: str, cls: str, args: tuple[str, ...], **kw) -> Case:
    return Case(f"status-{name}", cls, args, cmd="status", **kw)


def fifo(name: str) -> Callable:
    def setup(ctx: Ctx) -> None:
        path = ctx.tmp / name
        path.parent.mkdir(parents=True, exist_ok=True)
        os.mkfifo(path)

    return setup


add(
    W(
        "out-in-its-runs-root",
        OUT,
        ("{tmp}/runs", "--out", "{tmp}/runs/report"),
        line=r"^error: --out .*/runs/report is in the runs root .*/runs it reads",
        check=nothing_at("runs/report"),
    ),
    W(
        "out-is-its-runs-root",
        OUT,
        ("{tmp}/runs", "--out", "{tmp}/runs"),
        line=r"^error: --out .*/runs is in the runs root .*/runs it reads",
    ),
    W(
        "out-is-a-file",
        OUT,
        ("{tmp}/runs", "--out", "{tmp}/rep"),
        setup=plants(runs(), planted("rep")),
        line=r"^error: --out .*/rep is a file, not a folder$",
    ),
    W(
        "spec-is-a-directory",
        "results-bad-input",
        ("{tmp}/runs", "--out", "{tmp}/rep"),
        setup=plants(runs(), folder("rep/wandb_report.json")),
        line=r"^error: --out .*/rep: its wandb_report.json is not a file",
    ),
    W(
        "disk-full-keeps-the-previous-spec",
        ATOMIC,
        ("{tmp}/runs", "--out", "{tmp}/rep"),
        setup=plants(runs(), planted("rep/wandb_report.json", "{}")),
        patch=failing_fsync(errno.ENOSPC, only="wandb_report.json"),
        line=r"^error: disk full writing .*/rep/wandb_report.json: nothing written$",
        check=page_is("{}", "rep/wandb_report.json"),
    ),
    W(
        "disk-full-while-its-tables-are-made",
        ATOMIC,
        ("{tmp}/runs", "--out", "{tmp}/rep"),
        setup=plants(runs(), planted("rep/wandb_report.json", "{}")),
        patch=failing_fsync(errno.ENOSPC),
        line=r"^error: disk full writing .*: nothing written$",
        check=page_is("{}", "rep/wandb_report.json"),
    ),
    W(
        "out-is-empty",
        "results-bad-input",
        ("{tmp}/runs", "--out", ""),
        line=r"^error: argument --out: is empty: name a folder \(python -m "
        r"analysis.reports.wandb_report",
    ),
    R(
        "out-holds-its-runs-root",
        OUT,
        ("{tmp}/rep/runs", "--out", "{tmp}/rep"),
        setup=runs("rep/runs"),
        line=r"^error: --out .*/rep holds or lies in the runs root .*/rep/runs the report reads",
    ),
    R(
        "out-in-its-runs-root",
        OUT,
        ("{tmp}/runs", "--out", "{tmp}/runs/rep"),
        line=r"^error: --out .*/runs/rep holds or lies in the runs root .*/runs the report",
        check=nothing_at("runs/rep"),
    ),
    R(
        "plain-report-onto-a-presets-result",
        OUT,
        ("{tmp}/runs", "--out", "{tmp}/rep"),
        setup=plants(runs(), planted("rep/claims.json", "{}"), planted("rep/provenance.txt")),
        line=r"^error: --out .*/rep holds a preset's result \(claims.json, provenance.txt\)",
    ),
    R(
        "preset-report-onto-another-presets-result",
        OUT,
        ("{tmp}/runs", "--experiment", "demo", "--out", "{tmp}/rep"),
        setup=plants(
            runs(),
            planted("rep/claims.json", "{}"),
            planted("rep/provenance.txt", "experiment: controls\nscale: fmnist\n"),
        ),
        line=r"^error: --out .*/rep holds the result of experiment controls \(its provenance",
    ),
    R(
        "preset-report-onto-its-own-result-at-another-scale",
        OUT,
        ("{tmp}/runs", "--experiment", "demo", "--scale", "cpu", "--out", "{tmp}/rep"),
        setup=plants(
            runs(),
            planted("rep/claims.json", "{}"),
            planted("rep/provenance.txt", "experiment: demo\nscale: fmnist\n"),
        ),
        line=r"^error: --out .*/rep holds the result of scale fmnist \(its provenance.txt\)",
    ),
    R(
        "out-is-empty",
        "results-bad-input",
        ("{tmp}/runs", "--out", ""),
        line=r"^error: argument --out: is empty: name a folder \(python -m analysis.reports.report "
        r"--help",
    ),
    S(
        "check-of-an-empty-root",
        CHECKS,
        ("{tmp}/runs", "--check"),
        setup=folder("runs"),
        code=1,
        one_line=True,
        line=r"^error: no runs under .*/runs: --check checked nothing$",
    ),
    S(
        "a-fifo-for-a-summary-is-no-hang",
        "results-bad-input",
        ("{tmp}/runs",),
        setup=plants(runs(), fifo("runs/stuck/summary.json")),
        code=0,
        one_line=False,
        check=status_listed(
            "summary.json is unreadable: not a regular file", last="1 completed, 1 failed"
        ),
    ),
    S(
        "a-summary-that-is-a-directory",
        "results-bad-input",
        ("{tmp}/runs", "--check"),
        setup=plants(
            runs(), folder("runs/odd/summary.json"), planted("runs/odd/.hydra/config.yaml")
        ),
        code=1,
        one_line=False,
        check=status_listed("a directory, not a file", last="1 completed, 1 failed"),
    ),
    S(
        "root-is-a-file",
        "results-bad-input",
        ("{tmp}/runs",),
        setup=planted("runs"),
        line=r"^error: runs root is not a directory: .*/runs$",
    ),
    S(
        "an-unknown-preset",
        "results-bad-input",
        ("{tmp}/runs", "--experiment", "nosuch"),
        setup=runs(),
        line=r"^error: no preset .*nosuch.yaml$",
    ),
    V(
        "an-unknown-flag",
        "results-bad-input",
        ("--bogus",),
        line=r"^error: unrecognized arguments: --bogus \(python -m analysis.reports.verdict_page "
        r"--help\)$",
    ),
)
