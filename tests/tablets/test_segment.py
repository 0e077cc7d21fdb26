"""Segments: exact round trips of schema-free records, families, concat, bad input."""

from __future__ import annotations

import datetime
import decimal
import itertools
import math
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from merkle.errors import IntegrityError, UsageError
from merkle.tablets.keys import KeyCodec, key_codec
from merkle.tablets.segment import (
    BASE_FAMILY,
    CBOR_ENCODING,
    ENCODING_KEY,
    SEGMENT_CODEC,
    SEGMENT_COMPRESSION,
    arrow_to_records,
    cbor_field,
    concat_segments,
    decode_segment,
    encode_segment,
    is_cbor_field,
    join_families,
    normalize_arrow,
    project,
    records_to_arrow,
    split_families,
)

UTC = datetime.UTC
INT = key_codec("int")
KEY = "id"


# -- strict equality: True is not 1, 1.0 is not 1, -0.0 is not 0.0 -----------------


def assert_same(expected: Any, actual: Any, path: str = "value") -> None:
    assert type(actual) is type(expected), f"{path}: {actual!r} is not {expected!r}"
    if isinstance(expected, dict):
        assert set(actual) == set(expected), f"{path}: keys {set(actual)} != {set(expected)}"
        for name in expected:
            assert_same(expected[name], actual[name], f"{path}[{name!r}]")
    elif isinstance(expected, list):
        assert len(actual) == len(expected), f"{path}: {actual!r} != {expected!r}"
        for i, (x, y) in enumerate(zip(expected, actual, strict=True)):
            assert_same(x, y, f"{path}[{i}]")
    elif isinstance(expected, float):
        assert actual == expected or (math.isnan(actual) and math.isnan(expected)), path
        assert math.copysign(1, actual) == math.copysign(1, expected), f"{path}: sign of zero"
    elif isinstance(expected, datetime.datetime):
        assert actual == expected, f"{path}: {actual!r} != {expected!r}"
        assert (actual.utcoffset() is None) == (expected.utcoffset() is None), path
    else:
        assert actual == expected, f"{path}: {actual!r} != {expected!r}"


def without_none(records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in record.items() if v is not None} for record in records]


def round_trip(
    records: Sequence[Mapping[str, Any]], codec: KeyCodec = INT, key: str = KEY
) -> list[dict[str, Any]]:
    table = records_to_arrow(records, key_field=key, codec=codec)
    return arrow_to_records(decode_segment(encode_segment(table)), key_field=key, codec=codec)


# -- strategies -------------------------------------------------------------------------

timezones = st.one_of(
    st.none(),
    st.just(UTC),
    st.integers(-23 * 60, 23 * 60).map(
        lambda minutes: datetime.timezone(datetime.timedelta(minutes=minutes))
    ),
)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(1 << 63), (1 << 63) - 1),
    st.integers(),  # beyond 64 bits too
    st.floats(allow_nan=False),
    st.text(max_size=6),
    st.binary(max_size=6),
    st.datetimes(timezones=timezones),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.text(max_size=3), inner, max_size=3),
    ),
    max_leaves=6,
)
# One value type per field makes native columns likely; mixed makes CBOR likely.
field_values = st.one_of(
    values,
    st.sampled_from([st.integers(-5, 5), st.text(max_size=3), st.floats(allow_nan=False)]).flatmap(
        lambda strategy: strategy
    ),
    st.lists(st.integers(-5, 5) | st.none(), max_size=3),
)
field_names = st.one_of(
    st.sampled_from(["a", "b", "c", "é", "z z"]), st.text(min_size=1, max_size=4)
)


@st.composite
def record_lists(draw: st.DrawFn, max_size: int = 8) -> list[dict[str, Any]]:
    bodies = draw(
        st.lists(
            st.dictionaries(field_names.filter(lambda n: n != KEY), field_values, max_size=4),
            max_size=max_size,
        )
    )
    return [{KEY: i, **body} for i, body in enumerate(bodies)]


# -- records <-> Arrow <-> bytes ----------------------------------------------------------


@settings(deadline=None, max_examples=300)
@given(records=record_lists())
def test_records_round_trip_exactly(records: list[dict[str, Any]]) -> None:
    back = round_trip(records)
    assert_same(without_none(records), back)
    for record in back:
        assert next(iter(record)) == KEY


@settings(deadline=None, max_examples=50)
@given(records=record_lists())
def test_columns_follow_the_key_sorted_by_name(records: list[dict[str, Any]]) -> None:
    table = records_to_arrow(records, key_field=KEY, codec=INT)
    assert table.column_names[0] == KEY
    assert table.column_names[1:] == sorted(table.column_names[1:])
    for field in table.schema:
        assert is_cbor_field(field) == (field.metadata == {ENCODING_KEY: CBOR_ENCODING})
        assert table.column(field.name).null_count < max(len(table), 1)  # no all-None column


@pytest.mark.parametrize(
    ("column", "arrow_type"),
    [
        ([1, 2, None], pa.int64()),
        ([1.5, -0.0], pa.float64()),
        ([True, False], pa.bool_()),
        (["a", None, "é"], pa.string()),
        ([b"a", bytearray(b"\x00")], pa.binary()),
        ([datetime.datetime(2020, 1, 1)], pa.timestamp("us")),
        ([datetime.datetime(2020, 1, 1, tzinfo=UTC)], pa.timestamp("us", tz="UTC")),
        ([[1, None], []], pa.list_(pa.int64())),
        ([["a"], ["b", "c"]], pa.list_(pa.string())),
        ([np.int64(3), 4], pa.int64()),
    ],
)
def test_same_typed_fields_are_native(column: list[Any], arrow_type: pa.DataType) -> None:
    records = [{KEY: i, "f": value} for i, value in enumerate(column)]
    table = records_to_arrow(records, key_field=KEY, codec=INT)
    assert table.schema.field("f").type == arrow_type
    assert not is_cbor_field(table.schema.field("f"))
    expected = [
        {KEY: i, "f": bytes(v) if isinstance(v, bytearray) else v}
        for i, v in enumerate(column)
        if v is not None
    ]
    expected = [
        {k: (v.item() if isinstance(v, np.generic) else v) for k, v in r.items()} for r in expected
    ]
    assert_same(expected, [r for r in round_trip(records) if "f" in r])


@pytest.mark.parametrize(
    "column",
    [
        [1, 1.5],  # 1 must not become 1.0
        [True, 1],  # True must not become 1
        [1, "a"],
        [1 << 64, 1],
        [-(1 << 63) - 1],
        [{"x": 1}],
        [[1, 2], [1.5]],
        [[[1]], [2]],
        [[]],
        [(1, 2)],
        [datetime.datetime(2020, 1, 1), datetime.datetime(2020, 1, 1, tzinfo=UTC)],
        [datetime.datetime(1, 1, 1, tzinfo=datetime.timezone(datetime.timedelta(hours=5)))],
        [decimal.Decimal("1.10"), uuid.UUID(int=5), datetime.date(2020, 1, 2)],
    ],
)
def test_fields_without_one_exact_arrow_type_are_cbor(column: list[Any]) -> None:
    records = [{KEY: i, "f": value} for i, value in enumerate(column)]
    table = records_to_arrow(records, key_field=KEY, codec=INT)
    assert is_cbor_field(table.schema.field("f"))
    assert table.schema.field("f").type == pa.binary()
    back = round_trip(records)
    for record, value in zip(back, column, strict=True):
        expected = list(value) if isinstance(value, tuple) else value  # CBOR has one array type
        assert_same(expected, record["f"])


def test_none_is_absent() -> None:
    records = [{KEY: 1, "a": None, "b": 2}, {KEY: 2, "b": None}]
    table = records_to_arrow(records, key_field=KEY, codec=INT)
    assert table.column_names == [KEY, "b"]
    assert round_trip(records) == [{KEY: 1, "b": 2}, {KEY: 2}]
    assert records_to_arrow([], key_field=KEY, codec=INT).column_names == [KEY]


def test_aware_datetimes_come_back_in_utc() -> None:
    plus_two = datetime.timezone(datetime.timedelta(hours=2))
    value = datetime.datetime(2024, 1, 1, 12, tzinfo=plus_two)
    (record,) = round_trip([{KEY: 1, "t": value}])
    assert record["t"] == value
    assert record["t"].tzinfo is UTC


@pytest.mark.parametrize(
    ("spec", "keys"),
    [
        ("str", ["b", "a", ""]),
        ("tuple(int,reverse(str))", [(1, "a"), (1, "ab")]),
        ("timestamp", [datetime.datetime(2020, 1, 1, tzinfo=UTC)]),
        ("bytes", [b"\x00", b""]),
    ],
)
def test_other_key_codecs(spec: str, keys: list[Any]) -> None:
    codec = key_codec(spec)
    records = [{"pk": key, "v": i} for i, key in enumerate(keys)]
    assert round_trip(records, codec, "pk") == records


def test_fields_selects_columns_and_always_keeps_the_key() -> None:
    records = [{KEY: 1, "a": 1, "b": "x", "c": [1]}, {KEY: 2, "b": "y"}]
    table = records_to_arrow(records, key_field=KEY, codec=INT)
    assert arrow_to_records(table, key_field=KEY, codec=INT, fields=["b", "nope"]) == [
        {KEY: 1, "b": "x"},
        {KEY: 2, "b": "y"},
    ]
    assert arrow_to_records(table, key_field=KEY, codec=INT, fields=[]) == [{KEY: 1}, {KEY: 2}]
    with pytest.raises(UsageError, match="collection of field names"):
        arrow_to_records(table, key_field=KEY, codec=INT, fields="b")


# -- bad records ------------------------------------------------------------------------------

cyclic: list[Any] = []
cyclic.append(cyclic)


@pytest.mark.parametrize(
    ("records", "message"),
    [
        ([{KEY: 1}, [1, 2]], "record 1 is of type list, not a mapping"),
        ({KEY: 1}, "records must be a sequence of mappings, got a dict"),
        ([{"a": 1}], "record 0 has no key field 'id'"),
        ([{KEY: None, "a": 1}], "record 0 has no key field 'id'"),
        ([{KEY: 1, "": 2}], "field name in record 0 must be a non-empty string"),
        ([{KEY: 1, 5: 2}], "field name in record 0 must be a non-empty string"),
        ([{KEY: 1, "a": None, b"x": 1}], "non-empty string"),
        ([{KEY: 1, "x": 1}, {KEY: 2, "x": object()}], "field 'x' of the record with key 2"),
        ([{KEY: 1, "x": {"y": [datetime.timedelta(1)]}}], "holds timedelta .* cannot store"),
        ([{KEY: 1, "x": "\ud800"}], "cannot store"),
        ([{KEY: 1, "x": cyclic}], "cannot store"),
        ([{KEY: "1", "x": 1}], "does not fit key codec 'int'"),
        ([{KEY: True}], "does not fit key codec 'int'"),
    ],
)
def test_bad_records_are_usage_errors(records: list[Any], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        records_to_arrow(records, key_field=KEY, codec=INT)


def test_records_may_be_any_iterable() -> None:
    records = ({KEY: i, "a": i} for i in range(3))
    table = records_to_arrow(records, key_field=KEY, codec=INT)
    assert table.num_rows == 3


def test_bad_key_field_name() -> None:
    with pytest.raises(UsageError, match="key field name must be a non-empty string"):
        records_to_arrow([{"": 1}], key_field="", codec=INT)


# -- segment bytes -----------------------------------------------------------------------------


def test_segment_bytes_depend_only_on_content() -> None:
    records = [{KEY: i, "a": i * 2, "b": str(i)} for i in range(100)]
    table = records_to_arrow(records, key_field=KEY, codec=INT)
    rechunked = pa.concat_tables([table.slice(0, 10), table.slice(10, 50), table.slice(60)])
    assert rechunked.column(0).num_chunks == 3
    assert encode_segment(rechunked) == encode_segment(table)
    assert decode_segment(encode_segment(rechunked)).equals(table)


def test_segments_use_the_chosen_compression() -> None:
    table = records_to_arrow(
        [{KEY: i, "s": "x" * 50} for i in range(1000)], key_field=KEY, codec=INT
    )
    data = encode_segment(table)
    raw = pa.BufferOutputStream()
    with pa.ipc.new_stream(raw, table.schema) as writer:
        writer.write_table(table)
    assert SEGMENT_CODEC.name == SEGMENT_COMPRESSION == "lz4"
    assert len(data) < raw.getvalue().size  # compressed
    assert decode_segment(raw.getvalue().to_pybytes()).equals(table)  # readers take any codec
    zstd = encode_segment(table, compression=pa.Codec("zstd", compression_level=3))
    assert decode_segment(zstd).equals(table)  # segments written before pages used zstd


def test_empty_and_zero_column_segments_round_trip() -> None:
    empty = records_to_arrow([], key_field=KEY, codec=INT)
    assert decode_segment(encode_segment(empty)).schema.equals(empty.schema)
    no_columns = pa.table({"x": [1, 2, 3]}).select([])
    decoded = decode_segment(encode_segment(no_columns))
    assert (decoded.num_rows, decoded.num_columns) == (3, 0)


def test_field_metadata_survives_encoding() -> None:
    table = records_to_arrow([{KEY: 1, "m": [1, "a"]}], key_field=KEY, codec=INT)
    assert is_cbor_field(decode_segment(encode_segment(table)).schema.field("m"))


def two_batches() -> bytes:
    table = pa.table({"a": [1, 2]})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table, max_chunksize=1)
    return bytes(sink.getvalue().to_pybytes())


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "not a segment"),
        (b"not arrow at all", "not a segment"),
        (b"\xff\xff\xff\xff\x00\x00\x00\x00", "not a valid segment"),
        (b"\xff\xff\xff\xff\x10\x00\x00\x00garbage!\xff\xff\xff\xff\x00\x00\x00\x00", "valid"),
        (two_batches(), "one record batch, this block holds 2"),
    ],
)
def test_bad_segment_bytes_are_integrity_errors(data: bytes, message: str) -> None:
    with pytest.raises(IntegrityError, match=message):
        decode_segment(data)


def test_truncated_segment_is_an_integrity_error() -> None:
    data = encode_segment(records_to_arrow([{KEY: 1, "a": "x"}], key_field=KEY, codec=INT))
    for cut in (len(data) - 1, len(data) // 2, 8):
        with pytest.raises(IntegrityError):
            decode_segment(data[:cut])


def test_encode_segment_needs_a_table() -> None:
    with pytest.raises(UsageError, match="pyarrow Table"):
        encode_segment({"a": [1]})  # type: ignore[arg-type]


# -- families ----------------------------------------------------------------------------------


@settings(deadline=None, max_examples=100)
@given(records=record_lists(), data=st.data())
def test_families_split_and_join(records: list[dict[str, Any]], data: st.DataObject) -> None:
    table = records_to_arrow(records, key_field=KEY, codec=INT)
    fields = table.column_names[1:]
    groups = data.draw(
        st.lists(st.sampled_from(["f1", "f2", None]), min_size=len(fields), max_size=len(fields))
    )
    families: dict[str, set[str]] = {"f1": set(), "f2": set(), "unused": {"nope"}}
    for name, group in zip(fields, groups, strict=True):
        if group is not None:
            families[group].add(name)
    parts = split_families(table, key_field=KEY, families=families)
    assert set(parts) == {BASE_FAMILY, "f1", "f2", "unused"}
    assert parts[BASE_FAMILY].column_names[0] == KEY
    for family, members in families.items():
        assert set(parts[family].column_names) == members & set(fields)
        assert parts[family].num_rows == table.num_rows
    stored = {name: decode_segment(encode_segment(part)) for name, part in parts.items()}
    joined = join_families(stored)
    assert joined.equals(table)
    assert joined.schema.equals(table.schema, check_metadata=True)
    # A projection needs only the base and the families it names.
    subset = {name: stored[name] for name in (BASE_FAMILY, "f1")}
    wanted = families["f1"] | {
        name for name, group in zip(fields, groups, strict=True) if not group
    }
    assert arrow_to_records(join_families(subset), key_field=KEY, codec=INT) == [
        {k: v for k, v in r.items() if k == KEY or k in wanted} for r in round_trip(records)
    ]


@pytest.mark.parametrize(
    ("families", "message"),
    [
        ({"base": {"a"}}, "'base' is the family of fields in no family"),
        ({"f": {"a"}, "g": {"a"}}, "field 'a' is in families 'f' and 'g'"),
        ({"f": {KEY}}, "lists the key field"),
        ({"": {"a"}}, "family name must be a non-empty string"),
        ({"f": "a"}, "must list field names"),
        ({"f": {""}}, "field name in family 'f'"),
        (["f"], "must be a mapping"),
    ],
)
def test_bad_families_are_usage_errors(families: Any, message: str) -> None:
    table = records_to_arrow([{KEY: 1, "a": 1}], key_field=KEY, codec=INT)
    with pytest.raises(UsageError, match=message):
        split_families(table, key_field=KEY, families=families)


def test_join_families_checks_its_parts() -> None:
    table = records_to_arrow([{KEY: 1, "a": 1, "b": 2}], key_field=KEY, codec=INT)
    parts = split_families(table, key_field=KEY, families={"f": {"b"}})
    with pytest.raises(UsageError, match="needs the 'base' part"):
        join_families({"f": parts["f"]})
    with pytest.raises(IntegrityError, match="has 0 rows but the base has 1"):
        join_families({**parts, "f": parts["f"].slice(0, 0)})
    with pytest.raises(IntegrityError, match="appears in two families"):
        join_families({**parts, "g": parts[BASE_FAMILY].select(["a"])})


# -- concat ---------------------------------------------------------------------------------


@settings(deadline=None, max_examples=200)
@given(records=record_lists(max_size=12), data=st.data())
def test_concat_segments_round_trips(records: list[dict[str, Any]], data: st.DataObject) -> None:
    cuts = sorted(data.draw(st.lists(st.integers(0, len(records)), max_size=3)))
    bounds = [0, *cuts, len(records)]
    tables = [
        records_to_arrow(records[lo:hi], key_field=KEY, codec=INT)
        for lo, hi in itertools.pairwise(bounds)
    ]
    merged = concat_segments(tables, key_field=KEY)
    assert merged.column_names[0] == KEY
    assert merged.column_names[1:] == sorted(merged.column_names[1:])
    back = arrow_to_records(decode_segment(encode_segment(merged)), key_field=KEY, codec=INT)
    assert_same(without_none(records), back)


def test_concat_turns_type_conflicts_into_cbor_and_fills_missing_columns() -> None:
    a = records_to_arrow([{KEY: 1, "x": 1, "y": "s"}], key_field=KEY, codec=INT)
    b = records_to_arrow([{KEY: 2, "x": "one"}], key_field=KEY, codec=INT)
    c = records_to_arrow([{KEY: 3, "x": [1, 1.5], "z": 2.5}], key_field=KEY, codec=INT)
    merged = concat_segments([a, b, c], key_field=KEY)
    assert merged.column_names == [KEY, "x", "y", "z"]
    assert is_cbor_field(merged.schema.field("x"))
    assert merged.schema.field("y").type == pa.string()
    assert merged.schema.field("z").type == pa.float64()
    assert arrow_to_records(merged, key_field=KEY, codec=INT) == [
        {KEY: 1, "x": 1, "y": "s"},
        {KEY: 2, "x": "one"},
        {KEY: 3, "x": [1, 1.5], "z": 2.5},
    ]


def test_concat_promotes_null_columns_and_drops_empty_ones() -> None:
    a = pa.table({KEY: [1], "x": pa.nulls(1), "gone": pa.nulls(1, pa.int64())})
    b = records_to_arrow([{KEY: 2, "x": 5}], key_field=KEY, codec=INT)
    empty = pa.table({KEY: pa.array([], pa.null())})
    merged = concat_segments([a, empty, b], key_field=KEY)
    assert merged.schema == pa.schema([(KEY, pa.int64()), ("x", pa.int64())])
    assert merged.to_pylist() == [{KEY: 1, "x": None}, {KEY: 2, "x": 5}]


def test_concat_rejects_mixed_keys() -> None:
    a = records_to_arrow([{KEY: 1}], key_field=KEY, codec=INT)
    b = records_to_arrow([{KEY: "1"}], key_field=KEY, codec=key_codec("str"))
    with pytest.raises(UsageError, match="different key codecs"):
        concat_segments([a, b], key_field=KEY)
    with pytest.raises(UsageError, match="no key column"):
        concat_segments([a, pa.table({"x": [1]})], key_field=KEY)
    with pytest.raises(UsageError, match="at least one table"):
        concat_segments([], key_field=KEY)


# -- user-supplied Arrow ----------------------------------------------------------------------


def test_normalize_arrow_widens_sorts_and_drops() -> None:
    user = pa.table(
        {
            "z": pa.array([1, 2], pa.int8()),
            "s": pa.array(["a", None], pa.large_string()),
            KEY: pa.array([2, 1], pa.int32()),
            "nothing": pa.nulls(2, pa.string()),
            "t": pa.array([0, 1_000_000], pa.timestamp("s", tz="Asia/Tokyo")),
            "d": pa.array(["x", "y"]).dictionary_encode(),
            "l": pa.array([[1], []], pa.large_list(pa.int16())),
            "f": pa.array([0.5, None], pa.float32()),
            "big": pa.array([1 << 63, 1], pa.uint64()),
            "st": pa.array([{"p": 1}, None]),
            "day": pa.array([datetime.date(2020, 1, 1), None]),
        },
        metadata={"pandas": "{}"},
    )
    table = normalize_arrow(user, key_field=KEY, codec=INT)
    assert table.schema.metadata is None
    assert table.column_names == [KEY, "big", "d", "day", "f", "l", "s", "st", "t", "z"]
    types = {field.name: field.type for field in table.schema}
    assert types[KEY] == pa.int64()
    assert types["z"] == pa.int64()
    assert types["s"] == pa.string()
    assert types["d"] == pa.string()
    assert types["t"] == pa.timestamp("us", tz="UTC")
    assert types["l"] == pa.list_(pa.int64())
    assert types["f"] == pa.float64()
    for cbor in ("big", "st", "day"):
        assert is_cbor_field(table.schema.field(cbor)), cbor
    records = arrow_to_records(table, key_field=KEY, codec=INT)
    assert records[0] == {
        KEY: 2,
        "big": 1 << 63,
        "d": "x",
        "day": datetime.date(2020, 1, 1),
        "f": 0.5,
        "l": [1],
        "s": "a",
        "st": {"p": 1},
        "t": datetime.datetime(1970, 1, 1, tzinfo=UTC),
        "z": 1,
    }
    assert records[1] == {KEY: 1, "big": 1, "d": "y", "l": [], "t": records[1]["t"], "z": 2}


def test_normalize_arrow_takes_record_batches_and_keeps_cbor_columns() -> None:
    table = records_to_arrow([{KEY: 1, "m": [1, "a"]}], key_field=KEY, codec=INT)
    again = normalize_arrow(table.to_batches()[0], key_field=KEY, codec=INT)
    assert again.equals(table)
    assert is_cbor_field(again.schema.field("m"))


@pytest.mark.parametrize(
    ("table", "message"),
    [
        (pa.table({"x": [1]}), "no key column 'id'"),
        (pa.table({KEY: [1, None]}), "null"),
        (pa.table({KEY: ["a"]}), "does not fit key codec 'int'"),
        (pa.table({KEY: [1], "": [2]}), "column name must be a non-empty string"),
        (
            pa.Table.from_arrays(
                [pa.array([1]), pa.array([2]), pa.array([3])], names=[KEY, "a", "a"]
            ),
            "duplicate columns",
        ),
        (pa.table({KEY: [1], "t": pa.array([1], pa.timestamp("ns"))}), "finer than microseconds"),
        (pa.table({KEY: [1], "h": pa.array([datetime.time(1)])}), "cannot store"),
        (
            pa.table(
                [pa.array([1]), pa.array([b"\xff"])],
                schema=pa.schema([(KEY, pa.int64()), cbor_field("c")]),
            ),
            "malformed CBOR",
        ),
        (
            pa.table(
                [pa.array([1]), pa.array([1])],
                schema=pa.schema(
                    [
                        (KEY, pa.int64()),
                        pa.field("c", pa.int64(), metadata={ENCODING_KEY: CBOR_ENCODING}),
                    ]
                ),
            ),
            "marked CBOR",
        ),
        ({KEY: [1]}, "pyarrow Table or RecordBatch"),
    ],
)
def test_normalize_arrow_rejects_bad_tables(table: Any, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        normalize_arrow(table, key_field=KEY, codec=INT)


# -- projection ---------------------------------------------------------------------------------


def test_project() -> None:
    table = records_to_arrow([{KEY: 1, "a": 1, "b": 2, "c": 3}], key_field=KEY, codec=INT)
    assert project(table, None, key_field=KEY) is table
    assert project(table, {"c", "a", "missing"}, key_field=KEY).column_names == [KEY, "a", "c"]
    assert project(table, [], key_field=KEY).column_names == [KEY]
    with pytest.raises(UsageError, match="collection of field names"):
        project(table, "a", key_field=KEY)


def test_cbor_maps_keep_their_insertion_order() -> None:
    value = {"b": 1, "a": {"z": 2, "y": None}, "c": [1, "x"]}
    (record,) = round_trip([{KEY: 1, "m": value}])
    assert list(record["m"]) == ["b", "a", "c"]
    assert list(record["m"]["a"]) == ["z", "y"]
    assert record["m"] == value


def test_naive_datetimes_inside_cbor_stay_naive() -> None:
    naive = datetime.datetime(2020, 5, 17, 1, 2, 3, 456)
    (record,) = round_trip([{KEY: 1, "m": {"at": naive, "n": 1}}])
    assert record["m"]["at"] == naive
    assert record["m"]["at"].tzinfo is None


def _raw_strings(offsets: list[int], data: bytes) -> pa.Array:
    buffers = [None, pa.py_buffer(np.array(offsets, dtype=np.int32).tobytes()), pa.py_buffer(data)]
    return pa.Array.from_buffers(pa.string(), len(offsets) - 1, buffers)


def test_reads_check_string_bytes_for_safety_and_leave_utf8_to_writes() -> None:
    """A block's offsets are checked on every read (reading past a buffer must not
    happen, whoever wrote the block); its strings' UTF-8 was checked when written
    (``Table.prepare_rows``) and by ``validate``, not again on every read."""
    not_utf8 = pa.table({KEY: [1, 2], "v": _raw_strings([0, 1, 3], b"a\xff\xfe")})
    table = decode_segment(encode_segment(not_utf8))
    assert table.column("v").chunk(0).view(pa.binary()).to_pylist() == [b"a", b"\xff\xfe"]
    disordered = pa.table({KEY: [1, 2], "v": _raw_strings([0, 3, 1], b"abc")})
    with pytest.raises(IntegrityError, match="not a valid segment"):
        decode_segment(encode_segment(disordered))
