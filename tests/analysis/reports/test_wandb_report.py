"""W&B comparison reports (issue 37 item 1): `python -m analysis.reports.wandb_report`,
`make wandb-report`.

Offline (the default) the report's full spec, wandb-workspaces' own viewspec, is written as JSON:
its run set (group, commits, scale, finished runs; grouped by the table's rows), its panels and
its Markdown (the table and claims that analysis.reports.report writes, the provenance) are checked
here on the committed fixture runs (tests/fixtures/runs), on an ad-hoc sweep's records, and on a
real `run.py -m` sweep's W&B records (what the runs log is what the report filters on). Online,
the save goes through a stand-in W&B API (monkeypatched: no network); a missing or refused key or
an unreachable W&B is one line and exit code 2.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from analysis.reports import wandb_report
from tests.cli import REPO, module_here, run_py_here
from tests.fixtures import make_fixtures as fx
from tests.test_wandb_offline import KEY, closed_port, fake_wandb, online

FIXTURES = Path(fx.__file__).resolve().parent
RUNS, CONF = FIXTURES / "runs", FIXTURES / "conf"
PRESET = ("--experiment", fx.EXPERIMENT, "--scale", "smoke", "--conf", str(CONF))
LATER = "(or build the report offline, the default, and publish it later)"


def spec_of(out: Path) -> list[dict]:
    return json.loads((out / wandb_report.SPEC_NAME).read_text())["reports"]


def blocks(viewspec: dict) -> list[dict]:
    return [b for b in viewspec["spec"]["blocks"] if b["type"] != "paragraph"]


def grid_of(viewspec: dict) -> dict:
    (grid,) = [b for b in blocks(viewspec) if b["type"] == "panel-grid"]
    return grid["metadata"]


def panels_of(viewspec: dict) -> dict[str, dict]:
    """Each panel's config by its title."""
    panels = grid_of(viewspec)["panelBankSectionConfig"]["panels"]
    return {p["config"]["chartTitle"]: {**p["config"], "_type": p["viewType"]} for p in panels}


def markdown_of(viewspec: dict) -> list[str]:
    return [b["content"] for b in blocks(viewspec) if b["type"] == "markdown-block"]


@pytest.fixture(scope="module")
def preset(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess, dict]:
    out = tmp_path_factory.mktemp("wandb") / "report"
    proc = module_here("analysis.reports.wandb_report", str(RUNS), "--out", str(out), *PRESET)
    assert proc.returncode == 0, proc.stderr
    (report,) = spec_of(out)
    return proc, report


def test_a_presets_run_set_is_its_group_commits_scale_and_finished_runs(preset) -> None:
    _, report = preset
    assert (report["group"], report["scale"], report["experiment"]) == (
        fx.EXPERIMENT,
        "smoke",
        fx.EXPERIMENT,
    )
    finished = [r for r in fx.FIXTURE_RUNS if r[4] in ("completed", "diverged")]
    assert report["runs"] == len(finished) == 16 and report["commits"] == ["fixture"]
    (runset,) = grid_of(report["viewspec"])["runSets"]
    assert runset["name"] == "fixture_table (smoke)"
    filters = [
        (f["key"]["section"], f["key"]["name"], f["op"], f["value"])
        for f in runset["filters"]["filters"]
    ]
    assert filters == [
        ("run", "group", "=", fx.EXPERIMENT),
        ("config", "git_sha.value", "IN", ["fixture"]),
        ("config", "scale.value.name", "=", "smoke"),
        ("summary", "status", "IN", ["completed", "diverged"]),
    ]
    assert all(f.get("connector", "AND") == "AND" for f in runset["filters"]["filters"])
    # the table's rows (report.rows): seeds collapse into one line per row
    assert report["rows"] == fx.REPORT["rows"]
    assert runset["grouping"] == [
        {"section": "config", "name": "algorithm.value.name"},
        {"section": "config", "name": "tau.value"},
    ]
    assert "summary:final/test_acc" in runset["runFeed"]["columnPinned"]
    viewspec = report["viewspec"]
    assert viewspec["displayName"] == f"{fx.REPORT['title']} (smoke)"
    assert viewspec["project"] == {"name": "commsgd-bench", "entityName": ""}


def test_a_presets_panels(preset) -> None:
    panels = panels_of(preset[1]["viewspec"])
    time_label = "training time, virtual (s)"  # the fixture runs' timing: virtual
    lines = {
        t: (p["xAxis"], p["metrics"]) for t, p in panels.items() if p["_type"].endswith("Line Plot")
    }
    assert lines == {
        "test accuracy": ("epoch", ["test/acc"]),
        f"test accuracy against {time_label}": ("time/train_s", ["test/acc"]),
        "training loss": ("epoch", ["train/loss"]),
        "bytes communicated (per worker, cumulative)": ("epoch", ["comm/bytes"]),
    }
    assert panels[f"test accuracy against {time_label}"]["xAxisTitle"] == time_label
    bars = {t: p["metrics"] for t, p in panels.items() if p["_type"] == "Bar Chart"}
    assert bars == {
        "final test accuracy (mean ± std over seeds)": ["final/test_acc"],
        f"time to test accuracy ≥ {fx.TARGET_ACC:g}: {time_label}": ["time_to_target_s"],
        # the fixture runs model a network (ethernet1g)
        f"compute against exposed communication ({time_label}, whole run)": [
            "time/compute_s",
            "time/comm_exposed_s",
        ],
    }
    assert {(p["groupAgg"], p["groupArea"]) for p in panels.values()} == {("mean", "stddev")}
    layouts = [
        (p["layout"]["x"], p["layout"]["y"])
        for p in grid_of(preset[1]["viewspec"])["panelBankSectionConfig"]["panels"]
    ]
    assert len(set(layouts)) == len(layouts) == 7  # no two panels on one place


def test_a_presets_table_claims_and_provenance_are_analysis_reports(preset, tmp_path) -> None:
    from analysis.reports.report import report_experiment

    result = report_experiment(
        RUNS, tmp_path, fx.EXPERIMENT, "smoke", report_node={**fx.REPORT, "figures": []},
        conf_dir=CONF, command="x",
    )  # fmt: skip
    intro, table, claims, provenance = markdown_of(preset[1]["viewspec"])
    assert "16 finished runs of W&B group `fixture_table` at scale `smoke`" in intro
    assert "grouped by algorithm.name, tau" in intro and "virtual" in intro
    assert table == result["markdown"]
    assert claims == Path(result["claims_md"]).read_text()
    assert "holds" in claims and "95%" in claims  # the verdicts, with their intervals
    assert provenance.startswith(
        "**Provenance**\n\n```text\ncommand: python -m analysis.reports.wandb_report "
    )
    assert "run commits: fixture (16 runs)" in provenance and "git commit: " in provenance


def test_the_spec_is_wandb_workspaces_own_model(preset) -> None:
    """The JSON is what wandb-workspaces saves: it loads back into its Report."""
    import wandb_workspaces.reports.v2 as wr
    from wandb_workspaces.reports.v2 import internal

    report = wr.Report._from_model(internal.ReportViewspec.model_validate(preset[1]["viewspec"]))
    (grid,) = [b for b in report.blocks if isinstance(b, wr.PanelGrid)]
    assert grid.runsets[0].groupby == ["config.algorithm.value.name", "config.tau.value"]
    assert len(grid.panels) == 7


def test_offline_prints_how_to_publish(preset) -> None:
    proc, _ = preset
    lines = proc.stdout.splitlines()
    assert lines[0] == (
        "W&B report of fixture_table (smoke): 16 runs of group fixture_table, grouped by "
        "algorithm.name, tau"
    )
    assert lines[1].startswith("wrote ") and lines[1].endswith("report/wandb_report.json")
    # the fixture runs have no W&B records: nothing to sync, the report to save
    assert lines[2].startswith("to publish: python -m analysis.reports.wandb_report ")
    assert lines[2].endswith(" --mode online") and " --experiment fixture_table" in lines[2]
    assert proc.stderr == ""


def adhoc_runs(root: Path, network: str = "ideal") -> str:
    """An ad-hoc sweep's records (`run.py -m tau=1,2 seed=0,1`): its W&B group, offline W&B
    folders; returns the group."""
    group = "sweep 2026-01-01 12:00:00 tau"
    for tau in (1, 2):
        for seed in (0, 1):
            config = fx.make_config(
                "local_sgd", tau, seed, experiment="default", report={},
                wandb={"mode": "offline", "project": "mine", "group": group, "entity": None},
                network={"name": network},
            )  # fmt: skip
            run_dir = fx.write_run(root / f"local_sgd-tau{tau}-seed{seed}", config, 0.8 + tau / 100)
            (run_dir / "wandb" / f"offline-run-2026-{tau}{seed}").mkdir(parents=True)
    return group


def test_a_run_py_sweep_gets_a_report_of_its_own(tmp_path: Path) -> None:
    group = adhoc_runs(tmp_path / "runs")
    fx.write_run(  # another sweep's run beside it: a report of its own
        tmp_path / "runs" / "other",
        fx.make_config("sync_sgd", 1, 0, experiment="default", report={}),
        0.9,
    )
    proc = module_here(
        "analysis.reports.wandb_report", str(tmp_path / "runs"), "--out", str(tmp_path / "o")
    )
    assert proc.returncode == 0, proc.stderr
    reports = {r["group"]: r for r in spec_of(tmp_path / "o")}
    assert set(reports) == {group, "default"}
    report = reports[group]
    assert report["experiment"] is None and report["runs"] == 4
    viewspec = report["viewspec"]
    assert viewspec["project"]["name"] == "mine"  # the runs' wandb.project
    (runset,) = grid_of(viewspec)["runSets"]
    assert runset["filters"]["filters"][0]["value"] == group
    assert [g["name"] for g in runset["grouping"]] == ["algorithm.value.name", "tau.value"]
    panels = panels_of(viewspec)
    assert not any("exposed communication" in t for t in panels)  # an ideal network
    table, *rest = markdown_of(viewspec)[1:]
    assert "| local_sgd" in table and len(rest) == 1  # no claims: only the provenance
    assert "wandb sync" not in proc.stdout.split("\n")[0]
    sync = [line for line in proc.stdout.splitlines() if "wandb sync" in line]
    assert sync == [
        f"to publish: wandb sync {tmp_path / 'runs'}/*/wandb/offline-run-*   "
        "(4 runs' offline W&B records)"
    ]
    assert proc.stdout.splitlines()[-1].startswith("then: python -m analysis.reports.wandb_report ")


def test_make_wandb_report_reports_a_presets_runs_beside_its_results() -> None:
    def dry(*args: str) -> str:
        return subprocess.run(
            ["make", "-n", "wandb-report", *args], capture_output=True, text=True, cwd=REPO,
            check=True,
        ).stdout  # fmt: skip

    offline = dry("PRESET=losp", "SCALE=fmnist")
    assert (
        '-m analysis.reports.wandb_report "outputs/losp/runs" --experiment losp --scale fmnist '
        '--out "outputs/results/losp/fmnist" --set=cluster=sim --mode offline'
    ) in " ".join(offline.replace("\\\n", " ").split())
    assert "--mode online" in dry("PRESET=losp", "WANDB_MODE=online")
    assert '--out "r/losp/cpu"' in dry("PRESET=losp", "SCALE=cpu", "RESULTS=r")


@pytest.mark.e2e
def test_what_a_sweeps_runs_log_is_what_its_report_filters_and_draws(tmp_path: Path) -> None:
    from tests.test_wandb import summary_of, wandb_records

    proc = run_py_here(
        "-m", "scale=smoke", "dataset=synthetic", "epochs=2", "cluster=sim", "progress=false",
        "wandb.mode=offline", "algorithm=local_sgd", "tau=1,2", f"out_root={tmp_path}",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    out = module_here(
        "analysis.reports.wandb_report", str(tmp_path / "runs"), "--out", str(tmp_path / "r")
    )
    assert out.returncode == 0, out.stderr
    (report,) = spec_of(tmp_path / "r")
    (runset,) = grid_of(report["viewspec"])["runSets"]
    filters = {f["key"]["name"]: f["value"] for f in runset["filters"]["filters"]}
    run_dirs = [p for p in (tmp_path / "runs").iterdir() if not p.name.startswith(".")]
    assert len(run_dirs) == 2
    for run_dir in run_dirs:
        records = wandb_records(run_dir)
        (run,) = records["run"]
        # (W&B's server wraps each top-level key's value in {"value": ...}: the keys' `.value`)
        config = {item.key: json.loads(item.value_json) for item in run.config.update}
        assert run.run_group == filters["group"]
        assert config["git_sha"] in filters["git_sha.value"]
        assert config["scale"]["name"] == filters["scale.value.name"]
        assert config["algorithm"]["name"] == "local_sgd" and config["tau"] in (1, 2)
        summary = summary_of(records)
        assert summary["status"] in filters["status"]
        drawn = {m for p in panels_of(report["viewspec"]).values() for m in p["metrics"]}
        history = records["history"][0].item
        logged = {item.key or "/".join(item.nested_key) for item in history} | set(summary)
        assert drawn - {"time/compute_s", "time/comm_exposed_s"} <= logged
        assert {"converged", "time_to_target_s", "final/test_acc", "comm/bytes"} <= set(summary)
    lines = out.stdout.splitlines()
    assert lines[-2] == (
        f"to publish: wandb sync {tmp_path / 'runs'}/*/wandb/offline-run-*   "
        "(2 runs' offline W&B records)"
    )


# --- online -----------------------------------------------------------------------------------


class FakeService:
    """What wandb-workspaces asks of W&B's API (`execute_graphql`, `app_url`), answered here."""

    app_url = "https://wandb.example"

    def __init__(self, project_id: str | None = "p1", hang: threading.Event | None = None):
        self.project_id, self.hang, self.saved = project_id, hang, []

    def execute_graphql(self, query: str, variables: dict) -> dict:
        if self.hang is not None:
            self.hang.wait(30)
        if "upsertView" in query:
            self.saved.append(variables)
            view = {
                "id": "rep123", "name": variables["name"], "displayName": variables["displayName"],
                "description": variables["description"], "spec": variables["spec"],
                "project": {
                    "name": variables["projectName"], "entityName": variables["entityName"],
                },
            }  # fmt: skip
            return {"upsertView": {"view": view, "inserted": True}}
        if "internalId" in query:
            found = {"internalId": self.project_id} if self.project_id else None
            return {"project": found}
        raise AssertionError(f"unexpected query {query[:80]}")


class FakeApi:
    default_entity = "me"

    def __init__(self, service: FakeService):
        self._service_api = service
        self.created: list[tuple] = []

    def projects(self, entity: str) -> list:
        return []

    def create_project(self, name: str, entity: str) -> None:
        self.created.append((entity, name))


@pytest.fixture
def fake_api(monkeypatch: pytest.MonkeyPatch) -> FakeApi:
    from wandb_workspaces.reports.v2 import interface

    api = FakeApi(FakeService())
    monkeypatch.setattr(interface, "_get_api", lambda: api)
    return api


def test_online_saves_the_report_through_w_and_b_and_prints_its_url(tmp_path, fake_api) -> None:
    with fake_wandb() as (url, requests):
        proc = module_here(
            "analysis.reports.wandb_report", str(RUNS), "--out", str(tmp_path), *PRESET, "--mode",
            "online", env=online(url),
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert len(requests) == 1  # the login check
    (saved,) = fake_api._service_api.saved
    assert (saved["entityName"], saved["projectName"]) == ("me", "commsgd-bench")
    assert fake_api.created == [("me", "commsgd-bench")]
    title = f"{fx.REPORT['title']} (smoke)".replace(" ", "-")
    assert proc.stdout.splitlines()[-1] == (
        f"W&B report: https://wandb.example/me/commsgd-bench/reports/{title}--rep123"
    )
    spec = json.loads(saved["spec"])
    (grid,) = [b for b in spec["blocks"] if b["type"] == "panel-grid"]
    (runset,) = grid["metadata"]["runSets"]
    assert runset["project"] == {"id": "p1", "entityName": "me", "name": "commsgd-bench"}
    offline = spec_of(tmp_path)[0]["viewspec"]["spec"]["blocks"]
    assert [b["type"] for b in spec["blocks"]] == [b["type"] for b in offline]


def test_online_without_a_key_is_one_line_and_exit_2_before_any_work(tmp_path) -> None:
    env = {"WANDB_API_KEY": None, "NETRC": str(tmp_path / "none"), "HOME": str(tmp_path)}
    proc = module_here(
        "analysis.reports.wandb_report",
        str(RUNS),
        "--out",
        str(tmp_path / "o"),
        *PRESET,
        env={**env, "WANDB_MODE": "online"},
    )  # WANDB_MODE=online: online is the default
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        "error: --mode online needs W&B credentials: set WANDB_API_KEY or run `wandb login` "
        + LATER
    ]
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("case", ["unreachable", "refused"])
def test_online_with_no_w_and_b_or_a_refused_key_is_one_line_and_exit_2(tmp_path, case) -> None:
    with fake_wandb() as (url, _):
        if case == "unreachable":
            url = f"http://127.0.0.1:{closed_port()}"
        key = KEY if case == "unreachable" else "w" * 40
        proc = module_here(
            "analysis.reports.wandb_report", str(RUNS), "--out", str(tmp_path / "o"), *PRESET,
            "--mode", "online", env=online(url, key),
        )  # fmt: skip
    assert proc.returncode == 2
    why = (
        f"cannot reach W&B at {url} (Connection refused)"
        if case == "unreachable"
        else f"W&B at {url} does not accept the API key: check WANDB_API_KEY or run "
        "`wandb login --relogin`"
    )
    assert proc.stderr.splitlines() == [f"error: --mode online: {why} {LATER}"]
    assert not (tmp_path / "o").exists()


def test_a_save_that_w_and_b_does_not_answer_is_one_line_within_its_deadline(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from wandb_workspaces.reports.v2 import interface

    hang = threading.Event()
    api = FakeApi(FakeService(hang=hang))
    monkeypatch.setattr(interface, "_get_api", lambda: api)
    monkeypatch.setattr(wandb_report, "SAVE_TIMEOUT_S", 1.0)
    try:
        with fake_wandb() as (url, _):
            start = time.monotonic()
            proc = module_here(
                "analysis.reports.wandb_report", str(RUNS), "--out", str(tmp_path), *PRESET,
                "--mode", "online", env=online(url),
            )  # fmt: skip
            took = time.monotonic() - start
    finally:
        hang.set()
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        "error: W&B did not save the report within 1 s: try again later"
    ]
    assert took < 30  # the deadline bounds it, not W&B's retries (minutes); load slows start-up


def test_a_save_that_w_and_b_refuses_is_one_line(tmp_path, monkeypatch) -> None:
    from wandb_workspaces.reports.v2 import interface

    api = FakeApi(FakeService(project_id=None))  # no such project (its runs never synced)
    monkeypatch.setattr(interface, "_get_api", lambda: api)
    with fake_wandb() as (url, _):
        proc = module_here(
            "analysis.reports.wandb_report", str(RUNS), "--out", str(tmp_path), *PRESET, "--mode",
            "online", "--entity", "team", env=online(url),
        )  # fmt: skip
    assert proc.returncode == 2
    (line,) = proc.stderr.splitlines()
    assert line.startswith("error: W&B did not save the report: ValueError: ")
    assert "'team/commsgd-bench' not found" in line


# --- bad input ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (("--experiment", "nope"), "error: no runs of experiment nope under "),
        (("--set", "cluster=sim"), "error: --set has no effect without --experiment NAME"),
        (("--mode", "sometimes"), "error: argument --mode: invalid choice: 'sometimes'"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, args: Any, error: str) -> None:
    proc = module_here(
        "analysis.reports.wandb_report", str(RUNS), "--out", str(tmp_path / "o"), *args
    )
    assert proc.returncode == 2
    assert len(proc.stderr.splitlines()) == 1 and proc.stderr.startswith(error), proc.stderr
    assert not (tmp_path / "o").exists()


def test_an_out_that_is_a_file_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "o").write_text("mine")
    proc = module_here(
        "analysis.reports.wandb_report", str(RUNS), "--out", str(tmp_path / "o"), *PRESET
    )
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [f"error: --out {tmp_path / 'o'} is a file, not a folder"]
    assert (tmp_path / "o").read_text() == "mine"
