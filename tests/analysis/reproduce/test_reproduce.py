"""Results that recompute from their committed records and reproduce on another machine (issue 33):
the records file, `make recompute`, the platform fingerprint and `make verify`."""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from analysis.reports.report import report_experiment
from analysis.reproduce import recompute, verify
from analysis.runs.records import RECORDS, dumps, read_records
from experiments.errors import UserError
from experiments.store.fingerprint import describe, fingerprint_key, platform_fingerprint
from tests.cli import child_env, python
from tests.fixtures import make_fixtures as fx

REPO = Path(__file__).resolve().parents[3]
RESULTS = REPO / "results"
TEXT_OUTPUTS = ("table.md", "table.csv", "table.tex", "claims.md", RECORDS)


def _report(roots, out: Path) -> dict:
    return report_experiment(roots, out, fx.EXPERIMENT, "smoke", conf_dir=fx.CONF, grid={})


def test_a_report_from_its_records_is_the_report_from_its_runs(tmp_path: Path) -> None:
    """The fixtures hold every status (completed, diverged, failed, running) and claims."""
    direct = _report(fx.RUNS, tmp_path / "direct")
    again = _report(tmp_path / "direct" / RECORDS, tmp_path / "again")
    for name in TEXT_OUTPUTS:
        assert (tmp_path / "direct" / name).read_bytes() == (tmp_path / "again" / name).read_bytes()
    assert [c.verdict for c in direct["claims"]] == [c.verdict for c in again["claims"]]
    # every run of the experiment at the scale, whatever its status; nothing else
    records = read_records(tmp_path / "direct" / RECORDS)
    statuses = {r["summary"]["status"] for r in records}
    assert statuses == {"completed", "diverged", "failed", "running"}
    assert {r["config"]["experiment_name"] for r in records} == {fx.EXPERIMENT}
    assert {r["config"]["scale"]["name"] for r in records} == {"smoke"}
    assert [r["run"] for r in records] == sorted(r["run"] for r in records)


def test_the_records_name_no_machine_path_and_no_host(tmp_path: Path) -> None:
    run = tmp_path / "runs" / "x-seed0"
    shutil.copytree(sorted(fx.RUNS.rglob("summary.json"))[0].parent, run)
    summary = json.loads((run / "summary.json").read_text())
    summary["host"] = "lab-node-7"
    (run / "summary.json").write_text(json.dumps(summary))
    config = (run / "config.yaml").read_text() + f"out_root: {tmp_path}\n"
    (run / "config.yaml").write_text(config)
    (run / ".hydra").mkdir(exist_ok=True)
    (run / ".hydra" / "overrides.yaml").write_text(f"- seed=0\n- out_root={tmp_path}\n")
    from analysis.runs.records import write_records

    path, _ = write_records([run], [tmp_path / "runs"], tmp_path / "out", out_root=tmp_path)
    text = gzip.decompress(path.read_bytes()).decode()
    assert str(tmp_path) not in text and "lab-node-7" not in text
    (record,) = read_records(path)
    assert record["config"]["out_root"] == "$OUT"
    assert record["overrides"] == ["seed=0", "out_root=$OUT"]


def test_the_records_file_is_the_same_bytes_for_the_same_runs() -> None:
    records = [{"run": "b", "config": {}, "summary": {"status": "completed"}, "metrics": []}]
    records.append({**records[0], "run": "a"})
    assert dumps(records) == dumps(list(reversed(records)))  # sorted, no time stamp
    assert gzip.decompress(dumps(records)).decode().splitlines()[0].startswith('{"config"')


def test_a_damaged_records_file_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / RECORDS
    bad.write_bytes(b"not gzip")
    with pytest.raises(UserError, match="not a gzip-compressed JSON-lines file"):
        read_records(bad)
    bad.write_bytes(gzip.compress(b'{"run": "a"}\n'))
    with pytest.raises(UserError, match=r":1: not a run record \(no config, summary, metrics\)"):
        read_records(bad)


# --- make recompute -------------------------------------------------------------------------------


def test_every_committed_result_has_its_records_and_a_platform() -> None:
    dirs = recompute.result_dirs(RESULTS)
    assert dirs, "no committed results"
    for result in dirs:
        records = read_records(result / RECORDS)
        provenance = (result / "provenance.txt").read_text()
        assert f"records: {RECORDS} ({len(records)} runs" in provenance, result
        platform = next(line for line in provenance.splitlines() if line.startswith("platform: "))
        assert "not recorded" not in platform, result
        for record in records:
            assert record["summary"]["platform"]["key"], (result, record["run"])


def test_make_verify_reruns_a_point_of_every_committed_result() -> None:
    # `make verify` at a commit shows that the committed runs, made at earlier commits where
    # their configuration was the same, are the runs that commit makes
    for result in recompute.result_dirs(RESULTS):
        records = read_records(result / RECORDS)
        chosen = verify.select(records, result.parent.name, everything=False)
        assert chosen, f"analysis.reproduce.verify SAMPLE picks no point of {result}"


# One test a committed result (`make recompute` is all of them in one command): ~20 reports of
# seconds each, which as one test took ~200 s in one of make test's processes.
@pytest.mark.slow  # seconds a report: out of `make test-quick`
@pytest.mark.parametrize(
    "result",
    recompute.result_dirs(RESULTS),
    ids=lambda p: f"{p.parent.name}/{p.name}",
)
def test_every_committed_result_recomputes_from_its_records(
    result: Path, tmp_path: Path, capsys
) -> None:
    assert recompute.main(["--out", str(tmp_path), str(result)]) == 0
    out = capsys.readouterr().out
    assert out.count(": identical (") == 1, out


@pytest.mark.slow  # seconds a report: out of `make test-quick`
def test_recompute_names_what_an_altered_record_changes(tmp_path: Path, capsys) -> None:
    result = tmp_path / "results" / "demo" / "cpu"
    shutil.copytree(RESULTS / "demo" / "cpu", result)
    records = read_records(result / RECORDS)
    victim = next(r for r in records if r["summary"].get("status") == "completed")
    victim["summary"]["final/test_acc"] = 0.5
    victim["metrics"][-1]["test/acc"] = 0.5
    (result / RECORDS).write_bytes(dumps(records))
    assert (
        recompute.main(["--results", str(tmp_path / "results"), "--out", str(tmp_path / "o")]) == 1
    )
    said = capsys.readouterr()
    out = said.out
    assert "demo/cpu: DIFFERS" in out and "  - table.md: " in out and "  - table.csv: " in out
    assert said.err.strip().splitlines()[-1] == "error: 1 of 1 results do not recompute: demo/cpu"


@pytest.mark.slow  # seconds a report: out of `make test-quick`
def test_recompute_refuses_a_result_without_records(tmp_path: Path, capsys) -> None:
    result = tmp_path / "results" / "demo" / "cpu"
    shutil.copytree(RESULTS / "demo" / "cpu", result)
    (result / RECORDS).unlink()
    assert (
        recompute.main(["--results", str(tmp_path / "results"), "--out", str(tmp_path / "o")]) == 1
    )
    assert f"no {RECORDS}" in capsys.readouterr().out
    assert recompute.main([str(tmp_path / "nowhere")]) == 2
    assert "not a result folder" in capsys.readouterr().err


def test_report_args_replace_the_runs_root_by_the_records(tmp_path: Path) -> None:
    (tmp_path / RECORDS).write_bytes(dumps([]))
    (tmp_path / "provenance.txt").write_text(
        "command: python -m analysis.reports.report --experiment demo --scale cpu '$OUT/demo/runs' "
        "--out results/demo/cpu --set=cluster=sim --out-root '$OUT' --require-clean\n"
    )
    args = recompute.report_args(tmp_path, Path("o"))
    assert args == [
        "--experiment", "demo", "--scale", "cpu", "--set=cluster=sim",
        str(tmp_path / RECORDS), "--out", "o",
    ]  # fmt: skip


# --- the platform fingerprint --------------------------------------------------------------------


def test_the_fingerprint_names_what_decides_the_digits() -> None:
    fp = platform_fingerprint("cpu")
    assert set(fp) >= {"cpu", "aten_isa", "onednn", "mkl", "torch", "threads", "deterministic"}
    assert fp["cpu"] != "unknown" and fp["device"] == "cpu"
    assert fp["aten_isa"] in {"DEFAULT", "AVX2", "AVX512", "ZVECTOR", "VSX", "SVE256", "SVE"}
    assert fp["key"] == fingerprint_key(fp)
    assert fp["key"] in describe(fp) and "ATen" in describe(fp)
    assert describe(None) == "not recorded"


def test_an_isa_cap_changes_the_fingerprint() -> None:
    """A capped ISA is another platform: its digits may differ (the key says so)."""
    code = (
        "import json; from experiments.store.fingerprint import platform_fingerprint as f; "
        "print(json.dumps(f()))"
    )
    env = child_env({"ATEN_CPU_CAPABILITY": "default", "ONEDNN_MAX_CPU_ISA": "SSE41"})
    capped = json.loads(
        subprocess.run(
            [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True
        ).stdout
    )
    assert capped["aten_isa"] == "DEFAULT"
    assert "SSE4.1" in capped["onednn"] or "sse41" in capped["onednn"]
    assert capped["env"] == {"ATEN_CPU_CAPABILITY": "default", "ONEDNN_MAX_CPU_ISA": "SSE41"}
    assert capped["key"] != platform_fingerprint()["key"]


# --- make verify ----------------------------------------------------------------------------------


def test_the_tolerance_is_the_rows_seed_spread() -> None:
    def rec(seed, acc, tau=2):
        config = {"algorithm": {"name": "local_sgd"}, "tau": tau, "seed": seed, "out_root": "x"}
        return {"run": f"s{seed}-{tau}", "config": config, "summary": {"final/test_acc": acc}}

    records = [rec(0, 0.90), rec(1, 0.92), rec(2, 0.94), rec(0, 0.5, tau=4)]
    tol, how = verify.tolerance(records[0], records)
    assert tol == pytest.approx(3 * 0.02) and "seed sd 0.0200 (n = 3)" in how
    tol, how = verify.tolerance(records[3], records)
    assert tol == verify.MIN_TOLERANCE and "no spread" in how


def test_a_time_budget_rerun_with_another_algorithm_time_may_make_other_steps() -> None:
    def rec(seed, acc, steps, algo, budget=12.0):
        config = {"algorithm": {"name": "osp"}, "tau": 2, "seed": seed, "out_root": "x"}
        summary = {"status": "completed", "final/test_acc": acc, "steps": steps,
                   "comm/bytes": 10 * steps, "compute/algo_time_s": algo,
                   "compute/step_time_s": 0.025, "budget/time_s": budget,
                   "platform": {"key": "a"}}  # fmt: skip
        return {"run": f"s{seed}", "config": config, "summary": summary, "metrics": []}

    records = [rec(0, 0.80, 451, 2e-6), rec(1, 0.82, 455, 2e-6), rec(2, 0.84, 460, 2e-6)]
    other = {
        **rec(0, 0.81, 469, 3e-6),
        "summary": {**rec(0, 0.81, 469, 3e-6)["summary"], "platform": {"key": "b"}},
    }  # fmnist-like
    ok, line = verify.compare_point(records[0], other, records)
    assert ok and line.startswith("within tolerance")  # steps and bytes follow the clock
    same_clock = {**other, "summary": {**other["summary"], "compute/algo_time_s": 2e-6}}
    assert verify.compare_point(records[0], same_clock, records) == (
        False,
        "steps 469, committed 451",
    )  # the same clock: the same steps, or it is not the same run
    steps_budget = {**records[0], "summary": {**records[0]["summary"], "budget/time_s": None}}
    assert not verify.compare_point(steps_budget, other, records)[0]
    # on the record's own platform, another clock gives other digits too: within tolerance
    here = {**rec(0, 0.81, 469, 3e-6), "metrics": [{"test/acc": 0.5}]}
    ok, line = verify.compare_point({**records[0], "metrics": [{"test/acc": 0.6}]}, here, records)
    assert ok and line.startswith("within tolerance")


def test_a_rerun_keeps_the_points_overrides_and_nothing_of_the_machine(tmp_path: Path) -> None:
    overrides = ["experiment=demo", "seed=1", "out_root=$OUT", "wandb.mode=offline",
                 "progress=false", "+hydra.job.chdir=false", "algorithm=losp"]  # fmt: skip
    record = {"overrides": overrides}
    assert verify.rerun_overrides(record, tmp_path) == [
        "experiment=demo", "seed=1", "algorithm=losp",
        f"out_root={tmp_path}", "wandb.mode=disabled", "progress=false",
    ]  # fmt: skip


@pytest.mark.e2e
def test_verify_reproduces_a_result_and_names_an_altered_point(tmp_path: Path) -> None:
    """A small result made by real runs: verify finds its points identical on this platform,
    within tolerance on an emulated other one (ISA caps), and names a point whose committed
    record was altered (exit 1)."""
    out = tmp_path / "out"
    made = python(
        "run.py", "-m", "experiment=demo", "scale=smoke", "dataset=synthetic",
        "cluster=sim", "algorithm=sync_sgd,local_sgd", "seed=0,1", "epochs=1",
        f"out_root={out}", "wandb.mode=disabled", "progress=false",
    )  # fmt: skip
    assert made.returncode == 0, made.stderr[-2000:]
    result = tmp_path / "results" / "demo" / "smoke"
    report = python(
        "-m", "analysis.reports.report", "--experiment", "demo", "--scale", "smoke",
        str(out / "runs"), "--out", str(result), "--set=cluster=sim", "--out-root", str(out),
    )  # fmt: skip
    assert report.returncode == 0, report.stderr[-2000:]
    names = sorted(r["run"] for r in read_records(result / RECORDS))
    assert len(names) == 4

    def run_verify(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
        return python("-m", "analysis.reproduce.verify", str(result), *args, env=child_env(env))

    same = run_verify()  # the sample: seed 0 of each algorithm
    assert same.returncode == 0, same.stdout + same.stderr
    assert same.stdout.count(": identical (final acc") == 2, same.stdout
    assert "every verified point reproduces" in same.stdout

    sync0 = next(n for n in names if n.startswith("sync_sgd-seed0"))
    other = run_verify("--run", sync0, env={"ATEN_CPU_CAPABILITY": "default"})
    assert other.returncode == 0, other.stdout + other.stderr
    assert f"{sync0}: within tolerance: final acc" in other.stdout, other.stdout

    records = read_records(result / RECORDS)
    altered = next(r for r in records if r["run"] == sync0)
    altered["metrics"][-1]["train/loss"] += 1e-6
    (result / RECORDS).write_bytes(dumps(records))
    broken = run_verify("--run", sync0)
    assert broken.returncode == 1, broken.stdout + broken.stderr
    assert (
        f"demo/smoke {sync0}: DIFFERS: not identical on the record's own platform" in broken.stdout
    )
    assert broken.stderr.strip().splitlines()[-1] == (
        f"error: 1 point(s) do not reproduce: demo/smoke {sync0}"
    )


def test_verify_refuses_bad_input_in_one_line(tmp_path: Path, capsys) -> None:
    assert verify.main([str(tmp_path)]) == 2
    assert capsys.readouterr().err.startswith(f"error: {tmp_path}: no {RECORDS}")
    (tmp_path / RECORDS).write_bytes(dumps([]))
    assert verify.main([str(tmp_path), "--run", "nope"]) == 2
    assert "no committed run nope" in capsys.readouterr().err
