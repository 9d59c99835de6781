"""Bad input: a one-line error and a non-zero exit before any worker starts, and no run
directory marked completed (contract.md, "Exit codes")."""

from __future__ import annotations

import pytest

from tests.cli import run_py

pytestmark = pytest.mark.e2e

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
