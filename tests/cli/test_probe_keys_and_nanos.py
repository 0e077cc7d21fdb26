"""Keys found as given, key-field errors that say what is wrong, nanoseconds in the output.

Each test reproduces a finding of an adversarial probe; its docstring says what
happened before.

- ``get_records`` keyed its result by the record's own key value, so a lookup of a
  naive-timestamp key by an aware datetime (or the reverse) found the record but
  ``found[key]`` raised KeyError, and ``merkle get``, which parses a key as an aware
  datetime, said "no record" for every key of a naive timestamp key field
  (doc/cli.md: a key copied from ``scan`` can be pasted back).
- ``update({1: {"k": 1, ...}})`` was refused as "changes the key field 'k'" though
  the value was the key's own; a record lacking one field of a composite key was
  said to have no value for all of them.
- ``merkle scan`` / ``get`` / ``diff`` refused a table holding a nanosecond time
  that is not a whole microsecond, so an export could not be loaded back
  (doc/cli.md, "Export, then load: the same records").
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pyarrow as pa
import pytest

import merkle
from merkle.errors import UsageError

from .helpers import Run

_NAIVE = dt.datetime(2024, 1, 1)
_AWARE = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)

# --- get_records keys its result by the key as given ---------------------------------


@pytest.fixture
def naive_events(conn: merkle.Connection) -> merkle.Database:
    """``d.events`` keyed by a naive timestamp, ``d.byhost`` by (host, naive timestamp)."""
    return (
        conn.create_db("d")
        .create_table("events", key="t")
        .write("events", [{"t": _NAIVE, "v": 1}, {"t": _NAIVE + dt.timedelta(hours=1), "v": 2}])
        .create_table("byhost", key=["host", "t"])
        .write("byhost", [{"host": "a", "t": _NAIVE, "v": 1}])
        .commit()
    )


@pytest.mark.parametrize("given", [_NAIVE, _AWARE], ids=["naive", "aware"])
def test_get_records_is_keyed_by_the_key_given(
    naive_events: merkle.Database, given: dt.datetime
) -> None:
    """Before: keyed by the record's naive key, so ``found[aware]`` raised KeyError."""
    found = naive_events.get_records("events", [given])
    assert list(found) == [given]
    assert found[given] == {"t": _NAIVE, "v": 1}  # the record keeps its naive key
    assert type(next(iter(found))) is dt.datetime
    assert next(iter(found)).tzinfo is given.tzinfo


def test_get_records_of_an_aware_key_field_by_a_naive_key(conn: merkle.Connection) -> None:
    """The other way round: a UTC key field looked up by the naive wall time."""
    db = conn.create_db("u").create_table("t", key="t").write("t", [{"t": _AWARE, "v": 1}])
    found = db.get_records("t", [_NAIVE])
    assert found[_NAIVE] == {"t": _AWARE, "v": 1}


def test_get_records_finds_a_key_given_in_two_forms_under_each(
    naive_events: merkle.Database,
) -> None:
    later = _AWARE + dt.timedelta(hours=1)
    found = naive_events.get_records("events", [later, _NAIVE, _AWARE, _AWARE])
    assert list(found) == [later, _NAIVE, _AWARE]  # in the order given
    assert found[_NAIVE] == found[_AWARE] == {"t": _NAIVE, "v": 1}
    assert found[later]["v"] == 2


def test_get_records_of_composite_keys_with_a_naive_part(naive_events: merkle.Database) -> None:
    found = naive_events.get_records("byhost", [("a", _AWARE), ("a", _NAIVE), ("b", _NAIVE)])
    assert found == {
        ("a", _AWARE): {"host": "a", "t": _NAIVE, "v": 1},
        ("a", _NAIVE): {"host": "a", "t": _NAIVE, "v": 1},
    }
    assert ("a", _AWARE) in found
    # a list (not a dict key) is keyed by the record's key tuple
    assert naive_events.get_records("byhost", [["a", _AWARE]]) == {
        ("a", _NAIVE): {"host": "a", "t": _NAIVE, "v": 1}
    }


@pytest.mark.parametrize("key", ["2024-01-01T00:00:00", "2024-01-01T00:00:00Z", "2024-01-01"])
def test_merkle_get_finds_a_naive_timestamp_key(
    run: Run, naive_events: merkle.Database, key: str
) -> None:
    """Before: exit 1, "no record in d.events for key 2024-01-01T00:00:00+00:00"."""
    scanned = run.ok("scan", "d", "events", "-f", "jsonl").stdout.splitlines()[0]
    assert json.loads(scanned)["t"] == "2024-01-01T00:00:00"
    assert run.ok("get", "d", "events", key, "-f", "jsonl").stdout == scanned + "\n"


def test_merkle_get_of_a_composite_key_with_a_naive_timestamp(
    run: Run, naive_events: merkle.Database
) -> None:
    out = run.ok("get", "d", "byhost", '["a", "2024-01-01T00:00:00"]', "-f", "jsonl").stdout
    assert json.loads(out) == {"host": "a", "t": "2024-01-01T00:00:00", "v": 1}


def test_merkle_get_pastes_back_every_key_scan_prints(
    run: Run, naive_events: merkle.Database
) -> None:
    rows = [json.loads(line) for line in run.ok("scan", "d", "events").stdout.splitlines()]
    keys = [row["t"] for row in reversed(rows)]
    out = run.ok("get", "d", "events", *keys, "-f", "jsonl").stdout.splitlines()
    assert [json.loads(line) for line in out] == list(reversed(rows))
    assert "2024-01-02T00:00:00" in run.fails("get", "d", "events", "2024-01-02T00:00:00")


# --- update and key fields -------------------------------------------------------------


@pytest.fixture
def memory() -> merkle.Connection:
    return merkle.connect("memory://")


def test_update_naming_the_key_field_with_its_own_value_is_taken(
    memory: merkle.Connection,
) -> None:
    """Before: "update of key 1 changes the key field 'k'", though write takes the same."""
    db = memory.create_db("x").create_table("t", key="k").write("t", [{"k": 1, "v": 1}]).commit()
    db = db.update("t", {1: {"k": 1, "v": 9}}).commit()
    assert list(db.scan("t")) == [{"k": 1, "v": 9}]
    db = db.update("t", {1: {"k": 1}})  # nothing else: changes nothing
    assert list(db.scan("t")) == [{"k": 1, "v": 9}]


def test_update_of_a_composite_key_naming_its_own_fields_is_taken(
    memory: merkle.Connection,
) -> None:
    db = memory.create_db("y").create_table("ev", key=["user", "seq"])
    db = db.write("ev", [{"user": "u1", "seq": 1, "v": 1}]).commit()
    db = db.update("ev", {("u1", 1): {"user": "u1", "seq": 1, "v": 5}}).commit()
    assert list(db.scan("ev")) == [{"user": "u1", "seq": 1, "v": 5}]


def test_update_setting_a_key_field_to_another_value_says_so(memory: merkle.Connection) -> None:
    db = memory.create_db("x").create_table("t", key="k").write("t", [{"k": 1, "v": 1}]).commit()
    with pytest.raises(UsageError, match=r"sets the key field 'k' to 2, another key") as info:
        db.update("t", {1: {"k": 2, "v": 9}})
    assert "delete it and write it under its new key" in str(info.value)
    assert list(db.scan("t")) == [{"k": 1, "v": 1}]


@pytest.mark.parametrize("key", [("u1",), "u1", ("u1", 1, 2)], ids=["short", "str", "long"])
def test_update_of_a_composite_key_of_the_wrong_size(
    memory: merkle.Connection, key: object
) -> None:
    """Before: a bare ValueError from zip() (or, for a string, its characters as the key)."""
    db = memory.create_db("y").create_table("ev", key=["user", "seq"])
    db = db.write("ev", [{"user": "u1", "seq": 1}]).commit()
    with pytest.raises(UsageError, match=r"the key \['user', 'seq'\] needs a tuple of 2 values"):
        db.update("ev", {key: {"v": 1}})


@pytest.mark.parametrize(
    ("record", "named"),
    [
        ({"user": "u1", "v": 3}, "the key field 'seq'"),
        ({"seq": 1, "v": 3}, "the key field 'user'"),
        ({"user": "u1", "seq": None}, "the key field 'seq'"),
        ({"v": 3}, "the key fields ['user', 'seq']"),
    ],
)
def test_a_missing_key_field_is_named_alone(
    memory: merkle.Connection, record: dict[str, object], named: str
) -> None:
    """Before: "has no value for the key fields ['user', 'seq']" whichever was missing."""
    db = memory.create_db("y").create_table("ev", key=["user", "seq"])
    for call in (db.write, db.upsert):
        with pytest.raises(UsageError) as info:
            call("ev", [record])
        assert str(info.value).endswith(f"has no value for {named}")


def test_a_missing_key_field_of_a_record_conformed_directly() -> None:
    from merkle.tablets.conform import KeyLayout, conform_records

    with pytest.raises(UsageError, match=r"record 0 has no value for the key field 'seq':"):
        conform_records([{"user": "u"}], None, KeyLayout.of(["user", "seq"]), None)


# --- nanoseconds in the command's output ----------------------------------------------

_N = 1_700_000_000_000_000_001  # 2023-11-14T22:13:20.000000001Z


def _ticks_table() -> pa.Table:
    return pa.table(
        {
            "id": [1, 2, 3],
            "at": pa.array([_N, _N + 999, None], pa.timestamp("ns", "UTC")),
            "naive": pa.array([_N, -1, 1_000], pa.timestamp("ns")),
            "zoned": pa.array([_N, -1, 1_000], pa.timestamp("ns", "America/New_York")),
            "tm": pa.array([1, 86_399_999_999_999, 1_000], pa.time64("ns")),
            "dur": pa.array([1, -1, 86_400_000_000_001], pa.duration("ns")),
            "lst": pa.array([[_N, None], [], None], pa.list_(pa.timestamp("ns", "UTC"))),
            "st": pa.array(
                [{"a": 5, "b": 1}, {"a": None, "b": 2_000}, None],
                pa.struct([("a", pa.int64()), ("b", pa.time64("ns"))]),
            ),
            "mp": pa.array(
                [[("x", 1)], [("y", -1_001)], None], pa.map_(pa.string(), pa.duration("ns"))
            ),
            "whole": pa.array([1_000, 2_000, 0], pa.timestamp("ns")),
        }
    )


@pytest.fixture
def ticks(conn: merkle.Connection) -> merkle.Database:
    return (
        conn.create_db("d").create_table("ticks", key="id").write("ticks", _ticks_table()).commit()
    )


_FIRST = {
    "id": 1,
    "at": "2023-11-14T22:13:20.000000001+00:00",
    "naive": "2023-11-14T22:13:20.000000001",
    "zoned": "2023-11-14T17:13:20.000000001-05:00",
    "tm": "00:00:00.000000001",
    "dur": "0:00:00.000000001",
    "lst": ["2023-11-14T22:13:20.000000001+00:00", None],
    "st": {"a": 5, "b": "00:00:00.000000001"},
    "mp": [["x", "0:00:00.000000001"]],
    "whole": "1970-01-01T00:00:00.000001",
}
_SECOND = {
    "id": 2,
    "at": "2023-11-14T22:13:20.000001+00:00",  # a whole microsecond: as Python writes it
    "naive": "1969-12-31T23:59:59.999999999",
    "zoned": "1969-12-31T18:59:59.999999999-05:00",
    "tm": "23:59:59.999999999",
    "dur": "-1 day, 23:59:59.999999999",
    "lst": [],
    "st": {"a": None, "b": "00:00:00.000002"},
    "mp": [["y", "-1 day, 23:59:59.999998999"]],
    "whole": "1970-01-01T00:00:00.000002",
}
_THIRD = {
    "id": 3,
    "naive": "1970-01-01T00:00:00.000001",
    "zoned": "1969-12-31T19:00:00.000001-05:00",
    "tm": "00:00:00.000001",
    "dur": "1 day, 0:00:00.000000001",
    "whole": "1970-01-01T00:00:00",
}


def test_scan_prints_nanoseconds_exactly(run: Run, ticks: merkle.Database) -> None:
    """Before: exit 1, "field 'at' (timestamp[ns, tz=UTC]) holds times to the nanosecond"."""
    out = run.ok("scan", "d", "ticks", "-f", "jsonl").stdout.splitlines()
    assert [json.loads(line) for line in out] == [_FIRST, _SECOND, _THIRD]
    listed = json.loads(run.ok("scan", "d", "ticks", "-f", "json").stdout)
    assert listed == [_FIRST, _SECOND, _THIRD]
    table = run.ok("scan", "d", "ticks", "-f", "table", "--fields", "at,dur").stdout
    assert "2023-11-14T22:13:20.000000001+00:00" in table
    assert "-1 day, 23:59:59.999999999" in table


def test_get_prints_nanoseconds_exactly(run: Run, ticks: merkle.Database) -> None:
    out = run.ok("get", "d", "ticks", "2", "1", "-f", "jsonl").stdout.splitlines()
    assert [json.loads(line) for line in out] == [_SECOND, _FIRST]


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_an_export_of_nanoseconds_loads_back(
    run: Run, ticks: merkle.Database, conn: merkle.Connection, tmp_path: Path, fmt: str
) -> None:
    """cli.md, "Export, then load: the same records": scan, then load the same records
    (no version), and into a new table of the same schema, the same Arrow data."""
    path = tmp_path / f"t.{fmt}"
    path.write_text(run.ok("scan", "d", "ticks", "-f", fmt).stdout)
    assert "no change" in run.ok("load", "d", "ticks", str(path)).stdout
    assert conn.open_db("d").version == ticks.version
    schema = ticks.describe_table("ticks")["schema"]
    conn.open_db("d").create_table("copy", key="id", schema=schema).commit()
    run.ok("load", "d", "copy", str(path))
    assert conn.open_db("d").to_arrow("copy").equals(_ticks_table())


def test_diff_prints_nanoseconds_exactly(run: Run, ticks: merkle.Database) -> None:
    ticks.update("ticks", {1: {"at": None}}).commit()
    rows = [json.loads(line) for line in run.ok("diff", "d", "-f", "jsonl").stdout.splitlines()]
    assert [(row["key"], row["change"]) for row in rows] == [(1, "update")]
    assert rows[0]["old"] == _FIRST
    assert rows[0]["new"] == {name: v for name, v in _FIRST.items() if name != "at"}


def test_whole_microsecond_nanosecond_fields_print_as_before(
    run: Run, conn: merkle.Connection
) -> None:
    """A nanosecond field whose times are whole microseconds is read as Python values,
    as ever: the same bytes in every format."""
    data = pa.table(
        {
            "id": [1, 2],
            "at": pa.array([1_000, 0], pa.timestamp("ns", "UTC")),
            "dur": pa.array([86_400_000_000_000, -1_000], pa.duration("ns")),
        }
    )
    conn.create_db("w").create_table("t", key="id").write("t", data).commit()
    assert run.ok("scan", "w", "t", "-f", "csv").stdout == (
        "id,at,dur\n"
        '1,1970-01-01T00:00:00.000001+00:00,"1 day, 0:00:00"\n'
        '2,1970-01-01T00:00:00+00:00,"-1 day, 23:59:59.999999"\n'
    )


def test_records_in_python_still_refuse_nanoseconds(ticks: merkle.Database) -> None:
    """The text is the command's: a Python record never holds it in place of a time."""
    with pytest.raises(UsageError, match="holds times to the nanosecond"):
        list(ticks.scan("ticks", fields=["at"]))
    with pytest.raises(UsageError, match="holds times to the nanosecond"):
        ticks.get_records("ticks", [1], fields=["dur"])


def test_a_duration_with_nine_digits_loads_into_its_unit(
    run: Run, conn: merkle.Connection, tmp_path: Path
) -> None:
    """Before: ``0:00:00.000000001`` was "not duration[ns]" (six digits only); finer than
    a coarser unit it is refused, never cut."""
    path = tmp_path / "d.jsonl"
    path.write_text(
        json.dumps({"k": 1, "n": "-1 day, 23:59:59.999999999", "u": "0:00:01.000002000"}) + "\n"
    )
    run.ok("db", "create", "e")
    run.ok(
        "load", "e", "t", str(path), "--key", "k", "--column-types", "n:duration[ns],u:duration[us]"
    )
    data = conn.open_db("e").to_arrow("t")
    assert data.column("n").cast(pa.int64()).to_pylist() == [-1]
    assert data.column("u").cast(pa.int64()).to_pylist() == [1_000_002]
    path.write_text(json.dumps({"k": 2, "u": "0:00:00.000000001"}) + "\n")
    line = run.fails("load", "e", "t", str(path))
    assert "finer than the field's unit (us)" in line
