"""The tests' zygote (tests/zygote.py): a command forked from it is what the same command in a
real interpreter is, as far as the tests can see: its output, exit status, argv, working
directory, environment, signals; and a command whose start-up environment differs starts a
real interpreter."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests import zygote
from tests.cli import REPO, child_env

SHOW = (
    "import json, os, sys\n"
    "print(json.dumps({'argv': sys.argv, 'path0': sys.path[0], 'name': __name__,\n"
    "    'cwd': os.getcwd(), 'mark': os.environ.get('ZYGOTE_TEST_MARK'),\n"
    "    'program': sys.orig_argv[1:],\n"
    "    'proc': open('/proc/self/cmdline', 'rb').read().decode().split('\\0')[1:],\n"
    "    'proc_mark': 'ZYGOTE_TEST_MARK=x' in open('/proc/self/environ', 'rb').read().decode()}))\n"
    "print('to stderr', file=sys.stderr)\n"
    "sys.exit(int(sys.argv[-1]))\n"
)


def both(argv: list[str], cwd, env: dict[str, str]):
    real = subprocess.run(
        [sys.executable, *argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )
    forked = zygote.Forked(
        argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    out, err = forked.communicate(timeout=120)
    return real, subprocess.CompletedProcess(forked.args, forked.returncode, out, err)


@pytest.mark.parametrize("form", ["script", "module", "code"])
def test_a_forked_command_is_the_command_run_by_an_interpreter(tmp_path, form):
    (tmp_path / "show.py").write_text(SHOW)
    argv = {
        "script": [str(tmp_path / "show.py"), "a", "3"],
        "module": ["-m", "show", "a", "3"],
        "code": ["-c", SHOW, "a", "3"],
    }[form]
    env = child_env({"ZYGOTE_TEST_MARK": "x"})
    assert zygote.forkable(argv, env)
    real, forked = both(argv, tmp_path, env)
    assert (forked.returncode, forked.stdout, forked.stderr) == (
        real.returncode,
        real.stdout,
        real.stderr,
    )
    assert real.returncode == 3 and '"mark": "x"' in real.stdout
    assert '"proc_mark": true' in real.stdout  # /proc/<pid>/environ, and cmdline: the command's


SERVER = """\
import multiprocessing, os, sys


def probe(_):  # in a worker forked by the forkserver: what it came from, what its server shows
    server = os.getppid()
    return (
        "torch" in sys.modules,  # this program never imports it: the zygote did
        open(f"/proc/{server}/cmdline", "rb").read(),
        b"ZYGOTE_TEST_MARK=x" in open(f"/proc/{server}/environ", "rb").read(),
    )


if __name__ == "__main__":
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["__main__"])
    print("unwritten", end="")  # a server forked with it buffered would have its workers repeat it
    with ctx.Pool(1) as pool:
        print(repr(pool.map(probe, [0])[0]))
"""


@pytest.mark.parametrize("forked", [True, False])
def test_a_forked_commands_forkserver_is_forked_and_shows_what_an_execd_one_does(
    tmp_path, monkeypatch, forked
):
    """The forkserver run.py starts for its workers: forked from a forked command (its torch
    not imported again), shown in /proc as an exec'd one (its command line, the command's
    environment: what tests/catalogue.py and tests/test_faults.py find workers by)."""
    (tmp_path / "server.py").write_text(SERVER)
    monkeypatch.setenv("COMMSGD_TEST_ZYGOTE", "1" if forked else "0")
    proc = zygote.run(
        [str(tmp_path / "server.py")],
        cwd=tmp_path,
        env=child_env({"ZYGOTE_TEST_MARK": "x"}),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    said = eval(proc.stdout.removeprefix("unwritten"))  # noqa: S307 - the probe's own repr
    assert said[0] is forked  # the cause: torch, imported by the zygote, came with the fork
    assert b"\0-c\0from multiprocessing.forkserver import main; main(" in said[1]
    assert said[2] is True
    assert proc.stdout.count("unwritten") == 1


def test_an_uncaught_exception_is_reported_as_by_an_interpreter(tmp_path):
    code = "def f():\n    raise ValueError('no')\nf()\n"
    real, forked = both(["-c", code], tmp_path, child_env())
    assert forked.returncode == real.returncode == 1
    assert forked.stderr == real.stderr  # the program's frames only, not the zygote's
    assert forked.stderr.rstrip().endswith("ValueError: no")


def masks(pid: int) -> dict[str, int]:
    """The standard signals (1-31) process `pid` ignores and catches (/proc: SigIgn, SigCgt;
    not the C library's own real-time ones, which a process that has had threads handles)."""
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return {
        k: int(v, 16) & 0x7FFFFFFF for k, _, v in (x.partition(":") for x in lines) if k in MASKS
    }


MASKS = ("SigIgn", "SigCgt")


@pytest.mark.parametrize(
    "sig, code", [(signal.SIGINT, -signal.SIGINT), (signal.SIGTERM, -signal.SIGTERM)]
)
def test_a_signal_ends_a_forked_command_as_it_ends_an_interpreter(sig, code):
    waits = "import time\nprint('up', flush=True)\ntime.sleep(600)\n"
    seen = []
    for start in (subprocess.Popen, zygote.Forked):
        argv = ["-c", waits] if start is zygote.Forked else [sys.executable, "-c", waits]
        proc = start(argv, cwd=REPO, env=child_env(), stdout=subprocess.PIPE,
                     stderr=subprocess.PIPE, text=True)  # fmt: skip
        assert proc.stdout.readline() == "up\n"
        assert proc.pid != os.getpid() and (start is subprocess.Popen or proc.poll() is None)
        # what it ignores and catches is an interpreter's started from here (a test process
        # that ignores SIGINT, as one started in the background does, passes that on)
        seen.append(masks(proc.pid))
        if signal.getsignal(sig) == signal.SIG_IGN:
            proc.kill()
            proc.communicate(timeout=60)
            continue
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == code, (start, err)
        assert ("KeyboardInterrupt" in err) == (sig == signal.SIGINT), err
    assert seen[0] == seen[1]


def test_a_forked_command_may_have_a_session_of_its_own():
    proc = zygote.Forked(
        ["-c", "import os; print(os.getsid(0) == os.getpid())"],
        cwd=REPO,
        env=child_env(),
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert proc.communicate(timeout=60) == ("True\n", None) and proc.returncode == 0


def test_wait_and_communicate_time_out_as_popen_does_and_kill_ends_the_command():
    proc = zygote.Forked(["-c", "import time; time.sleep(60)"], cwd=REPO, env=child_env(),
                         stdout=subprocess.PIPE, text=True)  # fmt: skip
    with pytest.raises(subprocess.TimeoutExpired):
        proc.wait(timeout=0.2)
    with pytest.raises(subprocess.TimeoutExpired):
        proc.communicate(timeout=0.2)
    assert proc.poll() is None  # the timeouts left the command running, as Popen's do
    proc.kill()
    assert proc.wait(timeout=60) == -signal.SIGKILL
    with pytest.raises(subprocess.TimeoutExpired):
        zygote.run(["-c", "import time; time.sleep(60)"], cwd=REPO, env=child_env(), timeout=0.5)


def test_a_command_whose_start_up_environment_differs_starts_a_real_interpreter():
    argv = ["-c", "import sys; print('torch' in sys.modules)"]
    assert zygote.forkable(argv, child_env())
    for extra in ({"PYTHONHASHSEED": "7"}, {"MALLOC_ARENA_MAX": "2"}, {"OMP_NUM_THREADS": "1"}):
        assert not zygote.forkable(argv, child_env(extra)), extra
    plain = {k: v for k, v in child_env().items() if k != "PYTHONUNBUFFERED"}
    assert not zygote.forkable(argv, plain)
    assert not zygote.forkable(["-X", "importtime", "-c", "pass"], child_env())
    # the zygote has imported torch, a real interpreter has not
    assert zygote.run(argv, cwd=REPO, env=child_env(), capture_output=True, text=True).stdout == (
        "True\n"
    )
    real = zygote.run(argv, cwd=REPO, env=child_env({"PYTHONHASHSEED": "7"}),
                      capture_output=True, text=True)  # fmt: skip
    assert real.stdout == "False\n"


def test_every_command_starts_a_real_interpreter_where_the_zygote_is_turned_off(monkeypatch):
    monkeypatch.setenv("COMMSGD_TEST_ZYGOTE", "0")
    assert not zygote.forkable(["-c", "pass"], child_env())


NESTED = """\
import os, subprocess, sys

child = [sys.executable, "-c", "import sys; print('torch' in sys.modules, sys.argv[1:])", "a"]
done = subprocess.run(child, capture_output=True, text=True, timeout=120)
print(done.returncode, done.stdout.strip())
# a start that asks for more than a fork can give (a preexec_fn): a real interpreter
done = subprocess.run(child, capture_output=True, text=True, timeout=120, preexec_fn=os.getpid)
print(done.returncode, done.stdout.strip())
with subprocess.Popen(child, stdout=subprocess.PIPE, stderr=subprocess.STDOUT) as proc:
    print(proc.stdout.read().decode().strip(), proc.wait())
"""


def test_a_forked_commands_own_python_commands_are_forked_where_they_may_be(tmp_path):
    """What a forked command starts with `subprocess` (the benchmarks' `python run.py`): forked
    from the zygote too (torch already imported: the cause), with the output, argv and exit
    status a real interpreter gives; a start with a `preexec_fn` gets a real interpreter."""
    real, forked = both(["-c", NESTED], tmp_path, child_env())
    assert real.returncode == forked.returncode == 0, forked.stderr
    assert real.stdout.splitlines() == ["0 False ['a']", "0 False ['a']", "False ['a'] 0"]
    assert forked.stdout.splitlines() == ["0 True ['a']", "0 False ['a']", "True ['a'] 0"]
