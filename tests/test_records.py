"""The records layer under faults, without workers (issue 14, classes 3, 4 and 6): every write
that fails leaves the previous file and no temporary, and says which file in one line; the
reserve lets the final summary through on a full disk; each record file has one validated
reader; a worker's one-line error crosses the process boundary as itself."""

from __future__ import annotations

import errno
import json
import os
import signal

import pytest
import torch

from experiments.errors import OneLine, OutputError, UserError
from experiments.store import checkpoint as ckpt
from experiments.store import records
from experiments.store.records import DamagedRecord


def failing(monkeypatch, name: str, number: int, module=records.os) -> None:
    """Make `module.<name>` fail with OSError `number` (a full disk, an I/O error)."""

    def fail(*args, **kwargs):
        raise OSError(number, os.strerror(number))

    monkeypatch.setattr(module, name, fail)


@pytest.mark.parametrize(
    "where, number, message",
    [
        ("fsync", errno.ENOSPC, "disk full writing {}"),
        ("replace", errno.ENOSPC, "disk full writing {}"),
        ("fsync", errno.EDQUOT, "disk quota exceeded writing {}"),
        ("fsync", errno.EIO, "cannot write {}: Input/output error"),
        ("replace", errno.EROFS, "cannot write {}: Read-only file system"),
        ("fchmod", errno.EPERM, "cannot write {}: Operation not permitted"),
    ],
)
def test_a_failed_write_keeps_the_previous_file_and_no_temporary(
    tmp_path, monkeypatch, where, number, message
):
    path = tmp_path / "summary.json"
    records.write_json_atomic(path, {"status": "running"})
    before = path.read_bytes()
    failing(monkeypatch, where, number)
    with pytest.raises(OutputError) as caught:
        records.write_json_atomic(path, {"status": "completed"})
    assert str(caught.value) == message.format(path)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["summary.json"]


def test_no_room_for_the_temporary_itself(tmp_path, monkeypatch):
    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(records.tempfile, "mkstemp", full)
    with pytest.raises(OutputError, match=r"^disk full writing .*/metrics.jsonl$"):
        records.write_text_atomic(tmp_path / "metrics.jsonl", "x")
    assert list(tmp_path.iterdir()) == []


def test_a_checkpoint_file_on_a_full_disk_leaves_no_temporary(tmp_path, monkeypatch):
    """torch.save turns the OSError of a write into an opaque RuntimeError: the error still
    names the file and the disk."""
    real_open = os.fdopen

    class Full:
        def __init__(self, f):
            self.f = f

        def write(self, data):
            raise OSError(errno.ENOSPC, "No space left on device")

        def __getattr__(self, name):
            return getattr(self.f, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

    monkeypatch.setattr(records.os, "fdopen", lambda fd, mode: Full(real_open(fd, mode)))
    with pytest.raises(OutputError, match=r"^disk full writing .*/rank0.pt$"):
        ckpt.save(
            tmp_path,
            {"x": torch.zeros(1000)},
            rank=0,
            world_size=1,
            step=3,
            epoch=0,
            reason="test",
            cfg={"workers": 1},
            group=None,
        )
    assert [p.name for p in (tmp_path / "checkpoint" / "step-000000003").iterdir()] == []


def test_the_reserve_lets_the_final_summary_through_a_full_disk(tmp_path, monkeypatch):
    records.write_json_atomic(tmp_path / "summary.json", {"status": "running"})
    records.reserve(tmp_path)
    assert (tmp_path / ".reserve").stat().st_size == records.RESERVE_BYTES
    real = records.write_json_atomic
    calls = []

    def full_until_released(path, obj):
        calls.append(path)
        if (tmp_path / ".reserve").exists():
            raise OutputError(path, OSError(errno.ENOSPC, "No space left on device"))
        real(path, obj)

    monkeypatch.setattr(records, "write_json_atomic", full_until_released)
    with pytest.raises(OutputError):  # not final: the reserve stays for the final record
        records.update_summary(tmp_path, status="running", step=3)
    assert (tmp_path / ".reserve").exists()
    records.update_summary(tmp_path, final=True, status="failed", error="disk full writing x")
    assert not (tmp_path / ".reserve").exists()
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary == {"status": "failed", "error": "disk full writing x"}


def test_a_reserve_that_does_not_fit_is_a_full_disk(tmp_path, monkeypatch):
    failing(monkeypatch, "posix_fallocate", errno.ENOSPC)
    with pytest.raises(OutputError, match=r"^disk full writing .*/\.reserve$"):
        records.reserve(tmp_path)
    assert not (tmp_path / ".reserve").exists()


@pytest.mark.parametrize(
    "content, why",
    [
        (b"\xff\xfe", "not UTF-8 text (byte 0)"),
        (b"", "empty"),
        (b"  \n", "empty"),
        (b"[1]", "not a JSON object but a list"),
        (b"true", "not a JSON object but a boolean"),
        (b'{"status": "ok"}', "no status among running, completed, diverged, failed"),
        (b'{"a": ', "not JSON"),
    ],
)
def test_the_summary_reader_names_the_file_and_what_is_wrong(tmp_path, content, why):
    (tmp_path / "summary.json").write_bytes(content)
    with pytest.raises(DamagedRecord) as caught:
        records.read_summary(tmp_path)
    assert caught.value.path == tmp_path / "summary.json"
    assert why in caught.value.why and str(caught.value).startswith(f"{tmp_path}/summary.json: ")
    assert isinstance(caught.value, UserError) and isinstance(caught.value, ValueError)
    assert records.read_summary(tmp_path / "nothing") is None


def test_a_damaged_record_is_finished_for_rerun_and_refused_otherwise(tmp_path):
    (tmp_path / "summary.json").write_bytes(b"\x00")
    with pytest.raises(UserError, match=r"rerun=true recomputes it"):
        records.finished_status(tmp_path, "abc")
    assert records.finished_status(tmp_path, "abc", rerun=True) == "damaged"
    moved = records.supersede(tmp_path)
    assert (moved / "summary.json").read_bytes() == b"\x00"
    assert records.finished_status(tmp_path, "abc") is None


def test_a_damaged_record_crosses_a_process_boundary_whole():
    import pickle

    error = pickle.loads(pickle.dumps(DamagedRecord("/x/summary.json", "empty")))
    assert str(error) == "/x/summary.json: empty" and error.why == "empty"
    full = pickle.loads(pickle.dumps(OutputError("/x/m", OSError(errno.ENOSPC, "full"))))
    assert str(full) == "disk full writing /x/m" and full.errno == errno.ENOSPC


@pytest.mark.parametrize(
    "cause, expected",
    [
        ("experiments.errors.OutputError: disk full writing /r/metrics.jsonl", OutputError),
        (
            "experiments.store.checkpoint.CheckpointError: checkpoint file /r/x is missing",
            UserError,
        ),
        ("experiments.store.records.DamagedRecord: /r/summary.json: empty", DamagedRecord),
        ("RuntimeError: injected fault at step 4", None),
        ("experiments.errors.Interrupted: not a one-line error", None),
        ("experiments.nope.Missing: no such module", None),
        ("os.system: not ours", None),
    ],
)
def test_a_workers_one_line_error_is_rebuilt_from_its_traceback(cause, expected):
    from experiments.workers.dist import _one_line

    error = _one_line(cause)
    if expected is None:
        assert error is None
    else:
        assert isinstance(error, expected) and isinstance(error, OneLine)
        assert str(error) == cause.split(": ", 1)[1]


def test_torch_locations_are_cut_from_a_workers_cause():
    from experiments.workers.dist import _short

    cause = (
        "RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/"
        "unbound_buffer.cc:78] Timed out waiting 5000ms for recv operation to complete"
    )
    assert _short(cause) == (
        "RuntimeError: Timed out waiting 5000ms for recv operation to complete"
    )


def test_sighup_is_a_stop_with_a_checkpoint_and_no_requeue():
    s = ckpt.Stopper(rank=0, world_size=1, group=None, poll_steps=5, anywhere=True)
    s.install()
    try:
        os.kill(os.getpid(), signal.SIGHUP)
        assert s.flag == 1 and s.signal_name == "SIGHUP"
        assert s.poll(0) and not s.requeue
    finally:
        s.close()
    assert set(ckpt.STOPS) == {
        signal.SIGINT,
        signal.SIGTERM,
        signal.SIGHUP,
        signal.SIGUSR1,
        signal.SIGUSR2,
    }
    assert [sig for sig, stop in ckpt.STOPS.items() if stop.requeue] == [
        signal.SIGUSR1,
        signal.SIGUSR2,
    ]


def test_an_lr_beyond_the_dtype_is_infinity():
    from experiments.training.schedule import lr_at

    kw = dict(lr=1e300, batch_size=32, workers=2, epochs=2)
    assert lr_at(0, 10, **kw) == 1e300 * 64 / 128
    assert lr_at(0, 10, **kw, limit=torch.finfo(torch.float32).max) == float("inf")
    assert lr_at(0, 10, **{**kw, "lr": 0.1}, limit=torch.finfo(torch.float32).max) == 0.05


def test_a_resumed_run_names_each_commit_its_steps_ran_on():
    """Issue 36: a run checkpointed on a modified tree and resumed on a clean one named the
    clean commit alone. Its `git_commits` now name each segment of its steps; `git_sha` is
    marked -dirty when any segment was; a segment whose steps the checkpoint does not hold
    (a start after it that died before the next one) is not named."""
    from experiments.store.records import resumed_segments, run_commits, summary_commit

    a, b, c = "a" * 40 + "-dirty", "b" * 40, "c" * 40
    assert resumed_segments(None, {}, b) == [{"git_sha": b, "from_step": 0}]
    # the checkpoint names the commits of its steps
    meta = {"step": 24, "git_commits": [{"git_sha": a, "from_step": 0}]}
    both = resumed_segments(meta, {"git_sha": c}, b)
    assert both == [{"git_sha": a, "from_step": 0}, {"git_sha": b, "from_step": 24}]
    assert summary_commit(both) == b + "-dirty" and run_commits({"git_commits": both}) == [a, b]
    # a checkpoint from before the commits were recorded: the summary's segments before its step
    previous = {
        "git_sha": c,
        "git_commits": [{"git_sha": a, "from_step": 0}, {"git_sha": c, "from_step": 24}],
    }
    assert resumed_segments({"step": 24}, previous, b) == both
    # ... or the summary's commit
    old = resumed_segments({"step": 8}, {"git_sha": a}, b)
    assert old == [{"git_sha": a, "from_step": 0}, {"git_sha": b, "from_step": 8}]
    assert summary_commit([{"git_sha": b, "from_step": 0}]) == b
