"""A run is its config (issue 12 item 1): its directory is named by its resolved configuration,
a finished run is reused only when its identity matches, a changed config never reuses or
overwrites a record, the same config reached by other spellings finds the same run, the world
size a launcher starts must be the config's, and `rerun=true` keeps the previous record beside
the new one. Plus item 6: records follow the umask, no empty run.log."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli import REPO, child_env, launched_env, run_dir_of, run_py
from tests.cli import run_py_with_workers_here as run_here  # run.py here, its workers real

FAST = ("scale=smoke", "dataset=synthetic", "wandb.mode=disabled", "progress=false")
TINY = (*FAST, "epochs=1", "dataset.num_train=256")


def summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def runs(root: Path) -> list[Path]:
    return sorted(p for p in (root / "runs").iterdir() if p.is_dir() and p.name[0] != ".")


def test_spellings_of_one_config_name_one_directory_and_changes_name_another(tmp_path):
    # `python run.py` and `python run.py scale=cpu`: the same config, the same run
    assert run_dir_of(tmp_path) == run_dir_of(tmp_path, "scale=cpu")
    assert run_dir_of(tmp_path, "tau=1", "seed=0") == run_dir_of(tmp_path)
    assert run_dir_of(tmp_path, "epochs=20") == run_dir_of(tmp_path)  # the cpu scale's value
    # where and how a run is recorded is not part of it
    assert run_dir_of(tmp_path, "wandb.mode=disabled", "progress=false").name == (
        run_dir_of(tmp_path).name
    )
    assert run_dir_of(tmp_path / "x").name == run_dir_of(tmp_path).name
    # anything that shapes the run is
    for change in ("epochs=21", "lr=0.2", "network=ethernet1g", "compute.slowdown=one_slow"):
        assert run_dir_of(tmp_path, change) != run_dir_of(tmp_path), change
    name = run_dir_of(tmp_path, "algorithm=powersgd", "algorithm.rank=4", "seed=2").name
    assert name.startswith("powersgd-rank4-seed2-") and len(name.rsplit("-", 1)[1]) == 10


@pytest.mark.e2e
def test_a_changed_scale_file_is_a_new_run_never_a_skip(tmp_path):
    """issue 12 item 1: changing `epochs` in conf/scale/smoke.yaml made the next run print
    `skip ...: already completed`, with a record whose config disagreed with .hydra/."""
    conf = tmp_path / "conf"
    shutil.copytree(REPO / "conf", conf, ignore=shutil.ignore_patterns("local"))
    smoke = conf / "scale" / "smoke.yaml"
    args = (*FAST, "dataset.num_train=256", f"out_root={tmp_path}", "--config-path", str(conf))
    first = run_here(*args)
    assert first.returncode == 0, first.stderr[-2000:]
    smoke.write_text(smoke.read_text().replace("epochs: 2", "epochs: 1"))
    second = run_here(*args)
    assert second.returncode == 0, second.stderr[-2000:]
    assert "skip" not in second.stdout
    one, two = runs(tmp_path)
    assert sorted(summary(r)["steps"] for r in (one, two)) == [4, 8]  # 1 and 2 epochs
    for run in (one, two):  # each record agrees with itself
        epochs = summary(run)["epochs"]
        assert f"epochs: {epochs}\n" in (run / "config.yaml").read_text()
        assert f"epochs: {epochs}\n" in (run / ".hydra" / "config.yaml").read_text()
        assert json.loads((run / "identity.json").read_text())["epochs"] == epochs


@pytest.mark.e2e
def test_the_same_config_reached_otherwise_is_reused_and_its_record_untouched(tmp_path):
    first = run_here(*TINY, f"out_root={tmp_path}")
    assert first.returncode == 0, first.stderr[-2000:]
    (run,) = runs(tmp_path)
    kept = {p.name: p.read_bytes() for p in [*run.iterdir(), *(run / ".hydra").iterdir()]
            if p.is_file() and not p.name.startswith(".lock")}  # fmt: skip
    again = run_here(*TINY, "tau=1", "seed=0", "wandb.mode=offline", f"out_root={tmp_path}")
    assert again.returncode == 0, again.stderr[-2000:]
    assert again.stdout.strip().splitlines() == [f"skip {run}: already completed"]
    now = {p.name: p.read_bytes() for p in [*run.iterdir(), *(run / ".hydra").iterdir()]
           if p.is_file() and not p.name.startswith(".lock")}  # fmt: skip
    assert now == kept  # not even .hydra/overrides.yaml was rewritten
    assert summary(run)["identity"] == run.name.rsplit("-", 1)[1]
    assert not list(run.rglob("*.log"))  # no empty run.log (issue 12 item 6)


@pytest.mark.e2e
def test_a_finished_record_of_another_config_is_refused_not_overwritten(tmp_path):
    first = run_here(*TINY, f"out_root={tmp_path}")
    assert first.returncode == 0
    (run,) = runs(tmp_path)
    record = summary(run)
    (run / "summary.json").write_text(json.dumps({**record, "identity": "0123456789"}))
    before = (run / "summary.json").read_bytes()
    proc = run_here(*TINY, f"out_root={tmp_path}")
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith(f"error: run directory {run} holds a finished run of another")
    assert (run / "summary.json").read_bytes() == before


@pytest.mark.e2e
def test_rerun_recomputes_and_keeps_the_previous_record_beside_it(tmp_path):
    assert run_here(*TINY, f"out_root={tmp_path}").returncode == 0
    (run,) = runs(tmp_path)
    old = (run / "summary.json").read_bytes()
    proc = run_here(*TINY, "rerun=true", f"out_root={tmp_path}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    (kept,) = (tmp_path / "runs" / ".superseded").iterdir()
    assert kept.name.startswith(run.name + "-")
    assert f"rerun {run}: the previous record moved to {kept}" in proc.stdout
    assert (kept / "summary.json").read_bytes() == old  # never deleted, never changed
    assert (kept / "metrics.jsonl").is_file() and (kept / ".hydra" / "config.yaml").is_file()
    assert summary(run)["status"] == "completed" and (run / "summary.json").read_bytes() != old
    assert runs(tmp_path) == [run]  # the analysis (which skips dot-dirs) sees one run
    assert "\nrerun:" not in (run / "config.yaml").read_text()  # a request, not a record


def test_the_finished_check_is_repeated_once_the_directory_is_locked(tmp_path, monkeypatch, capsys):
    """issue 14 class 7: two identical commands both found no record, both trained, and the
    second overwrote the first's. Here an identical command finishes the run while this one
    waits for the lock: this one must not train."""
    from omegaconf import OmegaConf

    from experiments import runner
    from experiments.config.identity import digest
    from experiments.store import records
    from tests.compose import composed

    cfg = composed(*TINY, f"out_root={tmp_path}")

    plain = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
    plain.pop("rerun")
    run_dir = tmp_path / "runs" / "r"
    finished = {"status": "completed", "identity": digest(plain), "final/test_acc": 0.5}
    acquire = records.RunLock.acquire

    def acquire_after_the_other_command_finished(self):
        acquire(self)
        records.write_json_atomic(run_dir / "summary.json", finished)

    monkeypatch.setattr(records.RunLock, "acquire", acquire_after_the_other_command_finished)
    monkeypatch.setattr(runner, "_run", lambda *a, **k: pytest.fail("trained a finished run"))
    assert runner.run(cfg, run_dir) == "completed"
    assert f"skip {run_dir}: already completed" in capsys.readouterr().out
    assert json.loads((run_dir / "summary.json").read_text()) == finished


def test_a_second_command_on_a_locked_directory_stops_with_one_line(tmp_path):
    from experiments.errors import UserError
    from experiments.store.records import RunLock

    with RunLock(tmp_path):
        with pytest.raises(UserError, match=f"in use by pid {os.getpid()} on "):
            RunLock(tmp_path).acquire()
    with RunLock(tmp_path):  # released: the next one gets it
        pass


def test_a_command_refused_before_the_holder_wrote_its_line_waits_for_it(tmp_path, monkeypatch):
    """The holder writes `.lock.holder` just after taking the lock: a second command in between
    found no file and said "another process" (a flake of races:two-identical-commands). It
    waits for the holder's line; a line left by a killed run of this host does not count; a
    released lock leaves no line; with none at all it says "another process"."""
    import platform
    import threading

    from filelock import FileLock

    from experiments.errors import UserError
    from experiments.store import records

    lock = FileLock(tmp_path / ".lock", timeout=0)
    lock.acquire()
    dead = os.fork()
    if dead == 0:
        os._exit(0)
    os.waitpid(dead, 0)  # a pid of this host that is gone
    holder = tmp_path / ".lock.holder"
    try:
        for before in (None, f"pid {dead} on {platform.node()}"):
            if before is not None:
                holder.write_text(before)
            writer = threading.Timer(0.3, holder.write_text, (f"pid 4242 on {platform.node()}x",))
            writer.start()
            with pytest.raises(UserError, match=r"in use by pid 4242 on \S+x; wait"):
                records.RunLock(tmp_path).acquire()
            writer.join()
            holder.unlink()
        monkeypatch.setattr(records, "HOLDER_WAIT_S", 0.2)
        with pytest.raises(UserError, match="in use by another process; wait"):
            records.RunLock(tmp_path).acquire()
    finally:
        lock.release()
    with records.RunLock(tmp_path):
        assert holder.read_text().startswith(f"pid {os.getpid()} on ")
    assert not holder.exists()


@pytest.mark.e2e
def test_a_launchers_world_size_must_be_the_configs(tmp_path):
    """issue 12 item 1 / issue 14 class 1: a 2-process torchrun of `workers=4` ran 2 workers
    into the 4-worker run's record; a 1-worker torchrun run and a 2-worker spawned run shared
    one record."""
    env = launched_env(29731)
    proc = run_py(*TINY, "workers=2", f"out_root={tmp_path / 'env'}", timeout=120, env=env)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "error: the launcher started 1 workers but workers=2: give run.py workers=1, or start "
        "2 processes (torchrun --nproc-per-node, srun --ntasks)"
    ]
    assert not (tmp_path / "env").exists()  # refused before any directory was made

    torchrun = Path(sys.executable).with_name("torchrun")
    proc = subprocess.run(
        [
            str(torchrun),
            "--standalone",
            "--nproc-per-node",
            "2",
            "run.py",
            *TINY,
            "workers=4",
            f"out_root={tmp_path / 'tr'}",
        ],  # fmt: skip
        cwd=REPO,
        env={k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")},
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode != 0  # torchrun reports its workers' failure itself (exit 1)
    assert "error: the launcher started 2 workers but workers=4" in proc.stderr
    assert not list((tmp_path / "tr").rglob("summary.json"))
    # a 1-worker run and a 2-worker run are two configurations, two directories
    assert run_dir_of(tmp_path, *TINY, "workers=1") != run_dir_of(tmp_path, *TINY, "workers=2")


@pytest.mark.e2e
def test_records_follow_the_users_umask(tmp_path):
    """issue 12 item 6: records were written 0600 (mkstemp), unreadable for a lab's group."""
    proc = subprocess.run(
        [sys.executable, "run.py", *TINY, f"out_root={tmp_path}"],
        cwd=REPO,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=lambda: os.umask(0o002),
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    (run,) = runs(tmp_path)
    for name in ("summary.json", "metrics.jsonl", "config.yaml", "data_card.json",
                 "identity.json", ".hydra/config.yaml"):  # fmt: skip
        assert (run / name).stat().st_mode & 0o777 == 0o664, name


def test_atomic_writes_take_the_umask(tmp_path):
    from experiments.store.records import write_text_atomic

    old = os.umask(0o027)
    try:
        write_text_atomic(tmp_path / "a.txt", "x")
    finally:
        os.umask(old)
    assert (tmp_path / "a.txt").stat().st_mode & 0o777 == 0o640


def test_without_flock_the_lock_falls_back_to_a_soft_lock(tmp_path, monkeypatch):
    """Some network file systems have no flock (ENOSYS): filelock's FileLock then uses a marker
    file (SoftFileLock semantics); a second process is still refused with one line."""
    import errno
    import fcntl

    from experiments.errors import UserError
    from experiments.store.records import RunLock

    def no_flock(*args, **kwargs):
        raise OSError(errno.ENOSYS, "Function not implemented")

    monkeypatch.setattr(fcntl, "flock", no_flock)
    lock = RunLock(tmp_path)
    with pytest.warns(UserWarning, match="falling back to SoftFileLock"):
        lock.acquire()
    try:
        assert str(os.getpid()) in (tmp_path / ".lock").read_text()  # the soft marker
        pid = os.fork()
        if pid == 0:  # another process, on the same file system
            try:
                RunLock(tmp_path).acquire()
                code = 1
            except UserError as e:
                code = 0 if "is in use by pid" in str(e) else 2
            except BaseException:
                code = 3
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        lock.release()
    assert not (tmp_path / ".lock").exists()  # a soft marker is removed on release


def test_a_tau_less_run_recorded_when_its_digest_hashed_tau_is_found_and_reused(tmp_path):
    """A sync SGD run recorded before the identity left tau out (its directory and summary
    named by the digest of then) is the run a sweep over tau asks for today: found, skipped,
    its record untouched, no second run trained beside it."""
    from experiments import resolved_job
    from experiments.config.identity import digest, hash_identity, identity_config
    from tests.cli import run_py_here
    from tests.compose import composed

    args = (*TINY, "algorithm=sync_sgd", "cluster=sim", f"out_root={tmp_path}")
    first = run_py_here(*args, "tau=2")  # cluster=sim: the workers are threads of this process
    assert first.returncode == 0, first.stderr[-2000:]
    (run,) = runs(tmp_path)
    # the record as it was written before: identity.json with tau, the digest of then
    plain = resolved_job(composed(*args, "tau=2"))
    then = {**identity_config(plain), "tau": 2}
    old = hash_identity(then)
    assert old != digest(plain) == run.name.rsplit("-", 1)[1]
    (run / "identity.json").write_text(json.dumps(then))
    (run / "summary.json").write_text(json.dumps({**summary(run), "identity": old}))
    legacy = run.rename(run.with_name(f"{run.name.rsplit('-', 1)[0]}-{old}"))
    kept = {p.name: p.read_bytes() for p in legacy.iterdir() if p.is_file()}

    alone = run_py_here(*args, "tau=4")  # a single run: the runner's own check
    assert alone.returncode == 0, alone.stderr[-2000:]
    assert alone.stdout.strip().splitlines() == [f"skip {legacy}: already completed"]
    again = run_py_here(*args, "-m", "tau=2,4")  # a sweep: the sweeper's
    assert again.returncode == 0, again.stderr[-2000:]
    assert f"skip {legacy}: already completed\n" in again.stdout
    assert "skip tau=4: sync_sgd ignores tau, the same run as tau=2\n" in again.stdout
    assert runs(tmp_path) == [legacy]
    assert {p.name: p.read_bytes() for p in legacy.iterdir() if p.is_file()} == kept
