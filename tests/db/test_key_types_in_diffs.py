"""Every key field keeps its own Arrow type in a diff's and a conflict table's key column.

``to_arrow`` gives a key field the type the data gave it (``int32``, ``uint8``,
``large_string``, ``float32``), while the key codec
stores one type per kind (``int64``, ``string``, ``double``).
``TableDiff.to_arrow`` and a merge conflict table gave the stored type (an
``int32`` key came back as ``int64``); they must give the key column as
``to_arrow`` does, for a single key and for each field of a composite key.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

import merkle
from merkle.errors import MergeConflictError
from tests.db.test_naive_keys_everywhere import _arrow_keys

_N = 6

#: name -> (key, columns): key fields of types the codec stores in another type.
KINDS: dict[str, tuple[Any, dict[str, pa.Array]]] = {
    "int32": ("k", {"k": pa.array(range(_N), pa.int32())}),
    "int8": ("k", {"k": pa.array(range(-3, _N - 3), pa.int8())}),
    "uint16": ("k", {"k": pa.array(range(_N), pa.uint16())}),
    "float32": ("k", {"k": pa.array([0.5 * i for i in range(_N)], pa.float32())}),
    "large-string": ("k", {"k": pa.array([f"k{i}" for i in range(_N)], pa.large_string())}),
    "large-binary": ("k", {"k": pa.array([b"k%d" % i for i in range(_N)], pa.large_binary())}),
    "string-view": ("k", {"k": pa.array([f"k{i}" for i in range(_N)], pa.string_view())}),
    "binary-view": ("k", {"k": pa.array([b"k%d" % i for i in range(_N)], pa.binary_view())}),
    "composite-string-view-int64": (
        ["g", "n"],
        {
            "g": pa.array([f"g{i % 2}" for i in range(_N)], pa.string_view()),
            "n": pa.array(range(_N), pa.int64()),
        },
    ),
    "composite-int16-large-string": (
        ["g", "n"],
        {
            "g": pa.array([i % 2 for i in range(_N)], pa.int16()),
            "n": pa.array([f"n{i}" for i in range(_N)], pa.large_string()),
        },
    ),
}


def _table(conn: merkle.Connection, kind: str) -> merkle.Database:
    key, columns = KINDS[kind]
    rows = pa.table({**columns, "v": pa.array(range(_N), pa.int64())})
    db = conn.create_db("main").create_table("t", key=key)
    return db.write("t", rows).commit()


def _bumped(db: merkle.Database, by: int) -> pa.Table:
    table = db.to_arrow("t")
    return table.set_column(
        table.schema.get_field_index("v"), "v", pa.array([v + by for v in range(_N)])
    )


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_diff_gives_the_key_field_its_own_type(kind: str) -> None:
    key = KINDS[kind][0]
    with merkle.connect("memory://") as conn:
        old = _table(conn, kind)
        new = old.write("t", _bumped(old, 100)).commit()
        keys = new.diff(old, table="t")["t"].to_arrow().column("key").combine_chunks()
        want = _arrow_keys(new, key)
        assert keys.type == want.type
        assert keys.equals(want)


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_conflict_table_gives_the_key_field_its_own_type(kind: str) -> None:
    key = KINDS[kind][0]
    with merkle.connect("memory://") as conn:
        main = _table(conn, kind)
        dev = conn.create_db("dev", root=main)
        dev.write("t", _bumped(dev, 100)).commit()
        main = main.write("t", _bumped(main, 200)).commit()
        with pytest.raises(MergeConflictError) as caught:
            conn.merge("dev", "main")
        keys = caught.value.conflicts["t"].column("key").combine_chunks()  # type: ignore[attr-defined]
        want = _arrow_keys(main, key)
        assert keys.type == want.type
        assert keys.equals(want)
