"""experiment=low_comm (issue 17): the ledger's largest collective, the preset's grid at every
scale, and its three claims (Streaming DiLoCo's peak, DiLoCo against Local SGD, overlap on the
slowest network), each on hand-made frames per verdict and once through a report."""

from __future__ import annotations

import itertools
import zlib

import numpy as np
import pandas as pd
import pytest
import torch

from analysis.claims import CLAIMS, COMPARABLE, EQUAL_BYTES, FAR_LESS_PEAK, ClaimResult
from analysis.reports.report import report_experiment
from analysis.runs.compare import run_labels, split_rows
from analysis.runs.grid import GROUPS, compose_preset, expand_sweeps
from tests.fixtures import make_fixtures as fx
from tests.workers import run_workers

PEAK, SAME_PEAK = "streaming_diloco_less_peak_same_accuracy", "diloco_not_worse_than_local_sgd"
SOONER = "overlapping_methods_reach_target_sooner_on_slow_network"
MODEL = 700_000  # bytes of one model-sized average
BANDWIDTH = {"ideal": float("inf"), "ethernet10g": 10.0, "wan": 0.1}


# --- the ledger's largest collective -------------------------------------------------------------


def _peaks(rank: int, world_size: int) -> list[int]:
    from algorithms.comm import Comm

    comm = Comm()
    seen = []
    comm.mean_([torch.zeros(10, dtype=torch.float64)])  # 80 bytes
    seen.append(comm.ledger.peak_bytes)
    comm.mean_async([torch.zeros(5, dtype=torch.float64)]).wait()  # 40: the peak stays
    seen.append(comm.ledger.peak_bytes)
    comm.mean_([torch.zeros(100, dtype=torch.float64)], account=False)  # bookkeeping
    seen.append(comm.ledger.peak_bytes)
    comm.mean_async([torch.zeros(30, dtype=torch.float64)]).wait()  # 240
    seen.append(comm.ledger.peak_bytes)
    fp16 = Comm(compression="fp16")
    fp16.mean_([torch.zeros(30, dtype=torch.float64)])  # the wire's 2 bytes a value
    seen.append(fp16.ledger.peak_bytes)
    return seen


@pytest.mark.dist
def test_ledger_keeps_the_largest_accounted_collective_in_wire_bytes():
    for seen in run_workers(_peaks, 2):
        assert seen == [80, 80, 80, 240, 60]


# --- the preset ----------------------------------------------------------------------------------


@pytest.mark.parametrize("scale", ["smoke", "cpu", "paper"])
def test_low_comm_grid_runs_45_points_that_all_validate(scale):
    from experiments.preflight import validate
    from tests.compose import resolved

    preset = compose_preset("low_comm", scale)
    points = expand_sweeps(preset.sweeps, set(GROUPS))
    assert len(points) == 45  # 5 methods x 3 networks x 3 seeds
    methods = {p["algorithm.name"] for p in points}
    assert methods == {"local_sgd", "overlap_local_sgd", "cocod_sgd", "diloco", "streaming_diloco"}
    assert {p["network.name"] for p in points} == {"ideal", "ethernet10g", "wan"}
    streaming = [p for p in points if p["algorithm.name"] == "streaming_diloco"]
    assert len(streaming) == 9
    assert all(p["algorithm.fragments"] == 2 and p["algorithm.sync_delay"] == 7 for p in streaming)
    assert preset.report["claims"] == [PEAK, SAME_PEAK, SOONER]
    assert all(name in CLAIMS for name in preset.report["claims"])
    # every point composes and passes the run's validation (Streaming DiLoCo's schedule check:
    # sync_delay 7 < tau / fragments = 8) at this scale
    overrides = {
        (p["algorithm.name"], p.get("algorithm.fragments"), p.get("algorithm.sync_delay"))
        for p in points
    }
    for name, fragments, delay in sorted(overrides, key=str):
        extra = [] if fragments is None else [f"algorithm.fragments={fragments}"]
        extra += [] if delay is None else [f"algorithm.sync_delay={delay}"]
        plain = resolved("experiment=low_comm", f"scale={scale}", f"algorithm={name}",
                         "network=wan", *extra)  # fmt: skip
        validate(plain)
        assert plain["tau"] == 16 and plain["timing"] == "virtual"
        assert plain["compute"]["step_time_s"] == plain["scale"]["step_time_s"]


# --- hand-made runs ------------------------------------------------------------------------------


def run(
    algorithm: str,
    seed: int,
    acc: float,
    *,
    network: str = "wan",
    peak: float = MODEL,
    per_step: float = MODEL / 16,
    train: float = 10.0,
    to_target: float | None = 5.0,
    status: str = "completed",
    **knobs,
) -> dict:
    """One run's summary columns as `load_summaries` gives them, plus the time-to-target
    columns `analysis.reports.report` adds (`to_target` None: never reached the target)."""
    return {
        "run_dir": f"{algorithm}-{network}-{seed}-{sorted(knobs.items())}",
        "algorithm.name": algorithm,
        **{f"algorithm.{k}": v for k, v in knobs.items()},
        "tau": 16,
        "seed": seed,
        "epochs": 20,
        "network.name": network,
        "network.bandwidth_gbps": BANDWIDTH[network],
        "summary.status": status,
        "summary.final/test_acc": acc,
        "summary.steps": 240,
        "summary.comm/bytes": per_step * 240,
        "summary.comm/peak_bytes": peak,
        "summary.time/train_s": train,
        "metrics.reached_target": to_target is not None,
        "metrics.time_to_target_s": float("nan") if to_target is None else to_target,
    }


N = 8  # seeds a method


def noise(key: str, n: int) -> np.ndarray:
    """`n` draws of one method's own luck, deterministic per `key`, centred and scaled to mean
    0 and sd 1 (zeros for n < 2): a side's mean is what the test says, and paired differences
    of two methods have spread."""
    if n < 2:
        return np.zeros(n)
    draws = np.random.default_rng(zlib.crc32(key.encode())).standard_normal(n)
    return (draws - draws.mean()) / draws.std(ddof=1)


def shared(n: int) -> np.ndarray:
    """The luck a seed gives every method alike: seeds 0..n-1, centred."""
    return np.arange(n) - (n - 1) / 2


def seeds(
    algorithm: str, acc: float, spread: float = 0.002, n: int = N, shared_sd: float = 0.002, **kw
) -> list[dict]:
    """`n` seeds with accuracies acc + shared_sd x a seed's luck (every method's alike, what
    pairing removes) + spread x the method's own noise (per algorithm, knobs and network)."""
    own = noise(f"{algorithm}|{sorted(kw.items())}", n)
    return [
        run(algorithm, s, float(acc + shared_sd * shared(n)[s] + spread * own[s]), **kw)
        for s in range(n)
    ]


def check(name: str, *groups: list[dict], report: dict | None = None) -> ClaimResult:
    frame = pd.DataFrame.from_records([r for group in groups for r in group])
    return CLAIMS[name](frame, report or {"target_acc": 0.9})


# (a) Streaming DiLoCo: far less peak, about the same accuracy


def test_streaming_diloco_far_less_peak_same_accuracy_holds():
    result = check(
        PEAK,
        seeds("streaming_diloco", 0.971, peak=0.56 * MODEL),
        seeds("diloco", 0.970),
    )
    assert result.holds is True, result.details
    assert result.evidence == (
        f"1 cell: holds 1; about the same = within {COMPARABLE:g}, far less = under "
        f"{FAR_LESS_PEAK:g}x"
    )
    (line,) = result.details
    assert line.startswith(
        "tau=16: holds: accuracy holds: streaming_diloco 0.971 vs diloco "
        "0.970 (paired, n=8): difference +0.001, 90% CI ["
    )
    # the peak is the same on every seed: the timing model's, reported, not bootstrapped
    assert line.endswith(
        "peak bytes per collective holds (by the model): streaming_diloco 392 kB (n=8) vs "
        "diloco 700 kB (n=8): ratio 0.56 vs 0.6, by the model (the same value on every seed of "
        "both sides: set by the timing model, not sampled)"
    )


@pytest.mark.parametrize(
    "streaming, verdict",
    [
        (dict(acc=0.90), False),  # far apart: wholly outside the margin
        (dict(acc=0.965, spread=0.03), None),  # noisy: the 90% CI straddles -margin
        (dict(acc=0.971, peak=0.9 * MODEL), False),  # the peak is not far less
        (dict(acc=0.971, n=1), None),  # one run: no interval
    ],
    ids=["accuracy apart", "noisy accuracy", "peak not far less", "one seed"],
)
def test_streaming_diloco_claim_fails_on_either_half(streaming, verdict):
    kw = {"peak": 0.56 * MODEL, **streaming}
    result = check(PEAK, seeds("streaming_diloco", kw.pop("acc"), **kw), seeds("diloco", 0.970))
    assert result.holds is verdict, result.details


def test_streaming_diloco_claim_compares_each_network_and_each_fragment_count_apart():
    runs = []
    for network in ("ideal", "wan"):
        runs += seeds("diloco", 0.970, network=network)
        runs += seeds("streaming_diloco", 0.971, network=network, peak=0.56 * MODEL, fragments=2)
        runs += seeds("streaming_diloco", 0.971, network=network, peak=0.9 * MODEL, fragments=1)
    result = check(PEAK, runs)
    assert result.holds is False  # fragments=1 has DiLoCo's peak
    assert [line.split(": ")[:2] for line in result.details] == [
        ["network=ideal, tau=16", "does not hold"],
        ["network=ideal, tau=16", "holds"],
        ["network=wan, tau=16", "does not hold"],
        ["network=wan, tau=16", "holds"],
    ]
    assert "streaming_diloco (fragments=1) " in result.details[0]
    assert "streaming_diloco (fragments=2) " in result.details[1]


def test_streaming_diloco_claim_without_either_method_cannot_tell():
    assert check(PEAK, seeds("diloco", 0.97)).holds is None
    assert check(PEAK, seeds("streaming_diloco", 0.97)).evidence == (
        "no completed or diverged diloco run"
    )


# (b) DiLoCo no worse than Local SGD at the same communication


@pytest.mark.parametrize(
    "diloco, spread, verdict",
    [
        (0.975, 0.002, True),  # better
        (0.968, 0.002, True),  # a little lower, but within the margin: comparable
        (0.90, 0.002, False),  # clearly worse
        (0.96, 0.02, None),  # noisy: 0.005 above -margin against an MDD of 0.02
    ],
    ids=["better", "comparable", "worse", "noisy"],
)
def test_diloco_not_worse_than_local_sgd_is_non_inferiority(diloco, spread, verdict):
    result = check(SAME_PEAK, seeds("diloco", diloco, spread), seeds("local_sgd", 0.970))
    assert result.holds is verdict, result.details
    assert f"vs -{COMPARABLE:g}, paired t p" in result.details[0]  # paired by seed
    assert "(paired, n=8)" in result.details[0]
    assert result.evidence.endswith(f"comparable = not more than {COMPARABLE:g} below")


def test_diloco_claim_needs_equal_bytes_per_step():
    more = MODEL / 16 * (1 + 2 * EQUAL_BYTES)
    result = check(SAME_PEAK, seeds("diloco", 0.975, per_step=more), seeds("local_sgd", 0.97))
    assert result.holds is None
    assert result.details == (
        "tau=16: cannot tell: not at equal bytes per step: diloco 52.5 kB/step vs "
        "local_sgd 43.8 kB/step",
    )
    # the one average more of finish() (16 vs 15 per run) is within the tolerance
    close = MODEL / 16 * 16 / 15
    assert check(SAME_PEAK, seeds("diloco", 0.975, per_step=close), seeds("local_sgd", 0.97)).holds


def test_diloco_claim_counts_diverged_runs_as_zero():
    diverged = [run("diloco", s, 0.1, status="diverged") for s in range(N)]
    result = check(SAME_PEAK, diverged, seeds("local_sgd", 0.97))
    assert result.holds is False
    assert (
        "diloco (8/8 diverged, as 0) 0.000 vs local_sgd 0.970 (paired, n=8)" in (result.details[0])
    )


# (c) overlapping methods reach the target sooner on the slowest network

OVERLAPPING = ("streaming_diloco", "overlap_local_sgd", "cocod_sgd")
BLOCKING = ("local_sgd", "diloco")


def timed(overlap_s: float, block_s: float, network: str = "wan", **kw) -> list[dict]:
    """Every method at 8 seeds: overlapping ones reach the target at `overlap_s` on average,
    blocking ones at `block_s`, + 0.1 s x a seed's shared luck + 0.1 s x the method's own
    noise."""
    runs = []
    for name in (*OVERLAPPING, *BLOCKING):
        base = overlap_s if name in OVERLAPPING else block_s
        own = noise(f"{name}|{network}", N)
        for s in range(N):
            to = float(base + 0.1 * shared(N)[s] + 0.1 * own[s])
            runs.append(run(name, s, 0.97, network=network, to_target=to, **kw))
    return runs


def test_overlapping_methods_sooner_on_the_slowest_network_holds():
    # on the ideal network the blocking methods are as fast: only wan (the slowest) counts
    result = check(SOONER, timed(3.0, 4.5), timed(3.0, 3.0, network="ideal"))
    assert result.holds is True, result.details
    assert result.evidence == "network wan (0.1 Gbps); target acc ≥ 0.9; 1 cell: holds 1"
    (line,) = result.details
    assert line.startswith("network=wan, tau=16: holds: ")
    assert "difference +1.5 s, 95% CI [" in line
    assert line.endswith("[6 comparisons: holds 6]")


def test_overlapping_methods_slower_does_not_hold_and_shows_the_failing_pair():
    runs = timed(3.0, 4.5)
    for r in runs:  # CoCoD-SGD is the slow one
        if r["algorithm.name"] == "cocod_sgd":
            r["metrics.time_to_target_s"] += 3.0
    result = check(SOONER, runs)
    assert result.holds is False
    (line,) = result.details
    assert line.startswith("tau=16: does not hold: diloco 4.5 s vs cocod_sgd 6 s (paired, n=8)")
    assert line.endswith("[6 comparisons: holds 4, does not hold 2]")


def test_overlapping_methods_close_call_cannot_tell():
    runs = timed(3.0, 3.02)  # 0.02 s apart against an MDD of about 0.15 s
    result = check(SOONER, runs)
    assert result.holds is None, result.details
    assert result.details[0].endswith("[6 comparisons: cannot tell 6]")


def test_never_reached_runs_are_lower_bounds_only_where_conservative():
    def runs(early_to, late_to, early_train=8.0, late_train=9.0):
        """8 seeds of each: times (to the target, and training) + 0.1 s x a seed's shared luck
        + 0.1 s x the method's own noise."""
        out = []
        for name, to, train in (
            ("streaming_diloco", early_to, early_train),
            ("local_sgd", late_to, late_train),
        ):
            own = noise(name, N)
            for s in range(N):
                luck = 0.1 * shared(N)[s] + 0.1 * own[s]
                t = None if to is None else float(to + luck)
                out.append(run(name, s, 0.95, train=float(train + luck), to_target=t))
        return out

    # the blocking method never reached it; its training time (a lower bound) is already later
    late_never = check(SOONER, runs(3.0, None))
    assert late_never.holds is True, late_never.details
    assert (
        "local_sgd (8/8 never reached it: training time, a lower bound) 9 s vs streaming_diloco "
        "3 s (paired, n=8)" in (late_never.details[0])
    )
    # ... but a lower bound below the other's time cannot make it "does not hold"
    assert check(SOONER, runs(9.5, None, early_train=12.0)).holds is None
    # the overlapping method never reached it while the blocking one did: its lower bounds,
    # already later than the blocking times, show it does not reach it sooner
    assert check(SOONER, runs(None, 5.0)).holds is False
    # ... and lower bounds earlier than the blocking times say nothing
    assert check(SOONER, runs(None, 5.0, early_train=4.0)).holds is None
    # neither reached it
    neither = check(SOONER, runs(None, None))
    assert neither.holds is None
    assert "no run of streaming_diloco or local_sgd reached the target" in neither.details[0]


def test_overlap_claim_needs_a_time_to_target_and_equal_bytes():
    runs = timed(3.0, 4.5)
    for r in runs:
        r["metrics.reached_target"] = None  # a report without a target
    result = check(SOONER, runs)
    assert result.holds is None
    assert "no completed" in result.details[0] and "with a time to target" in result.details[0]
    apart = timed(3.0, 4.5, per_step=MODEL / 8)
    for r in apart:
        if r["algorithm.name"] == "local_sgd":
            r["summary.comm/bytes"] /= 2
    assert check(SOONER, apart).holds is None


def test_low_comm_claims_cannot_tell_from_no_runs():
    empty = pd.DataFrame.from_records([run("easgd", 0, 0.5)])
    for name in (PEAK, SAME_PEAK, SOONER):
        result = CLAIMS[name](empty, {})
        assert result.holds is None and result.evidence, name


# --- labels ---------------------------------------------------------------------------------------


def test_labels_name_the_fragments_only_when_they_vary():
    one = pd.DataFrame.from_records(
        [*seeds("diloco", 0.97), *seeds("streaming_diloco", 0.97, fragments=2, sync_delay=7)]
    )
    split = split_rows(one, ("algorithm.name", "tau"))
    assert set(run_labels(one, split.rows)) == {"diloco (tau=16)", "streaming_diloco (tau=16)"}
    two = pd.DataFrame.from_records(
        [
            *seeds("streaming_diloco", 0.97, fragments=2, sync_delay=7),
            *seeds("streaming_diloco", 0.97, fragments=4, sync_delay=3),
        ]
    )
    split = split_rows(two, ("algorithm.name", "tau"))
    assert set(run_labels(two, split.rows)) == {
        "streaming_diloco (tau=16, fragments=2)",
        "streaming_diloco (tau=16, fragments=4)",
    }


# --- through a report ---------------------------------------------------------------------------


def test_report_adds_time_to_target_and_peak_for_the_claims(tmp_path):
    """Run records of the three claims' situation: the report's table shows the largest
    collective and its claims read the time to target from the metric rows."""
    node = {
        "rows": ["algorithm.name", "tau", "network.name"],
        "target_acc": 0.8,
        "claims": [PEAK, SAME_PEAK, SOONER],
        "figures": [],
    }
    i = 0
    # 8 seeds: the times to target are the model's, the same gap on every seed (no spread),
    # which the exact sign-flip test decides from 6 seeds; the accuracies have each method's
    # own noise (0.002) on top of a seed's shared luck (0.001 a seed)
    for name, network, seed in itertools.product(
        ("local_sgd", "diloco", "streaming_diloco", "overlap_local_sgd", "cocod_sgd"),
        ("wan", "ideal", "ethernet10g"),
        range(N),
    ):
        blocking = name in ("local_sgd", "diloco") and network == "wan"
        fragmented = name == "streaming_diloco"
        per_epoch = {
            **fx.ledger_per_epoch(name, 16),
            "time/train_s": 2.0 if blocking else 1.0,  # reaches 0.8 at epoch 2 (fixture curve)
            "comm/bytes": 700_000,
            "comm/peak_bytes": 400_000 / 2 if fragmented else 700_000 / 2,  # x epochs 3 below
        }
        config = fx.make_config(
            name,
            16,
            seed,
            experiment="x",
            report=node,
            network={"name": network, "bandwidth_gbps": BANDWIDTH[network]},
        )
        final = 0.95 + 0.001 * seed + 0.002 * noise(f"{name}|{network}", N)[seed]
        fx.write_run(tmp_path / "runs" / f"{i:03d}", config, round(final, 6), per_epoch=per_epoch)
        i += 1
    result = report_experiment(tmp_path / "runs", tmp_path / "out", "x", grid={})
    table = result["markdown"]
    assert "largest collective" in table and "600 kB" in table and "1.05 MB" in table
    # networks fastest first, in the table and in the claims' cells
    assert result["table"]["network.name"].tolist()[:3] == ["ideal", "ethernet10g", "wan"]
    peak = next(c for c in result["claims"] if c.name == PEAK)
    assert [line.split(",")[0] for line in peak.details] == [
        "network=ideal",
        "network=ethernet10g",
        "network=wan",
    ]
    verdicts = {c.name: c.holds for c in result["claims"]}
    assert verdicts == {PEAK: True, SAME_PEAK: True, SOONER: True}, [
        c.details for c in result["claims"]
    ]
    sooner = next(c for c in result["claims"] if c.name == SOONER)
    assert sooner.evidence.startswith("network wan (0.1 Gbps); target acc ≥ 0.8")
    assert "diloco 4 s vs cocod_sgd 2 s (paired, n=8): difference +2 s" in sooner.details[0]
    assert "sign-flip p = 0.008" in sooner.details[0]  # 2 / 2^8: every seed 2 s apart
    claims_md = (tmp_path / "out" / "claims.md").read_text()
    assert claims_md.count("- **holds**") == 3
