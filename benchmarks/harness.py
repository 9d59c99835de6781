"""What every benchmark family shares: running the suite through its public interface
(`python run.py key=value ...` in a subprocess, then its run records), running the baselines,
medians of interleaved repetitions, and the description of the machine.

Timing rule of the whole package: a figure is a ratio of two numbers measured in the same
`python -m benchmarks` invocation, with the repetitions of A and B interleaved (A B A B ...),
and the ratio is taken between medians. Every ratio comes with its 95% bootstrap interval over
the units its noise comes in (`bootstrap_interval`: interleaved repetitions, launches, epochs),
and a target is "met" only when the whole interval meets it ("within noise" when the interval
straddles it). Absolute seconds are printed for context only: the machine may be shared.
"""

from __future__ import annotations

import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from experiments.store.provenance import REPO

#: Overrides of every suite run made by the benchmarks: no W&B, no progress bar.
QUIET = ("wandb.mode=disabled", "progress=false")
#: Suite launches that failed and were retried once (reported with the results).
FAILURES: list[str] = []


@dataclass
class Run:
    """One finished run of the suite: its records, and when its metrics rows appeared."""

    run_dir: Path
    config: dict
    summary: dict
    rows: list[dict]
    #: perf_counter() times at which the parent saw each metrics row (when watched), so the
    #: wall-clock of the training between two evaluations can be measured from outside.
    row_seen_s: list[float] = field(default_factory=list)

    @property
    def steps(self) -> int:
        return int(self.summary["steps"])

    @property
    def step_s(self) -> float:
        """Training time per step on the run's own clock (`time/train_s` / steps)."""
        return self.summary["time/train_s"] / self.steps

    def epoch_step_s(self, skip_first: bool = True) -> list[float]:
        """Per evaluation interval (eval_every=1: per epoch), `time/train_s` per step; the
        first interval (warm-up: first collectives, allocator) is skipped by default."""
        return per_interval(self.rows, [r["time/train_s"] for r in self.rows], skip_first)

    def epoch_wall_step_s(self) -> list[float]:
        """Per interval between two watched metrics rows (eval_every=1: epochs 2, 3, ...),
        wall-clock per step with the evaluation time between the rows taken out."""
        if len(self.row_seen_s) != len(self.rows) or len(self.rows) < 2:
            raise ValueError(f"{self.run_dir.name}: needs >= 2 watched metrics rows")
        wall = [
            seen - row["time/eval_s"] for seen, row in zip(self.row_seen_s, self.rows, strict=True)
        ]
        return per_interval(self.rows, wall, skip_first=True)

    def wall_step_s(self) -> float:
        """Wall-clock seconds per step between the first and last evaluation, evaluation time
        excluded: works on either clock (the virtual clock's `time/train_s` is modeled)."""
        if len(self.row_seen_s) < 2 or len(self.rows) < 2:
            raise ValueError(f"{self.run_dir.name}: needs >= 2 watched metrics rows")
        first, last = self.rows[0], self.rows[-1]
        wall = (self.row_seen_s[-1] - self.row_seen_s[0]) - (
            last["time/eval_s"] - first["time/eval_s"]
        )
        return wall / (last["step"] - first["step"])


def per_interval(rows: list[dict], clock: list[float], skip_first: bool) -> list[float]:
    """(clock[i] - clock[i-1]) / (step[i] - step[i-1]) for consecutive rows (row -1: 0, 0)."""
    out, last_t, last_step = [], 0.0, 0
    for row, t in zip(rows, clock, strict=True):
        if row["step"] > last_step:
            out.append((t - last_t) / (row["step"] - last_step))
        last_t, last_step = t, row["step"]
    return out[1:] if skip_first else out


def child_env() -> dict[str, str]:
    env = {**os.environ, "WANDB_SILENT": "true", "PYTHONUNBUFFERED": "1"}
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        env.pop(key, None)  # the suite would take itself for a torchrun worker
    return env


def run_command(
    cmd: Sequence[str],
    *,
    timeout: float,
    watch: Path | None = None,
    env: dict[str, str] | None = None,
):
    """Run `cmd` from the repository root; fail loudly with its output tail.

    watch: a folder whose `runs/*/metrics.jsonl` files are polled while the command runs;
    returns {metrics path: [time each new line was seen]}. env: extra environment variables.
    """
    seen: dict[Path, list[float]] = {}
    sizes: dict[Path, int] = {}
    paths: list[Path] = []
    next_glob = 0.0
    with tempfile.TemporaryFile("w+") as log:
        proc = subprocess.Popen(
            list(cmd),
            cwd=REPO,
            env={**child_env(), **(env or {})},
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
        )
        deadline = time.perf_counter() + timeout
        while proc.poll() is None:
            if time.perf_counter() > deadline:
                proc.kill()
                proc.wait()
                raise TimeoutError(f"{' '.join(cmd[:4])} ...: no result after {timeout:.0f} s")
            if watch is None:
                time.sleep(0.05)
                continue
            now = time.perf_counter()
            if now >= next_glob:  # new run directories appear rarely: look every 0.1 s
                paths, next_glob = list((watch / "runs").glob("*/metrics.jsonl")), now + 0.1
            for path in paths:
                size = _size(path)
                if size != sizes.get(path):  # read only what changed
                    sizes[path] = size
                    times = seen.setdefault(path, [])
                    times.extend([now] * (_count_lines(path) - len(times)))
            time.sleep(0.004)
        if proc.returncode != 0:
            log.seek(0)
            tail = log.read()[-8000:]
            raise RuntimeError(f"{' '.join(cmd)}\nexit {proc.returncode}:\n{tail}")
    return seen


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return -1


def _count_lines(path: Path) -> int:
    try:
        with path.open("rb") as f:
            return f.read().count(b"\n")
    except OSError:
        return 0


def suite(
    overrides: Iterable[str],
    *,
    multirun: bool = False,
    watch: bool = False,
    timeout: float = 900,
) -> list[Run]:
    """`python run.py [-m] OVERRIDES` into a fresh out_root; returns its runs in launch order
    (a multirun's jobs run one after the other, in Hydra's order: the last swept key varies
    fastest)."""
    for attempt in (1, 2):
        out_root = Path(tempfile.mkdtemp(prefix="bench-"))
        cmd = [sys.executable, "run.py", *(["-m"] if multirun else []), *QUIET, *overrides]
        # Run directories are named by the runs' configs (`<readable>-<digest>`, short), the
        # sweep's points one each.
        cmd.append(f"out_root={out_root}")
        try:
            seen = run_command(cmd, timeout=timeout, watch=out_root if watch else None)
            break
        except RuntimeError as e:
            # The tree may be edited while the benchmarks run: one retry, and the failure is
            # reported with the results (its folder kept, to look at).
            FAILURES.append(str(e))
            if attempt == 2:
                raise
    runs = _read_runs(out_root, seen, watch)  # a run that did not complete: its folder kept
    shutil.rmtree(out_root, ignore_errors=True)  # all read: no benchmark leaves one in /tmp
    return runs


def _read_runs(out_root: Path, seen: dict, watch: bool) -> list[Run]:
    """The runs under `out_root` (every one completed, else a RuntimeError), read whole."""
    runs = []
    for run_dir in (out_root / "runs").iterdir():
        if not (run_dir / "summary.json").is_file():
            continue
        summary = json.loads((run_dir / "summary.json").read_text())
        if summary.get("status") != "completed":
            raise RuntimeError(f"{run_dir}: status {summary.get('status')}")
        rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
        runs.append(
            Run(
                run_dir=run_dir,
                config=_load_config(run_dir),
                summary=summary,
                rows=rows,
                row_seen_s=seen.get(run_dir / "metrics.jsonl", []),
            )
        )
    runs.sort(key=lambda r: r.summary.get("started_at", ""))
    if watch:  # the watch times order the runs to the millisecond
        runs.sort(key=lambda r: r.row_seen_s[0] if r.row_seen_s else float("inf"))
    return runs


def _load_config(run_dir: Path) -> dict:
    from omegaconf import OmegaConf

    return OmegaConf.to_container(OmegaConf.load(run_dir / "config.yaml"), resolve=True)


def pick(runs: Sequence[Run], **want) -> list[Run]:
    """The runs whose config matches every dotted key=value of `want` (`algorithm__name=`)."""
    out = []
    for run in runs:
        ok = True
        for key, value in want.items():
            node = run.config
            for part in key.split("__"):
                node = node.get(part) if isinstance(node, dict) else None
            ok = ok and node == value
        if ok:
            out.append(run)
    return out


def baseline(mode: str, overrides: Sequence[str], *, device: str, timeout: float = 900) -> dict:
    """`python -m benchmarks.baselines MODE OVERRIDES`: plain PyTorch on the suite's config."""
    with tempfile.TemporaryDirectory(prefix="bench-base-") as tmp:
        out = Path(tmp) / "result.json"
        cmd = [sys.executable, "-m", "benchmarks.baselines", mode, "--out", str(out)]
        cmd += ["--device", device, *overrides]
        run_command(cmd, timeout=timeout)
        return json.loads(out.read_text())


def median(values: Iterable[float]) -> float:
    return statistics.median(list(values))


def geomean(values: Iterable[float]) -> float:
    """The geometric mean of positive ratios."""
    values = list(values)
    if not values or min(values) <= 0:
        raise ValueError(f"geomean needs positive values, got {values}")
    return math.exp(sum(math.log(v) for v in values) / len(values))


def low_quantile(values: Iterable[float], q: float = 0.1) -> float:
    """The `q` quantile (default: the fastest tenth). Interference from other processes only
    adds time to a step, so on shared cores a low quantile measures the code's own cost: for
    the step-level ratios, medians of two launches differed by up to 8% where the 10th
    percentiles stayed within 2% (measured on this project's 2-core machines)."""
    ordered = sorted(values)
    return ordered[int(q * (len(ordered) - 1))]


#: The confidence of every interval (two-sided) and the bootstrap's resamples.
CONFIDENCE = 0.95
BOOTSTRAP = 2000


def bootstrap_interval(
    groups: Sequence[Sequence],
    figure: Callable[[list], float],
    *,
    resamples: int = BOOTSTRAP,
    seed: int = 0,
) -> tuple[float, float]:
    """The 95% percentile-bootstrap interval of `figure(groups)`: `groups` are the units the
    noise comes in (an interleaved repetition's pair of measurements, a launch, one side's
    list of samples), resampled with replacement, `figure` recomputed on each resample. Why by
    hand: scipy's `bootstrap` would do it, but scipy is not a dependency of the suite, and the
    figures here are computed from nested groups (pairs of lists), not from flat samples."""
    import random

    rng = random.Random(seed)
    n = len(groups)
    if n < 2:
        value = figure(list(groups))
        return value, value
    values = sorted(figure([groups[rng.randrange(n)] for _ in range(n)]) for _ in range(resamples))
    tail = (1 - CONFIDENCE) / 2
    return values[int(tail * (resamples - 1))], values[int((1 - tail) * (resamples - 1))]


def two_sample_interval(
    xs: Sequence[float],
    ys: Sequence[float],
    stat: Callable[[list], float] = statistics.mean,
    *,
    resamples: int = BOOTSTRAP,
    seed: int = 0,
) -> tuple[float, float]:
    """The 95% bootstrap interval of stat(xs) / stat(ys), each side resampled on its own (two
    runs' per-epoch or per-step times: no pairing between them)."""
    import random

    rng = random.Random(seed)
    values = sorted(
        stat(rng.choices(xs, k=len(xs))) / stat(rng.choices(ys, k=len(ys)))
        for _ in range(resamples)
    )
    tail = (1 - CONFIDENCE) / 2
    return values[int(tail * (resamples - 1))], values[int((1 - tail) * (resamples - 1))]


def half_width(interval: tuple[float, float], value: float) -> float:
    """The interval's larger distance from `value`, relative to it (0.02 = +-2%)."""
    low, high = interval
    return max(value - low, high - value) / value if value else math.inf


def machine() -> dict[str, str]:
    """The machine, the versions and the state of the tree, for the results' header."""
    import torch

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    from experiments.store.records import git_sha

    gpu = "none"
    if torch.cuda.is_available():
        gpu = f"{torch.cuda.device_count()} x {torch.cuda.get_device_name(0)}"
    return {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "host": platform.node(),
        "cpu": f"{cpu}, {os.cpu_count()} logical cores",
        "gpu": gpu,
        "os": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "git": git_sha(),  # with -dirty when the tree had local changes
        "load_avg": " / ".join(f"{x:.2f}" for x in os.getloadavg()),
    }
