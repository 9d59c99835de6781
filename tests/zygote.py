"""`python run.py ...` and `python -m NAME ...` for the tests, started without their ~2.2 CPU-s
of `import torch` each (issue 48): a template process (a "zygote") imports torch and the other
heavy libraries once per test process and forks a process per command from there.

Why by hand: neither the standard library nor pytest starts a program from an interpreter that
has already imported its libraries (multiprocessing's forkserver forks *functions* of a
preloaded interpreter, not programs with their own argv, standard streams, working directory,
environment and exit status). `make test` started ~300 interpreters that did little but
import torch before they answered (docs/tests.md, "Where the CPU-seconds go").

What the forked process is: a process of its own (its own pid, signals delivered to it, its
own children, its exit code or the signal that ended it), running the program as the
interpreter would (`runpy`, `sys.argv`, `sys.orig_argv`, `sys.path[0]`, `__main__`), with the
command's standard streams, working directory and environment. What it is not: the interpreter
was started once, for the zygote, so what an interpreter reads only when it starts is the
zygote's. A command is forked only where that cannot differ: its environment agrees with the
zygote's on every variable read at start-up (`START_PREFIXES`: Python's own, the C library's
allocator, the thread pools', locale); every other command, and every command where
`COMMSGD_TEST_ZYGOTE=0`, starts a real interpreter. Tests of what an interpreter does at
start-up (torch not imported: tests/test_torch_free.py; the allocator's settings:
tests/test_allocator.py) start real interpreters themselves. `/proc/<pid>/cmdline` and
`/proc/<pid>/environ` of a forked command show the command's (`_show_as`).

What a forked command starts is forked too, where it may be: the forkserver run.py starts for
its workers, from the command (`_fork_forkservers`), and the Python programs it starts with
`subprocess`, from the zygote under the same rules as a test's own (`_fork_nested`);
`COMMSGD_TEST_FORK_CHILDREN=0` in its environment execs them (tests/zygote_cost.py compares).

Each forked command has a waiter: the zygote forks the waiter, the waiter forks the command
and reports its pid and then its exit status over the request's socket, so that the zygote
never waits and a command's parent lives exactly as long as the command. The zygote imports
but runs nothing; the threads besides its main one are OpenBLAS's (numpy's and scipy's, started
at import, each with its own fork handlers), as in the suite's own forkserver, which forks the
workers from numpy's (experiments/workers/startup.py). A forked command ends without the
interpreter's teardown of its modules (`_exit`: the threads, atexit handlers and streams as an
interpreter ends): the zygote's modules are not the command's to free.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# Variables an interpreter (or a library it imports at start-up: torch's thread pools, glibc's
# allocator) reads when it starts: a command whose value of one differs from the zygote's
# starts a real interpreter.
START_PREFIXES = (
    "PYTHON", "MALLOC_", "LD_", "OMP_", "MKL_", "KMP_", "GOMP_", "OPENBLAS_", "TORCH_",
    "PYTORCH_", "ATEN_", "ONEDNN_", "DNNL_", "CUDA", "LC_", "LANG", "COMMSGD_TEST_ZYGOTE",
    "SCIPY_", "MPL", "MATPLOTLIBRC", "XDG_", "HOME",
)  # fmt: skip
# Third-party only: the suite's own modules read the environment as they import, which must be
# the command's. pandas, scipy.stats and matplotlib's figures for the analysis commands (report,
# recompute, verify, tune_preset, replicate: ~1.6 CPU-s of imports each on top of torch's,
# measured loaded; matplotlib reads its rc file and font cache where MPL*, XDG_* and HOME say).
PRELOAD = (
    "torch", "torchvision", "numpy", "hydra", "omegaconf", "pandas", "scipy.stats",
    "matplotlib.figure", "matplotlib.backends.backend_agg",
)  # fmt: skip


def _start_env(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith(START_PREFIXES)}


# --- the zygote (python -m tests.zygote SOCKET) ---------------------------------------------------


def _send(conn: socket.socket, line: str) -> None:
    conn.sendall(line.encode() + b"\n")


def _run_command(request: dict, fds: list[int]) -> None:
    """In the forked command: become the command, then run it as the interpreter would (an
    uncaught exception, SystemExit and KeyboardInterrupt end this process as they end a
    program)."""
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    if request["new_session"]:
        os.setsid()
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2,
                signal.SIGCHLD):  # fmt: skip
        signal.signal(sig, signal.SIG_DFL)
    for sig in request["ignored"]:  # what the test process ignores, as an exec'd child would
        signal.signal(sig, signal.SIG_IGN)
    argv = request["argv"]  # without the executable: ["run.py", ...], ["-m", NAME, ...]
    sys.orig_argv = [sys.executable, *argv]
    # /proc shows the command's argv and environment, else the zygote's (a test that finds it by
    # them would not): where the kernel refuses, they stay the zygote's
    _show_as(sys.orig_argv, request["env"])
    if request["env"].get(FORK_CHILDREN, "1") != "0":
        _fork_forkservers()
        _fork_nested(request["zygote"])
    code: int | None = 0
    try:
        _run_program(argv)
    except SystemExit as e:  # as the interpreter reads it: None 0, a number, else the message
        code = e.code
        if code is None:
            code = 0
        elif not isinstance(code, int):
            print(code, file=sys.stderr)
            code = 1
    except BaseException as e:  # as the interpreter reports it: the program's frames only
        tb = e.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
            tb = tb.tb_next
        traceback.print_exception(type(e), e, tb)
        code = None if isinstance(e, KeyboardInterrupt) else 1
    _exit(code)


def _fork_forkservers() -> None:
    """In the forked command: multiprocessing's forkserver (which run.py starts for its workers,
    experiments/workers/startup.py) forked from this process instead of an `exec` of a new
    interpreter that imports torch and the suite again (2-4 CPU-s a run.py that starts workers:
    tests/zygote_cost.py, docs/tests.md). The server then is what an exec'd one is once it has
    imported `PRELOAD`: a single-threaded child of the command holding only the descriptors it
    is passed and the standard streams, the command's signal mask (the stop signals blocked by
    `warm`), its caught signals back to their defaults (ignored ones stay ignored, as across an
    `exec`), multiprocessing's own state (its forkserver and resource tracker) as in a new
    process, and the command line and environment an exec'd server shows in
    `/proc/<pid>/cmdline` and `environ` (which its workers inherit, and which the tests read to
    find them: the catalogue's marker, "forkserver"). Where the kernel refuses to set those
    (`_show_as`: a kernel without PR_SET_MM_MAP) the server is exec'd, as is any other program the
    command starts through `spawnv_passfds` (the resource tracker: no torch), and every server
    where the command's environment sets `COMMSGD_TEST_FORK_CHILDREN=0` (tests/zygote_cost.py
    compares; `_run_command` reads it)."""
    from multiprocessing import util

    spawn = util.spawnv_passfds

    def spawnv_passfds(path, args, passfds):
        code = args[-1] if len(args) >= 2 and args[-2] == "-c" else ""
        if not code.startswith("from multiprocessing.forkserver import main"):
            return spawn(path, args, passfds)
        for stream in (sys.stdout, sys.stderr):  # else the server's workers would write the
            try:  # command's unwritten output again
                stream.flush()
            except (OSError, ValueError):
                pass
        ready_r, ready_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(ready_r)
            _become_server(path, args, code, {0, 1, 2, *map(int, passfds)}, ready_w)
        os.close(ready_w)
        with os.fdopen(ready_r, "rb") as ready:
            said = ready.read()
        if said == b"ok":
            return pid
        os.waitpid(pid, 0)  # the kernel kept the zygote's command line: exec'd instead
        return spawn(path, args, passfds)

    util.spawnv_passfds = spawnv_passfds


#: =0 in a command's environment: its forkserver and its Python commands are exec'd, not forked
FORK_CHILDREN = "COMMSGD_TEST_FORK_CHILDREN"
#: What a command may pass `subprocess.Popen` and still be forked (`_fork_nested`).
NESTED_KWARGS = {"cwd", "env", "stdin", "stdout", "stderr", "text", "universal_newlines",
                 "start_new_session", "close_fds"}  # fmt: skip


def _fork_nested(zygote: tuple[str, dict[str, str]]) -> None:
    """In the forked command: the Python programs it starts itself with `subprocess` (the
    benchmarks' `python run.py`) forked from the same zygote too, where they may be:
    `[sys.executable, program...]` as `forkable` takes it, an environment that agrees with the
    zygote's on what an interpreter reads at start-up, no standard input of their own (the
    command's is /dev/null), and nothing but NESTED_KWARGS (`stderr=STDOUT` included). A start
    with anything else (a `preexec_fn`, as experiments/sweep.py's that makes a run die with its
    sweep; `pass_fds`; an encoding) starts a real interpreter, as before. A forked program is a
    child of the zygote's waiter, not of the command: what the command reads of it (pid, exit
    status, output, signals sent) is the same. `COMMSGD_TEST_FORK_CHILDREN=0` in the command's
    environment: none is (tests/zygote_cost.py compares; `_run_command` reads it)."""
    start_env = zygote[1]  # (its socket, its start-up environment)

    class Popen(subprocess.Popen):
        def __new__(cls, args, *more, **kwargs):
            argv = _nested_argv(args, more, kwargs, start_env)
            if argv is None:
                return super().__new__(cls)
            return Forked(
                argv,
                cwd=kwargs.get("cwd") or os.getcwd(),
                env=dict(os.environ if kwargs.get("env") is None else kwargs["env"]),
                stdout=kwargs.get("stdout"),
                stderr=kwargs.get("stderr"),
                text=bool(kwargs.get("text") or kwargs.get("universal_newlines")),
                start_new_session=bool(kwargs.get("start_new_session")),
                zygote=zygote,
            )

    subprocess.Popen = Popen


def _nested_argv(args, more: tuple, kwargs: dict, start_env: dict[str, str]) -> list[str] | None:
    """The program of a `subprocess.Popen(args, *more, **kwargs)` that `_fork_nested` forks
    (argv without the executable), or None."""
    if more or not isinstance(args, list | tuple) or not set(kwargs) <= NESTED_KWARGS:
        return None
    if kwargs.get("stdin") not in (None, subprocess.DEVNULL) or kwargs.get("close_fds") is False:
        return None
    if not args or os.fspath(args[0]) not in (sys.executable, os.path.realpath(sys.executable)):
        return None
    argv = [os.fspath(a) for a in args[1:]]
    env = os.environ if kwargs.get("env") is None else kwargs["env"]
    return argv if _program(argv) and _start_env(dict(env)) == start_env else None


_PROC_STRINGS: list = []  # the buffers /proc/<pid>/cmdline and environ now show (kept alive)


def _show_as(args: list[str], env: dict[str, str]) -> bool:
    """Make `/proc/self/cmdline` and `/proc/self/environ` show `args` and `env`, as after an
    `exec` of them (what the tests that look for processes read: the catalogue's marker,
    "run.py", "forkserver"); whether the kernel allowed it. By prctl PR_SET_MM_MAP, which
    needs no privilege (PR_SET_MM's single fields need CAP_SYS_RESOURCE): the process's other
    addresses as /proc/self/stat gives them, unchanged."""
    import ctypes

    class MmMap(ctypes.Structure):  # struct prctl_mm_map, linux/prctl.h
        _fields_ = [
            *((name, ctypes.c_uint64) for name in (
                "start_code", "end_code", "start_data", "end_data", "start_brk", "brk",
                "start_stack", "arg_start", "arg_end", "env_start", "env_end",
            )),
            ("auxv", ctypes.c_void_p), ("auxv_size", ctypes.c_uint32), ("exe_fd", ctypes.c_uint32),
        ]  # fmt: skip

    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.sbrk.restype = ctypes.c_void_p
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return False
    field = lambda n: int(fields[n - 3])  # noqa: E731 - proc(5)'s numbering: the 3rd follows ")"
    strings = []
    for items in (args, [f"{k}={v}" for k, v in env.items()]):
        data = b"".join(os.fsencode(x) + b"\0" for x in items)
        buffer = ctypes.create_string_buffer(data, len(data))
        _PROC_STRINGS.append(buffer)
        strings.append((ctypes.addressof(buffer), ctypes.addressof(buffer) + len(data)))
    (arg_start, arg_end), (env_start, env_end) = strings
    mm = MmMap(
        start_code=field(26), end_code=field(27), start_data=field(45), end_data=field(46),
        start_brk=field(47), brk=libc.sbrk(0), start_stack=field(28), arg_start=arg_start,
        arg_end=arg_end, env_start=env_start, env_end=env_end, auxv=None, auxv_size=0,
        exe_fd=0xFFFFFFFF,  # -1: the executable unchanged
    )  # fmt: skip
    PR_SET_MM, PR_SET_MM_MAP = 35, 14  # noqa: N806
    return libc.prctl(PR_SET_MM, PR_SET_MM_MAP, ctypes.byref(mm), ctypes.sizeof(mm), 0) == 0


def _become_server(path: str, args: list[str], code: str, keep: set[int], ready: int) -> None:
    """In the forked forkserver (`_fork_forkservers`): run multiprocessing's server `code`,
    after saying over `ready` whether this process shows the exec'd server's command line;
    never returns."""
    import multiprocessing.forkserver
    import multiprocessing.resource_tracker

    shown = _show_as(list(args), dict(os.environ))
    os.write(ready, b"ok" if shown else b"no")
    os.close(ready)
    if not shown:
        os._exit(0)
    status = 0
    try:
        for fd in map(int, os.listdir("/proc/self/fd")):
            if fd not in keep:
                try:
                    os.close(fd)
                except OSError:
                    pass
        for sig in signal.valid_signals():
            try:
                if signal.getsignal(sig) not in (signal.SIG_IGN, signal.SIG_DFL, None):
                    signal.signal(sig, signal.SIG_DFL)
            except (OSError, ValueError):
                pass
        multiprocessing.forkserver._forkserver.__init__()
        multiprocessing.resource_tracker._resource_tracker.__init__()
        sys.argv = ["-c"]
        sys.orig_argv = list(args)
        exec(compile(code, "<string>", "exec"), {"__name__": "__main__"})
    except SystemExit as e:  # the server's end: its clients gone
        status = e.code if isinstance(e.code, int) else 0
    except BaseException:
        traceback.print_exc()
        status = 1
    os._exit(status)


def _exit(code: int | None) -> None:
    """The interpreter's exit less its teardown of the modules: the non-daemon threads waited
    for, the atexit handlers, the standard streams flushed, then the code, or for a program
    ended by Ctrl-C (`None`) SIGINT, as an interpreter ends then. The teardown is left out
    because this process holds the zygote's modules (torch): freeing them cost a forked
    `python -m analysis.runs.status --help` 0.9 CPU-s more than a real one, which never
    imports torch (measured); what a teardown owes a user is in the atexit handlers."""
    threading._shutdown()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    if code is None:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    os._exit(code)


def _run_program(argv: list[str]) -> None:
    import runpy

    if argv[0] == "-m":
        sys.argv = [argv[1], *argv[2:]]
        sys.path[0] = os.getcwd()
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    elif argv[0] == "-c":
        sys.argv = ["-c", *argv[2:]]
        sys.path[0] = ""
        exec(compile(argv[1], "<string>", "exec"), {"__name__": "__main__"})
    else:
        script = os.path.abspath(argv[0])
        sys.argv = list(argv)
        sys.path[0] = os.path.dirname(script)
        runpy.run_path(script, run_name="__main__")


def _serve_one(conn: socket.socket, listener: socket.socket) -> None:
    """In the waiter: fork the command, report its pid, wait for it, report its status."""
    message, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
    request = json.loads(message)
    pid = os.fork()
    if pid == 0:
        listener.close()
        conn.close()
        _run_command(request, fds)  # never returns
    for fd in fds:
        os.close(fd)
    _send(conn, f"pid {pid}")
    _, status = os.waitpid(pid, 0)
    _send(conn, f"exit {os.waitstatus_to_exitcode(status)}")
    conn.close()
    os._exit(0)  # the waiter owes nothing at exit


def serve(path: str) -> None:
    for name in PRELOAD:
        __import__(name)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    parent = os.getppid()
    print("ready", flush=True)
    while os.getppid() == parent:  # the test process is gone: so is its zygote
        while True:  # reap the waiters that have ended
            try:
                if os.waitpid(-1, os.WNOHANG)[0] == 0:
                    break
            except ChildProcessError:
                break
        if not select.select([listener], [], [], 1.0)[0]:
            continue
        conn, _ = listener.accept()
        if os.fork() == 0:
            _serve_one(conn, listener)  # never returns in the command, exits in the waiter
        conn.close()


# --- the client (in the test process) -------------------------------------------------------------


class _Zygote:
    def __init__(self) -> None:
        self.folder = tempfile.mkdtemp(prefix="commsgd-zygote-")
        self.path = os.path.join(self.folder, "socket")
        from tests.cli import child_env

        self.env = child_env()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.zygote", self.path],
            cwd=REPO,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            text=True,
        )
        ready = self.proc.stdout.readline().strip()
        if ready != "ready":
            raise RuntimeError(f"the tests' zygote did not start (said {ready!r})")
        atexit.register(self.stop)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.folder, ignore_errors=True)


_ZYGOTE: _Zygote | None = None
_LOCK = threading.Lock()
_STARTS = [0]  # zygotes started by this process: at most MAX_STARTS, then real interpreters
MAX_STARTS = 8


def _zygote() -> _Zygote | None:
    """This test process's zygote, started again where this process's own start-up
    environment has changed since (a test's in-process run set a thread or allocator variable,
    seen in CI): the zygote forks what a real interpreter started from here now would be."""
    global _ZYGOTE
    from tests.cli import child_env

    with _LOCK:
        if (
            _ZYGOTE is None
            or _ZYGOTE.proc.poll() is not None
            or _start_env(_ZYGOTE.env) != _start_env(child_env())
        ):
            if _ZYGOTE is not None:
                _ZYGOTE.stop()
                _ZYGOTE = None
            if _STARTS[0] >= MAX_STARTS:  # an environment that keeps changing: no zygote
                return None
            _STARTS[0] += 1
            _ZYGOTE = _Zygote()
        return _ZYGOTE


def helper_pid() -> int | None:
    """The pid of this test process's zygote while it runs (a helper of the test process that
    outlives each command, as xdist's own: a test that looks for processes left behind by a
    command leaves it out), else None."""
    running = _ZYGOTE
    return running.proc.pid if running is not None and running.proc.poll() is None else None


def _program(argv: list[str]) -> bool:
    """Whether `sys.executable *argv` is a program a zygote may fork (`forkable`,
    `_nested_argv`): `X.py`, `-m NAME` or `-c CODE` with its arguments, no interpreter option;
    and the zygote is not turned off (`COMMSGD_TEST_ZYGOTE=0`)."""
    if os.environ.get("COMMSGD_TEST_ZYGOTE", "1") == "0" or not argv:
        return False
    if argv[0] in ("-m", "-c"):
        return len(argv) >= 2
    return not argv[0].startswith("-") and argv[0].endswith(".py")


def forkable(argv: list[str], env: dict[str, str] | None) -> bool:
    """May `sys.executable *argv` with `env` be forked from the zygote (see the module's
    docstring)? Only a program (`_program`), an environment that agrees with the zygote's on
    what an interpreter reads at start-up."""
    if not _program(argv):
        return False
    from tests.cli import child_env

    zygote = _zygote()
    return zygote is not None and _start_env(child_env() if env is None else env) == _start_env(
        zygote.env
    )


def _ignored() -> list[int]:
    """The signals this process ignores: an interpreter started from here inherits them
    ignored (an `exec` keeps SIG_IGN; Python then leaves SIGINT ignored too)."""
    return [s for s in (signal.SIGINT, signal.SIGQUIT, signal.SIGHUP, signal.SIGTERM)
            if signal.getsignal(s) == signal.SIG_IGN]  # fmt: skip


class Forked:
    """A command forked by the zygote, with the part of `subprocess.Popen`'s interface the
    tests use: pid, args, returncode, poll, wait, communicate, send_signal, terminate, kill,
    and stdout/stderr (text or bytes) where they are pipes."""

    def __init__(
        self,
        argv: list[str],
        *,
        cwd: str | Path,
        env: dict[str, str],
        stdout=None,
        stderr=None,
        text: bool = False,
        start_new_session: bool = False,
        zygote: tuple[str, dict[str, str]] | None = None,
    ) -> None:
        self.args = [sys.executable, *argv]
        self.returncode: int | None = None
        self.stdout = self.stderr = None
        self._text = text
        ends, close = [], []
        null = os.open(os.devnull, os.O_RDONLY)
        close.append(null)
        ends.append(null)
        for which, target in (("stdout", stdout), ("stderr", stderr)):
            if target == subprocess.PIPE:
                read, write = os.pipe()
                close.append(write)
                ends.append(write)
                setattr(self, which, os.fdopen(read, "r" if text else "rb"))
            elif target is None:
                ends.append(1 if which == "stdout" else 2)
            elif target == subprocess.STDOUT and which == "stderr":
                ends.append(ends[1])
            else:
                ends.append(target if isinstance(target, int) else target.fileno())
        request = {
            "argv": list(argv),
            "cwd": str(cwd),
            "env": dict(env),
            "new_session": bool(start_new_session),
            "ignored": _ignored(),
        }
        self._conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            if zygote is None:  # in a test process: its zygote
                started = _zygote()
                if started is None:
                    raise RuntimeError(f"no zygote to fork {argv} from (see `forkable`)")
                zygote = (started.path, _start_env(started.env))
            request["zygote"] = zygote  # for the commands this one starts (`_fork_nested`)
            self._conn.connect(zygote[0])
            socket.send_fds(self._conn, [json.dumps(request).encode()], ends)
        finally:
            for fd in close:
                os.close(fd)
        self._buffer = b""
        word, value = self._line(None)
        if word != "pid":
            raise RuntimeError(f"the tests' zygote did not start {argv} (said {word} {value})")
        self.pid = int(value)

    def _line(self, timeout: float | None) -> tuple[str, str]:
        while b"\n" not in self._buffer:
            if timeout is not None and not select.select([self._conn], [], [], timeout)[0]:
                raise subprocess.TimeoutExpired(self.args, timeout)
            chunk = self._conn.recv(4096)
            if not chunk:
                return "gone", ""
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        word, _, value = line.decode().partition(" ")
        return word, value

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                self.wait(timeout=0)
            except subprocess.TimeoutExpired:
                pass
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            word, value = self._line(timeout)
            # "gone": the zygote's waiter died (killed with the zygote): the command with it
            self.returncode = int(value) if word == "exit" else -signal.SIGKILL
            self._conn.close()
        return self.returncode

    def communicate(self, input=None, timeout: float | None = None):  # noqa: A002 - Popen's name
        if input is not None:
            raise ValueError("a forked command has no standard input (it reads /dev/null)")
        if not hasattr(self, "_readers"):
            self._out = {"stdout": [], "stderr": []}
            self._readers = []
            for which in ("stdout", "stderr"):
                stream = getattr(self, which)
                if stream is not None:
                    chunks = self._out[which]
                    reader = threading.Thread(
                        target=lambda s=stream, c=chunks: c.append(s.read()), daemon=True
                    )
                    reader.start()
                    self._readers.append(reader)
        deadline = None if timeout is None else time.monotonic() + timeout
        for reader in self._readers:
            reader.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
            if reader.is_alive():
                raise subprocess.TimeoutExpired(self.args, timeout)
        self.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
        empty = "" if self._text else b""
        return tuple(
            empty.join(self._out[w]) if getattr(self, w) is not None else None
            for w in ("stdout", "stderr")
        )

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def __enter__(self) -> Forked:
        return self

    def __exit__(self, *exc) -> None:
        for stream in (self.stdout, self.stderr):
            if stream is not None:
                stream.close()
        self.wait()


def popen(argv: list[str], *, cwd, env, **kwargs):
    """`subprocess.Popen([sys.executable, *argv], ...)`, forked from the zygote where it may
    be (`forkable`). kwargs: stdout, stderr, text, start_new_session."""
    if forkable(argv, env):
        return Forked(argv, cwd=cwd, env=env, **kwargs)
    return subprocess.Popen([sys.executable, *argv], cwd=cwd, env=env, **kwargs)


def run(
    argv: list[str], *, cwd, env, timeout: float | None = None, capture_output=False, text=False
) -> subprocess.CompletedProcess:
    """`subprocess.run([sys.executable, *argv], ...)`, forked from the zygote where it may be."""
    if not forkable(argv, env):
        return subprocess.run(
            [sys.executable, *argv],
            cwd=cwd,
            env=env,
            timeout=timeout,
            capture_output=capture_output,
            text=text,
        )
    pipe = subprocess.PIPE if capture_output else None
    proc = Forked(argv, cwd=cwd, env=env, stdout=pipe, stderr=pipe, text=text)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


if __name__ == "__main__":
    serve(sys.argv[1])
