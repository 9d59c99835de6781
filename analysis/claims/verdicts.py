"""The seed papers' headline claims that the Overlap-Local-SGD tables do not cover, and the
controls that show a scale can tell: registered in `analysis.claims.CLAIMS` like the others,
tested the same way (`analysis.stats`: paired by seed, MDD at 80% power, Holm). Those that
compare two algorithms pair by pair in every cell are rows of `PAIR_CLAIMS` (`PairClaim`).

Controls (experiment=controls): before a verdict, the scale must detect effects known to exist
and call two identical things equivalent.

The two accuracy controls are about a fixed step budget: they compare what the runs reach in
their steps, converged or not (`Cell.values(at_budget=True)`); every other comparison of
accuracies or times to accuracy cannot tell unless its runs converged (analysis/claims/).

- `control_local_sgd_loses_accuracy_at_large_tau` (positive): at a fixed step budget, Local
  SGD's accuracy falls as tau grows (Overlap-Local-SGD paper, sec. 1: "the error-runtime
  trade-off"): the smallest tau above the largest, per partition.
- `control_noniid_below_iid` (positive): at the largest tau, Local SGD on the non-IID
  partition below the IID one.
- `control_sync_slower_on_a_modeled_network` (positive): on a modeled network, blocking sync
  SGD reaches the target accuracy later than Local SGD at its smallest tau > 1, which
  communicates tau times less (at a large tau Local SGD loses accuracy per step: the first
  control).
- `control_osp_equals_losp_on_ideal_network` (negative): with equal workers on the ideal
  network the overlap window is empty and OSP and LOSP are the same algorithm: equivalent
  within `EQUIVALENT_IDENTICAL`.

Overlap-Local-SGD against sync SGD (experiment=overlap_sync):

- `overlap_above_sync_at_small_tau`: Overlap-Local-SGD at tau = 1 and 2 reaches higher final
  accuracy than fully synchronous SGD (Overlap-Local-SGD paper, tables 1 and 2), per partition
  and tau.

LOSP and OSP (experiment=losp), pseudo-synchronous SGD (experiment=pseudo_sync):

- `losp_sooner_than_osp`: LOSP reaches the target accuracy no later than OSP, with
  heterogeneous workers (per tau and slowdown).
- `pseudo_sync_faster_than_sync`: pseudo-sync reaches the target sooner than sync SGD on the
  modeled network, per worker count.
- `pseudo_sync_scales_better`: pseudo-sync's weak-scaling efficiency (time per step at the
  fewest workers over that at the most, per seed) above sync SGD's.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.claims.rules import (
    LOCAL,
    LOSP,
    OSP,
    OVERLAP,
    PSEUDO,
    SYNC,
    PairClaim,
    _missing,
    _summary,
    claim,
    more_accurate,
    pairwise,
    sooner,
)
from analysis.claims.runs import Cell, _tau
from analysis.stats import Side, combine, compare, equivalent

# OSP and LOSP are one algorithm on the ideal network with equal workers: equivalence within
# half an accuracy point (the negative control's margin, stated before the runs).
EQUIVALENT_IDENTICAL = 0.005


def _side(rows: pd.DataFrame, column: str, method: str) -> Side:
    """The rows' `column` as a side paired by seed, at the runs' fixed step budget (the
    controls of accuracy are about what a budget buys, converged or not)."""
    return Cell("", rows).values(method, column, at_budget=True)


def _local(runs: pd.DataFrame) -> pd.DataFrame:
    return runs[runs["algorithm"] == LOCAL]


def _equal_workers(runs: pd.DataFrame) -> pd.Series:
    """Runs without a slowdown (`compute.slowdown` none, or not recorded: per_run's NaN)."""
    return runs["slowdown"].isna() | runs["slowdown"].isin(("none", "None"))


def _iid(runs: pd.DataFrame) -> pd.Series:
    """Runs on the IID partition (or without a recorded partition: the default, iid)."""
    return runs["partition"].isna() | runs["partition"].eq("iid")


@claim(
    "control_local_sgd_loses_accuracy_at_large_tau",
    "Positive control: Local SGD's accuracy falls as tau grows at a fixed step budget "
    "(Overlap-Local-SGD paper, sec. 1)",
    "paired t-test of Local SGD's accuracy at the smallest tau above the largest, per partition",
    methods=(LOCAL,),
)
def control_local_sgd_loses_accuracy_at_large_tau(runs: pd.DataFrame, report: dict) -> tuple:
    """Per partition: Local SGD at its smallest tau more accurate than at its largest."""
    local = _local(runs)
    if local["tau"].nunique() < 2:
        return None, "no Local SGD runs at two taus", []
    verdicts, details = [], []
    for partition, rows in local.groupby("partition", dropna=False):
        taus = sorted(rows["tau"].dropna().unique())
        if len(taus) < 2:
            continue
        small, large = rows[rows["tau"] == taus[0]], rows[rows["tau"] == taus[-1]]
        method = str(rows["method"].iloc[0])
        c = compare(
            f"{method} {_tau(taus[0])}",
            _side(small, "acc", method),
            f"{method} {_tau(taus[-1])}",
            _side(large, "acc", method),
        )
        verdicts.append(c.holds)
        details.append(f"partition={partition}: {c.verdict_text()}")
    return combine(verdicts), _summary(verdicts, "partitions"), details


@claim(
    "control_noniid_below_iid",
    "Positive control: at the largest tau, Local SGD on the non-IID partition is less accurate "
    "than on the IID one",
    "paired t-test of Local SGD's accuracy on IID above non-IID at the largest tau",
    methods=(LOCAL,),
)
def control_noniid_below_iid(runs: pd.DataFrame, report: dict) -> tuple:
    """Local SGD at its largest tau: IID above non-IID."""
    local = _local(runs)
    if local.empty:
        return _missing(LOCAL)
    tau = local["tau"].max()
    at = local[local["tau"] == tau]
    iid, noniid = at[at["partition"] == "iid"], at[at["partition"] == "noniid"]
    if iid.empty or noniid.empty:
        return None, f"no Local SGD runs on both partitions at {_tau(tau)}", []
    method = str(at["method"].iloc[0])
    c = compare(
        f"{method} iid", _side(iid, "acc", method), f"{method} noniid", _side(noniid, "acc", method)
    )
    return c.holds, f"{_tau(tau)}", [f"{_tau(tau)}: {c.verdict_text()}"]


@claim(
    "pseudo_sync_scales_better",
    "Pseudo-synchronous SGD's weak scaling is better than synchronous SGD's (the paper: 93.4% "
    "efficiency on 64 nodes, 90.5% on 128)",
    "paired t-test of the weak-scaling efficiency (time per step at the fewest workers over "
    "that at the most, per seed) of pseudo-sync above sync SGD's; by the model where it does "
    "not vary",
)
def pseudo_sync_scales_better(runs: pd.DataFrame, report: dict) -> tuple:
    """Efficiency per seed from the fewest to the most workers: pseudo-sync's above sync's."""
    sides = {}
    for name in (PSEUDO, SYNC):
        mine = runs[(runs["algorithm"] == name) & runs["step_time"].notna()]
        if mine["workers"].nunique() < 2:
            return None, f"no {name} runs at two worker counts", []
        low, high = mine["workers"].min(), mine["workers"].max()
        base = mine[mine["workers"] == low].set_index("seed")["step_time"]
        top = mine[mine["workers"] == high].set_index("seed")["step_time"]
        common = sorted(set(base.index) & set(top.index))
        efficiency = np.array([base[s] / top[s] for s in common])
        sides[name] = Side.of(efficiency, name, seeds=common, column="efficiency")
        span = f"{int(low)} to {int(high)} workers"
    c = compare(PSEUDO, sides[PSEUDO], SYNC, sides[SYNC])
    return c.holds, span, [f"efficiency, {span}: {c.verdict_text('ratio')}"]


# --- the claims that compare pair by pair -------------------------------------------------------


def identical(cell: Cell, losp: str, osp: str) -> tuple[bool | None, str]:
    """Accuracies equivalent within EQUIVALENT_IDENTICAL (paired TOST)."""
    c = equivalent(
        losp, cell.values(losp, "acc"), osp, cell.values(osp, "acc"), EQUIVALENT_IDENTICAL
    )
    return c.holds, c.verdict_text()


def modeled_at_smallest_tau(runs: pd.DataFrame) -> pd.DataFrame | str:
    """Sync SGD's and Local SGD's IID runs on a network other than ideal, Local SGD's at its
    smallest tau > 1: where its accuracy per step is still sync SGD's, so the time to the
    target measures the communication saved, not an accuracy lost to a large tau."""
    modeled = runs[runs["network"].ne("ideal") & _iid(runs)]
    if not (modeled["algorithm"] == SYNC).any():
        return _missing(SYNC)[1]
    taus = sorted(t for t in modeled.loc[modeled["algorithm"] == LOCAL, "tau"].unique() if t > 1)
    if not taus:
        return "no Local SGD run at a tau > 1 on a modeled network"
    tau = taus[0]
    return modeled[
        modeled["algorithm"].isin((SYNC, LOCAL)) & (modeled["tau"].isna() | (modeled["tau"] == tau))
    ]


def ideal_equal_workers(runs: pd.DataFrame) -> pd.DataFrame | str:
    """OSP's and LOSP's runs on the ideal network without slowdown."""
    ideal = runs[runs["network"].eq("ideal") & _equal_workers(runs)]
    for name in (OSP, LOSP):
        if not (ideal["algorithm"] == name).any():
            return f"no {name} run on the ideal network with equal workers"
    return ideal[ideal["algorithm"].isin((OSP, LOSP))]


def small_tau(runs: pd.DataFrame) -> pd.DataFrame | str:
    """Sync SGD's runs and Overlap-Local-SGD's at tau <= 2."""
    small = runs[runs["algorithm"].eq(SYNC) | (runs["algorithm"].eq(OVERLAP) & (runs["tau"] <= 2))]
    if not small["algorithm"].eq(OVERLAP).any():
        return f"no {OVERLAP} run at tau <= 2"
    return small


def heterogeneous(runs: pd.DataFrame) -> pd.DataFrame | str:
    """OSP's and LOSP's runs with a slowdown."""
    hetero = runs[~_equal_workers(runs)]
    for name in (OSP, LOSP):
        if not (hetero["algorithm"] == name).any():
            return f"no {name} run with heterogeneous workers"
    return hetero[hetero["algorithm"].isin((OSP, LOSP))]


PAIR_CLAIMS = (
    PairClaim(
        "control_sync_slower_on_a_modeled_network",
        "Positive control: on a modeled network, blocking sync SGD reaches the target accuracy "
        "later than Local SGD at its smallest tau > 1",
        "paired t-test of sync SGD's time to target above Local SGD's at the smallest tau > 1, "
        "on the modeled network; a run that never reached the target counts with its training "
        "time where that is conservative",
        "At Local SGD's smallest tau > 1 (IID runs on a network other than ideal): Local SGD "
        "sooner than sync SGD.",
        LOCAL,
        SYNC,
        sooner,
        select=modeled_at_smallest_tau,
        prefix=lambda runs: f"{_tau(runs['tau'].max())}; ",
        missing=False,
    ),
    PairClaim(
        "control_osp_equals_losp_on_ideal_network",
        "Negative control: OSP and LOSP, the same algorithm on the ideal network with equal "
        "workers, are reported equivalent",
        f"paired TOST of the accuracy difference within ±{EQUIVALENT_IDENTICAL:g}, per tau",
        "On the ideal network without slowdown, per tau: LOSP's accuracy equivalent to OSP's.",
        LOSP,
        OSP,
        identical,
        select=ideal_equal_workers,
        what="taus",
        note=f"; equivalent = within {EQUIVALENT_IDENTICAL:g}",
        missing=False,
        identity=True,
    ),
    PairClaim(
        "overlap_above_sync_at_small_tau",
        "Overlap-Local-SGD at tau = 1 and 2 reaches even higher accuracy than fully synchronous "
        "SGD (Overlap-Local-SGD paper, tables 1 and 2)",
        "paired t-test of Overlap-Local-SGD's final accuracy above sync SGD's, per partition "
        "and tau <= 2",
        "Per partition and tau <= 2: Overlap-Local-SGD's final accuracy above sync SGD's.",
        OVERLAP,
        SYNC,
        more_accurate,
        required=(OVERLAP, SYNC),
        select=small_tau,
        missing=False,
    ),
    PairClaim(
        "losp_sooner_than_osp",
        "LOSP reaches the target accuracy no later than OSP with heterogeneous workers (LOSP, "
        "IEEE JSAC 2021: local compensation recovers the progress OSP's overlap leaves stale)",
        "paired t-test of OSP's time to target above LOSP's (LOSP sooner), per tau and "
        "slowdown; a run that never reached the target counts with its training time where "
        "that is conservative",
        "Per heterogeneous condition and tau: LOSP's time to target below OSP's.",
        LOSP,
        OSP,
        sooner,
        select=heterogeneous,
        missing=False,
    ),
    PairClaim(
        "pseudo_sync_faster_than_sync",
        "Pseudo-synchronous SGD reaches the target accuracy sooner than synchronous SGD on a "
        "modeled network (its gradient average overlaps the next step)",
        "paired t-test of sync SGD's time to target above pseudo-sync's, per worker count",
        "Per condition (worker count): pseudo-sync's time to target below sync SGD's.",
        PSEUDO,
        SYNC,
        sooner,
        required=(PSEUDO, SYNC),
        by_tau=False,
        what="conditions",
        missing=False,
    ),
)
for _definition in PAIR_CLAIMS:
    pairwise(_definition)
