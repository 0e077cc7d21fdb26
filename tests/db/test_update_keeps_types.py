"""``update`` stores a field's new value in the field's own type, for every type.

A pending update is laid over its record with ``if_else``, which gives
``decimal32``, ``decimal64`` and a negative-scale ``decimal128`` back as another
decimal type: reading the updated record, and committing (which compares it
with the record before), failed with pyarrow's raw "Field type did not match
data type". ``upsert`` of the same value worked.
"""

from __future__ import annotations

import decimal
import uuid
from typing import Any

import pyarrow as pa
import pytest

import merkle

D = decimal.Decimal

#: name -> (type, first value, updated value)
KINDS: dict[str, tuple[pa.DataType, Any, Any]] = {
    "decimal32": (pa.decimal32(9, 2), D("1.25"), D("2.50")),
    "decimal64": (pa.decimal64(18, 3), D("1.250"), D("2.500")),
    "decimal128-negative-scale": (pa.decimal128(5, -2), D("1.23E+4"), D("4.56E+4")),
    "decimal256": (pa.decimal256(40, 2), D("1.25"), D("2.50")),
    "uuid": (pa.uuid(), uuid.UUID(int=1), uuid.UUID(int=2)),
}


def _column(kind: pa.DataType, values: list[Any]) -> pa.Array:
    if kind == pa.uuid():
        storage = pa.array([v.bytes for v in values], pa.binary(16))
        return pa.ExtensionArray.from_storage(kind, storage)
    return pa.array(values, kind)


@pytest.mark.parametrize("name", list(KINDS))
def test_an_update_keeps_the_field_type(name: str) -> None:
    kind, first, then = KINDS[name]
    schema = pa.schema([("k", pa.int64()), ("v", kind), ("w", pa.int64())])
    rows = pa.table({"k": [1, 2], "v": _column(kind, [first, first]), "w": [0, 0]}, schema=schema)
    with merkle.connect("memory://") as conn:
        db = conn.create_db("d").create_table("t", key="k", schema=schema)
        db = db.write("t", rows).commit()
        updated = db.update("t", {1: {"v": then}})
        want = pa.table(
            {"k": [1, 2], "v": _column(kind, [then, first]), "w": [0, 0]}, schema=schema
        )
        assert updated.to_arrow("t").equals(want)  # pending, uncommitted
        db = updated.commit()
        assert db.to_arrow("t").equals(want)  # pending, committed
        changes = db.diff(db.version - 1, table="t")["t"].records()
        assert [c["change"] for c in changes] == ["update"]
        db = db.compact("t").commit()
        assert db.to_arrow("t").equals(want)  # merged into the tablets
