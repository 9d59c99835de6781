"""`python -m analysis.reproduce.power` (`make power PRESET=...`): a preset's claims that cannot
tell, run at the n that reaches their margin, and the verdicts page reading the result."""

from __future__ import annotations

import json
import shutil

import pytest

from analysis.reports import verdict_page
from analysis.reproduce import power as pw
from analysis.reproduce.replicate import publish
from experiments.errors import UserError
from tests.cli import REPO, module_here, python

FAST = ("dataset=synthetic", "compute.algo_time_s=0.001", "wandb.mode=disabled", "progress=false")


def claim(name: str, verdict: str, n: int = 8, needed: int | None = None) -> dict:
    return {"name": name, "text": name, "verdict": verdict,
            "deciding": {"n": n, "n_needed": needed}}  # fmt: skip


def test_only_claims_that_cannot_tell_and_reach_their_margin_by_max_n_are_powered():
    committed = [
        claim("short", "cannot tell", needed=10),
        claim("at-the-limit", "cannot tell", needed=24),
        claim("too-far", "cannot tell", needed=25),  # beyond what is run
        claim("no-n", "cannot tell"),  # no margin to reach (an equivalence within it, a model)
        claim("reached", "cannot tell", needed=8),  # its n already: more seeds would not help
        claim("decided", "holds", needed=12),  # decided: nothing to power
    ]
    assert pw.powered(committed, 24) == {"short": 10, "at-the-limit": 24}
    assert pw.powered(committed, 12) == {"short": 10}
    assert verdict_page.powerable(committed[0]) and not verdict_page.powerable(committed[2])


def test_the_added_seeds_follow_the_committed_ones_and_skip_the_tuning_seeds():
    assert pw.more_seeds(list(range(8)), 10) == [8, 9]
    assert pw.more_seeds([0, 1, 2, 5], 6) == [6, 7]  # above the largest committed seed
    assert pw.more_seeds(list(range(98)), 102) == [98, 99, 102, 103]  # 100, 101: tuning
    with pytest.raises(UserError, match=r"n = 200 would need seeds up to 201: at 200 and above"):
        pw.more_seeds(list(range(8)), 200)


def test_the_comparison_lists_every_claim_and_marks_the_powered_ones():
    committed = [claim("a", "cannot tell", needed=10), claim("b", "holds")]
    at_n = [claim("a", "holds", n=10), claim("b", "holds", n=10)]
    at_n[0]["deciding"]["line"] = "holds: x | y"
    doc = {
        "preset": "p", "scale": "s", "command": "make power", "n": 10, "max_n": 24,
        "committed_n": 8, "seeds_text": "0-9", "committed_seeds_text": "0-7",
        "added_seeds": [8, 9], "claims": pw.compare(committed, at_n, {"a": 10}),
    }  # fmt: skip
    assert doc["claims"] == [
        {"name": "a", "text": "a", "committed": "cannot tell", "verdict": "holds",
         "powered": True, "n_needed": 10, "line": "holds: x | y"},
        {"name": "b", "text": "b", "committed": "holds", "verdict": "holds", "powered": False,
         "n_needed": None, "line": ""},
    ]  # fmt: skip
    text = pw.markdown(doc)
    assert "| a | cannot tell | 10 | holds | holds: x \\| y |" in text
    assert "| b | holds | – | holds | – |" in text


def test_the_page_shows_a_powered_claims_verdict_at_its_n(tmp_path):
    results = tmp_path / "results"
    shutil.copytree(REPO / "results", results)
    for published in results.glob("*/*/power"):  # the page as if none were run yet
        shutil.rmtree(published)
    committed = verdict_page.read_claims(results / "losp" / "fmnist" / "claims.json")
    short = [c for c in committed if verdict_page.powerable(c)]
    assert short, "the losp result has no claim to run at its n (the test needs one)"
    page = verdict_page.page(results)
    row = next(r for r in page.splitlines() if short[0]["text"].split(" (")[0] in r)
    assert "; not yet run at the n its margin needs" in row
    # every such claim at the counted scale, not only losp's (Table 2's two at fmnist too)
    counted = [
        c
        for path in sorted(results.glob("*/fmnist/claims.json"))
        for c in verdict_page.read_claims(path)
        if verdict_page.powerable(c)
    ]
    last = page.strip().splitlines()[-1]
    assert f"of at most 24: {len(counted)}, run at that n: 0." in last, last
    folder = results / "losp" / "fmnist" / "power"
    folder.mkdir()
    doc = {
        "n": 10,
        "claims": [
            {"name": c["name"], "verdict": "holds", "powered": c is short[0]} for c in committed
        ],
    }
    (folder / "power.json").write_text(json.dumps(doc))
    page = verdict_page.page(results)
    row = next(r for r in page.splitlines() if short[0]["text"].split(" (")[0] in r)
    assert "; at n = 10 (`make power`): **holds**" in row
    assert row.count("at n = 10") == 1
    last = page.strip().splitlines()[-1]
    assert f"at most 24: {len(counted)}, run at that n: 1, holds 1." in last, last
    (folder / "power.json").write_text(json.dumps({"n": 10, "claims": [{"name": "x"}]}))
    with pytest.raises(UserError, match="power.json"):
        verdict_page.page(results)


@pytest.mark.parametrize(
    "args, said",
    [
        (["nope"], "error: unknown preset 'nope'; presets: controls, demo"),
        (["losp", "--scale", "cpu"], "error: results/losp/cpu/claims.json: missing"),
        (["losp", "seed=3"], "error: seed= is the committed result's and the n's"),
        (["losp", "--n", "8"], "error: --n 8: the committed result has n = 8 already"),
        (["losp", "--n", "300"], "error: n = 300 would need seeds up to 301"),
        (["losp", "--max-n", "1"], "error: --max-n 1: at least 2"),
    ],
)
def test_bad_input_is_one_line_before_any_run(tmp_path, args, said):
    proc = module_here("analysis.reproduce.power", *args, "--out-root", str(tmp_path), cwd=REPO)
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith(said), line
    assert not list(tmp_path.iterdir())


def test_nothing_to_run_says_so_and_writes_nothing(tmp_path):
    proc = module_here(
        "analysis.reproduce.power", "overlap_sync", "--out-root", str(tmp_path), cwd=REPO
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == (
        "power of overlap_sync at fmnist: no claim that cannot tell reaches its margin at an n "
        "of at most 24: nothing to run"
    )
    assert not list(tmp_path.iterdir())


@pytest.mark.e2e
def test_the_new_seeds_run_and_the_report_pairs_them_with_the_committed_runs(
    tmp_path, committed_smoke
):
    results = tmp_path / "results"
    shutil.copytree(committed_smoke, results)
    out = tmp_path / "out"
    proc = python(
        "-m", "analysis.reproduce.power", "pseudo_sync_speed", "--scale",
        "smoke", "--n", "3", "--max-n", "10000", "--results", str(results), "--out-root",
        str(out), *FAST,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    made = out / "power" / "results" / "pseudo_sync_speed" / "smoke"
    doc = json.loads((made / "power.json").read_text())
    assert (doc["n"], doc["committed_n"], doc["seeds"], doc["added_seeds"]) == (3, 2, [0, 1, 2],
                                                                                [2])  # fmt: skip
    committed = verdict_page.read_claims(results / "pseudo_sync_speed" / "smoke" / "claims.json")
    assert [c["name"] for c in doc["claims"]] == [c["name"] for c in committed]
    assert {c["name"] for c in doc["claims"] if c["powered"]} == set(pw.powered(committed, 10000))
    # only seed 2 ran; the report paired it with the committed seeds 0 and 1
    runs = out / "power" / "pseudo_sync_speed" / "runs"
    done = sorted(
        r.name.split("-seed")[1][0] for r in runs.iterdir() if (r / "summary.json").is_file()
    )
    assert done and set(done) == {"2"}
    lines = [c["line"] for c in doc["claims"] if "(paired, n=" in c["line"]]
    # every claim's line on failure: once (a clean clone's make test at c227bb8) none was paired
    assert lines and all("(paired, n=3)" in line for line in lines), [
        c["line"] for c in doc["claims"]
    ]
    assert (made / "claims.md").is_file() and "| claim | committed (n = 2) |" in (
        made / "power.md"
    ).read_text()
    publish(made, results / "pseudo_sync_speed" / "smoke", pw.FOLDER)
    page = verdict_page.page(results)
    # (which smoke claims need more seeds varies from sweep to sweep: the algorithms' own time is
    # measured, compute.algo_time_s; test_the_page_shows_a_powered_claims_verdict_at_its_n fixes
    # one)
    shown = [c for c in doc["claims"] if c["powered"]]
    assert page.count("(`make power`)") == len(shown)
    for c in shown:
        row = next(r for r in page.splitlines() if f"| {c['text'].split(' (')[0]} |" in r)
        assert f"; at n = 3 (`make power`): **{c['verdict']}**" in row
