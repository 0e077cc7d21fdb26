"""Table schemas (issue 11, points 1 and 2): exact Arrow types, one schema per table, evolution.

Each test of a finding of the issue first shows what a user saw before the
change (in the test's docstring) and checks the behaviour that replaces it.
"""

from __future__ import annotations

import datetime
import decimal
import zoneinfo
from typing import Any

import pyarrow as pa
import pytest
from conftest import Lake

import merkle
from merkle.blocks.cid import CID
from merkle.blocks.codec import check_node
from merkle.db.dbroot import DbRoot
from merkle.errors import IntegrityError, SchemaError, UsageError
from merkle.tablets import Table
from merkle.tablets.nodes import TABLE
from merkle.tablets.schema import free_field

from .conftest import Connect

BERLIN = zoneinfo.ZoneInfo("Europe/Berlin")


def _typed() -> pa.Table:
    return pa.table(
        {
            "id": pa.array([3, 1, 2], pa.int32()),
            "price": pa.array(
                [decimal.Decimal("1.20"), None, decimal.Decimal("99.99")], pa.decimal128(10, 2)
            ),
            "at": pa.array(
                [datetime.datetime(2024, 5, d, 12, tzinfo=BERLIN) for d in (1, 2, 3)],
                pa.timestamp("ms", tz="Europe/Berlin"),
            ),
            "addr": pa.array(
                [{"city": "Wien", "zip": 1010}, None, {"city": "Graz", "zip": None}],
                pa.struct([("city", pa.string()), ("zip", pa.int16())]),
            ),
            "a_small": pa.array([1, -2, None], pa.int8()),
        }
    )


def test_arrow_in_is_arrow_out_in_the_order_written(lake: Lake, connect: Connect) -> None:
    """Before: decimal and struct came back as CBOR binary, int32 as int64, the zone as UTC,
    and the columns in alphabetical order."""
    data = _typed()
    conn = connect(lake)
    conn.create_db("shop").create_table("t", key="id").write("t", data).commit()
    back = connect(lake).open_db("shop").to_arrow("t")
    assert back.schema.equals(data.schema)
    assert back.column_names == ["id", "price", "at", "addr", "a_small"]
    assert back.to_pylist() == data.sort_by("id").to_pylist()
    described = connect(lake).open_db("shop").describe_table("t")["schema"]
    assert described.equals(data.schema)


def test_a_value_that_does_not_fit_is_a_schema_error(conn: merkle.Connection) -> None:
    """Before: one string in an int column turned the whole column into CBOR binary."""
    db = conn.create_db("shop").create_table("t", key="id")
    db = db.write("t", [{"id": i, "qty": i} for i in range(10)]).commit()
    with pytest.raises(SchemaError) as caught:
        db.write("t", [{"id": 10, "qty": 5}, {"id": 11, "qty": "many"}])
    message = str(caught.value)
    for part in ("table 't'", "'qty'", "int64", "key 11", "'many'"):
        assert part in message, (part, message)
    assert isinstance(caught.value, UsageError)
    # Arrow data too: a string column is never parsed into numbers.
    with pytest.raises(SchemaError, match="'qty' is int64, but the data holds string"):
        db.write("t", pa.table({"id": [12], "qty": ["12"]}))
    with pytest.raises(SchemaError, match=r"1\.5"):
        db.write("t", [{"id": 13, "qty": 1.5}])
    assert db.to_arrow("t").schema.field("qty").type == pa.int64()


def test_values_that_fit_exactly_are_accepted(conn: merkle.Connection) -> None:
    db = conn.create_db("shop").create_table("t", key="id").write("t", _typed()).commit()
    db = db.write("t", pa.table({"id": pa.array([4], pa.int64()), "a_small": [100]}))
    assert db.to_arrow("t").schema.field("a_small").type == pa.int8()
    with pytest.raises(SchemaError, match="300"):
        db.write("t", pa.table({"id": [5], "a_small": [300]}))  # beyond int8
    with pytest.raises(SchemaError, match="'id'"):
        db.write("t", pa.table({"id": [2**40], "a_small": [1]}))  # beyond the int32 key


_MIDNIGHT = datetime.datetime(2026, 1, 1)
#: field type, a Python value pyarrow cut or rounded into it without a word, one that fits.
_LOSSY: dict[str, tuple[pa.DataType, Any, Any]] = {
    "date32": (pa.date32(), datetime.datetime(2026, 1, 1, 12, 30), _MIDNIGHT),
    "date64": (pa.date64(), datetime.datetime(2026, 1, 1, 0, 0, 1), datetime.date(2026, 1, 1)),
    "timestamp_s": (
        pa.timestamp("s"),
        _MIDNIGHT.replace(microsecond=500_000),
        _MIDNIGHT.replace(second=5),
    ),
    "timestamp_ms_utc": (
        pa.timestamp("ms", tz="UTC"),
        _MIDNIGHT.replace(microsecond=1, tzinfo=datetime.UTC),
        _MIDNIGHT.replace(microsecond=2_000, tzinfo=datetime.UTC),
    ),
    "time32_s": (pa.time32("s"), datetime.time(1, 2, 3, 4), datetime.time(1, 2, 3)),
    "duration_s": (
        pa.duration("s"),
        datetime.timedelta(seconds=1.5),
        datetime.timedelta(days=2),
    ),
    "float32": (pa.float32(), 0.1, 0.5),
    "float32_range": (pa.float32(), 1e39, -(2.0**100)),
}


@pytest.mark.parametrize("name", sorted(_LOSSY))
def test_a_record_value_a_field_would_cut_or_round_is_a_schema_error(
    conn: merkle.Connection, name: str
) -> None:
    """Before: pyarrow cut or rounded these dict values into the field without a word,
    while the same values as Arrow data were refused."""
    kind, lossy, fits = _LOSSY[name]
    schema = pa.schema([("id", pa.int64()), ("v", kind)])
    db = conn.create_db(f"d_{name}").create_table("t", key="id", schema=schema)
    db = db.write("t", [{"id": 1, "v": fits}]).commit()
    for change in (
        lambda: db.write("t", [{"id": 2, "v": lossy}]),
        lambda: db.update("t", {1: {"v": lossy}}),
    ):
        with pytest.raises(SchemaError, match=r"'v' .*key [12].* does not fit it"):
            change()
    assert db.to_arrow("t").column("v").to_pylist() == pa.array([fits], kind).to_pylist()


def test_mixed_values_in_a_first_write_are_refused_unless_declared_free(
    conn: merkle.Connection,
) -> None:
    records: list[dict[str, Any]] = [{"k": 1, "v": 1}, {"k": 2, "v": "a"}, {"k": 3, "v": [1]}]
    db = conn.create_db("shop").create_table("t", key="k")
    with pytest.raises(SchemaError, match="different kinds"):
        db.write("t", records)
    free = db.create_table("f", key="k", schema_free=["v"]).write("f", records).commit()
    assert list(free.scan("f")) == records
    everything = db.create_table("g", key="k", schema_free=True).write("g", records)
    assert list(everything.scan("g")) == records
    # ints and floats together are numbers: float64.
    nums = db.write("t", [{"k": 1, "v": 1}, {"k": 2, "v": 2.5}])
    assert nums.to_arrow("t").schema.field("v").type == pa.float64()


def test_a_declared_schema_is_kept_and_enforced(conn: merkle.Connection) -> None:
    schema = pa.schema(
        [
            pa.field("user", pa.string(), nullable=False),
            pa.field("n", pa.int16(), nullable=False),
            pa.field("note", pa.large_string()),
            free_field("extra"),
        ]
    )
    db = conn.create_db("shop").create_table("t", key="user", schema=schema)
    assert db.describe_table("t")["schema"].equals(schema)
    assert db.describe_table("t")["key_codec"] == "str"
    with pytest.raises(SchemaError, match="'n' is not nullable"):
        db.write("t", [{"user": "a", "note": "x"}])
    db = db.write("t", [{"user": "a", "n": 1, "extra": {"any": [1, "thing"]}}]).commit()
    assert db.to_arrow("t").schema.equals(schema)
    assert db.get_records("t", ["a"]) == {
        "a": {"user": "a", "n": 1, "extra": {"any": [1, "thing"]}}
    }
    with pytest.raises(SchemaError, match="key"):
        conn.create_db("other").create_table("t", key="id", schema=schema)


def test_alter_schema_follows_the_rules(conn: merkle.Connection) -> None:
    db = conn.create_db("shop").create_table("t", key="id", tablet_size_limit=5, patch_limit=4)
    data = pa.table(
        {
            "id": pa.array(range(20), pa.int32()),
            "n": pa.array(range(20), pa.int32()),
            "f": pa.array([0.5] * 20, pa.float32()),
            "s": ["x"] * 20,
        }
    )
    db = db.write("t", data).commit().write("t", [{"id": 100, "n": 7}])  # pending too
    with pytest.raises(SchemaError, match="cannot widen field 'n' from int32 to int16"):
        db.alter_schema("t", widen={"n": pa.int16()})
    with pytest.raises(SchemaError, match="key field"):
        db.alter_schema("t", drop=["id"])
    with pytest.raises(SchemaError, match="has it already"):
        db.alter_schema("t", add={"s": pa.string()})
    db = db.alter_schema(
        "t",
        widen={"n": pa.int64(), "f": pa.float64()},
        rename={"s": "label"},
        add=[pa.field("new", pa.date32(), nullable=False)],
    ).commit()
    schema = db.describe_table("t")["schema"]
    assert [(f.name, str(f.type), f.nullable) for f in schema] == [
        ("id", "int32", True),
        ("n", "int64", True),
        ("f", "double", True),
        ("label", "string", True),
        ("new", "date32[day]", True),  # an added field is always nullable
    ]
    db = db.write("t", [{"id": 101, "n": 2**40}]).commit()  # fits now
    assert db.get_records("t", [3])[3] == {"id": 3, "n": 3, "f": 0.5, "label": "x"}
    db = db.alter_schema("t", drop=["label"], free=["f"]).commit()
    db = db.write("t", [{"id": 102, "f": "any value now"}]).commit()
    assert db.get_records("t", [3, 102]) == {
        3: {"id": 3, "n": 3, "f": 0.5},
        102: {"id": 102, "f": "any value now"},
    }
    # A dropped field added again starts empty: its old values are gone.
    db = db.alter_schema("t", add={"label": pa.string()}).commit()
    assert db.get_records("t", [3])[3] == {"id": 3, "n": 3, "f": 0.5}


def test_alter_schema_replays_on_a_concurrent_commit(lake: Lake, connect: Connect) -> None:
    first, second = connect(lake), connect(lake)
    db = first.create_db("shop").create_table("t", key="id")
    db.write(
        "t", pa.table({"id": pa.array([1], pa.int32()), "n": pa.array([1], pa.int32())})
    ).commit()
    widen = first.open_db("shop").alter_schema("t", widen={"n": pa.int64()})
    second.open_db("shop").write(
        "t", pa.table({"id": [2], "n": pa.array([2], pa.int32())})
    ).commit()
    done = widen.commit()
    head = connect(lake).open_db("shop")
    assert done.version == head.version == 3
    assert head.to_arrow("t").to_pylist() == [{"id": 1, "n": 1}, {"id": 2, "n": 2}]
    assert head.to_arrow("t").schema.field("n").type == pa.int64()


def test_a_table_root_with_a_schema_is_format_version_3(conn: merkle.Connection) -> None:
    # Version 2 until field identities (tests/tablets/test_node_versions_for_old_readers.py).
    db = conn.create_db("shop").create_table("t", key="id").write("t", _typed()).commit()
    node = conn.blocks.get_node(CID.parse(db.describe_table("t")["id"]))
    assert node["v"] == 3
    with pytest.raises(IntegrityError, match="upgrade merkle-db"):
        check_node(node, TABLE)  # what a merkle-db from before schemas does with it


def _legacy_lake(conn: merkle.Connection) -> merkle.Database:
    """Database 'old' whose table 't' was written as merkle-db wrote tables before schemas."""
    conn.create_db("old")
    records: list[dict[str, Any]] = [{"k": i, "v": i if i % 3 else f"s{i}"} for i in range(30)]
    table = Table.new(conn.tables, key_field="k", key_codec="int")  # a version 1 root
    table = table.write(records, version=1).flush()
    with conn.writer_lease() as ticket:
        cid = table.save()
        node = DbRoot({"t": cid}).to_node()
        root = conn.blocks.put_node(node, refresh_before=ticket.lease.start)
        conn.refs.commit("old", 0, str(root))
    return conn.open_db("old")


def test_lakes_written_before_schemas_keep_reading(lake: Lake, connect: Connect) -> None:
    conn = connect(lake)
    old = _legacy_lake(conn)
    node = conn.blocks.get_node(CID.parse(old.describe_table("t")["id"]))
    assert node["v"] == 1
    assert "schema" not in node
    assert old.describe_table("t")["schema"] is None
    assert old.get_records("t", [3, 4]) == {3: {"k": 3, "v": "s3"}, 4: {"k": 4, "v": 4}}
    assert old.to_arrow("t").num_rows == 30
    assert sum(b.num_rows for b in old.to_batches("t")) == 30
    # Writing keeps the old record model (and the old format version).
    old = old.write("t", [{"k": 100, "v": [1, "mixed"]}]).commit()
    reopened = connect(lake).open_db("old")
    assert reopened.get_records("t", [100]) == {100: {"k": 100, "v": [1, "mixed"]}}
    assert conn.blocks.get_node(CID.parse(reopened.describe_table("t")["id"]))["v"] == 1
    with pytest.raises(SchemaError, match="before merkle-db kept schemas"):
        reopened.alter_schema("t", add={"x": pa.int64()})
