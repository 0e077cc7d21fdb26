"""Two findings of a CLI probe that live in the library (eighteenth session): each test
failed before its fix.

A key field declared schema-free (``schema_free=["id"]``, or the schema giving it as
``merkle.free_field``) was accepted, and every write and lookup of the table failed
(its key codec became ``bytes``); ``alter_schema`` that changed nothing (a nullable
field made nullable) still made a version.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

import merkle
from merkle.errors import SchemaError


def _db() -> merkle.Database:
    return merkle.connect("memory://").create_db("d")


@pytest.mark.parametrize(
    "kwargs",
    [
        {"key": "id", "schema_free": ["id"]},
        {"key": ["a", "b"], "schema_free": ["b", "x"]},
        {"key": "id", "schema": pa.schema([merkle.free_field("id")])},
    ],
)
def test_a_key_field_cannot_be_schema_free(kwargs: dict[str, Any]) -> None:
    db = _db()
    with pytest.raises(SchemaError, match=r"key field .* cannot be schema-free"):
        db.create_table("t", **kwargs)
    assert not db.has_table("t")


def test_schema_free_true_leaves_the_key_typed() -> None:
    db = _db().create_table("t", key="id", schema_free=True)
    db = db.write("t", [{"id": 1, "x": {"any": [1, "a"]}}]).commit()
    assert db.get_records("t", [1]) == {1: {"id": 1, "x": {"any": [1, "a"]}}}


def test_an_alter_schema_that_changes_nothing_makes_no_version() -> None:
    schema = pa.schema([("id", pa.int64()), pa.field("a", pa.int32(), nullable=False)])
    db = _db().create_table("t", key="id", schema=schema).commit()
    db = db.alter_schema("t", nullable=["a"]).commit()
    again = db.alter_schema("t", nullable=["a"]).commit()
    assert again.version == db.version
    assert len(again._conn.history("d")) == db.version + 1
