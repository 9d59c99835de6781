"""`python -m analysis.reproduce.robustness` (`make robustness PRESET=...`): a preset's committed
claims tested again at other learning rates, and the verdicts page reading the check."""

from __future__ import annotations

import json
import re
import shutil

import pytest

from analysis.reports import verdict_page
from analysis.reproduce import robustness as rb
from experiments.errors import UserError
from tests.cli import REPO, module_here, python

FAST = ("dataset=synthetic", "compute.algo_time_s=0.001", "wandb.mode=disabled", "progress=false")


def record(method: str, lr: float, seed: int = 0) -> dict:
    return {"config": {"algorithm": {"name": method}, "lr": lr, "seed": seed}}


def test_each_method_has_one_committed_rate_and_the_grid_is_factor_two_around_0_1():
    records = [record("losp", 0.0125, s) for s in (0, 1)] + [record("osp", 0.05)]
    assert rb.method_rates(records) == {"losp": 0.0125, "osp": 0.05}
    with pytest.raises(UserError, match=r"osp ran at 2 rates in the committed result \(0.05, 0"):
        rb.method_rates([*records, record("osp", 0.1, 1)])
    assert [rb.on_grid(x) for x in (0.1, 0.03, 0.016, 0.17, 0.3)] == [0.1, 0.025, 0.0125, 0.2,
                                                                         0.4]  # fmt: skip
    assert rb.shared_rate({"a": 0.1, "b": 0.1}) is None  # one rate already: nothing to share
    assert rb.shared_rate({"losp": 0.0125, "osp": 0.05}) == 0.025  # geometric mean, on the grid
    assert rb.shared_rate({"a": 0.0125, "b": 0.05, "c": 0.05, "d": 0.1}) == 0.05


def test_points_are_each_method_at_its_neighbours_then_the_shared_rate():
    pts = rb.points({"losp": 0.0125, "osp": 0.05})
    assert [(p.name, p.rates) for p in pts] == [
        ("losp lr 0.00625 (/2)", (("losp", 0.00625),)),
        ("losp lr 0.025 (x2)", (("losp", 0.025),)),
        ("osp lr 0.025 (/2)", (("osp", 0.025),)),
        ("osp lr 0.1 (x2)", (("osp", 0.1),)),
        ("shared lr 0.025", (("losp", 0.025), ("osp", 0.025))),
    ]
    assert pts[-1].slug == "losp-lr0.025-osp-lr0.025"
    # one method off the shared rate: its neighbour is the shared point, listed once
    pts = rb.points({"overlap_local_sgd": 0.05, "sync_sgd": 0.1})
    assert [p.name for p in pts][1] == "overlap_local_sgd lr 0.1 (x2), shared"
    assert len(pts) == 4
    # --methods: only those change, and no shared point (the others keep their rates)
    pts = rb.points({"losp": 0.0125, "osp": 0.05}, ["losp"])
    assert [p.name for p in pts] == ["losp lr 0.00625 (/2)", "losp lr 0.025 (x2)"]
    # one rate already (the controls, all at 0.1): every method at each neighbour as well,
    # from the per-method points' runs
    pts = rb.points({"losp": 0.1, "osp": 0.1})
    assert [(p.name, p.rates) for p in pts[4:]] == [
        ("every method lr 0.05 (/2), shared", (("losp", 0.05), ("osp", 0.05))),
        ("every method lr 0.2 (x2), shared", (("losp", 0.2), ("osp", 0.2))),
    ]
    assert {r for p in pts[4:] for r in p.rates} <= {r for p in pts[:4] for r in p.rates}
    assert len(rb.points({"local_sgd": 0.1})) == 2  # one method: its neighbours are all
    # --methods naming methods of one rate (the controls' identity, OSP = LOSP): they move
    # together too, the others keep theirs
    rates = {"local_sgd": 0.1, "losp": 0.1, "osp": 0.1, "sync_sgd": 0.1}
    pts = rb.points(rates, ["osp", "losp"])
    assert [p.name for p in pts[:2]] == ["osp lr 0.05 (/2)", "osp lr 0.2 (x2)"]
    assert [(p.name, p.rates) for p in pts[4:]] == [
        ("losp, osp lr 0.05 (/2), shared", (("losp", 0.05), ("osp", 0.05))),
        ("losp, osp lr 0.2 (x2), shared", (("losp", 0.2), ("osp", 0.2))),
    ]
    identity = "control_osp_equals_losp_on_ideal_network"
    assert [rb.tests(identity, p, rates) for p in pts] == [False] * 4 + [True] * 2
    # --methods naming methods of different rates: no shared point
    assert len(rb.points({"losp": 0.0125, "osp": 0.05, "sync_sgd": 0.1}, ["osp", "losp"])) == 4


def test_a_methods_part_of_the_sweep_is_its_grid_and_every_extra_grid_naming_it():
    # controls: local_sgd in the main grid and in the non-IID extra grid; osp in a grid of two
    # methods; sync_sgd in one of its own
    grids = {m: rb.method_grids("controls", "fmnist", m) for m in ("local_sgd", "osp", "sync_sgd")}
    assert grids["local_sgd"] == [
        ["hydra.sweeper.grids=[]", "algorithm=local_sgd"],
        ["hydra.sweeper.grids=[]", "algorithm=local_sgd", "tau=32", "partition=noniid",
         "partition.dominant_fraction=0.35"],
    ]  # fmt: skip
    assert grids["osp"] == [["hydra.sweeper.grids=[]", "algorithm=osp", "tau=4", "network=ideal"]]
    assert grids["sync_sgd"] == [["hydra.sweeper.grids=[]", "algorithm=sync_sgd", "tau=1"]]
    # an extra grid without `algorithm` is the main grid's algorithms with its values
    assert rb.method_grids("overlap_sync", "fmnist", "sync_sgd")[1][1:] == [
        "algorithm=sync_sgd", "partition=noniid", "partition.dominant_fraction=0.35"
    ]  # fmt: skip
    with pytest.raises(UserError, match="powersgd: not in controls's sweep"):
        rb.method_grids("controls", "fmnist", "powersgd")


def claim(name: str, verdict: str) -> dict:
    return {"name": name, "text": name, "verdict": verdict}


def test_a_decisive_verdict_is_robust_only_when_every_point_gives_it_again():
    committed = [claim("a", "holds"), claim("b", "does not hold"), claim("c", "cannot tell")]
    at = {
        "x /2": [claim("a", "holds"), claim("b", "cannot tell"), claim("c", "holds")],
        "x x2": [claim("a", "holds"), claim("b", "does not hold")],
    }
    pts = [rb.Point("x /2", (("x", 0.025),)), rb.Point("x x2", (("x", 0.1),))]
    rows = {c["name"]: c for c in rb.compare(committed, at, pts, {"x": 0.05})}
    assert rows["a"]["robust"] is True and rows["a"]["same_at"] == ["x /2", "x x2"]
    assert rows["b"]["robust"] is False and rows["b"]["same_at"] == ["x x2"]
    assert rows["b"]["points"] == {"x /2": "cannot tell", "x x2": "does not hold"}
    assert rows["c"]["robust"] is None and rows["c"]["points"]["x x2"] == "not checked"
    # the same verdict where the timing model fixes the quantity at a point (bytes per step)
    model = {"x /2": [claim("a", "holds (by the model)")], "x x2": [claim("a", "holds")]}
    (row,) = rb.compare([claim("a", "holds")], model, pts, {"x": 0.05})
    assert row["robust"] is True and row["same_at"] == ["x /2", "x x2"]
    doc = {
        "preset": "p",
        "scale": "fmnist",
        "command": "python -m analysis.reproduce.robustness p",
        "seeds_text": "0-7",
        "rates": {"x": 0.05},
        "points": [{"name": "x /2", "rates": {"x": 0.025}}, {"name": "x x2", "rates": {"x": 0.1}}],
        "claims": list(rows.values()),
    }
    text = rb.markdown(doc)
    assert "| b | does not hold | cannot tell | does not hold | **no** |" in text
    assert "x /2: x 0.025; x x2: x 0.1" in text
    assert text.rstrip().endswith("Robust to the rate: 1 of 2 decisive verdicts.")


def test_a_check_of_some_methods_keeps_the_published_points_it_does_not_redo(tmp_path):
    # the controls: local_sgd and sync_sgd checked first, then OSP and LOSP (their identity)
    rates = {"local_sgd": 0.1, "losp": 0.1, "osp": 0.1}
    first = rb.points(rates, ["local_sgd"])
    folder = tmp_path / "results" / "controls" / "fmnist" / rb.FOLDER
    (folder / "points").mkdir(parents=True)
    at = {pt.name: [claim("a", "holds"), claim("i", "holds")] for pt in first}
    at[first[1].name][0] = claim("a", "cannot tell")
    published = {
        "command": "python -m analysis.reproduce.robustness controls --methods local_sgd",
        "seeds": [0, 1],
        "rates": rates,
        "points": [{"name": pt.name, "rates": dict(pt.rates)} for pt in first],
        "claims": rb.compare([claim("a", "holds"), claim("i", "holds")], at, first, rates),
    }
    (folder / rb.JSON).write_text(json.dumps(published))
    for pt in first:
        (folder / "points" / f"{pt.slug}.md").write_text(pt.name)
    args = rb.parser().parse_args(["controls", "--results", str(tmp_path / "results")])
    plan = rb.Plan([], [], rates, [0, 1], [], {})
    pts, verdicts, commands = rb.published_points(args, plan, tmp_path / "made")
    assert pts == first and commands == [published["command"]]
    assert verdicts[first[1].name] == [
        {"name": "a", "verdict": "cannot tell"},
        {"name": "i", "verdict": "holds"},
    ]
    assert sorted(p.name for p in (tmp_path / "made").iterdir()) == sorted(
        f"{pt.slug}.md" for pt in first
    )
    # another check's seeds or rates: not this result's, replaced
    other = rb.Plan([], [], {**rates, "osp": 0.05}, [0, 1], [], {})
    assert rb.published_points(args, other, tmp_path / "made2") is None
    assert rb.published_points(args, rb.Plan([], [], rates, [0], [], {}), tmp_path / "x") is None
    # the page names both commands
    doc = {
        **published,
        "preset": "controls",
        "scale": "fmnist",
        "seeds_text": "0-1",
        "commands": [
            published["command"],
            "python -m analysis.reproduce.robustness controls --methods osp,losp",
        ],
    }
    assert (
        rb.markdown(doc)
        .splitlines()[2]
        .startswith(
            "`python -m analysis.reproduce.robustness controls --methods local_sgd` then "
            "`python -m analysis.reproduce.robustness controls --methods osp,losp`: "
        )
    )


def test_a_point_tests_a_claim_only_where_it_changes_one_of_its_methods():
    # the controls at one rate: local_sgd's claims, the sync-vs-local timing control, and the
    # identity of OSP and LOSP, which only a rate they share tests
    rates = {"local_sgd": 0.1, "losp": 0.1, "osp": 0.1, "sync_sgd": 0.1}
    pts = {p.name: p for p in rb.points(rates)}
    committed = [
        claim("control_local_sgd_loses_accuracy_at_large_tau", "holds"),
        claim("control_sync_slower_on_a_modeled_network", "holds"),
        claim("control_osp_equals_losp_on_ideal_network", "holds"),
        claim("eamsgd_worst", "holds"),  # names no methods: every point tests it
    ]
    at = {name: [{**c, "verdict": "cannot tell"} for c in committed] for name in pts}
    rows = {c["name"]: c for c in rb.compare(committed, at, list(pts.values()), rates)}
    shared = ["every method lr 0.05 (/2), shared", "every method lr 0.2 (x2), shared"]
    assert rows["control_local_sgd_loses_accuracy_at_large_tau"]["tests"] == [
        "local_sgd lr 0.05 (/2)", "local_sgd lr 0.2 (x2)", *shared
    ]  # fmt: skip
    assert rows["control_sync_slower_on_a_modeled_network"]["tests"] == [
        "local_sgd lr 0.05 (/2)", "local_sgd lr 0.2 (x2)", "sync_sgd lr 0.05 (/2)",
        "sync_sgd lr 0.2 (x2)", *shared
    ]  # fmt: skip
    assert rows["control_osp_equals_losp_on_ideal_network"]["tests"] == shared
    assert rows["eamsgd_worst"]["tests"] == list(pts)
    assert all(r["robust"] is False for r in rows.values())
    # a point that tests no claim's methods leaves the claim unchecked there, not robust
    one = [rb.Point("sync_sgd lr 0.2 (x2)", (("sync_sgd", 0.2),))]
    (row,) = rb.compare(committed[:1], {one[0].name: committed[:1]}, one, rates)
    assert row["tests"] == [] and row["robust"] is None
    doc = {"preset": "controls", "scale": "fmnist", "command": "c", "seeds_text": "0-7",
           "rates": rates, "points": [{"name": n, "rates": dict(p.rates)} for n, p in pts.items()],
           "claims": list(rows.values())}  # fmt: skip
    line = next(x for x in rb.markdown(doc).splitlines() if "| control_osp_equals" in x)
    assert line.count("(cannot tell)") == 8 and line.endswith("| **no** |")


def test_the_page_says_robust_or_where_a_verdict_does_not_hold_again(tmp_path):
    results = tmp_path / "results"
    shutil.copytree(REPO / "results", results)
    for published in results.glob("*/*/robustness"):  # the page as if none were checked yet
        shutil.rmtree(published)
    decisive = [
        c for c in verdict_page.read_claims(results / "losp" / "fmnist" / "claims.json")
        if c["verdict"] in verdict_page.DECISIVE
    ]  # fmt: skip
    kept, broken = decisive[0], decisive[1]
    page = verdict_page.page(results)
    assert "checked at other rates: 0 of" in page.strip().splitlines()[-1]
    assert "; not yet checked at other rates" in page
    folder = results / "losp" / "fmnist" / "robustness"
    folder.mkdir()
    doc = {
        "claims": [
            {"name": kept["name"], "points": {"osp lr 0.1 (x2)": kept["verdict"]}},
            {
                "name": broken["name"],
                "points": {"osp lr 0.1 (x2)": broken["verdict"], "shared lr 0.025": "cannot tell"},
            },
        ]
    }
    (folder / "robustness.json").write_text(json.dumps(doc))
    page = verdict_page.page(results)
    rows = [r for r in page.splitlines() if "[losp](losp/fmnist/claims.md)" in r]
    row = next(r for r in rows if kept["text"].split(" (")[0] in r)
    assert "; robust to the rate (1 other rate sets)" in row
    row = next(r for r in rows if broken["text"].split(" (")[0] in r)
    assert "; **not robust to the rate**: cannot tell at shared lr 0.025" in row
    last = page.strip().splitlines()[-1]
    assert re.search(r"; checked at other rates: 2 of \d+, 1 robust[;.]", last), last
    # a check that names the sets testing each claim: the others do not count
    doc["claims"][1]["tests"] = ["osp lr 0.1 (x2)"]
    doc["claims"][0]["tests"] = []
    (folder / "robustness.json").write_text(json.dumps(doc))
    page = verdict_page.page(results)
    rows = [r for r in page.splitlines() if "[losp](losp/fmnist/claims.md)" in r]
    row = next(r for r in rows if broken["text"].split(" (")[0] in r)
    assert "; robust to the rate (1 other rate sets)" in row
    row = next(r for r in rows if kept["text"].split(" (")[0] in r)
    assert "; not yet checked at other rates" in row
    doc["claims"][0]["tests"] = ["shared lr 0.5"]
    (folder / "robustness.json").write_text(json.dumps(doc))
    with pytest.raises(UserError, match="'tests' names a rate set it has no verdict at"):
        verdict_page.page(results)
    (folder / "robustness.json").write_text(json.dumps({"claims": [{"name": "x"}]}))
    with pytest.raises(UserError, match="robustness.json"):
        verdict_page.page(results)


@pytest.mark.parametrize(
    "args, said",
    [
        (["nope"], "error: unknown preset 'nope'; presets: controls, demo"),
        (["losp", "--scale", "cpu"], "error: results/losp/cpu/claims.json: missing"),
        (["losp", "--methods", "losp,adam"], "error: --methods adam: not in the committed result"),
        (["losp", "lr=0.1"], "error: lr= is the committed result's: not an override here"),
        (["losp", "seed=3"], "error: seed= is the committed result's: not an override here"),
        (["table1", "--scale", "cpu"], "error: overlap_local_sgd ran at 2 rates"),
    ],
)
def test_bad_input_is_one_line_before_any_run(tmp_path, args, said):
    proc = module_here(
        "analysis.reproduce.robustness", *args, "--out-root", str(tmp_path), cwd=REPO
    )
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith(said), line
    assert not list(tmp_path.iterdir())


@pytest.mark.e2e
def test_a_check_runs_only_the_changed_method_and_compares_every_claim(tmp_path, committed_smoke):
    out = tmp_path / "out"
    made = out / "robustness" / "results" / "pseudo_sync_speed" / "smoke"
    (made / "points").mkdir(parents=True)
    (made / "points" / "old-lr1.md").write_text("a rate set of an earlier check")  # removed
    proc = python(
        "-m", "analysis.reproduce.robustness", "pseudo_sync_speed", "--scale",
        "smoke", "--methods", "pseudo_sync", "--results", str(committed_smoke), "--out-root",
        str(out), *FAST,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads((made / "robustness.json").read_text())
    committed = json.loads(
        (committed_smoke / "pseudo_sync_speed" / "smoke" / "claims.json").read_text()
    )["claims"]
    rate = doc["rates"]["pseudo_sync"]
    names = [f"pseudo_sync lr {rate / 2:g} (/2)", f"pseudo_sync lr {rate * 2:g} (x2)"]
    assert [p["name"] for p in doc["points"]] == names and doc["seeds"] == [0, 1]
    assert [c["name"] for c in doc["claims"]] == [c["name"] for c in committed]
    for c in doc["claims"]:
        assert list(c["points"]) == names
        assert all(v in ("holds", "does not hold", "cannot tell") for v in c["points"].values())
    # only pseudo_sync ran, at the two rates, on the committed seeds; sync_sgd's runs are the
    # committed records
    runs = out / "robustness" / "pseudo_sync_speed"
    assert sorted(p.name for p in runs.iterdir()) == [
        f"pseudo_sync-lr{rate / 2:g}", f"pseudo_sync-lr{rate * 2:g}"
    ]  # fmt: skip
    for folder in runs.iterdir():
        done = [r for r in (folder / "runs").iterdir() if (r / "summary.json").is_file()]
        assert len(done) == 2 and all(r.name.startswith("pseudo_sync-seed") for r in done)
    assert sorted(p.name for p in (made / "points").iterdir()) == sorted(
        f"pseudo_sync-lr{r:g}.md" for r in (rate / 2, rate * 2)
    )
    assert "Robust to the rate:" in (made / "robustness.md").read_text()
    assert not (committed_smoke / "pseudo_sync_speed" / "smoke" / "robustness").exists()
