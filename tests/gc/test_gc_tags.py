"""Tags and garbage collection: a tagged version is never trimmed and never collected."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from conftest import Lake
from gc_helpers import backdate, settle

import merkle
from merkle.blocks.store import BLOCK_PREFIX
from merkle.errors import NotFoundError
from merkle.gc import load_reports


@pytest.fixture
def conn(lake: Lake) -> Iterator[merkle.Connection]:
    with merkle.connect(lake.uri, **lake.options) as opened:
        yield opened


def _versions(conn: merkle.Connection) -> merkle.Database:
    db = conn.create_db("shop").create_table("t", key="k", tablet_size_limit=4)
    for i in range(6):
        db = db.write("t", [{"k": j, "v": i} for j in range(i * 3, i * 3 + 6)]).compact().commit()
    settle(conn)  # the collections here mean every unreachable block (S3: whole seconds)
    return db


def test_gc_with_keep_versions_1_keeps_a_tagged_version_readable_and_reports_it(
    conn: merkle.Connection,
) -> None:
    _versions(conn)
    tagged = conn.open_db("shop", version=3)
    expected = list(tagged.scan("t"))
    conn.tag("shop", "release-1", version=3)
    report = merkle.gc(conn, keep_versions=1, grace="0s")
    assert report.blocks_freed > 0  # the untagged old versions went
    assert report.tags == [{"db": "shop", "tag": "release-1", "version": 3, "root": tagged.root}]
    assert "kept by tags: shop v3 (release-1)" in report.summary()
    assert list(conn.open_db("shop", tag="release-1").scan("t")) == expected
    assert list(conn.open_db("shop", version=3).scan("t")) == expected
    with pytest.raises(NotFoundError, match="removed by retention"):
        conn.open_db("shop", version=2)
    # history lists it below the journal's versions (trimmed from the journal, kept by the tag)
    head = conn.open_db("shop")
    assert [e.version for e in conn.history("shop")] == [head.version, 3]
    assert conn.history("shop")[-1].root == tagged.root
    assert [e.version for e in conn.history("shop", limit=1)] == [head.version]
    assert merkle.verify(conn).ok
    # Again: the tag still holds, whatever the retention.
    merkle.gc(conn, keep_versions=1, grace="0s")
    assert list(conn.open_db("shop", version=3).scan("t")) == expected
    stored = load_reports(conn.store)[-1]
    assert [(t["tag"], t["version"]) for t in stored["tags"]] == [("release-1", 3)]


def test_deleting_the_tag_lets_the_next_gc_remove_the_version(conn: merkle.Connection) -> None:
    db = _versions(conn)
    conn.tag("shop", "old", version=1)
    merkle.gc(conn, keep_versions=1, grace="0s")
    assert conn.open_db("shop", version=1).version == 1
    conn.delete_tag("shop", "old")
    with pytest.raises(NotFoundError, match="removed by retention"):
        conn.open_db("shop", version=1)
    report = merkle.gc(conn, keep_versions=1, grace="0s")
    assert report.blocks_freed > 0
    assert report.tags == []
    assert list(conn.open_db("shop").scan("t")) == list(db.scan("t"))
    assert merkle.verify(conn).ok


def test_a_tag_keeps_a_dropped_database_version(conn: merkle.Connection) -> None:
    _versions(conn)
    conn.tag("shop", "keep", version=5)
    expected = list(conn.open_db("shop", version=5).scan("t"))
    conn.drop_db("shop")
    # S3 keeps timestamps in whole seconds: a block written in the second the collection
    # reads the storage's clock counts as new, whatever the grace (so 2 runs in 8 failed
    # on a quiet machine). Every block older than the grace, the test says what it means.
    blocks = [info.key for info in conn.store.list(BLOCK_PREFIX)]
    backdate(conn.store, blocks, time.time() - 7200)
    merkle.gc(conn, keep_versions=1, grace="0s")
    assert list(conn.open_db("shop", tag="keep").scan("t")) == expected
    report = merkle.verify(conn)
    assert report.ok
    assert report.unreachable_blocks == 0  # what the tag keeps is reachable, not garbage


def test_a_tag_of_a_version_collected_before_its_lease_is_refused(
    lake: Lake, conn: merkle.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``tag`` resolves the version, then takes its writer lease: a collection that
    trims the version and frees its blocks in between must make the tag fail. The
    check after writing the tag found the new tag itself keeping the version, so
    the tag was made for freed blocks and every later collection stopped on it."""
    _versions(conn)
    old = 2
    other = merkle.connect(lake.uri, **lake.options)
    real = conn.writer_lease

    def collect_first(db: str | None = None) -> object:
        monkeypatch.setattr(conn, "writer_lease", real)
        other.open_db("shop").write("t", [{"k": 100}]).commit()
        settle(other)  # every block older than the grace (S3: whole-second timestamps)
        assert merkle.gc(other, keep_versions=1, grace="0s").blocks_freed > 0
        return real(db)

    monkeypatch.setattr(conn, "writer_lease", collect_first)
    with pytest.raises(NotFoundError, match="removed by retention while it was being tagged"):
        conn.tag("shop", "late", version=old)
    assert conn.tags("shop") == []
    other.close()
    # Nothing was left for the next collection to trip on.
    merkle.gc(conn, keep_versions=1, grace="0s")
    assert merkle.verify(conn).ok


def test_a_tag_of_a_trimmed_version_another_tag_keeps_is_made(conn: merkle.Connection) -> None:
    _versions(conn)
    conn.tag("shop", "first", version=2)
    merkle.gc(conn, keep_versions=1, grace="0s")
    made = conn.tag("shop", "second", version=2)
    assert [t.name for t in conn.tags("shop")] == ["first", "second"]
    assert made.root == conn.open_db("shop", tag="first").root
