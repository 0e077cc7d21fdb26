"""Database values: immutable, see their own writes, invisible to others until commit.

Also the data itself: schema-free records (mixed types, nesting, None as
absent) and large Arrow writes round-trip exactly through commit and re-open.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from conftest import Lake

import merkle
from merkle.errors import NotFoundError, SchemaError

from .conftest import Connect
from .helpers import all_tables, full_scan, same_columns, snapshot, without_none


def _view(db: merkle.Database) -> dict[str, Any]:
    """Everything a reader can learn from a value, to compare before and after."""
    return {
        "name": db.name,
        "version": db.version,
        "root": db.root,
        "tables": db.list_tables(),
        "meta": db.describe()["metadata"],
        "data": all_tables(db),
        "described": {t: db.describe_table(t) for t in db.list_tables()},
    }


def test_older_values_are_unchanged_by_later_calls(conn: merkle.Connection) -> None:
    base = conn.create_db("shop", metadata={"m": 0}).create_table(
        "t", key="k", tablet_size_limit=4, branching_factor=3, patch_limit=6, schema_free=True
    )
    base = base.write("t", [{"k": i, "v": i} for i in range(30)]).commit()
    dirty = base.write("t", [{"k": 100, "v": "dirty"}]).delete("t", [0])
    snapshots = {"base": _view(base), "dirty": _view(dirty)}

    # Every kind of change, made on top of both values, some committed.
    for n, db in enumerate((base, dirty)):
        later = db.write("t", [{"k": i, "v": -i} for i in range(10)]).delete("t", [5, 6])
        later = later.create_table(f"u{n}", key="k").write(f"u{n}", [{"k": 1}])
        later = later.alter_db_meta(lambda m: {**m, "m": 1})
        later = later.alter_table_meta("t", lambda _: {"x": 1})
        later = later.alter_families("t", {"f": {"v"}})
        later.drop_table("t")
        later.write("t", [{"k": 1000}]).commit()
    dirty.commit()
    assert _view(base) == snapshots["base"]
    assert _view(dirty) == snapshots["dirty"]
    assert dirty.dirty
    assert not base.dirty


def test_reads_on_an_uncommitted_value_see_its_own_writes(conn: merkle.Connection) -> None:
    db = conn.create_db("shop").create_table("t", key="k", tablet_size_limit=3, patch_limit=4)
    db = db.write("t", [{"k": i, "v": i} for i in range(10)])
    db = db.write("t", {3: {"v": 333}}).delete("t", [4, 9])
    db = db.create_table("new", key="id").write("new", [{"id": "x", "n": 1}])
    expected = [{"k": i, "v": 333 if i == 3 else i} for i in range(10) if i not in (4, 9)]
    assert db.list_tables() == ["new", "t"]
    assert full_scan(db, "t") == expected
    assert db.get_records("t", [3, 4]) == {3: {"k": 3, "v": 333}}
    assert db.to_arrow("t").to_pylist() == expected
    assert db.describe()["tables"]["t"]["count"] == 8
    assert db.describe_table("t")["count"] == 8
    assert db.get_records("new", ["x"]) == {"x": {"id": "x", "n": 1}}


def test_nothing_is_visible_or_stored_before_commit(
    lake: Lake, conn: merkle.Connection, connect: Connect
) -> None:
    db = conn.create_db("shop").create_table("t", key="k").write("t", [{"k": 0}]).commit()
    conn.close()  # gives its writer lease up, so the lake holds still
    writer = connect(lake)
    reader = connect(lake)
    before = snapshot(writer.store)
    db = writer.open_db("shop")
    # Enough, with small limits, to build tablets, split them and flush batches in memory.
    db = db.create_table("big", key="k", tablet_size_limit=50, branching_factor=3, patch_limit=20)
    for i in range(5):
        db = db.write("big", [{"k": j, "i": i} for j in range(i * 100, i * 100 + 300)])
        db = db.delete("t", [0])
        assert db.describe_table("big")["count"] == i * 100 + 300
    db = db.alter_db_meta(lambda _: {"changed": True}).alter_families("big", {"f": {"i"}})
    assert len(db.list_tablets("big")) > 3
    assert full_scan(db, "t") == []
    # Another connection sees the committed version only.
    seen = reader.open_db("shop")
    assert seen.version == 1
    assert seen.list_tables() == ["t"]
    assert full_scan(seen, "t") == [{"k": 0}]
    assert seen.describe()["metadata"] is None
    # And not one object reached the lake.
    assert snapshot(writer.store) == before
    committed = db.commit()
    seen = reader.open_db("shop")
    assert seen.version == committed.version == 2
    assert all_tables(seen) == all_tables(db)
    assert seen.describe()["metadata"] == {"changed": True}


def test_a_value_commits_from_its_own_base_not_the_lake_head(conn: merkle.Connection) -> None:
    """Two values from one version: each commit keeps the other's changes (replay)."""
    db = conn.create_db("shop").create_table("t", key="k").commit()
    a = db.write("t", [{"k": 1}])
    b = db.write("t", [{"k": 2}])
    a.commit()
    committed = b.commit()
    assert committed.version == 3
    assert full_scan(committed, "t") == [{"k": 1}, {"k": 2}]


# -- schema-free records ---------------------------------------------------------------

MIXED: list[dict[str, Any]] = [
    {"k": 0, "a": 1, "b": True, "c": 1.0, "d": "s", "e": b"x", "f": [1, 2], "g": {"x": 1}},
    {"k": 1, "a": True, "b": 1, "c": 1, "d": b"s", "e": "x", "f": {"a": [None, 1]}, "g": []},
    {"k": 2, "a": 2**63, "b": -(2**63), "c": -0.0, "d": "", "e": b"", "f": [], "g": {}},
    {"k": 3, "a": 1.5, "b": None, "c": float("inf"), "d": [[[]]], "e": {"": 1}, "h": None},
    {"k": 4, "a": "x", "t": datetime(2020, 1, 1, tzinfo=UTC), "u": {"deep": {"deeper": [1.5]}}},
    {"k": 5, "t": "not a time", "u": [{"a": None}, "text", 3, b"\x00"]},
    {"k": 6},
    {"k": 7, "a": None, "b": None},
    {"k": 8, "unicode": "ünïcødé ✓", "big": 2**64 - 1, "neg": -(2**64)},
]


def _same(got: Any, want: Any) -> bool:
    """Equal values of equal types, all the way down (so True != 1 and 1 != 1.0)."""
    if type(got) is not type(want):
        return False
    if isinstance(want, dict):
        return list(got) == list(want) and all(_same(got[k], want[k]) for k in want)
    if isinstance(want, list):
        return len(got) == len(want) and all(_same(g, w) for g, w in zip(got, want, strict=True))
    if isinstance(want, float) and want == 0:
        return bool(np.signbit(got) == np.signbit(want))
    return bool(got == want)


def _expected(record: dict[str, Any]) -> dict[str, Any]:
    # Fields come back in the order the table first saw them; None fields are absent.
    return without_none(record)


def test_schema_free_records_round_trip(
    lake: Lake, conn: merkle.Connection, connect: Connect
) -> None:
    db = conn.create_db("shop").create_table(
        "t", key="k", tablet_size_limit=3, patch_limit=2, schema_free=True
    )
    db = db.create_table("p", key="k", schema_free=True)  # stays pending: a second path
    db = db.write("t", MIXED).write("p", MIXED[:3])
    for record in MIXED:
        got = db.get_records("t", [record["k"]])[record["k"]]
        assert _same(got, _expected(record)), (got, record)
    db.commit()
    for reader in (conn, connect(lake)):
        head = reader.open_db("shop")
        assert head.describe_table("t")["tablets"] > 1
        assert head.describe_table("p")["patch"]["count"] == 3
        for table, records in (("t", MIXED), ("p", MIXED[:3])):
            got_all = full_scan(head, table)
            assert len(got_all) == len(records)
            for got, record in zip(got_all, records, strict=True):
                assert _same(got, _expected(record)), (got, record)


def test_none_is_the_same_as_absent(conn: merkle.Connection) -> None:
    db = conn.create_db("shop").create_table("t", key="k")
    db = db.write("t", [{"k": 1, "a": 1, "b": 2}]).commit()
    db = db.write("t", [{"k": 1, "a": None, "b": 3}]).commit()
    assert full_scan(db, "t") == [{"k": 1, "b": 3}]
    assert list(db.scan("t", fields=["a"])) == [{"k": 1}]


def test_arrow_input_with_nested_types_and_nulls(
    lake: Lake, conn: merkle.Connection, connect: Connect
) -> None:
    """Arrow nulls are absent fields; lists, structs, dictionaries and timestamps read back."""
    data = pa.table(
        {
            "k": pa.array([3, 1, 2], pa.int32()),
            "l": pa.array([[1, 2], None, []], pa.list_(pa.int64())),
            "s": pa.array(
                [{"x": 1, "y": "a"}, {"x": None, "y": "b"}, None],
                pa.struct([("x", pa.int64()), ("y", pa.string())]),
            ),
            "d": pa.array(["a", "b", "a"]).dictionary_encode(),
            "ls": pa.array(["x", None, "z"], pa.large_string()),
            "ts": pa.array([datetime(2020, 1, 1), None, datetime(2021, 1, 1)], pa.timestamp("ms")),
            "n": pa.array([None, None, None], pa.null()),
        }
    )
    db = conn.create_db("shop").create_table("t", key="k").write("t", data).commit()
    expected = [
        {"k": 1, "d": "b", "s": {"x": None, "y": "b"}},
        {"k": 2, "d": "a", "l": [], "ls": "z", "ts": datetime(2021, 1, 1)},
        {
            "k": 3,
            "d": "a",
            "l": [1, 2],
            "ls": "x",
            "s": {"x": 1, "y": "a"},
            "ts": datetime(2020, 1, 1),
        },
    ]
    assert db.describe_table("t")["key_codec"] == "int"
    assert full_scan(connect(lake).open_db("shop"), "t") == expected
    # The first write decided the fields' types: a record that does not fit is refused.
    with pytest.raises(SchemaError, match="'l'"):
        db.write("t", [{"k": 4, "l": "text", "s": 5}])
    assert db.to_arrow("t").schema.equals(data.schema)  # the all-null field "n" too, typed null


# -- large Arrow writes ----------------------------------------------------------------

ROWS = 200_000


def _big(rows: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    keys = rng.permutation(rows).astype(np.int64)  # unsorted on purpose
    return pa.table(
        {
            "id": keys,
            "price": keys.astype(np.float64) / 100,
            "name": pa.array([f"item-{k}" for k in keys.tolist()]),
            "flag": pa.array((keys % 3 == 0).tolist()),
        }
    )


def test_large_arrow_writes_go_into_tablets(
    lake: Lake, conn: merkle.Connection, connect: Connect
) -> None:
    data = _big(ROWS, 1)
    db = conn.create_db("big").create_table(
        "t", key="id", tablet_size_limit=20_000, branching_factor=4, patch_limit=1_000
    )
    # Several record batches, as a chunked table and one batch on its own.
    chunked = pa.Table.from_batches(data.slice(0, ROWS - 10_000).to_batches(max_chunksize=30_000))
    db = db.write("t", chunked).write("t", data.slice(ROWS - 10_000).to_batches()[0]).commit()
    expected = data.sort_by("id")
    for head in (db, connect(lake).open_db("big")):
        tablets = head.list_tablets("t")
        assert len(tablets) >= ROWS // 20_000
        assert sum(t["count"] for t in tablets) == ROWS
        assert head.describe_table("t")["patch"]["count"] == 0
        assert same_columns(head.to_arrow("t"), expected)

    # Update a third of the rows and delete some: tablets are rewritten, data exact.
    update = data.slice(0, ROWS // 3)
    update = update.set_column(1, "price", pa.compute.negate(update.column("price")))
    gone = list(range(0, ROWS, 7))
    db = db.write("t", update).delete("t", gone).commit()
    new_ids, new_prices = update.column("id").to_pylist(), update.column("price").to_pylist()
    updated = dict(zip(new_ids, new_prices, strict=True))
    ids = expected.column("id").to_numpy()
    keep = ~np.isin(ids, np.array(gone))
    old_prices = expected.column("price").to_pylist()
    prices = [updated.get(k, p) for k, p in zip(ids.tolist(), old_prices, strict=True)]
    want = expected.set_column(1, "price", pa.array(prices)).filter(pa.array(keep))
    head = connect(lake).open_db("big")
    assert head.describe_table("t")["count"] == want.num_rows
    assert same_columns(head.to_arrow("t"), want)
    assert len(head.list_tablets("t")) > 0
    assert same_columns(
        head.to_arrow("t", fields=["name"], from_pk=1000, to_pk=1999),
        want.select(["id", "name"]).filter(
            pa.compute.and_(
                pa.compute.greater_equal(want.column("id"), 1000),
                pa.compute.less_equal(want.column("id"), 1999),
            )
        ),
    )


def test_reading_a_missing_table_of_a_value(conn: merkle.Connection) -> None:
    db = conn.create_db("shop")
    with pytest.raises(NotFoundError, match="'t'"):
        db.to_arrow("t")
