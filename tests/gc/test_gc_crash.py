"""Crash leftovers: blocks of a writer that died before committing.

A child process writes blocks under a writer lease and dies without a
journal entry: either it goes through the real commit path and is killed
(SIGKILL) right before the entry, or it writes blocks with the lake's
BlockStore and exits without committing. Its lease stays in the lake.

How time is controlled, without sleeping:

* "lease still live": the collector uses the real clock, moments after the
  crash, and ``writer_wait=0`` so it stops waiting at once;
* "lease expired": the collector's LeaseManager gets a fake clock set past
  the lease's expiry plus the skew margin (``Connection.leases`` is the
  injection point; GC reads time from it);
* "older than the grace period": the leftover blocks are backdated two
  hours (``FileStore.set_mtime`` / moto's LastModified), against a one-hour
  grace.
"""

from __future__ import annotations

import multiprocessing
import signal
import time
from typing import Any

import gc_workers
import pytest
from conftest import Lake
from gc_helpers import (
    FakeClock,
    backdate,
    block_keys,
    build_history,
    connect,
    dump,
    reachable_from_journals,
    same_dump,
)

import merkle
from merkle.blocks.store import BLOCK_PREFIX
from merkle.refs import LeaseManager
from merkle.refs.leases import LEASE_PREFIX
from merkle.refs.timing import DEFAULT_SKEW_MARGIN

SPAWN = multiprocessing.get_context("spawn")
JOIN = 120.0  # a safety net for joins: a hang fails the test


def _killed_in_commit(lake: Lake) -> None:
    flushed, never, results = SPAWN.Event(), SPAWN.Event(), SPAWN.Queue()
    child = SPAWN.Process(
        target=gc_workers.crash_in_commit,
        args=(lake.uri, lake.options, flushed, never, results),
    )
    child.start()
    try:
        assert flushed.wait(JOIN), "the child never reached the journal entry"
        assert results.empty(), results.get()
    finally:
        child.kill()
        child.join(JOIN)
    assert child.exitcode == -signal.SIGKILL


def _exited_after_put(lake: Lake) -> None:
    child = SPAWN.Process(target=gc_workers.put_and_exit, args=(lake.uri, lake.options))
    child.start()
    child.join(JOIN)
    if child.is_alive():
        child.kill()
        child.join()
    assert child.exitcode == 0


@pytest.mark.parametrize("crash", [_killed_in_commit, _exited_after_put], ids=["killed", "exited"])
def test_crash_leftovers_go_once_past_grace_and_lease_and_not_before(
    shared_lake: Lake, crash: Any
) -> None:
    lake = shared_lake
    with connect(lake) as conn:
        versions = build_history(conn, commits=2)
        dumps = {v.version: dump(v) for v in versions}
    with connect(lake) as conn:
        before = block_keys(conn.store)
        crash(lake)
        leftovers = block_keys(conn.store) - before
        assert leftovers, "the crashed writer wrote no blocks"
        assert not leftovers & reachable_from_journals(conn), "nothing committed them"
        (lease,) = conn.leases.live("writer")  # the dead writer's lease is still there

    with connect(lake) as collector:
        # 1. Lease live (real clock): spared even with no grace at all.
        report = merkle.gc(collector, grace="0s", writer_wait=0)
        assert report.writer_leases_waited == 1
        assert not leftovers & set(report.freed)
        assert report.blocks_spared_recent == len(leftovers)
        assert leftovers <= block_keys(collector.store)

        # 2. Lease expired (fake clock past expiry + margin) but the blocks are younger
        #    than the grace period: spared; the expired lease object is reaped.
        clock = FakeClock(lease.expires + DEFAULT_SKEW_MARGIN + 1)
        collector.leases = LeaseManager(collector.store, clock=clock, sleep=clock.sleep)
        report = merkle.gc(collector, grace="1h", writer_wait=0)
        assert report.writer_leases_waited == 0
        assert not leftovers & set(report.freed)
        assert leftovers <= block_keys(collector.store)
        assert list(collector.store.list(LEASE_PREFIX)) == []

        # 3. Lease expired and the blocks older than the grace period: removed, exactly.
        backdate(collector.store, [BLOCK_PREFIX + cid for cid in leftovers], time.time() - 7200)
        report = merkle.gc(collector, grace="1h", writer_wait=0)
        assert set(report.freed) == leftovers
        assert block_keys(collector.store) == before
        assert merkle.verify(collector).ok
    with connect(lake) as conn:
        for v in versions:
            assert same_dump(dump(conn.open_db("shop", version=v.version)), dumps[v.version])


def test_leftovers_older_than_grace_stay_while_their_writer_lease_lives(
    shared_lake: Lake,
) -> None:
    """Old-looking blocks written under a live lease: the lease, not the grace, protects them.

    A writer refreshes (touches) blocks it reuses, so its blocks are never
    older than its lease; here the leftovers are two hours old by the
    storage's clock (which GC counts block ages on), the collector's clock is
    two hours ahead, and the lease is still live (a 1-day TTL).
    """
    lake = shared_lake
    with connect(lake) as conn:
        build_history(conn, commits=1)
        before = block_keys(conn.store)
        long_lease = LeaseManager(conn.store).acquire_writer(86_400, db="shop")
        cids = conn.blocks.put_many(
            [(f"orphan {i}".encode(), "raw") for i in range(4)], refresh_before=long_lease.start
        )
    leftovers = {str(cid) for cid in cids}
    assert leftovers == block_keys_after(lake) - before
    with connect(lake) as conn:
        backdate(conn.store, [conn.blocks.key(cid) for cid in cids], time.time() - 2 * 3600)
    with connect(lake) as collector:
        clock = FakeClock.real(offset=2 * 3600)
        collector.leases = LeaseManager(collector.store, clock=clock, sleep=clock.sleep)
        report = merkle.gc(collector, grace="1h", writer_wait=0)
        assert report.writer_leases_waited == 1
        assert not leftovers & set(report.freed)
        assert leftovers <= block_keys(collector.store)
        LeaseManager(collector.store).release(long_lease)
        report = merkle.gc(collector, grace="1h", writer_wait=0)
        assert set(report.freed) == leftovers


def block_keys_after(lake: Lake) -> set[str]:
    with connect(lake) as conn:
        return block_keys(conn.store)
