"""Merge keeps every field the merged records carry (three-way merge of schemas).

The first case is the example CI's hypothesis run found: both sides wrote
key 0 of a schema-free table, theirs with a field ours never had; with
``resolve="theirs"`` the merged record lost that field, because the rows
were taken into our table without its schema learning the field.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest

import merkle
from merkle.errors import MergeConflictError


@pytest.fixture
def conn() -> Iterator[merkle.Connection]:
    with merkle.connect("memory://") as c:
        yield c


def _fork(conn: merkle.Connection, **table: Any) -> tuple[merkle.Database, merkle.Database]:
    main = conn.create_db("main").create_table("a", key="k", **table).commit()
    return main, conn.create_db("dev", root=main)


def _rows(db: merkle.Database) -> list[dict[str, Any]]:
    return sorted(db.scan("a"), key=lambda r: r["k"])


@pytest.mark.parametrize("resolve", ["theirs", "ours", "fail"])
def test_a_conflict_taken_from_theirs_keeps_their_new_field(
    conn: merkle.Connection, resolve: str
) -> None:
    main, dev = _fork(conn, schema_free=True)
    main.write("a", [{"k": 0, "w": 0}]).commit()
    dev.write("a", [{"k": 0, "v": 0, "w": 0}]).commit()
    if resolve == "fail":
        with pytest.raises(MergeConflictError):
            conn.merge("dev", "main", resolve=resolve)
        return
    merged = conn.merge("dev", "main", resolve=resolve)
    want = {"k": 0, "v": 0, "w": 0} if resolve == "theirs" else {"k": 0, "w": 0}
    assert _rows(merged) == [want]


def test_rows_taken_from_theirs_keep_fields_ours_never_had(conn: merkle.Connection) -> None:
    main, dev = _fork(conn)  # typed: new fields get inferred types
    main.write("a", [{"k": 1, "w": 1}]).commit()
    dev.write("a", [{"k": 2, "v": "two", "w": 2}]).commit()
    merged = conn.merge("dev", "main")
    assert _rows(merged) == [{"k": 1, "w": 1}, {"k": 2, "v": "two", "w": 2}]
    assert merged._table("a").schema.field("v").type == pa.string()


def test_a_field_typed_differently_on_each_side_is_a_table_conflict(
    conn: merkle.Connection,
) -> None:
    main, dev = _fork(conn)
    main.write("a", [{"k": 1, "v": 1}]).commit()
    dev.write("a", [{"k": 2, "v": "two"}]).commit()
    with pytest.raises(
        MergeConflictError, match=r"field 'v' changed on both sides \(int64 and string\)"
    ) as raised:
        conn.merge("dev", "main")
    # The way out it names says what it costs: theirs drops our row 1 below.
    assert "taking that side's whole table" in str(raised.value)
    assert _rows(conn.open_db("main")) == [{"k": 1, "v": 1}]  # nothing committed
    assert _rows(conn.merge("dev", "main", resolve="theirs")) == [{"k": 2, "v": "two"}]


def test_their_rows_are_widened_to_a_type_ours_widened(conn: merkle.Connection) -> None:
    schema = pa.schema([("k", pa.int64()), ("v", pa.int32())])
    main, dev = _fork(conn, schema=schema)
    main.alter_schema("a", widen={"v": pa.int64()}).write("a", [{"k": 1, "v": 2**40}]).commit()
    dev.write("a", [{"k": 2, "v": 7}]).commit()
    merged = conn.merge("dev", "main")
    assert merged._table("a").schema.field("v").type == pa.int64()
    assert _rows(merged) == [{"k": 1, "v": 2**40}, {"k": 2, "v": 7}]
    assert merged.to_arrow("a").column("v").type == pa.int64()


def test_a_field_dropped_on_one_side_and_written_on_the_other_is_a_conflict(
    conn: merkle.Connection,
) -> None:
    main, dev = _fork(conn)
    main = main.write("a", [{"k": 1, "v": 1}]).commit()
    dev = conn.create_db("dev2", root=main)
    main.write("a", [{"k": 2, "v": 2}]).commit()
    dev.alter_schema("a", drop=["v"]).commit()
    with pytest.raises(MergeConflictError, match="dropped or renamed on their side"):
        conn.merge("dev2", "main")
