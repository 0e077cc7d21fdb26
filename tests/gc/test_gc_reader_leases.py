"""Reader leases: a leased version outside retention stays whole until it is released.

Writes go through short-lived connections (closed at once, so their writer
leases are gone before each collection). Blocks are checked straight in the
object store (``missing_blocks``), so no cache of the reading connection can
hide a deleted one. Lease expiry is reached by giving the collecting
connection a LeaseManager with a fake clock, never by waiting.
"""

from __future__ import annotations

from typing import Any

import pytest
from conftest import Lake
from gc_helpers import (
    FakeClock,
    block_keys,
    build_history,
    connect,
    dump,
    missing_blocks,
    reachable,
    same_dump,
    settle,
)

import merkle
from merkle.errors import NotFoundError
from merkle.refs import LeaseManager
from merkle.refs.leases import LEASE_PREFIX
from merkle.refs.timing import DEFAULT_SKEW_MARGIN


def _leased(db: merkle.Database) -> bool:
    """``db.leased``, read through a call so the type checker does not narrow it."""
    return db.leased


def _commit_change(lake: Lake, i: int) -> merkle.Database:
    with connect(lake) as conn:
        db = conn.open_db("shop")
        db = db.write("orders", [{"id": k, "qty": 100 * i + k} for k in range(0, 40, 3)])
        return db.delete("orders", [i]).commit()


def test_a_leased_old_version_survives_collections_until_released(lake: Lake) -> None:
    with connect(lake) as conn:
        build_history(conn, commits=2)
    with connect(lake) as reader, connect(lake) as collector:
        old = reader.open_db("shop", version=1, lease=True)
        assert old.leased
        want = dump(old)
        needs = reachable(reader.store, [old.root])
        head = None
        for i in range(3):
            head = _commit_change(lake, i)
            settle(collector)  # every block older than the grace (S3: whole seconds)
            report = merkle.gc(collector, keep_versions=1, grace="0s")
            assert report.reader_leases == 1
            assert report.blocks_freed > 0  # the versions between are collected meanwhile
            assert not needs & set(report.freed)
            assert missing_blocks(collector.store, old.root) == []
            assert same_dump(dump(old), want)
            # The version left the journal; only the lease keeps its blocks.
            with pytest.raises(NotFoundError, match="removed by retention"):
                collector.open_db("shop", version=1)
        assert head is not None
        old.release()
        assert not _leased(old)
        assert list(reader.store.list(LEASE_PREFIX + "reader-")) == []
        settle(collector)
        report = merkle.gc(collector, keep_versions=1, grace="0s")
        assert report.reader_leases == 0
        only_old = needs - reachable(collector.store, [head.root])
        assert only_old
        assert only_old <= set(report.freed)
        assert block_keys(collector.store) == reachable(collector.store, [head.root])
        assert merkle.verify(collector).ok


def test_a_with_block_releases_the_lease(lake: Lake) -> None:
    with connect(lake) as conn:
        build_history(conn, commits=1)
    with connect(lake) as reader:
        with reader.open_db("shop", version=1, lease=True) as db:
            assert db.leased
            (lease,) = reader.leases.live("reader")
            assert (lease.db, lease.version, lease.root) == ("shop", 1, db.root)
            derived = db.write("orders", [{"id": 1}])
            assert derived.leased  # values derived from a leased one share its lease
        assert not _leased(db)
        assert reader.leases.live("reader") == []


def test_an_expired_reader_lease_protects_nothing(lake: Lake) -> None:
    with connect(lake) as conn:
        versions = build_history(conn, commits=2)
        # A reader that took a lease and died: nobody renews or releases it.
        lease = LeaseManager(conn.store).acquire_reader("shop", 1, versions[1].root, ttl=60)
        settle(conn)  # every block older than the grace (S3: whole-second timestamps)
    needs_only_old = reachable_only(lake, versions[1].root, versions[-1].root)
    with connect(lake) as collector:
        report = merkle.gc(collector, keep_versions=1, grace="0s")
        assert report.reader_leases == 1
        assert not needs_only_old & set(report.freed)
        # Past its expiry plus the skew margin, by the collector's (fake) clock.
        clock = FakeClock(lease.expires + DEFAULT_SKEW_MARGIN + 1)
        collector.leases = LeaseManager(collector.store, clock=clock, sleep=clock.sleep)
        report = merkle.gc(collector, keep_versions=1, grace="0s")
        assert report.reader_leases == 0
        assert needs_only_old <= set(report.freed)
        assert list(collector.store.list(LEASE_PREFIX)) == []  # reaped
        assert merkle.verify(collector).ok


def reachable_only(lake: Lake, root: str, other: str) -> set[str]:
    """Blocks ``root`` reaches and ``other`` does not (non-empty, or the test is moot)."""
    with connect(lake) as conn:
        only = reachable(conn.store, [root]) - reachable(conn.store, [other])
    assert only
    return only


def _collect_in_between(lake: Lake, obj: Any, name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the first call of ``obj.name`` run a collection (keep_versions=1) before it."""
    real = getattr(obj, name)
    calls: list[tuple[Any, ...]] = []

    def hooked(*args: Any, **kwargs: Any) -> Any:
        if not calls:
            calls.append(args)
            with connect(lake) as collector:
                settle(collector)  # every block older than the grace (S3: whole seconds)
                report = merkle.gc(collector, keep_versions=1, grace="0s")
                assert report.blocks_freed > 0
        return real(*args, **kwargs)

    monkeypatch.setattr(obj, name, hooked)


def test_open_with_lease_racing_a_trim_before_the_lease_says_removed_by_retention(
    lake: Lake, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A collection runs between the reader's journal lookup and its reading the root."""
    with connect(lake) as conn:
        build_history(conn, commits=2)
    with connect(lake) as reader:
        real_get = reader.refs.get
        looked_up: list[Any] = []

        def get_then_collect(db: str, version: int) -> Any:
            entry = real_get(db, version)
            if not looked_up:
                looked_up.append(entry)
                with connect(lake) as collector:
                    settle(collector)  # every block older than the grace (S3: whole seconds)
                    assert merkle.gc(collector, keep_versions=1, grace="0s").blocks_freed > 0
            return entry

        monkeypatch.setattr(reader.refs, "get", get_then_collect)
        with pytest.raises(NotFoundError) as caught:
            reader.open_db("shop", version=1, lease=True)
        assert looked_up
        assert reader.leases.live("reader") == []
        assert "removed by retention" in str(caught.value), str(caught.value)


def test_open_with_lease_racing_a_trim_before_the_lease_is_written_backs_off(
    lake: Lake, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A collection runs after the root is read but before the lease is written."""
    with connect(lake) as conn:
        build_history(conn, commits=2)
    with connect(lake) as reader:
        _collect_in_between(lake, reader.leases, "acquire_reader", monkeypatch)
        with pytest.raises(NotFoundError, match="removed by retention"):
            reader.open_db("shop", version=1, lease=True)
        assert reader.leases.live("reader") == []
    with connect(lake) as conn:
        assert merkle.verify(conn).ok


def test_a_lease_taken_before_a_trim_is_seen_by_that_collection(
    lake: Lake, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lease is written while the collection runs (before it looks at reader leases)."""
    with connect(lake) as conn:
        versions = build_history(conn, commits=2)
    only_old = reachable_only(lake, versions[1].root, versions[-1].root)
    with connect(lake) as reader, connect(lake) as collector:
        leased: list[merkle.Database] = []
        real_trim = collector.refs.trim

        def open_then_trim(db: str, before_version: int) -> int:
            if not leased:
                leased.append(reader.open_db("shop", version=1, lease=True))
            return real_trim(db, before_version)

        monkeypatch.setattr(collector.refs, "trim", open_then_trim)
        report = merkle.gc(collector, keep_versions=1, grace="0s")
        assert leased
        assert leased[0].leased
        assert report.reader_leases == 1
        assert not only_old & set(report.freed)
        assert missing_blocks(collector.store, versions[1].root) == []
        assert same_dump(dump(leased[0]), dump(versions[1]))
        leased[0].release()
