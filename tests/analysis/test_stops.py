"""analysis/stops.py: a results command stopped by Ctrl-C or a stop signal says so in one line
and exits with the shell's code for that signal (issue 50, class 3)."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

import pytest

from tests.cli import REPO

SCRIPT = textwrap.dedent(
    """
    import sys, time
    from analysis.stops import stoppable

    @stoppable("demo")
    def main(argv=None):
        print("ready", flush=True)
        try:
            time.sleep(60)
        except Exception:  # a stop is no Exception: this must not swallow it
            return 0
        return 0

    sys.exit(main())
    """
)


@pytest.mark.parametrize(
    ("sig", "code", "what"),
    [
        (signal.SIGINT, 130, "interrupted by Ctrl-C"),
        (signal.SIGTERM, 143, "stopped by SIGTERM"),
        (signal.SIGHUP, 129, "stopped by SIGHUP"),
    ],
)
def test_a_stop_is_one_line_and_the_signals_code(sig, code, what):
    proc = subprocess.Popen(
        [sys.executable, "-c", SCRIPT], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == code
    lines = err.strip().splitlines()
    assert lines == [f"error: demo: {what}; what it had finished is kept, nothing of the "
                     "interrupted work was written"]  # fmt: skip


def test_the_previous_handlers_come_back():
    from analysis.stops import stoppable

    before = signal.getsignal(signal.SIGTERM)

    @stoppable("demo")
    def main():
        assert signal.getsignal(signal.SIGTERM) is not before
        return 7

    assert main() == 7
    assert signal.getsignal(signal.SIGTERM) is before


def test_an_error_is_not_a_stop():
    from analysis.stops import stoppable

    @stoppable("demo")
    def main():
        raise ValueError("a bug keeps its traceback")

    with pytest.raises(ValueError):
        main()


def test_a_reader_that_went_away_ends_the_command_quietly():
    """`python -m analysis.runs.status | head`: no BrokenPipeError traceback, the code of
    SIGPIPE."""
    script = (
        "import sys\n"
        "from analysis.stops import stoppable\n"
        "@stoppable('demo')\n"
        "def main():\n"
        "    for i in range(10**6):\n"
        "        print('line', i)\n"
        "    return 0\n"
        "sys.exit(main())\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert proc.stdout.readline() == b"line 0\n"
    proc.stdout.close()  # the reader goes away
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141
    assert err == ""


def test_a_stop_hidden_by_a_failed_clean_up_is_still_the_stop(capsys):
    """A library's `finally` that fails on the state a stop left (argparse's
    parse_intermixed_args raised AttributeError 'save_nargs' on a SIGTERM in its parsing) is
    said as the stop, not as that error's traceback."""
    from analysis.stops import stoppable
    from experiments.errors import Stopped

    @stoppable("demo")
    def main():
        try:
            raise Stopped(signal.SIGTERM)
        finally:
            raise AttributeError("'_StoreAction' object has no attribute 'save_nargs'")

    assert main() == 143
    assert capsys.readouterr().err.startswith("error: demo: stopped by SIGTERM; ")
