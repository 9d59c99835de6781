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
import zlib
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats as scipy_stats

from analysis.claims import (
    ALPHA,
    CLAIMS,
    ClaimResult,
    check_claims,
    claims_markdown,
    combine,
    equivalent,
    ratio_below,
    validate_claims,
    welch,
)
from analysis.reports.report import FIGURES, command_line, git_commit, main, report_experiment
from analysis.reports.tables import (
    experiment_cells,
    experiment_table,
    footnotes,
    human_bytes,
    latex_escape,
    scaling_table,
    time_to_target,
)
from analysis.runs.grid import (
    PointConfigs,
    Preset,
    canonical,
    compose_preset,
    expand_grid,
    expand_sweeps,
    grid_column,
    sweep_values,
)
from analysis.runs.load import load_runs, load_summaries, read_config
from experiments.errors import UserError
from tests.cli import module_here
from tests.fixtures import make_fixtures as fx
from tests.report_files import FIGURE_FILES

REPO = Path(__file__).resolve().parents[3]
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
        RUNS,
        out,
        EXPERIMENT,
        "smoke",
        grid=fx.GRID,
        command="python -m analysis.reports.report test",
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
    # 5 methods x 2 taus x 2 seeds, but sync_sgd (tau-less) once per seed: no pseudo-replication
    assert len(result["grid"]) == 18
    # sync_sgd's running run at tau 8 (not a grid point now), local tau 8 (failed + missing)
    assert result["num_unresolved"] == 3


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
    # sync_sgd's points are its seeds (once, whatever tau): only the running run is unresolved
    assert (sync["missing"], sync["running"], sync["unresolved"]) == (0, 1, "tau=8 seed 1")


def test_div_and_empty_cells_and_footnotes(result: dict) -> None:
    markdown = result["markdown"]
    assert markdown.startswith(f"**{fx.REPORT['title']}**")
    assert md_line(markdown, "eamsgd", 8)[2] == "div."
    assert md_line(markdown, "cocod_sgd", 8)[2] == "0.600 ± – (1 div.)"
    local8 = md_line(markdown, "local_sgd", 8)
    assert local8[2] == "—" and local8[-1] == "0"
    assert md_line(markdown, "sync_sgd", "-")[2] == "0.940 ± 0.014"
    # sync_sgd at tau 8 is not a grid point (tau-less: once per seed): no missing seed 0
    assert footnotes(result["table"]) == [
        "sync_sgd: no result for tau=8 seed 1 (1 running)",
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
    assert md_line(markdown, "local_sgd", 2)[4] == "2.6 s (1/2)"
    assert md_line(markdown, "sync_sgd", "-")[4] == "3.1 s"
    assert md_line(markdown, "overlap_local_sgd", 2)[4] == "2.12 s"
    assert md_line(markdown, "eamsgd", 2)[4] == "— (0/2)"
    assert md_line(markdown, "cocod_sgd", 8)[4] == "— (0/2)"  # the diverged seed counts as a run
    assert md_line(markdown, "local_sgd", 8)[4] == "—"


def test_bytes_ratio_and_train_time_columns(result: dict) -> None:
    table, markdown = result["table"], result["markdown"]
    header = [c.strip() for c in markdown.splitlines()[2].strip().strip("|").split("|")]
    assert header == [
        "algorithm",
        "tau",
        "final test acc",
        "converged",
        "time to acc ≥ 0.8",
        "communicated",
        "comm/compute",
        "train time (s)",
        "n",
    ]
    sync = row(table, "sync_sgd", "-")
    assert sync["comm_bytes"] == 3 * 4_000_000 and sync["comm_ratio"] == pytest.approx(0.5)
    assert md_line(markdown, "sync_sgd", "-")[5:8] == ["12 MB", "50.0%", "4.65"]
    overlap8 = md_line(markdown, "overlap_local_sgd", 8)
    assert overlap8[5:7] == ["1.5 MB", "0.2%"]
    # a diverged run stopped early: its bytes are not averaged in
    assert row(table, "cocod_sgd", 8)["comm_bytes"] == 3 * (4_000_000 // 8)
    assert md_line(markdown, "eamsgd", 8)[5] == "—"


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
    assert r"sync\_sgd & - & 0.940 $\pm$ 0.014 & yes & 3.1 s & 12 MB & 50.0\% & 4.65 & 2 \\" in tex
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
    assert "alpha = 0.05" in claims[2]
    lines = [line for line in claims if line.startswith("- ")]
    assert len(lines) == len(fx.REPORT["claims"])
    # sync_sgd, tau-less, competes at every tau; 2 seeds a method, paired by seed
    assert lines[0].startswith("- **cannot tell**")  # tau=8 rests on 2 seeds without spread
    assert "Overlap-Local-SGD has the best accuracy at every tau" in lines[0]
    assert "Test: paired t-test of the accuracy difference to each other method" in lines[0]
    cells = [line for line in claims if line.startswith("  - tau=")]
    # tau 2: differences -0.03, -0.02: t = -5 on 1 df, p = 0.126; MDD 0.070 at n = 2
    assert cells[0] == (
        "  - tau=2: cannot tell: overlap_local_sgd 0.915 vs sync_sgd 0.940 (paired, n=2): "
        "difference -0.025, 95% CI [-0.089, +0.039], paired t p = 0.126; MDD 0.070; cannot "
        "tell at n = 2 (n = 7 needed for MDD ≤ 0.010) [4 comparisons: holds 1, cannot tell 3]"
    )
    # tau 8: -0.09 on both seeds (its verdict: the test below)
    assert cells[1].startswith("  - tau=8: ")
    assert "overlap_local_sgd 0.850 vs sync_sgd 0.940 (paired, n=2): difference -0.090" in cells[1]
    # EAMSGD's two seeds at tau 2 against local_sgd's 0.90 and 0.78: too noisy to tell
    assert lines[1].startswith("- **cannot tell**: EAMSGD is the worst method (`eamsgd_worst`)")
    assert "eamsgd (2/2 diverged, as 0) 0.000 (paired, n=2)" in "\n".join(claims)
    # CoCoD-SGD diverged on a seed at tau 8, Overlap-Local-SGD on none: an observation
    assert lines[2].startswith("- **holds**: CoCoD-SGD diverges")
    assert (
        "  - tau=8: holds: cocod_sgd 1/2 diverged, overlap_local_sgd 0/2 diverged (observed)"
        in (claims)
    )
    # the fixture's comm/compute ratios are the timing model's, the same on every seed
    assert (
        "  - tau=2: holds (by the model): overlap_local_sgd 1.0% (n=2) vs sync_sgd "
        in "\n".join(claims)
    )
    assert lines[3].startswith("- **holds")
    assert "Overlap-Local-SGD's communication-to-computation" in lines[3]
    provenance = result["provenance"].read_text()
    assert "command: python -m analysis.reports.report test\n" in provenance
    assert re.search(r"^git commit: ([0-9a-f]{40}(-dirty)?|unknown)$", provenance, re.M)
    assert re.search(r"^date: \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$", provenance, re.M)
    assert f"experiment: {EXPERIMENT}" in provenance and "scale: smoke" in provenance
    assert "grid points: 18, 3 without a completed or diverged run" in provenance


def test_the_fixtures_gap_at_tau_8_has_no_spread_and_two_seeds_cannot_tell(result: dict) -> None:
    """overlap_local_sgd 0.86, 0.84 against sync_sgd 0.95, 0.93 at tau 8: -0.09 on both seeds.
    No spread is no evidence: the sign-flip test of 2 seeds cannot go below p = 0.5."""
    claims = result["claims_md"].read_text().splitlines()
    cells = [line for line in claims if line.startswith("  - tau=8: ")]
    assert cells[0].startswith(
        "  - tau=8: cannot tell: overlap_local_sgd 0.850 vs sync_sgd 0.940 (paired, n=2): "
        "difference -0.090, 95% CI [-0.090, -0.090], sign-flip p = 0.500"
    )
    assert claims[4].startswith("- **cannot tell**: Overlap-Local-SGD has the best accuracy")


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
    # the sweeper's points: sync_sgd (tau-less) once per seed
    assert composed["grid"] == expand_sweeps([fx.GRID])
    assert len(composed["grid"]) == len(expand_grid(fx.GRID)) - 2
    assert footnotes(composed["table"]) == [
        "sync_sgd: no result for tau=8 seed 1 (1 running)",
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
        fx.write_run(tmp_path / "runs" / f"{i:02d}", cfg, 0.9 + 0.001 * seed, per_epoch=per_epoch)
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
    # 2 seeds of identical accuracy: no spread is no evidence; the exact sign-flip test needs
    # 6 seeds to reach alpha (it used to "hold" on zero spread at n = 2)
    (claim,) = result["claims"]
    assert claim.verdict == "cannot tell"
    assert all(
        ", TOST p = 0.250; smallest provable margin 0.000; cannot tell at n = 2 (n = 6 needed "
        "for MDD ≤ 0.015)" in line
        for line in claim.details
    ), claim.details


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


def noise(key: str, n: int) -> np.ndarray:
    """`n` draws of one method's own luck, deterministic per `key` (f"{algorithm}|{tau}"),
    centred and scaled to mean 0 and sd 1 (zeros for n < 2): a side's mean is what the test
    says it is, and paired differences of two methods have spread."""
    if n < 2:
        return np.zeros(n)
    draws = np.random.default_rng(zlib.crc32(key.encode())).standard_normal(n)
    return (draws - draws.mean()) / draws.std(ddof=1)


def seed_effect(n: int) -> np.ndarray:
    """The luck a seed gives every method alike (data order, partition, initial model): seeds
    0..n-1 centred, spaced 1 apart."""
    return np.arange(n) - (n - 1) / 2


def paired(key: str, mean: float, luck: float, own_sd: float, n: int = 8) -> np.ndarray:
    """A method's value on seeds 0..n-1: `mean` + `luck` x each seed's luck shared by every
    method (seed_effect) + `own_sd` x the method's own noise (noise(key, n))."""
    return mean + luck * seed_effect(n) + own_sd * noise(key, n)


def assert_holds(result, first_detail: str):
    """`result` (a claim's verdict) holds, and its first detail line begins `first_detail`."""
    assert result.holds is True, result.details
    assert result.details[0].startswith(first_detail)
    return result


def acc_runs(
    table: dict[str, dict[int, float | str]],
    spread: float = 0.005,
    seeds: int = 8,
    noise_sd: float | None = None,
) -> pd.DataFrame:
    """{algorithm: {tau: final acc or "div"}} -> `seeds` seeds each: acc + spread * (seed -
    mean seed), shared by every method (what pairing by seed removes), + noise_sd (default
    spread) x the (algorithm, tau)'s own noise (`noise`); mean acc exactly."""
    noise_sd = spread if noise_sd is None else noise_sd
    runs = []
    for algorithm, by_tau in table.items():
        for tau, acc in by_tau.items():
            own = noise(f"{algorithm}|{tau}", seeds)
            for seed in range(seeds):
                if acc == "div":
                    runs.append(
                        dict(algorithm=algorithm, tau=tau, seed=seed, acc=0.1, status="diverged")
                    )
                else:
                    value = acc + spread * seed_effect(seeds)[seed] + noise_sd * own[seed]
                    runs.append(dict(algorithm=algorithm, tau=tau, seed=seed, acc=float(value)))
    return runs_frame(*runs)


def verdict(name: str, frame: pd.DataFrame) -> ClaimResult:
    return CLAIMS[name](frame, {})


def welch_by_hand(a: list[float], b: list[float], level: float = 0.95) -> tuple[float, float]:
    """The Welch interval of mean(a) - mean(b), from its formula (Welch-Satterthwaite df)."""
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    half = scipy_stats.t.ppf(0.5 + level / 2, df) * math.sqrt(va + vb)
    diff = statistics.mean(a) - statistics.mean(b)
    return diff - half, diff + half


def welch_mdd_by_hand(a: list[float], b: list[float]) -> float:
    """Welch's minimum detectable difference at 80% power and two-sided 0.05, from its formula:
    (t_{0.975, df} + t_{0.8, df}) x the standard error, df Welch-Satterthwaite's."""
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    return (scipy_stats.t.ppf(0.975, df) + scipy_stats.t.ppf(0.8, df)) * math.sqrt(va + vb)


# The statistics, on hand-made samples.


def test_a_clear_difference_holds_with_the_welch_interval() -> None:
    a, b = [0.90, 0.91, 0.93], [0.80, 0.82, 0.81]
    c = welch("a", a, "b", b)
    assert c.holds is True and (c.n_a, c.n_b) == (3, 3)
    assert (c.low, c.high) == pytest.approx(welch_by_hand(a, b))
    assert c.estimate == pytest.approx(statistics.mean(a) - statistics.mean(b))
    assert c.p < ALPHA
    assert c.p == pytest.approx(scipy_stats.ttest_ind(a, b, equal_var=False).pvalue)
    # every test now states its minimum detectable difference at 80% power
    assert c.mdd == pytest.approx(welch_mdd_by_hand(a, b))
    assert c.text() == (
        f"a 0.913 (n=3) vs b 0.810 (n=3): difference +0.103, 95% CI [{c.low:+.3f}, "
        f"{c.high:+.3f}], Welch p = {c.p:.3f}; MDD {welch_mdd_by_hand(a, b):.3f}"
    )


def test_a_reversed_clear_difference_does_not_hold() -> None:
    c = welch("a", [0.80, 0.82, 0.81], "b", [0.90, 0.91, 0.93])
    assert c.holds is False and c.high < 0
    assert c.verdict_text().startswith("does not hold: a 0.810 (n=3) vs b 0.913 (n=3)")


def test_a_noisy_difference_cannot_tell() -> None:
    a, b = [0.95, 0.80, 0.99], [0.88, 0.97, 0.79]
    c = welch("a", a, "b", b)
    assert c.holds is None and c.low < 0 < c.high and c.p > ALPHA
    assert (c.low, c.high) == pytest.approx(welch_by_hand(a, b))


def test_one_run_on_a_side_cannot_tell() -> None:
    c = welch("a", [0.99], "b", [0.50, 0.51])
    assert c.holds is None and c.n_a == 1
    assert c.text() == "a 0.990 (n=1) vs b 0.505 (n=2): n < 2 on a side"
    assert welch("a", [], "b", [0.5, 0.6]).holds is None


def test_an_interval_that_straddles_the_threshold_cannot_tell() -> None:
    # A difference of ~0.12, clearly above 0, but its interval straddles the threshold 0.1.
    a, b = [0.90, 0.93, 0.96], [0.80, 0.81, 0.82]
    assert welch("a", a, "b", b).holds is True
    c = welch("a", a, "b", b, threshold=0.1)
    assert c.low < 0.1 < c.high and c.holds is None
    assert welch("a", a, "b", b, threshold=0.2).holds is False
    assert "vs +0.100, Welch p" in c.text()


def test_no_spread_on_either_side_is_decided_by_the_exact_permutation_test() -> None:
    # No spread is no evidence (analysis/stats/): 2 runs a side used to "hold" as an
    # exact difference; the exact permutation test of 2 vs 2 cannot go below p = 2 / C(4, 2) = 1/3.
    c = welch("a", [0.9, 0.9], "b", [0.0, 0.0])
    assert c.holds is None and c.test == "permutation"
    assert c.p == pytest.approx(2 / math.comb(4, 2))
    # 4 vs 4: only the observed split puts every 0.9 on a's side, p = 2 / C(8, 4) = 0.029
    c = welch("a", [0.9] * 4, "b", [0.0] * 4)
    assert c.holds is True and c.p == pytest.approx(2 / math.comb(8, 4))
    assert c.low == c.high == pytest.approx(0.9)
    assert welch("a", [0.5, 0.5], "b", [0.5, 0.5]).holds is None


@pytest.mark.parametrize(
    "b, holds",
    [
        ([0.901, 0.899, 0.903, 0.897], True),  # inside the margin, tightly
        ([0.95, 0.951, 0.949, 0.950], False),  # 0.05 away: wholly outside
        ([0.90, 0.93, 0.87, 0.92], None),  # noisy: straddles the margin
    ],
    ids=["inside", "outside", "straddling"],
)
def test_equivalence_is_tost_on_the_90_percent_interval(b, holds) -> None:
    a = [0.900, 0.902, 0.898, 0.900]
    c = equivalent("a", a, "b", b, margin=0.015)
    assert c.holds is holds
    assert c.level == pytest.approx(1 - 2 * ALPHA)
    assert (c.low, c.high) == pytest.approx(welch_by_hand(a, b, level=0.90))
    assert "90% CI" in c.text() and "margin ±0.015" in c.text()
    assert equivalent("a", a[:1], "b", b, margin=0.015).holds is None


@pytest.mark.parametrize(
    "a, holds", [([1.0, 1.2, 1.1], True), ([4.5, 5.0, 5.5], False), ([1.0, 3.5, 0.5], None)]
)
def test_ratio_below_a_threshold_is_a_bootstrap(a, holds) -> None:
    b = [10.0, 10.5, 9.5]
    c = ratio_below("a", a, "b", b, 0.2)
    assert c.holds is holds and c.kind == "ratio" and c.p is None
    assert c.estimate == pytest.approx(statistics.mean(a) / statistics.mean(b))
    assert c.low <= c.estimate <= c.high
    # a fixed seed: the same interval every time
    again = ratio_below("a", a, "b", b, 0.2)
    assert (again.low, again.high) == (c.low, c.high)
    assert "95% bootstrap CI" in c.text("ratio")


def test_combining_cells() -> None:
    assert combine([True, True]) is True
    assert combine([True, None]) is None
    assert combine([None, False, True]) is False
    assert combine([]) is None


# The claims, on hand-made frames.


@pytest.mark.parametrize(
    "table, holds",
    [
        ({"overlap_local_sgd": {2: 0.90, 8: 0.85}, "local_sgd": {2: 0.88, 8: 0.80}}, True),
        ({"overlap_local_sgd": {2: 0.90, 8: 0.85}, "local_sgd": {2: 0.88, 8: 0.87}}, False),
        ({"overlap_local_sgd": {2: 0.90, 8: "div"}, "local_sgd": {2: 0.88, 8: 0.50}}, False),
        ({"overlap_local_sgd": {2: 0.90, 8: 0.85}, "local_sgd": {2: 0.898, 8: 0.80}}, None),
        ({"overlap_local_sgd": {2: 0.90}, "local_sgd": {8: 0.88}}, None),
        ({"local_sgd": {2: 0.90}}, None),
    ],
    ids=["clear", "reversed at 8", "diverged", "noisy at 2", "no common tau", "no overlap"],
)
def test_overlap_best_at_every_tau(table, holds) -> None:
    result = verdict("overlap_best_at_every_tau", acc_runs(table))
    assert result.holds is holds, result.details
    assert result.test.startswith("paired t-test")  # paired by seed, no longer Welch's
    if holds is not None:
        assert result.details[0].startswith("tau=2: holds: ")
        assert "overlap_local_sgd 0.900 vs local_sgd 0.880 (paired, n=8)" in result.details[0]


def test_a_noisy_gap_cannot_tell_and_says_the_n_it_needs() -> None:
    """The gap at tau 2 (0.002) is well below what 8 seeds can detect."""
    table = {"overlap_local_sgd": {2: 0.90, 8: 0.85}, "local_sgd": {2: 0.898, 8: 0.80}}
    result = verdict("overlap_best_at_every_tau", acc_runs(table, spread=0.01))
    assert result.holds is None and result.evidence == "2 taus: holds 1, cannot tell 1"
    line = result.details[0]
    assert line.startswith(
        "tau=2: cannot tell: overlap_local_sgd 0.900 vs local_sgd 0.898 (paired, n=8): "
        "difference +0.002, 95% CI ["
    )
    mdd = float(re.search(r"; MDD (\d\.\d+)", line).group(1))
    assert mdd > 0.01 > 0.002
    assert re.search(r"; cannot tell at n = 8 \(n = \d+ needed for MDD ≤ 0\.010\)$", line)


def test_one_seed_per_method_cannot_tell() -> None:
    """Issue 12, item 4: a report with one seed per method said "holds"."""
    frame = acc_runs(
        {"overlap_local_sgd": {2: 0.95, 8: 0.95}, "local_sgd": {2: 0.80, 8: 0.80}}, seeds=1
    )
    result = verdict("overlap_best_at_every_tau", frame)
    assert result.holds is None
    # the sides pair by seed now: one common seed is too few
    assert all("fewer than 2 seeds on both sides" in line for line in result.details)


def test_gaps_smaller_than_the_seed_spread_cannot_tell() -> None:
    """Issue 12, item 4: Table 1's "does not hold" rested on gaps of 0.004 against standard
    deviations of 0.005-0.012 (the committed cpu table: tau=1, 4 and 8)."""
    frame = runs_frame(
        *[
            dict(algorithm=a, tau=tau, seed=s, acc=acc)
            for a, tau, accs in [
                ("overlap_local_sgd", 1, (0.970, 0.977, 0.984)),
                ("local_sgd", 1, (0.976, 0.981, 0.986)),
                ("overlap_local_sgd", 4, (0.980, 0.980, 0.980)),
                ("cocod_sgd", 4, (0.974, 0.984, 0.994)),
            ]
            for s, acc in enumerate(accs)
        ]
    )
    result = verdict("overlap_best_at_every_tau", frame)
    assert result.holds is None
    assert result.evidence == "2 taus: cannot tell 2"
    # paired by seed: differences -0.006, -0.004, -0.002 (sd 0.002): t = -3.46 on 2 df
    assert result.details[0] == (
        "tau=1: cannot tell: overlap_local_sgd 0.977 vs local_sgd 0.981 (paired, n=3): "
        "difference -0.004, 95% CI [-0.009, +0.001], paired t p = 0.074; MDD 0.006"
    )


def test_tau_less_methods_compete_at_every_tau() -> None:
    frame = acc_runs({"overlap_local_sgd": {2: 0.90, 8: 0.85}, "local_sgd": {2: 0.8, 8: 0.8}})
    sync = acc_runs({"sync_sgd": {1: 0.87}}).assign(run_dir=lambda f: "sync" + f["run_dir"])
    result = verdict("overlap_best_at_every_tau", pd.concat([frame, sync], ignore_index=True))
    assert result.holds is False
    assert result.details[1].startswith(
        "tau=8: does not hold: overlap_local_sgd 0.850 vs sync_sgd 0.870 (paired, n=8)"
    )
    assert result.details[0].startswith("tau=2: holds: ")
    assert result.details[0].endswith("[2 comparisons: holds 2]")


def test_eamsgd_worst() -> None:
    every = verdict(
        "eamsgd_worst", acc_runs({"eamsgd": {2: 0.7, 8: "div"}, "easgd": {2: 0.8, 8: 0.6}})
    )
    assert every.holds is True, every.details
    # the diverged runs count as accuracy 0
    assert (
        "tau=8: holds: easgd 0.600 vs eamsgd (8/8 diverged, as 0) 0.000 (paired, n=8)"
        in (every.details[1])
    )
    reversed_ = verdict(
        "eamsgd_worst", acc_runs({"eamsgd": {2: 0.9, 8: 0.9}, "easgd": {2: 0.8, 8: 0.6}})
    )
    assert reversed_.holds is False
    noisy = verdict(
        "eamsgd_worst",
        acc_runs({"eamsgd": {2: 0.70, 8: 0.60}, "easgd": {2: 0.80, 8: 0.61}}, spread=0.03),
    )
    assert noisy.holds is None and noisy.details[1].startswith("tau=8: cannot tell")
    assert "; cannot tell at n = 8 (n = " in noisy.details[1]  # a gap of 0.01 against sd 0.03
    assert verdict("eamsgd_worst", acc_runs({"easgd": {2: 0.8}})).holds is None
    assert verdict("eamsgd_worst", acc_runs({"eamsgd": {2: 0.8}})).holds is None


@pytest.mark.parametrize(
    "table, holds",
    [
        ({"cocod_sgd": {2: 0.9, 8: "div"}, "overlap_local_sgd": {2: 0.9, 8: 0.85}}, True),
        ({"cocod_sgd": {8: 0.60}, "overlap_local_sgd": {8: 0.85}}, True),
        ({"cocod_sgd": {8: 0.80}, "overlap_local_sgd": {8: 0.85}}, False),
        # 0.001 beyond the margin of 0.1: well below the MDD at 8 seeds (0.004)
        ({"cocod_sgd": {8: 0.749}, "overlap_local_sgd": {8: 0.85}}, None),
        ({"cocod_sgd": {8: "div"}, "overlap_local_sgd": {8: "div"}}, False),
        ({"cocod_sgd": {2: "div"}, "overlap_local_sgd": {8: 0.85}}, None),
    ],
    ids=["diverged", "collapsed", "close", "gap near the margin", "both diverged", "apart"],
)
def test_cocod_diverges_at_large_tau(table, holds) -> None:
    result = verdict("cocod_diverges_at_large_tau_overlap_does_not", acc_runs(table))
    assert result.holds is holds, result.details
    assert "tau=8" in result.evidence


def test_cocod_evidence_is_an_observation_then_a_test() -> None:
    frame = acc_runs({"cocod_sgd": {8: "div"}, "overlap_local_sgd": {8: 0.85}})
    result = verdict("cocod_diverges_at_large_tau_overlap_does_not", frame)
    assert result.details == (
        "tau=8: holds: cocod_sgd 8/8 diverged, overlap_local_sgd 0/8 diverged (observed)",
    )
    close = verdict(
        "cocod_diverges_at_large_tau_overlap_does_not",
        acc_runs({"cocod_sgd": {8: 0.80}, "overlap_local_sgd": {8: 0.85}}),
    )
    assert (
        "accuracy gap: overlap_local_sgd 0.850 vs cocod_sgd 0.800 (paired, n=8)"
        in (close.details[0])
    )
    assert "vs +0.100, paired t p" in close.details[0]
    one = acc_runs({"cocod_sgd": {8: "div"}, "overlap_local_sgd": {8: 0.85}}, seeds=1)
    assert verdict("cocod_diverges_at_large_tau_overlap_does_not", one).holds is None


OVERLAP = "overlap_local_sgd"


def ratio_runs(sync: list[float], overlap: list[float]) -> pd.DataFrame:
    return runs_frame(
        *[dict(algorithm="sync_sgd", tau=1, seed=s, ratio=r) for s, r in enumerate(sync)],
        *[dict(algorithm=OVERLAP, tau=2, seed=s, ratio=r) for s, r in enumerate(overlap)],
    )


@pytest.mark.parametrize(
    "overlap, holds",
    [([0.05, 0.04, 0.06], True), ([0.2, 0.25, 0.22], False), ([0.02, 0.2, 0.11], None)],
    ids=["far", "near", "noisy"],
)
def test_overlap_ratio_far_below_sync(overlap, holds) -> None:
    result = verdict("overlap_ratio_far_below_sync", ratio_runs([0.5, 0.48, 0.52], overlap))
    assert result.holds is holds, result.details
    assert "bootstrap" in result.test and result.evidence.endswith("far below = under 0.2x")
    assert result.details[0].startswith("tau=2: ")
    if holds:
        assert (
            "overlap_local_sgd 5.0% vs sync_sgd 50.0% (paired, n=3): ratio 0.1"
            in (result.details[0])
        )
    # one of the two alone cannot tell, nor one run a side
    assert verdict("overlap_ratio_far_below_sync", ratio_runs([], overlap)).holds is None
    assert verdict("overlap_ratio_far_below_sync", ratio_runs([0.5], overlap)).holds is None


def test_ratio_falls_back_to_exposed_over_compute() -> None:
    frame = runs_frame(
        *[dict(algorithm="sync_sgd", tau=1, seed=s, exposed=5.0 + s) for s in range(3)],
        *[dict(algorithm="overlap_local_sgd", tau=2, seed=s, exposed=0.1) for s in range(3)],
    ).assign(**{"summary.time/compute_s": 10.0})
    assert verdict("overlap_ratio_far_below_sync", frame).holds is True


def test_a_modeled_ratio_equal_on_every_seed_is_by_the_model() -> None:
    # the timing model gives every seed the same ratio: reported, not tested
    result = verdict("overlap_ratio_far_below_sync", ratio_runs([0.5] * 3, [0.05] * 3))
    assert result.holds is True
    assert result.details == (
        "tau=2: holds (by the model): overlap_local_sgd 5.0% (n=3) vs sync_sgd 50.0% (n=3): "
        "ratio 0.1 vs 0.2, by the model (the same value on every seed of both sides: set by the "
        "timing model, not sampled)",
    )


# 0.31 vs 0.3: a gap of 0.01 s against an MDD of about 0.03 s at 8 seeds
@pytest.mark.parametrize("power_low, holds", [(0.5, True), (0.2, False), (0.31, None)])
def test_powersgd_exposed_above_local_methods(power_low, holds) -> None:
    def seeds(algorithm: str, tau: int, per_epoch: float, **extra) -> list[dict]:
        """8 seeds of exposed communication per epoch: `per_epoch` x a seed's shared luck
        (+-7%) + 0.02 s x the method's own noise (10 epochs a run)."""
        own = noise(f"{algorithm}|{extra}|{tau}", 8)
        return [
            dict(
                algorithm=algorithm,
                tau=tau,
                seed=s,
                exposed=10 * (per_epoch * (1 + 0.02 * seed_effect(8)[s]) + 0.02 * own[s]),
                **extra,
            )
            for s in range(8)
        ]

    frame = runs_frame(
        *seeds("powersgd", 1, 2.0, rank=1),
        *seeds("powersgd", 1, power_low, rank=4),
        *seeds("local_sgd", 2, 0.3),
        *seeds("overlap_local_sgd", 2, 0.01),
    )
    result = verdict("powersgd_exposed_above_local_methods", frame)
    assert result.holds is holds, result.details
    # the closest pair is shown: PowerSGD's lowest rank against the highest local method
    assert (
        f"powersgd (rank=4) {power_low:.3g} s vs local_sgd tau=2 0.3 s (paired, n=8)"
        in (result.details[0])
    )
    assert result.details[0].endswith("[4 comparisons: " + (
        "holds 4]" if holds else "holds 3, does not hold 1]" if holds is False else
        "holds 3, cannot tell 1]"
    ))  # fmt: skip
    assert verdict("powersgd_exposed_above_local_methods", frame.iloc[:16]).holds is None


def test_losp_beats_osp_per_slowdown_never_pooled() -> None:
    def frame(**by_slowdown: tuple[float, float]) -> pd.DataFrame:
        runs = []
        for slowdown, (losp, osp) in by_slowdown.items():
            for name, acc in (("losp", losp), ("osp", osp)):
                own = noise(f"{name}|{slowdown}", 8)
                for s in range(8):
                    value = acc + 0.005 * (seed_effect(8)[s] + own[s])
                    runs.append(dict(algorithm=name, tau=2, seed=s, acc=value, slowdown=slowdown))
        return runs_frame(*runs)

    holds = verdict("losp_beats_osp", frame(one_slow=(0.9, 0.85), lognormal=(0.88, 0.8)))
    assert holds.holds is True
    assert [line.split(":")[0] for line in holds.details] == [
        "slowdown=lognormal, tau=2",
        "slowdown=one_slow, tau=2",
    ]
    # pooled over slowdowns LOSP would lead (0.875 vs 0.825); per slowdown it loses one
    mixed = verdict("losp_beats_osp", frame(one_slow=(0.95, 0.80), lognormal=(0.80, 0.85)))
    assert mixed.holds is False
    assert verdict("losp_beats_osp", acc_runs({"osp": {2: 0.85}})).holds is None


def test_osp_losp_faster_than_sync_under_heterogeneity() -> None:
    def frame(losp_s: float, slowdown: str = "one_slow") -> pd.DataFrame:
        """8 seeds of each method's time to the target: the given mean + 1 s x a seed's shared
        luck + 2 s x the method's own noise; every run reached it."""
        runs = []
        for name, tau, mean in (("sync_sgd", 1, 100.0), ("osp", 2, 60.0), ("losp", 2, losp_s)):
            for s, to in enumerate(paired(f"{name}|{tau}", mean, 1.0, 2.0)):
                runs.append(
                    {
                        **dict(algorithm=name, tau=tau, seed=s, train=to + 10, slowdown=slowdown),
                        "metrics.reached_target": True,
                        "metrics.time_to_target_s": to,
                    }
                )
        # homogeneous runs do not count
        runs += [
            dict(algorithm="sync_sgd", tau=1, seed=s, train=1.0, slowdown="none") for s in range(8)
        ]
        return runs_frame(*runs)

    # the claim is on the time to the target accuracy now, paired by seed
    assert_holds(
        verdict("osp_losp_faster_than_sync_under_heterogeneity", frame(70.0)),
        "slowdown=one_slow, tau=2: holds: sync_sgd 100 s vs losp 70 s (paired, n=8): "
        "difference +30 s",
    )
    assert verdict("osp_losp_faster_than_sync_under_heterogeneity", frame(120.0)).holds is False
    # 0.5 s sooner against an MDD of about 3 s
    assert verdict("osp_losp_faster_than_sync_under_heterogeneity", frame(99.5)).holds is None
    homogeneous = verdict("osp_losp_faster_than_sync_under_heterogeneity", frame(70.0, "none"))
    assert homogeneous.holds is None


def test_pseudo_sync_matches_sync_is_an_equivalence() -> None:
    def frame(pseudo: float | str, spread: float = 0.001) -> pd.DataFrame:
        """8 seeds a worker count: acc + 0.002 x a seed's shared luck + spread x the method's
        own noise at that worker count."""
        runs = []
        for m in (2, 4):
            sync = paired(f"sync_sgd|{m}", 0.95, 0.002, spread)
            if pseudo != "div":
                own = paired(f"pseudo_sync|{m}", pseudo, 0.002, spread)
            for s in range(8):
                run = dict(tau=1, workers=m, seed=s)
                runs.append(dict(algorithm="sync_sgd", **run, acc=sync[s]))
                if pseudo == "div":
                    runs.append(dict(algorithm="pseudo_sync", **run, acc=0.1, status="diverged"))
                else:
                    runs.append(dict(algorithm="pseudo_sync", **run, acc=own[s]))
        return runs_frame(*runs)

    close = assert_holds(
        verdict("pseudo_sync_matches_sync", frame(0.945)),
        "workers=2: holds: pseudo_sync 0.945 vs sync_sgd 0.950 (paired, n=8): difference -0.005, "
        "90% CI [",
    )
    assert close.evidence == "2 conditions: holds 2; comparable = within 0.015"
    assert verdict("pseudo_sync_matches_sync", frame(0.90)).holds is False
    noisy = verdict("pseudo_sync_matches_sync", frame(0.94, spread=0.01))
    assert noisy.holds is None, noisy.details
    assert all("vs margin ±0.015, TOST p" in line for line in noisy.details)
    assert verdict("pseudo_sync_matches_sync", frame("div")).holds is False
    only = runs_frame(dict(algorithm="pseudo_sync", tau=1, workers=2, acc=0.9))
    assert verdict("pseudo_sync_matches_sync", only).holds is None


def test_claims_compare_like_with_like() -> None:
    """Runs that differ in a key the claim does not name (here epochs) are separate cells."""
    short = acc_runs({"overlap_local_sgd": {2: 0.80}, "local_sgd": {2: 0.90}}).assign(epochs=2)
    long = acc_runs({"overlap_local_sgd": {2: 0.95}, "local_sgd": {2: 0.90}}).assign(
        epochs=20, run_dir=lambda f: "long" + f["run_dir"]
    )
    result = verdict("overlap_best_at_every_tau", pd.concat([short, long], ignore_index=True))
    assert result.holds is False
    assert [line.split(": ")[:2] for line in result.details] == [
        ["epochs=2, tau=2", "does not hold"],
        ["epochs=20, tau=2", "holds"],
    ]


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


def test_claims_markdown_states_the_method_and_lists_the_cells() -> None:
    results = [
        ClaimResult("a", "A holds", True, "2 taus: holds 2", "Welch", ("tau=1: holds: x",)),
        ClaimResult("b", "B", False, "0 < 1"),
        ClaimResult("c", "C", None, "no data"),
    ]
    lines = claims_markdown(results, "T").splitlines()
    assert lines[:2] == ["# Claims: T", ""]
    assert "alpha = 0.05" in lines[2] and "bootstrap" in lines[2]
    # the method: paired by seed (Welch's only where the sides do not pair), with power, Holm
    for said in ("paired by seed", "paired t-test", "sign-flip", "cannot reach alpha below n = 6"):
        assert said in lines[2]
    for said in ("Welch's t-test", "minimum detectable difference (MDD) at 80% power", "Holm"):
        assert said in lines[2]
    assert "a tau-less method counts once per seed" in lines[2]
    assert '"by the model"' in lines[2]
    assert lines[4:] == [
        "- **holds**: A holds (`a`). 2 taus: holds 2. Test: Welch.",
        "  - tau=1: holds: x",
        "- **does not hold**: B (`b`). 0 < 1.",
        "- **cannot tell**: C (`c`). no data.",
    ]
    assert "No claims" in claims_markdown([])


# --- CLI ------------------------------------------------------------------------------------------


def test_cli_prints_table_claims_then_paths(tmp_path: Path) -> None:
    out = tmp_path / "out"
    args = ["--experiment", EXPERIMENT, "--scale", "smoke", str(RUNS), "--out", str(out)]
    args += ["--conf", str(CONF)]
    done = module_here("analysis.reports.report", *args)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    table = (out / "table.md").read_text().strip()
    assert done.stdout.startswith(table + "\n\n")
    rest = done.stdout[len(table) :].strip().split("\n\n")
    claims, paths = rest[0].splitlines(), rest[1].splitlines()
    verdicts = [line.split(":")[0] for line in claims if not line.startswith("  - ")]
    # the first claim's tau=8 cell rests on a gap with no spread at 2 seeds: cannot tell
    assert verdicts[0] == "cannot tell"
    assert verdicts[1:3] == ["cannot tell", "holds"] and verdicts[3].startswith("holds")
    written_verdicts = [
        w[len("- **") :].split("**")[0] for w in (out / "claims.md").read_text().splitlines()
        if w.startswith("- **")
    ]  # fmt: skip
    assert verdicts == written_verdicts
    # each claim is followed by its cells, as in claims.md
    written = (out / "claims.md").read_text().splitlines()
    assert [c for c in claims if c.startswith("  - ")] == [
        w for w in written if w.startswith("  - ")
    ]
    assert paths == [
        str(out / name)
        for name in (
            "table.md",
            "table.tex",
            "table.csv",
            *FIGURE_FILES,
            "claims.md",
            "runs.jsonl.gz",
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
    assert set(FIGURES) == {"accuracy", "time", "breakdown", "utilization"}


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


def test_a_preset_report_splits_and_warns_on_a_key_its_rows_do_not_name(tmp_path, capsys) -> None:
    """Runs of one preset that differ in a key outside `report.rows` (here a hand run with
    other epochs) get that key as a row column, a one-line warning and a footnote."""
    runs = [("local_sgd", 2, s, 0.90 + s / 100, "completed") for s in (0, 1)]
    runs += [("local_sgd", 2, 0, 0.70, "completed", {"epochs": 1})]
    write_runs(tmp_path / "runs", runs, report={"figures": [], "claims": []})
    result = report_experiment(tmp_path / "runs", tmp_path / "out", "x", grid={})
    err = capsys.readouterr().err
    assert err == (
        "warning: x at scale smoke: runs also differ in epochs: rows split by epochs as well "
        "(never pooled)\n"
    )
    table = result["table"]
    assert list(table.columns[:3]) == ["algorithm.name", "tau", "epochs"]
    assert table[["epochs", "n"]].values.tolist() == [[1, 1], [3, 2]]
    assert table["mean"].tolist() == pytest.approx([0.70, 0.905])
    assert footnotes(table)[0] == (
        "note: runs also differ in epochs: rows split by epochs as well (never pooled)"
    )
    assert (tmp_path / "out" / "table.md").read_text().rstrip().endswith("(never pooled)")


def test_a_configuration_run_twice_counts_once_not_as_another_seed(tmp_path: Path, capsys) -> None:
    # a runs folder holding the same point twice (a run made under an earlier run identity, so
    # in another folder): one seed, not two; the later one is kept and the other named
    import os

    runs = tmp_path / "runs"
    for seed, final in ((0, 0.80), (1, 0.82)):
        fx.write_run(runs / f"sync-{seed}", fx.make_config("sync_sgd", 1, seed), final)
    old = fx.write_run(runs / "sync-0-old", fx.make_config("sync_sgd", 1, 0), 0.50)
    os.utime(old / "summary.json", (1, 1))  # finished long before the other seed-0 run
    result = report_experiment(runs, tmp_path / "out", EXPERIMENT, "smoke", command="x")
    assert result["num_runs"] == 2
    line = md_line((tmp_path / "out" / "table.md").read_text(), "sync_sgd", "-")
    assert "0.810" in " ".join(line)  # the mean of 0.80 and 0.82: the old 0.50 left out
    err = capsys.readouterr().err
    assert "1 run(s) repeat the configuration of a later run" in err and "sync-0-old" in err


def test_a_table_says_when_its_runs_came_from_more_than_one_platform():
    """Issue 50: `cluster.lockstep_seeds=1` (another image layout) or another thread count can
    move a float32 run's last digits under the same run identity; the table says so."""
    import pandas as pd

    from analysis.reports.report import _platform_note

    one = pd.DataFrame({"summary.platform.key": ["a1", "a1", None]})
    two = pd.DataFrame({"summary.platform.key": ["a1", "b2", "a1"]})
    assert _platform_note(one) == []
    assert _platform_note(pd.DataFrame({"run_dir": ["x"]})) == []
    (line,) = _platform_note(two)
    assert line.startswith("The runs were computed on 2 platforms (provenance.txt, `platform`")


def test_a_preset_report_checks_the_presets_claims_as_they_stand(tmp_path: Path) -> None:
    """The claims are analysis, not training: a claim added to (or dropped from) a preset is
    checked on its committed runs, whose config still lists the claims they were run with."""
    import shutil

    conf = tmp_path / "conf"
    shutil.copytree(CONF, conf)
    preset = conf / "experiment" / f"{EXPERIMENT}.yaml"
    text = preset.read_text()
    assert "  - overlap_best_at_every_tau\n" in text
    preset.write_text(text.replace("  - overlap_best_at_every_tau\n", ""))
    ran_with = read_config(next(RUNS.rglob("config.yaml")).parent)["report"]["claims"]
    assert "overlap_best_at_every_tau" in ran_with
    result = report_experiment(RUNS, tmp_path / "out", EXPERIMENT, "smoke", conf_dir=conf)
    names = [c.name for c in result["claims"]]
    assert names == [
        "eamsgd_worst",
        "cocod_diverges_at_large_tau_overlap_does_not",
        "overlap_ratio_far_below_sync",
    ]
