"""Probe fixes: extension-type updates, DataFrame writes, stray tablets, Polars decimals.

- ``update`` of a ``pa.uuid()`` / ``pa.json_()`` field was accepted, but the read and
  the commit raised a raw ``ArrowNotImplementedError`` (``if_else`` has no kernel for
  extension types);
- a pandas DataFrame write leaked raw ``ArrowInvalid``/``ArrowTypeError``/``ValueError``/
  ``TypeError`` (a mixed column, duplicate names, a complex or sparse column), and the
  DataFrame ``to_pandas`` gives for a map field could not be written back; a named index
  with a column's name became a ``__index_level_0__`` field;
- ``read_tablet(fields=[...])`` of a tablet no table holds could not project a field kept
  in a family, and showed a composite key as one ``(u,n)`` tuple;
- ``to_polars`` of a ``decimal256`` field raised a Polars ``PanicException`` (a
  ``BaseException``).
"""

from __future__ import annotations

import decimal
import uuid
from collections.abc import Iterator
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import merkle
from merkle.errors import SchemaError, UsageError


@pytest.fixture
def mem() -> Iterator[merkle.Connection]:
    conn = merkle.connect("memory://")
    yield conn
    conn.close()


def _schema(**fields: pa.DataType) -> pa.Schema:
    return pa.schema([pa.field("k", pa.int64(), nullable=False), *fields.items()])


# -- 12. updating an extension-type field ----------------------------------------------

U = uuid.UUID


@pytest.mark.parametrize(
    ("kind", "old", "new"),
    [(pa.uuid(), U(int=1), U(int=7)), (pa.json_(), '{"a": 1}', "[2]")],
    ids=["uuid", "json"],
)
def test_update_of_an_extension_field_is_read_and_committed(
    mem: merkle.Connection, kind: pa.DataType, old: Any, new: Any
) -> None:
    db = mem.create_db("d").create_table("t", key="k", schema=_schema(u=kind))
    db = db.write("t", [{"k": 1, "u": old}, {"k": 2, "u": old}]).commit()
    changed = db.update("t", {1: {"u": new}})
    want = [{"k": 1, "u": new}, {"k": 2, "u": old}]
    assert changed.to_arrow("t").to_pylist() == want
    done = changed.commit()
    assert done.to_arrow("t").to_pylist() == want
    assert done.to_arrow("t").schema.field("u").type == kind
    removed = done.update("t", {2: {"u": None}}).commit().compact("t").commit()
    assert removed.to_arrow("t").to_pylist() == [{"k": 1, "u": new}, {"k": 2, "u": None}]


def _uuids(*ints: int | None) -> pa.Array:
    storage = pa.array([None if i is None else U(int=i).bytes for i in ints], pa.binary(16))
    return pa.ExtensionArray.from_storage(pa.uuid(), storage)


@pytest.mark.parametrize(
    ("new", "old"),
    [
        (_uuids(1, 2, None), _uuids(3, None, 4)),
        (
            pa.ListArray.from_arrays(pa.array([0, 1, 2, 3], pa.int32()), _uuids(1, 2, 5)),
            pa.ListArray.from_arrays(pa.array([0, 1, 1, 2], pa.int32()), _uuids(3, 4)),
        ),
        (
            pa.StructArray.from_arrays([_uuids(1, 2, 5)], ["x"]),
            pa.StructArray.from_arrays([_uuids(3, 4, 6)], ["x"]),
        ),
    ],
    ids=["uuid", "list-of-uuid", "struct-of-uuid"],
)
def test_a_patch_picks_values_of_extension_types(new: pa.Array, old: pa.Array) -> None:
    from merkle.tablets.patches import choose  # new: was pc.if_else, which has no kernel

    sets = pa.array([True, False, True])
    picked = choose(sets, pa.chunked_array([new]), pa.chunked_array([old.slice(0, 1), old[1:]]))
    assert picked.type == new.type
    assert picked.to_pylist() == [new[0].as_py(), old[1].as_py(), new[2].as_py()]


# -- 14. pandas DataFrames written ---------------------------------------------------


@pytest.mark.parametrize(
    ("frame", "match"),
    [
        (pd.DataFrame({"k": [1, 2], "v": [1, "a"]}), "column 'v' .* one type"),
        (pd.DataFrame([[1, 2, 3]], columns=["k", "v", "v"]), "more than one column named 'v'"),
        (pd.DataFrame({"k": [1], "v": np.array([1 + 2j])}), "column 'v' .* complex"),
        (pd.DataFrame({"k": [1], "v": pd.arrays.SparseArray([0])}), "column 'v' .* sparse"),
        (
            pd.DataFrame({"k": [1, 2], "v": [1.5, 2.5]}).set_index(pd.Index([5, 6], name="v")),
            "index named 'v' and a column named 'v'",
        ),
    ],
    ids=["mixed", "duplicate-names", "complex", "sparse", "index-named-like-a-column"],
)
def test_a_dataframe_arrow_cannot_hold_is_a_usage_error(
    mem: merkle.Connection, frame: pd.DataFrame, match: str
) -> None:
    db = mem.create_db("d").create_table("t", key="k")
    with pytest.raises(UsageError, match=match):
        db.write("t", frame)


def test_to_pandas_of_a_map_field_is_written_back(mem: merkle.Connection) -> None:
    schema = _schema(m=pa.map_(pa.string(), pa.int64()))
    db = mem.create_db("d").create_table("t", key="k", schema=schema)
    db = db.write("t", [{"k": 1, "m": [("a", 1)]}, {"k": 2}, {"k": 3, "m": []}]).commit()
    before = db.to_arrow("t")
    again = db.write("t", db.to_pandas("t"))
    assert again.to_arrow("t").equals(before)
    misfit = pd.DataFrame({"k": [4], "m": [[("a", 2.5)]]})
    with pytest.raises(SchemaError, match=r"table 't': field 'm' .* key 4 .*whole number"):
        db.write("t", misfit)  # converted with the field's type, never cut to 2


@pytest.mark.parametrize(
    ("frame", "names"),
    [
        (pd.DataFrame({"k": [1, 2], "v": [1.5, 2.5]}).set_index("k", drop=False), ["k", "v"]),
        (
            pd.DataFrame(
                {"v": [1.5, 2.5]},
                index=pd.MultiIndex.from_arrays([[1, 2], [3, 4]], names=["k", None]),
            ),
            ["k", "v"],
        ),
    ],
    ids=["index-equal-to-its-column", "unnamed-level"],
)
def test_a_dataframe_index_makes_no_invented_field(
    mem: merkle.Connection, frame: pd.DataFrame, names: list[str]
) -> None:
    db = mem.create_db("d").create_table("t", key="k").write("t", frame)
    assert sorted(db.to_arrow("t").column_names) == names


# -- 16. a tablet no table holds -----------------------------------------------------


@pytest.mark.parametrize(
    ("key", "fields", "want"),
    [
        ("k", ["b"], [{"k": i, "b": -i} for i in range(3)]),
        (["u", "n"], ["b"], [{"u": "x", "n": i, "b": -i} for i in range(3)]),
        (["u", "n"], None, [{"u": "x", "n": i, "a": i, "b": -i} for i in range(3)]),
    ],
    ids=["family-field", "composite-family-field", "composite-all"],
)
def test_a_stray_tablet_reads_family_fields_and_key_fields(
    mem: merkle.Connection, key: Any, fields: list[str] | None, want: list[dict[str, Any]]
) -> None:
    db = mem.create_db("d").create_table("t", key=key, families={"f": {"b"}})
    rows = [{"u": "x", "n": i} if key != "k" else {"k": i} for i in range(3)]
    db = db.write("t", [{**r, "a": i, "b": -i} for i, r in enumerate(rows)]).commit()
    new = db.compact("t").commit()
    tablet = new.list_tablets("t")[0]["id"]
    old = mem.open_db("d", version=db.version)
    assert list(old.read_tablet(tablet, fields=fields)) == want
    assert list(new.read_tablet(tablet, fields=fields)) == want  # as the owning table reads
    with pytest.raises(UsageError, match=r"no field 'zz'; its fields: (k|u, n), a, b"):
        list(old.read_tablet(tablet, fields=["zz"]))


# -- 18. to_polars of decimal256 -----------------------------------------------------


def test_to_polars_reads_a_narrow_decimal256_and_refuses_a_wide_one(
    mem: merkle.Connection,
) -> None:
    pytest.importorskip("polars")
    schema = _schema(d=pa.decimal256(38, 5), l=pa.list_(pa.decimal256(20, 2)))
    value = decimal.Decimal("123456789012345678901234567890123.12345")
    db = mem.create_db("d").create_table("t", key="k", schema=schema)
    db = db.write("t", [{"k": 1, "d": value, "l": [decimal.Decimal("2.25")]}]).commit()
    frame = db.to_polars("t")
    assert frame["d"].to_list() == [value]
    assert frame["l"].to_list() == [[decimal.Decimal("2.25")]]
    wide = mem.create_db("w").create_table("t", key="k", schema=_schema(d=pa.decimal256(76, 5)))
    wide = wide.write("t", [{"k": 1, "d": decimal.Decimal("1.5")}]).commit()
    with pytest.raises(UsageError, match=r"field 'd' is a decimal256.*38 digits"):
        wide.to_polars("t")
    assert wide.to_polars("t", fields=[]).columns == ["k"]
