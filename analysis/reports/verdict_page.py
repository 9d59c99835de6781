"""results/README.md: one row per headline claim of the seed papers, with its verdict.

    python -m analysis.reports.verdict_page [--results results] [--out results/README.md]

(`make report` ends with it.) Reads every committed result's `claims.json` (written by the
report beside `claims.md`: analysis/claims/ `ClaimResult.as_dict`) and writes one page. Its
first table holds the verdicts that count: the tested claims at the scales whose controls pass
(`controls_pass`: at least one control ran there and every control there holds), the controls
first, then per paper each claim with the suite's setting, n, the verdict, the effect with its
interval (and, where an equivalence cannot tell, the difference's own direction if it is
significant), the minimum detectable difference at 80% power (and the n needed where the test
cannot tell), and the command that regenerates it. Listed apart, not counted: each scale whose
controls do not pass (its failing controls named), and the quantities the timing model fixes
("by the model": reported, not tested). A headline claim no committed result tests is listed
with the reason (`NOT_TESTED`). The last line counts the first table's verdicts and says what
was left out. Nothing here computes a statistic: every number is the report's.

What it reads and writes (issue 50): every result folder under --results (`<preset>/<scale>/`
holding any file a report writes) must hold its `claims.json`, a JSON object whose `claims` is a
list of claims as the report writes them (empty for a preset that checks none, the demo), and
its `claims.md` (the page links it): a part missing or damaged is one `error:` line naming the
file, exit code 2, and no page is written (a page without a result's rows would read as
complete). It writes one file, --out (by default `<results>/README.md`), all at once (a
temporary file renamed over it: a full disk or a stop leaves the previous page); --out must be a
new file in an existing folder or a previous verdicts page, never a directory, a file inside a
result folder (its input among them) nor any other existing file, refused in one line before any
work. A full disk or an I/O error while writing: one line, exit code 1. Ctrl-C or a stop signal:
one line, exit code 128 + the signal's number (130 for Ctrl-C), the previous page left
(analysis/stops.py).
"""

from __future__ import annotations

import sys

if __name__ == "__main__":  # a stop while the statistics import (seconds): one line, no page
    from analysis.stops import stop_early

    stop_early("verdict_page")

import argparse  # noqa: E402 - after the stop handlers above
import math  # noqa: E402
import os  # noqa: E402
from collections.abc import Sequence  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

from analysis.claims.rules import base_verdict  # noqa: E402
from analysis.reports.staging import report_files  # noqa: E402
from analysis.stats import _magnitude, _signed  # noqa: E402
from analysis.stops import stoppable  # noqa: E402
from experiments.errors import OutputError, UserError, one_line_errors  # noqa: E402
from experiments.store.provenance import REPO  # noqa: E402
from experiments.store.records import (  # noqa: E402
    DamagedRecord,
    kind,
    read_json_object,
    write_text_atomic,
)

TITLE = "# The seed papers' claims: verdicts"  # the page's first line: what --out may replace
#: Where a result's replication on fresh seeds is (analysis/reproduce/replicate.py --publish):
#: `<result>/replication/replication.json`, its claims' verdicts on seeds never used before.
REPLICATION = ("replication", "replication.json")
#: Where a result's check at other learning rates is (analysis/reproduce/robustness.py
#: --publish): `<result>/robustness/robustness.json`, its claims' verdicts at each other rate set.
ROBUSTNESS = ("robustness", "robustness.json")
#: Where a result's run at the n from power is (analysis/reproduce/power.py --publish):
#: `<result>/power/power.json`, its claims' verdicts at the n their margin needs.
POWER = ("power", "power.json")
#: The largest n from power that is run (issue 49: "at most 24"): a claim that needs more is
#: left at its committed n.
POWER_MAX_N = 24
DECISIVE = ("holds", "does not hold")

# Where each claim comes from: (paper, figure or table).
SOURCES: dict[str, tuple[str, str]] = {
    "control_local_sgd_loses_accuracy_at_large_tau": (
        "control (positive)",
        "Overlap-Local-SGD sec. 1",
    ),
    "control_noniid_below_iid": ("control (positive)", "Overlap-Local-SGD tables 1 vs 2"),
    "control_sync_slower_on_a_modeled_network": ("control (positive)", "timing model"),
    "control_osp_equals_losp_on_ideal_network": ("control (negative)", "identity"),
    # Overlap-Local-SGD (Wang, Liang, Joshi, ICASSP 2020), by its sections
    "overlap_best_at_every_tau": (
        "Overlap-Local-SGD",
        'sec. 4, table 1: "given a fixed number of tau, Overlap-Local-SGD always achieves the '
        'best test accuracy among all methods"; table 2 (non-IID)',
    ),
    "overlap_above_sync_at_small_tau": (
        "Overlap-Local-SGD",
        'sec. 1, fig. 1: "By setting a proper number of updates (tau=1,2), Overlap-Local-SGD '
        "can even achieve a higher accuracy\" (tested at tables 1 and 2's setting)",
    ),
    "eamsgd_worst": (
        "Overlap-Local-SGD",
        'sec. 4, table 1: "EAMSGD has significant worse performance than others"',
    ),
    "cocod_diverges_at_large_tau_overlap_does_not": (
        "Overlap-Local-SGD",
        'sec. 4, table 2: "comparable test accuracy and overcome the divergence issue when tau '
        'is large"',
    ),
    "overlap_ratio_far_below_sync": (
        "Overlap-Local-SGD",
        'sec. 4, fig. 4(a): "reduces the communication-to-computation ratio from 34.6% to 1.5%"',
    ),
    "powersgd_exposed_above_local_methods": (
        "Overlap-Local-SGD",
        'sec. 4, fig. 4: "the additional synchronization latency of PowerSGD is still much '
        'higher than Local SGD methods"',
    ),
    "overlap_sooner_than_sync_and_local": (
        "Overlap-Local-SGD",
        'sec. 4, figs. 4, 5; sec. 6: "the best error-runtime trade-off"',
    ),
    "overlap_stragglers_do_not_wait": (
        "Overlap-Local-SGD",
        'sec. 3, "Mitigating the Effect of Stragglers": "there is no idle time in waiting for '
        'the slow ones"',
    ),
    # LOSP (IEEE JSAC 2021) and OSP (ICPP 2019): the abstract
    "losp_beats_osp": ("LOSP", "abstract: local compensation mitigates OSP's staleness"),
    "losp_sooner_than_osp": ("LOSP", "abstract: local compensation, time to accuracy"),
    "losp_beats_state_of_the_art": (
        "LOSP",
        'abstract: "significantly improves performance over the state-of-the-art ones in terms '
        'of ... convergence accuracy"',
    ),
    "losp_sends_less_than_sync": (
        "LOSP",
        'abstract: "... and communication cost" (against sync SGD; OSP sends the same)',
    ),
    "osp_losp_faster_than_sync_under_heterogeneity": (
        "OSP / LOSP",
        'abstract: "fast workers have to wait for slow ones" (OSP solves it)',
    ),
    "osp_losp_fast_workers_do_not_wait": (
        "OSP / LOSP",
        "abstract: under-utilization of fast workers, fast workers' idle time",
    ),
    # pseudo-synchronous SGD: the abstract
    "pseudo_sync_matches_sync": (
        "pseudo-synchronous SGD",
        'abstract: "a comparable accuracy rate with standard synchronous SGD"',
    ),
    "pseudo_sync_faster_than_sync": (
        "pseudo-synchronous SGD",
        'abstract: "our method can speed up the training process"',
    ),
    "pseudo_sync_scales_better": (
        "pseudo-synchronous SGD",
        'abstract: "more efficient weak scalability compared to the traditional synchronous SGD"',
    ),
    "streaming_diloco_less_peak_same_accuracy": ("Streaming DiLoCo", "peak bandwidth"),
    "diloco_not_worse_than_local_sgd": ("DiLoCo", "outer optimizer"),
    "overlapping_methods_reach_target_sooner_on_slow_network": ("Streaming DiLoCo", "overlap"),
}
PAPER_ORDER = [
    "control (positive)",
    "control (negative)",
    "Overlap-Local-SGD",
    "LOSP",
    "OSP / LOSP",
    "pseudo-synchronous SGD",
    "DiLoCo",
    "Streaming DiLoCo",
]
# Headline claims of the seeds that no committed result tests, and why.
NOT_TESTED: list[tuple[str, str, str, str]] = [
    (
        "LOSP",
        "communication cost",
        "LOSP's communication cost is lower than OSP's",
        "equal by construction here: in the suite's reading LOSP and OSP send the same "
        "accumulated update each round (algorithms/losp.py), so their bytes are the same",
    ),
    (
        "LOSP",
        "abstract, theorems",
        "the same convergence rate as sequential SGD for non-convex problems, and a linear "
        "speedup in the number of workers and in the average number of local updates",
        "theorems, proved in the paper; a measured speedup would need runs at several worker "
        "counts and local-update counts at one target, which no preset sweeps yet",
    ),
    (
        "Overlap-Local-SGD",
        "sec. 4, fig. 4(c)",
        "at tau = 2 roughly the same loss-versus-iterations convergence as fully synchronous SGD",
        "no claim compares loss curves yet (the runs record the training loss at each "
        "evaluation; the claims compare end points and times)",
    ),
    (
        "Overlap-Local-SGD",
        "sec. 4, fig. 5(c)",
        "non-IID: better convergence in error-versus-iterations than the other methods",
        "as fig. 4(c): no claim compares curves yet",
    ),
    (
        "Overlap-Local-SGD",
        "sec. 5, theorem 1",
        "converges to a stationary point of non-convex objectives at the rate 1/sqrt(mK) of "
        "fully synchronous SGD",
        "a theorem, proved in the paper",
    ),
    (
        "pseudo-synchronous SGD",
        "abstract",
        'more efficient weak scalability than "those in previous related work"',
        "the abstract names no method; the suite compares it with synchronous SGD only",
    ),
    (
        "pseudo-synchronous SGD",
        "abstract",
        "93.4% weak scaling efficiency on 64 nodes, 90.5% on 128 (Tianhe II, up to 12,288 cores)",
        "a measurement of that machine; the suite's scaling is by its timing model",
    ),
]
# A claim a result still holds but another preset now measures on a better design: (preset,
# claim) -> (the preset that measures it, why). Listed under the table, not counted.
SUPERSEDED: dict[tuple[str, str], tuple[str, str]] = {
    ("pseudo_sync", "pseudo_sync_faster_than_sync"): (
        "pseudo_sync_speed",
        "its time to target was known once a pass (one evaluation per epoch); on a time "
        "budget every eighth of a pass, interpolated",
    ),
}
# Each preset's setting, in a few words (its conf/experiment/<preset>.yaml says it in full).
SETTINGS = {
    "controls": "4 workers; 1 Gbps modeled network (OSP/LOSP: ideal), equal workers",
    "losp": "4 workers, one 3x slower; 1 Gbps modeled network; tau 1, 2, 4; time budget",
    "overlap_straggler": "4 workers, every step slowed at random (lognormal, sigma 0.5); "
    "calibrated network; tau 2; time budget",
    "pseudo_sync": "2, 4, 8 workers (weak scaling); 1 Gbps modeled network",
    "pseudo_sync_speed": "4 workers; 1 Gbps modeled network; time budget",
    "overlap_sync": "4 workers, IID and non-IID (35% one class); tau 1, 2; ideal network",
    "table1": "4 workers, IID; tau 1, 2, 4, 8",
    "table2": "4 workers, non-IID (35% one class); tau 1, 2, 4, 8",
    "fig4": "4 workers; calibrated 1 Gbps network; tau 2",
    "fig5": "4 workers, non-IID; calibrated network; tau 2",
    "low_comm": "4 workers; ideal, 10 Gbps and WAN networks; tau 16",
    "demo": "4 workers, 5 epochs; tau 4",
}
# Where a preset's setting differs at a scale: the non-IID tables at fmnist run the paper's 64%
# on 8 workers (scale.noniid_table_workers / noniid_table_fraction; 4 workers cannot reach it on
# the class-balanced subset). tests/test_paper_presets.py checks these against the configs.
SCALE_SETTINGS = {
    ("table2", "fmnist"): "8 workers, non-IID (64% one class, the paper's); tau 1, 2, 4, 8",
    ("fig5", "fmnist"): "8 workers, non-IID (64% one class, the paper's); calibrated network; "
    "tau 2",
}
# The presets' commands (Makefile).
COMMANDS = {
    "controls": "make controls",
    "losp": "make losp",
    "overlap_straggler": "make overlap-straggler",
    "pseudo_sync": "make pseudo-sync",
    "pseudo_sync_speed": "make pseudo-sync-speed",
    "overlap_sync": "make overlap-sync",
    "table1": "make table1",
    "table2": "make table2",
    "fig4": "make fig4",
    "fig5": "make fig5",
    "low_comm": "make report",
    "demo": "make demo",
}


VERDICT_PRESETS = (
    "controls",
    "losp",
    "overlap_straggler",
    "pseudo_sync",
    "pseudo_sync_speed",
    "overlap_sync",
)


def _command(preset: str, scale: str) -> str:
    """The make command that regenerates a result: the verdicts' presets at VERDICT_SCALE
    (default fmnist), the others at SCALE (default cpu)."""
    command = COMMANDS.get(preset, "make report")
    if preset in VERDICT_PRESETS and scale != "fmnist":
        return f"{command} VERDICT_SCALE={scale}"
    if preset not in VERDICT_PRESETS and scale != "cpu":
        return f"{command} SCALE={scale}"
    return command


def result_folders(results: Path) -> list[Path]:
    """The result folders under `results`: each `<preset>/<scale>/` holding a file a report
    writes (a report's staging folders, `.<name>.*.tmp`, and other hidden entries left out)."""
    names = report_files()
    out = []
    for folder in sorted(results.glob("*/*")):
        if folder.name.startswith(".") or folder.parent.name.startswith("."):
            continue
        if folder.is_dir():
            try:
                if any(p.name in names for p in folder.iterdir()):
                    out.append(folder)
            except OSError as error:
                raise UserError(f"{folder}: unreadable ({error.strerror or error})") from None
    return out


# A claim's fields the page reads, and the JSON types each may have (None: may be null).
FIELDS = {"name": (str,), "text": (str,), "verdict": (str,), "deciding": (dict, type(None))}
NUMBERS = ("estimate", "low", "high", "level", "mdd", "margin")
TEXTS = ("unit", "kind", "test", "why", "sign")
COUNTS = ("n", "n_needed")


def read_claims(path: Path) -> list[dict]:
    """The claims of one `claims.json`, each checked for what the page reads: a DamagedRecord
    naming the file and the field otherwise."""
    data = read_json_object(path)
    claims = data.get("claims")
    if not isinstance(claims, list):
        raise DamagedRecord(path, f"'claims' is {kind(claims)}, not a list")
    for i, item in enumerate(claims):
        where = f"claims[{i}]"
        if not isinstance(item, dict):
            raise DamagedRecord(path, f"{where} is {kind(item)}, not an object")
        for key, types in FIELDS.items():
            if key not in item and key == "deciding":
                continue
            if key not in item:
                raise DamagedRecord(path, f"{where} has no '{key}'")
            if not isinstance(item[key], types):
                raise DamagedRecord(path, f"{where}.{key} is {kind(item[key])}")
        deciding = item.get("deciding") or {}
        for key in NUMBERS:
            value = deciding.get(key)
            if value is not None and not _finite(value):
                raise DamagedRecord(path, f"{where}.deciding.{key} is {kind(value)}, not a number")
        for key in COUNTS:
            value = deciding.get(key)
            if value is not None and not (_finite(value) and float(value).is_integer()):
                raise DamagedRecord(path, f"{where}.deciding.{key} is {kind(value)}, not a count")
        for key in TEXTS:
            value = deciding.get(key)
            if value is not None and not isinstance(value, str):
                raise DamagedRecord(path, f"{where}.deciding.{key} is {kind(value)}, not text")
    return claims


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def load(results: Path) -> list[dict]:
    """Every claim of every result folder under `results` (`result_folders`), with its preset,
    scale and folder. A folder without its `claims.json` or `claims.md`, or with a damaged
    `claims.json`, is a UserError naming the file: a page without its rows would look whole."""
    out = []
    for folder in result_folders(results):
        path = folder / "claims.json"
        for part in (path, folder / "claims.md"):
            if not part.exists():
                raise UserError(
                    f"{part}: missing (a result folder without it has no verdicts to list: "
                    f"rerun its report, {_command(folder.parent.name, folder.name)})"
                )
        if not (folder / "claims.md").is_file():
            raise DamagedRecord(folder / "claims.md", "not a file")
        preset, scale = folder.parent.name, folder.name
        again, rates, more = replication(folder), robustness(folder), power(folder)
        for item in read_claims(path):
            rerun, other = again.get(item["name"]), rates.get(item["name"])
            out.append(
                {**item, "preset": preset, "scale": scale, "dir": folder, "again": rerun,
                 "rates": other, "power": more.get(item["name"])}
            )  # fmt: skip
    return out


def robustness(folder: Path) -> dict[str, dict]:
    """Claim name -> its verdict at every other rate set that tests it (`points`: point name ->
    verdict; the check's `tests` where it names them, else every set) from the result's
    published robustness check, if it has one; a damaged one is a DamagedRecord naming the
    file."""
    path = folder.joinpath(*ROBUSTNESS)
    if not path.exists():
        return {}
    claims = read_json_object(path).get("claims")
    if not isinstance(claims, list):
        raise DamagedRecord(path, "no 'claims' list")
    out = {}
    for i, c in enumerate(claims):
        points = c.get("points") if isinstance(c, dict) else None
        if not (
            isinstance(c.get("name"), str)
            and isinstance(points, dict)
            and all(isinstance(v, str) for v in points.values())
        ):
            raise DamagedRecord(path, f"claims[{i}] has no 'name' text or 'points' verdicts")
        tested = c.get("tests", list(points))
        if not (isinstance(tested, list) and all(t in points for t in tested)):
            raise DamagedRecord(path, f"claims[{i}] 'tests' names a rate set it has no verdict at")
        out[c["name"]] = {"points": {name: points[name] for name in tested}}
    return out


def robust(item: dict) -> bool | None:
    """Whether a decisive verdict is the same at every other rate set checked (None: not
    decisive, or not checked yet)."""
    other = item.get("rates")
    if item["verdict"] not in DECISIVE or other is None or not other["points"]:
        return None
    return all(base_verdict(v) == item["verdict"] for v in other["points"].values())


def _rates_text(item: dict) -> str:
    """What the row says of the verdict at other learning rates."""
    if item["verdict"] not in DECISIVE:
        return ""
    if item.get("rates") is None or not item["rates"]["points"]:
        return "; not yet checked at other rates"
    points = item["rates"]["points"]
    if robust(item):
        return f"; robust to the rate ({len(points)} other rate sets)"
    by: dict[str, list[str]] = {}
    for name, verdict in points.items():
        if base_verdict(verdict) != item["verdict"]:
            by.setdefault(verdict, []).append(name)
    return "; **not robust to the rate**: " + "; ".join(
        f"{verdict} at {', '.join(names)}" for verdict, names in by.items()
    )


def power(folder: Path) -> dict[str, dict]:
    """Claim name -> its verdict at the n its margin needs (`verdict`, `n`) from the result's
    published run at the n from power, for the claims that needed it (`powered`); a damaged one
    is a DamagedRecord naming the file."""
    path = folder.joinpath(*POWER)
    if not path.exists():
        return {}
    data = read_json_object(path)
    n, claims = data.get("n"), data.get("claims")
    if not isinstance(n, int) or not isinstance(claims, list):
        raise DamagedRecord(path, "no whole number 'n' or no 'claims' list")
    out = {}
    for i, c in enumerate(claims):
        if not (
            isinstance(c, dict)
            and all(isinstance(c.get(k), str) for k in ("name", "verdict"))
            and isinstance(c.get("powered"), bool)
        ):
            raise DamagedRecord(path, f"claims[{i}] has no 'name', 'verdict' or 'powered'")
        if c["powered"]:
            out[c["name"]] = {"verdict": c["verdict"], "n": n}
    return out


def powerable(item: dict, max_n: int = POWER_MAX_N) -> bool:
    """Whether a claim cannot tell and reaches its margin at an n above its own and at most
    `max_n` (its deciding comparison's `n_needed`)."""
    d = item.get("deciding") or {}
    n, want = d.get("n"), d.get("n_needed")
    return (
        item["verdict"].startswith("cannot tell")
        and isinstance(n, int)
        and isinstance(want, int)
        and n < want <= max_n
    )


def replication(folder: Path) -> dict[str, dict]:
    """Claim name -> its replication (`replication` and `seeds`: the verdict on the fresh
    seeds, and which) from the result's published replication, if it has one; a damaged one is
    a DamagedRecord naming the file."""
    path = folder.joinpath(*REPLICATION)
    if not path.exists():
        return {}
    data = read_json_object(path)
    seeds, claims = data.get("seeds_text"), data.get("claims")
    if not isinstance(seeds, str) or not isinstance(claims, list):
        raise DamagedRecord(path, "no 'seeds_text' text or no 'claims' list")
    out = {}
    for i, c in enumerate(claims):
        if not (
            isinstance(c, dict) and all(isinstance(c.get(k), str) for k in ("name", "replication"))
        ):
            raise DamagedRecord(path, f"claims[{i}] has no 'name' and 'replication' texts")
        out[c["name"]] = {"replication": c["replication"], "seeds": seeds}
    return out


def replicated(item: dict) -> bool | None:
    """Whether a decisive verdict replicates on fresh seeds (None: not decisive, or not rerun
    yet)."""
    again = item.get("again")
    if item["verdict"] not in DECISIVE or again is None:
        return None
    return again["replication"] == item["verdict"]


def row(item: dict, results: Path, counted: bool = False) -> list[str]:
    """The page's cells for one checked claim (`counted`: in the page's totals)."""
    paper, where = SOURCES.get(item["name"], ("other", ""))
    d = item.get("deciding") or {}
    unit = d.get("unit", "acc")
    if d.get("estimate") is None:
        effect = d.get("why") or "–"
    elif d.get("why"):
        effect = f"{_signed(d['estimate'], unit)} ({d['why']})"
    elif d.get("kind") == "ratio":
        effect = f"ratio {d['estimate']:.3g}"
    elif unit == "ratio":  # a difference of ratios (efficiencies): in points of percent
        effect = f"{100 * d['estimate']:+.1f} points"
    else:
        effect = _signed(d["estimate"], unit)
    if d.get("low") is not None and d.get("high") is not None and d.get("test") != "model":
        level = f"{100 * d['level']:g}%" if d.get("level") is not None else "interval"
        if d.get("kind") == "ratio":
            effect += f" [{d['low']:.3g}, {d['high']:.3g}] ({level})"
        elif unit == "ratio":
            effect += f" [{100 * d['low']:+.1f}, {100 * d['high']:+.1f}] ({level})"
        else:
            effect += f" [{_signed(d['low'], unit)}, {_signed(d['high'], unit)}] ({level})"
    if d.get("sign"):  # an equivalence that cannot tell, with the difference's own direction
        effect += f"; the difference itself {d['sign']}"
    mdd = "–"
    if d.get("mdd") is not None:
        mdd = _magnitude(d["mdd"], unit)
        if d.get("margin") is not None:
            mdd += f" (margin {_magnitude(d['margin'], unit)})"
        needed, n = d.get("n_needed"), d.get("n") or 0
        if item["verdict"].startswith("cannot tell") and needed and needed > n:
            mdd += f"; n = {needed} needed"
    n = str(d.get("n", "–")) + (" paired" if d.get("paired") else "")
    folder = (
        item["dir"].relative_to(results) if item["dir"].is_relative_to(results) else item["dir"]
    )
    setting = f"[{item['preset']}]({folder}/claims.md), {item['scale']}: " + SCALE_SETTINGS.get(
        (item["preset"], item["scale"]), SETTINGS.get(item["preset"], "")
    )
    verdict = f"**{item['verdict']}**"
    if item["verdict"] in DECISIVE and item.get("again") is None:
        verdict += "; not yet replicated"
    elif item.get("again") is not None:
        again = item["again"]
        how = {True: "replicates", False: "**does not replicate**", None: "fresh seeds"}
        verdict += f"; {how[replicated(item)]}: {again['replication']} on seeds {again['seeds']}"
    verdict += _rates_text(item)
    if item.get("power") is not None:
        more = item["power"]
        verdict += f"; at n = {more['n']} (`make power`): **{more['verdict']}**"
    elif powerable(item) and counted:  # (a quick run at a scale not counted: no)
        verdict += "; not yet run at the n its margin needs"
    return [
        f"{paper}: {where}",
        item["text"].split(" (")[0],
        setting,
        n,
        verdict,
        effect,
        mdd,
        f"`{_command(item['preset'], item['scale'])}`",
    ]


HEADER = ["source", "claim", "result, scale: setting", "n", "verdict", "effect [interval]", "MDD"]
HEADER.append("command")


def page(results: Path) -> str:
    """The whole page (module docstring)."""
    items = load(results)
    if not items:
        raise UserError(f"no claims.json under {results}/*/*: run the reports first (make report)")
    present = {it["preset"] for it in items}
    superseded = [
        it for it in items if SUPERSEDED.get((it["preset"], it["name"]), ("",))[0] in present
    ]
    items = [it for it in items if it not in superseded]
    order = {p: i for i, p in enumerate(PAPER_ORDER)}
    scales = {"fmnist": 0, "cpu": 1}
    items.sort(
        key=lambda it: (
            order.get(SOURCES.get(it["name"], ("other",))[0], 99),
            scales.get(it["scale"], 2),
            it["preset"],
        )
    )
    passing = controls_pass(items)
    modeled = [it for it in items if it["verdict"].endswith("(by the model)")]
    tested = [it for it in items if not it["verdict"].endswith("(by the model)")]
    counted = [it for it in tested if it["scale"] in passing]
    apart = [it for it in tested if it["scale"] not in passing]
    lines = [
        TITLE,
        "",
        "Generated by `python -m analysis.reports.verdict_page` (the last step of `make report`) "
        "from each committed result's `claims.json`; every number is its report's. Each claim is "
        "tested paired by seed at alpha = 0.05 (analysis/stats/: paired t-test; the exact "
        "sign-flip test where the differences have no spread; TOST for equivalence; Holm over "
        "a claim's comparisons). `effect` is the comparison the verdict rests on, with its "
        "interval; `MDD` its minimum detectable difference at 80% power, against the claim's "
        'margin, and the n that would reach the margin where it cannot tell. "by the model": '
        "a quantity the timing model fixes, the same on every seed, reported, not tested. "
        "Each result's claims.md has every comparison.",
        "",
        "The scales: `fmnist`, the verdicts' scale: the narrow ResNet-18 of the cpu scale on "
        "Fashion-MNIST at 14x14, 4 workers x 1,000 training images (the non-IID tables, "
        "table2 and fig5: 8 workers x 500 of the same 4,000, 64% of each from one class as in "
        "the paper, which 4 workers cannot reach on a class-balanced subset), 2,000 test images "
        "(one image = 0.0005 of accuracy), each method at its rate tuned at the preset's own "
        "setting on seeds 100-101 where the preset has a file conf/tuned/fmnist/<preset>.yaml "
        "(`make tune PRESET=<preset> SCALE=fmnist`), else at base LR 0.1 (the controls by "
        "design: they test the scale, not the methods); `cpu`: the same model on "
        "scikit-learn's 8x8 digits (300 test images: one image = 0.0033), each method at its "
        "rate tuned on seeds 100-101 at the preset's own setting (conf/tuned/cpu/<preset>.yaml, "
        "`make tune PRESET=<preset> SCALE=cpu`), else at the demo's (conf/tuned/cpu.yaml, "
        "`make tune SCALE=cpu`). Each table names its rates and any row off its method's tuned "
        'one. Neither is the papers\' ResNet-18 on CIFAR-10 (scale=paper): "holds" says the '
        "suite reproduces the claim at that scale.",
        "",
        "The verdicts count only at a scale whose controls pass (every control there holds: "
        "the scale can tell a real difference and reports a null as one), and only where a "
        "claim was tested: the first table. A scale whose controls do not pass is listed apart, "
        'its controls first, as quick runs; so are the quantities the timing model fixes ("by '
        'the model": reported, not tested).',
        "",
        "Each decisive verdict (holds, does not hold) is tested again on seeds never used for "
        "it nor for tuning (`make replicate PRESET=<preset> PUBLISH=1`, "
        "analysis/reproduce/replicate.py): it replicates when the fresh seeds give the same "
        'verdict; one that does not is counted as "did not replicate", not as decided; "not '
        'yet replicated" where no replication is committed. Each is also tested at other '
        "learning rates on the same seeds, one change at a time: each method at its "
        "neighbouring grid rates and every method at a shared rate (`make robustness "
        'PRESET=<preset> PUBLISH=1`, analysis/reproduce/robustness.py): "robust to the rate" '
        "where every rate set gives the verdict again, else where it does not. A claim that "
        f"cannot tell and whose margin is reached at an n of at most {POWER_MAX_N} is run at "
        "that n, the committed seeds and the next ones (`make power PRESET=<preset> "
        "PUBLISH=1`, analysis/reproduce/power.py): its row shows the verdict there beside the "
        "committed one; the totals are the committed n's.",
        "",
        *_table(counted, results, counted=True),
    ]
    for scale in sorted({it["scale"] for it in apart}, key=lambda s: scales.get(s, 2)):
        failing = ", ".join(
            f"{it['name']} {it['verdict']}"
            for it in items
            if it["scale"] == scale and _control(it) and it["verdict"] != "holds"
        )
        why = f"its controls do not pass: {failing}" if failing else "no control ran at it"
        lines += ["", f"At the {scale} scale, not counted ({why}):", ""]
        lines += _table([it for it in apart if it["scale"] == scale], results)
    if modeled:
        lines += [
            "",
            "By the model (set by the timing model, the same on every seed: not tested, "
            "not counted):",
            "",
        ]
        lines += _table(modeled, results)
    if superseded:
        lines += ["", "Measured again on a better design (the row above counts, not these):", ""]
        for it in superseded:
            by, why = SUPERSEDED[(it["preset"], it["name"])]
            lines.append(
                f"- {it['name']} in [{it['preset']}]({it['preset']}/{it['scale']}/claims.md) "
                f"({it['verdict']}): now [{by}]({by}/{it['scale']}/claims.md): {why}."
            )
    lines += ["", "Not tested by a committed result:", ""]
    for paper, where, text, why in NOT_TESTED:
        lines.append(f"- {paper} ({where}): {text}: {why}.")
    counts: dict[str, int] = {}
    for item in counted:  # a decisive verdict that did not replicate is not counted as decided
        said = "did not replicate" if replicated(item) is False else item["verdict"]
        counts[said] = counts.get(said, 0) + 1
    decisive = [it for it in counted if it["verdict"] in DECISIVE]
    again = [it for it in decisive if replicated(it) is not None]
    at = ", ".join(sorted(passing, key=lambda s: scales.get(s, 2))) or "none"
    aside = f"; not counted: {len(apart)} at scales whose controls do not pass"
    aside += f", {len(modeled)} by the model"
    aside += (
        f"; decisive verdicts rerun on fresh seeds: {len(again)} of {len(decisive)}, "
        f"{sum(replicated(it) for it in again)} replicated"
    )
    checked = [it for it in decisive if robust(it) is not None]
    aside += (
        f"; checked at other rates: {len(checked)} of {len(decisive)}, "
        f"{sum(robust(it) for it in checked)} robust"
    )
    underpowered = [it for it in counted if powerable(it)]
    if underpowered:
        at_n: dict[str, int] = {}
        for it in underpowered:
            if it.get("power") is not None:
                at_n[it["power"]["verdict"]] = at_n.get(it["power"]["verdict"], 0) + 1
        aside += (
            f"; cannot tell at an n their margin needs of at most {POWER_MAX_N}: "
            f"{len(underpowered)}, run at that n: {sum(at_n.values())}"
            + "".join(f", {k} {v}" for k, v in sorted(at_n.items()))
        )
    lines += [
        "",
        f"Verdicts (tested, at the scales whose controls pass: {at}): "
        + (", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "none")
        + f"{aside}.",
    ]
    return "\n".join(lines) + "\n"


def _control(item: dict) -> bool:
    return SOURCES.get(item["name"], ("",))[0].startswith("control")


def controls_pass(items: Sequence[dict]) -> set[str]:
    """The scales whose controls pass: at least one control ran there, and every control there
    holds (a positive control finds the difference it must; a negative one reports the null as
    one)."""
    verdicts: dict[str, list[bool]] = {}
    for item in items:
        if _control(item):
            verdicts.setdefault(item["scale"], []).append(item["verdict"] == "holds")
    return {scale for scale, held in verdicts.items() if all(held)}


def _table(items: Sequence[dict], results: Path, counted: bool = False) -> list[str]:
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    for item in items:
        cells = row(item, results, counted)
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return lines


def check_out(out: Path, results: Path) -> None:
    """Refuse (UserError, before any work) an --out that is not a page's place: a directory, a
    path in a folder that does not exist or cannot be written, a file inside a result folder
    (of --results or of the checkout's results/: its input among them), or an existing file
    that is not a previous verdicts page (a committed file named by mistake)."""
    if out.is_dir():
        raise UserError(f"--out {out} is a directory: name the page's file (e.g. {out}/README.md)")
    folder = out.parent
    if not folder.is_dir():
        raise UserError(f"--out {out}: its folder {folder} does not exist")
    here = out.resolve()
    for root in {results.resolve(), (REPO / "results").resolve()}:
        if here.is_relative_to(root) and len(here.relative_to(root).parts) > 2:
            inside = root / here.relative_to(root).parts[0] / here.relative_to(root).parts[1]
            if inside.is_dir():
                raise UserError(
                    f"--out {out} is inside the result folder {inside}: the page goes beside "
                    f"the results (default {results}/README.md), never into one"
                )
    if out.exists() or out.is_symlink():
        try:
            with open(out, "rb") as f:
                first = f.readline(len(TITLE.encode()) + 2)
        except OSError as error:
            raise UserError(f"--out {out}: cannot be read ({error.strerror or error})") from None
        if first.rstrip(b"\r\n") != TITLE.encode():
            raise UserError(
                f"--out {out} exists and is not a verdicts page: it is left as it is (name a new "
                "file, or a previous page)"
            )
    if not os.access(folder, os.W_OK | os.X_OK):
        raise UserError(f"--out {out}: its folder {folder} cannot be written")


@stoppable("verdict_page", "the previous page is unchanged, nothing was written")
def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry: 0 with the page written; 2 for bad input or a result folder missing a part
    (one `error:` line, nothing written); 1 when the page could not be written (a full disk:
    the previous page stays); 128 + N for a stop (analysis/stops.py)."""
    parser = argparse.ArgumentParser(
        prog="python -m analysis.reports.verdict_page", description=__doc__
    )
    parser.add_argument("--results", type=Path, default=REPO / "results", metavar="DIR")
    parser.add_argument("--out", type=Path, default=None, metavar="FILE")
    one_line_errors(parser)
    args = parser.parse_args(argv)
    out = args.out or args.results / "README.md"
    try:
        if not args.results.is_dir():
            raise UserError(f"--results {args.results} is not a directory")
        check_out(out, args.results)
        text = page(args.results)
    except UserError as error:
        print(f"error: {error}", file=sys.stderr, flush=True)
        return 2
    try:
        write_text_atomic(out, text)
    except OutputError as error:
        print(f"error: {error}: the previous page is unchanged", file=sys.stderr, flush=True)
        return error.exit_code
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
