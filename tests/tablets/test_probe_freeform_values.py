"""Schema-free (CBOR) values: a diff and a merge see every change a read would show,
and a Decimal CBOR cannot give back exactly is refused instead of changed."""

from __future__ import annotations

import datetime
import decimal
from typing import Any

import cbor2
import pytest

import merkle
from merkle.errors import UsageError
from merkle.tablets.cbor import _cbor_encode

D = decimal.Decimal
UTC = datetime.UTC
TOKYO = datetime.timezone(datetime.timedelta(hours=9))

#: (old value, new value): equal to Python's ``==``, yet each reads back differently.
EXACT_CHANGES = {
    "decimal scale": (D("1.0"), D("1.00")),
    "datetime offset": (
        datetime.datetime(2020, 1, 1, tzinfo=UTC),
        datetime.datetime(2020, 1, 1, 9, tzinfo=TOKYO),
    ),
    "decimal in a list": ([1, D("2.5")], [1, D("2.50")]),
    "decimal in a dict": ({"a": {"p": D("0")}}, {"a": {"p": D("0.0")}}),
    "datetime in a dict": (
        {"t": datetime.datetime(2020, 1, 1, tzinfo=UTC)},
        {"t": datetime.datetime(2020, 1, 1, 9, tzinfo=TOKYO)},
    ),
    "int key to bool key": ({1: "x"}, {True: "x"}),
    "decimal key scale": ({D("1.0"): "x"}, {D("1.00"): "x"}),
    "decimal in a set": ({D("1.0"), 2}, {D("1.00"), 2}),
}


def _free_table(conn: Any, rows: list[dict[str, Any]]) -> Any:
    return conn.create_db("main").create_table("t", key="k", schema_free=["v"]).write("t", rows)


@pytest.mark.parametrize("case", list(EXACT_CHANGES))
def test_diff_and_merge_see_an_exact_change(case: str) -> None:
    old, new = EXACT_CHANGES[case]
    assert old == new  # what the comparison used to go by
    conn = merkle.connect("memory://")
    unchanged = {"k": 2, "v": {"a": 1, "b": [float("nan"), -0.0]}}
    reordered = {"k": 3, "v": {"b": [float("nan"), -0.0], "a": 1}}  # key order: no change
    main = _free_table(conn, [{"k": 1, "v": old}, unchanged, {"k": 3, "v": unchanged["v"]}])
    main = main.commit()
    dev = conn.create_db("dev", root=main)
    base = dev.version
    dev = dev.write("t", [{"k": 1, "v": new}, unchanged, reordered]).commit()

    changes = dev.diff(base)["t"]
    assert changes.counts().updated == 1
    assert [(r["key"], r["change"]) for r in changes.records()] == [(1, "update")]

    main.write("t", [{"k": 4, "v": "other"}]).commit()
    conn.merge("dev", "main")
    merged = conn.open_db("main").get_records("t", [1])[1]["v"]
    assert repr(merged) == repr(dev.get_records("t", [1])[1]["v"])


#: Decimals cbor2 writes as another value: NaN and infinities as floats, -0 as 0.
SPECIAL_DECIMALS = {
    "NaN": D("NaN"),
    "signalling NaN": D("sNaN"),
    "negative NaN": D("-NaN"),
    "Infinity": D("Infinity"),
    "-Infinity": D("-Infinity"),
    "-0": D("-0"),
    "-0.00": D("-0.00"),
    "-0E+3": D("-0E+3"),
}
PLACES = {
    "alone": lambda v: v,
    "in a list": lambda v: [D("1.5"), v],
    "in a dict": lambda v: {"a": D("0.00"), "b": {"c": v}},
    "as a dict key": lambda v: {v: 1},
    "beside a naive datetime": lambda v: [datetime.datetime(2020, 1, 1), v],
}


@pytest.mark.parametrize(
    ("name", "place"),
    [
        (name, place)
        for name in SPECIAL_DECIMALS
        for place in PLACES
        if not (SPECIAL_DECIMALS[name].is_snan() and place == "as a dict key")  # unhashable
    ],
)
def test_a_decimal_cbor_cannot_store_exactly_is_refused(name: str, place: str) -> None:
    value = PLACES[place](SPECIAL_DECIMALS[name])
    conn = merkle.connect("memory://")
    db = conn.create_db("d").create_table("t", key="k", schema_free=True).commit()
    with pytest.raises(UsageError, match=r"field 'v' of the record with key 7 .*instead"):
        db.write("t", [{"k": 7, "v": value}])
    assert list(conn.open_db("d").scan("t")) == []
    # The same place with an ordinary Decimal: stored with cbor2's bytes, read back exactly.
    kept = PLACES[place](D("-0.50"))
    if place != "beside a naive datetime":  # which cbor2 refuses; our own tag carries it
        assert _cbor_encode(kept) == cbor2.dumps(kept)
    db.write("t", [{"k": 7, "v": kept}]).commit()
    back = conn.open_db("d").get_records("t", [7])[7]["v"]
    assert repr(back) == repr(kept)
