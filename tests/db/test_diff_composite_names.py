"""A diff's Arrow form and a merge's conflicts name a composite key's fields as the table
does (before: a struct of fields named "0" and "1", while ``records()`` gave the real
names)."""

from __future__ import annotations

import pytest

import merkle
from merkle.errors import MergeConflictError


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


def test_a_composite_key_keeps_its_field_names_in_merge_conflicts() -> None:
    conn = merkle.connect("memory://")
    base = conn.create_db("s").create_table("t", key=["a", "b"])
    base = base.write("t", [{"a": 1, "b": "x", "v": 1}]).commit()
    other = conn.create_db("o", root=base)
    base.write("t", [{"a": 1, "b": "x", "v": 2}]).commit()
    other.write("t", [{"a": 1, "b": "x", "v": 3}]).commit()
    with pytest.raises(MergeConflictError) as caught:
        conn.merge("o", "s")
    conflicts = caught.value.conflicts["t"]
    assert conflicts.column("key").to_pylist() == [{"a": 1, "b": "x"}]
    assert conflicts.column("ours").to_pylist() == [{"v": 2}]
