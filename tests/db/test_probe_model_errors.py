"""Probe fixes: upserts of extension-type fields, and the composite key's column name.

- ``upsert`` of records into a table with a ``pa.uuid()``, ``pa.json_()`` or
  ``pa.fixed_shape_tensor(...)`` field (or a nested type holding one), some rows giving
  the field and others not, raised a raw ``ArrowNotImplementedError`` (``if_else`` has
  no kernel for extension types);
- ``create_table`` accepted a field named as a composite key's column (``"(g,s)"`` for
  the key ``["g", "s"]``), after which every read and write failed; ``alter_schema(
  rename=...)`` to that name raised a bare ``KeyError`` or left the clash committed.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest

import merkle
from merkle.errors import SchemaError

U = uuid.UUID


@pytest.fixture
def mem() -> Iterator[merkle.Connection]:
    conn = merkle.connect("memory://")
    yield conn
    conn.close()


def _schema(kind: pa.DataType) -> pa.Schema:
    return pa.schema([pa.field("k", pa.int64(), nullable=False), ("o", pa.int64()), ("u", kind)])


def _uuids(*ints: int) -> pa.Array:
    storage = pa.array([U(int=i).bytes for i in ints], pa.binary(16))
    return pa.ExtensionArray.from_storage(pa.uuid(), storage)


# -- 1. upsert of records, some naming an extension-type field -------------------------


@pytest.mark.parametrize(
    ("kind", "old", "new"),
    [
        (pa.uuid(), U(int=1), U(int=9)),
        (pa.json_(), '{"a": 1}', "[2]"),
        (pa.fixed_shape_tensor(pa.int32(), (2, 2)), [1, 2, 3, 4], [5, 6, 7, 8]),
    ],
    ids=["uuid", "json", "fixed_shape_tensor"],
)
def test_upsert_of_records_some_naming_an_extension_field(
    mem: merkle.Connection, kind: pa.DataType, old: Any, new: Any
) -> None:
    db = mem.create_db("d").create_table("t", key="k", schema=_schema(kind))
    db = db.write("t", [{"k": 1, "o": 1, "u": old}, {"k": 2, "o": 2, "u": old}]).commit()
    db = db.upsert("t", [{"k": 1, "u": new}, {"k": 2, "o": 20}, {"k": 3, "u": new}])
    want = [
        {"k": 1, "o": 1, "u": new},
        {"k": 2, "o": 20, "u": old},
        {"k": 3, "o": None, "u": new},
    ]
    assert db.to_arrow("t").to_pylist() == want
    committed = db.commit().to_arrow("t")
    assert committed.to_pylist() == want
    assert committed.schema.field("u").type == kind


@pytest.mark.parametrize(
    "column",
    [
        pa.ListArray.from_arrays(pa.array([0, 1, 3], pa.int32()), _uuids(1, 2, 3)),
        pa.StructArray.from_arrays([_uuids(1, 2), pa.array([1, 2])], names=["x", "n"]),
    ],
    ids=["list_of_uuid", "struct_with_uuid"],
)
def test_upsert_of_records_some_naming_a_nested_extension_field(
    mem: merkle.Connection, column: pa.Array
) -> None:
    db = mem.create_db("d").create_table("t", key="k", schema=_schema(column.type))
    db = db.write("t", pa.table({"k": [1, 2], "o": [1, 2], "u": column})).commit()
    kept = column.to_pylist()[1]
    db = db.upsert("t", [{"k": 1, "u": None}, {"k": 2, "o": 20}])
    want = [{"k": 1, "o": 1, "u": None}, {"k": 2, "o": 20, "u": kept}]
    assert db.to_arrow("t").to_pylist() == want
    committed = db.commit().to_arrow("t")
    assert committed.to_pylist() == want
    assert committed.schema.field("u").type == column.type


# -- 2. the composite key's column name is no field's ------------------------------------

RESERVED = re.escape("'(g,s)' is reserved for the composite key ['g', 's']")


@pytest.mark.parametrize(
    "how",
    [
        {"schema": pa.schema([("g", pa.string()), ("s", pa.int64()), ("(g,s)", pa.int64())])},
        {"schema_free": ["(g,s)"]},
        {"schema": pa.schema([("g", pa.string()), ("s", pa.int64())]), "schema_free": ["(g,s)"]},
    ],
    ids=["declared", "schema_free", "declared_schema_free"],
)
def test_create_table_refuses_a_field_named_as_the_composite_key(
    mem: merkle.Connection, how: dict[str, Any]
) -> None:
    db = mem.create_db("d")
    with pytest.raises(SchemaError, match=RESERVED):
        db.create_table("t", key=["g", "s"], **how)
    assert not db.has_table("t")


@pytest.mark.parametrize("written", [True, False], ids=["written", "unwritten"])
def test_alter_schema_refuses_a_rename_to_the_composite_key_name(
    mem: merkle.Connection, written: bool
) -> None:
    schema = pa.schema([("g", pa.string()), ("s", pa.int64()), ("v", pa.int64())])
    db = mem.create_db("d").create_table("t", key=["g", "s"], schema=schema)
    if written:
        db = db.write("t", [{"g": "a", "s": 1, "v": 1}])
    db = db.commit()
    with pytest.raises(SchemaError, match=RESERVED) as renamed:
        db.alter_schema("t", rename={"v": "(g,s)"})
    with pytest.raises(SchemaError) as added:
        db.alter_schema("t", add=[("(g,s)", pa.int64())])
    assert str(renamed.value) == str(added.value)  # one rule, one message
    assert db.describe_table("t")["schema"].names == ["g", "s", "v"]
    assert db.to_arrow("t").num_rows == (1 if written else 0)
