"""Leases and GC locks left by a holder whose clock runs far ahead (injected clocks, no sleeping).

A lease or lock holds absolute times by its holder's clock. Before, one left
by a crashed process whose clock was a day ahead looked live for a day: a
writer lease stopped every sweep, a GC lock every commit. Now an observer
never respects an object longer than its stated duration (plus the margin)
after it first saw it unchanged, a writer lease whose start lies implausibly
far in the future is ignored at once, and a collector takes such a GC lock
over at once; a holder that is alive renews, which keeps its object live.
"""

from __future__ import annotations

import pytest

from merkle.refs import LeaseManager, LockHeldError
from merkle.refs.timing import FUTURE_SKEW_ALLOWANCE
from merkle.storage import ObjectStore, open_store

from .helpers import FakeClock, root

DAY = 86_400.0
MARGIN = 5.0


@pytest.fixture
def store() -> ObjectStore:
    return open_store("memory://")


def manager(store: ObjectStore, clock: FakeClock, holder: str) -> LeaseManager:
    return LeaseManager(store, clock=clock, sleep=clock.sleep, skew_margin=MARGIN, holder=holder)


def test_a_writer_lease_from_a_clock_a_day_ahead_is_not_live(store: ObjectStore) -> None:
    clock = FakeClock()
    ahead = manager(store, FakeClock(clock.now + DAY), "ahead:1")
    ahead.acquire_writer(15.0)  # then the process is killed
    observer = manager(store, clock, "gc:2")
    assert observer.live("writer") == []
    assert observer.reap_expired() == 1
    assert observer.lease_holders() == []


def test_a_writer_lease_slightly_ahead_lives_at_most_its_duration_once_seen(
    store: ObjectStore,
) -> None:
    clock = FakeClock()
    skew = FUTURE_SKEW_ALLOWANCE  # within the allowance: not ignored at once
    lease = manager(store, FakeClock(clock.now + skew), "ahead:1").acquire_writer(15.0)
    observer = manager(store, clock, "gc:2")
    assert observer.live("writer") == [lease]
    clock.now += 15.0 + MARGIN - 0.01
    assert observer.live("writer") == [lease], "still within its duration since first seen"
    clock.now += 0.02
    assert observer.live("writer") == [], "its own times still say live for a minute more"


def test_a_renewed_lease_of_a_live_holder_ahead_stays_live(store: ObjectStore) -> None:
    clock = FakeClock()
    holder_clock = FakeClock(clock.now + 30.0)
    holder = manager(store, holder_clock, "ahead:1")
    lease = holder.acquire_reader("shop", 1, root("r"), ttl=60.0)
    observer = manager(store, clock, "gc:2")
    for _ in range(10):  # ten minutes: the holder renews every 15 s
        assert [held.id for held in observer.live("reader")] == [lease.id]
        clock.now += 15.0
        holder_clock.now += 15.0
        lease = holder.renew(lease, 60.0)
    clock.now = lease.expires + MARGIN  # killed: no more renewals; its expiry passes
    assert observer.live("reader") == []


def test_a_reader_lease_far_ahead_is_kept_until_its_duration_has_passed(
    store: ObjectStore,
) -> None:
    """A reader lease protects blocks, so it is never ignored at once, only bounded."""
    clock = FakeClock()
    lease = manager(store, FakeClock(clock.now + DAY), "ahead:1").acquire_reader(
        "shop", 1, root("r"), ttl=60.0
    )
    observer = manager(store, clock, "gc:2")
    assert observer.live("reader") == [lease]
    clock.now += 60.0 + MARGIN
    assert observer.live("reader") == []


def test_clocks_that_agree_end_nothing_before_its_expiry(store: ObjectStore) -> None:
    clock = FakeClock()
    lease = manager(store, clock, "w:1").acquire_writer(15.0)
    clock.now += 10.0
    observer = manager(store, clock, "gc:2")  # first sees it 10 s after it was written
    clock.now = lease.expires + MARGIN - 0.01
    assert observer.live("writer") == [lease]
    clock.now = lease.expires + MARGIN
    assert observer.live("writer") == []


def test_a_gc_lock_from_a_clock_a_day_ahead_holds_writers_only_its_duration(
    store: ObjectStore,
) -> None:
    clock = FakeClock()
    manager(store, FakeClock(clock.now + DAY), "gc-ahead:1").acquire_gc_lock(30.0)  # killed
    writer = manager(store, clock, "w:2")
    with pytest.raises(LockHeldError, match=r"in this machine's future.*stated duration"):
        writer.acquire_writer(15.0, wait_timeout=10.0)
    start = clock.now
    lease = writer.acquire_writer(15.0, wait_timeout=60.0)
    assert clock.now - start <= 30.0 + MARGIN
    assert lease.gc_generation == 0


def test_a_collector_takes_a_gc_lock_from_a_clock_far_ahead_over_at_once(
    store: ObjectStore,
) -> None:
    clock = FakeClock()
    manager(store, FakeClock(clock.now + DAY), "gc-ahead:1").acquire_gc_lock(30.0)
    lock = manager(store, clock, "gc:2").acquire_gc_lock(30.0, wait_timeout=0)
    assert clock.slept == []
    assert lock.generation == 1
    assert lock.replaced is not None
    assert lock.replaced.holder == "gc-ahead:1"
    lock.release()
    assert manager(store, clock, "w:3").acquire_writer(15.0, wait_timeout=0).gc_generation == 1


def test_a_live_collector_ahead_keeps_writers_out_while_it_renews(store: ObjectStore) -> None:
    """Writers never ignore a lock at once: a live collector's lock must keep them out."""
    clock = FakeClock()
    holder_clock = FakeClock(clock.now + DAY)
    lock = manager(store, holder_clock, "gc-ahead:1").acquire_gc_lock(30.0)

    def sleep(seconds: float) -> None:  # the collector renews while the writer waits
        clock.now += seconds
        holder_clock.now += seconds
        lock.renew(30.0)

    writer = LeaseManager(store, clock=clock, sleep=sleep, skew_margin=MARGIN, holder="w:2")
    with pytest.raises(LockHeldError):
        writer.acquire_writer(15.0, wait_timeout=120.0)
    assert writer.lease_holders("writer") == []
