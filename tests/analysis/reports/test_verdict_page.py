"""results/README.md (analysis/reports/verdict_page.py) from the claims.json files the reports
write, and `python -m analysis.reproduce.recompute --update`, which rewrites committed results
(their claims.json among them) from their records: the claims.json files here are written by
analysis.claims.write_claims from claims checked on small frames, never by hand."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest

from analysis.claims import CLAIMS, ClaimResult, write_claims
from analysis.reports import verdict_page
from analysis.reports.verdict_page import NOT_TESTED, main
from analysis.reproduce import recompute
from analysis.runs.records import RECORDS
from tests.analysis.claims.test_verdicts import (
    SEEDS,
    ideal_pair,
    local_taus,
    losp_osp,
    scaling_frame,
    values,
)

REPO = Path(__file__).resolve().parents[3]


def check(name: str, frame) -> ClaimResult:
    return CLAIMS[name](frame, {})


def controls_cpu() -> list[ClaimResult]:
    """The claims of `controls/cpu`: a control that cannot tell (noise above what 8 seeds
    resolve), the negative control holding by the exact test, LOSP sooner holding."""
    return [
        check("control_local_sgd_loses_accuracy_at_large_tau", local_taus(0.9, 0.9, own=0.01)[0]),
        check("control_osp_equals_losp_on_ideal_network", ideal_pair(0.0)),
        check(
            "losp_sooner_than_osp",
            losp_osp(values("losp|p", 60.0, 1.0, 2.0), values("osp|p", 80.0, 1.0, 2.0)),
        ),
    ]


def losp_fmnist() -> list[ClaimResult]:
    """The claims of `losp/fmnist`: LOSP later (does not hold), the first control holding,
    pseudo-sync's scaling by the model."""
    train = {("sync_sgd", 2): [100.0] * SEEDS, ("sync_sgd", 8): [125.0] * SEEDS}
    train |= {("pseudo_sync", 2): [100.0] * SEEDS, ("pseudo_sync", 8): [105.0] * SEEDS}
    return [
        check(
            "losp_sooner_than_osp",
            losp_osp(values("losp|p", 100.0, 1.0, 2.0), values("osp|p", 80.0, 1.0, 2.0)),
        ),
        check("control_local_sgd_loses_accuracy_at_large_tau", local_taus(0.9, 0.85)[0]),
        check("pseudo_sync_scales_better", scaling_frame(train)),
    ]


@pytest.fixture(scope="module")
def claims() -> dict[str, list[ClaimResult]]:
    return {"controls/cpu": controls_cpu(), "losp/fmnist": losp_fmnist()}


@pytest.fixture
def results(tmp_path: Path, claims) -> Path:
    root = tmp_path / "results"
    for folder, checked in claims.items():
        write_claims(checked, root / folder, title=folder)
    return root


def table_rows(page: str) -> list[list[str]]:
    """The cells of the verdict tables' rows (after each header and rule), in page order: the
    counted table, then each scale listed apart, then what the model fixes."""
    rows = []
    for line in page.splitlines():
        if line.startswith("| ") and not line.startswith("| source |"):
            rows.append(line[2:-2].split(" | "))
    return rows


def effect(d: dict) -> str:
    """The effect cell, formatted here from claims.json's numbers."""
    if d["unit"] == "ratio":  # efficiencies: points of percent
        points = f"{100 * d['estimate']:+.1f} points"
        if d["test"] == "model":
            return points
        return f"{points} [{100 * d['low']:+.1f}, {100 * d['high']:+.1f}] ({100 * d['level']:g}%)"
    if d["test"] == "model":
        return f"{d['estimate']:+.3g}"
    level = f"({100 * d['level']:g}%)"
    if d["unit"] == "s":
        return f"{d['estimate']:+.3g} s [{d['low']:+.3g} s, {d['high']:+.3g} s] {level}"
    return f"{d['estimate']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}] {level}"


def test_the_page_lists_controls_first_then_papers_each_row_complete(
    results: Path, claims, capsys
) -> None:
    out = results / "README.md"
    assert main(["--results", str(results), "--out", str(out)]) == 0
    assert capsys.readouterr().out == f"wrote {out}\n"
    page = out.read_text()
    rows = table_rows(page)
    found = [(row[0].split(":")[0], row[2].split(": ")[0]) for row in rows]
    # counted (fmnist: its one control holds), then the cpu scale apart (a positive control
    # cannot tell there), controls first, then what the timing model fixes
    assert found == [
        ("control (positive)", "[losp](losp/fmnist/claims.md), fmnist"),
        ("LOSP", "[losp](losp/fmnist/claims.md), fmnist"),
        ("control (positive)", "[controls](controls/cpu/claims.md), cpu"),
        ("control (negative)", "[controls](controls/cpu/claims.md), cpu"),
        ("LOSP", "[controls](controls/cpu/claims.md), cpu"),
        ("pseudo-synchronous SGD", "[losp](losp/fmnist/claims.md), fmnist"),
    ]
    assert "At the cpu scale, not counted (its controls do not pass: " in page
    assert "control_local_sgd_loses_accuracy_at_large_tau cannot tell" in page
    assert "By the model (set by the timing model" in page
    data = {}
    for folder in claims:
        written = json.loads((results / folder / "claims.json").read_text())
        data[folder] = {c["name"]: c for c in written["claims"]}
    order = [
        ("losp/fmnist", "control_local_sgd_loses_accuracy_at_large_tau", "holds", "make losp"),
        ("losp/fmnist", "losp_sooner_than_osp", "does not hold", "make losp"),
        ("controls/cpu", "control_local_sgd_loses_accuracy_at_large_tau", "cannot tell",
         "make controls VERDICT_SCALE=cpu"),
        ("controls/cpu", "control_osp_equals_losp_on_ideal_network", "holds",
         "make controls VERDICT_SCALE=cpu"),
        ("controls/cpu", "losp_sooner_than_osp", "holds", "make controls VERDICT_SCALE=cpu"),
        ("losp/fmnist", "pseudo_sync_scales_better", "holds (by the model)", "make losp"),
    ]  # fmt: skip
    for row, (folder, name, verdict, command) in zip(rows, order, strict=True):
        item = data[folder][name]
        d = item["deciding"]
        assert len(row) == 8
        assert row[1] == item["text"].split(" (")[0] and row[1]
        assert row[3] == ("8 paired" if d["paired"] else "8")
        pending = (
            "; not yet replicated; not yet checked at other rates"
            if verdict in ("holds", "does not hold")
            else "; not yet run at the n its margin needs"  # an n <= 24 reaches its margin
            if verdict_page.powerable(item) and folder.endswith("/fmnist")  # a counted scale
            else ""
        )
        assert row[4] == f"**{verdict}**{pending}" and item["verdict"] == verdict
        assert row[5] == effect(d), (name, row[5])
        assert row[7] == f"`{command}`"
    mdd = [row[6] for row in rows]
    first = data["losp/fmnist"]["control_local_sgd_loses_accuracy_at_large_tau"]["deciding"]
    assert mdd[0] == f"{first['mdd']:.3f} (margin 0.010)"
    # cannot tell: the n that would reach the margin
    noisy = data["controls/cpu"]["control_local_sgd_loses_accuracy_at_large_tau"]["deciding"]
    assert noisy["n_needed"] > 8
    assert mdd[2] == f"{noisy['mdd']:.3f} (margin 0.010); n = {noisy['n_needed']} needed"
    assert mdd[3] == "0.000 (margin 0.005)"  # no spread: TOST's smallest provable margin is 0
    late = data["losp/fmnist"]["losp_sooner_than_osp"]["deciding"]
    assert mdd[1] == f"{late['mdd']:.3g} s (margin {late['margin']:.3g} s)"
    assert mdd[5] == "–"  # by the model: nothing sampled, no power
    assert rows[3][5] == "+0.000 [+0.000, +0.000] (90%)"
    assert rows[5][5] == f"{100 * (100 / 105 - 0.8):+.1f} points"  # efficiencies


def test_the_page_names_what_is_not_tested_and_counts_the_verdicts(results: Path) -> None:
    out = results / "README.md"
    assert main(["--results", str(results), "--out", str(out)]) == 0
    lines = out.read_text().splitlines()
    at = lines.index("Not tested by a committed result:")
    listed = lines[at + 2 : at + 2 + len(NOT_TESTED)]
    assert listed == [f"- {p} ({w}): {t}: {why}." for p, w, t, why in NOT_TESTED]
    assert any("LOSP's communication cost is lower than OSP's" in line for line in listed)
    assert lines[-1] == (
        "Verdicts (tested, at the scales whose controls pass: fmnist): does not hold 1, holds 1;"
        " not counted: 3 at scales whose controls do not pass, 1 by the model; decisive"
        " verdicts rerun on fresh seeds: 0 of 2, 0 replicated; checked at other rates: 0 of 2,"
        " 0 robust."
    )


def test_a_claim_measured_again_by_a_better_preset_is_listed_apart_and_not_counted(
    tmp_path: Path, claims
) -> None:
    # pseudo_sync's speed claim (once a pass) beside pseudo_sync_speed's (a time budget)
    root = tmp_path / "results"
    speed = claims["controls/cpu"][2]  # any claim result, renamed below
    for folder in ("pseudo_sync/fmnist", "pseudo_sync_speed/fmnist"):
        result = dataclasses.replace(speed, name="pseudo_sync_faster_than_sync")
        write_claims([result], root / folder, title=folder)
    assert main(["--results", str(root)]) == 0
    text = (root / "README.md").read_text()
    (row,) = table_rows(text)
    assert row[2].startswith("[pseudo_sync_speed]")
    apart = text.split("Measured again on a better design", 1)[1].split("Not tested", 1)[0]
    assert "- pseudo_sync_faster_than_sync in [pseudo_sync](pseudo_sync/fmnist/claims.md)" in apart
    assert "now [pseudo_sync_speed](pseudo_sync_speed/fmnist/claims.md)" in apart
    assert "At the fmnist scale, not counted (no control ran at it):" in text
    assert text.splitlines()[-1] == (
        "Verdicts (tested, at the scales whose controls pass: none): none; not counted: 1 at "
        "scales whose controls do not pass, 0 by the model; decisive verdicts rerun on fresh "
        "seeds: 0 of 0, 0 replicated; checked at other rates: 0 of 0, 0 robust."
    )


def test_the_default_out_is_the_results_readme(results: Path) -> None:
    assert main(["--results", str(results)]) == 0
    assert (results / "README.md").read_text().startswith("# The seed papers' claims: verdicts")


def test_no_claims_json_is_one_error_line_and_exit_2(tmp_path: Path, capsys) -> None:
    empty = tmp_path / "results"
    empty.mkdir()
    assert main(["--results", str(empty), "--out", str(tmp_path / "README.md")]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    (line,) = captured.err.splitlines()
    assert line.startswith("error: no claims.json under ")
    assert not (tmp_path / "README.md").exists()


# --- recompute --update -------------------------------------------------------------------------


def folder_of(folder: Path, provenance: tuple[str, ...], **files: str | bytes) -> Path:
    """`folder` made, with a provenance.txt of these lines and these files (RECORDS named
    `records`, the others by their name with the dot as `_`)."""
    folder.mkdir(parents=True)
    (folder / "provenance.txt").write_text("".join(f"{line}\n" for line in provenance))
    for key, content in files.items():
        path = folder / (RECORDS if key == "records" else key.replace("_", "."))
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    return folder


def committed(folder: Path) -> Path:
    """A result folder as committed: provenance (with a sweep command and an earlier
    recomputation), records, a table."""
    provenance = (
        "command: python -m analysis.reports.report --experiment demo --scale cpu "
        "outputs/demo/runs --out results/demo/cpu",
        "git commit: old",
        "date: 2020-01-01T00:00:00Z",
        "runs root: outputs/demo/runs",
        "records: runs.jsonl.gz (2 runs)",
        "sweep command: python -m experiments.sweep demo --scale cpu",
        "recomputed: from runs.jsonl.gz by python -m analysis.reproduce.recompute --update at old",
    )
    return folder_of(
        folder,
        provenance,
        records=b"the committed records",
        table_md="old table\n",
        claims_md="same claims\n",
    )


def recomputation(folder: Path) -> Path:
    """What a report from the records writes: a provenance of its own, records again (other
    bytes), a new table, the same claims.md, a claims.json the result did not have."""
    provenance = (
        "command: python -m analysis.reports.report --experiment demo --scale cpu "
        "results/demo/cpu/runs.jsonl.gz --out outputs/recompute/demo/cpu",
        "git commit: new",
        "date: 2030-01-01T00:00:00Z",
        "runs root: results/demo/cpu/runs.jsonl.gz",
        "records: runs.jsonl.gz (2 runs)",
    )
    return folder_of(
        folder,
        provenance,
        records=b"records written again",
        table_md="new table\n",
        claims_md="same claims\n",
        claims_json='{"claims": []}\n',
    )


def test_update_copies_the_recomputation_keeping_the_command_and_the_records(
    tmp_path: Path,
) -> None:
    result = committed(tmp_path / "results" / "demo" / "cpu")
    out = recomputation(tmp_path / "out")
    records = (result / RECORDS).stat()
    changed = recompute.update(result, out, "c0ffee")
    assert sorted(changed) == ["claims.json", "provenance.txt", "table.md"]
    assert (result / "table.md").read_text() == "new table\n"
    assert (result / "claims.json").read_text() == '{"claims": []}\n'
    assert (result / RECORDS).read_bytes() == b"the committed records"
    assert (result / RECORDS).stat().st_mtime_ns == records.st_mtime_ns  # never rewritten
    assert (result / "provenance.txt").read_text().splitlines() == [
        "command: python -m analysis.reports.report --experiment demo --scale cpu "
        "outputs/demo/runs --out results/demo/cpu",
        "git commit: new",
        "date: 2030-01-01T00:00:00Z",
        "runs root: results/demo/cpu/runs.jsonl.gz",
        "records: runs.jsonl.gz (2 runs)",
        "sweep command: python -m experiments.sweep demo --scale cpu",
        "recomputed: from runs.jsonl.gz by python -m analysis.reproduce.recompute --update at "
        "c0ffee",
    ]
    # again from the same recomputation: nothing to change, one recomputed: line still
    assert recompute.update(result, out, "c0ffee") == []
    assert (result / "provenance.txt").read_text().count("recomputed: ") == 1


def test_update_refuses_a_dirty_checkout_in_one_line(tmp_path: Path, monkeypatch, capsys) -> None:
    import analysis.reports.report

    result = committed(tmp_path / "results" / "demo" / "cpu")
    before = {p.name: p.read_bytes() for p in result.iterdir()}
    monkeypatch.setattr(analysis.reports.report, "git_commit", lambda: "0123abc-dirty")
    out = tmp_path / "o"
    assert recompute.main(["--update", str(result), "--out", str(out)]) == 2
    captured = capsys.readouterr()
    (line,) = captured.err.splitlines()
    assert line.startswith("error: --update refuses a checkout with uncommitted changes")
    assert captured.out == ""
    assert {p.name: p.read_bytes() for p in result.iterdir()} == before
    assert not out.exists()


@pytest.mark.slow  # seconds: a report with figures, as the other recompute tests
def test_update_rewrites_a_committed_result_from_its_records(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    import analysis.reports.report

    source = REPO / "results" / "demo" / "cpu"
    result = tmp_path / "results" / "demo" / "cpu"
    shutil.copytree(source, result)
    (result / "table.md").write_text("stale\n")
    (result / "claims.json").unlink()
    records = (result / RECORDS).read_bytes()
    mtime = (result / RECORDS).stat().st_mtime_ns
    command = (source / "provenance.txt").read_text().splitlines()[0]
    monkeypatch.setattr(analysis.reports.report, "git_commit", lambda: "f" * 40)
    out = tmp_path / "o"
    assert (
        recompute.main(["--update", "--results", str(tmp_path / "results"), "--out", str(out)]) == 0
    )
    said = capsys.readouterr().out.strip()
    assert said.startswith("demo/cpu: updated ")
    updated = said.removeprefix("demo/cpu: updated ").split(", ")
    assert {"claims.json", "provenance.txt", "table.md"} <= set(updated)
    again = out / "demo" / "cpu"
    assert (result / "table.md").read_bytes() == (again / "table.md").read_bytes()
    assert (result / "table.md").read_bytes() == (source / "table.md").read_bytes()
    assert json.loads((result / "claims.json").read_text()) == json.loads(
        (again / "claims.json").read_text()
    )
    assert (result / RECORDS).read_bytes() == records
    assert (result / RECORDS).stat().st_mtime_ns == mtime
    lines = (result / "provenance.txt").read_text().splitlines()
    assert lines[0] == command  # the report's original command, not the recomputation's
    assert f"git commit: {'f' * 40}" in lines
    assert [line for line in lines if line.startswith("recomputed: ")] == [
        f"recomputed: from {RECORDS} by python -m analysis.reproduce.recompute --update at "
        f"{'f' * 40}"
    ]
    assert lines[-1].startswith("recomputed: ")
    sweep = [line for line in (source / "provenance.txt").read_text().splitlines()
             if line.startswith("sweep command: ")]  # fmt: skip
    assert sweep and sweep[0] in lines


def test_a_scale_counts_only_where_every_control_there_holds() -> None:
    from analysis.reports.verdict_page import controls_pass

    def item(name: str, scale: str, verdict: str) -> dict:
        return {"name": name, "scale": scale, "verdict": verdict}

    positive, negative = (
        "control_local_sgd_loses_accuracy_at_large_tau",
        "control_osp_equals_losp_on_ideal_network",
    )
    items = [
        item(positive, "fmnist", "holds"),
        item(negative, "fmnist", "holds"),
        item(positive, "cpu", "holds"),
        item(negative, "cpu", "does not hold"),  # a null reported as a difference: fails
        item("losp_sooner_than_osp", "paper", "holds"),  # no control ran at it
    ]
    assert controls_pass(items) == {"fmnist"}


def test_a_verdict_by_the_model_at_another_rate_is_the_same_verdict() -> None:
    # LOSP's bytes per step at another LOSP rate: fixed by the timing model, no spread
    item = {"verdict": "holds", "rates": {"points": {"a": "holds (by the model)", "b": "holds"}}}
    assert verdict_page.robust(item) is True
    assert verdict_page._rates_text(item) == "; robust to the rate (2 other rate sets)"
    item["rates"]["points"]["c"] = "cannot tell"
    assert verdict_page.robust(item) is False
    assert verdict_page._rates_text(item) == "; **not robust to the rate**: cannot tell at c"
