"""A str or bytes written into a list field is refused, not split into its items.

pyarrow takes any sequence as a list: ``"blue"`` would be stored as
``["b", "l", "u", "e"]`` and ``b"\\x01\\xff"`` as ``[1, 255]`` without a word.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import merkle
from merkle.errors import SchemaError

SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("tags", pa.list_(pa.string())),
        ("codes", pa.list_(pa.int64())),
        ("floats", pa.list_(pa.float64())),
        ("flags", pa.list_(pa.bool_())),
        ("pair", pa.list_(pa.int64(), 2)),
        ("big", pa.large_list(pa.string())),
        ("view", pa.list_view(pa.string())),
        ("nested", pa.list_(pa.list_(pa.string()))),
        ("member", pa.struct([("m", pa.list_(pa.string()))])),
        ("mapped", pa.map_(pa.string(), pa.list_(pa.string()))),
    ]
)

BAD: list[tuple[str, Any]] = [
    ("tags", "blue"),
    ("tags", np.str_("blue")),
    ("tags", memoryview(b"ab")),
    ("codes", b"\x01\xff"),
    ("codes", np.bytes_(b"\x01\xff")),
    ("floats", b"\x01\xff"),
    ("floats", bytearray(b"\x01")),
    ("flags", "ab"),
    ("pair", b"\x01\x02"),
    ("pair", "ab"),
    ("big", "ab"),
    ("view", "ab"),
    ("nested", ["ab"]),
    ("nested", (("a",), "bc")),
    ("member", {"m": "xy"}),
    ("mapped", {"k": "vw"}),
    ("mapped", [("k", "vw")]),
]


def _db() -> Any:
    db = merkle.connect("memory://").create_db("s").create_table("t", key="id", schema=SCHEMA)
    return db.write("t", [{"id": 1, "tags": ["red"]}]).commit()


def _write(db: Any, how: str, field: str, value: Any) -> Any:
    if how == "write":
        return db.write("t", [{"id": 2, field: value}])
    if how == "write_mapping":
        return db.write("t", {2: {field: value}})
    if how == "upsert_insert":
        return db.upsert("t", [{"id": 2, field: value}])
    if how == "upsert_update":
        return db.upsert("t", [{"id": 1, field: value}])
    if how == "update":
        return db.update("t", {1: {field: value}})
    raise AssertionError(how)


@pytest.mark.parametrize(
    "how", ["write", "write_mapping", "upsert_insert", "upsert_update", "update"]
)
@pytest.mark.parametrize(("field", "value"), BAD)
def test_text_or_bytes_into_a_list_field_is_refused(how: str, field: str, value: Any) -> None:
    db = _db()
    with pytest.raises(SchemaError) as caught:
        _write(db, how, field, value).commit()
    message = str(caught.value)
    assert f"field {field!r}" in message
    assert "key 1" in message or "key 2" in message
    assert "not a list" in message
    assert db.get_records("t", [1, 2]) == {1: {"id": 1, "tags": ["red"]}}


def test_a_list_field_inferred_by_a_first_write_refuses_text_after() -> None:
    """The tester's case: the field's type comes from the first write."""
    db = merkle.connect("memory://").create_db("s").create_table("t", key="id")
    db = db.write("t", [{"id": 1, "tags": ["red"], "codes": [7]}]).commit()
    for record in ({"id": 2, "tags": "blue"}, {"id": 3, "codes": b"\x01\xff"}):
        with pytest.raises(SchemaError, match="not a list"):
            db.write("t", [record]).commit()


def test_a_dataframe_object_column_mixing_lists_and_text_is_refused() -> None:
    frame = pd.DataFrame({"id": [2, 3], "tags": [["a"], "blue"]})
    with pytest.raises(SchemaError, match=r"field 'tags'.*key 3.*not a list"):
        _db().write("t", frame).commit()


#: A real list for each field, and what it is stored as.
GOOD: dict[str, tuple[Any, Any]] = {
    "tags": (("a", "b"), ["a", "b"]),
    "codes": (np.array([1, 255]), [1, 255]),
    "floats": ([1.5], [1.5]),
    "flags": ([True], [True]),
    "pair": ([1, 2], [1, 2]),
    "big": (["ab"], ["ab"]),
    "view": (["ab"], ["ab"]),
    "nested": ([["ab"], ("c",)], [["ab"], ["c"]]),
    "member": ({"m": ["x"]}, {"m": ["x"]}),
    "mapped": ({"k": ["v"]}, [("k", ["v"])]),
}


@pytest.mark.parametrize(("field", "value"), BAD)
def test_a_list_field_takes_real_lists_but_refuses_text(field: str, value: Any) -> None:
    """The check refuses only text and bytes: the field's real lists are stored as ever."""
    given, stored = GOOD[field]
    db = _db().write("t", [{"id": 2, field: given}]).commit()
    assert db.get_records("t", [2])[2][field] == stored
    with pytest.raises(SchemaError, match="not a list"):
        db.write("t", [{"id": 3, field: value}]).commit()
