"""The comparison an ad-hoc sweep ends with (analysis/reports/adhoc.py), on run directories written
the way the training code writes them (tests/fixtures/make_fixtures.py), and end to end: a
`python run.py -m` sweep over a tau-less and a round-based method runs the tau-less one once
and prints the comparison last; the grid's expansion drops the same points."""

from __future__ import annotations

import math
import statistics
from pathlib import Path

import pytest
from scipy import stats as st

from analysis.reports.adhoc import sweep_comparison
from analysis.runs.grid import expand_sweeps
from tests.cli import run_py
from tests.fixtures import make_fixtures as fx

TARGET = 0.8
COMMAND = "python -m analysis.reports.report outputs/runs --out outputs/report"
OSP = (0.90, 0.91, 0.92)  # final accuracies of seeds 0, 1, 2
LOSP = (0.88, 0.90, 0.91)


def write(root: Path, finals: dict[str, tuple[float, ...]], **config) -> list[Path]:
    """Per algorithm one run at tau 2 per seed (its final accuracies), in the training code's
    format: config.yaml, metrics.jsonl (3 evaluations: final - 0.2, final - 0.01, final, on
    the virtual clock), summary.json."""
    dirs = []
    for algorithm, accs in finals.items():
        for seed, final in enumerate(accs):
            cfg = fx.make_config(algorithm, 2, seed, experiment="default", **config)
            dirs.append(fx.write_run(root / f"{algorithm}-seed{seed}", cfg, final))
    return dirs


def table(lines: list[str]) -> dict[str, dict[str, str]]:
    """The markdown table at the top: method -> {column: cell}."""
    rows = lines[0].splitlines()
    header = [c.strip() for c in rows[0].strip("|").split("|")]
    out = {}
    for row in rows[2:]:
        cells = dict(zip(header, (c.strip() for c in row.strip("|").split("|")), strict=True))
        out[cells["method"]] = cells
    return out


def train_s_at(epoch: int) -> float:
    """The virtual clock's training time after `epoch` epochs (the fixture's ledger: 1 s of
    compute, 0.5 / tau s of exposed communication, 0.05 s of data an epoch)."""
    return epoch * (1.0 + 0.5 / 2 + 0.05)


def test_osp_and_losp_on_the_ideal_network_table_pairs_and_the_by_construction_note(
    tmp_path: Path,
) -> None:
    dirs = write(
        tmp_path, {"osp": OSP, "losp": LOSP}, network__name="ideal", compute__slowdown="none"
    )
    lines = sweep_comparison(dirs, TARGET, COMMAND)
    rows = table(lines)
    assert sorted(rows) == ["losp", "osp"]
    # every run reaches 0.8 at its second evaluation (final - 0.01)
    to = f"{train_s_at(2):.3g} s"
    for method, finals in (("osp", OSP), ("losp", LOSP)):
        row = rows[method]
        assert (row["tau"], row["n"], row["reached"]) == ("2", "3", "3/3")
        assert float(row["final acc"]) == pytest.approx(statistics.mean(finals), abs=5e-4)
        assert row[f"time to {TARGET:g}"] == to
    assert lines[1] == ""
    assert lines[2] == "pairwise, a above b (paired by seed, two-sided at 0.05):"
    pairs = [line.strip() for line in lines if line.startswith("  ")]
    accuracy = next(p for p in pairs if p.startswith("tau=2: accuracy: "))
    # losp above osp, paired by seed: d = -0.02, -0.01, -0.01
    d = [a - b for a, b in zip(LOSP, OSP, strict=True)]
    p = 2 * st.t.sf(abs(statistics.mean(d)) / (statistics.stdev(d) / math.sqrt(3)), 2)
    assert accuracy.startswith(
        "tau=2: accuracy: cannot tell: losp 0.897 vs osp 0.910 (paired, n=3): difference -0.013"
    )
    assert f"paired t p = {p:.3f}" in accuracy
    time = next(p for p in pairs if p.startswith(f"tau=2: time to {TARGET:g}: "))
    # the same time on every seed: no spread, the exact sign-flip test, which needs 6 seeds
    assert "(paired, n=3): difference +0 s" in time and "sign-flip p = 1.000" in time
    assert "(n = 6 needed" in time
    assert all("paired" in p for p in pairs) and len(pairs) == 2
    (note,) = [line for line in lines if line.startswith("note: ")]
    assert note.startswith("note: osp = losp by construction on the ideal network")
    assert "python -m experiments.sweep losp" in note
    assert lines[-1] == f"full report (tables, figures, every comparison): {COMMAND}"


def test_with_a_slow_worker_on_a_modeled_network_there_is_no_by_construction_note(
    tmp_path: Path,
) -> None:
    dirs = write(
        tmp_path,
        {"osp": OSP, "losp": LOSP},
        network__name="ethernet1g",
        compute__slowdown="one_slow",
    )
    lines = sweep_comparison(dirs, TARGET, COMMAND)
    assert sorted(table(lines)) == ["losp", "osp"]
    assert not any("by construction" in line for line in lines)
    assert lines[-1] == f"full report (tables, figures, every comparison): {COMMAND}"


def test_a_run_that_never_reached_the_target_is_counted_in_the_table(tmp_path: Path) -> None:
    # losp seed 0 ends at 0.78: its evaluations 0.58, 0.77, 0.78 never reach 0.8
    dirs = write(tmp_path, {"osp": OSP, "losp": (0.78, 0.90, 0.91)}, network__name="ideal")
    rows = table(sweep_comparison(dirs, TARGET, COMMAND))
    assert rows["losp"]["reached"] == "2/3"
    assert rows["losp"][f"time to {TARGET:g}"] == f"{train_s_at(2):.3g} s"
    never = write(tmp_path / "never", {"osp": OSP, "losp": (0.5, 0.6, 0.7)})
    rows = table(sweep_comparison(never, TARGET, COMMAND))
    assert (rows["losp"]["reached"], rows["losp"][f"time to {TARGET:g}"]) == ("0/3", "never")


def test_one_method_or_no_finished_run_is_no_comparison(tmp_path: Path) -> None:
    dirs = write(tmp_path, {"osp": OSP}, network__name="ideal")
    assert sweep_comparison(dirs, TARGET, COMMAND) == []
    assert sweep_comparison([], TARGET, COMMAND) == []
    # a directory without summary.json (a point that failed before its run) is no run
    (tmp_path / "empty").mkdir()
    assert sweep_comparison([tmp_path / "empty"], TARGET, COMMAND) == []


def test_the_grid_runs_a_tau_less_method_at_one_tau_only() -> None:
    points = expand_sweeps([{"algorithm": "sync_sgd,local_sgd", "tau": "1,2,4"}])
    assert points == [
        {"algorithm.name": "sync_sgd", "tau": 1},
        {"algorithm.name": "local_sgd", "tau": 1},
        {"algorithm.name": "local_sgd", "tau": 2},
        {"algorithm.name": "local_sgd", "tau": 4},
    ]
    # per seed, and across the sweeps of one preset; a knob it does not ignore stays apart
    points = expand_sweeps(
        [
            {"algorithm": "sync_sgd", "tau": "1,2", "seed": "0,1"},
            {"algorithm": "sync_sgd", "tau": "8", "seed": "0,1"},
            {"algorithm": "powersgd", "tau": "1,2", "+algorithm.rank": "2,4"},
        ]
    )
    assert points == [
        {"algorithm.name": "sync_sgd", "tau": 1, "seed": 0},
        {"algorithm.name": "sync_sgd", "tau": 1, "seed": 1},
        {"algorithm.name": "powersgd", "tau": 1, "algorithm.rank": 2},
        {"algorithm.name": "powersgd", "tau": 1, "algorithm.rank": 4},
    ]


@pytest.mark.e2e
def test_an_ad_hoc_sweep_runs_a_tau_less_method_once_and_ends_with_its_comparison(
    tmp_path: Path,
) -> None:
    proc = run_py(
        "-m", "algorithm=sync_sgd,local_sgd", "tau=1,2", "epochs=1", "dataset=synthetic",
        "cluster=sim", f"out_root={tmp_path}", "progress=false", "wandb.mode=disabled",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    out = proc.stdout
    assert (
        "skip algorithm=sync_sgd tau=2: sync_sgd ignores tau, the same run as "
        "algorithm=sync_sgd tau=1\n"
    ) in out
    runs = sorted(p.name for p in (tmp_path / "runs").iterdir() if not p.name.startswith("."))
    assert len(runs) == 3
    assert [name.rsplit("-", 1)[0] for name in runs] == [
        "local_sgd-tau1-seed0",
        "local_sgd-tau2-seed0",
        "sync_sgd-seed0",
    ]
    lines = out.rstrip("\n").splitlines()
    start = max(i for i, line in enumerate(lines) if line.startswith("| method"))
    rows = [line for line in lines[start + 2 :] if line.startswith("|")]
    cells = [[c.strip() for c in row.strip("|").split("|")][:3] for row in rows]
    assert cells == [["local_sgd", "1", "1"], ["local_sgd", "2", "1"], ["sync_sgd", "-", "1"]]
    assert lines[start + 2 + len(rows)] == ""  # the table is the last block but for the lines
    assert any(line.startswith("pairwise, a above b") for line in lines[start:])
    report = tmp_path / "runs"
    assert lines[-1] == (
        f"full report (tables, figures, every comparison): python -m analysis.reports.report "
        f"{report} --out {tmp_path / 'report'}"
    )
