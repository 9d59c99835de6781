"""The claims of the seed papers' tables (Overlap-Local-SGD, CoCoD-SGD, EAMSGD, PowerSGD, OSP
and LOSP, pseudo-synchronous SGD) and of the low-communication methods (DiLoCo, Streaming
DiLoCo), registered in `CLAIMS` when imported (analysis/claims/ imports it and states the
rules they follow). Those that compare two algorithms pair by pair in every cell are rows of
`PAIR_CLAIMS`, checked by `pairwise`; the others, which pick a closest rival per cell or a
network first, are functions of their own."""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from analysis.claims.rules import (
    BLOCKING,
    COCOD,
    COLLAPSE_MARGIN,
    COMPARABLE,
    DILOCO,
    EAMSGD,
    EQUAL_BYTES,
    FAR_BELOW,
    FAR_LESS_PEAK,
    LOCAL,
    LOCAL_METHODS,
    LOSP,
    OSP,
    OTHER_MARGINS,
    OVERLAP,
    OVERLAPPING,
    POWERSGD,
    PSEUDO,
    STREAMING,
    SYNC,
    PairClaim,
    _absent,
    _accuracies,
    _bytes_apart,
    _cell_line,
    _exposed,
    _mean_time,
    _missing,
    _others,
    _sooner,
    _summary,
    _worst_first,
    claim,
    more_accurate,
    pairwise,
    sooner,
)
from analysis.claims.runs import Cell, _tau, cells
from analysis.stats import (
    VERDICTS,
    Comparison,
    _mean,
    combine,
    compare,
    equivalent,
    ratio_below,
)
from analysis.stats.multiple import aside

# --- the claims that pick a closest rival, or a network, first ----------------------------------


def _best_or_worst(runs: pd.DataFrame, subject: str, best: bool) -> tuple:
    """Per cell: the subject's methods against every other method (subject above each for
    `best`, below each otherwise); the line shows the closest rival by mean."""
    if not (runs["algorithm"] == subject).any():
        return _missing(subject)
    verdicts, details = [], []
    for cell in cells(runs):
        mine, rivals = cell.methods(subject), cell.others(subject)
        if not mine or not rivals:
            verdicts.append(None)
            what = subject if not mine else "other method"
            details.append(f"{cell.name}: cannot tell: no {what}")
            continue
        comparisons = []
        for method in mine:
            # the closest rival first: the highest mean for "best", the lowest for "worst"
            ordered = sorted(rivals, key=lambda o: _mean(cell.values(o, "acc")), reverse=best)
            for other in ordered:
                pair = (method, other) if best else (other, method)
                comparisons.append(compare(*_accuracies(cell, *pair)))
        verdict = combine(c.holds for c in comparisons)
        shown = _worst_first(comparisons) if verdict is not True else comparisons[0]
        tail = _others(comparisons)
        verdicts.append(verdict)
        details.append(_cell_line(cell, shown, verdict, tail))
    return combine(verdicts), _summary(verdicts), details


def _ranked(name: str, text: str, test: str, why: str, subject: str, best: bool) -> None:
    """Register the claim `name` that `subject` is the best (`best`) or the worst method in
    every cell: `_best_or_worst` on its runs; `why` its docstring, as a PairClaim's."""

    def check(runs: pd.DataFrame, report: dict) -> tuple:
        return _best_or_worst(runs, subject, best)

    check.__name__, check.__doc__ = name, why
    claim(name, text, test)(check)


_ranked(
    "overlap_best_at_every_tau",
    "Overlap-Local-SGD has the best accuracy at every tau",
    "paired t-test of the accuracy difference to each other method, per tau",
    "At each tau, Overlap-Local-SGD's mean final accuracy above every other method's.",
    OVERLAP,
    best=True,
)
_ranked(
    "eamsgd_worst",
    "EAMSGD is the worst method",
    "paired t-test of each other method's accuracy above EAMSGD's, per tau",
    "At each tau, EAMSGD's mean final accuracy below every other method's.",
    EAMSGD,
    best=False,
)


@claim(
    "powersgd_exposed_above_local_methods",
    "PowerSGD's exposed communication stays above the Local-SGD methods'",
    "paired t-test of each PowerSGD rank's exposed communication per epoch above each "
    "Local-SGD method's at each tau",
)
def powersgd_exposed_above_local(runs: pd.DataFrame, report: dict) -> tuple:
    """Exposed communication per epoch: every PowerSGD rank above every Local SGD and
    Overlap-Local-SGD setting, per condition."""
    timed = runs[runs["exposed_per_epoch"].notna()]
    if not (timed["algorithm"] == POWERSGD).any():
        return _missing(POWERSGD, "run with exposed communication")
    if not timed["algorithm"].isin(LOCAL_METHODS).any():
        return _missing(" or ".join(LOCAL_METHODS), "run with exposed communication")
    verdicts, details = [], []
    for cell in cells(timed, by_tau=False):
        powers = cell.methods(POWERSGD)
        locals_ = [
            (m, tau)
            for (m, tau), _ in cell.runs[cell.runs["algorithm"].isin(LOCAL_METHODS)].groupby(
                ["method", "tau"], dropna=False
            )
        ]
        if not powers or not locals_:
            verdicts.append(None)
            details.append(f"{cell.name}: cannot tell: no {POWERSGD if not powers else 'local'}")
            continue

        comparisons = []
        powers = sorted(powers, key=lambda p: _mean(_exposed(cell, p)))
        locals_ = sorted(locals_, key=lambda mt: -_mean(_exposed(cell, *mt)))
        for power in powers:
            for method, tau in locals_:
                name = f"{method} {_tau(tau)}" if pd.notna(tau) else method
                comparisons.append(
                    compare(power, _exposed(cell, power), name, _exposed(cell, method, tau))
                )
        verdict = combine(c.holds for c in comparisons)
        shown = _worst_first(comparisons) if verdict is not True else comparisons[0]
        tail = _others(comparisons)
        verdicts.append(verdict)
        details.append(_cell_line(cell, shown, verdict, tail, "s"))
    return combine(verdicts), _summary(verdicts, "conditions"), details


@claim(
    "overlapping_methods_reach_target_sooner_on_slow_network",
    "On the slowest network, the methods that overlap their averages with computation "
    "(Streaming DiLoCo, Overlap-Local-SGD, CoCoD-SGD) reach the target accuracy sooner in "
    "training time than the blocking ones (Local SGD, DiLoCo) at equal bytes per step "
    "(Douillard et al. 2025: overlapping each fragment's sync with inner steps hides latency "
    "and bandwidth [M]; Overlap-Local-SGD and CoCoD-SGD: algorithms.md sections 3 and 5 [A])",
    "paired t-test of each blocking method's time to the target accuracy minus each overlapping "
    "method's above 0, on the network with the lowest bandwidth_gbps; a run that never reached "
    "the target counts with its whole training time (a lower bound of its time to target)",
)
def overlapping_reach_target_sooner(runs: pd.DataFrame, report: dict) -> tuple:
    """On the slowest network among the runs (lowest `network.bandwidth_gbps`), per remaining
    condition and tau: every overlapping method's time to target below every blocking method's,
    at equal bytes per step. Censoring: a completed run that never reached the target has a
    time to target of at least its training time; that lower bound stands in for it only where
    it makes the test conservative (the blocking side for "holds", the overlapping side for
    "does not hold")."""
    for names in (OVERLAPPING, BLOCKING):
        if not runs["algorithm"].isin(names).any():
            return _missing(" or ".join(names))
    timed = runs[runs["train_s"].notna()]
    if timed.empty or timed["bandwidth"].isna().all():
        return None, "no completed run with a training time and a network bandwidth", []
    slowest = float(timed["bandwidth"].min())
    network = ", ".join(sorted(set(timed.loc[timed["bandwidth"] == slowest, "network"].dropna())))
    slow = timed[timed["bandwidth"] == slowest]
    verdicts, details = [], []
    for cell in cells(slow):
        overlapping, blocking = cell.methods(OVERLAPPING), cell.methods(BLOCKING)
        if not overlapping or not blocking:
            verdicts.append(None)
            missing = "overlapping" if not overlapping else "blocking"
            details.append(f"{cell.name}: cannot tell: no {missing} method")
            continue
        # the closest pair first: the slowest overlapping method against the fastest blocking one
        overlapping = sorted(overlapping, key=lambda m: -_mean_time(cell, m))
        blocking = sorted(blocking, key=lambda m: _mean_time(cell, m))
        pairs = []
        for late in blocking:
            for early in overlapping:
                apart = _bytes_apart(cell, late, early)
                pairs.append((None, apart) if apart else _sooner(cell, early, late))
        comparisons = [v for v, _ in pairs]
        verdict = combine(comparisons)
        # the pair that decides: the first that does not hold, else the first that cannot tell
        shown = next((line for v, line in pairs if v is False), None)
        shown = shown or next((line for v, line in pairs if v is None), pairs[0][1])
        tail = "" if len(pairs) < 2 else " [" + _summary(comparisons, "comparisons") + "]"
        verdicts.append(verdict)
        details.append(f"{cell.name}: {VERDICTS[verdict]}: {shown}{tail}")
    target = report.get("target_acc")
    at = f"target acc ≥ {float(target):g}; " if target is not None else ""
    evidence = f"network {network} ({slowest:g} Gbps); {at}" + _summary(verdicts, "cells")
    return combine(verdicts), evidence, details


# --- the tests of the claims that compare pair by pair --------------------------------------------


def sends_less(cell: Cell, fewer: str, more: str) -> tuple[bool | None, str]:
    """`fewer`'s mean bytes per step below `more`'s (a ratio of means below 1)."""
    c = ratio_below(
        fewer, cell.values(fewer, "bytes_per_step"), more, cell.values(more, "bytes_per_step"), 1.0
    )
    return c.holds, c.verdict_text("bytes")


def fast_workers_busier(cell: Cell, waits: str, busy: str) -> tuple[bool | None, str]:
    """`busy`'s fast workers idle for a smaller share of the budget than `waits`'s: `waits`'s
    share minus `busy`'s above 0, paired by seed."""
    c = compare(waits, cell.values(waits, "fast_idle"), busy, cell.values(busy, "fast_idle"))
    return c.holds, c.verdict_text()


def far_below(cell: Cell, sync: str, overlap: str) -> tuple[bool | None, str]:
    """`overlap`'s mean comm/compute ratio under FAR_BELOW x `sync`'s."""
    c = ratio_below(
        overlap, cell.values(overlap, "ratio"), sync, cell.values(sync, "ratio"), FAR_BELOW
    )
    return c.holds, c.verdict_text("ratio")


def comparable(cell: Cell, a: str, b: str) -> tuple[bool | None, str]:
    """Final accuracies within COMPARABLE of each other (an equivalence test); the verdicts at
    the OTHER_MARGINS beside it."""
    sides = _accuracies(cell, a, b)
    c = equivalent(*sides, COMPARABLE)
    return c.holds, c.verdict_text() + _at_other_margins(lambda m: equivalent(*sides, m))


def less_peak_same_accuracy(cell: Cell, stream: str, diloco: str) -> tuple[bool | None, str]:
    """Accuracies within COMPARABLE and mean peak bytes of one collective under FAR_LESS_PEAK x
    `diloco`'s: both must hold."""
    sides = _accuracies(cell, stream, diloco)
    same = equivalent(*sides, COMPARABLE)
    peak = ratio_below(
        stream, cell.values(stream, "peak"), diloco, cell.values(diloco, "peak"), FAR_LESS_PEAK
    )
    verdict = combine([same.holds, peak.holds])
    others = _at_other_margins(lambda m: equivalent(*sides, m))
    return verdict, (
        f"{VERDICTS[verdict]}: accuracy {same.verdict_text()}{others}; "
        f"peak bytes per collective {peak.verdict_text('bytes')}"
    )


def not_worse_at_equal_bytes(cell: Cell, diloco: str, local: str) -> tuple[bool | None, str]:
    """At equal bytes per step, `diloco`'s accuracy minus `local`'s above -COMPARABLE."""
    apart = _bytes_apart(cell, diloco, local)
    if apart:
        return None, f"cannot tell: {apart}"
    sides = _accuracies(cell, diloco, local)
    c = compare(*sides, threshold=-COMPARABLE)
    others = _at_other_margins(lambda m: compare(*sides, threshold=-m))
    return c.holds, c.verdict_text() + others


def _at_other_margins(test_at: Callable[[float], Comparison]) -> str:
    """The verdict of the same comparison at each of OTHER_MARGINS, outside the claim's Holm
    family (`aside`): COMPARABLE is the suite's choice, no seed paper gives a number, so a
    reader sees whether the verdict rests on it: "; at other margins: ±0.010 cannot tell,
    ±0.020 holds"."""
    said = ", ".join(f"±{m:.3f} {aside(lambda m=m: test_at(m)).verdict}" for m in OTHER_MARGINS)
    return f"; at other margins: {said}"


def collapse(cell: Cell, cocod: str, overlap: str) -> tuple[bool | None, str]:
    """`cocod` diverged on a run and `overlap` on none, or (no divergence) `cocod`'s accuracy
    more than COLLAPSE_MARGIN below `overlap`'s; the line with the verdict first."""
    (c_div, c_runs), (o_div, o_runs) = cell.diverged(cocod), cell.diverged(overlap)
    said = f"{cocod} {c_div}/{c_runs} diverged, {overlap} {o_div}/{o_runs} diverged"
    if c_runs < 2 or o_runs < 2:
        verdict, line = None, f"{said}; n < 2 on a side"
    elif o_div:
        verdict, line = False, f"{said} (observed)"
    elif c_div:
        verdict, line = True, f"{said} (observed)"
    else:
        c = compare(
            overlap,
            cell.values(overlap, "acc"),
            cocod,
            cell.values(cocod, "acc"),
            threshold=COLLAPSE_MARGIN,
        )
        verdict, line = c.holds, f"{said}; accuracy gap: {c.text()}"
    return verdict, f"{VERDICTS[verdict]}: {line}"


# --- the runs they compare ------------------------------------------------------------------------


def at_largest_tau(runs: pd.DataFrame) -> pd.DataFrame | str:
    """The runs at the largest tau of the round-based runs, tau-less ones included."""
    local = runs[runs["tau"].notna()]
    if local.empty:
        return "no round-based run with a tau"
    tau = float(local["tau"].max())
    return runs[(runs["tau"] == tau) | runs["tau"].isna()]


def with_ratio(runs: pd.DataFrame) -> pd.DataFrame | str:
    """The runs with a comm/compute ratio, sync SGD's and Overlap-Local-SGD's among them."""
    timed = runs[runs["ratio"].notna()]
    return _absent(timed, (SYNC, OVERLAP), "run with a comm/compute ratio") or timed


def heterogeneous_timed(runs: pd.DataFrame) -> pd.DataFrame | str:
    """The completed runs with a training time and a `compute.slowdown` other than none."""
    timed = runs[runs["train_s"].notna() & runs["slowdown"].notna()]
    hetero = timed[~timed["slowdown"].isin(("none", "None"))]
    if hetero.empty:
        return "no completed run with heterogeneous workers (compute.slowdown other than none)"
    return hetero


def heterogeneous_budget(runs: pd.DataFrame) -> pd.DataFrame | str:
    """The completed runs of a time budget (their workers' accounts at T: `fast_idle`) with a
    `compute.slowdown` other than none."""
    hetero = heterogeneous_timed(runs)
    if isinstance(hetero, str):
        return hetero
    budget = hetero[hetero["fast_idle"].notna()]
    if budget.empty:
        return (
            "no completed run on a time budget (budget=time: the workers' idle time at T) "
            "with heterogeneous workers"
        )
    return budget


def modeled_timed(runs: pd.DataFrame) -> pd.DataFrame | str:
    """The completed runs with a training time on a modeled network (not the ideal one, where
    no communication takes time and a time to target says nothing about overlapping it)."""
    modeled = runs[runs["train_s"].notna() & runs["network"].notna() & runs["network"].ne("ideal")]
    if modeled.empty:
        return "no completed run on a modeled network (every run's network is ideal)"
    return modeled


# --- the claims that compare pair by pair ---------------------------------------------------------
#
# The low-communication ones cite the DiLoCo paper (Douillard et al. 2023, arXiv 2311.08105) and
# the Streaming DiLoCo paper (Douillard et al. 2025, arXiv 2501.18512). Section references marked
# [M] are recalled, not checked against the papers' text here (algorithms.md's convention).

PAIR_CLAIMS = (
    PairClaim(
        "cocod_diverges_at_large_tau_overlap_does_not",
        "CoCoD-SGD diverges at large tau in non-IID while Overlap-Local-SGD does not",
        "divergence observed (an event, not a mean); otherwise paired t-test of "
        f"Overlap-Local-SGD's accuracy more than {COLLAPSE_MARGIN:g} above CoCoD-SGD's",
        "At the largest tau of the round-based runs, per condition: Overlap-Local-SGD diverged "
        "on no run and CoCoD-SGD diverged on at least one, or (no divergence) its accuracy lies "
        "more than COLLAPSE_MARGIN below Overlap-Local-SGD's.",
        COCOD,
        OVERLAP,
        collapse,
        select=at_largest_tau,
        prefix=lambda runs: f"largest {_tau(float(runs['tau'].max()))}; ",
        absent=" run at the largest tau",
    ),
    PairClaim(
        "overlap_ratio_far_below_sync",
        "Overlap-Local-SGD's communication-to-computation ratio is far below sync SGD's",
        f"bootstrap of the ratio of mean comm/compute ratios against {FAR_BELOW:g}, per tau",
        "At every tau, Overlap-Local-SGD's mean final comm/ratio under FAR_BELOW x sync SGD's.",
        SYNC,
        OVERLAP,
        far_below,
        select=with_ratio,
        note=f"; far below = under {FAR_BELOW:g}x",
    ),
    PairClaim(
        "overlap_sooner_than_sync_and_local",
        "Overlap-Local-SGD reaches the target accuracy sooner than sync SGD and Local SGD on a "
        "modeled network (the error-runtime trade-off of figures 4 and 5)",
        "paired t-test of sync SGD's and Local SGD's time to target minus Overlap-Local-SGD's "
        "above 0, per tau; a run that never reached the target counts with its training time "
        "where that is conservative",
        "Per tau and condition, on a modeled network: Overlap-Local-SGD's time to the target "
        "accuracy below sync SGD's and below Local SGD's at the same tau (the paper's figures "
        "plot error against wall-clock time: a better trade-off reaches an error sooner).",
        OVERLAP,
        (SYNC, LOCAL),
        lambda cell, overlap, other: sooner(cell, overlap, other),
        required=(OVERLAP, SYNC, LOCAL),
        select=modeled_timed,
    ),
    PairClaim(
        "overlap_stragglers_do_not_wait",
        "With stragglers, Overlap-Local-SGD's workers do not idle waiting for the slow ones "
        "(section 3: the anchor's communication is non-blocking, so there is no idle time in "
        "waiting for the slow ones), where Local SGD's and sync SGD's do",
        "paired t-test of Local SGD's and sync SGD's idle share (the workers but the slowest) "
        "minus Overlap-Local-SGD's above 0, per slowdown and tau, on a time budget",
        "Per heterogeneous `compute.slowdown` and tau, on a time budget (budget=time): the mean "
        "share of the budget that the workers (all but the slowest) spent waiting, "
        "Overlap-Local-SGD's below Local SGD's at the same tau and below sync SGD's.",
        OVERLAP,
        (SYNC, LOCAL),
        lambda cell, overlap, other: fast_workers_busier(cell, other, overlap),
        required=(OVERLAP, SYNC, LOCAL),
        select=heterogeneous_budget,
    ),
    PairClaim(
        "losp_beats_osp",
        "LOSP reaches higher accuracy than OSP",
        "paired t-test of the accuracy difference, per tau and slowdown",
        "At every tau and condition (slowdown) where both ran, LOSP's mean final accuracy above "
        "OSP's.",
        LOSP,
        OSP,
        more_accurate,
        required=(OSP, LOSP),
    ),
    PairClaim(
        "losp_beats_state_of_the_art",
        "LOSP reaches higher accuracy than the state of the art it is set against: fully "
        "synchronous SGD and Local SGD (LOSP abstract: gains in accuracy 'over the "
        "state-of-the-art ones')",
        "paired t-test of the accuracy difference, per tau and slowdown, against each of sync "
        "SGD and Local SGD",
        "At every tau and condition (slowdown) where they ran, LOSP's mean final accuracy above "
        "sync SGD's and above Local SGD's.",
        LOSP,
        (SYNC, LOCAL),
        more_accurate,
        required=(LOSP, SYNC, LOCAL),
    ),
    PairClaim(
        "losp_sends_less_than_sync",
        "LOSP sends fewer bytes per step than fully synchronous SGD (LOSP abstract: gains in "
        "communication cost over the state of the art)",
        "ratio of the mean bytes per step below 1 (a percentile bootstrap; by the model where "
        "the bytes are the same on every seed), per tau and slowdown",
        "At every tau and condition (slowdown): LOSP's mean bytes sent per step below sync SGD's.",
        LOSP,
        SYNC,
        lambda cell, losp, sync: sends_less(cell, losp, sync),
        required=(LOSP, SYNC),
    ),
    PairClaim(
        "osp_losp_faster_than_sync_under_heterogeneity",
        "OSP/LOSP reach the target accuracy sooner than sync SGD with heterogeneous workers "
        "(fast workers need not idle for slow ones)",
        "paired t-test of sync SGD's time to target above OSP's and LOSP's, per slowdown and "
        "tau; a run that never reached the target counts with its training time where that is "
        "conservative",
        "Per heterogeneous `compute.slowdown` (anything but none) and tau: OSP's and LOSP's "
        "time to the target accuracy below sync SGD's (time per epoch alone would credit a "
        "method that trains fast to a worse model).",
        SYNC,
        (OSP, LOSP),
        lambda cell, sync, fast: sooner(cell, fast, sync),
        select=heterogeneous_timed,
    ),
    PairClaim(
        "osp_losp_fast_workers_do_not_wait",
        "With heterogeneous workers, OSP's and LOSP's fast workers keep computing where sync "
        "SGD's wait for the slow one (the LOSP paper: traditional synchronization modes incur "
        "under-utilization because fast workers have to wait for slow ones)",
        "paired t-test of sync SGD's fast-worker idle share minus OSP's and LOSP's above 0, per "
        "slowdown and tau, on a time budget",
        "Per heterogeneous `compute.slowdown` and tau, on a time budget (budget=time): the mean "
        "share of the budget that the fast workers (all but the slowest) spent waiting, OSP's "
        "and LOSP's below sync SGD's. On the virtual clock the shares are the timing model's, "
        "the same on every seed where the windows do not depend on the data.",
        SYNC,
        (OSP, LOSP),
        lambda cell, sync, fast: fast_workers_busier(cell, sync, fast),
        select=heterogeneous_budget,
    ),
    PairClaim(
        "pseudo_sync_matches_sync",
        "Pseudo-synchronous SGD reaches accuracy comparable to synchronous SGD",
        f"equivalence (TOST, 90% CI within ±{COMPARABLE:g}) of the accuracy difference, per "
        "worker count",
        "Mean final accuracies within COMPARABLE of each other (an equivalence test), at every "
        "condition (worker count) where both ran.",
        PSEUDO,
        SYNC,
        comparable,
        required=(PSEUDO, SYNC),
        by_tau=False,
        what="conditions",
        note=f"; comparable = within {COMPARABLE:g}",
    ),
    PairClaim(
        "streaming_diloco_less_peak_same_accuracy",
        "Streaming DiLoCo needs far less peak bandwidth (bytes per collective) than DiLoCo for "
        "about the same final accuracy (Douillard et al. 2025, Streaming DiLoCo: one fragment "
        "synced at a time divides the peak by the number of fragments at similar loss [M])",
        f"equivalence (TOST, 90% CI within ±{COMPARABLE:g}) of the accuracy difference and a "
        f"bootstrap of the ratio of mean peak bytes per collective against {FAR_LESS_PEAK:g}, "
        "per condition",
        "Per condition (network) and tau, every Streaming DiLoCo setting against DiLoCo: final "
        "accuracies within COMPARABLE (an equivalence test) and mean peak bytes of one "
        "collective under FAR_LESS_PEAK x DiLoCo's; a cell holds when both hold.",
        STREAMING,
        DILOCO,
        less_peak_same_accuracy,
        required=(STREAMING, DILOCO),
        note=f"; about the same = within {COMPARABLE:g}, far less = under {FAR_LESS_PEAK:g}x",
    ),
    PairClaim(
        "diloco_not_worse_than_local_sgd",
        "DiLoCo's outer Nesterov step reaches final accuracy comparable to or better than plain "
        "Local SGD at the same communication (Douillard et al. 2023, DiLoCo, ablation of the "
        "outer optimizer: Nesterov beats outer SGD with LR 1, i.e. FedAvg / Local SGD [M]; a "
        "difference in the paper, tested here as non-inferiority)",
        f"paired t-test of DiLoCo's accuracy minus Local SGD's above -{COMPARABLE:g} "
        f"(non-inferiority), per condition, at equal bytes per step (within {EQUAL_BYTES:g})",
        "Per condition and tau, at equal bytes per step: DiLoCo's mean final accuracy minus "
        "Local SGD's above -COMPARABLE (the 95% interval wholly above it holds, wholly below "
        "does not).",
        DILOCO,
        LOCAL,
        not_worse_at_equal_bytes,
        required=(DILOCO, LOCAL),
        note=f"; comparable = not more than {COMPARABLE:g} below",
    ),
)
for _definition in PAIR_CLAIMS:
    pairwise(_definition)
