"""The catalogue's cases of issue 50 (the results tools as safe as the training engine) for tuning
and the presets' inputs: `python -m analysis.tuning.tune_preset` (make tune), `python -m
experiments.sweep`, the tuned files and the pre-flight: tests/test_catalogue.py runs them with
the others (tests/catalogue.py's machinery).

The damaged tuning files are planted in the case's folder (`<tmp>/tuned`), where `patch` points
experiments/config/tuned.py (its TUNED_DIR): the committed conf/tuned/ is never touched."""

from __future__ import annotations

import signal
from pathlib import Path

from tests.catalogue import Case, Ctx, running_run_py, send, then, when

CASES: list[Case] = []

# a run's overrides without FAST's scale=smoke: the cpu scale reads the tuning files
CPU = ("scale=cpu", "dataset=synthetic", "wandb.mode=disabled", "progress=false")
RATES = "lr:\n  local_sgd:\n    chosen: 0.05\n  sync_sgd:\n    chosen: {}\n"


def _tuned_here(monkeypatch, ctx: Ctx) -> None:
    import experiments.config.tuned as tuned

    monkeypatch.setattr(tuned, "TUNED_DIR", ctx.tmp / "tuned")


def _plant(relative: str, text: str | None):
    """A setup planting `<tmp>/tuned/<relative>` with `text` (None: a directory)."""

    def setup(ctx: Ctx) -> None:
        path = ctx.tmp / "tuned" / relative
        if text is None:
            path.mkdir(parents=True)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)

    return setup


def _file(relative: str, text: str = "a: 1\n"):
    def setup(ctx: Ctx) -> None:
        path = ctx.tmp / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)

    return setup


CHECK = ("table1", "--scale", "cpu", "--check", "--out-root", "{tmp}/out")
TUNED_PATH = r"the tuning file \S*tuned/cpu/table1\.yaml"

# --- class 5: a damaged or empty tuning file is refused with its path (and line) -----------------
for name, text, line in [
    ("empty", "", rf"^error: {TUNED_PATH} is empty \(truncated\?\)"),
    ("only-comments", "# Base learning rates\n", rf"^error: {TUNED_PATH} is empty"),
    ("a-directory", None, rf"^error: {TUNED_PATH} is a directory"),
    ("nan", RATES.format(".nan"), rf"{TUNED_PATH} \(line 5\): lr\.sync_sgd\.chosen .* got nan$"),
    ("negative", RATES.format("-0.1"), r"\(line 5\): lr\.sync_sgd\.chosen must be a number > 0"),
    ("zero", RATES.format("0"), r"lr\.sync_sgd\.chosen must be a number > 0, got 0$"),
    ("string", RATES.format("fast"), r"lr\.sync_sgd\.chosen .* got 'fast'$"),
    ("infinite", RATES.format(".inf"), r"lr\.sync_sgd\.chosen .* got inf$"),
    ("bare-rate-null", "lr:\n  sync_sgd:\n", r"\(line 2\): lr\.sync_sgd must be a number > 0"),
    ("not-yaml", "lr: [0.1\n", rf"^error: {TUNED_PATH} \(line 2\) is not valid YAML"),
    ("no-lr-mapping", "setting: {}\n", rf"^error: {TUNED_PATH}: expected a mapping with an `lr`"),
    ("a-list", "- 0.1\n", r"expected a mapping with an `lr` mapping$"),
]:
    CASES.append(
        Case(
            f"sweep-check-tuned-file-{name}",
            "results-inputs",
            CHECK,
            line=line,
            cmd="sweep",
            setup=_plant("cpu/table1.yaml", text),
            patch=_tuned_here,
            fast_args=False,
            out_root=False,
        )
    )
CASES += [
    # the scale's file is read by every preset without its own: checked the same way
    Case(
        "sweep-check-scale-tuned-file-empty",
        "results-inputs",
        ("demo", "--scale", "cpu", "--check", "--out-root", "{tmp}/out"),
        line=r"^error: the tuning file \S*tuned/cpu\.yaml is empty",
        cmd="sweep",
        setup=_plant("cpu.yaml", ""),
        patch=_tuned_here,
        fast_args=False,
        out_root=False,
    ),
    # the whole sweep (not only --check) refuses before any run
    Case(
        "sweep-tuned-file-nan-before-any-run",
        "results-inputs",
        ("table1", "--scale", "cpu", "--out-root", "{tmp}/out"),
        line=r"lr\.sync_sgd\.chosen must be a number > 0, got nan$",
        cmd="sweep",
        setup=_plant("cpu/table1.yaml", RATES.format(".nan")),
        patch=_tuned_here,
        fast_args=False,
        out_root=False,
    ),
    # a run of the preset: its composition refuses the file (the resolver), one line
    Case(
        "run-tuned-file-empty",
        "results-inputs",
        (*CPU, "experiment=table1", "algorithm=local_sgd"),
        line=rf"^error: {TUNED_PATH} is empty",
        setup=_plant("cpu/table1.yaml", ""),
        patch=_tuned_here,
        fast_args=False,
    ),
    Case(
        "run-tuned-file-string-rate-of-another-algorithm",
        "results-inputs",
        (*CPU, "experiment=table1", "algorithm=local_sgd"),
        line=r"lr\.sync_sgd\.chosen must be a number > 0, got 'fast'$",
        setup=_plant("cpu/table1.yaml", RATES.format("fast")),
        patch=_tuned_here,
        fast_args=False,
    ),
    # the same key refused the same way wherever it was set: a preset's network on the real clock
    Case(
        "run-preset-network-on-the-real-clock",
        "results-inputs",
        ("experiment=fig4", "timing=real"),
        line=r"^error: network=calibrated has no effect on the real clock \(timing=real\) "
        r"without emulate_network=true: .*\(set by preset fig4; network=ideal undoes it\)$",
    ),
    Case(
        "run-preset-network-on-the-real-clock-pseudo-sync",
        "results-inputs",
        ("experiment=pseudo_sync", "timing=real"),
        line=r"^error: network=ethernet1g has no effect on the real clock .*\(set by preset "
        r"pseudo_sync; network=ideal undoes it\)$",
    ),
    Case(
        "run-preset-step-time-on-the-real-clock",
        "results-inputs",
        ("experiment=demo", "timing=real"),
        line=r"^error: compute.step_time_s has no effect on the real clock .*\(set by preset "
        r"demo; compute.step_time_s=measured undoes it\)$",
    ),
    # ... and undone by the values that ask the real clock for nothing (conf/config.yaml's)
    Case(
        "run-preset-on-the-real-clock-undone",
        "results-inputs",
        (
            "experiment=fig4",
            "timing=real",
            "network=ideal",
            "compute.step_time_s=measured",
            "epochs=1",
        ),
        code=0,
        inproc=False,
        one_line=False,
        status="completed",
        line=r"completed",
    ),
]

# --- class 1: --out onto a directory, a file not its own, its input, the committed results -------
TUNE = ("tune", "--scale", "smoke", "--no-run", "--out-root", "{tmp}/out")
for name, args, setup, line in [
    ("a-directory", ("--out", "{tmp}"), None, r"^error: --out \S+ is a directory"),
    ("not-yaml", ("--out", "{tmp}/rates.txt"), None, r"is not a \.yaml file"),
    (
        "an-existing-file-not-a-tuning-file",
        ("--out", "{tmp}/notes.yaml"),
        _file("notes.yaml"),
        r"^error: --out \S+notes\.yaml exists and is not a tuning file: it is not overwritten$",
    ),
    (
        "inside-its-runs",
        ("--out", "{tmp}/out/tune/tune/runs/t.yaml"),
        None,
        r"is inside the runs it reads",
    ),
    (
        "into-the-committed-results",
        ("--out", str(Path(__file__).resolve().parents[1] / "results" / "t.yaml")),
        None,
        r"is inside the checkout's committed results/",
    ),
    (
        "under-a-file",
        ("--out", "{tmp}/plain/t.yaml"),
        _file("plain"),
        r"^error: --out \S+: \S+plain is a file, not a folder$",
    ),
]:
    CASES.append(
        Case(
            f"tune_preset-out-{name}",
            "results-out",
            (*TUNE, *args),
            line=line,
            cmd="tune_preset",
            setup=setup,
            fast_args=False,
            out_root=False,
        )
    )
CASES.append(
    Case(
        "tune_preset-out-root-a-file",
        "results-out",
        (
            "tune",
            "--scale",
            "smoke",
            "--no-run",
            "--out-root",
            "{tmp}/plain",
            "--out",
            "{tmp}/t.yaml",
        ),
        line=r"^error: output directory \S+plain/tune/tune/runs is not writable: Not a directory$",
        cmd="tune_preset",
        setup=_file("plain"),
        fast_args=False,
        out_root=False,
    )
)

# --- class 6: no traceback for bad input -------------------------------------------------------
CASES += [
    Case(
        "run-multirun-and-cfg",
        "results-bad-input",
        ("-m", "--cfg", "job"),
        line=r"^error: -m and --cfg cannot be given together",
    ),
    Case(
        "run-cfg-and-info",
        "results-bad-input",
        ("--cfg", "job", "--info", "config"),
        line=r"^error: --cfg and --info cannot be given together",
    ),
    Case(
        "run-multirun-and-info",
        "results-bad-input",
        ("--multirun", "--info", "config"),
        line=r"^error: -m and --info cannot be given together",
    ),
    Case(
        "tune_preset-unknown-scale",
        "results-bad-input",
        ("tune", "--scale", "bogus", "--out-root", "{tmp}/out", "--out", "{tmp}/t.yaml"),
        line=r"^error: cannot compose experiment=tune scale=bogus",
        cmd="tune_preset",
        fast_args=False,
        out_root=False,
    ),
    Case(
        "tune_preset-unknown-preset",
        "results-bad-input",
        ("tabel1", "--scale", "cpu", "--out-root", "{tmp}/out", "--out", "{tmp}/t.yaml"),
        line=r"^error: no preset \S+tabel1\.yaml$",
        cmd="tune_preset",
        fast_args=False,
        out_root=False,
    ),
    Case(
        "tune_preset-no-finished-runs",
        "results-checks",
        (*TUNE, "--out", "{tmp}/t.yaml"),
        line=r"^error: runs root is not a directory: \S+/tune/tune/runs$",
        cmd="tune_preset",
        fast_args=False,
        out_root=False,
    ),
]


# --- class 3: a stop of make tune: one line, the signal's code, its sweep stopped, no file ------


def _no_tuning_file(ctx: Ctx, result) -> None:
    assert not (ctx.tmp / "t.yaml").exists(), "a stopped tuning wrote its file"


SWEEP = (
    "tune",
    "--scale",
    "smoke",
    "--out-root",
    "{tmp}/out",
    "--out",
    "{tmp}/t.yaml",
    "dataset=synthetic",
    "wandb.mode=disabled",
    "progress=false",
)
for name, sig, code, said in [
    ("sigterm", signal.SIGTERM, 143, "stopped by SIGTERM"),
    ("ctrl-c", signal.SIGINT, 130, "interrupted by Ctrl-C"),
    ("sighup", signal.SIGHUP, 129, "stopped by SIGHUP"),
]:
    CASES.append(
        Case(
            f"tune_preset-{name}-while-its-sweep-runs",
            "results-stops",
            SWEEP,
            code=code,
            line=rf"^error: analysis\.tuning\.tune_preset: {said}; the tuning file was not written",
            cmd="tune_preset",
            inproc=False,
            act=then(when(running_run_py), send(sig)),
            check=_no_tuning_file,
            fast_args=False,
            out_root=False,
            one_line=False,
        )
    )
CASES.append(
    Case(
        "tune_preset-sigterm-while-importing",
        "results-stops",
        SWEEP,
        code=143,
        line=r"^error: analysis\.tuning\.tune_preset: stopped by SIGTERM; "
        r"(nothing was|the tuning file was not) written",
        cmd="tune_preset",
        inproc=False,
        act=then(when(lambda ctx: _catches_term(ctx)), send(signal.SIGTERM)),
        check=_no_tuning_file,
        fast_args=False,
        out_root=False,
    )
)


def _catches_term(ctx: Ctx) -> bool:
    from tests.catalogue import catches

    return catches(ctx.proc.pid, signal.SIGTERM)


def _said_once(reason: str):
    """A check: the sweep's closing `error:` lines say `reason` once, naming every point."""

    def check(ctx: Ctx, result) -> None:
        closing = [line for line in result.lines if line.startswith("error:")]
        assert len([line for line in closing if reason in line]) == 1, result.stderr

    return check


# class 7: a refusal that applies to every point of a sweep is said once at the end (each point's
# own `failed` line stays: it is the sweep's progress)
CASES.extend(
    [
        Case(
            "run-multirun-one-refusal-said-once",
            "results-bad-input",
            ("-m", "seed=0,1,2", "lr=-1"),
            line=r"^error: seed=0, seed=1, seed=2: lr must be a number > 0, got -1\.0$",
            one_line=False,
            check=_said_once("lr must be a number > 0"),
        ),
        Case(
            "run-multirun-many-points-one-refusal-said-once",
            "results-bad-input",
            ("-m", "seed=0,1,2,3,4", "tau=0"),
            line=r"^error: 5 points \(seed=0, seed=1, \.\.\.\): tau must be an integer >= 1",
            one_line=False,
            check=_said_once("tau must be an integer"),
        ),
    ]
)
