"""Row filters over tables with string/binary views or run-end encoded fields.

Arrow has no filter kernel for those types, and rows are filtered in the
user's types: ``to_batches(filter=...)`` and ``delete_where(expression)`` failed
on every such table, even with a predicate on the key only (types probe,
finding 14). They filter in the stored form and give the types back.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import merkle

KINDS = {
    "string-view": pa.array(["a", "b", None, "d"], pa.string_view()),
    "binary-view": pa.array([b"a", b"b", None, b"d"], pa.binary_view()),
    "run-end": pc.run_end_encode(pa.array(["a", "b", "b", "d"]), run_end_type=pa.int32()),
    "list-of-views": pa.array([["a"], [], None, ["d", "e"]], pa.list_(pa.string_view())),
}


def _table(conn: merkle.Connection, kind: str) -> tuple[merkle.Database, pa.Table]:
    rows = pa.table({"k": [1, 2, 3, 4], "v": KINDS[kind], "w": [10, 20, 30, 40]})
    db = conn.create_db("d").create_table("t", key="k", schema=rows.schema)
    return db.write("t", rows).commit(), rows


@pytest.mark.parametrize("kind", list(KINDS))
def test_to_batches_filters_a_table_with_views(kind: str) -> None:
    with merkle.connect("memory://") as conn:
        db, rows = _table(conn, kind)
        predicate = (pc.field("k") >= 2) & (pc.field("w") < 40)
        got = pa.Table.from_batches(list(db.to_batches("t", filter=predicate)))
        assert got.schema == rows.schema
        assert got.to_pylist() == rows.slice(1, 2).to_pylist()
        projected = db.to_batches("t", fields=["v"], filter=pc.field("w") == 40)
        assert pa.Table.from_batches(list(projected)).to_pylist() == [
            {"k": 4, "v": rows.column("v")[3].as_py()}
        ]


def test_a_filter_on_the_view_field_itself() -> None:
    with merkle.connect("memory://") as conn:
        db, _ = _table(conn, "string-view")
        got = pa.Table.from_batches(list(db.to_batches("t", filter=pc.field("v") == "b")))
        assert got.column("k").to_pylist() == [2]
        assert got.schema.field("v").type == pa.string_view()


@pytest.mark.parametrize("kind", list(KINDS))
def test_delete_where_on_a_table_with_views(kind: str) -> None:
    with merkle.connect("memory://") as conn:
        db, rows = _table(conn, kind)
        db = db.delete_where("t", pc.field("w") > 20).commit()
        assert db.to_arrow("t").equals(rows.slice(0, 2))
