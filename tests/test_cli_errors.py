"""Bad input: a one-line error and a non-zero exit before any worker starts, and no run
directory marked completed (docs/records.md, "Failures, exit codes, determinism").

Each command runs run.py in this process (tests/cli.py, `run_py_here`: runpy, its exit code and
output captured, a trap in place of the workers' start): what is checked is a message, an exit
code and the disk, all decided before any worker would start."""

from __future__ import annotations

import pytest

from tests.cli import run_py_here as run_py

FAST = ("dataset=synthetic", "scale=smoke", "wandb.mode=disabled")


def assert_user_error(proc, *fragments: str) -> None:
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: ")
    for fragment in fragments:
        assert fragment in lines[0]
    assert "Traceback" not in proc.stderr
    assert "run " not in proc.stdout  # no worker was started


def assert_nothing_completed(root) -> None:
    assert not list(root.rglob("summary.json")), "a run record was written for bad input"


@pytest.mark.parametrize(
    "override, fragment",
    [
        ("tau=0", "tau must be an integer >= 1, got 0"),
        ("workers=0", "workers must be an integer >= 1, got 0"),
        ("batch_size=0", "batch_size must be an integer >= 1, got 0"),
        ("lr=0", "lr must be a number > 0, got 0"),
        ("lr=-1", "lr must be a number > 0, got -1"),
        ("epochs=0", "epochs must be an integer >= 1, got 0"),
    ],
)
def test_bad_value_is_one_line_and_exit_2(tmp_path, override, fragment):
    proc = run_py(*FAST, override, f"out_root={tmp_path}")
    assert_user_error(proc, fragment)
    assert_nothing_completed(tmp_path)


def test_unwritable_output_directory(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    proc = run_py(*FAST, f"out_root={blocker}/out")
    assert_user_error(proc, "is not writable", str(blocker))


def test_unknown_group_option_lists_the_choices(tmp_path):
    proc = run_py(*FAST, "algorithm=nope", f"out_root={tmp_path}")
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        "error: unknown algorithm 'nope'; choose from bmuf, cocod_sgd, diloco, eamsgd, easgd, "
        "local_sgd, losp, osp, overlap_local_sgd, powersgd, pseudo_sync, slowmo, "
        "streaming_diloco, sync_sgd"
    )
    assert_nothing_completed(tmp_path)


def test_infeasible_noniid_partition_names_the_numbers(tmp_path):
    # 4 workers x 64% of 374 samples from one class needs 240 of a class that has ~150
    proc = run_py(
        "scale=smoke",
        "wandb.mode=disabled",
        "workers=4",
        "partition=noniid",
        f"out_root={tmp_path}",
    )
    assert_user_error(proc, "noniid")
    assert any(ch.isdigit() for ch in proc.stderr)
    assert_nothing_completed(tmp_path)


def test_missing_cifar10_says_where_to_put_it(tmp_path):
    root = tmp_path / "nowhere"
    proc = run_py(
        *FAST[1:],
        "dataset=cifar10",
        f"dataset.root={root}",
        "dataset.download=false",
        f"out_root={tmp_path}",
    )
    assert_user_error(proc, str(root), "cifar-10-batches-py")
    assert_nothing_completed(tmp_path)


@pytest.mark.parametrize(
    "overrides, fragments",
    [
        (("algorithm=overlap_local_sgd", "algorithm.alpha=1.5"), ("alpha", "[0, 1]")),
        (("algorithm=overlap_local_sgd", "algorithm.beta=1"), ("beta", "[0, 1)")),
        (("algorithm=easgd", "workers=4", "algorithm.alpha=0.3"), ("alpha < 1", "unstable")),
        (("algorithm=powersgd", "algorithm.rank=0"), ("rank",)),
        (("algorithm=losp", "algorithm.compensation=magic"), ("compensation", "delta")),
        (("algorithm=local_sgd", "+algorithm.alpha=0.5"), ("has no option alpha",)),
    ],
)
def test_bad_algorithm_knob_is_one_line_and_exit_2(tmp_path, overrides, fragments):
    proc = run_py(*FAST, *overrides, f"out_root={tmp_path}")
    assert_user_error(proc, *fragments)
    assert_nothing_completed(tmp_path)


@pytest.mark.parametrize(
    "override, line",
    [
        ("foo=1", "error: unknown key foo: no code reads it (the keys: docs/config.md)"),
        ("+foo=1", "error: unknown key foo: no code reads it (the keys: docs/config.md)"),
        ("+compute.foo=1", "error: unknown key compute.foo: no code reads it"),
        ("tau=abc", "error: tau must be an integer, got 'abc'"),
        ("timing=sometimes", "error: timing must be one of real, virtual, got 'sometimes'"),
        ("cluster.backend=mpi2", "error: cluster.backend must be one of auto, gloo, nccl, got"),
        ("tau=${oops}", "error: tau: Interpolation key 'oops' not found"),
        ("tau=[1", "error: cannot read the override 'tau=[1': "),
        ("lr_decay_at=abc", "error: lr_decay_at must be a list (e.g. lr_decay_at=[0.5,0.75])"),
        ("out_root=", "error: out_root is empty: name a directory (default: outputs)"),
    ],
)
def test_every_config_error_is_one_line_exit_2_and_nothing_on_disk(tmp_path, override, line):
    """issue 12 items 1 and 6: an unknown key exited 1 (the code for a failed worker) with a
    multi-line Hydra message; types and enums were checked only after the run directory
    existed; `+key=value` that no code reads went through."""
    proc = run_py(*FAST, f"out_root={tmp_path / 'out'}", override)
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert proc.stderr.strip().startswith(line), proc.stderr
    assert not (tmp_path / "out").exists()  # no run directory, not even <out_root>/runs


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["--cfg", "job"],
        ["--cfg", "job", "--resolve"],
        ["--info"],
        ["--hydra-help"],
        ["-sc", "install=bash"],
        ["-sc", "query=bash"],
    ],
)
def test_help_config_info_and_completion_create_nothing(tmp_path, args):
    """issue 12 item 6: --help, --cfg job, --info and shell completion created outputs/runs."""
    proc = run_py(
        *args,
        cwd=tmp_path,  # the default out_root, `outputs`, is relative to here
        env={"COMP_LINE": "python run.py algorithm=lo"},
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip()
    assert list(tmp_path.iterdir()) == []


def test_a_sweep_of_bad_values_refuses_every_point_with_one_line_each(tmp_path):
    from tests.cli import REPO

    proc = run_py("-m", *FAST, f"out_root={tmp_path}", "algorithm=nope,also_nope")
    assert proc.returncode == 2
    options = ", ".join(sorted(p.stem for p in (REPO / "conf" / "algorithm").glob("*.yaml")))
    assert proc.stderr.strip().splitlines()[-2:] == [
        f"error: algorithm={name}: unknown algorithm '{name}'; choose from {options}"
        for name in ("nope", "also_nope")
    ]
    assert not list(tmp_path.glob("runs/*/summary.json"))
