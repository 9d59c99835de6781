"""analysis/: run dirs -> frame -> table, figure and report, on small fake run dirs."""

from __future__ import annotations

import json
import math
import statistics
import subprocess
import sys
import warnings
from pathlib import Path

import matplotlib.colors as mcolors
import pandas as pd
import pytest
import yaml

from analysis.figures import ALGORITHM_COLOURS, accuracy_curves, algorithm_colour, curves_figure
from analysis.load import find_runs, load_runs, load_summaries, read_metrics
from analysis.report import main, report
from analysis.tables import TAU_LESS, final_accuracy_table, to_markdown, write_table
from experiments.errors import UserError

REPO = Path(__file__).resolve().parents[1]
NUM_EVALS = 3

# (algorithm, tau, seed, final test acc, status). sync_sgd appears with two taus to check that a
# tau-less method forms one row; local_sgd tau=16 checks numeric (not string) tau order.
RUNS = [
    ("sync_sgd", 1, 0, 0.90, "completed"),
    ("sync_sgd", 1, 1, 0.92, "completed"),
    ("sync_sgd", 4, 2, 0.91, "completed"),
    ("local_sgd", 2, 0, 0.88, "completed"),
    ("local_sgd", 2, 1, 0.89, "completed"),
    ("local_sgd", 2, 2, 0.93, "completed"),
    ("local_sgd", 4, 0, 0.85, "completed"),
    ("local_sgd", 16, 0, 0.80, "completed"),
    ("powersgd", 2, 0, 0.10, "diverged"),
    ("easgd", 2, 0, 0.50, "failed"),
    ("osp", 2, 0, 0.60, "running"),
]
KEPT = [r for r in RUNS if r[4] in ("completed", "diverged")]


def make_config(algorithm: str, tau: int, seed: int) -> dict:
    return {
        "algorithm": {"name": algorithm, "alpha": 0.5},
        "tau": tau,
        "seed": seed,
        "workers": 4,
        "epochs": NUM_EVALS,
        "dataset": {"name": "digits", "root": "data"},
        "model": {"name": "resnet18", "width": 8},
        "partition": {"name": "iid"},
        "network": {"name": "ideal", "bandwidth_gbps": None},
        "experiment_name": "demo",
        "scale": {"name": "cpu"},
        "lr": 0.1,
        "milestones": [1, 2],
    }


def acc_at(final: float, evaluation: int) -> float:
    return final * (evaluation + 1) / NUM_EVALS


def write_run(
    run_dir: Path,
    algorithm: str,
    tau: int,
    seed: int,
    final: float,
    status: str = "completed",
    num_evals: int = NUM_EVALS,
    trailing: str = "",
) -> Path:
    """A run dir in the training code's format: config.yaml, .hydra/, metrics.jsonl, summary."""
    run_dir.mkdir(parents=True)
    config = make_config(algorithm, tau, seed)
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config))
    (run_dir / ".hydra").mkdir()
    hydra_config = {**config, "experiment_name": "${oc.env:NO_SUCH_VAR_FOR_TEST}"}
    (run_dir / ".hydra" / "config.yaml").write_text(yaml.safe_dump(hydra_config))
    lines = []
    for e in range(num_evals):
        record = {
            "step": 10 * (e + 1),
            "epoch": e + 1,
            "train/loss": 2.0 / (e + 1),
            "test/loss": 2.1 / (e + 1),
            "test/acc": acc_at(final, e),
            "test/acc_local": acc_at(final, e) - 0.01,
            "lr": 0.1 / (e + 1),
            # Seeds differ in wall-clock, as real runs do.
            "time/train_s": 1.0 * (e + 1) + 0.1 * seed,
            "time/compute_s": 0.8 * (e + 1),
            "time/comm_exposed_s": 0.2 * (e + 1),
            "comm/bytes": 1000 * (e + 1),
            "comm/wait_s": 0.01,
        }
        lines.append(json.dumps(record) + "\n")
    (run_dir / "metrics.jsonl").write_text("".join(lines) + trailing)
    summary = {
        "status": status,
        "final/test_acc": final,
        "best/test_acc": final,
        "final/train_loss": 2.0 / max(num_evals, 1),
        "steps": 10 * num_evals,
        "time/train_s": float(num_evals),
        "comm/bytes": 1000 * num_evals,
        "world_size": 4,
        "git_sha": "abc123",
        "torch_version": "2.4.0",
        "data_card": {"worker_0": [10, 12, 9], "worker_1": [11, 10, 10]},
    }
    (run_dir / "summary.json").write_text(json.dumps(summary))
    return run_dir


@pytest.fixture(scope="module")
def runs_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("runs")
    for i, (algorithm, tau, seed, final, status) in enumerate(RUNS):
        # local_sgd tau=2 seed=1 was killed while writing its last line.
        trailing = '{"step": 40, "epo' if (algorithm, tau, seed) == ("local_sgd", 2, 1) else ""
        write_run(
            root / "multirun" / "2024-01-01" / f"{i:02d}",
            algorithm,
            tau,
            seed,
            final,
            status,
            trailing=trailing,
        )
    # W&B's mirror may hold a summary.json; it is not a run.
    (root / "multirun" / "2024-01-01" / "00" / "wandb" / "run-1").mkdir(parents=True)
    (root / "multirun" / "2024-01-01" / "00" / "wandb" / "run-1" / "summary.json").write_text("{}")
    return root


@pytest.fixture(scope="module")
def frame(runs_root: Path) -> pd.DataFrame:
    return load_runs(runs_root)


@pytest.fixture(scope="module")
def summaries(runs_root: Path) -> pd.DataFrame:
    return load_summaries(runs_root)


# --- load -------------------------------------------------------------------------------------


def test_find_runs_is_recursive_sorted_and_skips_hydra_and_wandb(runs_root: Path) -> None:
    runs = find_runs(runs_root)
    assert len(runs) == len(RUNS)
    assert runs == sorted(runs)
    assert all((r / "summary.json").is_file() for r in runs)
    assert not any("wandb" in r.parts or ".hydra" in r.parts for r in runs)
    # A run dir given as the root is itself a run.
    assert find_runs(runs[0]) == [runs[0]]


def test_find_runs_missing_root_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="not a directory"):
        find_runs(tmp_path / "nope")


def test_load_runs_gives_one_row_per_evaluation(frame: pd.DataFrame) -> None:
    assert len(frame) == len(KEPT) * NUM_EVALS
    assert frame["run_dir"].nunique() == len(KEPT)
    for column in ("algorithm.name", "algorithm.alpha", "tau", "dataset.name", "model.width"):
        assert column in frame.columns
    for column in ("summary.status", "summary.final/test_acc", "summary.world_size"):
        assert column in frame.columns
    for column in ("step", "epoch", "test/acc", "time/comm_exposed_s", "comm/bytes", "comm/wait_s"):
        assert column in frame.columns
    assert not any(c.startswith("summary.data_card") for c in frame.columns)
    # The metric rows of one run carry that run's values.
    run = frame[(frame["algorithm.name"] == "local_sgd") & (frame["tau"] == 4)]
    assert list(run["epoch"]) == [1, 2, 3]
    assert run["test/acc"].tolist() == pytest.approx([acc_at(0.85, e) for e in range(3)])
    assert set(run["summary.final/test_acc"]) == {0.85}
    # A list-valued config key stays one cell per row.
    assert run["milestones"].iloc[0] == [1, 2]


def test_config_lr_and_metric_lr_keep_separate_columns(frame, summaries) -> None:
    assert set(frame["config.lr"]) == {0.1}
    assert frame["lr"].max() == pytest.approx(0.1) and frame["lr"].min() < 0.1
    # Same name for the same thing in both frames.
    assert set(summaries["config.lr"]) == {0.1} and "lr" not in summaries.columns


def test_labels_include_tau_only_for_periodic_methods(frame: pd.DataFrame) -> None:
    labels = set(frame["label"])
    assert labels == {
        "sync_sgd",
        "powersgd",
        "local_sgd (tau=2)",
        "local_sgd (tau=4)",
        "local_sgd (tau=16)",
    }
    assert {"sync_sgd", "powersgd", "pseudo_sync"} == TAU_LESS


def test_status_filter(runs_root: Path) -> None:
    default = load_summaries(runs_root)
    assert set(default["summary.status"]) == {"completed", "diverged"}
    assert len(default) == len(KEPT)
    everything = load_summaries(runs_root, statuses=None)
    assert len(everything) == len(RUNS)
    assert set(everything["summary.status"]) == {"completed", "diverged", "failed", "running"}
    failed = load_runs(runs_root, statuses=("failed",))
    assert set(failed["algorithm.name"]) == {"easgd"} and len(failed) == NUM_EVALS
    assert set(load_summaries(runs_root, statuses="running")["algorithm.name"]) == {"osp"}


def test_trailing_partial_line_is_ignored_silently(frame: pd.DataFrame, runs_root: Path) -> None:
    run = frame[(frame["algorithm.name"] == "local_sgd") & (frame["tau"] == 2)]
    run = run[run["seed"] == 1]
    assert list(run["step"]) == [10, 20, 30]
    path = Path(run["run_dir"].iloc[0]) / "metrics.jsonl"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(read_metrics(path)) == NUM_EVALS


def test_torn_line_mid_file_is_skipped_with_a_warning(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1}\n{"step": 2, "te\n{"step": 3}\n')
    with pytest.warns(UserWarning, match=":2:"):
        assert [r["step"] for r in read_metrics(path)] == [1, 3]


def test_run_without_metrics_gives_one_row_with_nan_metrics(tmp_path: Path) -> None:
    run = write_run(tmp_path / "r", "local_sgd", 2, 0, 0.5, num_evals=0)
    (run / "metrics.jsonl").unlink()
    write_run(tmp_path / "s", "local_sgd", 2, 1, 0.6)
    frame = load_runs(tmp_path)
    empty = frame[frame["run_dir"] == str(run)]
    assert len(empty) == 1 and math.isnan(empty["test/acc"].iloc[0])
    assert empty["summary.final/test_acc"].iloc[0] == 0.5
    assert len(frame) == 1 + NUM_EVALS


def test_empty_root_gives_an_empty_frame(tmp_path: Path) -> None:
    for loaded in (load_runs(tmp_path), load_summaries(tmp_path)):
        assert loaded.empty and "run_dir" in loaded.columns


def test_hydra_config_fallback_keeps_unresolvable_interpolations(tmp_path: Path) -> None:
    run = write_run(tmp_path / "r", "osp", 4, 3, 0.7)
    (run / "config.yaml").unlink()
    hydra = yaml.safe_load((run / ".hydra" / "config.yaml").read_text())
    hydra["run_tag"] = "${algorithm.name}-${tau}"
    (run / ".hydra" / "config.yaml").write_text(yaml.safe_dump(hydra))
    row = load_summaries(tmp_path).iloc[0]
    assert row["algorithm.name"] == "osp" and row["tau"] == 4 and row["seed"] == 3
    assert row["run_tag"] == "osp-4"
    assert row["experiment_name"] == "${oc.env:NO_SUCH_VAR_FOR_TEST}"
    assert row["label"] == "osp (tau=4)"


# --- tables -----------------------------------------------------------------------------------


def expected_rows() -> dict[tuple[str, object], tuple[list[float], int]]:
    """(algorithm, tau) -> (final accuracies of the completed runs, number of diverged runs)."""
    rows: dict[tuple[str, object], tuple[list[float], int]] = {}
    for algorithm, tau, _, final, status in KEPT:
        values, diverged = rows.get((algorithm, "-" if algorithm in TAU_LESS else tau), ([], 0))
        if status == "diverged":
            diverged += 1
        else:
            values = [*values, final]
        rows[(algorithm, "-" if algorithm in TAU_LESS else tau)] = (values, diverged)
    return rows


def test_final_accuracy_table_is_mean_std_n_over_seeds(summaries: pd.DataFrame) -> None:
    table = final_accuracy_table(summaries)
    assert list(table.columns) == ["algorithm.name", "tau", "mean", "std", "n", "diverged"]
    # Contract order of algorithms, then tau numerically; sync_sgd's two taus form one row.
    assert list(zip(table["algorithm.name"], table["tau"], strict=True)) == [
        ("sync_sgd", "-"),
        ("local_sgd", 2),
        ("local_sgd", 4),
        ("local_sgd", 16),
        ("powersgd", "-"),
    ]
    expected = expected_rows()
    for _, row in table.iterrows():
        values, diverged = expected[(row["algorithm.name"], row["tau"])]
        assert row["n"] == len(values) and row["diverged"] == diverged
        if not values:  # a diverged run's accuracy is not a result: no mean
            assert math.isnan(row["mean"]) and diverged > 0
            continue
        assert row["mean"] == pytest.approx(statistics.mean(values))
        if len(values) > 1:
            assert row["std"] == pytest.approx(statistics.stdev(values))
        else:
            assert math.isnan(row["std"])


def test_table_from_per_evaluation_frame_counts_each_run_once(frame, summaries) -> None:
    pd.testing.assert_frame_equal(final_accuracy_table(frame), final_accuracy_table(summaries))


def test_table_unknown_column_is_a_user_error(summaries: pd.DataFrame) -> None:
    with pytest.raises(UserError, match="no_such"):
        final_accuracy_table(summaries, rows=("no_such",))


def test_markdown_shows_mean_plus_minus_std(summaries: pd.DataFrame) -> None:
    markdown = to_markdown(final_accuracy_table(summaries))
    lines = markdown.splitlines()
    assert "final test acc" in lines[0] and "algorithm" in lines[0] and "tau" in lines[0]
    sync = [0.90, 0.92, 0.91]
    cell = f"{statistics.mean(sync):.3f} ± {statistics.stdev(sync):.3f}"
    assert any("sync_sgd" in line and cell in line and "| -" in line for line in lines)
    assert any("local_sgd" in line and "0.850 ± –" in line for line in lines)
    # the powersgd run diverged: the table says so instead of showing its accuracy
    assert any("powersgd" in line and "| diverged" in line and "1/1" in line for line in lines)
    assert "diverged" in lines[0]
    assert len(lines) == 2 + 5


def test_write_table_writes_markdown_and_raw_csv(tmp_path, summaries) -> None:
    table = final_accuracy_table(summaries)
    md, csv = write_table(table, tmp_path / "out", name="t1")
    assert md == tmp_path / "out" / "t1.md" and csv.name == "t1.csv"
    assert md.read_text().strip() == to_markdown(table)
    back = pd.read_csv(csv)
    assert back["mean"].tolist() == pytest.approx(table["mean"].tolist(), nan_ok=True)
    assert back["diverged"].tolist() == table["diverged"].tolist()
    assert back["n"].tolist() == table["n"].tolist()


# --- figures ----------------------------------------------------------------------------------


def assert_png_and_pdf(png: Path, pdf: Path) -> None:
    assert png.read_bytes().startswith(b"\x89PNG\r\n\x1a\n") and png.stat().st_size > 1000
    assert pdf.read_bytes().startswith(b"%PDF-") and pdf.stat().st_size > 1000


def test_accuracy_curves_write_png_and_pdf(tmp_path, frame) -> None:
    import matplotlib.pyplot as plt

    before = plt.get_fignums()
    png, pdf = accuracy_curves(frame, tmp_path / "figs")
    assert (png.name, pdf.name) == ("test_acc.png", "test_acc.pdf")
    assert_png_and_pdf(png, pdf)
    assert plt.get_fignums() == before  # nothing left open


def test_curve_colours_follow_the_fixed_algorithm_map(frame: pd.DataFrame) -> None:
    fig = curves_figure(frame)
    ax = fig.axes[0]
    texts, handles = ax.get_legend().texts, ax.get_legend().legend_handles
    legend = {t.get_text(): h for t, h in zip(texts, handles, strict=True)}
    assert set(legend) == set(frame["label"])
    for label, handle in legend.items():
        algorithm = label.split(" ")[0]
        assert mcolors.to_hex(handle.get_color()) == ALGORITHM_COLOURS[algorithm]
    # Within an algorithm the smallest tau is solid and larger taus are dashed.
    assert not legend["local_sgd (tau=2)"].is_dashed()
    assert legend["local_sgd (tau=4)"].is_dashed() and legend["local_sgd (tau=16)"].is_dashed()
    assert not legend["sync_sgd"].is_dashed()
    assert len(set(ALGORITHM_COLOURS.values())) == len(ALGORITHM_COLOURS) == 10
    assert algorithm_colour("my_new_method") == algorithm_colour("my_new_method")


def test_seeds_without_a_shared_x_are_drawn_per_run(frame: pd.DataFrame) -> None:
    by_epoch = curves_figure(frame, x="epoch").axes[0]
    by_time = curves_figure(frame, x="time/train_s").axes[0]
    num_labels, num_runs = frame["label"].nunique(), frame["run_dir"].nunique()
    assert len([line for line in by_epoch.lines if len(line.get_xdata())]) == num_labels
    assert len([line for line in by_time.lines if len(line.get_xdata())]) == num_runs


def test_curves_without_evaluations_are_a_user_error(summaries: pd.DataFrame) -> None:
    with pytest.raises(UserError):
        curves_figure(summaries)


# --- report -----------------------------------------------------------------------------------


def test_report_writes_table_and_figure(tmp_path, runs_root) -> None:
    result = report([runs_root], tmp_path / "out", name="table1")
    assert result["num_runs"] == len(KEPT)
    assert result["table_md"].read_text().strip() == result["markdown"]
    assert result["table_csv"].name == "table1.csv"
    assert_png_and_pdf(result["figure_png"], result["figure_pdf"])


def test_cli_prints_table_then_figure_paths(tmp_path, runs_root, capsys) -> None:
    out = tmp_path / "out"
    assert main([str(runs_root), "--out", str(out)]) == 0
    stdout = capsys.readouterr().out
    table = (out / "table.md").read_text().strip()
    assert stdout.startswith(table)
    assert stdout.rstrip().splitlines()[-2:] == [
        str(out / "test_acc.png"),
        str(out / "test_acc.pdf"),
    ]


def test_cli_on_an_empty_root_exits_2_with_one_line(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    done = subprocess.run(
        [sys.executable, "-m", "analysis.report", str(tmp_path / "empty"), "--out", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.startswith("error: no runs") and len(done.stderr.splitlines()) == 1
    assert not (tmp_path / "table.md").exists()


def test_report_on_only_unfinished_runs_says_so(tmp_path: Path) -> None:
    write_run(tmp_path / "r", "osp", 2, 0, 0.6, status="running")
    with pytest.raises(UserError, match="none of the 1 runs"):
        report([tmp_path], tmp_path / "out")
