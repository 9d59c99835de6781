"""The papers' claims, checked on the runs of a preset.

A preset's `report.claims` lists names from `CLAIMS`. Each check takes the runs (one row per run:
`load_summaries` output, config + `summary.*` columns) and the report node, and returns a
`ClaimResult`: `holds` True or False, or None when these runs cannot tell (a method or a metric
the claim needs is missing), and the numbers that decide it as `evidence`.

Shared rules: only completed and diverged runs count. An accuracy is the mean final test
accuracy over a group's completed runs; a group whose runs all diverged ranks below every
accuracy ("div."). "At every tau" means at every tau of the round-based methods where the
compared methods both have runs; a tau-less method (`TAU_LESS`: sync SGD, PowerSGD,
pseudo-sync) has one accuracy over all its runs and competes with it at every tau. Times and
ratios are means over completed runs; "per epoch" divides a run's final cumulative value by its
epochs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from analysis.load import TAU_LESS
from experiments.errors import UserError

OVERLAP, COCOD, EAMSGD = "overlap_local_sgd", "cocod_sgd", "eamsgd"
SYNC, POWERSGD, PSEUDO = "sync_sgd", "powersgd", "pseudo_sync"
OSP, LOSP = "osp", "losp"
LOCAL_METHODS = ("local_sgd", OVERLAP)
# "much lower": CoCoD-SGD's accuracy this far below Overlap-Local-SGD's counts as a breakdown.
COLLAPSE_MARGIN = 0.1
# "far below": Overlap-Local-SGD's comm/compute ratio under this fraction of sync SGD's.
FAR_BELOW = 0.2
# "comparable": accuracies within this much of each other.
COMPARABLE = 0.02
FINISHED = ("completed", "diverged")


@dataclass(frozen=True)
class ClaimResult:
    """One checked claim: `holds` None means the runs cannot tell."""

    name: str
    text: str
    holds: bool | None
    evidence: str

    @property
    def verdict(self) -> str:
        return {True: "holds", False: "does not hold", None: "cannot tell"}[self.holds]

    def line(self) -> str:
        """ "holds: <text> (<name>). <evidence>" on one line."""
        return f"{self.verdict}: {self.text} ({self.name}). {self.evidence}"


Claim = Callable[[pd.DataFrame, dict], ClaimResult]
CLAIMS: dict[str, Claim] = {}


def claim(name: str, text: str) -> Callable[[Callable], Claim]:
    """Register `check(runs, report) -> (holds, evidence)` as the claim `name` of `text`;
    `runs` is the frame of `per_run`."""

    def register(check: Callable[[pd.DataFrame, dict], tuple[bool | None, str]]) -> Claim:
        def run(summaries: pd.DataFrame, report: dict) -> ClaimResult:
            holds, evidence = check(per_run(summaries), dict(report or {}))
            return ClaimResult(name, text, holds, evidence)

        run.__name__, run.__doc__ = check.__name__, f"{text}. {check.__doc__ or ''}".strip()
        CLAIMS[name] = run
        return run

    return register


def check_claims(
    summaries: pd.DataFrame, report: Mapping[str, Any], names: Iterable[str] | None = None
) -> list[ClaimResult]:
    """Check the claims `names` (default: `report["claims"]`) in that order."""
    if names is None:
        names = report.get("claims") or ()
    names = [names] if isinstance(names, str) else list(names)
    validate_claims(names)
    return [CLAIMS[name](summaries, dict(report)) for name in names]


def validate_claims(names: Iterable[str]) -> None:
    """A UserError naming every name that is not in `CLAIMS`."""
    unknown = [name for name in names if name not in CLAIMS]
    if unknown:
        known = ", ".join(sorted(CLAIMS))
        raise UserError(f"unknown claim(s) in report.claims: {', '.join(unknown)} (known: {known})")


def claims_markdown(results: Sequence[ClaimResult], title: str | None = None) -> str:
    """`claims.md`: a heading, then one line per claim (verdict, text, evidence)."""
    lines = [f"# Claims: {title}" if title else "# Claims", ""]
    if not results:
        lines.append("No claims listed in the preset's report node.")
    lines += [f"- **{r.verdict}**: {r.text} (`{r.name}`). {r.evidence}" for r in results]
    return "\n".join(lines)


def write_claims(
    results: Sequence[ClaimResult], out_dir: str | Path, title: str | None = None
) -> Path:
    """Write `claims.md` into `out_dir`."""
    path = Path(out_dir) / "claims.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(claims_markdown(results, title) + "\n")
    return path


def per_run(summaries: pd.DataFrame) -> pd.DataFrame:
    """The finished runs in the few columns the claims use: `algorithm`, `tau` (NaN for tau-less
    methods), `seed`, `workers`, `rank` (`algorithm.rank`), `slowdown` (`compute.slowdown` as
    text), `diverged`, `acc` (final test accuracy; NaN unless completed), `ratio` (comm/compute),
    `exposed_per_epoch`, `train_per_epoch` (NaN unless completed)."""
    frame = summaries.drop_duplicates("run_dir") if "run_dir" in summaries.columns else summaries
    frame = frame.reset_index(drop=True)
    status = frame.get("summary.status", pd.Series("completed", index=frame.index))
    frame, status = frame[status.isin(FINISHED)], status[status.isin(FINISHED)]
    completed = status.eq("completed")

    def number(column: str) -> pd.Series:
        if column not in frame.columns:
            return pd.Series(math.nan, index=frame.index, dtype=float)
        return pd.to_numeric(frame[column], errors="coerce").astype(float)

    def text(column: str) -> pd.Series:
        if column not in frame.columns:
            return pd.Series(None, index=frame.index, dtype=object)
        return frame[column].map(_text)

    algorithm = text("algorithm.name")
    epochs = number("summary.epochs").fillna(number("epochs"))
    epochs = epochs.where(epochs > 0)
    compute, exposed = number("summary.time/compute_s"), number("summary.time/comm_exposed_s")
    ratio = number("summary.comm/ratio").fillna((exposed / compute).where(compute > 0))
    return pd.DataFrame(
        {
            "algorithm": algorithm,
            "tau": number("tau").where(~algorithm.isin(TAU_LESS)),
            "seed": number("seed"),
            "workers": number("workers"),
            "rank": number("algorithm.rank"),
            "slowdown": text("compute.slowdown"),
            "diverged": status.eq("diverged"),
            "acc": number("summary.final/test_acc").where(completed),
            "ratio": ratio.where(completed),
            "exposed_per_epoch": (exposed / epochs).where(completed),
            "train_per_epoch": (number("summary.time/train_s") / epochs).where(completed),
        }
    ).reset_index(drop=True)


# --- accuracy -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Acc:
    """A group's accuracy: mean over completed runs, their count, and its diverged runs."""

    mean: float
    n: int
    diverged: int

    @property
    def score(self) -> float:
        # All diverged ranks below any accuracy.
        return self.mean if self.n else -math.inf

    def __str__(self) -> str:
        if not self.n:
            return "div."
        return f"{self.mean:.3f}" + (f" ({self.diverged} div.)" if self.diverged else "")


def _accuracies(runs: pd.DataFrame, by: Sequence[str]) -> dict[tuple, _Acc]:
    result = {}
    for key, group in runs.groupby(list(by), sort=True, dropna=False):
        key = key if isinstance(key, tuple) else (key,)
        values = group["acc"].dropna()
        mean = float(values.mean()) if len(values) else math.nan
        result[key] = _Acc(mean, len(values), int(group["diverged"].sum()))
    return result


def _round_based(runs: pd.DataFrame) -> pd.DataFrame:
    return runs[runs["tau"].notna() & runs["algorithm"].notna()]


def _by_tau(runs: pd.DataFrame) -> dict[float, dict[str, _Acc]]:
    """tau -> algorithm -> accuracy: the round-based methods at their taus, each tau-less method
    at every one of those taus."""
    table: dict[float, dict[str, _Acc]] = {}
    for (tau, algorithm), acc in _accuracies(_round_based(runs), ["tau", "algorithm"]).items():
        table.setdefault(tau, {})[algorithm] = acc
    tau_less = runs[runs["tau"].isna() & runs["algorithm"].notna()]
    for (algorithm,), acc in _accuracies(tau_less, ["algorithm"]).items():
        for methods in table.values():
            methods[algorithm] = acc
    return dict(sorted(table.items()))


def _missing(name: str, what: str = "run") -> tuple[None, str]:
    return None, f"no completed or diverged {name} {what}"


def _tau(tau: float) -> str:
    return f"tau={int(tau)}" if float(tau).is_integer() else f"tau={tau:g}"


def _verdict(decided: list[bool], undecided: int) -> bool | None:
    if not all(decided):
        return False
    return True if decided and not undecided else None


@claim(
    "overlap_best_at_every_tau",
    "Overlap-Local-SGD has the best accuracy at every tau",
)
def overlap_best_at_every_tau(runs: pd.DataFrame, report: dict) -> tuple[bool | None, str]:
    """Among the methods present, at each tau; a tie counts as best."""
    by_tau = _by_tau(runs)
    if not any(OVERLAP in methods for methods in by_tau.values()):
        return _missing(OVERLAP)
    decided, undecided, parts = [], 0, []
    for tau, methods in by_tau.items():
        others = {a: acc for a, acc in methods.items() if a != OVERLAP}
        if OVERLAP not in methods or not others:
            undecided += 1
            parts.append(f"{_tau(tau)}: no {OVERLAP if OVERLAP not in methods else 'other method'}")
            continue
        best = max(methods, key=lambda a: (methods[a].score, a == OVERLAP))
        other = max(others, key=lambda a: others[a].score)
        decided.append(methods[OVERLAP].score >= others[other].score)
        parts.append(
            f"{_tau(tau)}: best {best} {methods[best]}; {OVERLAP} {methods[OVERLAP]} vs best "
            f"other {other} {others[other]}"
        )
    return _verdict(decided, undecided), "; ".join(parts)


@claim("eamsgd_worst", "EAMSGD is the worst method")
def eamsgd_worst(runs: pd.DataFrame, report: dict) -> tuple[bool | None, str]:
    """Lowest accuracy among the methods present at every tau; failing that, the lowest mean
    final accuracy over the completed runs at those taus, which the evidence then says."""
    by_tau = _by_tau(runs)
    taus = [t for t, methods in by_tau.items() if EAMSGD in methods and len(methods) > 1]
    if not any(EAMSGD in methods for methods in by_tau.values()):
        return _missing(EAMSGD)
    if not taus:
        return None, f"no tau with {EAMSGD} and another method"
    worst_at, parts = [], []
    for tau in taus:
        methods = by_tau[tau]
        others = {a: acc for a, acc in methods.items() if a != EAMSGD}
        lowest = min(others, key=lambda a: others[a].score)
        worst_at.append(methods[EAMSGD].score <= others[lowest].score)
        parts.append(
            f"{_tau(tau)}: {EAMSGD} {methods[EAMSGD]} vs next-lowest {lowest} {others[lowest]}"
        )
    if all(worst_at):
        return True, "lowest at every tau: " + "; ".join(parts)
    counted = runs[runs["tau"].isin(taus) | runs["tau"].isna()]
    overall = counted.groupby("algorithm")["acc"].mean().dropna()
    where = ", ".join(_tau(t) for t, w in zip(taus, worst_at, strict=True) if not w)
    if EAMSGD not in overall or len(overall) < 2:
        return False, f"not lowest at {where}: " + "; ".join(parts)
    others = overall.drop(EAMSGD)
    lowest = others.idxmin()
    mean_text = (
        f"mean over {', '.join(_tau(t) for t in taus)}: {EAMSGD} {overall[EAMSGD]:.3f} vs "
        f"next-lowest {lowest} {others[lowest]:.3f}"
    )
    if overall[EAMSGD] <= others[lowest]:
        return True, f"lowest on the mean over tau ({mean_text}), not at {where}; " + "; ".join(
            parts
        )
    return False, f"not lowest at {where}, nor on the mean ({mean_text}); " + "; ".join(parts)


@claim(
    "cocod_diverges_at_large_tau_overlap_does_not",
    "CoCoD-SGD diverges at large tau in non-IID while Overlap-Local-SGD does not",
)
def cocod_diverges_at_large_tau(runs: pd.DataFrame, report: dict) -> tuple[bool | None, str]:
    """At the largest tau of the round-based runs: CoCoD-SGD has a diverged run or an accuracy
    more than COLLAPSE_MARGIN below Overlap-Local-SGD's, and Overlap-Local-SGD no diverged run."""
    local = _round_based(runs)
    if local.empty:
        return None, "no round-based run with a tau"
    tau = float(local["tau"].max())
    at = _accuracies(local[local["tau"] == tau], ["algorithm"])
    for name in (COCOD, OVERLAP):
        if (name,) not in at:
            return None, f"no completed or diverged {name} run at the largest {_tau(tau)}"
    cocod, overlap = at[(COCOD,)], at[(OVERLAP,)]
    runs_of = {a: acc.n + acc.diverged for (a,), acc in at.items()}

    def said(name: str, acc: _Acc) -> str:
        accuracy = f", accuracy {acc.mean:.3f}" if acc.n else ""
        return f"{name} {acc.diverged}/{runs_of[name]} diverged{accuracy}"

    collapsed = cocod.diverged > 0 or (
        overlap.n > 0 and cocod.n > 0 and cocod.mean < overlap.mean - COLLAPSE_MARGIN
    )
    holds = collapsed and overlap.diverged == 0
    return holds, f"largest {_tau(tau)}: {said(COCOD, cocod)}; {said(OVERLAP, overlap)}"


@claim(
    "overlap_ratio_far_below_sync",
    "Overlap-Local-SGD's communication-to-computation ratio is far below sync SGD's",
)
def overlap_ratio_far_below_sync(runs: pd.DataFrame, report: dict) -> tuple[bool | None, str]:
    """At every tau, Overlap-Local-SGD's mean final comm/ratio < FAR_BELOW x sync SGD's."""
    sync = runs.loc[runs["algorithm"] == SYNC, "ratio"].dropna()
    overlap = runs[(runs["algorithm"] == OVERLAP) & runs["ratio"].notna()]
    if sync.empty:
        return _missing(SYNC, "run with a comm/compute ratio")
    if overlap.empty:
        return _missing(OVERLAP, "run with a comm/compute ratio")
    reference = float(sync.mean())
    decided, parts = [], []
    for tau, group in overlap.groupby("tau", dropna=False):
        ratio = float(group["ratio"].mean())
        decided.append(ratio < FAR_BELOW * reference)
        times = f"{ratio / reference:.2f}x" if reference > 0 else "n/a"
        where = f" at {_tau(tau)}" if pd.notna(tau) else ""
        parts.append(f"{OVERLAP}{where} {100 * ratio:.1f}% ({times})")
    evidence = f"{SYNC} {100 * reference:.1f}%; " + "; ".join(parts)
    return all(decided), f"{evidence}; far below = under {FAR_BELOW:g}x"


@claim(
    "powersgd_exposed_above_local_methods",
    "PowerSGD's exposed communication stays above the Local-SGD methods'",
)
def powersgd_exposed_above_local(runs: pd.DataFrame, report: dict) -> tuple[bool | None, str]:
    """Exposed communication per epoch: PowerSGD's lowest over its ranks above the highest of
    Local SGD and Overlap-Local-SGD over their taus."""
    timed = runs[runs["exposed_per_epoch"].notna()]
    power = timed[timed["algorithm"] == POWERSGD]
    local = timed[timed["algorithm"].isin(LOCAL_METHODS)]
    if power.empty:
        return _missing(POWERSGD, "run with exposed communication")
    if local.empty:
        return _missing(" or ".join(LOCAL_METHODS), "run with exposed communication")
    by_rank = power.groupby("rank", dropna=False)["exposed_per_epoch"].mean()
    low_rank = by_rank.idxmin()
    low = float(by_rank.min())
    by_method = local.groupby(["algorithm", "tau"], dropna=False)["exposed_per_epoch"].mean()
    (high_method, high_tau), high = by_method.idxmax(), float(by_method.max())
    rank = f" (rank {int(low_rank)})" if pd.notna(low_rank) else ""
    where = f" {_tau(high_tau)}" if pd.notna(high_tau) else ""
    evidence = (
        f"{POWERSGD} lowest {low:.3g} s/epoch{rank}; local methods highest {high:.3g} s/epoch "
        f"({high_method}{where})"
    )
    return low > high, evidence


@claim("losp_beats_osp", "LOSP reaches higher accuracy than OSP")
def losp_beats_osp(runs: pd.DataFrame, report: dict) -> tuple[bool | None, str]:
    """At every tau where both ran, LOSP's mean final accuracy (over seeds and slowdowns) is
    above OSP's."""
    by_tau = _by_tau(runs)
    both = {t: m for t, m in by_tau.items() if OSP in m and LOSP in m}
    if not both:
        present = {a for m in by_tau.values() for a in m}
        if OSP not in present or LOSP not in present:
            return _missing(OSP if OSP not in present else LOSP)
        return None, f"no tau with both {OSP} and {LOSP}"
    decided, parts = [], []
    for tau, methods in both.items():
        decided.append(methods[LOSP].score > methods[OSP].score)
        parts.append(f"{_tau(tau)}: {LOSP} {methods[LOSP]} vs {OSP} {methods[OSP]}")
    undecided = sum(1 for m in by_tau.values() if (OSP in m) != (LOSP in m))
    return _verdict(decided, undecided), "; ".join(parts)


@claim(
    "osp_losp_faster_than_sync_under_heterogeneity",
    "OSP/LOSP train faster than sync SGD with heterogeneous workers",
)
def osp_losp_faster_than_sync(runs: pd.DataFrame, report: dict) -> tuple[bool | None, str]:
    """Per heterogeneous `compute.slowdown` (anything but none): OSP's and LOSP's mean training
    time per epoch below sync SGD's."""
    timed = runs[runs["train_per_epoch"].notna() & runs["slowdown"].notna()]
    hetero = timed[~timed["slowdown"].isin(("none", "None"))]
    if hetero.empty:
        return (
            None,
            "no completed run with heterogeneous workers (compute.slowdown other than none)",
        )
    decided, undecided, parts = [], 0, []
    for slowdown, group in hetero.groupby("slowdown", sort=True):
        means = group.groupby("algorithm")["train_per_epoch"].mean()
        fast = [a for a in (OSP, LOSP) if a in means]
        if SYNC not in means or not fast:
            undecided += 1
            parts.append(f"{slowdown}: no {SYNC if SYNC not in means else f'{OSP} or {LOSP}'}")
            continue
        decided += [bool(means[a] < means[SYNC]) for a in fast]
        times = ", ".join(f"{a} {means[a]:.3g}" for a in fast)
        parts.append(f"{slowdown}: {SYNC} {means[SYNC]:.3g} s/epoch, {times}")
    return _verdict(decided, undecided), "; ".join(parts)


@claim(
    "pseudo_sync_matches_sync",
    "Pseudo-synchronous SGD reaches accuracy comparable to synchronous SGD",
)
def pseudo_sync_matches_sync(runs: pd.DataFrame, report: dict) -> tuple[bool | None, str]:
    """Mean final accuracies within COMPARABLE, at every worker count where both ran."""
    at = _accuracies(runs[runs["algorithm"].isin((PSEUDO, SYNC))], ["workers", "algorithm"])
    by_m: dict[float, dict[str, _Acc]] = {}
    for (m, algorithm), acc in at.items():
        by_m.setdefault(m, {})[algorithm] = acc
    both = {m: a for m, a in by_m.items() if PSEUDO in a and SYNC in a}
    if not both:
        present = {a for methods in by_m.values() for a in methods}
        if PSEUDO not in present or SYNC not in present:
            return _missing(PSEUDO if PSEUDO not in present else SYNC)
        return None, f"no worker count with both {PSEUDO} and {SYNC}"
    decided, parts = [], []
    for m, methods in both.items():
        pseudo, sync = methods[PSEUDO], methods[SYNC]
        close = pseudo.n > 0 and sync.n > 0 and abs(pseudo.mean - sync.mean) <= COMPARABLE
        decided.append(close)
        where = f"m={int(m)}: " if len(by_m) > 1 and pd.notna(m) else ""
        diff = f" ({pseudo.mean - sync.mean:+.3f})" if pseudo.n and sync.n else ""
        parts.append(f"{where}{PSEUDO} {pseudo} vs {SYNC} {sync}{diff}")
    undecided = len(by_m) - len(both)
    evidence = "; ".join(parts) + f"; comparable = within {COMPARABLE:g}"
    return _verdict(decided, undecided), evidence


def _text(value: Any) -> str | None:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(str(v) for v in value) + "]"
    return str(value)
