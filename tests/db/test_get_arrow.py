"""``Database.get_arrow``: a batch lookup as one Arrow table, against ``to_arrow`` as the model.

The keys a lookup asks for may be in tablets, in pending batches (upserted
or deleted there), or nowhere; the answer is ``to_arrow`` filtered to those
keys: the same rows, columns, types and key order.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import merkle
from merkle.errors import UsageError

_KEYS = st.integers(0, 60)


def _expected(db: merkle.Database, keys: list[object], fields: list[str] | None) -> pa.Table:
    whole = db.to_arrow("t", fields=fields)
    if not whole.num_rows:  # never written: the key column has no type yet
        return whole
    key_column = whole.column("id")
    return whole.filter(pc.is_in(key_column, value_set=pa.array(keys, key_column.type)))


@settings(deadline=None, max_examples=40)
@given(
    writes=st.lists(
        st.tuples(st.lists(_KEYS, max_size=12), st.lists(_KEYS, max_size=4), st.booleans()),
        min_size=1,
        max_size=6,
    ),
    asks=st.lists(st.lists(_KEYS, max_size=15), min_size=1, max_size=4),
    fields=st.sampled_from([None, ["name"], ["price", "name"], []]),
)
def test_get_arrow_is_to_arrow_filtered_to_the_keys(
    writes: list[tuple[list[int], list[int], bool]],
    asks: list[list[int]],
    fields: list[str] | None,
) -> None:
    conn = merkle.connect(f"memory://get-arrow-{uuid.uuid4().hex}")
    # A small patch limit: some changes stay pending, others are folded into tablets.
    db = conn.create_db("d").create_table("t", key="id", patch_limit=8, tablet_size_limit=6)
    for i, (upserts, deletes, commit) in enumerate(writes):
        if upserts:
            records = [{"id": k, "name": f"n{k}-{i}", "price": k * 0.5 + i} for k in upserts]
            db = db.write("t", records)
        if deletes:
            db = db.delete("t", deletes)
        if commit:
            db = db.commit()
    for keys in asks:
        got = db.get_arrow("t", keys, fields=fields)
        want = _expected(db, list(keys), fields)
        assert got.equals(want), (keys, got, want)


def test_get_arrow_keeps_the_schema_types_and_composite_keys() -> None:
    conn = merkle.connect(f"memory://get-arrow-{uuid.uuid4().hex}")
    schema = pa.schema(
        [
            ("user", pa.string()),
            ("seq", pa.int32()),
            ("kind", pa.dictionary(pa.int8(), pa.string())),
            ("at", pa.timestamp("ms", tz="UTC")),
        ]
    )
    db = conn.create_db("d").create_table("e", key=["user", "seq"], schema=schema)
    at = datetime(2026, 1, 2, tzinfo=UTC)
    rows = pa.table(
        {
            "user": ["b", "a", "a"],
            "seq": pa.array([1, 2, 1], pa.int32()),
            "kind": pa.array(["x", "y", "x"]).dictionary_encode(),
            "at": pa.array([at, at, at], pa.timestamp("ms", tz="UTC")),
        }
    )
    db = db.write("e", rows).commit()
    got = db.get_arrow("e", [("b", 1), ("a", 1), ("z", 9)])
    assert got.schema == db.to_arrow("e").schema
    assert got.column("user").to_pylist() == ["a", "b"]  # key order
    assert got.column("seq").to_pylist() == [1, 1]
    assert db.get_arrow("e", []).num_rows == 0


def test_get_arrow_refuses_a_single_string_and_unknown_tables() -> None:
    conn = merkle.connect(f"memory://get-arrow-{uuid.uuid4().hex}")
    db = conn.create_db("d").create_table("t", key="id").write("t", [{"id": "ab"}]).commit()
    with pytest.raises(UsageError):
        db.get_arrow("t", "ab")
    with pytest.raises(merkle.errors.NotFoundError):
        db.get_arrow("nope", ["ab"])


def test_a_composite_key_table_never_written_reads_as_its_key_fields() -> None:
    """Before: every Arrow read of such a table (to_arrow, to_batches, get_arrow, dataset)
    gave one struct column "(g,n)" instead of the columns g and n it has after a write."""
    with merkle.connect("memory://") as conn:
        db = conn.create_db("d").create_table("t", key=["g", "n"], key_codec=["str", "int"])
        expected = pa.schema([("g", pa.string()), ("n", pa.int64())])
        assert db.to_arrow("t").schema == expected
        assert db.to_batches("t").schema == expected
        assert db.get_arrow("t", [("a", 1)]).schema == expected
        assert db.dataset("t").schema == expected
        assert db.commit().to_arrow("t").schema == expected
        written = db.write("t", [{"g": "a", "n": 1}]).delete("t", [("a", 1)])
        assert written.to_arrow("t").schema == expected
