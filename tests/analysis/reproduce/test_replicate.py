"""`python -m analysis.reproduce.replicate` (`make replicate PRESET=...`): a preset's committed
claims tested again on fresh seeds, and the verdicts page reading a published replication."""

from __future__ import annotations

import json
import shutil

import pytest

from analysis.reports import verdict_page
from analysis.reproduce import replicate
from experiments.errors import UserError
from tests.cli import REPO, module_here, python

FAST = ("dataset=synthetic", "compute.algo_time_s=0.001", "wandb.mode=disabled", "progress=false")


def claim(name: str, verdict: str, line: str = "") -> dict:
    return {"name": name, "text": name, "verdict": verdict, "deciding": {"line": line}}


def test_seeds_are_fresh_by_default_and_an_overlap_is_refused():
    assert replicate.parse_seeds("200-203") == [200, 201, 202, 203]
    assert replicate.parse_seeds("7,3") == [7, 3]
    for bad in ("a-b", "3,3", "-1", ""):
        with pytest.raises(UserError, match="--seeds"):
            replicate.parse_seeds(bad)
    assert replicate.choose_seeds(None, list(range(8))) == list(range(200, 208))
    assert replicate.choose_seeds("20,21", [0, 1]) == [20, 21]
    with pytest.raises(UserError, match=r"overlap the committed runs' seeds \(1\)"):
        replicate.choose_seeds("1,20", [0, 1])
    with pytest.raises(UserError, match=r"overlap the tuning seeds \(101\)"):
        replicate.choose_seeds("101,102", [0, 1])
    assert replicate.seeds_text([202, 200, 201]) == "200-202"
    assert replicate.seeds_text([0, 5]) == "0, 5"


def test_a_decisive_verdict_replicates_only_when_the_fresh_seeds_give_it_again():
    committed = [
        claim("a", "holds"),
        claim("b", "does not hold"),
        claim("c", "cannot tell"),
        claim("d", "holds"),
    ]
    again = [
        claim("a", "holds", "holds: +0.01"),
        claim("b", "cannot tell", "cannot tell: -0.002"),
        claim("c", "holds"),
    ]
    rows = {c["name"]: c for c in replicate.compare(committed, again)}
    assert rows["a"]["replicates"] is True and rows["a"]["line"] == "holds: +0.01"
    assert rows["b"]["replicates"] is False and rows["b"]["replication"] == "cannot tell"
    assert rows["c"]["replicates"] is None and rows["c"]["replication"] == "holds"
    assert rows["d"]["replicates"] is None and rows["d"]["replication"] == "not checked"
    doc = {
        "preset": "p",
        "scale": "fmnist",
        "command": "python -m analysis.reproduce.replicate p",
        "seeds": [200, 201],
        "seeds_text": "200, 201",
        "committed_seeds_text": "0, 1",
        "claims": list(rows.values()),
    }
    text = replicate.markdown(doc)
    assert "| b | does not hold | cannot tell | **no** | cannot tell: -0.002 |" in text
    assert text.rstrip().endswith("Replicated: 1 of 2 decisive verdicts.")


def test_publish_swaps_the_replication_in_whole(tmp_path):
    result = tmp_path / "results" / "p" / "fmnist"
    (result / "replication").mkdir(parents=True)
    (result / "replication" / "old.md").write_text("old")
    made = tmp_path / "made"
    made.mkdir()
    (made / "replication.json").write_text("{}")
    target = replicate.publish(made, result)
    assert target == result / "replication"
    assert sorted(p.name for p in target.iterdir()) == ["replication.json"]
    assert sorted(p.name for p in result.iterdir()) == ["replication"]  # no staging left


@pytest.mark.parametrize(
    "args, said",
    [
        (["nope"], "error: unknown preset 'nope'; presets: controls, demo"),
        (["losp", "--scale", "cpu"], "error: {results}/losp/cpu/claims.json: missing"),
        (["losp", "--seeds", "6-9"], "error: --seeds 6-9 overlap the committed runs' seeds (6, 7)"),
        (["losp", "seed=3"], "error: give the seeds with --seeds, not seed="),
    ],
)
def test_bad_input_is_one_line_before_any_run(tmp_path, args, said):
    results = REPO / "results"
    proc = module_here("analysis.reproduce.replicate", *args, "--out-root", str(tmp_path), cwd=REPO)
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith(said.format(results="results")), line
    assert not list(tmp_path.iterdir())
    assert results.is_dir()


def test_the_page_counts_a_verdict_that_did_not_replicate_as_such(tmp_path):
    results = tmp_path / "results"
    shutil.copytree(REPO / "results", results)
    for published in results.glob("*/*/replication"):  # the page as if none were rerun yet
        shutil.rmtree(published)
    claims = json.loads((results / "losp" / "fmnist" / "claims.json").read_text())["claims"]
    decisive = [c for c in claims if c["verdict"] in ("holds", "does not hold")]
    flipped, kept = decisive[0], decisive[1]
    page = verdict_page.page(results)
    before = page.strip().splitlines()[-1]
    assert "decisive verdicts rerun on fresh seeds: 0 of" in before
    folder = results / "losp" / "fmnist" / "replication"
    folder.mkdir()
    doc = {
        "seeds_text": "200-207",
        "claims": [
            {"name": flipped["name"], "replication": "cannot tell"},
            {"name": kept["name"], "replication": kept["verdict"]},
        ],
    }
    (folder / "replication.json").write_text(json.dumps(doc))
    page = verdict_page.page(results)
    row = next(r for r in page.splitlines() if "[losp](losp/fmnist/claims.md)" in r
               and flipped["text"].split(" (")[0] in r)  # fmt: skip
    assert "**does not replicate**: cannot tell on seeds 200-207" in row
    row = next(r for r in page.splitlines() if "[losp](losp/fmnist/claims.md)" in r
               and kept["text"].split(" (")[0] in r)  # fmt: skip
    assert f"; replicates: {kept['verdict']} on seeds 200-207" in row
    last = page.strip().splitlines()[-1]
    assert "did not replicate 1" in last
    assert "decisive verdicts rerun on fresh seeds: 2 of" in last and "1 replicated" in last
    (folder / "replication.json").write_text(json.dumps({"claims": []}))
    with pytest.raises(UserError, match="replication.json"):
        verdict_page.page(results)


@pytest.mark.e2e
def test_a_replication_reruns_the_sweep_on_fresh_seeds_and_compares_every_claim(
    tmp_path, committed_smoke
):
    results, out = committed_smoke, tmp_path / "out"
    proc = python(
        "-m", "analysis.reproduce.replicate", "pseudo_sync_speed", "--scale",
        "smoke", "--results", str(results), "--out-root", str(out), *FAST,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    made = out / "replicate" / "results" / "pseudo_sync_speed" / "smoke"
    doc = json.loads((made / "replication.json").read_text())
    assert doc["seeds"] == [200, 201] and doc["committed_seeds"] == [0, 1]
    names = [c["name"] for c in json.loads((results / "pseudo_sync_speed" / "smoke" /
                                            "claims.json").read_text())["claims"]]  # fmt: skip
    assert [c["name"] for c in doc["claims"]] == names and names
    seeds = sorted(
        json.loads((run / "config.json").read_text())["seed"]
        if (run / "config.json").is_file()
        else int(
            next(
                line
                for line in (run / "config.yaml").read_text().splitlines()
                if line.startswith("seed:")
            ).split(":")[1]
        )  # fmt: skip
        for run in (out / "replicate" / "pseudo_sync_speed" / "runs").iterdir()
        if run.is_dir()
    )
    assert set(seeds) == {200, 201}
    assert "Replicated:" in (made / "replication.md").read_text()
    assert not (results / "pseudo_sync_speed" / "smoke" / "replication").exists()  # no --publish
