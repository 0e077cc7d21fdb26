"""The GC lock: exclusive, breakable once expired, and the writer handshake."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from merkle.errors import UsageError
from merkle.refs import LeaseExpiredError, LeaseManager, LockHeldError, WritersBusyError
from merkle.refs.gclock import DAMAGED_LOCK_TTL, LOCK_PREFIX, lock_key, read_lock
from merkle.refs.leases import DEFAULT_WRITER_WAIT
from merkle.refs.timing import DEFAULT_SKEW_MARGIN
from merkle.storage import ObjectStore

from .helpers import FakeClock, FaultyStore

MARGIN = 10.0


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def manager(store: ObjectStore, clock: FakeClock, holder: str) -> LeaseManager:
    return LeaseManager(store, clock=clock, sleep=clock.sleep, skew_margin=MARGIN, holder=holder)


def generations(store: ObjectStore) -> list[str]:
    return [info.key for info in store.list(LOCK_PREFIX)]


def test_the_lock_is_exclusive_until_released(store: ObjectStore, clock: FakeClock) -> None:
    gc1, gc2 = manager(store, clock, "gc1"), manager(store, clock, "gc2")
    lock = gc1.acquire_gc_lock(ttl=600)
    assert (lock.generation, lock.holder) == (0, "gc1")
    with pytest.raises(LockHeldError, match="held by gc1") as info:
        gc2.acquire_gc_lock(ttl=600)
    assert info.value.holder == "gc1"
    assert "retry later" in str(info.value)
    lock.ensure_held()
    lock.release()
    lock.release()  # idempotent
    with pytest.raises(LeaseExpiredError, match="released"):
        lock.ensure_held()
    with gc2.acquire_gc_lock(ttl=600) as second:
        assert second.generation == 1
        assert generations(store) == [lock_key(1)], "older generations are cleaned up"
    assert read_lock(store).released  # type: ignore[union-attr]


def test_a_waiting_taker_gets_the_lock_when_it_expires(
    store: ObjectStore, clock: FakeClock
) -> None:
    manager(store, clock, "gc1").acquire_gc_lock(ttl=60)
    start = clock.now
    lock = manager(store, clock, "gc2").acquire_gc_lock(ttl=60, wait_timeout=3600)
    assert lock.holder == "gc2"
    assert clock.now >= start + 60 + MARGIN, "it waited for expiry plus the margin"
    assert clock.now < start + 60 + MARGIN + 1


def test_an_expired_lock_is_broken_and_its_old_holder_told(
    store: ObjectStore, clock: FakeClock
) -> None:
    old = manager(store, clock, "gc1").acquire_gc_lock(ttl=60)
    breaker = manager(store, clock, "gc2")
    clock.now += 60 + MARGIN - 0.001
    with pytest.raises(LockHeldError):
        breaker.acquire_gc_lock(ttl=60)
    clock.now += 0.001
    new = breaker.acquire_gc_lock(ttl=60)
    assert new.generation == old.generation + 1
    with pytest.raises(LeaseExpiredError):
        old.ensure_held()
    with pytest.raises(LeaseExpiredError):
        old.renew(60)
    old.release()  # a lock already taken over is left alone
    new.ensure_held()
    assert read_lock(store).holder == "gc2"  # type: ignore[union-attr]


def test_the_holder_stops_a_margin_early_and_can_renew_before(
    store: ObjectStore, clock: FakeClock
) -> None:
    lock = manager(store, clock, "gc1").acquire_gc_lock(ttl=60)
    clock.now += 60 - MARGIN - 1
    lock.renew(60)
    assert lock.expires == clock.now + 60
    clock.now += 60 - MARGIN
    with pytest.raises(LeaseExpiredError, match="expired"):
        lock.ensure_held()
    with pytest.raises(LockHeldError):  # others still wait: the lock is theirs to respect
        manager(store, clock, "gc2").acquire_gc_lock(ttl=60)


class RaceBefore(FaultyStore):
    """Runs ``hook`` once, just before the first conditional put of a lock generation."""

    def __init__(self, inner: ObjectStore, hook: Callable[[], None]) -> None:
        super().__init__(inner)
        self.hook: Callable[[], None] | None = hook

    def put_if_absent(self, key: str, data: bytes) -> bool:
        if key.startswith(LOCK_PREFIX) and self.hook is not None:
            hook, self.hook = self.hook, None
            hook()
        return super().put_if_absent(key, data)


def test_two_breakers_cannot_both_hold_the_lock(store: ObjectStore, clock: FakeClock) -> None:
    manager(store, clock, "gc0").acquire_gc_lock(ttl=60)
    clock.now += 60 + MARGIN
    winner: list[object] = []
    # gc1 sees the expired lock; before its put lands, gc2 breaks it first.
    racing = RaceBefore(
        store, lambda: winner.append(manager(store, clock, "gc2").acquire_gc_lock(ttl=60))
    )
    with pytest.raises(LockHeldError, match="held by gc2"):
        manager(racing, clock, "gc1").acquire_gc_lock(ttl=60)
    assert read_lock(store).holder == "gc2"  # type: ignore[union-attr]
    assert len(winner) == 1


def test_a_stalled_taker_of_a_cleaned_up_generation_steps_aside(
    store: ObjectStore, clock: FakeClock
) -> None:
    manager(store, clock, "gc0").acquire_gc_lock(ttl=60).release()  # generation 0

    def others_run_meanwhile() -> None:
        manager(store, clock, "gc2").acquire_gc_lock(ttl=60).release()  # generation 1
        manager(store, clock, "gc3").acquire_gc_lock(ttl=60)  # 2, deletes 0 and 1

    # gc1 saw generation 0 released and means to create 1, which gc3 has freed.
    stalled = RaceBefore(store, others_run_meanwhile)
    with pytest.raises(LockHeldError, match="held by gc3"):
        manager(stalled, clock, "gc1").acquire_gc_lock(ttl=60)
    current = read_lock(store)
    assert current is not None
    assert (current.generation, current.holder, current.released) == (2, "gc3", False)


def test_a_writer_waits_for_the_gc_lock_then_fails_clearly(
    store: ObjectStore, clock: FakeClock
) -> None:
    manager(store, clock, "gc").acquire_gc_lock(ttl=3600)
    writer = manager(store, clock, "writer")
    start = clock.now
    with pytest.raises(LockHeldError) as info:
        writer.acquire_writer(ttl=60, wait_timeout=5)
    message = str(info.value)
    assert "garbage collection holds the GC lock" in message
    assert "within 5s" in message
    assert info.value.holder == "gc"
    assert clock.now == pytest.approx(start + 5), "it waited wait_timeout, by the injected clock"
    assert writer.live("writer") == [], "the withdrawn leases are gone"


def test_a_writer_proceeds_once_the_lock_is_released(store: ObjectStore, clock: FakeClock) -> None:
    lock = manager(store, clock, "gc").acquire_gc_lock(ttl=3600)

    def sleep_then_release(seconds: float) -> None:
        clock.sleep(seconds)
        lock.release()

    writer = LeaseManager(
        store, clock=clock, sleep=sleep_then_release, skew_margin=MARGIN, holder="w"
    )
    lease = writer.acquire_writer(ttl=60, wait_timeout=30)
    assert writer.live("writer") == [lease]


def test_gc_waits_for_writers_that_registered_first(store: ObjectStore, clock: FakeClock) -> None:
    writer = manager(store, clock, "writer")
    early = writer.acquire_writer(ttl=60)
    lock = manager(store, clock, "gc").acquire_gc_lock(ttl=3600)
    with pytest.raises(WritersBusyError, match=early.id):
        lock.wait_for_writers(timeout=30)
    lock.wait_for_writers(timeout=3600)  # returns once the lease expired (plus margin)
    assert clock.now >= early.expires + MARGIN


def test_gc_stops_waiting_when_the_writer_commits(store: ObjectStore, clock: FakeClock) -> None:
    writer = manager(store, clock, "writer")
    early = writer.acquire_writer(ttl=600)
    gc_clock_sleep = clock.sleep

    def sleep_while_writer_finishes(seconds: float) -> None:
        gc_clock_sleep(seconds)
        writer.release(early)

    gc = LeaseManager(
        store, clock=clock, sleep=sleep_while_writer_finishes, skew_margin=MARGIN, holder="gc"
    )
    lock = gc.acquire_gc_lock(ttl=3600)
    start = clock.now
    lock.wait_for_writers(timeout=3600)
    assert clock.now - start <= 0.5 + 1e-9, "one poll, not the lease's expiry"


def test_bad_lock_arguments_and_damage(store: ObjectStore, clock: FakeClock) -> None:
    gc = manager(store, clock, "gc")
    with pytest.raises(UsageError, match="skew margin"):
        gc.acquire_gc_lock(ttl=MARGIN)
    with pytest.raises(UsageError, match="wait_timeout"):
        gc.acquire_gc_lock(ttl=60, wait_timeout=-1)


def test_an_unreadable_lock_holds_writers_up_only_until_it_expires(store: ObjectStore) -> None:
    """A torn or foreign lock object does not stop every commit for ever (issue 9, item 7)."""
    store.put(lock_key(4), b"\xff not cbor")
    written = store.stat(lock_key(4)).mtime
    clock = FakeClock(written)
    writer, gc = manager(store, clock, "writer"), manager(store, clock, "gc")
    state = read_lock(store)
    assert state is not None
    assert state.damaged
    assert "unreadable lock object 'gc/lock/00000000000000000004'" in state.holder
    with pytest.raises(LockHeldError, match="unreadable lock object"):
        writer.acquire_writer(ttl=60, wait_timeout=5)
    assert gc.live("writer") == [], "no lease is left behind"
    lease = writer.acquire_writer(ttl=60, wait_timeout=DAMAGED_LOCK_TTL + 2 * MARGIN)
    assert clock.now >= written + DAMAGED_LOCK_TTL + MARGIN, "it waited for the expiry"
    writer.release(lease)
    with gc.acquire_gc_lock(ttl=60) as lock:
        assert lock.generation == 5
        assert generations(store) == [lock_key(5)], "the unreadable generation is gone"


def test_breaking_the_lock_of_a_killed_collector(store: ObjectStore, clock: FakeClock) -> None:
    """``merkle gc --break-lock``: no waiting for the expiry; the old holder is fenced."""
    dead = manager(store, clock, "dead").acquire_gc_lock(ttl=600)
    breaker = manager(store, clock, "ops")
    assert breaker.break_gc_lock() == dead.state
    assert breaker.break_gc_lock() is None, "nothing held any more"
    with pytest.raises(LeaseExpiredError, match="taken over"):
        dead.ensure_held()  # the old holder stops before its next destructive step
    lease = manager(store, clock, "writer").acquire_writer(ttl=60, wait_timeout=0)
    assert lease.gc_generation == dead.generation + 1
    with breaker.acquire_gc_lock(ttl=60, wait_timeout=0) as lock:
        assert lock.generation == dead.generation + 2


def test_a_writer_with_the_default_wait_outlasts_a_fresh_unreadable_lock(
    store: ObjectStore,
) -> None:
    """A torn lock object written just now holds a commit up, but not past the writer's
    default wait: it counted as held for 60 s plus the 5 s skew margin, so a commit that
    met it waited its whole 60 s and failed (an operator-docs probe found it)."""
    store.put(lock_key(2), b"\xff torn")
    clock = FakeClock(store.stat(lock_key(2)).mtime)
    writer = LeaseManager(store, clock=clock, sleep=clock.sleep, holder="writer")
    assert DAMAGED_LOCK_TTL + DEFAULT_SKEW_MARGIN < DEFAULT_WRITER_WAIT
    start = clock.now
    lease = writer.acquire_writer(ttl=60)  # the default wait
    assert clock.now - start >= DAMAGED_LOCK_TTL, "it waited for the damaged lock's expiry"
    writer.release(lease)
