"""The benchmark results as Markdown (RESULTS.md) and JSON (every figure, for tests and tools)."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.families import Section

INTRO = """\
# Performance benchmarks

What the suite costs on top of plain PyTorch, and whether its overlap methods really hide
communication. Every figure is a **ratio of two measurements made side by side in the same
`python -m benchmarks` invocation** (repetitions of A and B interleaved, ratio of medians), so a
busy machine slows both sides alike; absolute milliseconds are printed for context only.

Every timed ratio comes with its **95% bootstrap interval** over the units its noise comes in
(interleaved repetitions, launches of the step-level harness, epochs), and a target is **met**
only when the whole interval meets it, **MISSED** when none of it does, and **within noise**
when the interval straddles the target. The headline rows (sync_sgd / DDP, the loop's overhead,
overlap) repeat until their interval is within +-2% (or a cap of repetitions: then the interval
says how far they got).

How each figure is measured (details in each section and in `benchmarks/`):

1. **Overhead against plain PyTorch.** Time per training step of `run.py` (`time/train_s` /
   `steps`: data + forward/backward/step + communication, no start-up, no evaluation) against a
   plain script on the same composed config (`benchmarks/baselines.py`): `sync_sgd` vs
   `DistributedDataParallel` with 4 gloo workers; `local_sgd` at tau = 1000 (no sync) vs plain
   single-process training, i.e. the loop's own overhead. Target <= 1.02.
2. **Overlap efficiency.** Time per step with `emulate_network=true` on a network whose modeled
   all-reduce of the model takes one compute step, over the same run on the ideal network, at
   tau = 2. Target <= 1.05 for the overlap methods; `local_sgd` shows ~1.5 for contrast. Next to
   it the communication-to-computation ratio (`comm_exposed_s / compute_s`) and the
   Overlap-Local-SGD paper's 34.6% (sync) and 1.5% (overlap, tau = 2).
3. **Communication volume.** `comm/bytes` per step of every algorithm over its closed form
   (exactly 1 expected), and PowerSGD's compression on the CIFAR ResNet-18 at ranks 1/2/4/8.
4. **Memory.** Peak resident memory per worker under each algorithm over plain training of the
   same model in the same process, and the model-sized copies each algorithm holds.
5. **Virtual-clock overhead.** Wall-clock per step with `timing=virtual` over `timing=real`
   (no emulation), watched from outside the run. Target <= 1.02.
6. **Scaling on one machine.** Steps and samples per second for 1, 2, 4 and 8 workers.
"""


def markdown(
    sections: list[Section],
    meta: dict,
    errors: dict[str, str],
    retries: list[str] = (),
    intro: str = INTRO,
) -> str:
    out = [intro]
    out.append("## Machine and command\n")
    out.append("| | |\n|---|---|")
    for k, v in meta.items():
        out.append(f"| {k} | {str(v).replace('|', '/')} |")
    out.append("")
    if meta.get("device") == "cuda":
        out.append(
            f"GPU run (`--device cuda`, {meta.get('gpu')}): DDP on NCCL, CUDA memory; the CPU "
            "figures are in the CPU run's RESULTS.md."
        )
    else:
        out.append(
            "GPU figures (NCCL, `--device cuda`): **pending** — no GPU machine was available "
            "for this run (gpu: " + str(meta.get("gpu", "none")) + "); the harness supports "
            "`python -m benchmarks --device cuda --out benchmarks/RESULTS-gpu.md` (DDP on "
            "NCCL, CUDA memory), not yet run on a GPU."
        )
    out.append("")
    out.append("## Summary: every figure with a target\n")
    out.append(
        "| figure | measured | 95% interval (repetitions) | target | verdict |\n"
        "|---|---|---|---|---|"
    )
    for sec in sections:
        for f in sec.figures:
            if f.target:
                out.append(
                    f"| {f.name} | {f.value:.4g} | {f.interval_text} | {f.target} | {f.verdict} |"
                )
    for key, err in errors.items():
        out.append(f"| {key}: failed | - | - | - | ERROR: {err.splitlines()[0][:160]} |")
    out.append("")
    for sec in sections:
        out.append(f"## {sec.title}\n")
        out.append(sec.about + "\n")
        out.append("| " + " | ".join(sec.columns) + " |")
        out.append("|" + "---|" * len(sec.columns))
        for row in sec.rows:
            out.append("| " + " | ".join(str(c) for c in row) + " |")
        out.append("")
        for note in sec.notes:
            out.append(note + "\n")
    for key, err in errors.items():
        out.append(f"## {key}: failed\n\n```\n{err[-3000:]}\n```\n")
    if retries:
        out.append("## Launches that failed and were retried\n")
        out.append(
            "The tree was being edited while the benchmarks ran; each of these launches failed "
            "once and its figures come from the retry.\n"
        )
        for err in retries:
            out.append(f"```\n{err[-2500:]}\n```\n")
    return "\n".join(out).rstrip() + "\n"


def as_json(
    sections: list[Section], meta: dict, errors: dict[str, str], retries: list[str] = ()
) -> dict:
    return {
        "meta": meta,
        "errors": errors,
        "retries": list(retries),
        "sections": {
            sec.key: {
                "title": sec.title,
                "columns": sec.columns,
                "rows": sec.rows,
                "notes": sec.notes,
                "figures": [
                    {
                        "name": f.name,
                        "value": f.value,
                        "target": f.target,
                        "verdict": f.verdict,
                        "interval": list(f.interval) if f.interval is not None else None,
                        "reps": f.reps,
                    }
                    for f in sec.figures
                ],
            }
            for sec in sections
        },
    }


def write(
    path: Path,
    sections: list[Section],
    meta: dict,
    errors: dict[str, str],
    retries: list[str] = (),
    intro: str = INTRO,
) -> str:
    """Write `path` (Markdown) and `path` with suffix .json; return the Markdown. `sections`,
    `meta`, `errors` and `retries` as `markdown` and `as_json` take them; `intro`: the
    Markdown's opening text, the full bench's by default."""
    text = markdown(sections, meta, errors, retries, intro=intro)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    document = as_json(sections, meta, errors, retries)
    path.with_suffix(".json").write_text(json.dumps(document, indent=1, default=str) + "\n")
    return text
