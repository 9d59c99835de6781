"""Did a run converge? The rule (experiments/store/convergence.py, whose docstring states and
measures it) applied to the metric rows of many runs at once (`run_convergence`), and how the
tables show it (`converged_cell`, `DEFINITION`). The rule's names are importable from here too.
"""

from __future__ import annotations

import pandas as pd

from experiments.store.convergence import (
    ACC,
    CRITERION,
    LOSS,
    LR,
    Criterion,
    converged,
    decay_starts,
    evaluations_before_decays,
    plateaued,
)
from experiments.store.crossing import per_pass

# The rule's names, importable from here as before it moved below the analysis.
__all__ = ["ACC", "CRITERION", "LOSS", "LR", "Criterion", "converged", "decay_starts"]
__all__ += ["evaluations_before_decays", "plateaued", "run_convergence", "converged_cell"]
__all__ += ["DEFINITION"]


def run_convergence(metrics: pd.DataFrame, criterion: Criterion = CRITERION) -> pd.Series:
    """Per run (index `run_dir`): whether it converged, from the metric rows of `metrics` (one
    row per evaluation; `summary.status` diverged: not converged). The LR decays are read from
    the rows' `lr`, else from the run's config columns (`epochs`, `lr_decay_at`, `lr_decay`,
    `warmup_epochs`) and the rows' `epoch`."""
    if metrics.empty or "run_dir" not in metrics.columns:
        return pd.Series(dtype=bool, index=pd.Index([], name="run_dir"))
    # only the columns the rule reads: a report's rows carry every config key (hundreds of
    # columns), which made the per-run copies below most of the time
    data = metrics[[c for c in metrics.columns if c in _READ]]
    order = [c for c in ("step", "epoch") if c in data.columns]
    data = data.sort_values(order, kind="stable") if order else data
    result = {}
    for run_dir, rows in data.groupby("run_dir", sort=False):
        status = rows["summary.status"].iloc[0] if "summary.status" in rows else "completed"
        if status == "diverged" or ACC not in rows or LOSS not in rows:
            result[run_dir] = False
            continue
        rows = rows.dropna(subset=[ACC])
        if "test/images" in rows and rows["test/images"].notna().any() and "epochs" in rows:
            # a time budget's points, one per pass of its schedule (experiments/store/crossing.py)
            kept = per_pass(rows.to_dict("records"), int(rows["epochs"].iloc[0]))
            rows = pd.DataFrame(kept, columns=rows.columns)
        acc = pd.to_numeric(rows[ACC], errors="coerce").tolist()
        loss = pd.to_numeric(rows[LOSS], errors="coerce").tolist()
        result[run_dir] = converged(acc, loss, criterion, decays=_decays(rows))
    series = pd.Series(result, dtype=bool)
    series.index.name = "run_dir"
    return series


_READ = {"run_dir", "summary.status", ACC, LOSS, LR, "step", "epoch", "epochs", "test/images"}
_READ |= {"time/train_s", "lr_decay_at", "lr_decay", "warmup_epochs"}


def _decays(rows: pd.DataFrame) -> list[int]:
    """For one run's evaluation rows: how many of them came before each LR decay."""
    if LR in rows:
        lrs = pd.to_numeric(rows[LR], errors="coerce")
        if len(lrs) and lrs.notna().all():
            return evaluations_before_decays(lrs.tolist())
    if not {"epoch", "epochs", "lr_decay_at"} <= set(rows.columns):
        return []
    first = rows.iloc[0]
    starts = decay_starts(
        first["epochs"],
        first["lr_decay_at"],
        first.get("lr_decay", 0.1),
        first.get("warmup_epochs", 0),
    )
    epoch = pd.to_numeric(rows["epoch"], errors="coerce")
    return [int((epoch <= start).sum()) for start in starts]


def converged_cell(converged_runs: int, runs: int) -> str:
    """ "yes" (every run), "no" (none), "2/3"; "—" for no run."""
    if runs == 0:
        return "—"
    if converged_runs == runs:
        return "yes"
    return "no" if converged_runs == 0 else f"{converged_runs}/{runs}"


DEFINITION = (
    f"converged: over its last quarter of evaluations (at least {CRITERION.min_window}) every "
    f"test accuracy is within {CRITERION.acc_tol:g} of the run's best and the training loss fell "
    f"by at most {CRITERION.loss_frac:.0%} of its whole fall; when the LR schedule decayed the "
    "LR, this also holds on the evaluations before the final decay alone (at least 3), and the "
    "loss part on those before each earlier decay (when at least 3): a plateau that a decayed "
    "LR makes does not count (analysis/runs/convergence.py)"
)
