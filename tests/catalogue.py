"""The fault-and-input catalogue's machinery (issue 14): a case is one line of a table
(tests/test_catalogue.py); this module runs it and checks what every case must leave.

A case runs one command (`python run.py ...` by default, or `python -m experiments.sweep`,
`python -m analysis.runs.status`) either in this process (`inproc`: pre-flight errors, damaged
records found before any worker starts; fast, and no worker may start:
`experiments.workers.dist.spawn` is replaced by a trap) or as a real process (everything that starts
workers, signals, a disk
filled during a run). Every case is checked for:

- its exit code, and its message: a pattern searched in the last line of stderr, which is the
  only line when the case says so (`one_line`, the default for exit code 2);
- no traceback;
- the state of every record under the case's folder: its run's summary status afterwards
  (`status`; None: no summary at all), no record marked completed or diverged by a command
  that failed, files planted by `setup` untouched by a command that refused them (exit 2), no
  temporary file (`*.tmp`) nor disk reserve (`.reserve`) left, no run directory made for a
  pre-flight error (`no_dir`);
- no process left behind: a real process's workers carry a marker in their environment, and
  none may survive the command; an in-process case starts no process at all.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests import zygote
from tests.cli import REPO, child_env, in_process, run_py_call

FAST = ("scale=smoke", "dataset=synthetic", "wandb.mode=disabled", "progress=false")
MARK = "COMMSGD_CATALOGUE_CASE"  # in the environment of a case's processes (and their workers)


@dataclass
class Result:
    code: int
    stdout: str
    stderr: str

    @property
    def lines(self) -> list[str]:
        return [line for line in self.stderr.strip().splitlines() if line.strip()]


@dataclass
class Ctx:
    """Where a case runs: `tmp` its own folder, `out` its out_root (tmp/out)."""

    tmp: Path
    case: Case
    mark: str = field(default_factory=lambda: uuid.uuid4().hex)
    proc: subprocess.Popen | None = None
    data: dict[str, Any] = field(default_factory=dict)  # what setup/act leave for check
    cleanups: list[Callable[[], None]] = field(default_factory=list)  # run after the case

    @property
    def out(self) -> Path:
        return self.tmp / "out"

    def overrides(self) -> list[str]:
        """The case's config overrides (what names its run directory)."""
        base = list(FAST) if self.case.fast_args else []
        return [*base, *(a for a in self.case.args if not a.startswith("-"))]

    def run_dir(self) -> Path:
        from tests.cli import run_dir_of

        return run_dir_of(self.out, *self.overrides())

    def plain(self) -> dict[str, Any]:
        """The case's resolved job config (as the run resolves it)."""
        import experiments
        from tests.compose import composed

        cfg = composed(*self.overrides(), f"out_root={self.out}", hydra=True)
        return experiments.resolved_job(cfg)


@dataclass(frozen=True)
class Case:
    name: str
    cls: str  # the class (or one found here): the catalogue's counts are by class
    args: tuple[str, ...] = ()
    code: int | tuple[int, ...] = 2  # the exit code (or the codes a race may end with)
    line: str = ""  # a regex searched in the last line of stderr (of stdout for exit 0)
    env: Mapping[str, str | None] = field(default_factory=dict)  # None: unset
    setup: Callable[[Ctx], None] | None = None
    status: str | None = None  # the run's summary status afterwards; None: no summary
    inproc: bool = True
    act: Callable[[Ctx], None] | None = None  # a real process: what to do while it runs
    check: Callable[[Ctx, Result], None] | None = None
    # run | torchrun (2 processes) | make | one of MODULES (sweep, status, report, ...)
    cmd: str = "run"
    one_line: bool | None = None  # default: exit code 2
    fast_args: bool = True  # prepend FAST
    out_root: bool = True  # append out_root=<case folder>/out
    no_dir: bool | None = None  # default: in-process, no setup, exit 2
    cwd: str | None = None  # "tmp": run from the case's folder
    timeout: float = 600
    slow: bool = False
    traceback: bool = False  # a traceback not ours is expected (torchrun's report)
    # in-process: what to replace first, `patch(monkeypatch, ctx)` (a clean checkout's commit)
    patch: Callable[[Any, Ctx], None] | None = None
    # a real process in a session of its own: none of the session's processes (every process
    # group its processes made) may outlive the command
    session: bool = False
    # a sweep stopped part-way: the runs it finished before the stop stay finished (its exit
    # code is the stop's); its own check says what the others must be
    finishes: bool = False
    # a real interpreter, not a command forked from the tests' zygote (tests/zygote.py): the
    # case acts while Python starts and imports (`importing`), which a forked command has done
    interpreter: bool = False

    @property
    def id(self) -> str:
        return f"{self.cls}:{self.name}"


def plants(*setups: Callable[[Ctx], None]) -> Callable[[Ctx], None]:
    """One setup that runs `setups` in order."""

    def setup(ctx: Ctx) -> None:
        for one in setups:
            one(ctx)

    return setup


def planted(where: str, content: bytes | str | None = "mine\n") -> Callable[[Ctx], None]:
    """A setup writing `{tmp}/<where>` with `content` (None: made a directory)."""

    def setup(ctx: Ctx) -> None:
        path = ctx.tmp / where
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.is_file():
            path.unlink()
        if content is None:
            path.mkdir()
        elif isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)

    return setup


# --- running a case -------------------------------------------------------------------------


# the commands a case may run as `python -m <module>` (`cmd`: the key)
MODULES = {
    "sweep": "experiments.sweep",
    "status": "analysis.runs.status",
    "report": "analysis.reports.report",
    "recompute": "analysis.reproduce.recompute",
    "verify": "analysis.reproduce.verify",
    "tune_preset": "analysis.tuning.tune_preset",
    "wandb_report": "analysis.reports.wandb_report",
    "verdict_page": "analysis.reports.verdict_page",
}


def command(case: Case, ctx: Ctx) -> list[str]:
    args = list(case.args)
    if case.cmd in ("run", "torchrun"):
        base = list(FAST) if case.fast_args else []
        out = [f"out_root={ctx.out}"] if case.out_root else []
        launcher = ["torchrun", "--nproc-per-node", "2"] if case.cmd == "torchrun" else []
        return [*launcher, "run.py", *base, *args, *out]
    if case.cmd == "make":
        return ["make", *args]
    if case.cmd in MODULES:
        return ["-m", MODULES[case.cmd], *args]
    raise ValueError(case.cmd)


def run_case(case: Case, ctx: Ctx, monkeypatch) -> Result:
    argv = [a.replace("{tmp}", str(ctx.tmp)) for a in command(case, ctx)]
    if case.inproc:
        return _in_process(case, ctx, argv, monkeypatch)
    return _subprocess(case, ctx, argv)


def _in_process(case: Case, ctx: Ctx, argv: list[str], monkeypatch) -> Result:
    if case.cmd == "run":
        script = str(REPO / "run.py")
        call = run_py_call()
        argv = [script, *argv[1:]]
    else:
        import importlib

        main = importlib.import_module(MODULES[case.cmd]).main

        def call():
            return main(argv[2:])

    if case.patch is not None:
        case.patch(monkeypatch, ctx)
    env = {k: None if v is None else v.replace("{tmp}", str(ctx.tmp)) for k, v in case.env.items()}
    proc = in_process(
        call,
        argv=argv if case.cmd == "run" else None,
        env=env,
        cwd=ctx.tmp if case.cwd == "tmp" else REPO,
        monkeypatch=monkeypatch,
    )
    return Result(proc.returncode, proc.stdout, proc.stderr)


def _subprocess(case: Case, ctx: Ctx, argv: list[str]) -> Result:
    env = child_env({MARK: ctx.mark})
    for key, value in case.env.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value.replace("{tmp}", str(ctx.tmp))
    stdout, stderr = ctx.tmp / "stdout.txt", ctx.tmp / "stderr.txt"
    cwd = ctx.tmp if case.cwd == "tmp" else REPO
    if argv[0] == "torchrun":
        argv = ["-m", "torch.distributed.run", *argv[1:]]
    argv = [str(REPO / "run.py") if a == "run.py" else a for a in argv]
    if case.cmd == "make":  # the checkout's own environment (make's PY), as a user runs it
        env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
        start = functools.partial(subprocess.Popen, argv)
    elif case.interpreter:
        start = functools.partial(subprocess.Popen, [sys.executable, *argv])
    else:  # `python ...`: forked from the tests' zygote where it may be (torch imported once)
        start = functools.partial(zygote.popen, argv)
    with stdout.open("w") as out, stderr.open("w") as err:
        ctx.proc = start(
            cwd=cwd, env=env, stdout=out, stderr=err, text=True, start_new_session=case.session
        )
        try:
            if case.act is not None:
                case.act(ctx)
            code = ctx.proc.wait(timeout=case.timeout)
        finally:
            if ctx.proc.poll() is None:
                ctx.proc.kill()
                ctx.proc.wait()
    return Result(code, stdout.read_text(), stderr.read_text())


# --- what every case must leave -------------------------------------------------------------


def snapshot(root: Path) -> dict[Path, bytes]:
    out = {}
    if root.exists():
        for path in root.rglob("*"):
            if path.is_file() and not path.is_symlink() and not path.name.startswith(".lock"):
                try:
                    out[path] = path.read_bytes()
                except OSError:
                    pass
    return out


def verify(case: Case, ctx: Ctx, before: dict[Path, bytes], result: Result) -> None:
    said = (
        f"{case.id}: exit {result.code}\nstdout: {result.stdout[-1500:]}\n"
        f"stderr: {result.stderr[-3000:]}"
    )
    codes = case.code if isinstance(case.code, tuple) else (case.code,)
    assert result.code in codes, said
    if not case.traceback:
        assert "Traceback" not in result.stderr, said
    lines = result.lines
    if case.line:
        # how the run ended: stderr, or for a run that succeeded (exit 0) its last stdout line
        said_last = lines if 0 not in codes else result.stdout.strip().splitlines()
        assert said_last, said
        assert re.search(case.line, said_last[-1]), f"{said}\nexpected /{case.line}/"
    one_line = case.one_line if case.one_line is not None else case.code == 2
    if one_line:
        assert len(lines) == 1, said
    if case.check is not None:  # first: a check may wait for a second command (a race)
        case.check(ctx, result)
    leftovers = [
        p
        for p in ctx.tmp.rglob("*")
        if (p.name.endswith(".tmp") or p.name == ".reserve") and not _read_only(p)
    ]
    assert not leftovers, f"{said}\nleft behind: {leftovers}"
    summaries = {}
    for path in ctx.tmp.rglob("summary.json"):
        if ".superseded" in path.parts or not path.is_file():
            continue
        try:
            summaries[path] = json.loads(path.read_text())
        except (ValueError, OSError):
            summaries[path] = None  # damaged (planted)
    # (a race case's twin command may have finished the run this command was refused: its
    # record is the twin's, checked by the case's own check)
    if result.code not in (0, 3) and "twin" not in ctx.data and not case.finishes:
        for path, summary in summaries.items():
            if before.get(path) == path.read_bytes():
                continue  # planted, untouched
            assert not (isinstance(summary, dict) and summary.get("status") in FINISHED), (
                f"{said}\n{path} marked {summary.get('status')} by a failed command"
            )
    if case.cmd == "run" and case.out_root and case.status != "any":
        # The run directory is `<out_root>/runs/<name>`: where no summary is there but the
        # planted ones, "no record written" holds without composing the config again to name
        # the directory (that second composition was a third of a refused case's time).
        new = [p for p in (ctx.out / "runs").glob("*/summary.json") if p not in before]
        if case.status is None and not new:
            run_dir = None
        else:
            run_dir = _named_run_dir(ctx)
        if run_dir is not None:
            path = run_dir / "summary.json"
            if case.status is None:
                assert not path.is_file() or path in before, f"{said}\n{path} written"
            else:
                summary = json.loads(path.read_text())
                assert summary["status"] == case.status, f"{said}\n{summary}"
    if case.code == 2:  # refused: everything planted is as it was
        for path, content in before.items():
            assert path.exists() and path.read_bytes() == content, f"{said}\n{path} changed"
    no_dir = case.no_dir
    if no_dir is None:
        no_dir = case.inproc and case.setup is None and case.code == 2 and case.cmd == "run"
    if no_dir:
        assert not (ctx.out / "runs").exists(), f"{said}\na run directory was made"
    assert_no_process_left(ctx)


def _named_run_dir(ctx: Ctx) -> Path | None:
    """The case's run directory, or None where its overrides do not compose."""
    try:
        return ctx.run_dir()
    except Exception:  # the case's overrides do not compose: nothing to name
        return None


def _read_only(path: Path) -> bool:
    """Whether `path` lies on a file system mounted read-only (nothing there can be removed:
    the disk reserve of a run whose disk turned read-only stays, as the README says)."""
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


FINISHED = ("completed", "diverged")


def marked_processes(mark: str) -> list[int]:
    """The live processes whose environment holds the case's marker."""
    found = []
    needle = f"{MARK}={mark}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle not in (entry / "environ").read_bytes():
                continue
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            found.append(int(entry.name))
    return found


def running_run_py(ctx: Ctx) -> bool:
    """A `python run.py` started by the case's command (a sweep's, a rerun's) is running."""
    for pid in marked_processes(ctx.mark):
        try:
            if b"run.py" in Path(f"/proc/{pid}/cmdline").read_bytes():
                return True
        except OSError:
            continue
    return False


def session_processes(sid: int) -> list[int]:
    """The live processes of session `sid` (every process group made in it)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid and fields[0] != "Z":
            found.append(int(entry.name))
    return found


def assert_no_process_left(ctx: Ctx) -> None:
    if ctx.proc is None:
        return
    deadline = time.monotonic() + 15  # the kernel's reaping, not the suite's: generous

    def left_behind() -> list[int]:
        found = marked_processes(ctx.mark)
        if ctx.case.session:  # also what left the marked environment (by process group)
            found += [p for p in session_processes(ctx.proc.pid) if p not in found]
        return found

    while left_behind() and time.monotonic() < deadline:
        time.sleep(0.1)
    left = left_behind()
    for pid in left:  # do not leave them to the next test either
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    assert not left, f"{ctx.case.id}: processes left behind: {left}"


# --- helpers for the table ------------------------------------------------------------------


def wait_for(what: Callable[[], bool], ctx: Ctx, timeout: float = 300, every: float = 0.02) -> None:
    """Poll until `what()` (every `every` s); fail when the case's process ended first."""
    deadline = time.monotonic() + timeout
    while not what():
        assert ctx.proc is not None and ctx.proc.poll() is None, (
            f"{ctx.case.id}: the process ended before the moment to act"
        )
        assert time.monotonic() < deadline, f"{ctx.case.id}: the moment to act never came"
        time.sleep(every)


def _in_masks(pid: int, sig: int, *masks: str) -> bool:
    """Whether `sig` is set in any of the signal masks `masks` ("SigCgt", ...) of process `pid`
    (/proc/<pid>/status; False when the process is gone)."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return False
    bit = 1 << (sig - 1)
    prefixes = tuple(f"{mask}:" for mask in masks)
    return any(int(line.split()[1], 16) & bit for line in lines if line.startswith(prefixes))


def catches(pid: int, sig: int) -> bool:
    """Whether process `pid` has a handler for `sig` (/proc: SigCgt)."""
    return _in_masks(pid, sig, "SigCgt")


def workers(ctx: Ctx) -> list[int]:
    """The worker processes of the case's process (marked): forked by its forkserver
    (experiments/workers/startup.py: the server's children, not the server itself), or
    spawned (`COMMSGD_START_METHOD=spawn`)."""
    cmdlines, parents = {}, {}
    for pid in marked_processes(ctx.mark):
        try:
            cmdlines[pid] = Path(f"/proc/{pid}/cmdline").read_bytes()
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        parents[pid] = int(stat.rsplit(")", 1)[1].split()[1])
    servers = {pid for pid, cmd in cmdlines.items() if b"forkserver" in cmd}
    out = [
        pid
        for pid, cmd in cmdlines.items()
        if b"spawn_main" in cmd or (pid in servers and parents.get(pid) in servers)
    ]
    return sorted(out)


def evaluated(ctx: Ctx) -> bool:
    """The run's first evaluation is on disk (it trains)."""
    return any(p.stat().st_size for p in ctx.out.glob("runs/*/metrics.jsonl"))


def checkpointed(ctx: Ctx) -> bool:
    return any(ctx.out.glob("runs/*/checkpoint/latest.json"))


def summary_of(ctx: Ctx) -> dict:
    (path,) = [p for p in ctx.out.glob("runs/*/summary.json")]
    return json.loads(path.read_text())


def send(*signals: int, gap: float = 0.02) -> Callable[[Ctx], None]:
    def act(ctx: Ctx) -> None:
        for sig in signals:
            ctx.proc.send_signal(sig)
            time.sleep(gap)

    return act


def pending(pid: int, sig: int) -> bool:
    """Whether `sig` waits to be taken by process `pid` (/proc: SigPnd, ShdPnd)."""
    return _in_masks(pid, sig, "SigPnd", "ShdPnd")


def press(sig: int, times: int, settle: float = 0.02) -> Callable[[Ctx], None]:
    """`sig` sent `times` times, each once the previous one was taken by the case's process and
    then by its workers (what it forwards to them). The kernel keeps one pending signal of a
    kind: a second sent before the first was taken is lost, as it was when two Ctrl-Cs 20 ms
    apart met a process that had not had the CPU in between (int-twice-after-a-checkpoint, once
    under load). `settle`: the process's handler forwarding it, after the kernel handed it over."""

    def taken(pids: list[int], ctx: Ctx) -> None:
        wait_for(lambda: not any(pending(pid, sig) for pid in pids), ctx, 60, every=0.001)

    def act(ctx: Ctx) -> None:
        for i in range(times):
            if i:  # the previous one taken (after the last, the process may end at once)
                taken([ctx.proc.pid], ctx)
                time.sleep(settle)
                taken(workers(ctx), ctx)
            ctx.proc.send_signal(sig)

    return act


def then(*acts: Callable[[Ctx], None]) -> Callable[[Ctx], None]:
    def act(ctx: Ctx) -> None:
        for a in acts:
            a(ctx)

    return act


def when(condition: Callable[[Ctx], bool], timeout: float = 300) -> Callable[[Ctx], None]:
    return lambda ctx: wait_for(lambda: condition(ctx), ctx, timeout)


def importing(ctx: Ctx) -> bool:
    """run.py is past Python's start-up (its first handler is in place), still importing."""
    return catches(ctx.proc.pid, signal.SIGTERM)
