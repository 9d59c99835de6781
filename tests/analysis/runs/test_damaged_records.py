"""Damaged run records (issue 14, class 4, the analysis side): every reader in analysis/ checks
what it reads, leaves a damaged run out with one `warning:` line naming the file, and never ends
in a traceback. `analysis.runs.status` reports such a run as failed, with the reason."""

from __future__ import annotations

import json
import time
import warnings
from pathlib import Path

import pytest

from analysis.reports.report import main as report_main
from analysis.runs.load import (
    DamagedRecord,
    RecordWarning,
    load_runs,
    load_summaries,
    read_config,
    read_metrics,
    read_summary,
)
from analysis.runs.status import main as status_main
from analysis.runs.status import run_status
from tests.fixtures import make_fixtures as fx

BINARY = b"\x00\x9f\x92\x96\xff\xfe garbage \x00"
GOOD = {"status": "completed"}


def make_run(root: Path, name: str, seed: int, final: float = 0.9) -> Path:
    config = fx.make_config("local_sgd", 2, seed, experiment="x", report={"figures": []})
    return fx.write_run(root / name, config, final)


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    """Two good runs (seeds 0 and 1) and the one to damage (seed 2)."""
    root = tmp_path / "runs"
    make_run(root, "good0", 0)
    make_run(root, "good1", 1)
    make_run(root, "bad", 2)
    return root


def damage(run: Path, name: str, content: bytes | str) -> Path:
    path = run / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return path


def loaded(root: Path, loader=load_runs) -> tuple[set[str], list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        frame = loader(root)
    messages = [str(w.message) for w in caught if issubclass(w.category, RecordWarning)]
    return {Path(d).name for d in frame["run_dir"]}, messages


# A run whose file cannot be used is left out; the warning names the run and the file.
RUN_SKIPPED = [
    ("summary.json", BINARY, "unreadable summary.json skipped (not UTF-8 text"),
    ("summary.json", '{"status": "compl', "unreadable summary.json skipped (not JSON"),
    ("summary.json", "[]", "unreadable summary.json skipped (not a JSON object but a list)"),
    ("summary.json", '"completed"', "not a JSON object but a string"),
    ("summary.json", "3", "not a JSON object but a number"),
    ("summary.json", "null", "not a JSON object but null"),
    ("summary.json", '{"final/test_acc": 0.9}', "no text status (status: None)"),
    ("summary.json", '{"status": ["completed"]}', "no text status (status: ['completed'])"),
    ("metrics.jsonl", BINARY, "unreadable metrics.jsonl, run skipped (not UTF-8 text"),
    ("config.yaml", BINARY, "unreadable config skipped (config.yaml: not UTF-8 text"),
    ("config.yaml", "- a\n- b\n", "unreadable config skipped (config.yaml: not a mapping but a"),
    ("config.yaml", "just text\n", "config.yaml: not a mapping but a string"),
    ("config.yaml", "algorithm: [unclosed\n", "unreadable config skipped (config.yaml: "),
]


@pytest.mark.parametrize("name, content, message", RUN_SKIPPED)
def test_a_damaged_file_leaves_its_run_out_with_a_warning_naming_it(
    runs: Path, name: str, content: bytes | str, message: str
) -> None:
    damage(runs / "bad", name, content)
    for loader in (load_runs, load_summaries):
        kept, messages = loaded(runs, loader)
        assert kept == {"good0", "good1"}
        assert len(messages) == 1, messages
        assert messages[0].startswith(f"{runs / 'bad'}: ") and message in messages[0]
        assert "\n" not in messages[0]


def test_a_hydra_config_that_is_not_a_mapping(runs: Path) -> None:
    (runs / "bad" / "config.yaml").unlink()
    damage(runs / "bad", ".hydra/config.yaml", "- 1\n- 2\n")
    kept, messages = loaded(runs)
    assert kept == {"good0", "good1"}
    assert messages == [
        f"{runs / 'bad'}: unreadable config skipped (.hydra/config.yaml: not a mapping but a list)"
    ]


# A damaged line of metrics.jsonl is left out; the run and its other lines stay.
LINE_SKIPPED = [
    ('{"step": 2, "te\n', ":2: unreadable line skipped"),
    ("[1, 2]\n", ":2: line skipped: not a JSON object but a list"),
    ('"text"\n', ":2: line skipped: not a JSON object but a string"),
    ('{"step": 2, "epoch": 2, "test/acc": "high"}\n', ":2: line skipped: test/acc is not a number"),
    ('{"step": [2], "epoch": 2}\n', ":2: line skipped: step is not a number ([2])"),
]


@pytest.mark.parametrize("line, message", LINE_SKIPPED)
def test_a_damaged_metrics_line_is_skipped_with_a_warning(tmp_path, line, message) -> None:
    path = tmp_path / "metrics.jsonl"
    first = json.dumps({"step": 1, "epoch": 1, "test/acc": 0.5, "train/loss": float("nan")})
    last = json.dumps({"step": 3, "epoch": 3, "test/acc": 0.7, "test/loss": None})
    path.write_text(first + "\n" + line + last + "\n")
    with pytest.warns(RecordWarning) as caught:
        records = read_metrics(path)
    assert [r["step"] for r in records] == [1, 3]
    assert len(caught) == 1 and str(caught[0].message).startswith(f"{path}{message}")


def test_readers_name_the_file_in_their_error(tmp_path: Path) -> None:
    damage(tmp_path, "summary.json", BINARY)
    damage(tmp_path, "config.yaml", "[1]\n")
    damage(tmp_path, "metrics.jsonl", BINARY)
    for read, name in (
        (read_summary, "summary.json"),
        (read_config, "config.yaml"),
        (lambda d: read_metrics(d / "metrics.jsonl"), "metrics.jsonl"),
    ):
        with pytest.raises(DamagedRecord) as error:
            read(tmp_path)
        assert error.value.path == tmp_path / name
        assert str(error.value).startswith(f"{tmp_path / name}: ")


@pytest.mark.parametrize(
    "name, content, message",
    [RUN_SKIPPED[0], RUN_SKIPPED[2], RUN_SKIPPED[8], RUN_SKIPPED[10]],
    ids=["binary summary", "list summary", "binary metrics", "list config"],
)
def test_the_report_cli_warns_in_one_line_and_reports_the_rest(
    runs: Path, tmp_path: Path, capsys, name: str, content: bytes | str, message: str
) -> None:
    damage(runs / "bad", name, content)
    assert report_main([str(runs), "--out", str(tmp_path / "plain")]) == 0
    captured = capsys.readouterr()
    assert captured.err.startswith(f"warning: {runs / 'bad'}: ")
    assert message in captured.err and len(captured.err.splitlines()) == 1
    assert "| local_sgd   | 2     |" in captured.out and "| 2   |" in captured.out  # n = 2
    args = ["--experiment", "x", str(runs), "--out", str(tmp_path / "preset")]
    assert report_main(args) == 0
    captured = capsys.readouterr()
    assert captured.err.count("warning: ") == 1 and message in captured.err


def test_only_damaged_runs_is_one_error_line(tmp_path: Path, capsys) -> None:
    run = make_run(tmp_path / "runs", "bad", 0)
    damage(run, "summary.json", BINARY)
    assert report_main([str(tmp_path / "runs"), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("warning: ") and err[1].startswith("error: none of the 1 runs")
    assert len(err) == 2


# analysis.runs.status reads summary.json and heartbeat.json; neither may crash it.


def running(root: Path, name: str, heartbeat: bytes | str | None) -> Path:
    run = root / name
    run.mkdir(parents=True)
    (run / "summary.json").write_text(json.dumps({"status": "running"}))
    if heartbeat is not None:
        damage(run, "heartbeat.json", heartbeat)
    return run


@pytest.mark.parametrize(
    "heartbeat, reason",
    [
        (BINARY, "heartbeat.json unreadable: not UTF-8 text"),
        ("[]", "heartbeat.json unreadable: not a JSON object but a list"),
        ('{"step": 4', "heartbeat.json unreadable: not JSON"),
        ('{"step": 4, "total_steps": 10}', "heartbeat.json has no time (time: 'None')"),
        ('{"time": "noon", "step": 4}', "heartbeat.json has no time (time: 'noon')"),
        ('{"time": NaN}', "heartbeat.json has no time (time: 'nan')"),
    ],
)
def test_status_survives_a_bad_heartbeat(tmp_path: Path, heartbeat: str, reason: str) -> None:
    run = running(tmp_path, "r", heartbeat)
    fresh = run_status(run, stale_after_s=600)
    assert fresh["status"] == "running" and fresh["detail"].startswith("starting, heartbeat")
    assert fresh["detail"].endswith(reason) or reason in fresh["detail"]
    # judged by the summary's age instead: an old one means the job died
    stale = run_status(run, stale_after_s=600, now=time.time() + 3600)
    assert stale["status"] == "failed" and "stale" in stale["detail"] and reason in stale["detail"]


def test_status_reads_a_heartbeat_without_a_step(tmp_path: Path) -> None:
    run = running(tmp_path, "r", json.dumps({"time": time.time() - 5}))
    assert run_status(run, 600)["detail"].startswith("step unknown, heartbeat 5 s ago")


@pytest.mark.parametrize(
    "summary, reason",
    [
        (BINARY, "summary.json is unreadable: not UTF-8 text"),
        ("[]", "summary.json is unreadable: not a JSON object but a list"),
        ('{"status": "runn', "summary.json is unreadable: not JSON"),
        ('{"status": ["completed"]}', "unknown status \"['completed']\" in summary.json"),
        ('{"status": "completed", "final/test_acc": "high"}', ""),
        ('{"status": "failed", "error": "line one\\n  line two"}', "line one line two"),
    ],
)
def test_status_survives_a_bad_summary(tmp_path: Path, capsys, summary: str, reason: str) -> None:
    run = tmp_path / "runs" / "r"
    run.mkdir(parents=True)
    damage(run, "summary.json", summary)
    result = run_status(run, 600)
    assert result["detail"] == reason or reason in result["detail"]
    assert status_main([str(tmp_path / "runs")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2 and out[0].split()[1] == "r"


def test_status_with_a_preset_skips_a_damaged_config_with_one_warning(tmp_path, capsys) -> None:
    run = tmp_path / "runs" / "r"
    run.mkdir(parents=True)
    (run / "summary.json").write_text(json.dumps(GOOD))
    damage(run, "config.yaml", BINARY)
    assert status_main([str(tmp_path / "runs"), "--experiment", "demo", "--scale", "smoke"]) == 0
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [
        f"warning: {run}: unreadable config skipped (not UTF-8 text (byte 1))"
    ]
    assert captured.out.splitlines()[-1] == "1 completed, 30 missing"
