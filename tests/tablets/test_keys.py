"""Key codecs: round trip, order preservation, vectorised encoding, bad input.

The property tests draw random codec specs (scalars nested in tuples and
reverses) and compare the byte order of encodings with a Python comparator
written independently of the codecs.
"""

from __future__ import annotations

import datetime
import functools
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from merkle.errors import IntegrityError, UsageError
from merkle.tablets.keyindex import KeyIndex
from merkle.tablets.keys import KeyCodec, infer_key_codec, infer_key_codec_arrow, key_codec

INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1
UTC = datetime.UTC
EPOCH = datetime.datetime(1970, 1, 1, tzinfo=UTC)
US = datetime.timedelta(microseconds=1)
SCALARS = ("int", "float", "str", "bytes", "timestamp")


# -- a model of specs, values and their order, independent of the codecs -------


@dataclass(frozen=True)
class Spec:
    kind: str  # a scalar name, "tuple" or "reverse"
    children: tuple[Spec, ...] = ()

    def text(self) -> str:
        if self.kind in SCALARS:
            return self.kind
        return f"{self.kind}({','.join(child.text() for child in self.children)})"


def normal(spec: Spec, value: Any) -> Any:
    """What the codec should give back for ``value``."""
    if spec.kind == "float":
        return float(value) + 0.0
    if spec.kind == "timestamp":
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    if spec.kind == "bytes":
        return bytes(value)
    if spec.kind == "tuple":
        return tuple(normal(c, v) for c, v in zip(spec.children, value, strict=True))
    if spec.kind == "reverse":
        return normal(spec.children[0], value)
    return value


def compare(spec: Spec, a: Any, b: Any) -> int:
    """-1, 0 or 1: the order of two normalised values under ``spec``."""
    if spec.kind == "tuple":
        for child, x, y in zip(spec.children, a, b, strict=True):
            order = compare(child, x, y)
            if order:
                return order
        return 0
    if spec.kind == "reverse":
        return -compare(spec.children[0], a, b)
    return (a > b) - (a < b)


def sign(number: int) -> int:
    return (number > 0) - (number < 0)


def byte_order(a: bytes, b: bytes) -> int:
    return (a > b) - (a < b)


# -- strategies ----------------------------------------------------------------

EDGE_INTS = [0, 1, -1, INT64_MIN, INT64_MAX, INT64_MIN + 1, INT64_MAX - 1, 255, 256, -256]
EDGE_FLOATS = [
    0.0,
    -0.0,
    1.0,
    -1.0,
    float("inf"),
    float("-inf"),
    5e-324,
    -5e-324,
    1.7976931348623157e308,
]
EDGE_STRS = [
    "",
    "a",
    "ab",
    "a\x00",
    "a\x00b",
    "\x00",
    "\x00\x00",
    "\x01",
    "é",
    "\uffff",
    "\U0010ffff",
]
EDGE_BYTES = [b"", b"\x00", b"\x00\x00", b"\x00\x01", b"\x01", b"\xff", b"a", b"ab", b"a\x00"]
EDGE_TIMES = [
    datetime.datetime(1970, 1, 1),
    datetime.datetime(1970, 1, 1, 0, 0, 0, 1),
    datetime.datetime(1969, 12, 31, 23, 59, 59, 999999),
    datetime.datetime(1, 1, 1, tzinfo=UTC),
    datetime.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
]

timezones = st.one_of(
    st.none(),
    st.just(UTC),
    st.integers(-23 * 60, 23 * 60).map(
        lambda minutes: datetime.timezone(datetime.timedelta(minutes=minutes))
    ),
)

SCALAR_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "int": st.one_of(st.integers(INT64_MIN, INT64_MAX), st.sampled_from(EDGE_INTS)),
    "float": st.one_of(st.floats(allow_nan=False), st.sampled_from(EDGE_FLOATS)),
    "str": st.one_of(st.text(max_size=8), st.sampled_from(EDGE_STRS)),
    "bytes": st.one_of(st.binary(max_size=8), st.sampled_from(EDGE_BYTES)),
    "timestamp": st.one_of(
        st.datetimes(
            min_value=datetime.datetime(1, 1, 2),
            max_value=datetime.datetime(9999, 12, 30),
            timezones=timezones,
        ),
        st.sampled_from(EDGE_TIMES),
    ),
}

specs: st.SearchStrategy[Spec] = st.recursive(
    st.sampled_from(SCALARS).map(Spec),
    lambda inner: st.one_of(
        inner.map(lambda child: Spec("reverse", (child,))),
        st.lists(inner, min_size=1, max_size=3).map(lambda kids: Spec("tuple", tuple(kids))),
    ),
    max_leaves=5,
)


def values_of(spec: Spec) -> st.SearchStrategy[Any]:
    if spec.kind in SCALARS:
        return SCALAR_VALUES[spec.kind]
    if spec.kind == "reverse":
        return values_of(spec.children[0])
    return st.tuples(*(values_of(child) for child in spec.children))


def codec_of(spec: Spec) -> KeyCodec:
    codec = key_codec(spec.text())
    assert codec.spec == spec.text()
    return codec


# -- properties ------------------------------------------------------------------


@settings(deadline=None, max_examples=300)
@given(spec=specs, data=st.data())
def test_round_trip(spec: Spec, data: st.DataObject) -> None:
    codec = codec_of(spec)
    value = data.draw(values_of(spec))
    expected = normal(spec, value)
    assert codec.normalize(value) == expected
    encoded = codec.encode(value)
    assert isinstance(encoded, bytes)
    assert codec.decode(encoded) == expected
    assert codec.encode(expected) == encoded


@settings(deadline=None, max_examples=500)
@given(spec=specs, data=st.data())
def test_byte_order_is_value_order(spec: Spec, data: st.DataObject) -> None:
    codec = codec_of(spec)
    a, b = data.draw(values_of(spec)), data.draw(values_of(spec))
    expected = compare(spec, normal(spec, a), normal(spec, b))
    assert byte_order(codec.encode(a), codec.encode(b)) == sign(expected)


@settings(deadline=None, max_examples=200)
@given(spec=specs, data=st.data())
def test_sorting_by_bytes_sorts_values(spec: Spec, data: st.DataObject) -> None:
    codec = codec_of(spec)
    values = [normal(spec, v) for v in data.draw(st.lists(values_of(spec), max_size=12))]
    by_bytes = sorted(values, key=codec.encode)
    by_model = sorted(values, key=functools.cmp_to_key(functools.partial(compare, spec)))
    assert [codec.encode(v) for v in by_bytes] == [codec.encode(v) for v in by_model]


@settings(deadline=None, max_examples=200)
@given(spec=specs, data=st.data())
def test_arrow_columns_agree_with_python(spec: Spec, data: st.DataObject) -> None:
    codec = codec_of(spec)
    values = data.draw(st.lists(values_of(spec), max_size=12))
    column = codec.to_arrow(values)
    assert column.type.equals(codec.arrow_type)
    assert codec.to_python(column) == [normal(spec, v) for v in values]
    encoded = [codec.encode(v) for v in values]
    array = codec.encode_array(column)
    assert array.type == pa.binary()
    assert array.to_pylist() == encoded
    # Sliced (non-zero offset) and chunked columns give the same rows.
    start = data.draw(st.integers(0, len(values)))
    assert codec.encode_array(column.slice(start)).to_pylist() == encoded[start:]
    chunked = pa.chunked_array([column.slice(0, start), column.slice(start)], type=column.type)
    assert codec.encode_array(chunked).to_pylist() == encoded
    assert codec.to_python(chunked) == [normal(spec, v) for v in values]


@settings(deadline=None, max_examples=200)
@given(spec=specs, data=st.data())
def test_order_words_are_the_encodings_read_as_integers(spec: Spec, data: st.DataObject) -> None:
    """A key index built from a codec's order words finds exactly what one built from
    the binary encodings finds (pages of int, float and timestamp keys use the words)."""
    codec = codec_of(spec)
    values = data.draw(st.lists(values_of(spec), max_size=12))
    column = codec.to_arrow(values)
    words = codec.order_words(column)
    encoded = [codec.encode(v) for v in values]
    if words is None:  # allowed for any codec; the scalar 8-byte codecs must give words
        assert not values or spec.kind not in ("int", "float", "timestamp")
        return
    assert [int(w).to_bytes(8, "big") for w in words] == encoded
    start = data.draw(st.integers(0, len(values)))
    chunked = pa.chunked_array([column.slice(0, start), column.slice(start)], type=column.type)
    assert np.array_equal(codec.order_words(chunked), words)
    unique = sorted(set(encoded))
    keys = pa.array(unique, type=pa.binary())
    model = KeyIndex(keys)
    index = KeyIndex.of_words(
        np.array([int.from_bytes(e, "big") for e in unique], dtype=np.uint64), lambda: keys
    )
    probes = [*encoded, b"\x00" * 8, b"\xff" * 8]
    assert index.find(probes) == model.find(probes)
    assert [index.rank(p) for p in probes] == [model.rank(p) for p in probes]
    assert index.keys.equals(model.keys)
    assert len(index) == len(model)
    joined = KeyIndex.joined([index, index.of_words(np.array([], np.uint64), lambda: keys[:0])])
    assert joined.find(probes) == model.find(probes)


@settings(deadline=None, max_examples=200)
@given(name=st.sampled_from(SCALARS), data=st.data())
def test_natively_ordered_codecs_sort_natively(name: str, data: st.DataObject) -> None:
    codec = key_codec(name)
    assert codec.natively_ordered
    values = data.draw(st.lists(SCALAR_VALUES[name], max_size=20))
    column = codec.check_column(codec.to_arrow(values))
    native_sorted = column.take(pc.sort_indices(column))
    assert codec.encode_array(native_sorted).to_pylist() == sorted(codec.encode(v) for v in values)


@pytest.mark.parametrize("spec", ["tuple(int)", "reverse(int)", "reverse(str)", "tuple(str,int)"])
def test_composite_codecs_are_not_natively_ordered(spec: str) -> None:
    assert not key_codec(spec).natively_ordered


# -- the cases that must hold, spelled out ----------------------------------------

ORDERED_PAIRS = [
    ("str", "a", "ab"),
    ("str", "", "a"),
    ("str", "a", "a\x00"),
    ("str", "a\x00", "a\x01"),
    ("bytes", b"", b"\x00"),
    ("bytes", b"\x00", b"\x00\x00"),
    ("bytes", b"\x00", b"\x01"),
    ("int", INT64_MIN, INT64_MIN + 1),
    ("int", -1, 0),
    ("int", INT64_MAX - 1, INT64_MAX),
    ("float", float("-inf"), -1e308),
    ("float", -5e-324, 0.0),
    ("float", 0.0, 5e-324),
    ("float", 1e308, float("inf")),
    ("timestamp", EDGE_TIMES[2], EDGE_TIMES[0]),
    ("timestamp", EDGE_TIMES[0], EDGE_TIMES[1]),
    ("tuple(str,int)", ("a", 5), ("ab", 0)),
    ("tuple(str,str)", ("a", "b"), ("a\x00", "")),
    ("tuple(bytes,bytes)", (b"", b"\xff"), (b"\x00", b"")),
    ("tuple(int,reverse(str))", (1, "ab"), (1, "a")),
    ("reverse(str)", "ab", "a"),
    ("reverse(str)", "a", ""),
    ("reverse(str)", "a\x00", "a"),
    ("reverse(bytes)", b"\x00", b""),
    ("reverse(int)", 0, -1),
    ("reverse(float)", 0.0, -0.0 - 1e-300),
    ("reverse(tuple(str,str))", ("ab", ""), ("a", "b")),
    ("reverse(reverse(str))", "a", "ab"),
    ("tuple(reverse(str),str)", ("ab", "a"), ("a", "")),
]


@pytest.mark.parametrize(("spec", "smaller", "larger"), ORDERED_PAIRS)
def test_known_pairs_are_ordered(spec: str, smaller: Any, larger: Any) -> None:
    codec = key_codec(spec)
    assert codec.encode(smaller) < codec.encode(larger)
    assert codec.decode(codec.encode(smaller)) == codec.normalize(smaller)


def test_negative_zero_is_zero() -> None:
    codec = key_codec("float")
    assert codec.encode(-0.0) == codec.encode(0.0)
    assert str(codec.decode(codec.encode(-0.0))) == "0.0"
    column = codec.check_column(pa.array([-0.0, 1.0]))
    assert str(column[0].as_py()) == "0.0"
    assert codec.encode_array(pa.array([-0.0])).to_pylist() == [codec.encode(0.0)]


def test_top_level_strings_are_raw_utf8() -> None:
    assert key_codec("str").encode("héllo") == "héllo".encode()
    assert key_codec("bytes").encode(b"\x00ab") == b"\x00ab"
    assert key_codec("int").encode(0) == b"\x80" + b"\x00" * 7
    assert len(key_codec("timestamp").encode(EPOCH)) == 8


def test_timestamps_normalise_to_utc() -> None:
    codec = key_codec("timestamp")
    plus_two = datetime.timezone(datetime.timedelta(hours=2))
    aware = datetime.datetime(2024, 5, 1, 14, 0, tzinfo=plus_two)
    naive = datetime.datetime(2024, 5, 1, 12, 0)
    assert codec.encode(aware) == codec.encode(naive)
    decoded = codec.decode(codec.encode(aware))
    assert decoded == naive.replace(tzinfo=UTC)
    assert decoded.tzinfo is UTC
    assert codec.to_python(codec.to_arrow([aware]))[0].tzinfo is UTC
    assert codec.encode(EPOCH) < codec.encode(EPOCH + US)


def test_lists_normalise_to_tuples_and_ints_widen_to_float() -> None:
    assert key_codec("tuple(int,str)").normalize([1, "a"]) == (1, "a")
    assert key_codec("float").normalize(3) == 3.0
    assert key_codec("int").normalize(np.int32(7)) == 7
    assert key_codec("bytes").normalize(bytearray(b"x")) == b"x"


# -- specs ---------------------------------------------------------------------------


def test_specs_parse_to_canonical_form() -> None:
    codec = key_codec(" reverse( tuple( int , reverse(str) ) ) ")
    assert codec.spec == "reverse(tuple(int,reverse(str)))"
    assert codec == key_codec("reverse(tuple(int,reverse(str)))")
    assert codec.arrow_type == pa.struct([("0", pa.int64()), ("1", pa.string())])
    assert key_codec("reverse(timestamp)").arrow_type == pa.timestamp("us", tz="UTC")
    assert hash(codec) == hash(key_codec(codec.spec))


@pytest.mark.parametrize(
    "spec",
    ["", "integer", "tuple", "tuple()", "tuple(int,)", "reverse(int,str)", "int int", "tuple(int"],
)
def test_unknown_specs_are_usage_errors(spec: str) -> None:
    with pytest.raises(UsageError, match=r"key codec spec .* use one of .*tuple\("):
        key_codec(spec)


def test_spec_must_be_a_string() -> None:
    with pytest.raises(UsageError, match="a key codec spec is a string"):
        key_codec(5)  # type: ignore[arg-type]


# -- wrong keys --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "value", "reason"),
    [
        ("int", "1", "expected an int"),
        ("int", True, "expected an int"),
        ("int", 1.0, "expected an int"),
        ("int", 1 << 63, "64 bits"),
        ("int", INT64_MIN - 1, "64 bits"),
        ("float", float("nan"), "NaN"),
        ("float", "1.0", "expected a float"),
        ("float", False, "expected a float"),
        ("float", (1 << 53) + 1, "no exact float"),
        ("str", b"a", "expected a str"),
        ("str", "\ud800", "surrogate"),
        ("bytes", "a", "expected bytes"),
        ("timestamp", datetime.date(2020, 1, 1), "expected a datetime"),
        ("timestamp", 0, "expected a datetime"),
        ("tuple(int,str)", (1,), "tuple of 2"),
        ("tuple(int,str)", 1, "tuple of 2"),
        ("tuple(int,str)", (1, 2), "component 1"),
        ("reverse(int)", None, "expected an int"),
    ],
)
def test_wrong_keys_are_usage_errors(spec: str, value: Any, reason: str) -> None:
    codec = key_codec(spec)
    for method in (codec.encode, codec.normalize, lambda v: codec.to_arrow([v])):
        with pytest.raises(UsageError, match=reason) as info:
            method(value)
        message = str(info.value)
        assert repr(spec) in message
        assert type(value).__name__ in message


@pytest.mark.parametrize(
    ("spec", "data"),
    [
        ("int", b"\x80\x00"),
        ("int", b"\x80" + b"\x00" * 8),
        ("float", b"\xff\xf8" + b"\x00" * 6),  # a NaN pattern
        ("float", b"\x7f" + b"\xff" * 7),  # -0.0, never written
        ("str", b"\xff"),
        ("tuple(str)", b"abc"),
        ("tuple(str)", b"a\x00\x02\x00\x00"),
        ("tuple(str,int)", b"a\x00\x00"),
        ("reverse(str)", b"\x9e"),
        ("timestamp", b"\xff" * 8),
    ],
)
def test_malformed_bytes_are_integrity_errors(spec: str, data: bytes) -> None:
    with pytest.raises(IntegrityError, match=r"malformed key|outside the datetime range"):
        key_codec(spec).decode(data)


def test_decode_needs_bytes() -> None:
    with pytest.raises(UsageError, match="decodes bytes"):
        key_codec("int").decode("abc")  # type: ignore[arg-type]


# -- Arrow key columns ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "column", "expected"),
    [
        ("int", pa.array([1, 2], pa.int8()), [1, 2]),
        ("int", pa.array([1, 2], pa.uint32()), [1, 2]),
        ("float", pa.array([1.5, -0.0], pa.float32()), [1.5, 0.0]),
        ("float", pa.array([1, 2], pa.int16()), [1.0, 2.0]),
        ("str", pa.array(["a", "b"], pa.large_string()), ["a", "b"]),
        ("bytes", pa.array([b"ab"], pa.binary(2)), [b"ab"]),
        (
            "timestamp",
            pa.array([1_000], pa.timestamp("ms", tz="Europe/Paris")),
            [EPOCH + datetime.timedelta(seconds=1)],
        ),
        ("timestamp", pa.array([1_000], pa.timestamp("ns")), [EPOCH + US]),
        ("tuple(int,str)", pa.array([{"a": 1, "b": "x"}]), [(1, "x")]),
        ("reverse(str)", pa.array(["z"], pa.large_string()), ["z"]),
    ],
)
def test_check_column_widens_and_normalises(
    spec: str, column: pa.Array, expected: list[Any]
) -> None:
    codec = key_codec(spec)
    checked = codec.check_column(column)
    assert checked.type.equals(codec.arrow_type)
    assert codec.to_python(checked) == expected
    assert codec.encode_array(column).to_pylist() == [codec.encode(v) for v in expected]


@pytest.mark.parametrize(
    ("spec", "column", "reason"),
    [
        ("int", pa.array([1, None]), "null"),
        ("int", pa.array([1.0]), "integer column"),
        ("int", pa.array([True]), "integer column"),
        ("int", pa.array([1 << 63], pa.uint64()), "int64"),
        ("float", pa.array([1.0, float("nan")]), "NaN"),
        ("float", pa.array(["a"]), "floating-point"),
        ("str", pa.array([b"a"]), "string column"),
        ("bytes", pa.array(["a"]), "binary column"),
        ("timestamp", pa.array([1], pa.timestamp("ns")), "whole microseconds"),
        ("timestamp", pa.array([1], pa.int64()), "timestamp column"),
        ("tuple(int,str)", pa.array([1]), "struct column of 2"),
        ("tuple(int,str)", pa.array([{"a": 1, "b": None}]), "'b' holds nulls"),
        ("tuple(int,str)", pa.array([{"a": 1, "b": 2}]), "component 1"),
    ],
)
def test_check_column_rejects_bad_columns(spec: str, column: pa.Array, reason: str) -> None:
    codec = key_codec(spec)
    with pytest.raises(UsageError, match=reason):
        codec.check_column(column)
    with pytest.raises(UsageError, match=reason):
        codec.encode_array(column)


@given(spec=specs)
def test_empty_untyped_columns_take_the_codec_type(spec: Spec) -> None:
    codec = codec_of(spec)
    assert codec.check_column(pa.array([])).type.equals(codec.arrow_type)
    assert len(codec.encode_array(pa.chunked_array([], type=pa.null()))) == 0
    with pytest.raises(UsageError, match="null"):
        codec.check_column(pa.nulls(1))


def test_check_column_needs_an_arrow_array() -> None:
    with pytest.raises(UsageError, match="pyarrow Array"):
        key_codec("int").check_column([1, 2])  # type: ignore[arg-type]


def test_to_python_rejects_a_foreign_column() -> None:
    with pytest.raises(IntegrityError, match="does not belong"):
        key_codec("int").to_python(pa.array(["a"]))


# -- inference ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "spec"),
    [
        (1, "int"),
        (np.int64(1), "int"),
        (1.5, "float"),
        ("a", "str"),
        (b"a", "bytes"),
        (EPOCH, "timestamp"),
        ((1, "a", (b"x", 2.0)), "tuple(int,str,tuple(bytes,float))"),
        ([1, "a"], "tuple(int,str)"),
    ],
)
def test_infer_key_codec(value: Any, spec: str) -> None:
    assert infer_key_codec(value).spec == spec


@pytest.mark.parametrize("value", [True, None, {}, (), [], 1 << 64, float("nan"), object()])
def test_infer_key_codec_rejects_non_keys(value: Any) -> None:
    with pytest.raises(UsageError):
        infer_key_codec(value)


@pytest.mark.parametrize(
    ("dtype", "spec"),
    [
        (pa.int32(), "int"),
        (pa.uint8(), "int"),
        (pa.float32(), "float"),
        (pa.large_string(), "str"),
        (pa.binary(4), "bytes"),
        (pa.timestamp("ns", tz="UTC"), "timestamp"),
        (pa.struct([("x", pa.int64()), ("y", pa.string())]), "tuple(int,str)"),
    ],
)
def test_infer_key_codec_arrow(dtype: pa.DataType, spec: str) -> None:
    assert infer_key_codec_arrow(dtype).spec == spec


@pytest.mark.parametrize("dtype", [pa.bool_(), pa.list_(pa.int64()), pa.date32(), pa.null()])
def test_infer_key_codec_arrow_rejects_non_keys(dtype: pa.DataType) -> None:
    with pytest.raises(UsageError, match="cannot use an Arrow column"):
        infer_key_codec_arrow(dtype)


@example(spec=Spec("reverse", (Spec("str"),)))
@given(spec=specs)
def test_every_spec_has_an_empty_column(spec: Spec) -> None:
    codec = codec_of(spec)
    empty = codec.to_arrow([])
    assert len(codec.encode_array(empty)) == 0
    assert codec.to_python(empty) == []


# -- many keys at once (a lookup's keys) ------------------------------------------


@settings(deadline=None, max_examples=200)
@given(spec=specs, data=st.data())
def test_encode_unique_is_the_sorted_distinct_encodings(spec: Spec, data: st.DataObject) -> None:
    codec = codec_of(spec)
    values = data.draw(st.lists(values_of(spec), min_size=0, max_size=40))
    assert codec.encode_unique(values) == sorted({codec.encode(v) for v in values})


@settings(deadline=None, max_examples=200)
@given(st.lists(st.integers(INT64_MIN, INT64_MAX), min_size=16, max_size=200))
def test_many_int_keys_encode_as_one_by_one(values: list[int]) -> None:
    codec = key_codec("int")
    assert codec.encode_unique(values + values[:3]) == sorted({codec.encode(v) for v in values})


@pytest.mark.parametrize(
    ("odd", "reason"),
    [(True, "expected an int"), (1 << 63, "fit in 64 bits"), (-(1 << 63) - 1, "fit in 64 bits")],
)
def test_many_int_keys_refuse_what_one_key_refuses(odd: Any, reason: str) -> None:
    """The vectorised path takes only plain ints in range; the rest go one by one,
    through the checks and errors of a single key."""
    values = [*range(20), odd]
    with pytest.raises(UsageError, match=reason):
        key_codec("int").encode_unique(values)


def test_many_numpy_int_keys_encode_as_python_ints() -> None:
    codec = key_codec("int")
    values = list(np.arange(-10, 30, dtype=np.int64))
    assert codec.encode_unique(values) == codec.encode_unique([int(v) for v in values])
