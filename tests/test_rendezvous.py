"""The in-process collectives' rendezvous (algorithms/group.py): a rank that waits past the
timeout for a peer that never arrives fails; a rank that waits past it while the last rank to
arrive is still computing the result (a batched pass over many replicas on a loaded machine:
issue 35's 8 seeds x 8 workers timed out in their evaluation) gets the result."""

from __future__ import annotations

import threading
import time

import pytest

from algorithms.group import CollectiveTimeout, Rendezvous


def _slow_sum(delay: float):
    def reduce(op):
        time.sleep(delay)
        return sum(op.inputs)

    return reduce


def test_a_result_still_being_computed_is_waited_for_past_the_timeout() -> None:
    rdv = Rendezvous(world_size=2, timeout_s=0.2, name="test")
    op = rdv.arrive(0, 0, "sum", 1, _slow_sum(1.0))
    # rank 1 arrives last and computes for 1 s (5x the timeout) in its own thread
    worker = threading.Thread(target=rdv.arrive, args=(1, 0, "sum", 2, _slow_sum(1.0)))
    worker.start()
    started = time.monotonic()
    rdv.wait(op, 0)
    worker.join()
    assert op.done and op.result == 3
    assert time.monotonic() - started >= 0.5  # it did wait past the 0.2 s timeout
    assert rdv.failure is None


def test_a_peer_that_never_arrives_still_times_out() -> None:
    rdv = Rendezvous(world_size=2, timeout_s=0.2, name="test")
    op = rdv.arrive(0, 0, "sum", 1, _slow_sum(0.0))
    with pytest.raises(CollectiveTimeout, match=r"rank 0 waited 0.2 s .* rank 1 did not arrive"):
        rdv.wait(op, 0)
