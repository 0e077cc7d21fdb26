"""Records with an extension type inside a nested field (list, struct, map).

pyarrow builds no nested extension array from Python values, so every record
giving a value to ``list<uuid>``, ``struct<x: uuid>``, ``map<string, json>``, a
list of tensors or of a user's extension type was refused ("does not fit it
(extension)"), on every write path, and the values a read gave back could not
be written back. They are built in the storage types and cast, with the checks
the storage values get: a uuid takes a ``uuid.UUID`` or 16 bytes, a json text,
at any depth (and at the top: text is no longer encoded into a uuid, nor bytes
decoded into a json).
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import pytest

import merkle
from merkle.errors import SchemaError

U = uuid.UUID(int=7)
V = uuid.UUID(int=9)


class _Money(pa.ExtensionType):
    """An extension type a user registers (int64 cents)."""

    def __init__(self) -> None:
        super().__init__(pa.int64(), "merkle.test.nested_money")

    def __arrow_ext_serialize__(self) -> bytes:
        return b""

    def __hash__(self) -> int:  # pyarrow leaves it unhashable; merkle caches by type
        return hash(self.extension_name)

    @classmethod
    def __arrow_ext_deserialize__(cls, storage_type: pa.DataType, serialized: bytes) -> _Money:
        return cls()


with contextlib.suppress(pa.ArrowKeyError):  # registered by an earlier import of this module
    pa.register_extension_type(_Money())

TENSOR = pa.fixed_shape_tensor(pa.float32(), [2, 2])
SCHEMA = pa.schema(
    [
        pa.field("k", pa.int64(), nullable=False),
        ("l", pa.list_(pa.uuid())),
        ("s", pa.struct([("x", pa.uuid()), ("j", pa.json_())])),
        ("m", pa.map_(pa.string(), pa.json_())),
        ("t", pa.list_(TENSOR)),
        ("e", pa.list_(_Money())),
        ("n", pa.map_(pa.string(), pa.list_(pa.uuid()))),
    ]
)

# (field, value written, value read back)
GOOD = [
    ("l", [U, None], [U, None]),
    ("l", [U.bytes], [U]),
    ("s", {"x": U.bytes, "j": "[1]"}, {"x": U, "j": "[1]"}),
    ("s", {"x": U}, {"x": U, "j": None}),
    ("m", {"a": '{"z":1}'}, [("a", '{"z":1}')]),
    ("m", [("a", '{"z":1}')], [("a", '{"z":1}')]),
    ("t", [[1, 2, 3, 4]], [[1.0, 2.0, 3.0, 4.0]]),
    ("e", [1, None, 3], [1, None, 3]),
    ("n", {"a": [U, U.bytes]}, [("a", [U, U])]),
]
GOOD_IDS = [
    "list_uuid",
    "list_uuid_bytes",
    "struct_uuid_bytes",
    "struct_uuid",
    "map_json_dict",
    "map_json_pairs",
    "list_tensor",
    "list_user_ext",
    "map_list_uuid",
]


@pytest.fixture
def db() -> Iterator[merkle.Database]:
    conn = merkle.connect("memory://")
    yield conn.create_db("d").create_table("t", key="k", schema=SCHEMA)
    conn.close()


def _write_records(db: merkle.Database, rows: list[dict[str, Any]]) -> merkle.Database:
    return db.write("t", rows)


def _write_mapping(db: merkle.Database, rows: list[dict[str, Any]]) -> merkle.Database:
    return db.write("t", {row["k"]: row for row in rows})


def _upsert_insert(db: merkle.Database, rows: list[dict[str, Any]]) -> merkle.Database:
    return db.upsert("t", rows)


def _upsert_update(db: merkle.Database, rows: list[dict[str, Any]]) -> merkle.Database:
    db = db.write("t", [{"k": row["k"]} for row in rows])
    return db.upsert("t", rows, when_matched="update")


def _upsert_replace(db: merkle.Database, rows: list[dict[str, Any]]) -> merkle.Database:
    db = db.write("t", [{"k": row["k"]} for row in rows])
    return db.upsert("t", rows, when_matched="replace")


def _update(db: merkle.Database, rows: list[dict[str, Any]]) -> merkle.Database:
    db = db.write("t", [{"k": row["k"]} for row in rows])
    return db.update("t", {row["k"]: {n: v for n, v in row.items() if n != "k"} for row in rows})


PATHS: dict[str, Callable[[merkle.Database, list[dict[str, Any]]], merkle.Database]] = {
    "write": _write_records,
    "write_mapping": _write_mapping,
    "upsert_insert": _upsert_insert,
    "upsert_update": _upsert_update,
    "upsert_replace": _upsert_replace,
    "update": _update,
}


@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize(("name", "given", "read"), GOOD, ids=GOOD_IDS)
def test_nested_extension_values_are_written(
    db: merkle.Database, path: str, name: str, given: Any, read: Any
) -> None:
    db = PATHS[path](db, [{"k": 1, name: given}, {"k": 2}])
    rows = db.to_arrow("t").to_pylist()
    assert rows[0][name] == read
    assert rows[1][name] is None
    assert db.to_arrow("t").schema.field(name).type == SCHEMA.field(name).type


BAD = [
    ("l", ["7"], "str"),
    ("l", [str(U)], "str"),
    ("l", [b"x" * 15], "length 16"),
    ("l", [5], "5"),
    ("s", {"x": "x" * 16}, "str"),
    ("s", {"j": b"[1]"}, "bytes"),
    ("m", {"a": b"{}"}, "bytes"),
    ("m", {"a": 1}, "1"),
    ("n", {"a": ["x" * 16]}, "str"),
    ("t", [[1, 2, 3]], "[1, 2, 3]"),
    ("t", [[1.5e300, 0, 0, 0]], "float32"),
    ("e", [1.5], "whole"),
]


@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize(("name", "given", "said"), BAD, ids=[f"{b[0]}-{b[2]}" for b in BAD])
def test_wrong_nested_extension_values_are_refused(
    db: merkle.Database, path: str, name: str, given: Any, said: str
) -> None:
    with pytest.raises(SchemaError) as caught:
        PATHS[path](db, [{"k": 4, name: given}])
    text = str(caught.value)
    assert "table 't'" in text
    assert f"field {name!r}" in text
    assert "key 4" in text
    assert said in text
    assert "(extension)" not in text


@pytest.mark.parametrize(
    ("value", "said"),
    [("x" * 16, "uuid.UUID(value)"), (str(U), "uuid.UUID(value)")],
    ids=["sixteen_chars", "uuid_text"],
)
def test_text_into_a_top_level_uuid_is_refused(value: str, said: str) -> None:
    conn = merkle.connect("memory://")
    db = conn.create_db("d").create_table(
        "t", key="k", schema=pa.schema([("k", pa.int64()), ("u", pa.uuid())])
    )
    with pytest.raises(SchemaError, match="field 'u'") as caught:
        db.write("t", [{"k": 1, "u": value}])
    assert said in str(caught.value)
    assert db.write("t", [{"k": 1, "u": U}, {"k": 2, "u": V.bytes}]).to_arrow("t").column(
        "u"
    ).to_pylist() == [U, V]


def test_bytes_into_a_top_level_json_are_refused() -> None:
    conn = merkle.connect("memory://")
    db = conn.create_db("d").create_table(
        "t", key="k", schema=pa.schema([("k", pa.int64()), ("j", pa.json_())])
    )
    with pytest.raises(SchemaError, match=r"field 'j'.*decode it"):
        db.write("t", [{"k": 1, "j": b'{"a": 1}'}])


@pytest.mark.parametrize("read", ["to_arrow", "get_records", "scan"])
@pytest.mark.parametrize("path", ["write", "write_mapping", "upsert_replace", "update"])
def test_read_values_are_written_back_unchanged(db: merkle.Database, read: str, path: str) -> None:
    record = {"k": 1, **{name: given for name, given, _ in GOOD[::2]}}
    db = db.write("t", [record, {"k": 2, "l": [V]}])
    before = db.to_arrow("t")
    if read == "to_arrow":
        rows = before.to_pylist()
    elif read == "get_records":
        rows = list(db.get_records("t", [1, 2]).values())
    else:
        rows = list(db.scan("t"))
    again = PATHS[path](db, rows)
    assert again.to_arrow("t").equals(before)
