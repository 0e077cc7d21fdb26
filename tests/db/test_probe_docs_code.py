"""Documented behaviour a tester found the code did not keep (each test failed before).

* A record's ``Decimal`` into a float field, or float into a decimal field, follows
  the rule an Arrow column already did (doc/api.md, "A value must fit its field"):
  the same number is stored, another is a SchemaError naming field, key and value
  (records were refused outright, with pyarrow's raw "Could not convert").
* A schema-free dict re-written in another key order is equal to the diff
  (doc/versions.md), so the commit makes no version (it made one whose diff was
  empty).
* ``merkle.verify`` on a closed connection to an empty lake, and
  ``get_policy``/``set_retention`` on any closed connection, raise UsageError (they
  returned a report, read the policy, and wrote it).
* ``at`` over a journal entry deleted from outside reports damage
  (IntegrityError, as ``get`` and ``history`` do), not "removed by retention".
* ``alter_schema(free=)`` of nanosecond times names the record's key and gives
  advice that fits the call (it said "read it as Arrow").
"""

from __future__ import annotations

import datetime
import decimal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import merkle
from merkle.errors import IntegrityError, SchemaError, UsageError
from merkle.gc import get_policy, set_retention
from merkle.refs import RefManager
from merkle.refs.entry import entry_key
from merkle.storage import open_store

D = decimal.Decimal

# -- decimals and floats in records ------------------------------------------------

#: (field type, the record's value, the value read back)
EXACT = {
    "Decimal into float64": (pa.float64(), D("0.5"), 0.5),
    "Decimal into float32": (pa.float32(), D("0.5"), 0.5),
    "Decimal with zeros into float64": (pa.float64(), D("2.50"), 2.5),
    "float into decimal": (pa.decimal128(5, 1), 2.5, D("2.5")),
    "negative whole Decimal": (pa.float64(), D("-3"), -3.0),
    "Decimal in a list": (pa.list_(pa.float64()), [1.0, D("0.25")], [1.0, 0.25]),
    "float in a struct": (
        pa.struct([("x", pa.decimal128(5, 2))]),
        {"x": 0.25},
        {"x": D("0.25")},
    ),
    "Decimal in a map": (pa.map_(pa.string(), pa.float64()), {"a": D("1.5")}, [("a", 1.5)]),
}

#: (field type, the record's value, a word the error must say)
INEXACT = {
    "Decimal into float64": (pa.float64(), D("0.1"), "0.1000000000000000055"),
    "Decimal into float32": (pa.float32(), D("0.1"), "0.100000001490116"),
    "Decimal beyond float64": (pa.float64(), D("1e400"), "range"),
    "float into decimal": (pa.decimal128(5, 1), 0.1, "scale (1)"),
    "NaN into decimal": (pa.decimal128(5, 1), float("nan"), "no nan"),
    "Decimal in a list": (pa.list_(pa.float64()), [D("0.3")], "0.2999999999999999888"),
    "float in a struct": (pa.struct([("x", pa.decimal128(5, 2))]), {"x": 0.2}, "scale (2)"),
}


def _number_table(kind: pa.DataType) -> Any:
    conn = merkle.connect("memory://")
    schema = pa.schema([("k", pa.int64()), ("f", kind)])
    return conn.create_db("s").create_table("t", key="k", schema=schema)


@pytest.mark.parametrize("case", list(EXACT))
def test_a_record_number_of_the_other_kind_is_stored_when_it_is_the_same_number(
    case: str,
) -> None:
    kind, value, stored = EXACT[case]
    db = _number_table(kind)
    assert db.write("t", [{"k": 7, "f": value}]).get_records("t", [7])[7]["f"] == stored
    assert db.upsert("t", [{"k": 7, "f": value}]).get_records("t", [7])[7]["f"] == stored


@pytest.mark.parametrize("case", list(INEXACT))
def test_a_record_number_of_the_other_kind_is_refused_when_it_is_another_number(
    case: str,
) -> None:
    kind, value, word = INEXACT[case]
    db = _number_table(kind)
    with pytest.raises(SchemaError) as caught:
        db.write("t", [{"k": 7, "f": value}])
    text = str(caught.value)
    for said in ("field 'f'", "key 7", word):
        assert said in text, text
    for raw in ("Could not convert", "expected, got"):  # pyarrow's own words
        assert raw not in text, text


def test_a_record_decimal_fits_a_float_field_as_an_arrow_decimal_column_does() -> None:
    db = _number_table(pa.float64())
    column = pa.array([D("0.5"), D("0.1")], pa.decimal128(3, 1))
    with pytest.raises(SchemaError, match="key 2"):
        db.write("t", pa.table({"k": [1, 2], "f": column}))
    with pytest.raises(SchemaError, match="key 2"):
        db.write("t", [{"k": 1, "f": D("0.5")}, {"k": 2, "f": D("0.1")}])
    assert db.write("t", [{"k": 1, "f": D("0.5")}]).to_arrow("t").column("f").to_pylist() == [0.5]


# -- a dict written in another order ------------------------------------------------

REORDERED = {
    "top-level dict": ({"a": 1, "b": 2}, {"b": 2, "a": 1}),
    "nested dict": ({"x": [{"p": 1, "q": D("1.5")}]}, {"x": [{"q": D("1.5"), "p": 1}]}),
    "dict beside a float": ({"n": -0.0, "a": 1}, {"a": 1, "n": -0.0}),
}


@pytest.mark.parametrize("free", [True, ["m"]], ids=["schema_free", "free field"])
@pytest.mark.parametrize("case", list(REORDERED))
def test_a_dict_in_another_order_makes_no_version(case: str, free: bool | list[str]) -> None:
    old, new = REORDERED[case]
    conn = merkle.connect("memory://")
    db = conn.create_db("s").create_table("t", key="k", schema_free=free)
    first = db.write("t", [{"k": 1, "m": old}, {"k": 2, "m": "x"}]).commit()
    again = first.write("t", [{"k": 1, "m": new}]).commit()
    assert again.version == first.version  # the diff would call it unchanged
    assert conn.open_db("s").version == first.version
    # A change the diff does see still makes a version.
    changed = first.write("t", [{"k": 1, "m": {"a": 1, "b": 3}}]).commit()
    assert changed.version == first.version + 1
    assert changed.diff(first)["t"].counts().updated == 1


# -- a closed connection ------------------------------------------------------------

CLOSED_CALLS: dict[str, Callable[[Any], Any]] = {
    "verify": merkle.verify,
    "get_policy": get_policy,
    "set_retention": lambda conn: set_retention(conn, keep_versions=3),
}


@pytest.mark.parametrize(
    ("call", "lake"),
    [
        ("verify", "empty"),  # verify of a lake with a journal was refused already
        *((call, lake) for call in ("get_policy", "set_retention") for lake in ("empty", "one")),
    ],
)
def test_a_closed_connection_is_refused(call: str, lake: str) -> None:
    conn = merkle.connect("memory://")
    if lake == "one":
        conn.create_db("s")
    conn.close()
    with pytest.raises(UsageError, match="is closed"):
        CLOSED_CALLS[call](conn)


# -- a journal entry deleted from outside ------------------------------------------


class _Clock:
    def __init__(self) -> None:
        self.value = datetime.datetime(2024, 5, 1, tzinfo=datetime.UTC)

    def __call__(self) -> datetime.datetime:
        self.value += datetime.timedelta(seconds=10)
        return self.value


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_at_over_a_deleted_entry_reports_damage_not_retention(version: int) -> None:
    store = open_store("memory://")
    refs = RefManager(store, now=_Clock())
    entries = [refs.commit("s", None, _root(0))]
    for i in range(1, 7):
        entries.append(refs.commit("s", entries[-1].version, _root(i)))
    store.delete(entry_key("s", 3))  # only outside damage deletes an entry
    fresh = RefManager(store)
    with pytest.raises(IntegrityError, match="missing below the head") as caught:
        fresh.at("s", entries[version].time)
    assert "retention" not in str(caught.value)
    assert caught.type is IntegrityError  # not NotFoundError (a KeyError too)
    for kept in (4, 5, 6):  # instants the gap does not touch still answer
        assert fresh.at("s", entries[kept].time).version == kept


def test_open_db_at_over_a_deleted_entry_reports_damage(tmp_path: Path) -> None:
    conn = merkle.connect(str(tmp_path))
    db = conn.create_db("s").create_table("t", key="k")
    for i in range(5):
        db = db.write("t", [{"k": i}]).commit()
    when = conn.refs.get("s", 2).time
    (tmp_path / entry_key("s", 3)).unlink()
    again = merkle.connect(str(tmp_path))
    for call in (lambda: again.open_db("s", at=when), lambda: again.open_db("s", version=3)):
        with pytest.raises(IntegrityError, match="missing below the head"):
            call()


def _root(i: int) -> str:
    from merkle.blocks.cid import CID

    return str(CID.of(repr(("s", i)).encode()))


# -- alter_schema(free=) of nanosecond times -----------------------------------------

NANOS = {
    "timestamp": (pa.timestamp("ns"), [0, 1000, 5]),
    "list": (pa.list_(pa.timestamp("ns")), [[0], [1000, None], [2000, 5]]),
    "struct": (pa.struct([("a", pa.duration("ns"))]), [{"a": 0}, None, {"a": 5}]),
    "map": (pa.map_(pa.string(), pa.time64("ns")), [[("x", 0)], [("y", 1000)], [("z", 5)]]),
}


@pytest.mark.parametrize("case", list(NANOS))
def test_freeing_nanoseconds_names_the_key_and_a_fitting_way_out(case: str) -> None:
    kind, values = NANOS[case]
    conn = merkle.connect("memory://")
    schema = pa.schema([("k", pa.int64()), ("n", kind)])
    data = pa.table({"k": [11, 22, 4242], "n": pa.array(values, kind)})
    db = conn.create_db("s").create_table("t", key="k", schema=schema).write("t", data).commit()
    with pytest.raises(UsageError) as caught:
        db.alter_schema("t", free=["n"])
    text = str(caught.value)
    for said in ("field 'n'", "key 4242", "leave the field typed"):
        assert said in text, text
    assert "read it as Arrow" not in text, text


# -- a diff of nested nanosecond times (found beside the above) ---------------------

NESTED_NANOS = {
    "list": (pa.list_(pa.time64("ns")), [7], [8]),
    "struct": (pa.struct([("a", pa.timestamp("ns", "UTC"))]), {"a": 5}, {"a": 6}),
    "map": (pa.map_(pa.string(), pa.duration("ns")), [("x", 1)], [("x", 2)]),
}


@pytest.mark.parametrize("case", list(NESTED_NANOS))
def test_a_diff_sees_a_change_of_nested_nanoseconds(case: str) -> None:
    kind, old, new = NESTED_NANOS[case]
    conn = merkle.connect("memory://")
    schema = pa.schema([("k", pa.int64()), ("n", kind)])
    db = conn.create_db("s").create_table("t", key="k", schema=schema)
    first = db.write("t", pa.table({"k": [1, 2], "n": pa.array([old, old], kind)})).commit()
    second = first.write("t", pa.table({"k": [1, 2], "n": pa.array([new, old], kind)})).commit()
    assert second.diff(first)["t"].counts().updated == 1  # raised "read it as Arrow"
