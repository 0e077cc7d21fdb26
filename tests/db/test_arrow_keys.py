"""Keys given as an Arrow array or chunked array (a table's key column).

numpy arrays, Polars Series, sets and generators of keys were taken, while an
Arrow array gave its Arrow scalars to the key codec: "key <pyarrow.Int64Scalar:
0> of type Int64Scalar does not fit key codec 'int'" (interop probe of the
twenty-third session).
"""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest

import merkle

ROWS = pa.table(
    {
        "k": pa.array([1, 2, 3], pa.int64()),
        "s": ["a", "b", "c"],
        "t": pa.array([dt.datetime(2020, 1, d) for d in (1, 2, 3)], pa.timestamp("us", "UTC")),
    }
)


@pytest.mark.parametrize("key", ["k", "s", "t"])
def test_get_and_delete_take_an_arrow_key_column(key: str) -> None:
    with merkle.connect("memory://") as conn:
        db = conn.create_db("d").create_table("x", key=key).write("x", ROWS).commit()
        column = db.to_arrow("x").column(key)
        assert db.get_arrow("x", column).num_rows == 3
        assert db.get_arrow("x", column.chunk(0).slice(1, 1)).column("k").to_pylist() == [2]
        assert len(db.get_records("x", column.combine_chunks())) == 3
        assert db.delete("x", column.slice(0, 2)).to_arrow("x").column("k").to_pylist() == [3]
