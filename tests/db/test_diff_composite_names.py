"""A diff's Arrow form names a composite key's fields as the table does (before: a
struct of fields named "0" and "1", while ``records()`` gave the real names)."""

from __future__ import annotations

import merkle


def test_a_composite_key_keeps_its_field_names_in_the_arrow_diff() -> None:
    conn = merkle.connect("memory://")
    db = conn.create_db("s").create_table("t", key=["a", "b"])
    db = db.write("t", [{"a": 1, "b": "x", "v": 1}]).commit()
    new = db.write("t", [{"a": 1, "b": "x", "v": 2}, {"a": 2, "b": "y", "v": 3}]).commit()
    changes = new.diff(db.version).tables["t"]
    table = changes.to_arrow()
    assert table.schema.field("key").type.names == ["a", "b"]
    assert table.column("key").to_pylist() == [{"a": 1, "b": "x"}, {"a": 2, "b": "y"}]
    assert [record["key"] for record in changes.records()] == [(1, "x"), (2, "y")]
