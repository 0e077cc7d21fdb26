"""Reader and writer leases on every backend, with an injected clock (no sleeping)."""

from __future__ import annotations

import math

import pytest

from merkle.blocks.codec import encode_node
from merkle.errors import IntegrityError, UsageError
from merkle.refs import Lease, LeaseExpiredError, LeaseManager
from merkle.storage import ObjectStore

from .helpers import FakeClock, root

MARGIN = 10.0


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def leases(store: ObjectStore, clock: FakeClock) -> LeaseManager:
    return LeaseManager(store, clock=clock, sleep=clock.sleep, skew_margin=MARGIN, holder="host:1")


def test_a_reader_lease_is_listed_until_released(leases: LeaseManager, clock: FakeClock) -> None:
    lease = leases.acquire_reader("shop", 3, root("r"), ttl=60)
    assert (lease.kind, lease.db, lease.version, lease.root) == ("reader", "shop", 3, root("r"))
    assert (lease.start, lease.expires, lease.holder) == (clock.now, clock.now + 60, "host:1")
    other = LeaseManager(leases.store, clock=clock, skew_margin=MARGIN)
    assert other.live() == [lease]
    assert other.live("reader") == [lease]
    assert other.live("writer") == []
    leases.release(lease)
    leases.release(lease)  # idempotent
    assert other.live() == []


def test_a_writer_lease_has_a_start_and_an_expiry(leases: LeaseManager, clock: FakeClock) -> None:
    lease = leases.acquire_writer(ttl=120, db="shop")
    assert (lease.kind, lease.db, lease.version, lease.root) == ("writer", "shop", None, None)
    assert lease.expires - lease.start == 120
    assert leases.live("writer") == [lease]
    assert leases.live("reader") == []


def test_expiry_counts_the_margin_in_the_safe_direction(
    leases: LeaseManager, clock: FakeClock
) -> None:
    lease = leases.acquire_reader("shop", 0, root("r"), ttl=60)
    start = clock.now
    clock.now = start + 60 - MARGIN - 0.001
    assert leases.is_valid(lease)
    clock.now = start + 60 - MARGIN
    assert not leases.is_valid(lease), "the holder gives up margin seconds early"
    with pytest.raises(LeaseExpiredError, match="take a new lease"):
        leases.ensure_valid(lease)
    clock.now = start + 60 + MARGIN - 0.001
    assert leases.live() == [lease], "GC still respects it margin seconds late"
    clock.now = start + 60 + MARGIN
    assert leases.live() == [], "expired leases are not listed as live"


def test_a_skewed_observer_still_respects_a_valid_lease(store: ObjectStore) -> None:
    holder_clock, gc_clock = FakeClock(1000.0), FakeClock(1000.0 + 2 * MARGIN - 0.5)
    holder = LeaseManager(store, clock=holder_clock, skew_margin=MARGIN)
    gc = LeaseManager(store, clock=gc_clock, skew_margin=MARGIN)
    lease = holder.acquire_writer(ttl=100)
    for step in range(0, 200):
        holder_clock.now = gc_clock.now = 1000.0 + step
        gc_clock.now += 2 * MARGIN - 0.5  # GC's clock runs almost 2 margins ahead
        if holder.is_valid(lease):
            assert gc.live("writer") == [lease], f"at step {step}"


def test_renew_extends_a_valid_lease(leases: LeaseManager, clock: FakeClock) -> None:
    lease = leases.acquire_reader("shop", 0, root("r"), ttl=60)
    clock.now += 40
    renewed = leases.renew(lease, ttl=60)
    assert renewed.id == lease.id
    assert renewed.expires == clock.now + 60
    assert renewed.start == lease.start
    assert LeaseManager(leases.store, clock=clock, skew_margin=MARGIN).live() == [renewed]


def test_an_expired_or_released_lease_cannot_be_renewed(
    leases: LeaseManager, clock: FakeClock
) -> None:
    expired = leases.acquire_reader("shop", 0, root("r"), ttl=60)
    clock.now += 50
    with pytest.raises(LeaseExpiredError, match="expired"):
        leases.renew(expired, ttl=60)
    released = leases.acquire_writer(ttl=60)
    leases.release(released)
    with pytest.raises(LeaseExpiredError, match="released"):
        leases.renew(released, ttl=60)
    assert [lease.id for lease in leases.live()] == [expired.id]


def test_reap_deletes_only_dead_leases(leases: LeaseManager, clock: FakeClock) -> None:
    old = leases.acquire_reader("shop", 0, root("old"), ttl=20)
    clock.now += 15
    young = leases.acquire_writer(ttl=60)
    clock.now += 10  # old: expired 5s ago, within the margin: still protected
    assert leases.reap_expired() == 0
    clock.now += MARGIN / 2
    assert leases.reap_expired() == 1
    assert not leases.store.exists(old.key)
    assert leases.live() == [young]


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda m: m.acquire_reader("shop", 0, root("r"), ttl=MARGIN), "above the skew margin"),
        (lambda m: m.acquire_reader("shop", 0, root("r"), ttl=-1), "above the skew margin"),
        (lambda m: m.acquire_reader("shop", 0, root("r"), ttl=math.nan), "skew margin"),
        (lambda m: m.acquire_reader("shop", 0, root("r"), ttl="60"), "skew margin"),
        (lambda m: m.acquire_reader("shop", -1, root("r"), ttl=60), "version"),
        (lambda m: m.acquire_reader("shop", 0, "nope", ttl=60), "not a valid CID"),
        (lambda m: m.acquire_reader("", 0, root("r"), ttl=60), "invalid database name"),
        (lambda m: m.acquire_writer(ttl=60, wait_timeout=-1), "wait_timeout"),
        (lambda m: m.acquire_writer(ttl=60, db="a/b"), "invalid database name"),
        (lambda m: m.live("other"), "lease kind"),
    ],
)
def test_bad_lease_arguments_are_usage_errors(
    leases: LeaseManager, call: object, match: str
) -> None:
    with pytest.raises(UsageError, match=match):
        call(leases)  # type: ignore[operator]
    assert list(leases.store.list("leases/")) == []


@pytest.mark.parametrize("margin", [-1, math.inf, "5"])
def test_a_bad_skew_margin_is_a_usage_error(store: ObjectStore, margin: object) -> None:
    with pytest.raises(UsageError, match="skew_margin"):
        LeaseManager(store, skew_margin=margin)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "data",
    [
        b"\xff garbage",
        encode_node({"type": "merkle/other", "v": 1}),
        encode_node({"type": "merkle/lease", "v": 1, "id": "reader-x"}),
    ],
)
def test_a_damaged_lease_is_an_integrity_error_naming_it(leases: LeaseManager, data: bytes) -> None:
    leases.acquire_writer(ttl=60)
    leases.store.put("leases/reader-x", data)
    with pytest.raises(IntegrityError, match="leases/reader-x"):
        leases.live()
    with pytest.raises(IntegrityError, match="leases/reader-x"):
        leases.reap_expired()


def test_leases_compare_by_value(leases: LeaseManager) -> None:
    lease = leases.acquire_reader("shop", 0, root("r"), ttl=60)
    (listed,) = leases.live()
    assert isinstance(listed, Lease)
    assert listed == lease
    assert hash(listed) == hash(lease)
