"""merkle.sync: push and pull between lakes, on every backend as the destination."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aging import settle
from conftest import Lake, make_lake
from hypothesis import HealthCheck, given, settings

import merkle
from merkle.blocks.cid import CID, DAG_CBOR
from merkle.errors import NotFoundError, UsageError
from merkle.transfer import SyncDivergedError, copy_dag

from .counting import CountingStore
from .history import HISTORY, apply, state


@pytest.fixture
def src() -> Iterator[merkle.Connection]:
    with merkle.connect("memory://") as conn:
        yield conn


@pytest.fixture
def dst(lake: Lake) -> Iterator[merkle.Connection]:
    with merkle.connect(lake.uri, **lake.options) as conn:
        yield conn


def _shop(conn: merkle.Connection, rows: int = 3000) -> merkle.Database:
    db = conn.create_db("shop", metadata={"owner": "ops"})
    db = db.create_table("orders", key="id", tablet_size_limit=200, branching_factor=4)
    db = db.write("orders", [{"id": i, "amount": i * 1.5, "sku": f"s{i % 7}"} for i in range(rows)])
    return db.compact().commit(message="load", author="ann")


def _verified(conn: merkle.Connection, name: str) -> None:
    report = merkle.verify(conn, name)
    assert report.ok, report.summary()


def test_push_copies_every_version_and_the_destination_verifies(
    src: merkle.Connection, dst: merkle.Connection
) -> None:
    db = _shop(src)
    db = db.write("orders", [{"id": 5, "amount": -1.0}]).commit(message="fix")
    report = merkle.sync(src, dst, "shop")
    assert report.source_versions == [0, 1, 2]
    assert [e.version for e in dst.history("shop")] == [2, 1, 0]
    head = dst.open_db("shop")
    assert head.root == db.root
    assert list(head.scan("orders")) == list(db.scan("orders"))
    entry = dst.history("shop")[0]
    assert (entry.message, entry.author) == ("fix", None)
    assert entry.meta["synced_from"] == {
        "lake": src.uri,
        "db": "shop",
        "version": 2,
        "root": db.root,
    }
    _verified(dst, "shop")


def test_a_second_push_of_the_same_version_copies_nothing(
    src: merkle.Connection, lake: Lake
) -> None:
    _shop(src)
    with merkle.connect(lake.uri, **lake.options) as first:
        merkle.sync(src, first, "shop")
    counting = CountingStore(merkle.connect(lake.uri, **lake.options).store)
    with merkle.Connection(counting) as dst:
        report = merkle.sync(src, dst, "shop")
        assert report.up_to_date
        assert counting.block_writes == 0
        assert counting.block_reads == 0


def test_push_of_one_version_under_another_name(
    src: merkle.Connection, dst: merkle.Connection
) -> None:
    db = _shop(src)
    db.write("orders", [{"id": 1, "amount": 0.0}]).commit()
    report = merkle.sync(src, dst, "shop", version=1, as_name="shop-copy")
    assert report.source_versions == [1]
    copy = dst.open_db("shop-copy")
    assert copy.version == 0
    assert copy.root == db.root
    assert dst.list_dbs() == ["shop-copy"]


def test_a_destination_that_diverged_is_refused_and_left_alone(
    src: merkle.Connection, dst: merkle.Connection
) -> None:
    db = _shop(src)
    merkle.sync(src, dst, "shop")
    theirs = dst.open_db("shop").write("orders", [{"id": 1, "amount": 9.0}]).commit()
    db.write("orders", [{"id": 2, "amount": 9.0}]).commit()
    with pytest.raises(SyncDivergedError, match="diverged"):
        merkle.sync(src, dst, "shop")
    assert dst.open_db("shop").root == theirs.root
    # Pulling the other way is refused as well: the source has a version the other lacks.
    with pytest.raises(SyncDivergedError):
        merkle.sync(dst, src, "shop")


def test_fast_forward_sends_only_newer_versions(
    src: merkle.Connection, dst: merkle.Connection
) -> None:
    db = _shop(src)
    merkle.sync(src, dst, "shop")
    db = db.write("orders", [{"id": 1, "amount": 2.0}]).commit()
    db = db.delete("orders", [3]).commit()
    report = merkle.sync(src, dst, "shop")
    assert report.source_versions == [2, 3]
    assert dst.open_db("shop").root == db.root
    _verified(dst, "shop")


def test_pull_round_trip_and_errors(src: merkle.Connection, dst: merkle.Connection) -> None:
    with pytest.raises(NotFoundError):
        merkle.sync(src, dst, "nothing")
    with pytest.raises(UsageError):
        merkle.sync(src, src, "shop")
    db = _shop(src)
    merkle.sync(src, dst, "shop")
    grown = dst.open_db("shop").write("orders", [{"id": 10**6}]).commit()
    merkle.sync(dst, src, "shop")  # pull back: a fast-forward of the source
    assert src.open_db("shop").root == grown.root
    assert db.version < src.open_db("shop").version


def test_resume_after_a_partial_copy_whose_children_a_collection_deleted(
    src: merkle.Connection, dst: merkle.Connection
) -> None:
    """A node stored by a dead copy does not prove its subtree is there: the copy descends."""
    db = _shop(src)
    root = CID.parse(db.root)

    class StopError(Exception):
        pass

    written = 0

    def stop_after_some(n: int) -> None:
        nonlocal written
        written += n
        if written >= 3:
            raise StopError

    with dst.writer_lease("shop") as ticket, pytest.raises(StopError):
        copy_dag(
            src.blocks,
            dst.blocks,
            [root],
            [],
            refresh_before=ticket.lease.start,
            on_write=stop_after_some,
        )
    # The leaves went first; now store every node (as a later partial run might) and
    # delete some leaves, as a collection would delete unreferenced old blocks.
    nodes = []
    leaves = []
    for cid, _info in src.blocks.list():
        (nodes if cid.codec == DAG_CBOR else leaves).append(cid)
    dst.blocks.put_hashed([(c, src.blocks.get(c)) for c in nodes], refresh_before=None)
    present = [c for c in leaves if dst.blocks.has(c)]
    assert present, "the partial copy wrote some leaves"
    dst.blocks.delete_many(present[:2])
    merkle.sync(src, dst, "shop")
    _verified(dst, "shop")
    assert list(dst.open_db("shop").scan("orders")) == list(db.scan("orders"))


def test_a_version_with_a_dropped_past_sends_only_its_current_life(
    src: merkle.Connection, dst: merkle.Connection
) -> None:
    _shop(src)
    src.drop_db("shop")
    with pytest.raises(NotFoundError, match="dropped"):
        merkle.sync(src, dst, "shop")
    again = src.create_db("shop").create_table("t", key="k").write("t", [{"k": 1}]).commit()
    report = merkle.sync(src, dst, "shop")
    assert report.source_versions == [3, 4]
    assert dst.open_db("shop").root == again.root


@settings(deadline=None, max_examples=25, suppress_health_check=[HealthCheck.too_slow])
@given(first=HISTORY, second=HISTORY)
def test_sync_model_destination_equals_source_and_verifies(
    first: list[Any], second: list[Any]
) -> None:
    with merkle.connect("memory://") as a, merkle.connect("memory://") as b:
        model: dict[str, Any] = {}
        db = apply(a.create_db("m"), model, [("create", "a", None), *first])
        merkle.sync(a, b, "m")
        assert state(b.open_db("m")) == model
        db = apply(db, model, second)
        merkle.sync(a, b, "m")
        assert state(b.open_db("m")) == model
        assert b.open_db("m").root == db.root
        report = merkle.verify(b)
        assert report.ok


@pytest.mark.s3
def test_push_from_files_to_s3_and_pull_back(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    s3 = make_lake("s3", tmp_path, request)
    with (
        merkle.connect(tmp_path / "local") as local,
        merkle.connect(s3.uri, **s3.options) as remote,
        merkle.connect(tmp_path / "other") as other,
    ):
        db = _shop(local)
        merkle.sync(local, remote, "shop")
        merkle.sync(remote, other, "shop")
        assert other.open_db("shop").root == db.root
        _verified(other, "shop")


def test_a_collection_on_the_source_during_a_push_keeps_what_the_push_reads(
    src: merkle.Connection, dst: merkle.Connection
) -> None:
    """The push holds a reader lease on the version it copies: GC keeps it even when
    retention trims that version meanwhile."""
    db = _shop(src)
    sent = db.root
    collected: list[merkle.gc.GCReport] = []

    def collect_once(_n: int) -> None:
        if collected:
            return
        newer = src.open_db("shop")
        for i in range(3):
            newer = (
                newer.write(
                    "orders", [{"id": j, "amount": -1.0} for j in range(i * 500, i * 500 + 500)]
                )
                .compact()
                .commit()
            )
        settle(src)  # every block older than the grace, on any clock granularity
        collected.append(merkle.gc(src, keep_versions=1, grace="0s"))

    merkle.sync(src, dst, "shop", version=db.version, progress=collect_once)
    assert collected
    assert collected[0].blocks_freed > 0  # the collection did run and free things
    assert dst.open_db("shop").root == sent
    _verified(dst, "shop")


def test_a_collection_on_the_destination_during_a_push_deletes_nothing_it_needs(
    src: merkle.Connection, dst: merkle.Connection
) -> None:
    """The push holds a writer lease at the destination: a collection there does not
    sweep under it (and, with the lease gone, the committed version is a root)."""
    db = _shop(src)
    reports: list[merkle.gc.GCReport] = []

    def collect_once(_n: int) -> None:
        if not reports:
            with merkle.connect(dst.uri, **_options(dst)) as other:
                reports.append(merkle.gc(other, keep_versions=1, grace="0s", writer_wait=0.0))

    merkle.sync(src, dst, "shop", progress=collect_once)
    assert reports
    assert reports[0].blocks_freed == 0
    _verified(dst, "shop")
    merkle.gc(dst, keep_versions=1, grace="0s")
    assert list(dst.open_db("shop").scan("orders")) == list(db.scan("orders"))
    _verified(dst, "shop")


def _options(conn: merkle.Connection) -> dict[str, Any]:
    return conn.store.reopen_options()
