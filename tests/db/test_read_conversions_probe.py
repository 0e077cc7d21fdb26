"""Reads that convert stored values (read-conversion probe, findings 10 and 11).

10: a value with no Python form read as a record was blamed on "a datetime holds
years 1 to 9999 in the field's time zone" whatever its kind (a duration has
no years and no zone: its limit is timedelta's 999,999,999 days).
11: to_pandas and to_polars of valid stored values raised pyarrow's, Polars'
or builtin errors; each is now converted losslessly where the library has a
form for it, or a UsageError naming the field.
"""

from __future__ import annotations

import datetime
import decimal
import uuid
from typing import Any

import pyarrow as pa
import pytest

import merkle
from merkle.errors import UsageError

pytest.importorskip("pandas")
polars = pytest.importorskip("polars")

_names = iter(range(1_000_000))


def _db(values: pa.Array, **more: pa.Array) -> Any:
    """A database whose table ``t`` has key ``k`` = 1.. and field ``v`` = ``values``."""
    columns = {"k": pa.array(range(1, len(values) + 1), pa.int64()), "v": values, **more}
    schema = pa.schema([(name, column.type) for name, column in columns.items()])
    conn = merkle.connect("memory://")
    db = conn.create_db(f"d{next(_names)}").create_table("t", key="k", schema=schema)
    return db.write("t", pa.table(columns, schema=schema)).commit()


def _record_error(values: pa.Array) -> str:
    with pytest.raises(UsageError) as caught:
        _db(values).get_records("t", [1])
    return str(caught.value)


# -- 10: the limit of the value's own kind -------------------------------------------------

_HUGE_SECONDS = 2**62  # about 5.3e13 days: far beyond a timedelta
_DAY_10183 = 3_000_000  # days after 1970: in year 10183


@pytest.mark.parametrize(
    "values",
    [
        pa.array([_HUGE_SECONDS], pa.duration("s")),
        pa.array([-_HUGE_SECONDS], pa.duration("ms")),
        pa.array([[0, _HUGE_SECONDS]], pa.list_(pa.duration("s"))),
        pa.array([{"d": _HUGE_SECONDS}], pa.struct([("d", pa.duration("s"))])),
    ],
    ids=["duration", "negative-duration-ms", "list-of-durations", "struct-member"],
)
def test_a_duration_beyond_timedelta_names_timedeltas_limit(values: pa.Array) -> None:
    message = _record_error(values)
    assert "timedelta" in message
    assert "999,999,999 days" in message
    assert "time zone" not in message
    assert "years" not in message
    assert "C int" not in message
    assert "field 'v'" in message
    assert "key 1" in message
    assert "to_arrow" in message


@pytest.mark.parametrize(
    "values",
    [
        pa.array([_DAY_10183], pa.date32()),
        pa.array([_DAY_10183 * 86_400_000], pa.date64()),
        pa.array([[_DAY_10183]], pa.large_list(pa.date32())),
    ],
    ids=["date32", "date64", "list-of-dates"],
)
def test_a_date_past_9999_names_a_dates_years_without_a_zone(values: pa.Array) -> None:
    message = _record_error(values)
    assert "a date is a Python date, which holds years 1 to 9999" in message
    assert "time zone" not in message
    assert "datetime" not in message
    assert "field 'v'" in message
    assert "key 1" in message
    assert "to_arrow" in message


def test_a_naive_timestamp_past_9999_has_no_zone_in_its_message() -> None:
    message = _record_error(pa.array([_DAY_10183 * 86_400], pa.timestamp("s")))
    assert "datetime, which holds years 1 to 9999" in message
    assert "time zone" not in message


def test_a_zoned_timestamp_names_its_zone_and_a_nested_one_utc_too() -> None:
    top = _record_error(pa.array([_DAY_10183 * 86_400], pa.timestamp("s", "Asia/Tokyo")))
    assert "years 1 to 9999 in the field's time zone (Asia/Tokyo)" in top
    nested = pa.array([[_DAY_10183 * 86_400]], pa.list_(pa.timestamp("s", "Asia/Tokyo")))
    assert "in UTC and in its time zone (Asia/Tokyo)" in _record_error(nested)


def test_the_member_that_fails_is_the_one_named() -> None:
    kind = pa.struct([("day", pa.date32()), ("span", pa.duration("s"))])
    message = _record_error(pa.array([{"day": 1, "span": _HUGE_SECONDS}], kind))
    assert "duration[s]" in message
    assert "999,999,999 days" in message
    assert "years" not in message
    message = _record_error(pa.array([{"day": _DAY_10183, "span": 1}], kind))
    assert "date32[day]" in message
    assert "years 1 to 9999" in message
    assert "timedelta" not in message


def test_the_first_failing_record_is_named_among_good_ones() -> None:
    values = pa.array([1, 2, _HUGE_SECONDS, 4], pa.duration("s"))
    with pytest.raises(UsageError, match=r"key 3 has no Python form.*timedelta"):
        _db(values).get_records("t", [1, 2, 3, 4])
    assert _db(values).get_records("t", [1])[1]["v"] == datetime.timedelta(seconds=1)


# -- 11: to_pandas and to_polars ------------------------------------------------------------


def _union() -> pa.Array:
    return pa.UnionArray.from_dense(
        pa.array([0], pa.int8()), pa.array([0], pa.int32()), [pa.array([1])], ["i"]
    )


@pytest.mark.parametrize(
    ("how", "values", "reason"),
    [
        ("to_pandas", pa.array([1], pa.time64("ns")), "non-zero nanoseconds"),
        ("to_pandas", pa.array([[1]], pa.list_(pa.time64("ns"))), "non-zero nanoseconds"),
        ("to_pandas", pa.array([_DAY_10183], pa.date32()), "year 10183"),
        ("to_pandas", _union(), "pandas has no union type"),
        ("to_polars", _union(), "Polars has no union type"),
        ("to_polars", pa.array([0], pa.timestamp("s", "+05:30")), "+05:30"),
        ("to_polars", pa.array([[0]], pa.list_(pa.timestamp("s", "+05:30"))), "+05:30"),
        (
            "to_polars",
            pa.array([decimal.Decimal("1E+2")], pa.decimal128(38, -2)),
            "at most 38 digits",
        ),
    ],
    ids=[
        "pandas-time-ns",
        "pandas-list-time-ns",
        "pandas-date-past-9999",
        "pandas-union",
        "polars-union",
        "polars-offset-zone",
        "polars-list-offset-zone",
        "polars-decimal-40-digits",
    ],
)
def test_a_value_the_library_cannot_take_is_a_usage_error_naming_the_field(
    how: str, values: pa.Array, reason: str
) -> None:
    db = _db(values, w=pa.array(["x"] * len(values)))
    with pytest.raises(UsageError) as caught:
        getattr(db, how)("t")
    message = str(caught.value)
    assert "field 'v'" in message
    assert str(values.type) in message
    assert reason in message
    assert "to_arrow" in message
    assert "fields=" in message
    assert "'w'" not in message
    assert "'k'" not in message
    frame = getattr(db, how)("t", fields=["w"])  # left out, the rest converts
    assert list(frame["w"]) == ["x"] * len(values)


def test_every_failing_field_is_named_in_one_error() -> None:
    db = _db(pa.array([1], pa.time64("ns")), u=_union(), w=pa.array(["x"]))
    with pytest.raises(UsageError) as caught:
        db.to_pandas("t")
    message = str(caught.value)
    assert "field 'v' (time64[ns])" in message
    assert "field 'u' (dense_union" in message
    assert "'w'" not in message
    assert "Read them as Arrow" in message


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        (
            pa.array([[uuid.UUID(int=7).bytes]], pa.list_(pa.binary(16))).cast(pa.list_(pa.uuid())),
            [uuid.UUID(int=7).bytes],  # as pyarrow gives a uuid inside a struct: its bytes
        ),
        (
            pa.array([[uuid.UUID(int=7).bytes]], pa.large_list(pa.binary(16))).cast(
                pa.large_list(pa.uuid())
            ),
            [uuid.UUID(int=7).bytes],
        ),
        (pa.array([[b"a", None]], pa.list_(pa.binary_view())), [b"a", None]),
        (pa.array([[b"ab"]], pa.list_(pa.binary(2))), [b"ab"]),
        (pa.array([["a", "b"]], pa.list_(pa.string_view())), ["a", "b"]),
    ],
    ids=["list-uuid", "large-list-uuid", "list-binary-view", "list-fixed-binary", "list-str-view"],
)
def test_to_pandas_takes_nested_views_and_extensions_as_their_plain_values(
    values: pa.Array, expected: list[Any]
) -> None:
    frame = _db(values).to_pandas("t")
    assert list(frame["v"][0]) == expected


def test_to_pandas_keeps_a_top_level_uuid_and_views_as_before() -> None:
    values = pa.array([uuid.UUID(int=7).bytes], pa.binary(16)).cast(pa.uuid())
    assert _db(values).to_pandas("t")["v"][0] == uuid.UUID(int=7)
    assert _db(pa.array(["a"], pa.string_view())).to_pandas("t")["v"][0] == "a"


@pytest.mark.parametrize(
    ("values", "digits"),
    [
        (pa.array([decimal.Decimal("12300")], pa.decimal128(5, -2)), 7),
        (pa.array([decimal.Decimal("-99999E+3")], pa.decimal128(5, -3)), 8),
        (pa.array([decimal.Decimal("12300")], pa.decimal256(5, -2)), 7),
        (pa.array([decimal.Decimal("9" * 36 + "00")], pa.decimal128(36, -2)), 38),
    ],
    ids=["decimal128-scale-2", "negative-scale-3", "decimal256-scale-2", "38-digits"],
)
def test_to_polars_reads_a_negative_scale_as_scale_0_exactly(values: pa.Array, digits: int) -> None:
    frame = _db(values).to_polars("t")
    assert frame.schema["v"] == polars.Decimal(digits, 0)
    assert frame["v"].to_list() == [decimal.Decimal(int(values[0].as_py()))]


def test_to_polars_reads_a_negative_scale_inside_a_list() -> None:
    values = pa.array([[decimal.Decimal("12300"), None]], pa.list_(pa.decimal128(5, -2)))
    frame = _db(values).to_polars("t")
    assert frame.schema["v"] == polars.List(polars.Decimal(7, 0))
    assert frame["v"].to_list() == [[decimal.Decimal(12300), None]]
