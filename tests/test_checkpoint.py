"""The checkpoint files without workers: atomic layout, verification (missing, corrupt, foreign
checkpoints are errors naming the file), the metrics file cut back to the checkpoint's step,
the sampler's position, a collective in flight saved and restored on the virtual clock, and
the stop signals."""

from __future__ import annotations

import json
import os
import signal

import pytest
import torch

from algorithms.comm import Comm, Pending, _Arrived
from experiments.data.datasets import ResumableRandomSampler
from experiments.store import checkpoint as ckpt
from experiments.store.log import JsonlSink

CFG = {
    "workers": 1,
    "lr": 0.1,
    "seed": 0,
    "dataset": {"name": "digits", "root": "/data"},
    "wandb": {"mode": "disabled"},
    "checkpoint_every": 0,
    "checkpoint": {"on_signal": True},
}


def save(run_dir, step=7, cfg=CFG, state=None):
    return ckpt.save(
        run_dir,
        state if state is not None else {"x": torch.arange(4.0), "step": step},
        rank=0,
        world_size=1,
        step=step,
        epoch=0,
        reason="test",
        cfg=cfg,
        group=None,
    )


def test_save_verify_load_and_only_the_latest_is_kept(tmp_path):
    assert ckpt.verify(tmp_path, CFG) is None  # no checkpoint: a fresh start
    save(tmp_path, step=7)
    save(tmp_path, step=9)
    meta = ckpt.verify(tmp_path, CFG)
    assert meta["step"] == 9 and meta["dir"] == "step-000000009"
    assert sorted(p.name for p in (tmp_path / "checkpoint").iterdir()) == [
        "latest.json",
        "step-000000009",
    ]
    state = ckpt.load(tmp_path, meta, 0)
    assert torch.equal(state["x"], torch.arange(4.0)) and state["step"] == 9
    # keys that do not change the trajectory may change between the attempts
    other = {**CFG, "wandb": {"mode": "online"}, "dataset": {"name": "digits", "root": "/x"}}
    assert ckpt.verify(tmp_path, other)["step"] == 9
    ckpt.remove(tmp_path)
    assert not (tmp_path / "checkpoint").exists()


def test_a_checkpoint_of_another_config_or_world_size_is_an_error_naming_it(tmp_path):
    save(tmp_path)
    latest = tmp_path / "checkpoint" / "latest.json"
    with pytest.raises(ckpt.CheckpointError, match=r"another configuration \(lr: 0.1 -> 0.2\)"):
        ckpt.verify(tmp_path, {**CFG, "lr": 0.2})
    meta = json.loads(latest.read_text())
    meta["world_size"] = 4
    latest.write_text(json.dumps(meta))
    with pytest.raises(ckpt.CheckpointError, match="written by 4 workers"):
        ckpt.verify(tmp_path, CFG)


@pytest.mark.parametrize("damage", ["truncate", "flip", "delete", "latest"])
def test_a_damaged_checkpoint_is_an_error_naming_the_file(tmp_path, damage):
    step_dir = save(tmp_path)
    f = step_dir / "rank0.pt"
    if damage == "truncate":
        f.write_bytes(f.read_bytes()[:20])
    elif damage == "flip":
        data = bytearray(f.read_bytes())
        data[len(data) // 2] ^= 0xFF
        f.write_bytes(bytes(data))
    elif damage == "delete":
        f.unlink()
    else:
        (tmp_path / "checkpoint" / "latest.json").write_text('{"format": 1, "step": ')
    with pytest.raises(ckpt.CheckpointError) as e:
        ckpt.verify(tmp_path, CFG)
    assert str(tmp_path / "checkpoint") in str(e.value)
    assert "\n" not in str(e.value)


def test_an_unreadable_file_with_matching_digest_is_still_an_error(tmp_path):
    step_dir = save(tmp_path)
    (step_dir / "rank0.pt").write_bytes(b"not a torch file")
    meta = json.loads((tmp_path / "checkpoint" / "latest.json").read_text())
    with pytest.raises(ckpt.CheckpointError, match="rank0.pt is unreadable"):
        ckpt.load(tmp_path, meta, 0)


def test_metrics_rows_after_the_checkpoint_are_dropped_on_resume(tmp_path):
    sink = JsonlSink(tmp_path)
    for step in (10, 20, 30):
        sink.log({"test/acc": step / 100}, step)
    sink.close()
    with (tmp_path / "metrics.jsonl").open("a") as f:
        f.write('{"step": 40, "test/ac')  # a row cut short by a crash
    sink = JsonlSink(tmp_path, keep_until_step=20)
    sink.log({"test/acc": 0.99}, 30)
    sink.close()
    steps = [json.loads(x)["step"] for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert steps == [10, 20, 30]
    JsonlSink(tmp_path).close()  # a fresh start of an unfinished run: an empty record
    assert (tmp_path / "metrics.jsonl").read_text() == ""


def test_sampler_is_randomsampler_and_resumes_mid_epoch():
    data = list(range(50))
    g = torch.Generator().manual_seed(3)
    reference = list(torch.utils.data.RandomSampler(data, generator=g))
    g = torch.Generator().manual_seed(3)
    sampler = ResumableRandomSampler(data, generator=g)
    assert list(sampler) == reference  # the order shuffle=True would give
    g.manual_seed(3)
    sampler.skip = 20
    assert list(sampler) == reference[20:]
    g.manual_seed(3)
    assert list(sampler) == reference  # the skip applies to one pass only


def test_pending_snapshot_restores_the_collective_on_the_virtual_clock(monkeypatch):
    """A collective in flight, saved and restored, completes at the same modeled time and
    accounts the same exposed and hidden time as the original (world size 1: modeled only)."""
    import torch.distributed as dist

    from experiments.training.clock import Compute, Network, VirtualClock
    from experiments.workers.dist import free_port

    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")  # not left behind for later tests' commands
    monkeypatch.setenv("MASTER_PORT", str(free_port()))
    dist.init_process_group("gloo", rank=0, world_size=1)
    try:

        class OneSecond(VirtualClock):  # every collective takes 1 s of modeled time
            def duration(self, nbytes: int, m: int) -> float:
                return 1.0

        results = []
        for restore in (False, True):
            clock = OneSecond(0, Network(), Compute(1.0, (1.0,)))
            comm = Comm(clock=clock)
            p = comm.mean_async([torch.ones(1000), torch.full((2, 3), 2.0)])
            clock.t += 0.25  # a quarter of the way
            if restore:
                p = Pending.restore(comm, p.snapshot())
                assert isinstance(p._collective, _Arrived)
            assert not p.is_completed()
            clock.t += 0.5
            out = p.wait()
            results.append((clock.t, comm.ledger.exposed_s, comm.ledger.hidden_s, out))
        (t0, e0, h0, o0), (t1, e1, h1, o1) = results
        assert (t0, e0, h0) == (t1, e1, h1)
        assert t0 == pytest.approx(1.0) and h0 == pytest.approx(0.75)
        assert all(torch.equal(a, b) for a, b in zip(o0, o1, strict=True))
        assert o1[1].shape == (2, 3)
    finally:
        dist.destroy_process_group()


def test_stopper_flags_signals_and_a_second_ctrl_c_stops_at_once():
    s = ckpt.Stopper(rank=0, world_size=1, group=None, poll_steps=5, anywhere=True)
    s.install()
    try:
        assert not s.poll(0)
        os.kill(os.getpid(), signal.SIGUSR1)
        assert s.poll(1) and s.requeue and s.signal_name == "SIGUSR1"
        t = ckpt.Stopper(rank=0, world_size=1, group=None, poll_steps=5, anywhere=True)
        t.install()
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C: checkpoint and stop, no requeue
        assert t.poll(3) and not t.requeue
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
        t.close()
        off = ckpt.Stopper(
            rank=0,
            world_size=1,
            group=None,
            poll_steps=5,
            anywhere=True,
            checkpoint_on_interrupt=False,  # checkpoint_every=0: Ctrl-C stops at once
        )
        off.install()
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
        off.close()
    finally:
        s.close()
    assert signal.getsignal(signal.SIGUSR1) is signal.SIG_DFL


def test_simulated_signal_fires_once_and_not_again_after_the_resume():
    s = ckpt.Stopper(
        rank=0, world_size=1, group=None, poll_steps=1, anywhere=True, simulate_at_step=4
    )
    assert [s.poll(t) for t in range(6)] == [False] * 4 + [True, True]
    resumed = ckpt.Stopper(
        rank=0, world_size=1, group=None, poll_steps=1, anywhere=True, simulate_at_step=4
    )
    resumed.forget_simulation_before(4)
    assert not any(resumed.poll(t) for t in range(4, 9))
    osp = ckpt.Stopper(
        rank=0, world_size=1, group=None, poll_steps=1, anywhere=False, simulate_at_step=1
    )
    assert not osp.poll(3) and osp.agree(3)  # OSP/LOSP: only at evaluation points
