"""GC roots: reader leases of versions already freed, and the clock retention counts on.

* A reader writes its lease first and checks its version is still in the journal
  second. A collection that trimmed and swept the version in between left a live
  lease (until released, or ~65 s when the reader was killed) whose blocks are gone;
  every collection starting meanwhile marked from it and stopped with
  ReachabilityError ("run merkle verify and restore the block"), although verify
  found nothing wrong (135 of 245 collections of a race test). Such a lease is now
  skipped and reported; a lease whose blocks are all present is still marked, and
  a lease whose walk stopped at a missing block leaves nothing half-marked behind.
* ``keep_within`` was judged by the collector's own clock: one running 2 days ahead
  with ``keep_within="1d"`` trimmed (and freed) versions committed moments ago. It
  now counts back from the storage's clock, the same now as the grace period.

Clocks are injected (a shifted ``datetime`` and LeaseManager clock), never slept.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from conftest import Lake
from gc_helpers import connect, dump, missing_blocks, reachable, same_dump, settle

import merkle
from merkle.blocks.store import BLOCK_PREFIX
from merkle.db.readers import ReaderLease, ReaderLeaseKeeper
from merkle.errors import NotFoundError
from merkle.gc import collect
from merkle.gc.mark import ReachabilityError
from merkle.gc.report import GCReport
from merkle.refs import LeaseManager, RefManager

DAY = 86_400.0


def history(conn: merkle.Connection, commits: int) -> list[merkle.Database]:
    """Versions 0..commits+1 of ``shop`` (each commit changes one row of ``t``)."""
    db = conn.create_db("shop")
    versions = [db]
    db = db.create_table("t", key="k").write("t", [{"k": k, "v": 0} for k in range(20)])
    versions.append(db.commit())
    for i in range(commits):
        versions.append(versions[-1].write("t", [{"k": i, "v": i + 1}]).commit())
    return versions


def collect_all(lake: Lake) -> GCReport:
    """A collection keeping the head only, by a connection of its own."""
    with connect(lake) as collector:
        return merkle.gc(collector, keep_versions=1, grace="0s")


# -- a reader lease of a version already freed ---------------------------------------


@pytest.mark.parametrize("reader", ["killed after its lease", "live, backing off"])
def test_a_lease_of_a_version_freed_before_it_was_written_does_not_stop_gc(
    lake: Lake, reader: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reader resolved version 1; a collection trimmed and swept it; then the reader
    wrote its lease. A collection starting before that lease ends goes on, and says so."""
    with connect(lake) as conn:
        versions = history(conn, 3)
        want = dump(versions[-1])
        settle(conn)
    old = versions[1]
    reports: list[Any] = []
    with connect(lake) as conn:
        if reader == "killed after its lease":
            collect_all(lake)
            assert missing_blocks(conn.store, old.root), "version 1 is freed"
            # What a reader killed between its lease and its journal check leaves behind.
            conn.leases.acquire_reader("shop", 1, old.root, 60.0)
            reports.append(collect_all(lake))
        else:
            hold = ReaderLeaseKeeper.hold

            def swept_then_held(self: ReaderLeaseKeeper, *args: Any) -> ReaderLease:
                collect_all(lake)  # between the reader resolving version 1 and its lease
                handle = hold(self, *args)
                reports.append(collect_all(lake))  # between its lease and its check
                return handle

            monkeypatch.setattr(ReaderLeaseKeeper, "hold", swept_then_held)
            with pytest.raises(NotFoundError, match="removed by retention"):
                conn.open_db("shop", version=1, lease=True)  # the reader backs off
            monkeypatch.undo()
        (report,) = reports
        assert report.reader_leases == 0
        assert len(report.reader_leases_stale) == 1
        assert "'shop' v1" in report.reader_leases_stale[0]
        assert "1 stale reader lease(s) of versions already trimmed and freed" in report.summary()
        assert merkle.verify(conn).ok
        assert same_dump(dump(conn.open_db("shop")), want)


@pytest.mark.parametrize("how", ["opened before the trim", "written after a trim, unswept"])
def test_a_lease_of_a_trimmed_version_whose_blocks_are_present_keeps_them(
    lake: Lake, how: str
) -> None:
    """Beside a stale lease (which old code stopped at), a lease of a version the journal
    no longer keeps but whose blocks are all there is marked: its blocks stay."""
    with connect(lake) as conn:
        versions = history(conn, 4)
        settle(conn)
    kept, freed = versions[1], versions[2]
    with connect(lake) as reader:
        leased: merkle.Database | None = None
        if how == "opened before the trim":
            leased = reader.open_db("shop", version=1, lease=True)
        else:
            reader.refs.trim("shop", 2)  # a collection that trimmed, then stopped
            reader.leases.acquire_reader("shop", 1, kept.root, 60.0)
        want = dump(leased) if leased is not None else None
        needs = reachable(reader.store, [kept.root])
        first = collect_all(lake)
        assert first.reader_leases == 1
        assert missing_blocks(reader.store, freed.root), "version 2 is freed"
        reader.leases.acquire_reader("shop", 2, freed.root, 60.0)  # a killed reader's
        report = collect_all(lake)
        assert report.reader_leases == 1
        assert len(report.reader_leases_stale) == 1
        assert "'shop' v2" in report.reader_leases_stale[0]
        assert not needs & set(report.freed)
        assert missing_blocks(reader.store, kept.root) == []
        if leased is not None and want is not None:
            assert same_dump(dump(leased), want)


def test_a_half_walked_stale_lease_leaves_no_subtree_half_marked(lake: Lake) -> None:
    """A stale lease whose version is partly there (a collection killed mid-sweep) stops
    its walk at a missing node; the nodes met on the way must not count as marked for
    the roots marked after it. Here a tag shares a subtree with it that no head reaches."""
    with connect(lake) as conn:
        db = conn.create_db("shop").create_table("a", key="k").create_table("b", key="k")
        db = db.write("a", [{"k": k, "v": "x" * 40} for k in range(200)])
        v1 = db.write("b", [{"k": k, "v": 1} for k in range(200)]).commit()
        v2 = v1.write("b", [{"k": k, "v": 2} for k in range(200)]).commit()  # "a" shared
        head = v2.write("a", [{"k": k, "v": "y" * 40} for k in range(200)]).commit()
        conn.tag("shop", "keep", version=v2.version)
        conn.refs.trim("shop", head.version)
        only_v1 = reachable(conn.store, [v1.root]) - reachable(conn.store, [v2.root, head.root])
        only_v1.discard(str(v1.root))  # the root stays: the walk starts, then stops
        assert only_v1
        conn.store.delete_many([BLOCK_PREFIX + cid for cid in only_v1])
        conn.leases.acquire_reader("shop", v1.version, v1.root, 60.0)  # a stale lease
        assert reachable(conn.store, [v2.root]) - reachable(conn.store, [head.root])
        settle(conn)
        report = collect_all(lake)
        assert len(report.reader_leases_stale) == 1
        assert missing_blocks(conn.store, v2.root) == [], "the tagged version stays whole"
        assert same_dump(dump(conn.open_db("shop", tag="keep")), dump(v2))
        assert merkle.verify(conn).ok


@pytest.mark.parametrize("kept_by", ["the journal", "a tag"])
def test_a_lease_of_a_kept_version_with_a_block_missing_still_stops_gc(
    lake: Lake, kept_by: str
) -> None:
    """Only a lease of a version no longer kept is skipped: beside a stale lease, a lease
    of a version the journal (or a tag) still keeps whose block is lost is damage."""
    with connect(lake) as conn:
        versions = history(conn, 3)
        settle(conn)
        collect_all(lake)
        conn.leases.acquire_reader("shop", 2, versions[2].root, 60.0)  # stale, first
        damaged = versions[-1].write("t", [{"k": 99, "v": 99}]).commit()
        head = damaged.write("t", [{"k": 98, "v": 98}]).commit()
        if kept_by == "a tag":
            conn.tag("shop", "keep", version=damaged.version)
            conn.refs.trim("shop", head.version)
        conn.leases.acquire_reader("shop", damaged.version, damaged.root, 60.0)
        lost = reachable(conn.store, [damaged.root]) - reachable(conn.store, [head.root])
        conn.store.delete(BLOCK_PREFIX + sorted(lost)[0])
        where = rf"reader lease \S+ on 'shop' version {damaged.version}\).*restore the block"
        with pytest.raises(ReachabilityError, match=where):
            collect_all(lake)


# -- keep_within on the storage's clock ------------------------------------------------

#: Version n committed AGES[n] ago: keep_within="1d" keeps versions 2 (current a day
#: ago), 3 and 4, whatever the collector's clock says.
AGES = [
    timedelta(days=10),
    timedelta(days=5),
    timedelta(days=2),
    timedelta(hours=1),
    timedelta(0),
]


def shifted(offset: float) -> type[datetime]:
    """``datetime`` whose ``now`` runs ``offset`` seconds off (the collector's clock)."""

    class Shifted(datetime):
        @classmethod
        def now(cls, tz: Any = None) -> Any:
            return datetime.now(tz) + timedelta(seconds=offset)

    return Shifted


@pytest.mark.parametrize("offset", [2 * DAY, -2 * DAY, 0.0], ids=["ahead", "behind", "agreed"])
def test_keep_within_counts_back_from_the_storage_clock(
    lake: Lake, offset: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = datetime.now(UTC)
    times = iter([now - age for age in AGES])
    with connect(lake) as conn:
        clock: Callable[[], datetime] = lambda: next(times)  # noqa: E731
        conn.refs = RefManager(conn.store, now=clock)
        versions = history(conn, 3)
        wants = {v.version: dump(v) for v in versions[2:]}
        settle(conn)
    assert [v.version for v in versions] == [0, 1, 2, 3, 4]
    monkeypatch.setattr(collect, "datetime", shifted(offset))
    with connect(lake) as collector:
        collector.leases = LeaseManager(collector.store, clock=lambda: time.time() + offset)
        report = merkle.gc(collector, keep_within="1d", grace="0s")
    monkeypatch.undo()
    assert report.databases["shop"].oldest_kept == 2
    with connect(lake) as conn:
        assert [e.version for e in conn.history("shop")] == [4, 3, 2]
        for version, want in wants.items():
            assert same_dump(dump(conn.open_db("shop", version=version)), want)
        with pytest.raises(NotFoundError, match="removed by retention"):
            conn.open_db("shop", version=1)
        assert missing_blocks(conn.store, versions[2].root) == []
        assert merkle.verify(conn).ok
