"""Reader leases after a stall, and closed connections, as an adversarial probe found them.

- A reader holding ``open_db(..., lease=True)``, stalled past its lease (SIGSTOP, a
  paused VM) while a collection elsewhere freed the version, got MissingBlockError
  from its next read: the read trusted the flag the renewing thread sets, and that
  thread had not run. A read now checks the lease's own expiry (by the reader's
  clock) and recovers or gives up the lease there and then; a block found missing
  in the middle of a leased read whose lease lapsed is a LeaseExpiredError too.
  The stall is a clock moved forward by the test, never a wait.
- After ``conn.close()``, commit, tag and clone raised a bare RuntimeError; every
  use of the lake through a closed connection is now a UsageError saying so, while
  a value already in hand still reads its (immutable) version.
"""

from __future__ import annotations

import time
from dataclasses import replace

import pytest
from aging import settle
from conftest import Lake

import merkle
from merkle.blocks.store import MissingBlockError
from merkle.errors import UsageError
from merkle.refs import LeaseExpiredError, LeaseManager
from merkle.refs.timing import DEFAULT_SKEW_MARGIN
from tests.refs.helpers import FakeClock

from .conftest import Connect

ROWS = 120


def _two_versions(conn: merkle.Connection) -> int:
    """A table of several tablets, then every record rewritten; the old version."""
    db = conn.create_db("shop").create_table("t", key="id", tablet_size_limit=20)
    db = db.write("t", [{"id": i, "v": "old"} for i in range(ROWS)]).compact().commit()
    db.write("t", [{"id": i, "v": "new"} for i in range(ROWS)]).compact().commit()
    return db.version


def _reader(lake: Lake) -> tuple[merkle.Connection, FakeClock]:
    """A connection whose lease clock the test moves (cache off: reads reach the lake)."""
    conn = merkle.connect(lake.uri, cache_bytes=0, **lake.options)
    clock = FakeClock(start=time.time())
    conn.leases.timing = replace(conn.leases.timing, clock=clock)
    return conn, clock


def _stall_and_collect(lake: Lake, connect: Connect, db: merkle.Database, clock: FakeClock) -> None:
    """The reader stalls past its lease; meanwhile a collection frees the old version."""
    assert db._reader is not None
    expires = db._reader.lease.expires
    clock.now = expires + 1  # the reader's own clock: the lease has run out
    collector = connect(lake)
    settle(collector)  # every block older than the grace (S3's whole-second clock)
    late = FakeClock(expires + DEFAULT_SKEW_MARGIN + 1)  # past it for others too
    collector.leases = LeaseManager(collector.store, clock=late, sleep=late.sleep)
    report = merkle.gc(collector, keep_versions=1, grace="0s")
    assert report.reader_leases == 0
    assert report.blocks_freed > 0


def test_a_read_after_a_stall_past_the_lease_says_the_lease_lapsed(
    lake: Lake, connect: Connect
) -> None:
    with connect(lake) as writer:
        old = _two_versions(writer)
    reader, clock = _reader(lake)
    try:
        db = reader.open_db("shop", version=old, lease=True)
        assert db._reader is not None
        assert db._reader.lapsed is None
        _stall_and_collect(lake, connect, db, clock)
        with pytest.raises(LeaseExpiredError, match="lapsed") as info:
            db.to_arrow("t")
        assert "no longer in the journal" in str(info.value)
        assert not db.leased
        assert reader.leases.live("reader") == [], "the recovery lease was given back"
    finally:
        reader.close()


def test_a_block_missing_mid_read_under_a_lapsed_lease_is_lease_expired(
    lake: Lake, connect: Connect
) -> None:
    with connect(lake) as writer:
        old = _two_versions(writer)
    reader, clock = _reader(lake)
    try:
        db = reader.open_db("shop", version=old, lease=True)
        rows = db.scan("t")
        assert next(rows) == {"id": 0, "v": "old"}  # checked and started: a tablet read
        _stall_and_collect(lake, connect, db, clock)
        with pytest.raises(LeaseExpiredError, match="is gone already"):
            list(rows)
    finally:
        reader.close()


def test_a_block_missing_under_a_valid_lease_is_still_missing(lake: Lake, connect: Connect) -> None:
    """Damage, not a lapse: the error says which block, as before."""
    with connect(lake) as writer:
        old = _two_versions(writer)
    reader, _ = _reader(lake)
    try:
        db = reader.open_db("shop", version=old, lease=True)
        tablet = db.list_tablets("t")[-1]["id"]
        reader.store.delete(f"blocks/{tablet}")
        with pytest.raises(MissingBlockError, match=tablet):
            db.to_arrow("t")
        assert db.leased
    finally:
        reader.close()


def test_a_version_read_without_a_lease_and_collected_says_to_take_a_lease(
    lake: Lake, connect: Connect
) -> None:
    """Without ``lease=True`` a collection may free an old version under its reader; the
    missing block's error said only "never written or garbage-collected" and left the
    reader to guess what to do."""
    with connect(lake) as writer:
        old = _two_versions(writer)
    reader = merkle.connect(lake.uri, cache_bytes=0, **lake.options)
    try:
        db = reader.open_db("shop", version=old)
        collector = connect(lake)
        settle(collector)
        assert merkle.gc(collector, keep_versions=1, grace="0s").blocks_freed > 0
        with pytest.raises(MissingBlockError, match=r"garbage-collected.*lease=True") as info:
            db.to_arrow("t")
        assert f"version {old} of database 'shop'" in str(info.value)
        head = reader.open_db("shop")  # the head's blocks are kept: no lease advice
        tablet = head.list_tablets("t")[-1]["id"]
        reader.store.delete(f"blocks/{tablet}")
        with pytest.raises(MissingBlockError, match=tablet) as info:
            head.to_arrow("t")
        assert "lease" not in str(info.value)
    finally:
        reader.close()


def test_a_closed_connection_refuses_every_use_of_the_lake(lake: Lake, connect: Connect) -> None:
    conn = connect(lake)
    db = conn.create_db("shop").create_table("t", key="id").write("t", [{"id": 1}]).commit()
    conn.close()
    assert conn.closed
    uses = {
        "commit": lambda: db.write("t", [{"id": 2}]).commit(),
        "tag": lambda: conn.tag("shop", "x"),
        "clone": lambda: conn.create_db("c", root=db),
        "create": lambda: conn.create_db("other"),
        "open": lambda: conn.open_db("shop"),
        "history": lambda: conn.history("shop"),
        "list": conn.list_dbs,
        "tags": lambda: conn.tags("shop"),
        "delete tag": lambda: conn.delete_tag("shop", "x"),
        "drop": lambda: conn.drop_db("shop"),
        "merge": lambda: conn.merge("shop", "shop"),
        "diff by number": lambda: db.diff(0),
    }
    for what, use in uses.items():
        with pytest.raises(UsageError, match=r"is closed .*connect again") as info:
            use()
        assert conn.uri in str(info.value), what
    # A value in hand still reads its version: its blocks are immutable.
    assert db.get_records("t", [1]) == {1: {"id": 1}}
    with merkle.connect(lake.uri, **lake.options) as again:
        assert again.open_db("shop").version == db.version, "nothing was committed"
        assert again.tags("shop") == []
