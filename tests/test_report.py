"""A preset's report: grid, table cells, footnotes, claims and files, on committed fixture runs.

The fixture runs (tests/fixtures/runs/, written by tests/fixtures/make_fixtures.py) are one small
preset sweep with completed, diverged, failed, running and missing points; the claim checks run
on frames crafted here, one per verdict.
"""

from __future__ import annotations

import filecmp
import math
import re
import statistics
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from analysis.claims import (
    CLAIMS,
    ClaimResult,
    check_claims,
    claims_markdown,
    validate_claims,
)
from analysis.grid import (
    PointConfigs,
    Preset,
    canonical,
    compose_preset,
    expand_grid,
    expand_sweeps,
    grid_column,
    sweep_values,
)
from analysis.load import load_runs, load_summaries
from analysis.report import FIGURES, command_line, git_commit, main, report_experiment
from analysis.tables import (
    experiment_cells,
    experiment_table,
    footnotes,
    human_bytes,
    latex_escape,
    scaling_table,
    time_to_target,
)
from experiments.errors import UserError
from tests.fixtures import make_fixtures as fx

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path(fx.__file__).resolve().parent
RUNS = FIXTURES / "runs"
CONF = FIXTURES / "conf"
EXPERIMENT = fx.EXPERIMENT
# The fixture preset's node without figures, for tests about the table (figures take seconds).
NO_FIGURES = {**fx.REPORT, "figures": []}


def fixture_runs(algorithm: str, tau: int, status: str | None = None) -> list[tuple]:
    return [
        r
        for r in fx.FIXTURE_RUNS
        if r[0] == algorithm and r[1] == tau and (status is None or r[4] == status)
    ]


def finals(algorithm: str, tau: int) -> list[float]:
    return [r[3] for r in fixture_runs(algorithm, tau, "completed")]


@pytest.fixture(scope="module")
def result(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("report")
    return report_experiment(
        RUNS, out, EXPERIMENT, "smoke", grid=fx.GRID, command="python -m analysis.report test"
    )


def row(table: pd.DataFrame, algorithm: str, tau: object) -> pd.Series:
    rows = table[(table["algorithm.name"] == algorithm) & (table["tau"] == tau)]
    assert len(rows) == 1, (algorithm, tau)
    return rows.iloc[0]


def md_line(markdown: str, algorithm: str, tau: object) -> list[str]:
    """The cells of the Markdown table line of (algorithm, tau)."""
    for line in markdown.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) > 2 and cells[0] == algorithm and cells[1] == str(tau):
            return cells
    raise AssertionError(f"no line for {algorithm} {tau}")


# --- the fixtures ---------------------------------------------------------------------------------


def test_fixtures_are_what_the_generator_writes(tmp_path: Path) -> None:
    fx.main(tmp_path)
    for name in ("runs", "conf"):
        compared = filecmp.dircmp(tmp_path / name, FIXTURES / name)
        stack = [compared]
        while stack:
            d = stack.pop()
            assert not (d.left_only or d.right_only or d.diff_files), (d.left, d.right)
            _, mismatch, errors = filecmp.cmpfiles(d.left, d.right, d.common_files, shallow=False)
            assert not mismatch and not errors, mismatch
            stack.extend(d.subdirs.values())


# --- grid -----------------------------------------------------------------------------------------


def test_sweep_values_are_typed_like_hydra() -> None:
    assert sweep_values("tau", "1,2,4,8") == [1, 2, 4, 8]
    assert sweep_values("seed", "range(0,3)") == [0, 1, 2]
    assert sweep_values("algorithm", "local_sgd,easgd") == ["local_sgd", "easgd"]
    assert sweep_values("compute.slowdown", "none,[1,1,3]") == ["none", [1, 1, 3]]
    assert sweep_values("tau", 4) == [4] and sweep_values("tau", "4") == [4]
    assert sweep_values("seed", [0, 1]) == [0, 1]


def test_grid_keys_map_to_config_columns() -> None:
    assert grid_column("algorithm") == "algorithm.name"
    assert grid_column("tau") == "tau" and grid_column("seed") == "seed"
    assert grid_column("compute.slowdown") == "compute.slowdown"
    assert grid_column("+algorithm.rank") == "algorithm.rank"
    assert grid_column("network") == "network.name"


def test_expand_grid_is_the_cartesian_product() -> None:
    points = expand_grid({"algorithm": "a,b", "tau": "1,2", "seed": "0,1,2"})
    assert len(points) == 12
    assert points[0] == {"algorithm.name": "a", "tau": 1, "seed": 0}
    assert points[-1] == {"algorithm.name": "b", "tau": 2, "seed": 2}
    assert expand_grid({}) == [] and expand_grid(None) == []


def test_extra_sweeps_run_on_top_of_the_main_params() -> None:
    preset = Preset(
        params={"algorithm": "sync_sgd,powersgd", "seed": "0,1"},
        extra_sweeps=[{"algorithm": "powersgd", "+algorithm.rank": "2,4"}],
    )
    assert preset.sweeps == [
        {"algorithm": "sync_sgd,powersgd", "seed": "0,1"},
        {"algorithm": "powersgd", "seed": "0,1", "algorithm.rank": "2,4"},
    ]
    points = expand_sweeps([*preset.sweeps, preset.sweeps[0]])  # each point once
    assert len(points) == 4 + 4
    assert {"algorithm.name": "powersgd", "seed": 1, "algorithm.rank": 4} in points


def test_a_point_without_a_column_another_sweep_sets_is_completed_from_its_config() -> None:
    runs = pd.DataFrame(
        {
            "run_dir": ["a", "b", "c"],
            "algorithm.name": ["local_sgd", "powersgd", "powersgd"],
            "algorithm.rank": [math.nan, 1, 2],
            "tau": [2, 1, 1],
            "seed": [0, 0, 0],
            "summary.status": ["completed"] * 3,
            "summary.final/test_acc": [0.9, 0.8, 0.85],
        }
    )
    grid = expand_sweeps(
        [
            {"algorithm": "local_sgd,powersgd", "seed": "0"},
            {"algorithm": "powersgd", "algorithm.rank": "2,4", "seed": "0"},
        ]
    )

    def point_config(point: dict) -> dict:
        # what composing would give: PowerSGD's default rank, nothing for the others
        rank = {"algorithm.rank": 1} if point["algorithm.name"] == "powersgd" else {}
        return {"experiment_name": "x", "tau": 2, **rank, **point}

    rows = ["algorithm.name", "algorithm.rank", "tau"]
    table = experiment_table(runs, rows, grid=grid, point_config=point_config)
    assert footnotes(table) == ["— no completed run: powersgd rank=4 (1 missing)"]
    # without the config, the main sweep's powersgd point matches a run of any rank
    assert footnotes(experiment_table(runs, rows, grid=grid)) == footnotes(table)
    runs = runs[runs["algorithm.rank"] != 1]
    assert footnotes(experiment_table(runs, rows, grid=grid, point_config=point_config)) == [
        "— no completed run: powersgd rank=1 (1 missing)",
        "— no completed run: powersgd rank=4 (1 missing)",
    ]
    assert len(footnotes(experiment_table(runs, rows, grid=grid))) == 1


def test_canonical_values_compare_across_types() -> None:
    assert canonical(2) == canonical(2.0) == canonical(pd.Series([2.0]).iloc[0]) == 2
    assert canonical(float("nan")) is None and canonical(None) is None
    assert canonical([1, 1, 3]) == canonical((1.0, 1, 3.0))
    assert canonical("none") == "none"


def test_compose_preset_reads_grid_and_report_node() -> None:
    preset = compose_preset(EXPERIMENT, "smoke", CONF)
    assert preset.params == fx.GRID
    assert preset.report["target_acc"] == fx.TARGET_ACC  # ${scale.target_acc}, resolved
    assert preset.report["claims"] == fx.REPORT["claims"]
    assert len(expand_grid(preset.params)) == 5 * 2 * 2
    with pytest.raises(UserError, match="no preset"):
        compose_preset("no_such_preset", None, CONF)


def test_point_configs_compose_the_preset_per_group_override() -> None:
    configs = PointConfigs(EXPERIMENT, "smoke", CONF)
    config = configs({"algorithm.name": "local_sgd", "tau": 8, "seed": 1})
    assert config["experiment_name"] == EXPERIMENT and config["scale.name"] == "smoke"
    assert config["tau"] == 8 and config["algorithm.name"] == "local_sgd"


# --- the table ------------------------------------------------------------------------------------


def test_report_counts_only_this_experiment_at_this_scale(result: dict) -> None:
    finished = [r for r in fx.FIXTURE_RUNS if r[4] in ("completed", "diverged")]
    assert result["num_runs"] == len(finished)
    assert result["scale"] == "smoke"
    assert result["report"]["title"] == fx.REPORT["title"]
    assert len(result["grid"]) == 20
    # sync tau 8 (missing + running), local tau 8 (failed + missing)
    assert result["num_unresolved"] == 4


def test_table_rows_and_mean_std_over_seeds(result: dict) -> None:
    table = result["table"]
    assert list(zip(table["algorithm.name"], table["tau"], strict=True)) == [
        ("sync_sgd", "-"),
        ("local_sgd", 2),
        ("local_sgd", 8),
        ("eamsgd", 2),
        ("eamsgd", 8),
        ("cocod_sgd", 2),
        ("cocod_sgd", 8),
        ("overlap_local_sgd", 2),
        ("overlap_local_sgd", 8),
    ]
    for algorithm, tau in [("local_sgd", 2), ("overlap_local_sgd", 8), ("eamsgd", 2)]:
        r = row(table, algorithm, tau)
        assert r["mean"] == pytest.approx(statistics.mean(finals(algorithm, tau)))
        assert r["std"] == pytest.approx(statistics.stdev(finals(algorithm, tau)))
        assert r["n"] == 2 and r["diverged"] == 0
    sync = row(table, "sync_sgd", "-")  # the tau-less method: one row
    assert sync["mean"] == pytest.approx(0.94) and sync["n"] == 2
    cocod8 = row(table, "cocod_sgd", 8)
    assert cocod8["mean"] == pytest.approx(0.60) and math.isnan(cocod8["std"])
    assert (cocod8["n"], cocod8["diverged"], cocod8["runs"]) == (1, 1, 2)
    eamsgd8 = row(table, "eamsgd", 8)
    assert (eamsgd8["n"], eamsgd8["diverged"]) == (0, 2) and math.isnan(eamsgd8["mean"])
    local8 = row(table, "local_sgd", 8)
    assert (local8["runs"], local8["failed"], local8["missing"], local8["running"]) == (0, 1, 1, 0)
    assert local8["unresolved"] == "seeds 0,1"
    assert (sync["missing"], sync["running"], sync["unresolved"]) == (1, 1, "tau=8 seeds 0,1")


def test_div_and_empty_cells_and_footnotes(result: dict) -> None:
    markdown = result["markdown"]
    assert markdown.startswith(f"**{fx.REPORT['title']}**")
    assert md_line(markdown, "eamsgd", 8)[2] == "div."
    assert md_line(markdown, "cocod_sgd", 8)[2] == "0.600 ± – (1 div.)"
    local8 = md_line(markdown, "local_sgd", 8)
    assert local8[2] == "—" and local8[-1] == "0"
    assert md_line(markdown, "sync_sgd", "-")[2] == "0.940 ± 0.014"
    assert footnotes(result["table"]) == [
        "sync_sgd: no result for tau=8 seeds 0,1 (1 running, 1 missing)",
        "— no completed run: local_sgd tau=8 seeds 0,1 (1 failed, 1 missing)",
    ]
    assert markdown.rstrip().endswith(
        "— no completed run: local_sgd tau=8 seeds 0,1 (1 failed, 1 missing)"
    )
    # no cell is empty or a silent zero
    for line in markdown.splitlines():
        if line.startswith("| ") and "---" not in line:
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            assert all(cells), line
            assert "0.000" not in line


def test_time_to_target_per_run_and_per_group(result: dict) -> None:
    frame = load_runs(RUNS, statuses=None)
    reached = time_to_target(frame, fx.TARGET_ACC)
    per_epoch = {
        a: fx.ledger_per_epoch(a, t)["time/train_s"]
        for a, t in [("sync_sgd", 2), ("local_sgd", 2), ("overlap_local_sgd", 2)]
    }
    # accuracies final - 0.2, final - 0.05, final: a final of 0.85..1 reaches 0.8 at epoch 2
    sync0 = RUNS / EXPERIMENT / "algorithm=sync_sgd,seed=0,tau=2"
    assert bool(reached.loc[str(sync0), "reached"])
    assert reached.loc[str(sync0), "time_s"] == pytest.approx(2 * per_epoch["sync_sgd"])
    local1 = RUNS / EXPERIMENT / "algorithm=local_sgd,seed=1,tau=2"
    assert not reached.loc[str(local1), "reached"]
    assert math.isnan(reached.loc[str(local1), "time_s"])

    table, markdown = result["table"], result["markdown"]
    assert "time to acc ≥ 0.8" in markdown.splitlines()[2]
    local2 = row(table, "local_sgd", 2)
    assert (local2["reached_target"], local2["runs"]) == (1, 2)
    assert local2["time_to_target_s"] == pytest.approx(2 * per_epoch["local_sgd"])
    assert md_line(markdown, "local_sgd", 2)[3] == "2.6 s (1/2)"
    assert md_line(markdown, "sync_sgd", "-")[3] == "3.1 s"
    assert md_line(markdown, "overlap_local_sgd", 2)[3] == "2.12 s"
    assert md_line(markdown, "eamsgd", 2)[3] == "— (0/2)"
    assert md_line(markdown, "cocod_sgd", 8)[3] == "— (0/2)"  # the diverged seed counts as a run
    assert md_line(markdown, "local_sgd", 8)[3] == "—"


def test_bytes_ratio_and_train_time_columns(result: dict) -> None:
    table, markdown = result["table"], result["markdown"]
    header = [c.strip() for c in markdown.splitlines()[2].strip().strip("|").split("|")]
    assert header == [
        "algorithm",
        "tau",
        "final test acc",
        "time to acc ≥ 0.8",
        "communicated",
        "comm/compute",
        "train time (s)",
        "n",
    ]
    sync = row(table, "sync_sgd", "-")
    assert sync["comm_bytes"] == 3 * 4_000_000 and sync["comm_ratio"] == pytest.approx(0.5)
    assert md_line(markdown, "sync_sgd", "-")[4:7] == ["12 MB", "50.0%", "4.65"]
    overlap8 = md_line(markdown, "overlap_local_sgd", 8)
    assert overlap8[4:6] == ["1.5 MB", "0.2%"]
    # a diverged run stopped early: its bytes are not averaged in
    assert row(table, "cocod_sgd", 8)["comm_bytes"] == 3 * (4_000_000 // 8)
    assert md_line(markdown, "eamsgd", 8)[4] == "—"


def test_human_bytes() -> None:
    assert human_bytes(512) == "512 B"
    assert human_bytes(12_300_000) == "12.3 MB"
    assert human_bytes(1_234_000_000) == "1.23 GB"
    assert human_bytes(999_999) == "1 MB"


def test_files_md_tex_csv(result: dict) -> None:
    assert result["table_md"].read_text().strip() == result["markdown"]
    tex = result["table_tex"].read_text()
    assert tex.startswith(r"\begin{table}") and tex.rstrip().endswith(r"\end{table}")
    for text in (r"\toprule", r"\midrule", r"\bottomrule", r"\caption{Fixture table"):
        assert text in tex
    assert r"sync\_sgd & - & 0.940 $\pm$ 0.014 & 3.1 s & 12 MB & 50.0\% & 4.65 & 2 \\" in tex
    assert r"eamsgd & 8 & div. &" in tex
    assert r"local\_sgd & 8 & --- &" in tex
    assert r"--- no completed run: local\_sgd tau=8 seeds 0,1 (1 failed, 1 missing)\par" in tex
    csv = pd.read_csv(result["table_csv"])
    assert list(csv.columns[:7]) == [
        "algorithm.name",
        "tau",
        "mean",
        "std",
        "n",
        "diverged",
        "runs",
    ]
    for column in ("reached_target", "time_to_target_s", "comm_bytes", "comm_ratio", "missing"):
        assert column in csv.columns
    assert csv["mean"].tolist() == pytest.approx(result["table"]["mean"].tolist(), nan_ok=True)
    assert latex_escape("a_b 50% ± —") == r"a\_b 50\% $\pm$ ---"


def test_figures_claims_and_provenance_files(result: dict) -> None:
    for key in ("figure_png", "time_png", "breakdown_png"):
        png = result[key]
        assert png.read_bytes().startswith(b"\x89PNG") and png.with_suffix(".pdf").is_file()
    claims = result["claims_md"].read_text().splitlines()
    assert claims[0] == f"# Claims: {fx.REPORT['title']}"
    lines = [line for line in claims if line.startswith("- ")]
    assert len(lines) == len(fx.REPORT["claims"])
    # sync_sgd, tau-less, competes at every tau and beats overlap_local_sgd in the fixtures
    assert lines[0].startswith("- **does not hold**: Overlap-Local-SGD has the best accuracy")
    assert "tau=2: best sync_sgd 0.940; overlap_local_sgd 0.915 vs best other sync_sgd" in lines[0]
    assert all(line.startswith("- **holds**:") for line in lines[1:])
    assert "(`eamsgd_worst`)" in lines[1] and "tau=8: eamsgd div." in lines[1]
    provenance = result["provenance"].read_text()
    assert "command: python -m analysis.report test\n" in provenance
    assert re.search(r"^git commit: ([0-9a-f]{40}(-dirty)?|unknown)$", provenance, re.M)
    assert re.search(r"^date: \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$", provenance, re.M)
    assert f"experiment: {EXPERIMENT}" in provenance and "scale: smoke" in provenance
    assert "grid points: 20, 4 without a completed or diverged run" in provenance


def test_git_commit_names_head(tmp_path: Path) -> None:
    head = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    commit = git_commit()
    assert commit.removesuffix("-dirty") == head or (not head and commit == "unknown")
    assert git_commit(tmp_path) == "unknown"


def test_grid_composed_from_the_preset_gives_the_same_table(tmp_path: Path) -> None:
    composed = report_experiment(
        RUNS, tmp_path, EXPERIMENT, "smoke", conf_dir=CONF, report_node=NO_FIGURES
    )
    assert composed["grid"] == expand_grid(fx.GRID)
    assert footnotes(composed["table"]) == [
        "sync_sgd: no result for tau=8 seeds 0,1 (1 running, 1 missing)",
        "— no completed run: local_sgd tau=8 seeds 0,1 (1 failed, 1 missing)",
    ]


def test_without_a_grid_unfinished_runs_are_still_listed(tmp_path: Path, capsys) -> None:
    result = report_experiment(RUNS, tmp_path, EXPERIMENT, "smoke", grid={}, report_node=NO_FIGURES)
    assert result["grid"] == [] and result["num_unresolved"] == 2
    assert footnotes(result["table"]) == [
        "sync_sgd: no result for tau=8 seed 1 (1 running)",
        "— no completed run: local_sgd tau=8 seed 0 (1 failed)",
    ]
    # a preset that cannot be composed: a note, and the same
    again = report_experiment(
        RUNS, tmp_path, EXPERIMENT, "smoke", conf_dir=tmp_path, report_node=NO_FIGURES
    )
    assert capsys.readouterr().err.startswith("note: no preset")
    assert footnotes(again["table"]) == footnotes(result["table"])


# --- rows beyond (algorithm, tau) ---------------------------------------------------------------


def write_runs(root: Path, runs: list[tuple], experiment: str = "x", **config) -> None:
    """(algorithm, tau, seed, final, status[, overrides]) -> run dirs under root."""
    for i, (algorithm, tau, seed, final, status, *rest) in enumerate(runs):
        overrides = {**config, **(rest[0] if rest else {})}
        cfg = fx.make_config(algorithm, tau, seed, experiment=experiment, **overrides)
        fx.write_run(root / f"{i:02d}", cfg, final, status)


def test_powersgd_ranks_get_their_own_rows(tmp_path: Path) -> None:
    write_runs(
        tmp_path / "runs",
        [
            ("powersgd", 2, 0, 0.90, "completed", {"algorithm__rank": 1}),
            ("powersgd", 2, 1, 0.92, "completed", {"algorithm__rank": 1}),
            ("powersgd", 2, 0, 0.95, "completed", {"algorithm__rank": 4}),
            ("local_sgd", 2, 0, 0.93, "completed"),
        ],
    )
    grid = {"algorithm": "powersgd,local_sgd", "seed": "0,1"}
    for rows in (None, ["algorithm.name", "algorithm.rank", "tau"]):
        node = {"rows": rows, "figures": [], "claims": []} if rows else {"figures": []}
        result = report_experiment(
            tmp_path / "runs", tmp_path / "out", "x", grid=grid, report_node=node
        )
        table = result["table"]
        assert list(table.columns[:3]) == ["algorithm.name", "algorithm.rank", "tau"]
        cells = experiment_cells(table)
        assert cells[["algorithm", "rank", "tau"]].values.tolist() == [
            ["local_sgd", "-", "2"],
            ["powersgd", "1", "-"],
            ["powersgd", "4", "-"],
        ]
        assert table["mean"].tolist() == pytest.approx([0.93, 0.91, 0.95])
        # the missing local_sgd seed is placed by what its algorithm's runs agree on
        assert footnotes(table) == ["local_sgd tau=2: no result for seed 1 (1 missing)"]


def test_points_that_are_not_a_product_are_listed_one_by_one() -> None:
    runs = pd.DataFrame(
        {
            "run_dir": ["a", "b"],
            "algorithm.name": ["osp", "osp"],
            "tau": [2, 2],
            "seed": [0, 1],
            "compute.slowdown": ["none", "one_slow"],
            "summary.status": ["completed", "completed"],
            "summary.final/test_acc": [0.9, 0.8],
        }
    )
    grid = expand_grid(
        {"algorithm": "osp", "tau": "2", "seed": "0,1", "compute.slowdown": "none,one_slow"}
    )
    table = experiment_table(runs, grid=grid)
    assert footnotes(table) == [
        "osp tau=2: no result for seed 0 slowdown=one_slow; seed 1 slowdown=none (2 missing)"
    ]


def test_unknown_row_column_is_a_user_error() -> None:
    runs = pd.DataFrame(
        {"run_dir": ["a"], "algorithm.name": ["osp"], "summary.final/test_acc": [1]}
    )
    with pytest.raises(UserError, match="no_such"):
        experiment_table(runs, rows=["algorithm.name", "no_such"])


# --- weak scaling ---------------------------------------------------------------------------------


def test_scaling_report(tmp_path: Path) -> None:
    # Per step: sync_sgd 0.1 s at m=2, +10% for each doubling; pseudo_sync flat.
    for i, (algorithm, m, seed) in enumerate(
        (a, m, s) for a in ("sync_sgd", "pseudo_sync") for m in (2, 4, 8) for s in (0, 1)
    ):
        per_epoch = fx.ledger_per_epoch(algorithm, 1)
        slower = 1 + 0.1 * math.log2(m / 2) if algorithm == "sync_sgd" else 1.0
        per_epoch["time/train_s"] = fx.STEPS_PER_EPOCH * 0.1 * slower
        node = {
            "title": "Scaling",
            "kind": "scaling",
            "rows": ["algorithm.name", "workers"],
            "claims": ["pseudo_sync_matches_sync"],
            "figures": ["accuracy"],
        }
        cfg = fx.make_config(algorithm, 1, seed, experiment="scaling", report=node, workers=m)
        fx.write_run(tmp_path / "runs" / f"{i:02d}", cfg, 0.9 + 0.01 * seed, per_epoch=per_epoch)
    grid = {"algorithm": "sync_sgd,pseudo_sync", "workers": "2,4,8", "seed": "0,1"}
    result = report_experiment(tmp_path / "runs", tmp_path / "out", "scaling", grid=grid)
    scaling = result["scaling"]
    sync = scaling[scaling["algorithm.name"] == "sync_sgd"]
    assert sync["workers"].tolist() == [2, 4, 8]
    assert sync["time_per_step_s"].tolist() == pytest.approx([0.1, 0.11, 0.12])
    assert sync["efficiency"].tolist() == pytest.approx([1.0, 1 / 1.1, 1 / 1.2])
    assert scaling.loc[scaling["algorithm.name"] == "pseudo_sync", "efficiency"].tolist() == (
        pytest.approx([1.0, 1.0, 1.0])
    )
    markdown = result["scaling_markdown"]
    squeezed = markdown.replace(" ", "")
    assert "|algorithm|m=2|m=4|m=8|" in squeezed
    assert "|sync_sgd|100.0%|90.9%|83.3%|" in squeezed
    assert "|pseudo_sync|100.0%|100.0%|100.0%|" in squeezed
    for key in ("scaling_md", "scaling_tex", "scaling_csv"):
        assert result[key].is_file()
    assert result["scaling_md"].read_text().strip() == markdown
    # the main table groups by (algorithm, workers); only the accuracy figure was asked for
    assert list(result["table"].columns[:2]) == ["algorithm.name", "workers"]
    assert result["figure_png"] is not None and result["time_png"] is None
    assert [c.verdict for c in result["claims"]] == ["holds"]


def test_scaling_relative_to_a_groups_own_smallest_worker_count() -> None:
    runs = pd.DataFrame(
        {
            "algorithm.name": ["a", "a", "b"],
            "workers": [2, 4, 4],
            "summary.time/train_s": [1.0, 2.0, 3.0],
            "summary.steps": [10, 10, 10],
        }
    )
    table = scaling_table(runs)
    assert table["efficiency"].tolist() == pytest.approx([1.0, 0.5, 1.0])
    assert table["base_workers"].tolist() == [2, 2, 4]


# --- claims ---------------------------------------------------------------------------------------

SHORT = {
    "algorithm": "algorithm.name",
    "acc": "summary.final/test_acc",
    "status": "summary.status",
    "ratio": "summary.comm/ratio",
    "exposed": "summary.time/comm_exposed_s",
    "train": "summary.time/train_s",
    "rank": "algorithm.rank",
    "slowdown": "compute.slowdown",
}


def runs_frame(*runs: dict) -> pd.DataFrame:
    """Summaries from short dicts: algorithm, tau, acc, status, ratio, exposed, train, ..."""
    records = []
    for i, run in enumerate(runs):
        run = {"status": "completed", "seed": 0, "epochs": 10, **run}
        records.append({"run_dir": f"r{i}", **{SHORT.get(k, k): v for k, v in run.items()}})
    return pd.DataFrame.from_records(records)


def acc_runs(table: dict[str, dict[int, float | str]]) -> pd.DataFrame:
    """{algorithm: {tau: final acc or "div"}} -> two seeds each (acc and acc - 0.01)."""
    runs = []
    for algorithm, by_tau in table.items():
        for tau, acc in by_tau.items():
            for seed in (0, 1):
                if acc == "div":
                    runs.append(
                        dict(algorithm=algorithm, tau=tau, seed=seed, acc=0.1, status="diverged")
                    )
                else:
                    runs.append(
                        dict(algorithm=algorithm, tau=tau, seed=seed, acc=acc - 0.01 * seed)
                    )
    return runs_frame(*runs)


def verdict(name: str, frame: pd.DataFrame) -> ClaimResult:
    return CLAIMS[name](frame, {})


@pytest.mark.parametrize(
    "table, holds",
    [
        ({"overlap_local_sgd": {2: 0.90, 8: 0.85}, "local_sgd": {2: 0.88, 8: 0.80}}, True),
        ({"overlap_local_sgd": {2: 0.90, 8: 0.85}, "local_sgd": {2: 0.88, 8: 0.87}}, False),
        ({"overlap_local_sgd": {2: 0.90, 8: "div"}, "local_sgd": {2: 0.88, 8: 0.50}}, False),
        ({"overlap_local_sgd": {2: 0.90}, "local_sgd": {8: 0.88}}, None),
        ({"local_sgd": {2: 0.90}}, None),
    ],
)
def test_overlap_best_at_every_tau(table, holds) -> None:
    result = verdict("overlap_best_at_every_tau", acc_runs(table))
    assert result.holds is holds, result.evidence
    if holds is not None:
        assert "tau=2: best " in result.evidence and "vs best other local_sgd" in result.evidence


def test_tau_less_methods_compete_at_every_tau() -> None:
    frame = acc_runs({"overlap_local_sgd": {2: 0.90, 8: 0.85}, "local_sgd": {2: 0.8, 8: 0.8}})
    sync = runs_frame(dict(algorithm="sync_sgd", tau=1, acc=0.87)).assign(run_dir="sync")
    result = verdict("overlap_best_at_every_tau", pd.concat([frame, sync], ignore_index=True))
    assert result.holds is False
    assert "tau=8: best sync_sgd 0.870; overlap_local_sgd 0.845 vs best other sync_sgd" in (
        result.evidence
    )
    assert "tau=2: best overlap_local_sgd" in result.evidence


def test_overlap_best_evidence_numbers() -> None:
    frame = acc_runs({"overlap_local_sgd": {2: 0.90}, "cocod_sgd": {2: 0.95}, "easgd": {2: 0.5}})
    result = verdict("overlap_best_at_every_tau", frame)
    assert result.holds is False
    assert result.evidence == (
        "tau=2: best cocod_sgd 0.945; overlap_local_sgd 0.895 vs best other cocod_sgd 0.945"
    )


def test_eamsgd_worst() -> None:
    every = verdict(
        "eamsgd_worst", acc_runs({"eamsgd": {2: 0.7, 8: "div"}, "easgd": {2: 0.8, 8: 0.6}})
    )
    assert every.holds is True and every.evidence.startswith("lowest at every tau")
    assert "tau=8: eamsgd div. vs next-lowest easgd 0.595" in every.evidence
    on_mean = verdict(
        "eamsgd_worst", acc_runs({"eamsgd": {2: 0.70, 8: 0.60}, "easgd": {2: 0.80, 8: 0.58}})
    )
    assert on_mean.holds is True
    assert (
        on_mean.evidence.startswith("lowest on the mean over tau")
        and "not at tau=8" in on_mean.evidence
    )
    best = verdict(
        "eamsgd_worst", acc_runs({"eamsgd": {2: 0.9, 8: 0.9}, "easgd": {2: 0.8, 8: 0.6}})
    )
    assert best.holds is False
    assert verdict("eamsgd_worst", acc_runs({"easgd": {2: 0.8}})).holds is None
    assert verdict("eamsgd_worst", acc_runs({"eamsgd": {2: 0.8}})).holds is None


@pytest.mark.parametrize(
    "table, holds",
    [
        ({"cocod_sgd": {2: 0.9, 8: "div"}, "overlap_local_sgd": {2: 0.9, 8: 0.85}}, True),
        ({"cocod_sgd": {8: 0.60}, "overlap_local_sgd": {8: 0.85}}, True),
        ({"cocod_sgd": {8: 0.80}, "overlap_local_sgd": {8: 0.85}}, False),
        ({"cocod_sgd": {8: "div"}, "overlap_local_sgd": {8: "div"}}, False),
        ({"cocod_sgd": {2: "div"}, "overlap_local_sgd": {8: 0.85}}, None),
    ],
)
def test_cocod_diverges_at_large_tau(table, holds) -> None:
    result = verdict("cocod_diverges_at_large_tau_overlap_does_not", acc_runs(table))
    assert result.holds is holds, result.evidence
    assert "tau=8" in result.evidence


def test_cocod_evidence_numbers() -> None:
    frame = acc_runs({"cocod_sgd": {8: "div"}, "overlap_local_sgd": {8: 0.85}})
    result = verdict("cocod_diverges_at_large_tau_overlap_does_not", frame)
    assert result.evidence == (
        "largest tau=8: cocod_sgd 2/2 diverged; overlap_local_sgd 0/2 diverged, accuracy 0.845"
    )


@pytest.mark.parametrize(
    "overlap, holds", [(0.05, True), (0.2, False), (None, None)], ids=["far", "near", "none"]
)
def test_overlap_ratio_far_below_sync(overlap, holds) -> None:
    runs = [dict(algorithm="sync_sgd", tau=1, ratio=0.5)]
    if overlap is not None:
        runs.append(dict(algorithm="overlap_local_sgd", tau=2, ratio=overlap))
    result = verdict("overlap_ratio_far_below_sync", runs_frame(*runs))
    assert result.holds is holds
    if overlap == 0.05:
        assert result.evidence == (
            "sync_sgd 50.0%; overlap_local_sgd at tau=2 5.0% (0.10x); far below = under 0.2x"
        )
    # one of the two alone cannot tell
    assert verdict("overlap_ratio_far_below_sync", runs_frame(runs[-1])).holds is None


def test_ratio_falls_back_to_exposed_over_compute() -> None:
    frame = runs_frame(
        dict(algorithm="sync_sgd", tau=1, exposed=5.0),
        dict(algorithm="overlap_local_sgd", tau=2, exposed=0.1),
    ).assign(**{"summary.time/compute_s": 10.0})
    assert verdict("overlap_ratio_far_below_sync", frame).holds is True


@pytest.mark.parametrize("power_low, holds", [(0.5, True), (0.2, False)])
def test_powersgd_exposed_above_local_methods(power_low, holds) -> None:
    frame = runs_frame(
        dict(algorithm="powersgd", tau=1, rank=1, exposed=10 * 2.0),
        dict(algorithm="powersgd", tau=1, rank=4, exposed=10 * power_low),
        dict(algorithm="local_sgd", tau=2, exposed=10 * 0.3),
        dict(algorithm="overlap_local_sgd", tau=2, exposed=10 * 0.01),
    )
    result = verdict("powersgd_exposed_above_local_methods", frame)
    assert result.holds is holds
    assert result.evidence == (
        f"powersgd lowest {power_low:.3g} s/epoch (rank 4); local methods highest 0.3 s/epoch "
        "(local_sgd tau=2)"
    )
    assert verdict("powersgd_exposed_above_local_methods", frame.iloc[:2]).holds is None


def test_losp_beats_osp() -> None:
    holds = verdict(
        "losp_beats_osp", acc_runs({"losp": {2: 0.9, 4: 0.88}, "osp": {2: 0.85, 4: 0.8}})
    )
    assert holds.holds is True and holds.evidence.startswith("tau=2: losp 0.895 vs osp 0.845")
    assert (
        verdict(
            "losp_beats_osp", acc_runs({"losp": {2: 0.9, 4: 0.7}, "osp": {2: 0.85, 4: 0.8}})
        ).holds
        is False
    )
    assert verdict("losp_beats_osp", acc_runs({"osp": {2: 0.85}})).holds is None
    # mean over seeds and slowdowns
    frame = runs_frame(
        dict(algorithm="losp", tau=2, acc=0.9, slowdown="none"),
        dict(algorithm="losp", tau=2, acc=0.7, slowdown="one_slow"),
        dict(algorithm="osp", tau=2, acc=0.85, slowdown="none"),
        dict(algorithm="osp", tau=2, acc=0.80, slowdown="one_slow"),
    )
    assert verdict("losp_beats_osp", frame).holds is False


def test_osp_losp_faster_than_sync_under_heterogeneity() -> None:
    def frame(losp_train: float, slowdown: str = "one_slow") -> pd.DataFrame:
        return runs_frame(
            dict(algorithm="sync_sgd", tau=1, train=100.0, slowdown=slowdown),
            dict(algorithm="osp", tau=2, train=60.0, slowdown=slowdown),
            dict(algorithm="losp", tau=2, train=losp_train, slowdown=slowdown),
            # homogeneous runs do not count
            dict(algorithm="sync_sgd", tau=1, train=1.0, slowdown="none"),
        )

    fast = verdict("osp_losp_faster_than_sync_under_heterogeneity", frame(70.0))
    assert fast.holds is True
    assert fast.evidence == "one_slow: sync_sgd 10 s/epoch, osp 6, losp 7"
    assert verdict("osp_losp_faster_than_sync_under_heterogeneity", frame(120.0)).holds is False
    assert (
        verdict("osp_losp_faster_than_sync_under_heterogeneity", frame(70.0, "none")).holds is None
    )


def test_pseudo_sync_matches_sync() -> None:
    def frame(pseudo: float | str) -> pd.DataFrame:
        runs = []
        for m in (2, 4):
            runs.append(dict(algorithm="sync_sgd", tau=1, workers=m, acc=0.95))
            if pseudo == "div":
                runs.append(
                    dict(algorithm="pseudo_sync", tau=1, workers=m, acc=0.1, status="diverged")
                )
            else:
                runs.append(dict(algorithm="pseudo_sync", tau=1, workers=m, acc=pseudo))
        return runs_frame(*runs)

    close = verdict("pseudo_sync_matches_sync", frame(0.94))
    assert close.holds is True
    assert close.evidence.startswith("m=2: pseudo_sync 0.940 vs sync_sgd 0.950 (-0.010)")
    assert verdict("pseudo_sync_matches_sync", frame(0.90)).holds is False
    assert verdict("pseudo_sync_matches_sync", frame("div")).holds is False
    only = runs_frame(dict(algorithm="pseudo_sync", tau=1, workers=2, acc=0.9))
    assert verdict("pseudo_sync_matches_sync", only).holds is None


def test_every_claim_can_tell_nothing_from_no_runs() -> None:
    empty = runs_frame(dict(algorithm="easgd", tau=2, acc=0.5))
    for name in CLAIMS:
        result = CLAIMS[name](empty, {})
        assert result.holds is None and result.verdict == "cannot tell", name
        assert result.evidence


def test_unknown_claims_are_named() -> None:
    with pytest.raises(UserError, match=r"unknown claim\(s\) in report.claims: nope, bad2"):
        check_claims(runs_frame(), {"claims": ["nope", "eamsgd_worst", "bad2"]})
    validate_claims(list(CLAIMS))


def test_claims_markdown_lines() -> None:
    results = [
        ClaimResult("a", "A holds", True, "1 > 0"),
        ClaimResult("b", "B", False, "0 < 1"),
        ClaimResult("c", "C", None, "no data"),
    ]
    assert claims_markdown(results, "T").splitlines() == [
        "# Claims: T",
        "",
        "- **holds**: A holds (`a`). 1 > 0",
        "- **does not hold**: B (`b`). 0 < 1",
        "- **cannot tell**: C (`c`). no data",
    ]
    assert "No claims" in claims_markdown([])


# --- CLI ------------------------------------------------------------------------------------------


def test_cli_prints_table_claims_then_paths(tmp_path: Path) -> None:
    out = tmp_path / "out"
    args = ["--experiment", EXPERIMENT, "--scale", "smoke", str(RUNS), "--out", str(out)]
    args += ["--conf", str(CONF)]
    done = subprocess.run(
        [sys.executable, "-m", "analysis.report", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    table = (out / "table.md").read_text().strip()
    assert done.stdout.startswith(table + "\n\n")
    rest = done.stdout[len(table) :].strip().split("\n\n")
    claims, paths = rest[0].splitlines(), rest[1].splitlines()
    assert [line.split(":")[0] for line in claims] == ["does not hold"] + ["holds"] * 3
    assert paths == [
        str(out / name)
        for name in (
            "table.md",
            "table.tex",
            "table.csv",
            "test_acc.png",
            "test_acc.pdf",
            "time.png",
            "time.pdf",
            "time_breakdown.png",
            "time_breakdown.pdf",
            "claims.md",
            "provenance.txt",
        )
    ]
    provenance = (out / "provenance.txt").read_text()
    assert provenance.splitlines()[0] == f"command: {command_line(args)}"


def one_error_line(capsys) -> str:
    captured = capsys.readouterr()
    assert captured.out == ""
    assert len(captured.err.splitlines()) == 1 and captured.err.startswith("error: ")
    return captured.err


def test_cli_user_errors_exit_2_with_one_line(tmp_path: Path, capsys) -> None:
    out = str(tmp_path / "out")
    assert main(["--experiment", EXPERIMENT, str(RUNS), "--out", out]) == 2
    assert "several scales: cpu (1), smoke (18); choose one with --scale" in one_error_line(capsys)
    assert main(["--experiment", "nope", str(RUNS), "--out", out]) == 2
    assert "no runs of experiment nope" in one_error_line(capsys)
    assert main(["--experiment", EXPERIMENT, "--scale", "paper", str(RUNS), "--out", out]) == 2
    assert "at scale paper" in one_error_line(capsys)
    assert not (tmp_path / "out").exists()


def test_nothing_to_report_exits_2(tmp_path: Path, capsys) -> None:
    write_runs(
        tmp_path / "runs", [("local_sgd", 2, 0, 0.1, "failed"), ("osp", 2, 0, 0.1, "running")]
    )
    assert main(["--experiment", "x", str(tmp_path / "runs"), "--out", str(tmp_path / "o")]) == 2
    err = one_error_line(capsys)
    assert "no completed or diverged run of experiment x" in err and "1 failed" in err


@pytest.mark.parametrize(
    "node, message",
    [
        (
            {"claims": ["overlap_best_at_every_tau", "made_up"]},
            "unknown claim(s) in report.claims: made_up",
        ),
        ({"figures": ["accuracy", "pie"]}, "unknown figure(s) in report.figures: pie"),
        ({"kind": "bars"}, "unknown report.kind 'bars'"),
    ],
)
def test_bad_report_node_is_a_user_error_before_any_file(tmp_path, node, message) -> None:
    write_runs(tmp_path / "runs", [("local_sgd", 2, 0, 0.9, "completed")], report=node)
    with pytest.raises(UserError) as error:
        report_experiment(tmp_path / "runs", tmp_path / "out", "x", grid={})
    assert message in str(error.value)
    assert not (tmp_path / "out").exists()


def test_plain_cli_still_works(tmp_path: Path, capsys) -> None:
    assert main([str(RUNS / "demo"), "--out", str(tmp_path / "o")]) == 0
    stdout = capsys.readouterr().out
    assert stdout.startswith("| algorithm") and str(tmp_path / "o" / "test_acc.png") in stdout
    assert set(FIGURES) == {"accuracy", "time", "breakdown"}


# --- the lead's presets ---------------------------------------------------------------------------


@pytest.mark.skipif(
    not (REPO / "conf" / "experiment" / "table1.yaml").is_file(), reason="no table1 preset yet"
)
def test_table1_preset_composes_into_a_grid_and_a_valid_report_node() -> None:
    preset = compose_preset("table1", "smoke")
    points = expand_grid(preset.params)
    assert len(points) > 1 and all("algorithm.name" in p for p in points)
    node = preset.report
    assert node.get("title") and node.get("rows")
    validate_claims(node.get("claims") or [])
    assert set(node.get("figures") or []) <= set(FIGURES)
    assert (node.get("kind") or "table") in ("table", "scaling")
    target = node.get("target_acc")
    assert target is None or 0 < float(target) <= 1
    # every grid point composes with the point's overrides
    config = PointConfigs("table1", "smoke")(points[0])
    assert config["experiment_name"] == "table1"


@pytest.mark.skipif(
    not (REPO / "conf" / "experiment" / "fig4.yaml").is_file(), reason="no fig4 preset yet"
)
def test_fig4_grid_includes_its_extra_sweeps() -> None:
    preset = compose_preset("fig4", "smoke")
    points = expand_sweeps(preset.sweeps)
    assert len(points) > len(expand_grid(preset.params))
    ranks = {p.get("algorithm.rank") for p in points if p["algorithm.name"] == "powersgd"}
    assert len(ranks) > 1


def test_load_summaries_sees_every_status_of_the_fixtures() -> None:
    runs = load_summaries(RUNS, statuses=None)
    assert set(runs["summary.status"]) == {"completed", "diverged", "failed", "running"}
    assert len(runs) == len(fx.FIXTURE_RUNS) + 2
