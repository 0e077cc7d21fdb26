"""Text and bytes keep their kind: one rule on every path that sets a value.

A ``string`` field holds ``str`` and a ``binary`` field ``bytes``. pyarrow
decodes bytes written into a string type (as UTF-8) and encodes text written
into a binary type without a word, so ``write`` and ``upsert`` of records
stored ``b"abc"`` as ``"abc"`` in a string field (and ``"abc"`` as
``b"abc"`` in a binary one), while ``update`` and Arrow data refused the same
value, with another message (``update``'s without the table). Every path now
refuses it with one ``SchemaError`` naming the table, the field, the key and
the value's type, and writes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import pytest

import merkle
from merkle.errors import SchemaError

SCHEMA = pa.schema(
    [
        ("k", pa.int64()),
        ("s", pa.string()),
        ("b", pa.binary()),
        ("tags", pa.list_(pa.string())),
        merkle.free_field("any"),
    ]
)

Setter = Callable[[merkle.Database, int, str, Any], merkle.Database]


def _arrow(db: merkle.Database, key: int, field: str, value: Any) -> merkle.Database:
    kind = pa.binary() if isinstance(value, bytes) else pa.string()
    return db.write("t", pa.table({"k": [key], field: pa.array([value], kind)}))


#: Every API path that sets a field's value: inserts (key 2 is new) and changes of the
#: record of key 1.
PATHS: dict[str, tuple[int, Setter]] = {
    "write insert": (2, lambda db, k, f, v: db.write("t", [{"k": k, f: v}])),
    "write mapping": (2, lambda db, k, f, v: db.write("t", {k: {f: v}})),
    "write over a record": (1, lambda db, k, f, v: db.write("t", [{"k": k, f: v}])),
    "upsert update": (1, lambda db, k, f, v: db.upsert("t", [{"k": k, f: v}])),
    "upsert replace": (
        1,
        lambda db, k, f, v: db.upsert("t", [{"k": k, f: v}], when_matched="replace"),
    ),
    "upsert insert": (2, lambda db, k, f, v: db.upsert("t", [{"k": k, f: v}])),
    "update": (1, lambda db, k, f, v: db.update("t", {k: {f: v}})),
    # A list field among the changes: the per-record path of update, not the columnar one.
    "update with a list field": (1, lambda db, k, f, v: db.update("t", {k: {f: v, "tags": []}})),
    "arrow write": (2, _arrow),
}


@pytest.fixture
def db() -> Iterator[merkle.Database]:
    with merkle.connect("memory://") as conn:
        base = conn.create_db("shop").create_table("t", key="k", schema=SCHEMA)
        yield base.write("t", [{"k": 1, "s": "x", "b": b"y"}]).commit()


@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize(
    ("field", "value", "kind"),
    [
        # valid UTF-8: was stored as "abc" by write and upsert
        pytest.param("s", b"abc", "bytes", id="utf8-bytes-into-string"),
        pytest.param("s", b"\xff\xfe", "bytes", id="other-bytes-into-string"),
        # was stored as b"abc" by write, upsert and update
        pytest.param("b", "abc", "str", id="ascii-str-into-binary"),
        pytest.param("b", "\u00e9", "str", id="other-str-into-binary"),
    ],
)
def test_a_value_of_the_other_kind_is_refused_on_every_path(
    db: merkle.Database, path: str, field: str, value: Any, kind: str
) -> None:
    key, setter = PATHS[path]
    with pytest.raises(SchemaError) as caught:
        setter(db, key, field, value)
    message = str(caught.value)
    assert message.startswith(f"table 't': field {field!r} is "), message
    assert f"of the record with key {key} is {kind}" in message, message
    assert f"free=[{field!r}]" in message  # the way out: or convert the value
    assert db.get_records("t", [1, 2]) == {1: {"k": 1, "s": "x", "b": b"y"}}


def test_inside_lists_too(db: merkle.Database) -> None:
    setters: list[Callable[[], object]] = [
        lambda: db.write("t", [{"k": 2, "tags": ["a", b"b"]}]),
        lambda: db.update("t", {1: {"tags": ["a", b"b"]}}),
        lambda: db.upsert("t", [{"k": 1, "tags": [b"b"]}]),
    ]
    for setter in setters:
        with pytest.raises(SchemaError, match=r"field 'tags' .*key [12] .*it is bytes, not str"):
            setter()


def test_values_of_their_own_kind_and_schema_free_fields_are_kept(db: merkle.Database) -> None:
    db = db.write("t", [{"k": 2, "s": "é", "b": b"\xff", "any": b"raw"}])
    db = db.update("t", {1: {"s": "z", "b": b"\x00", "any": "text"}})
    db = db.upsert("t", [{"k": 3, "s": "w", "b": b"v", "tags": ["t"]}]).commit()
    assert db.get_records("t", [1, 2, 3]) == {
        1: {"k": 1, "s": "z", "b": b"\x00", "any": "text"},
        2: {"k": 2, "s": "é", "b": b"\xff", "any": b"raw"},
        3: {"k": 3, "s": "w", "b": b"v", "tags": ["t"]},
    }
