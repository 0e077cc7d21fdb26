"""A declared list of run-end encoded items reads back in its type.

Reads cast the stored plain items to the declared type, and Arrow has no cast
to run-end encoding: every read of a ``list<run_end_encoded<...>>`` field raised
pyarrow's raw "Unsupported cast to run_end_encoded" (noticed by the fixer of
the dataset's view fields, twenty-third session). The items are restored
inside the list.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import merkle

REE = pa.run_end_encoded(pa.int32(), pa.string())


@pytest.mark.parametrize(
    "kind", [pa.list_(REE), pa.large_list(REE), pa.list_(REE, 2)], ids=["list", "large", "fixed"]
)
def test_a_list_of_run_ends_reads_back(kind: pa.DataType) -> None:
    schema = pa.schema([("k", pa.int64()), ("v", kind)])
    rows = [{"k": 1, "v": ["a", "a"]}, {"k": 2, "v": None}, {"k": 3, "v": ["b", "a"]}]
    with merkle.connect("memory://") as conn:
        db = conn.create_db("d").create_table("t", key="k", schema=schema, tablet_size_limit=2)
        db = db.write("t", rows).commit()
        for read in (db.to_arrow("t"), db.compact("t").to_arrow("t")):
            assert read.schema.field("v").type == kind
            assert read.to_pylist() == rows
        got = db.dataset("t").to_table(filter=pc.field("k") >= 2)
        assert got.column("v").to_pylist() == [None, ["b", "a"]]


@pytest.mark.parametrize(
    "kind", [pa.list_(REE), pa.large_list(REE), pa.list_(REE, 2), REE], ids=str
)
def test_empty_and_streamed_reads_of_run_ends_are_valid(kind: pa.DataType) -> None:
    """An empty table's read (and every ``to_batches``, whose schema comes from one) made
    the field from Arrow's nulls of the type, an invalid array (run-end items with a
    null bitmap): "Run end encoded array should not have a null bitmap"."""
    schema = pa.schema([("k", pa.int64()), ("v", kind)])
    value = "a" if kind == REE else ["a", "b"]
    with merkle.connect("memory://") as conn:
        db = conn.create_db("d").create_table("t", key="k", schema=schema)
        empty = db.to_arrow("t")
        empty.validate(full=True)
        assert empty.schema == schema
        db = db.write("t", [{"k": 1, "v": value}, {"k": 2, "v": None}]).commit()
        streamed = db.to_batches("t").read_all()
        streamed.validate(full=True)
        assert streamed.column("v").to_pylist() == [value, None]
        assert db.to_arrow("t", fields=["k"]).column_names == ["k"]


_RUNS = pc.run_end_encode(pa.array([1, 1, 2]))
NESTED = {
    "struct": pa.StructArray.from_arrays([_RUNS], names=["r"]),
    "list": pa.ListArray.from_arrays(pa.array([0, 2, 3]), _RUNS),
    "map": pa.MapArray.from_arrays(pa.array([0, 2, 3]), pa.array(["a", "b", "c"]), _RUNS),
    "struct-of-list": pa.StructArray.from_arrays(
        [pa.ListArray.from_arrays(pa.array([0, 2, 3]), _RUNS)], names=["l"]
    ),
}


@pytest.mark.parametrize("declared", [False, True], ids=["first-write", "declared"])
@pytest.mark.parametrize("name", list(NESTED))
def test_arrow_data_with_nested_run_ends_is_written_and_read_back(
    name: str, declared: bool
) -> None:
    """An Arrow column holding run-end encoding below its top (a struct member, list
    items, map values) was refused ("field is struct<r: int64>, but the data holds
    struct<r: run_end_encoded...>") or failed every read with a raw cast error (a map):
    only a top-level run-end column was decoded for storage and encoded back."""
    column = NESTED[name]
    rows = pa.table({"k": [0, 1], "v": column.slice(0, 2)})
    with merkle.connect("memory://") as conn:
        db = conn.create_db("d").create_table(
            "t", key="k", schema=rows.schema if declared else None, tablet_size_limit=1
        )
        db = db.write("t", rows).commit()
        for read in (
            db.to_arrow("t"),
            db.compact("t").to_arrow("t"),
            db.to_batches("t").read_all(),
        ):
            read.validate(full=True)
            assert read.schema.field("v").type == column.type
            assert read.column("v").to_pylist() == rows.column("v").to_pylist()
        assert db.to_arrow("t", from_pk=1).column("v").to_pylist() == [column[1].as_py()]


def test_a_filter_over_a_struct_of_run_ends() -> None:
    rows = pa.table({"k": [0, 1, 2], "v": pa.StructArray.from_arrays([_RUNS], names=["r"])})
    with merkle.connect("memory://") as conn:
        db = conn.create_db("d").create_table("t", key="k").write("t", rows).commit()
        got = db.to_batches("t", filter=pc.field("k") >= 1).read_all()
        assert got.column("v").to_pylist() == [{"r": 1}, {"r": 2}]
        assert db.delete_where("t", pc.field("k") == 1).to_arrow("t")["k"].to_pylist() == [0, 2]
