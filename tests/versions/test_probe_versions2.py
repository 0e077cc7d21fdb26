"""Merge bases, merge resolvers and schemas, tag-kept versions and push after merge: probe fixes.

An adversarial probe found:

* a criss-cross merge (each side merged the other) took the newest of its two
  merge bases, so a change made after it (a value set back) was lost silently;
* a callable resolver on a composite-key table saw the internal ``(g,n)`` field
  instead of ``g`` and ``n``, and any record it returned made the merge fail;
* a version only a tag keeps (retention trimmed its journal slot) opened but
  could not be cloned or synced;
* "pull, merge, push" could not finish: the merge needed ``base=`` and the push
  was still refused as diverged, with advice that looped;
* ``commit_counts`` (``merkle db log``) showed nothing when the parent was kept
  by a tag only;
* after widening int32 -> float64, every record diffed as updated and a merge
  against another field's change found row conflicts;
* a field renamed to two names (or dropped on one side and renamed on the
  other) merged into both names, or came back under the new one.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import merkle
from merkle.db.ancestry import Lineage
from merkle.db.diff import commit_counts
from merkle.errors import MergeConflictError, NotFoundError
from merkle.transfer import SyncDivergedError


@pytest.fixture
def conn() -> Iterator[merkle.Connection]:
    with merkle.connect(f"memory://probe-{uuid.uuid4().hex}") as c:
        yield c


@pytest.fixture
def lakes(tmp_path: Path) -> Iterator[tuple[merkle.Connection, merkle.Connection]]:
    with merkle.connect(str(tmp_path / "a")) as a, merkle.connect(str(tmp_path / "b")) as b:
        yield a, b


def _rows(db: merkle.Database, table: str = "t") -> dict[Any, Any]:
    return {r["k"]: r.get("v") for r in db.scan(table)}


# -- criss-cross merges ----------------------------------------------------------------


def _criss_cross(
    conn: merkle.Connection, a_k1: int, b_k1: int
) -> tuple[merkle.Database, merkle.Database]:
    """A and B (a clone) each change a key, then each merges the other: the two merge
    bases of their heads are A1 and B1. Returns (A1, B1)."""
    db = conn.create_db("A").create_table("t", key="k")
    db = db.write("t", [{"k": 1, "v": 0}, {"k": 2, "v": 0}]).commit()
    conn.create_db("B", root=db)
    a1 = conn.open_db("A").write("t", [{"k": 1, "v": a_k1}]).commit()
    b1 = conn.open_db("B").write("t", [{"k": 2, "v": 2}, {"k": 1, "v": b_k1}]).commit()
    conn.merge(b1, "A", resolve="ours")
    conn.merge(a1, "B", resolve="ours")
    return a1, b1


def test_a_criss_cross_has_both_merge_bases(conn: merkle.Connection) -> None:
    a1, b1 = _criss_cross(conn, 1, 0)
    bases = Lineage(conn).merge_bases([conn.open_db("A").entry], [conn.open_db("B").entry])
    assert sorted((e.db, e.version) for e in bases) == [("A", a1.version), ("B", b1.version)]


def test_a_change_after_a_criss_cross_merge_is_kept(conn: merkle.Connection) -> None:
    _criss_cross(conn, 1, 0)
    conn.open_db("B").write("t", [{"k": 1, "v": 0}]).commit()  # B sets k1 back
    head = conn.merge("B", "A")  # A left k1 alone since the criss-cross: B's change wins
    assert _rows(head) == {1: 0, 2: 2}


def test_a_criss_cross_whose_bases_conflict_asks_for_base(conn: merkle.Connection) -> None:
    a1, b1 = _criss_cross(conn, 1, 5)  # A1 and B1 set k1 differently
    conn.open_db("B").write("t", [{"k": 3, "v": 3}]).commit()
    before = conn.open_db("A").version
    with pytest.raises(MergeConflictError) as raised:
        conn.merge("B", "A")
    text = str(raised.value)
    assert "several best merge bases" in text
    assert "base=" in text
    assert f"'A' version {a1.version}" in text
    assert f"'B' version {b1.version}" in text
    assert conn.open_db("A").version == before  # nothing committed
    # resolve= settles the merge's own conflicts, not those between its bases: the
    # message must not send the user to it (it did, quoting the inner merge's advice).
    with pytest.raises(MergeConflictError) as raised:
        conn.merge("B", "A", resolve="ours")
    assert "resolve them with" not in str(raised.value)
    assert "which resolve= does not settle; pass base=" in str(raised.value)
    head = conn.merge("B", "A", base=a1.version)  # a base named by hand merges
    assert _rows(head)[3] == 3


# -- callable resolvers on composite keys ------------------------------------------------


def test_a_resolver_sees_and_returns_composite_key_records_as_scan_shows_them(
    conn: merkle.Connection,
) -> None:
    db = conn.create_db("s").create_table("t", key=["g", "n"])
    db = db.write("t", [{"g": "a", "n": 1, "v": "base"}, {"g": "b", "n": 2, "v": "base"}]).commit()
    conn.create_db("d", root=db)
    conn.open_db("s").write(
        "t", [{"g": "a", "n": 1, "v": "ours"}, {"g": "b", "n": 2, "v": "o"}]
    ).commit()
    conn.open_db("d").write(
        "t", [{"g": "a", "n": 1, "v": "theirs"}, {"g": "b", "n": 2, "v": "t"}]
    ).commit()
    seen: list[dict[str, Any]] = []

    def resolve(conflict: dict[str, Any]) -> dict[str, Any] | None:
        seen.append(conflict)
        if conflict["key"] == ("b", 2):
            return None  # delete it
        return {"v": "picked"}  # the key fields may be left out

    head = conn.merge("d", "s", resolve=resolve)
    first = next(c for c in seen if c["key"] == ("a", 1))
    assert first["base"] == {"g": "a", "n": 1, "v": "base"}
    assert first["ours"] == {"g": "a", "n": 1, "v": "ours"}
    assert first["theirs"] == {"g": "a", "n": 1, "v": "theirs"}
    assert list(head.scan("t")) == [{"g": "a", "n": 1, "v": "picked"}]


# -- versions a tag keeps -----------------------------------------------------------------


def _tag_kept(conn: merkle.Connection) -> merkle.Database:
    """``s`` version 1 tagged ``rel1`` and trimmed from the journal by retention."""
    db = conn.create_db("s").create_table("t", key="k").write("t", [{"k": 1, "v": "rel"}]).commit()
    conn.tag("s", "rel1", version=db.version)
    for i in range(3):
        db = db.write("t", [{"k": 1, "v": str(i)}]).commit()
    merkle.gc(conn, keep_versions=1, grace=timedelta(0))
    with pytest.raises(NotFoundError):
        conn.refs.get("s", 1)
    return conn.open_db("s", tag="rel1")


def test_a_version_a_tag_keeps_can_be_cloned(lakes: tuple[merkle.Connection, ...]) -> None:
    conn = lakes[0]
    tagged = _tag_kept(conn)
    clone = conn.create_db("hotfix", root=tagged)
    assert _rows(clone) == {1: "rel"}
    assert clone.entry.forked_from == {"db": "s", "version": tagged.version}
    assert commit_counts(conn, clone.entry) is not None  # its source opens too


def test_a_version_a_tag_keeps_can_be_synced(lakes: tuple[merkle.Connection, ...]) -> None:
    src, dst = lakes
    tagged = _tag_kept(src)
    report = merkle.sync(src, dst, "s", version=tagged.version, as_name="s-rel1")
    assert report.source_versions == [tagged.version]
    assert _rows(dst.open_db("s-rel1")) == {1: "rel"}


def test_a_clone_of_a_version_whose_tag_is_gone_is_refused(
    lakes: tuple[merkle.Connection, ...],
) -> None:
    conn = lakes[0]
    tagged = _tag_kept(conn)
    conn.delete_tag("s", "rel1")  # nothing keeps version 1 now: its blocks may go
    with pytest.raises(NotFoundError, match="retention"):
        conn.create_db("hotfix", root=tagged)
    assert conn.refs.head("hotfix") is None


def test_log_counts_a_version_whose_parent_a_tag_keeps(conn: merkle.Connection) -> None:
    db = conn.create_db("s").create_table("t", key="k").write("t", [{"k": 1, "v": 1}]).commit()
    conn.tag("s", "keep", version=db.version)
    db.write("t", [{"k": 2, "v": 2}]).commit()
    merkle.gc(conn, keep_versions=1, grace=timedelta(0))
    counts = commit_counts(conn, conn.history("s")[0])
    assert counts is not None
    assert (counts.inserted, counts.updated, counts.deleted) == (1, 0, 0)


# -- pull, merge, push --------------------------------------------------------------------


def _diverged(lakes: tuple[merkle.Connection, ...]) -> tuple[merkle.Connection, merkle.Connection]:
    a, b = lakes
    a.create_db("shop").create_table("t", key="k").write(
        "t", [{"k": 1, "v": 0}, {"k": 2, "v": 0}]
    ).commit()
    merkle.sync(a, b, "shop")
    a.open_db("shop").write("t", [{"k": 1, "v": 10}]).commit()
    b.open_db("shop").write("t", [{"k": 2, "v": 20}]).commit()
    return a, b


def test_pull_merge_push_finishes(lakes: tuple[merkle.Connection, ...]) -> None:
    a, b = _diverged(lakes)
    with pytest.raises(SyncDivergedError, match=r"shop-origin.*merge that into 'shop'"):
        merkle.sync(b, a, "shop")
    merkle.sync(a, b, "shop", as_name="shop-origin")
    merged = b.merge("shop-origin", "shop")  # no base=: the synced copies share history
    report = merkle.sync(b, a, "shop")
    assert report.source_versions == [merged.version]  # only versions from the merge on
    assert _rows(a.open_db("shop")) == {1: 10, 2: 20}
    # And again: another round of changes on both lakes, pulled, merged and pushed. The
    # merge pulled back is b's own merge (synced_origin), so it is the base: b changing
    # k2 again is no conflict with the k2 a got from b.
    a.open_db("shop").write("t", [{"k": 3, "v": 3}]).commit()
    b.open_db("shop").write("t", [{"k": 4, "v": 4}, {"k": 2, "v": 30}]).commit()
    merkle.sync(a, b, "shop", as_name="shop-origin")
    b.merge("shop-origin", "shop")
    merkle.sync(b, a, "shop", version=b.open_db("shop").version)
    assert _rows(a.open_db("shop")) == {1: 10, 2: 30, 3: 3, 4: 4}
    assert merkle.sync(a, b, "shop").up_to_date


def test_a_push_is_refused_when_the_destination_moved_past_what_was_merged(
    lakes: tuple[merkle.Connection, ...],
) -> None:
    a, b = _diverged(lakes)
    merkle.sync(a, b, "shop", as_name="shop-origin")
    b.merge("shop-origin", "shop")
    a.open_db("shop").write("t", [{"k": 5, "v": 5}]).commit()  # not merged at b
    before = a.refs.head("shop")
    with pytest.raises(SyncDivergedError):
        merkle.sync(b, a, "shop")
    assert a.refs.head("shop") == before


# -- schemas ------------------------------------------------------------------------------


def _widened(conn: merkle.Connection, to: pa.DataType) -> merkle.Database:
    schema = pa.schema([("k", pa.int64()), ("a", pa.int32()), ("b", pa.string())])
    db = conn.create_db("main").create_table("t", key="k", schema=schema)
    db = db.write("t", [{"k": 1, "a": 1, "b": "x"}, {"k": 2, "a": 2, "b": "y"}]).commit()
    conn.create_db("dev", root=db)
    return conn.open_db("main").alter_schema("t", widen={"a": to}).commit()


@pytest.mark.parametrize("to", [pa.float64(), pa.int64()])
def test_a_widening_alone_changes_no_record(conn: merkle.Connection, to: pa.DataType) -> None:
    widened = _widened(conn, to)
    assert widened.diff(widened.version - 1).summary()["rows"]["t"]["updated"] == 0
    changed = widened.update("t", {1: {"a": 1.5 if to == pa.float64() else 7}}).commit()
    assert changed.diff(widened.version).summary()["rows"]["t"]["updated"] == 1


def test_a_widening_to_float_merges_with_a_change_of_another_field(
    conn: merkle.Connection,
) -> None:
    _widened(conn, pa.float64())
    conn.open_db("dev").update("t", {1: {"b": "changed"}}).commit()
    head = conn.merge("dev", "main")
    assert list(head.scan("t")) == [
        {"k": 1, "a": 1.0, "b": "changed"},
        {"k": 2, "a": 2.0, "b": "y"},
    ]


def _field_a(conn: merkle.Connection) -> None:
    schema = pa.schema([("k", pa.int64()), ("a", pa.int32())])
    db = conn.create_db("main").create_table("t", key="k", schema=schema)
    db = db.write("t", [{"k": 1, "a": 1}]).commit()
    conn.create_db("dev", root=db)


@pytest.mark.parametrize("main_drops", [False, True])
def test_a_field_gone_on_both_sides_into_other_schemas_is_a_table_conflict(
    conn: merkle.Connection, main_drops: bool
) -> None:
    _field_a(conn)
    main = conn.open_db("main")
    main = (
        main.alter_schema("t", drop=["a"])
        if main_drops
        else main.alter_schema("t", rename={"a": "b"})
    )
    main.commit()
    conn.open_db("dev").alter_schema("t", rename={"a": "c"}).write("t", [{"k": 3, "c": 3}]).commit()
    with pytest.raises(MergeConflictError) as raised:
        conn.merge("dev", "main")
    assert "field 'a' was dropped or renamed on both sides" in raised.value.table_conflicts["t"]
    head = conn.merge("dev", "main", resolve="ours")  # ours' whole table
    assert head.describe_table("t")["schema"].names == main.describe_table("t")["schema"].names


def test_a_field_dropped_on_both_sides_merges(conn: merkle.Connection) -> None:
    _field_a(conn)
    conn.open_db("main").alter_schema("t", drop=["a"]).write("t", [{"k": 2}]).commit()
    conn.open_db("dev").alter_schema("t", drop=["a"]).write("t", [{"k": 3}]).commit()
    head = conn.merge("dev", "main")
    assert head.describe_table("t")["schema"].names == ["k"]
    assert list(head.scan("t")) == [{"k": 1}, {"k": 2}, {"k": 3}]
