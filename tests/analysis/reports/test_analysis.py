"""analysis/: run dirs -> frame -> table, figure and report, on small fake run dirs."""

from __future__ import annotations

import itertools
import json
import math
import statistics
import warnings
from pathlib import Path

import matplotlib.colors as mcolors
import pandas as pd
import pytest
import seaborn as sns
import yaml

from analysis.reports.figures import (
    ALGORITHM_COLOURS,
    accuracy_curves,
    algorithm_colour,
    breakdown_figure,
    clock_of,
    curves_figure,
    facets,
    time_breakdown,
    time_curves,
    time_figure,
    time_per_epoch,
)
from analysis.reports.report import main, report
from analysis.reports.tables import TAU_LESS, final_accuracy_table, to_markdown, write_table
from analysis.runs.compare import run_labels, split_rows
from analysis.runs.load import ALGORITHMS, find_runs, load_runs, load_summaries, read_metrics
from experiments.errors import UserError
from tests.cli import module_here
from tests.fixtures.make_fixtures import set_dotted
from tests.report_files import FIGURE_FILES

REPO = Path(__file__).resolve().parents[3]
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
NETWORK = "ethernet40g"


def ledger_per_epoch(algorithm: str, tau: int, seed: int) -> dict[str, float]:
    """The fake time ledger's growth per epoch: seeds differ a little in compute and exposed
    communication, periodic methods expose 1/tau of sync_sgd's communication."""
    compute = 0.8 + 0.01 * seed
    exposed = (0.3 if algorithm in TAU_LESS else 0.3 / tau) + 0.005 * seed
    data, other = 0.05, 0.02
    return {
        "time/train_s": compute + exposed + data + other,
        "time/compute_s": compute,
        "time/comm_exposed_s": exposed,
        "time/comm_hidden_s": 0.1,
        "time/data_s": data,
        "time/eval_s": 0.2,
        "comm/bytes": 1000 if algorithm in TAU_LESS else 1000 // tau,
        "comm/collectives": 10 if algorithm in TAU_LESS else 10 // tau,
    }


def make_config(
    algorithm: str, tau: int, seed: int, timing: str = "virtual", **overrides: object
) -> dict:
    """A resolved config; `overrides` set dotted keys (`algorithm__rank=4`, `scale__name=x`)."""
    config = {
        "algorithm": {"name": algorithm, "alpha": 0.5},
        "tau": tau,
        "seed": seed,
        "workers": 4,
        "epochs": NUM_EVALS,
        "dataset": {"name": "digits", "root": "data"},
        "model": {"name": "resnet18", "width": 8},
        "partition": {"name": "iid"},
        "network": {"name": NETWORK, "bandwidth_gbps": 40.0, "latency_s": 1e-5},
        "timing": timing,
        "experiment_name": "demo",
        "scale": {"name": "cpu"},
        "lr": 0.1,
        "milestones": [1, 2],
    }
    return set_dotted(config, overrides)


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
    ledger: bool = True,
    **config_overrides: object,
) -> Path:
    """A run dir in the training code's format: config.yaml, .hydra/, metrics.jsonl, summary.

    The metric rows carry the cumulative time ledger of timing.md (`ledger_per_epoch` times the
    epoch) and the summary its final values; `ledger=False` writes a run from before the ledger.
    """
    run_dir.mkdir(parents=True)
    config = make_config(algorithm, tau, seed, **config_overrides)
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config))
    (run_dir / ".hydra").mkdir()
    hydra_config = {**config, "experiment_name": "${oc.env:NO_SUCH_VAR_FOR_TEST}"}
    (run_dir / ".hydra" / "config.yaml").write_text(yaml.safe_dump(hydra_config))
    lines = []
    per_epoch = ledger_per_epoch(algorithm, tau, seed)
    cumulative: dict[str, float] = {}
    for e in range(num_evals):
        cumulative = {key: value * (e + 1) for key, value in per_epoch.items()}
        cumulative["comm/ratio"] = cumulative["time/comm_exposed_s"] / cumulative["time/compute_s"]
        record = {
            "step": 10 * (e + 1),
            "epoch": e + 1,
            "train/loss": 2.0 / (e + 1),
            "test/loss": 2.1 / (e + 1),
            "test/acc": acc_at(final, e),
            "test/acc_local": acc_at(final, e) - 0.01,
            "lr": 0.1 / (e + 1),
            "comm/wait_s": 0.01,
        }
        if ledger:
            record.update(cumulative)
        else:
            record["comm/bytes"] = 1000 * (e + 1)
        lines.append(json.dumps(record) + "\n")
    (run_dir / "metrics.jsonl").write_text("".join(lines) + trailing)
    summary = {
        "status": status,
        "final/test_acc": final,
        "best/test_acc": final,
        "final/train_loss": 2.0 / max(num_evals, 1),
        "steps": 10 * num_evals,
        "time/train_s": cumulative.get("time/train_s", 0.0),
        "comm/bytes": cumulative.get("comm/bytes", 0),
        "world_size": 4,
        "git_sha": "abc123",
        "torch_version": "2.4.0",
        "data_card": {"worker_0": [10, 12, 9], "worker_1": [11, 10, 10]},
    }
    if ledger:
        summary.update({k: v for k, v in cumulative.items() if k.startswith(("time/", "comm/"))})
    else:
        summary["time/train_s"] = float(num_evals)
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


RATIO, TRAIN = "summary.comm/ratio", "summary.time/train_s"


def test_table_extra_columns_are_means_over_the_counted_runs(summaries: pd.DataFrame) -> None:
    table = final_accuracy_table(summaries, extra=(RATIO, TRAIN))
    assert list(table.columns) == ["algorithm.name", "tau", "mean", "std", "n", "diverged", RATIO,
                                   TRAIN]  # fmt: skip
    # by hand from the fake ledger: exposed / compute of each completed seed, then the mean
    local2 = [ledger_per_epoch("local_sgd", 2, seed) for seed in (0, 1, 2)]
    ratios = [r["time/comm_exposed_s"] / r["time/compute_s"] for r in local2]
    row = table[(table["algorithm.name"] == "local_sgd") & (table["tau"] == 2)].iloc[0]
    assert row[RATIO] == pytest.approx(statistics.mean(ratios))
    assert row[TRAIN] == pytest.approx(
        statistics.mean(NUM_EVALS * r["time/train_s"] for r in local2)
    )
    # the diverged powersgd run stopped early: like its accuracy, its times are not averaged
    assert math.isnan(table.loc[table["algorithm.name"] == "powersgd", RATIO].iloc[0])
    markdown = to_markdown(table).splitlines()
    assert "| comm/compute" in markdown[0] and "| train time (s)" in markdown[0]
    assert markdown[0].index("final test acc") < markdown[0].index("comm/compute")
    local2_line = next(line for line in markdown if "local_sgd" in line and "| 2 " in line)
    assert f"| {100 * statistics.mean(ratios):.1f}%" in local2_line
    assert "| 19.1%" in local2_line  # 0.3/2 exposed per 0.8 compute, seeds a little apart
    assert "| 9.4%" in next(line for line in markdown if "local_sgd" in line and "| 4 " in line)
    # the default table is unchanged
    assert to_markdown(final_accuracy_table(summaries)).count("%") == 0


def test_table_unknown_extra_column_is_a_user_error(summaries: pd.DataFrame) -> None:
    with pytest.raises(UserError, match="no_such"):
        final_accuracy_table(summaries, extra=("summary.no_such",))


# --- figures ----------------------------------------------------------------------------------

# The fixture runs' layout: local_sgd at taus 2, 4 and 16 gives one panel per tau; sync_sgd and
# powersgd, which do not use tau, are drawn in every panel.
PANELS = ["tau=2", "tau=4", "tau=16"]
SERIES = ["sync_sgd", "local_sgd", "powersgd"]


def assert_png_and_pdf(png: Path, pdf: Path) -> None:
    assert png.read_bytes().startswith(b"\x89PNG\r\n\x1a\n") and png.stat().st_size > 1000
    assert pdf.read_bytes().startswith(b"%PDF-") and pdf.stat().st_size > 1000


def panels(fig) -> list:
    return [ax for ax in fig.axes if ax.get_visible()]


def legend_entries(fig) -> dict[str, object]:
    (legend,) = fig.legends
    return {t.get_text(): h for t, h in zip(legend.texts, legend.legend_handles, strict=True)}


def assert_print_legible(fig, width_in: float = 3.5) -> None:
    """One column of a paper wide, every visible text at least 7 pt."""
    from matplotlib.text import Text

    assert fig.get_figwidth() == pytest.approx(width_in)
    texts = [t for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()]
    assert texts and min(t.get_fontsize() for t in texts) >= 7


def test_accuracy_curves_write_png_and_pdf(tmp_path, frame) -> None:
    import matplotlib.pyplot as plt

    before = plt.get_fignums()
    png, pdf = accuracy_curves(frame, tmp_path / "figs")
    assert (png.name, pdf.name) == ("test_acc.png", "test_acc.pdf")
    assert_png_and_pdf(png, pdf)
    assert plt.get_fignums() == before  # nothing left open


def test_curves_are_small_multiples_one_panel_per_tau(frame: pd.DataFrame) -> None:
    fig = curves_figure(frame)
    axes = panels(fig)
    assert [ax.get_title() for ax in axes] == PANELS
    assert len(fig.axes) == 4  # a 2 x 2 grid, its fourth cell hidden
    assert all(ax.get_shared_y_axes().joined(axes[0], ax) for ax in axes)
    assert all(ax.get_shared_x_axes().joined(axes[0], ax) for ax in axes)
    for ax in axes:
        gids = {line.get_gid() for line in ax.lines}
        assert {"mean:sync_sgd", "mean:local_sgd", "mean:powersgd"} == gids, ax.get_title()
    assert_print_legible(fig)
    # the legend sits below the panels, not on them
    (legend,) = fig.legends
    fig.draw_without_rendering()
    assert legend.get_window_extent().y1 < min(ax.get_window_extent().y0 for ax in axes)


def test_curves_show_the_mean_and_a_band_of_one_sd_labelled_with_n(frame: pd.DataFrame) -> None:
    fig = curves_figure(frame)
    (legend,) = fig.legends
    assert legend.get_title().get_text() == (
        "mean over seeds, band ±1 sd (n = 1–3 seeds per line; no band at n = 1)"
    )
    tau2 = panels(fig)[0]
    (mean,) = [line for line in tau2.lines if line.get_gid() == "mean:local_sgd"]
    finals = [f for a, t, _, f, s in KEPT if (a, t) == ("local_sgd", 2)]
    by_epoch = [[acc_at(f, e) for f in finals] for e in range(NUM_EVALS)]
    assert list(mean.get_ydata()) == pytest.approx([statistics.mean(v) for v in by_epoch])
    # the band: mean +- sample sd at each epoch (local_sgd's is the one with its colour)
    colour = mcolors.to_rgba(ALGORITHM_COLOURS["local_sgd"], 0.15)
    (band,) = [c for c in tau2.collections if tuple(c.get_facecolor()[0]) == pytest.approx(colour)]
    ys = band.get_paths()[0].vertices[:, 1]
    assert ys.max() == pytest.approx(statistics.mean(by_epoch[-1]) + statistics.stdev(by_epoch[-1]))
    assert ys.min() == pytest.approx(statistics.mean(by_epoch[0]) - statistics.stdev(by_epoch[0]))
    # powersgd has one run: a line, no band
    powersgd = mcolors.to_rgba(ALGORITHM_COLOURS["powersgd"], 0.15)
    assert not [
        c for c in tau2.collections if tuple(c.get_facecolor()[0]) == pytest.approx(powersgd)
    ]


def test_curve_colours_follow_the_fixed_colour_blind_safe_map(frame: pd.DataFrame) -> None:
    legend = legend_entries(curves_figure(frame))
    assert list(legend) == SERIES
    for label, handle in legend.items():
        assert mcolors.to_hex(handle.get_color()) == ALGORITHM_COLOURS[label]
        assert not handle.is_dashed()  # one setting per algorithm within a panel
    assert len(set(ALGORITHM_COLOURS.values())) == len(ALGORITHM_COLOURS) == 14
    assert set(ALGORITHM_COLOURS) == set(ALGORITHMS)  # every method has its fixed colour
    # seaborn's colour-blind palette, its pale yellow swapped for black, and four of Paul Tol's
    # colour-blind-safe "muted" scheme for the outer-optimizer family
    colorblind = {mcolors.to_hex(c) for c in sns.color_palette("colorblind")}
    tol_muted = {"#cc6677", "#999933", "#332288", "#882255"}
    assert set(ALGORITHM_COLOURS.values()) == (colorblind - {"#ece133"}) | {"#000000"} | tol_muted
    # no two as close as the closest pair of the original ten (CIE76 distance in Lab)
    lab = {name: _lab(colour) for name, colour in ALGORITHM_COLOURS.items()}
    assert min(math.dist(lab[a], lab[b]) for a, b in itertools.combinations(lab, 2)) > 20
    assert algorithm_colour("my_new_method") == algorithm_colour("my_new_method")


def _lab(colour: str) -> tuple[float, float, float]:
    """sRGB hex -> CIE L*a*b* (D65), the textbook formulas."""
    srgb = mcolors.to_rgb(colour)
    rgb = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in srgb]
    x = (0.4124 * rgb[0] + 0.3576 * rgb[1] + 0.1805 * rgb[2]) / 0.95047
    y = 0.2126 * rgb[0] + 0.7152 * rgb[1] + 0.0722 * rgb[2]
    z = (0.0193 * rgb[0] + 0.1192 * rgb[1] + 0.9505 * rgb[2]) / 1.08883
    fx, fy, fz = (t ** (1 / 3) if t > 0.008856 else 7.787 * t + 16 / 116 for t in (x, y, z))
    return 116 * fy - 16, 500 * (fx - fy), 200 * (fy - fz)


def test_powersgd_ranks_are_separate_series_in_table_and_figure(tmp_path: Path) -> None:
    """Issue 12, item 3: figures merged PowerSGD ranks 1/2/4/8 into one series while the table
    kept them apart."""
    for seed in (0, 1):
        for rank in (1, 4):
            write_run(
                tmp_path / "runs" / f"{rank}-{seed}", "powersgd", 1, seed, 0.8 + rank / 100,
                algorithm__rank=rank,
            )  # fmt: skip
        write_run(tmp_path / "runs" / f"sync-{seed}", "sync_sgd", 1, seed, 0.9)
    result = report([tmp_path / "runs"], tmp_path / "out")
    table = result["table"]
    assert list(table.columns[:3]) == ["algorithm.name", "tau", "algorithm.rank"]
    assert table["n"].tolist() == [2, 2, 2]
    frame = load_runs(tmp_path / "runs")
    for fig in (curves_figure(frame), time_figure(frame)):
        legend = legend_entries(fig)
        assert list(legend) == ["sync_sgd", "powersgd (rank=1)", "powersgd (rank=4)"]
        assert not legend["powersgd (rank=1)"].is_dashed()
        assert legend["powersgd (rank=4)"].is_dashed()
    bars = breakdown_figure(frame).axes[0]
    assert [t.get_text() for t in bars.get_yticklabels()] == list(legend)
    # the table's rows say the same
    assert [line.split("|")[1:4] for line in result["markdown"].splitlines()[2:5]] == [
        [" sync_sgd    ", " -     ", " -      "],
        [" powersgd    ", " -     ", " 1      "],
        [" powersgd    ", " -     ", " 4      "],
    ]


def test_seeds_without_a_shared_x_are_drawn_per_run(frame: pd.DataFrame) -> None:
    by_epoch = curves_figure(frame, x="epoch")
    by_time = curves_figure(frame, x="time/train_s")
    for ax, tau in zip(panels(by_time), (2, 4, 16), strict=True):
        here = frame[(frame["tau"] == tau) | frame["algorithm.name"].isin(TAU_LESS)]
        assert len(ax.lines) == here["run_dir"].nunique(), tau
        assert len(panels(by_epoch)[0].lines) == len(SERIES)


def test_curves_without_evaluations_are_a_user_error(summaries: pd.DataFrame) -> None:
    with pytest.raises(UserError):
        curves_figure(summaries)


def test_layout_panels_by_tau_then_by_setting() -> None:
    runs = pd.DataFrame(
        {
            "run_dir": list("abcdef"),
            "algorithm.name": ["osp", "osp", "losp", "losp", "sync_sgd", "powersgd"],
            "tau": [1, 2, 1, 2, 1, 1],
            "compute.slowdown": ["one_slow", "lognormal"] * 3,
            "algorithm.rank": [None, None, None, None, None, 2],
        }
    )
    layout = facets(runs, ["algorithm.name", "tau", "compute.slowdown", "algorithm.rank"])
    assert (layout.col, layout.row, layout.series) == ("tau", "compute.slowdown", ())
    assert layout.fixed == ("algorithm.rank",)
    no_tau = facets(runs.assign(tau=2), ["algorithm.name", "tau", "compute.slowdown"])
    assert (no_tau.col, no_tau.row, no_tau.fixed) == ("compute.slowdown", None, ("tau",))


# --- time figures -----------------------------------------------------------------------------

LABEL_ORDER = ["sync_sgd", "local_sgd (tau=2)", "local_sgd (tau=4)", "local_sgd (tau=16)",
               "powersgd"]  # fmt: skip


def last_rows(frame: pd.DataFrame) -> dict[str, list[dict]]:
    """Each run's last metrics.jsonl line, read from disk, grouped by the run's label."""
    rows: dict[str, list[dict]] = {}
    for run_dir, label in frame.drop_duplicates("run_dir")[["run_dir", "label"]].to_numpy():
        rows.setdefault(label, []).append(read_metrics(Path(run_dir) / "metrics.jsonl")[-1])
    return rows


def by_hand(rows: list[dict]) -> dict[str, float]:
    """Per-epoch compute, exposed comm, data and clipped other, mean over the runs."""

    def mean(f) -> float:
        return statistics.mean(f(r) / r["epoch"] for r in rows)

    parts = ("time/compute_s", "time/comm_exposed_s", "time/data_s")
    return {
        "compute": mean(lambda r: r["time/compute_s"]),
        "exposed communication": mean(lambda r: r["time/comm_exposed_s"]),
        "data loading": mean(lambda r: r["time/data_s"]),
        "other": mean(lambda r: max(r["time/train_s"] - sum(r[p] for p in parts), 0.0)),
        "ratio": statistics.mean(r["comm/ratio"] for r in rows),
    }


@pytest.fixture(scope="module")
def time_fig(frame: pd.DataFrame):
    return time_figure(frame)


@pytest.fixture(scope="module")
def breakdown(frame: pd.DataFrame):
    return breakdown_figure(frame)


def test_time_figures_write_png_and_pdf(tmp_path, frame) -> None:
    import matplotlib.pyplot as plt

    before = plt.get_fignums()
    png, pdf = time_curves(frame, tmp_path / "figs")
    assert (png.name, pdf.name) == ("time.png", "time.pdf")
    assert_png_and_pdf(png, pdf)
    png, pdf = time_breakdown(frame, tmp_path / "figs")
    assert (png.name, pdf.name) == ("time_breakdown.png", "time_breakdown.pdf")
    assert_png_and_pdf(png, pdf)
    assert plt.get_fignums() == before  # nothing left open


def test_time_figure_is_a_panel_per_tau_and_metric(time_fig) -> None:
    axes = time_fig.axes
    assert len(axes) == 3 * 2
    assert [ax.get_title() for ax in axes[:2]] == ["test accuracy", "training loss"]
    assert [ax.get_ylabel() for ax in axes[::2]] == PANELS
    assert_print_legible(time_fig)


def test_time_axis_names_the_clock(frame, time_fig, capsys) -> None:
    assert [ax.get_xlabel() for ax in time_fig.axes[-2:]] == ["training time, virtual (s)"] * 2
    real = frame.assign(timing="real")
    assert time_figure(real, y="test/acc").axes[-1].get_xlabel() == "training time, wall-clock (s)"
    assert capsys.readouterr().err == ""
    mixed = frame.assign(timing=["real" if a == "sync_sgd" else "virtual" for a in frame["label"]])
    fig = time_figure(mixed, y="test/acc")
    assert fig.axes[-1].get_xlabel() == "training time (s; mixed clocks)"
    err = capsys.readouterr().err
    assert err.startswith("warning:") and len(err.splitlines()) == 1
    # a run without `timing` predates the virtual clock: wall-clock
    assert clock_of(frame.drop(columns="timing")) == "real"
    assert clock_of(mixed) == "mixed" and clock_of(frame) == "virtual"


def test_time_figure_draws_each_run_and_an_epoch_aligned_mean(frame, time_fig) -> None:
    tau2 = time_fig.axes[:2]  # accuracy and loss at tau=2: sync_sgd, local_sgd, powersgd
    runs_here = frame[(frame["tau"] == 2) | frame["algorithm.name"].isin(TAU_LESS)]
    for ax in tau2:
        gids = [line.get_gid() for line in ax.lines]
        assert sum(g.startswith("run:") for g in gids) == runs_here["run_dir"].nunique()
        # a mean line only where a series has several seeds
        assert sorted(g for g in gids if g.startswith("mean:")) == [
            "mean:local_sgd",
            "mean:sync_sgd",
        ]
    assert list(legend_entries(time_fig)) == SERIES
    # The mean joins, per epoch, the seeds' mean training time to their mean accuracy.
    (mean,) = [line for line in tau2[0].lines if line.get_gid() == "mean:sync_sgd"]
    seeds = [(1, 0, 0.90), (1, 1, 0.92), (4, 2, 0.91)]
    per_epoch = [ledger_per_epoch("sync_sgd", t, s)["time/train_s"] for t, s, _ in seeds]
    times = [statistics.mean(k * t for t in per_epoch) for k in range(1, NUM_EVALS + 1)]
    accs = [statistics.mean(acc_at(f, e) for _, _, f in seeds) for e in range(NUM_EVALS)]
    assert list(mean.get_xdata()) == pytest.approx(times)
    assert list(mean.get_ydata()) == pytest.approx(accs)
    assert mean.get_color() == ALGORITHM_COLOURS["sync_sgd"]


def test_breakdown_bars_are_per_epoch_means_of_the_last_rows(frame, breakdown) -> None:
    axes = breakdown.axes
    assert [ax.get_title() for ax in axes] == PANELS
    for ax in axes:
        assert [t.get_text() for t in ax.get_yticklabels()] == SERIES
    table = time_per_epoch(frame)
    assert list(table.index) == LABEL_ORDER
    assert table["runs"].tolist() == [3, 3, 1, 1, 1]
    expected = last_rows(frame)
    for ax, tau in zip(axes, (2, 4, 16), strict=True):
        bars = {c.get_label(): c.patches for c in ax.containers}
        assert list(bars) == ["compute", "exposed communication", "data loading", "other"]
        for i, label in enumerate(["sync_sgd", f"local_sgd (tau={tau})", "powersgd"]):
            hand = by_hand(expected[label])
            left = 0.0
            for part, patches in bars.items():
                assert patches[i].get_width() == pytest.approx(hand[part]), (label, part)
                assert patches[i].get_x() == pytest.approx(left)  # stacked
                left += hand[part]
    # and in plain numbers, for local_sgd tau=4 (one seed): 0.8 + 0.3/4 + 0.05 + 0.02 per epoch
    bars = {c.get_label(): c.patches for c in axes[1].containers}
    assert [bars[part][1].get_width() for part in bars] == pytest.approx([0.8, 0.075, 0.05, 0.02])
    assert_print_legible(breakdown)


def test_breakdown_annotates_the_comm_compute_ratio(frame, breakdown) -> None:
    ax = breakdown.axes[1]  # tau=4
    expected = last_rows(frame)
    texts = [t.get_text() for t in ax.texts]
    labels = ["sync_sgd", "local_sgd (tau=4)", "powersgd"]
    assert texts == [f"{100 * by_hand(expected[label])['ratio']:.1f}%" for label in labels]
    assert texts[:2] == ["37.7%", "9.4%"]
    assert f"network {NETWORK}" in breakdown.get_suptitle()
    assert breakdown.axes[-1].get_xlabel() == "training time per epoch, virtual (s)"
    # A colour per algorithm on the axis, as in the curves.
    colours = [mcolors.to_hex(t.get_color()) for t in ax.get_yticklabels()]
    assert colours[0] == ALGORITHM_COLOURS["sync_sgd"]
    assert colours[-1] == ALGORITHM_COLOURS["powersgd"]


def test_breakdown_title_names_no_network_when_runs_differ(frame) -> None:
    networks = ["wan" if label == "sync_sgd" else NETWORK for label in frame["label"]]
    fig = breakdown_figure(frame.assign(**{"network.name": networks}))
    assert "network" not in fig.get_suptitle()


def test_breakdown_takes_the_last_epoch_and_clips_other_at_zero() -> None:
    # Run a's parts add up to more than its training time (a real clock's jitter): other = 0.
    # Its last evaluation comes first in the frame; the largest epoch is what counts.
    frame = pd.DataFrame(
        {
            "run_dir": ["a", "a", "b", "b"],
            "algorithm.name": ["local_sgd"] * 4,
            "tau": [2] * 4,
            "epoch": [2, 1, 1, 2],
            "time/train_s": [2.0, 1.0, 1.5, 3.0],
            "time/compute_s": [1.5, 0.75, 1.0, 2.0],
            "time/comm_exposed_s": [0.6, 0.3, 0.2, 0.4],
        }
    )
    table = time_per_epoch(frame, rows=["algorithm.name", "tau"])
    assert list(table.index) == ["local_sgd"] and "data_s" not in table.columns
    row = table.iloc[0]
    assert row["compute_s"] == pytest.approx((0.75 + 1.0) / 2)
    assert row["comm_exposed_s"] == pytest.approx((0.3 + 0.2) / 2)
    assert row["other_s"] == pytest.approx((0.0 + 0.3) / 2)
    # no comm/ratio logged: exposed / compute of each run
    assert row["comm_ratio"] == pytest.approx((0.6 / 1.5 + 0.4 / 2.0) / 2)
    fig = breakdown_figure(frame)
    ax = fig.axes[0]
    assert [c.get_label() for c in ax.containers] == [
        "compute",
        "exposed communication",
        "other (incl. data loading)",
    ]
    assert [t.get_text() for t in ax.texts] == ["30.0%"]
    # wall-clock: no `timing` key; the one tau is said in the title
    assert ax.get_xlabel() == "training time per epoch, wall-clock (s)"
    assert fig.get_suptitle() == "tau=2"


def test_breakdown_without_the_ledger_is_a_user_error(frame: pd.DataFrame) -> None:
    with pytest.raises(UserError, match="time/compute_s"):
        time_per_epoch(frame.drop(columns="time/compute_s"))
    with pytest.raises(UserError, match="time/train_s"):
        time_figure(frame.drop(columns="time/train_s"))


# --- report -----------------------------------------------------------------------------------


def test_report_writes_table_and_figure(tmp_path, runs_root) -> None:
    result = report([runs_root], tmp_path / "out", name="table1")
    assert result["num_runs"] == len(KEPT)
    assert result["table_md"].read_text().strip() == result["markdown"]
    assert result["table_csv"].name == "table1.csv"
    assert_png_and_pdf(result["figure_png"], result["figure_pdf"])
    assert_png_and_pdf(result["time_png"], result["time_pdf"])
    assert_png_and_pdf(result["breakdown_png"], result["breakdown_pdf"])
    assert result["time_png"] == tmp_path / "out" / "time.png"
    assert result["breakdown_pdf"] == tmp_path / "out" / "time_breakdown.pdf"
    # The summaries carry the ledger: the table shows the ratio and the training time.
    header = result["markdown"].splitlines()[0]
    assert "comm/compute" in header and "train time (s)" in header
    assert "| 37.7%" in result["markdown"]
    assert list(pd.read_csv(result["table_csv"]).columns[-2:]) == [RATIO, TRAIN]


def test_report_on_runs_without_the_ledger_skips_the_time_figures(tmp_path, capsys) -> None:
    for seed in (0, 1):
        write_run(tmp_path / "runs" / str(seed), "local_sgd", 2, seed, 0.8, ledger=False)
    result = report([tmp_path / "runs"], tmp_path / "out")
    assert_png_and_pdf(result["figure_png"], result["figure_pdf"])
    assert all(
        result[k] is None for k in ("time_png", "time_pdf", "breakdown_png", "breakdown_pdf")
    )
    assert not (tmp_path / "out" / "time.png").exists()
    err = capsys.readouterr().err
    assert err.startswith("note: no time/train_s") and len(err.splitlines()) == 1
    # no ratio in the summaries, no ratio column; the training time is there
    header = result["markdown"].splitlines()[0]
    assert "comm/compute" not in header and "%" not in result["markdown"]
    assert "train time (s)" in header


def test_report_with_time_but_no_breakdown_ledger_draws_the_time_figure(tmp_path, capsys) -> None:
    for seed in (0, 1):
        run = write_run(tmp_path / "runs" / str(seed), "local_sgd", 2, seed, 0.8)
        rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        for row in rows:
            del row["time/compute_s"]
        (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = report([tmp_path / "runs"], tmp_path / "out")
    assert_png_and_pdf(result["time_png"], result["time_pdf"])
    assert result["breakdown_png"] is None and result["breakdown_pdf"] is None
    assert capsys.readouterr().err.startswith("note: no time/compute_s")


def test_cli_prints_table_then_figure_paths(tmp_path, runs_root, capsys) -> None:
    out = tmp_path / "out"
    assert main([str(runs_root), "--out", str(out)]) == 0
    stdout = capsys.readouterr().out
    table = (out / "table.md").read_text().strip()
    assert stdout.startswith(table)
    assert stdout.rstrip().splitlines()[-6:] == [str(out / name) for name in FIGURE_FILES]


def test_cli_on_an_empty_root_exits_2_with_one_line(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    out = tmp_path / "rep"  # (--out holding the runs root is refused: test_catalogue's reports)
    done = module_here("analysis.reports.report", str(tmp_path / "empty"), "--out", str(out))
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.startswith("error: no runs") and len(done.stderr.splitlines()) == 1
    assert not out.exists()


def test_report_on_only_unfinished_runs_says_so(tmp_path: Path) -> None:
    write_run(tmp_path / "r", "osp", 2, 0, 0.6, status="running")
    with pytest.raises(UserError, match="none of the 1 runs"):
        report([tmp_path], tmp_path / "out")


# --- like with like -----------------------------------------------------------------------------


def test_report_never_pools_runs_that_differ_beyond_the_seed(tmp_path: Path, capsys) -> None:
    """Issue 12, item 3: `python -m analysis.reports.report A/runs B/runs` over a smoke root and a
    cpu root printed `sync_sgd 0.723 ± 0.363, n=2`, a tiny CNN averaged with a ResNet-18."""
    smoke = {"scale__name": "smoke", "model__name": "tiny_cnn", "workers": 2}
    for seed in (0, 1):
        write_run(tmp_path / "A" / "runs" / str(seed), "sync_sgd", 1, seed, 0.47, **smoke)
        write_run(tmp_path / "B" / "runs" / str(seed), "sync_sgd", 1, seed, 0.98 - seed / 100)
    out = tmp_path / "out"
    assert (
        main([str(tmp_path / "A" / "runs"), str(tmp_path / "B" / "runs"), "--out", str(out)]) == 0
    )
    stdout = capsys.readouterr().out
    table = pd.read_csv(out / "table.csv")
    assert table[["scale.name", "n"]].values.tolist() == [["cpu", 2], ["smoke", 2]]
    assert table["mean"].tolist() == pytest.approx([0.975, 0.47])
    lines = stdout.splitlines()
    assert lines[0].split("|")[1:5] == [
        " algorithm   ",
        " tau   ",
        " scale   ",
        " final test acc   ",
    ]
    assert lines[2].startswith("| sync_sgd    | -     | cpu     | 0.975 ± 0.007")
    assert lines[3].startswith("| sync_sgd    | -     | smoke   | 0.470 ± 0.000")
    assert lines[5] == (
        "note: runs also differ in scale.name, model.name, workers: rows split by scale.name as "
        "well (never pooled)"
    )
    # the figures split them the same way: a panel per scale
    frame = load_runs(tmp_path / "A" / "runs", tmp_path / "B" / "runs")
    fig = curves_figure(frame)
    assert [ax.get_title() for ax in panels(fig)] == ["scale=cpu", "scale=smoke"]


def test_tau_less_methods_still_pool_over_tau(tmp_path: Path) -> None:
    for seed, tau in ((0, 1), (1, 4)):
        write_run(tmp_path / str(seed), "sync_sgd", tau, seed, 0.9)
    split = split_rows(load_summaries(tmp_path))
    assert (split.rows, split.added, split.differing) == (["algorithm.name", "tau"], [], [])
    assert report([tmp_path], tmp_path / "out")["table"]["n"].tolist() == [2]


def test_keys_that_are_not_part_of_a_runs_identity_do_not_split(tmp_path: Path) -> None:
    for seed, root in ((0, "/data/a"), (1, "/data/b")):
        write_run(
            tmp_path / str(seed), "local_sgd", 2, seed, 0.9, dataset__root=root, out_root=root
        )
    assert split_rows(load_summaries(tmp_path)).differing == []


def test_split_adds_the_fewest_keys_in_priority_order() -> None:
    runs = pd.DataFrame(
        {
            "run_dir": list("abcdef"),
            "algorithm.name": ["powersgd"] * 4 + ["local_sgd"] * 2,
            "tau": [1, 1, 1, 1, 2, 2],
            "seed": [0, 1, 0, 1, 0, 1],
            "algorithm.rank": [1, 1, 4, 4, None, None],
            "algorithm.alpha": [None] * 4 + [0.5, 0.5],  # an algorithm's own knob: no news
            "network.name": ["wan", "wan", "wan", "wan", "ideal", "wan"],
            "network.bandwidth_gbps": [0.1, 0.1, 0.1, 0.1, 100.0, 0.1],  # fixed by the name
        }
    )
    split = split_rows(runs)
    assert split.added == ["algorithm.rank", "network.name"]
    assert split.differing == ["algorithm.rank", "network.name", "network.bandwidth_gbps"]
    assert run_labels(runs, split.rows).tolist() == [
        "powersgd (rank=1, network=wan)",
        "powersgd (rank=1, network=wan)",
        "powersgd (rank=4, network=wan)",
        "powersgd (rank=4, network=wan)",
        "local_sgd (tau=2, network=ideal)",
        "local_sgd (tau=2, network=wan)",
    ]
