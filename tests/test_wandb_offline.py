"""W&B never hangs a command and never fails a finished run (issue 36 item 4).

wandb.mode=online is checked once per command, before any work, against the W&B server
(experiments/checks/wandb_login.py `wandb_login_problem`): no network, a server that does not
answer or a key it refuses is one line and exit code 2 within seconds. A W&B lost after that check
(experiments/store/log.py `WandbSink`): an online start that fails goes on offline with one
warning; a `log` or the end that raises is one warning and the run goes on; a finished training
is recorded as it finished. The W&B server here is a local stand-in (`fake_wandb`) or a closed
port; W&B itself is faked by monkeypatching `wandb.init` where a test needs a run that fails.
"""

from __future__ import annotations

import base64
import contextlib
import json
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from experiments import preflight
from experiments.checks import wandb_login
from experiments.store import log
from tests.cli import run_py_here
from tests.fixtures import make_fixtures as fx

FAST = ("scale=smoke", "dataset=synthetic", "progress=false", "epochs=1", "cluster=sim")
KEY = "k" * 40  # W&B's client refuses keys shorter than 40 characters before asking
HINT = "(or run with wandb.mode=offline and `wandb sync` the records later)"


@contextlib.contextmanager
def fake_wandb(key: str = KEY, other: int = 400, silent: bool = False) -> Iterator[tuple]:
    """A local stand-in for W&B's API: the pre-flight's query for the key's user is answered
    (its user for `key`, HTTP 401 for any other), every other request with HTTP `other`; with
    `silent`, nothing is ever answered. Yields its URL and the list of requests' bodies."""
    requests: list[bytes] = []
    answer = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            requests.append(body)
            if silent:
                answer.wait(30)
                return
            known = (
                self.headers.get("Authorization")
                == "Basic " + base64.b64encode(f"api:{key}".encode()).decode()
            )
            if b"CommsgdViewer" in body:
                code, data = (200, {"data": {"viewer": {"id": "u1"}}}) if known else (401, {})
            else:
                code, data = other, {"data": None, "errors": [{"message": "stand-in"}]}
            text = json.dumps(data).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(text)))
            self.end_headers()
            self.wfile.write(text)

        do_GET = do_POST

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", requests
    finally:
        answer.set()
        server.shutdown()
        server.server_close()


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def online(url: str, key: str = KEY) -> dict[str, str]:
    return {"WANDB_API_KEY": key, "WANDB_BASE_URL": url, "WANDB_MODE": None}


# --- before any work ----------------------------------------------------------------------------


def test_no_network_is_one_line_and_exit_2_before_any_work(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    proc = run_py_here(*FAST, "wandb.mode=online", f"out_root={tmp_path / 'o'}", env=online(url))
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [
        f"error: wandb.mode=online: cannot reach W&B at {url} (Connection refused) {HINT}"
    ]
    assert not (tmp_path / "o").exists()  # nothing made


def test_a_refused_key_is_one_line_and_exit_2(tmp_path: Path) -> None:
    with fake_wandb() as (url, requests):
        proc = run_py_here(
            *FAST, "wandb.mode=online", f"out_root={tmp_path}", env=online(url, "x" * 40)
        )
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        f"error: wandb.mode=online: W&B at {url} does not accept the API key: check "
        f"WANDB_API_KEY or run `wandb login --relogin` {HINT}"
    ]
    assert len(requests) == 1
    assert not list(tmp_path.glob("runs/*"))


def test_a_server_that_does_not_answer_is_refused_within_the_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(wandb_login, "WANDB_CHECK_TIMEOUT_S", 1.0)
    with fake_wandb(silent=True) as (url, _):
        start = time.monotonic()
        proc = run_py_here(*FAST, "wandb.mode=online", f"out_root={tmp_path}", env=online(url))
        took = time.monotonic() - start
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        f"error: wandb.mode=online: W&B at {url} did not answer within 1 s {HINT}"
    ]
    # bounded by the check's deadline, not wandb.init's 90 s wait; the bound is the 30 s,
    # not the 1 s deadline plus start-up, which a loaded machine stretches (7 s seen)
    assert took < 30


def test_a_sweep_asks_w_and_b_once_and_refuses_every_point(tmp_path: Path) -> None:
    with fake_wandb() as (url, requests):
        proc = run_py_here(
            "-m", *FAST, "wandb.mode=online", "seed=0,1,2", f"out_root={tmp_path}",
            env=online(url, "y" * 40),
        )  # fmt: skip
    assert proc.returncode == 2
    # each point refused as it came ("failed seed=N: ..."), then the reason said once, at the end
    failed = [line for line in proc.stderr.splitlines() if line.startswith("failed seed=")]
    assert [f.split(":")[0] for f in failed] == ["failed seed=0", "failed seed=1", "failed seed=2"]
    (error,) = [line for line in proc.stderr.splitlines() if line.startswith("error: seed=")]
    assert error.startswith("error: seed=0, seed=1, seed=2: ")
    assert all("does not accept the API key" in line for line in [*failed, error])
    assert len(requests) == 1  # once for the command, not once per point
    assert not list(tmp_path.glob("runs/*"))


def test_a_worker_of_rank_above_0_does_not_ask() -> None:
    """Only rank 0 logs to W&B: the other workers a launcher started do not ask it again."""
    cfg = {"wandb": {"mode": "online"}}
    with fake_wandb() as (url, requests), pytest.MonkeyPatch.context() as mp:
        mp.setenv("WANDB_API_KEY", "z" * 40)
        mp.setenv("WANDB_BASE_URL", url)
        worker = preflight.Launcher("torchrun", world_size=2, rank=1, nodes=1, local_world_size=2)
        preflight.check_wandb(cfg, worker)
        assert requests == []
        with pytest.raises(preflight.UserError, match="does not accept the API key"):
            preflight.check_wandb(cfg, None)
        assert len(requests) == 1


# --- a W&B lost after the check -----------------------------------------------------------------


def test_an_online_start_that_fails_goes_on_offline_and_the_run_completes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server answers the pre-flight, then refuses what wandb.init asks (as a network
    lost meanwhile): one warning, the run's W&B record offline beside it, the run completed."""
    monkeypatch.setattr(log, "WANDB_INIT_TIMEOUT_S", 5.0)
    with fake_wandb(other=400) as (url, _):
        proc = run_py_here(*FAST, "wandb.mode=online", f"out_root={tmp_path}", env=online(url))
    assert proc.returncode == 0, proc.stderr
    (run_dir,) = [p for p in (tmp_path / "runs").iterdir() if not p.name.startswith(".")]
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "completed"
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1, proc.stderr
    assert "W&B online did not start" in warnings[0] and "goes on offline" in warnings[0]
    (offline,) = run_dir.glob("wandb/offline-run-*")
    assert f"`wandb sync {offline}` uploads it" in warnings[0]
    assert list(offline.glob("*.wandb"))
    assert "Traceback" not in proc.stderr


class FakeRun:
    """A W&B run whose `fail` methods raise as W&B does without a network."""

    def __init__(self, fail: tuple[str, ...] = (), settings: Any = None):
        self.fail, self.logged, self.summary, self.finished = fail, [], {}, None
        self.settings = settings

    def _maybe_fail(self, what: str) -> None:
        if what in self.fail:
            from wandb.errors import CommError

            raise CommError(f"{what}: network is unreachable")

    def define_metric(self, *args: Any, **kwargs: Any) -> None:
        pass

    def log(self, metrics: dict, step: int) -> None:
        self._maybe_fail("log")
        self.logged.append((step, metrics))

    def mark_preempting(self) -> None:
        pass

    def finish(self, exit_code: int = 0) -> None:
        self._maybe_fail("finish")
        self.finished = exit_code


def fake_init(monkeypatch: pytest.MonkeyPatch, fail: tuple[str, ...] = ()) -> list[dict]:
    """`wandb.init` returning FakeRuns (online starts raise when "init" is in `fail`); the
    calls' arguments, each with its run under "run"."""
    import wandb

    calls: list[dict] = []

    def init(**kwargs: Any) -> FakeRun:
        calls.append(kwargs)
        if "init" in fail and kwargs["mode"] == "online":
            from wandb.errors import CommError

            raise CommError("Failed to get resume status: network is unreachable")
        kwargs["run"] = FakeRun(fail, settings=type("S", (), {"sync_dir": "/x/offline-run-1"}))
        return kwargs["run"]

    monkeypatch.setattr(wandb, "init", init)
    return calls


def sink_for(tmp_path: Path, mode: str = "offline", run_id: str | None = "abc123") -> Any:
    config = fx.make_config("local_sgd", 2, 0, wandb={"mode": mode, "project": "p"})
    run_dir = fx.write_run(tmp_path / "run", config, 0.9)
    return log.WandbSink(run_dir, config, "local_sgd-tau2-seed0", run_id), run_dir


def test_an_online_start_that_raises_is_retried_offline_under_its_own_id(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    calls = fake_init(monkeypatch, fail=("init",))
    sink, _ = sink_for(tmp_path, mode="online")
    sink.log({"test/acc": 0.5}, step=1)
    sink.close({"status": "completed", "final/test_acc": 0.9})
    assert [(c["mode"], c["id"]) for c in calls] == [
        ("online", "abc123"),
        ("offline", "abc123-offline"),  # W&B's service still holds the failed start's id
    ]
    run = calls[1]["run"]
    assert run.logged == [(1, {"test/acc": 0.5})] and run.finished == 0
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("warning: ") and "CommError" in line and "goes on offline" in line


def test_a_log_that_fails_is_one_warning_and_the_mirror_stops(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    calls = fake_init(monkeypatch, fail=("log",))
    sink, _ = sink_for(tmp_path)
    sink._starting.join()
    for step in (1, 2, 3):
        sink.log({"test/acc": 0.5}, step=step)  # raises nothing
    sink.close({"status": "completed"})
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "W&B failed at log (CommError: log: network" in err[0]
    assert "`wandb sync /x/offline-run-1` uploads what W&B kept" in err[0]
    assert calls[0]["run"].finished is None  # the mirror stopped at the first failure


def test_a_finish_that_fails_is_one_warning_not_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    fake_init(monkeypatch, fail=("finish",))
    sink, _ = sink_for(tmp_path)
    sink.close({"status": "completed"})  # raises nothing
    (line,) = capsys.readouterr().err.splitlines()
    assert "W&B failed at finish (CommError: finish: network is unreachable)" in line


def test_w_and_b_waits_a_bounded_time_for_its_start_and_its_upload() -> None:
    import wandb

    assert log.WANDB_INIT_TIMEOUT_S <= 30 and log.WANDB_FINISH_TIMEOUT_S <= 60
    assert "finish_timeout" in wandb.Settings.model_fields  # else the upload is unbounded


def test_a_finished_training_is_recorded_completed_when_w_and_b_fails_at_the_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = fake_init(monkeypatch, fail=("finish",))
    proc = run_py_here(*FAST, "wandb.mode=offline", f"out_root={tmp_path}")
    assert proc.returncode == 0, proc.stderr
    (run_dir,) = [p for p in (tmp_path / "runs").iterdir() if not p.name.startswith(".")]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "completed" and "error" not in summary
    assert [line for line in proc.stderr.splitlines() if "W&B failed at finish" in line]
    assert "Traceback" not in proc.stderr
    assert calls[0]["run"].logged  # the rows were mirrored until then


def test_the_summary_has_what_a_reports_table_computes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`converged` and the time to the target accuracy, as analysis computes them from the
    same metric rows (a fixture run that converged and reached the target)."""
    from analysis.reports.tables import time_to_target
    from analysis.runs.convergence import run_convergence
    from analysis.runs.load import load_runs

    calls = fake_init(monkeypatch)
    sink, run_dir = sink_for(tmp_path)
    sink.close({"status": "completed", "final/test_acc": 0.9})
    summary = calls[0]["run"].summary
    frame = load_runs(run_dir)
    reached = time_to_target(frame, fx.TARGET_ACC)
    assert summary["converged"] is True and bool(run_convergence(frame).iloc[0]) is True
    assert summary["target_acc"] == fx.TARGET_ACC and summary["reached_target"] is True
    assert summary["time_to_target_s"] == pytest.approx(reached["time_s"].iloc[0])
    assert summary["exit_code"] == 0 and summary["final/test_acc"] == 0.9
    assert calls[0]["config"]["git_sha"] == "fixture"  # the commit a report filters on
    assert calls[0]["group"] == fx.EXPERIMENT and calls[0]["job_type"] == "local_sgd"
