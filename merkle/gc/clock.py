"""The storage's clock: the one "now" of a collection, for retention, grace and leftovers.

Blocks and temporary files carry timestamps set by the storage's clock (the
file server's, S3's), and journal entries name when they were committed. A
collection reads that clock once, first (by writing :data:`CLOCK_KEY` and
reading back its modification time), and judges every age by it: which
versions ``keep_within`` keeps, which unreachable blocks are older than the
grace period, which temporaries are crash leftovers. A collector whose own
clock runs ahead (or behind) therefore neither frees what was written
moments ago nor keeps what is long out of retention.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from merkle.storage.base import ObjectStore

if TYPE_CHECKING:
    from merkle.db.connection import Connection

__all__ = ["CLOCK_KEY", "TEMPORARY_MIN_AGE", "remove_temporaries", "storage_clock", "storage_now"]

#: A temporary file younger than this may be a write in flight (lease files are
#: written without a lease), so GC never removes it, whatever the grace period:
#: a grace of "0s" must not fail a concurrent writer's rename.
TEMPORARY_MIN_AGE = 600.0
#: Rewritten by each collection before it marks: its modification time is the
#: storage's clock, against which ages are measured.
CLOCK_KEY = "gc/clock"


def storage_clock(conn: Connection, dry_run: bool) -> float:
    """Now by the storage's clock, against which the blocks' timestamps count their age
    and retention (``keep_within``) counts back.

    A collector whose own clock runs ahead would otherwise take a block a
    writer put minutes ago for one older than the grace period, or a version
    committed minutes ago for one older than ``keep_within``. Reading the
    storage's clock means writing :data:`CLOCK_KEY`, which a dry run does
    not do (it writes nothing but its report): its count uses this
    machine's clock (``conn.leases.timing``).
    """
    collector_now = conn.leases.timing.now()
    if not dry_run:
        return storage_now(conn.store, collector_now)
    return collector_now


def storage_now(store: ObjectStore, collector_now: float) -> float:
    """The storage's own idea of now: the modification time of :data:`CLOCK_KEY`, written now.

    The object holds ``collector_now`` (for whoever compares the two clocks);
    it is a hint write (no flush): only its timestamp matters.
    """
    store.put_hint(CLOCK_KEY, repr(float(collector_now)).encode("ascii"))
    return store.stat(CLOCK_KEY).mtime


def remove_temporaries(store: ObjectStore, now: float, grace: float) -> tuple[int, int]:
    """Remove crash leftovers older than ``grace`` seconds and :data:`TEMPORARY_MIN_AGE`;
    (files removed, bytes removed).

    Their ages are modification times, set by the storage's clock, so they
    are measured against ``now`` by that clock, as read at the start of the
    collection (an earlier now only makes them look younger): a collector
    whose own clock runs ahead must not take a write in flight for an old
    leftover.
    """
    return store.remove_stale_temporaries(now - max(grace, TEMPORARY_MIN_AGE))
