"""``create_table(schema_free=[...])`` without a schema keeps the key fields first.

The schema made of the free fields alone had no key field: a never-written
table read without its key column (api.md: a key column of type null), and
once written its key came after the free fields, in reads and in records
(interop probe of the twenty-third session). The key fields now come first,
untyped until the first write, as ``alter_schema(add=)`` of such a table does.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

import merkle


@pytest.mark.parametrize(
    ("key", "codec", "rows"),
    [
        ("k", None, [{"k": 2, "payload": {"a": 1}, "v": 1}, {"k": 1, "payload": [1], "v": 2}]),
        ("k", "str", [{"k": "b", "payload": 1, "v": 1}, {"k": "a", "payload": "x", "v": 2}]),
        (["g", "n"], None, [{"g": "x", "n": 1, "payload": 1.5, "v": 1}]),
    ],
    ids=["int", "declared-codec", "composite"],
)
def test_the_key_fields_come_first(key: Any, codec: str | None, rows: list[dict[str, Any]]) -> None:
    keys = [key] if isinstance(key, str) else key
    with merkle.connect("memory://") as conn:
        db = conn.create_db("d").create_table(
            "t", key=key, key_codec=codec, schema_free=["payload"]
        )
        empty = db.to_arrow("t")
        assert empty.column_names[: len(keys)] == keys
        assert empty.num_rows == 0
        assert pa.Table.from_batches(list(db.to_batches("t")), empty.schema).column_names == (
            empty.column_names
        )
        db = db.write("t", rows).commit()
        assert db.to_arrow("t").column_names == [*keys, "payload", "v"]
        assert list(next(iter(db.scan("t")))) == [*keys, "payload", "v"]
        again = db.write("t", rows[:1]).commit()  # the free field stays free
        assert again.version == db.version


def test_a_never_written_table_with_a_declared_codec_reads_after_alter_schema() -> None:
    """``alter_schema(add=)`` before the first write of a table with ``key_codec=``: its
    reads cast the codec's empty key column to the untyped (null) key field and raised
    pyarrow's raw "Unsupported cast from string to null"."""
    with merkle.connect("memory://") as conn:
        db = conn.create_db("d").create_table("t", key="k", key_codec="str")
        db = db.alter_schema("t", add={"v": "int64"})
        empty = db.to_arrow("t")
        assert empty.column_names == ["k", "v"]
        assert empty.num_rows == 0
        db = db.write("t", [{"k": "a", "v": 1}]).commit()
        assert db.to_arrow("t").to_pylist() == [{"k": "a", "v": 1}]
