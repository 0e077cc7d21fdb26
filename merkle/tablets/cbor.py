"""CBOR values: how a field that is not native Arrow keeps every value exactly.

Records are schema-free, so a column is native Arrow only when that is
exact; a field whose values do not all share one simple type (``1`` here,
``"a"`` there, dicts, nested lists, ints beyond 64 bits) is a ``binary``
column of CBOR-encoded values marked with the field metadata
``{b"merkle.encoding": b"cbor"}`` (doc/format.md, "Segments"). This module
encodes and decodes those values and names the fields that hold them.
"""

from __future__ import annotations

import datetime
import decimal
import math
import re
import struct
from collections.abc import Callable, Sequence
from typing import Any

import cbor2
import numpy as np
import pyarrow as pa

from merkle.blocks.nesting import MAX_CBOR_DEPTH
from merkle.errors import IntegrityError, UsageError
from merkle.lazy import compute as pc

__all__ = [
    "CBOR_ENCODING",
    "ENCODING_KEY",
    "NAIVE_DATETIME_TAG",
    "RowName",
    "cbor_array",
    "cbor_field",
    "is_cbor_field",
    "plain",
    "row_number",
    "show",
]

#: Field metadata key that says how a column's values are encoded.
ENCODING_KEY = b"merkle.encoding"
#: Value of :data:`ENCODING_KEY` for columns of CBOR-encoded values.
CBOR_ENCODING = b"cbor"
#: CBOR tag (merkle-db private) for a naive datetime: an ISO-8601 string, no offset.
NAIVE_DATETIME_TAG = 1835728897  # 0x6D6B0001, "mk" 1

_CBOR_METADATA = {ENCODING_KEY: CBOR_ENCODING}
_SUPPORTED_VALUES = (
    "None, bool, int, float, str, bytes, list, tuple, dict, set, datetime, date, Decimal, UUID"
)
#: Names a row in an error message ("row 3", "the record with key 'a'").
RowName = Callable[[int], str]


class _UnsupportedValueError(Exception):
    """A value inside a record that CBOR cannot carry."""

    def __init__(self, value: Any) -> None:
        super().__init__(value)
        self.value = value


class _InexactValueError(_UnsupportedValueError):
    """A value cbor2 would encode, but as bytes that read back as another value."""

    def __init__(self, value: Any, why: str) -> None:
        super().__init__(value)
        self.why = why


class _TooDeepError(_UnsupportedValueError):
    """A value nested deeper than the decoder reads (:data:`MAX_CBOR_DEPTH`)."""


#: 1 for the first byte of every CBOR array, map and tag (major types 4, 5 and 6: the
#: heads that each add a level), 0 for every other byte: ``data.translate`` of it
#: counts them (:func:`_check_depth`). A value with fewer such bytes nests no deeper.
_LEVEL_HEADS = bytes(1 if 0x80 <= byte < 0xE0 else 0 for byte in range(256))


def _check_depth(data: bytes, value: Any) -> None:
    """:class:`_TooDeepError` when ``data`` (the CBOR of ``value``) nests deeper than
    :func:`_cbor_decode` reads; the caller checks only values longer than the limit
    (:func:`_check_depths`).

    A value nested N levels deep holds at least N bytes that :data:`_LEVEL_HEADS` marks
    (strings may hold more), so counting them (in C) clears nearly every value;
    one with more is decoded as the reader decodes it, which is the exact test.
    """
    if data.translate(_LEVEL_HEADS).count(1) <= MAX_CBOR_DEPTH:
        return
    try:
        _loads(data)
    except (cbor2.CBORDecodeError, ValueError, TypeError, EOFError, RecursionError):
        raise _TooDeepError(value) from None


def _check_decimal(value: decimal.Decimal) -> None:
    """Refuse a Decimal that cbor2 cannot encode exactly.

    cbor2 writes a Decimal NaN or infinity as the float of that name (it reads
    back as a float), and a finite Decimal as its digits and exponent with the
    sign on the digits, so a negative zero reads back as a positive one. An
    exact encoding would need a tag of our own (a format change); refusing
    keeps every value that is stored today, and every value's bytes, as they are.
    """
    if not value.is_finite():
        raise _InexactValueError(
            value,
            "a Decimal NaN or infinity, which CBOR stores as a float (it would read back "
            "as one): store a float, or str(value), instead",
        )
    if value.is_zero() and value.is_signed():
        raise _InexactValueError(
            value,
            f"a negative zero Decimal, which CBOR stores without its sign (it would read "
            f"back as {value.copy_abs()!r}): store value.copy_abs(), or str(value), instead",
        )


def _encode_decimal(encoder: cbor2.CBOREncoder, value: decimal.Decimal) -> None:
    _check_decimal(value)
    encoder.encode_decimal(value)


def _encode_datetime(encoder: cbor2.CBOREncoder, value: datetime.datetime) -> None:
    if value.utcoffset() is None:
        encoder.encode_semantic(NAIVE_DATETIME_TAG, value.isoformat())
    else:
        encoder.encode_datetime(value)


#: The NaN cbor2 writes for every NaN (``f9 7e 00``, a half float); it reads back as
#: the float of these bits, so only a NaN of these bits keeps its bytes.
_QUIET_NAN_BITS = 0x7FF8000000000000


def _encode_float(encoder: cbor2.CBOREncoder, value: float) -> None:
    """A float as cbor2 writes it, except a NaN of other bits (a payload, a sign, a
    signalling NaN): 64-bit (``fb`` + 8 bytes big-endian), which reads back with its bits.

    cbor2 writes every NaN as the half float ``f9 7e 00``, which reads back as the
    quiet NaN ``0x7ff8000000000000``: a schema-free NaN lost its payload and sign
    (a typed float64 keeps them). The quiet NaN and every other float keep their
    bytes, so values stored before read and compare as they did.
    """
    raw = struct.pack(">d", value)
    if math.isnan(value) and int.from_bytes(raw) != _QUIET_NAN_BITS:
        encoder.write(b"\xfb" + raw)
    else:
        encoder.encode_float(value)


def _encode_other(encoder: cbor2.CBOREncoder, value: Any) -> None:
    if isinstance(value, np.generic):
        item = value.item()
        if isinstance(value, np.datetime64 | np.timedelta64) and not _is_time(item):
            raise _InexactValueError(value, _numpy_time_why(value))
        encoder.encode(item)
        return
    raise _UnsupportedValueError(value)


def _is_time(item: Any) -> bool:
    """Whether a numpy time's ``item()`` is a time (None for NaT, a null): not the bare
    int numpy gives for nanoseconds, a generic unit, a timedelta of months or years, or
    a date outside Python's years."""
    return item is None or isinstance(item, datetime.date | datetime.timedelta)


def _numpy_time_why(value: np.datetime64 | np.timedelta64) -> str:
    """Why a numpy time whose ``item()`` is an int is refused, and what to do."""
    unit = np.datetime_data(value.dtype)[0]
    if isinstance(value, np.datetime64):
        todo = (
            "convert it to a datetime or date (value.astype('datetime64[us]').item()), "
            "or declare the field with a timestamp type (pa.timestamp('ns') keeps nanoseconds)"
        )
    else:
        todo = (
            "declare the field with a duration type (a timedelta64 of days or a finer unit), "
            "or store its count as an int"
        )
    return (
        f"a numpy {type(value).__name__} of unit {unit!r}, which numpy gives as a bare int "
        f"(a schema-free field would store a number, not a time): {todo}"
    )


#: Every Decimal cbor2 encodes holds one of these bytes: 0xC4 (tag 4, a finite
#: Decimal) or 0xF9 (a half float: how it writes a NaN or an infinity). Bytes with
#: neither hold no Decimal and no NaN, so only values whose bytes match are encoded
#: again, with the encoders that check each Decimal (:func:`_check_decimal`) and keep
#: each NaN's bits (:func:`_encode_float`).
_MAY_HOLD_DECIMAL = re.compile(b"[\xc4\xf9]")


def _cbor_encode(value: Any) -> bytes:
    """CBOR of one record value; maps keep their insertion order, which reads give back.

    Equal values written in the same order give equal bytes. The fast encoder
    is tried first; the slower one with our own encoders (the private tag of a
    naive datetime, the check of a Decimal, a NaN's bits) only when it refuses the
    value (a naive datetime) or its bytes may hold a Decimal or a NaN. Both give
    the same bytes for every value they both take, but for a NaN whose bits are
    not the quiet NaN's, which only the slower one keeps.
    """
    if type(value) is decimal.Decimal:  # a column of Decimals: checked without a 2nd pass
        _check_decimal(value)
        return cbor2.dumps(value)
    try:
        data = cbor2.dumps(value, default=_encode_other)
    except _UnsupportedValueError:
        raise
    except (cbor2.CBOREncodeError, TypeError, ValueError, OverflowError, RecursionError):
        pass
    else:
        if _MAY_HOLD_DECIMAL.search(data) is None:
            return data
    try:
        return cbor2.dumps(value, encoders=_CBOR_ENCODERS, default=_encode_other)
    except _UnsupportedValueError:
        raise
    except RecursionError:
        raise _TooDeepError(value) from None
    except (cbor2.CBOREncodeError, TypeError, ValueError, OverflowError):
        raise _UnsupportedValueError(value) from None


_CBOR_ENCODERS: dict[type, Callable[[cbor2.CBOREncoder, Any], Any]] = {
    datetime.datetime: _encode_datetime,
    decimal.Decimal: _encode_decimal,
    # cbor2 looks encoders up by exact type: numpy's float64 scalar is a float too.
    float: _encode_float,
    np.float64: _encode_float,
}


def _tag_hook(*args: Any) -> Any:
    # cbor2 6 calls tag_hook(tag, immutable); cbor2 5 called it (decoder, tag, ...).
    tag = args[0] if isinstance(args[0], cbor2.CBORTag) else args[1]
    if tag.tag == NAIVE_DATETIME_TAG and isinstance(tag.value, str):
        return datetime.datetime.fromisoformat(tag.value)
    return tag


def _loads(data: bytes) -> Any:
    return cbor2.loads(data, tag_hook=_tag_hook, max_depth=MAX_CBOR_DEPTH)


def _cbor_decode(data: bytes, field: str) -> Any:
    try:
        return _loads(data)
    except (cbor2.CBORDecodeError, ValueError, TypeError, EOFError) as exc:
        raise IntegrityError(f"field {field!r} holds a malformed CBOR value: {exc}") from None


def cbor_field(name: str) -> pa.Field:
    """The schema field of a CBOR-encoded column."""
    return pa.field(name, pa.binary(), metadata=_CBOR_METADATA)


def is_cbor_field(field: pa.Field) -> bool:
    """True when the column's values are CBOR-encoded (see :data:`ENCODING_KEY`)."""
    metadata = field.metadata
    return bool(metadata) and metadata.get(ENCODING_KEY) == CBOR_ENCODING


_PLAIN_TYPES = frozenset({bool, int, float, str, bytes, list, dict, datetime.datetime})


def plain(value: Any) -> Any:
    """numpy scalars as Python values, bytes-likes as bytes: what comes back on read.

    A numpy time whose ``item()`` is not a time (an int: nanoseconds, a generic unit,
    a timedelta of months or years) stays as it is, for the encoder to refuse it."""
    if isinstance(value, np.generic):
        item = value.item()
        if isinstance(value, np.datetime64 | np.timedelta64) and not _is_time(item):
            return value
        return item
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    return value


def row_number(position: int) -> str:
    return f"row {position}"


def cbor_array(name: str, values: Sequence[Any], row: RowName) -> pa.Array:
    """A CBOR column of Python values; UsageError naming ``row(i)`` for one CBOR cannot carry."""
    return _cbor_array(name, [plain(v) if v is not None else None for v in values], row)


def _cbor_array(name: str, values: Sequence[Any], row: RowName) -> pa.Array:
    encoded: list[bytes | None] = []
    for position, value in enumerate(values):
        if value is None:
            encoded.append(None)
            continue
        try:
            encoded.append(_cbor_encode(value))
        except _TooDeepError:
            raise _too_deep(name, row(position), value) from None
        except _InexactValueError as exc:
            raise UsageError(
                f"field {name!r} of {row(position)} holds {show(exc.value)}, {exc.why}"
            ) from None
        except _UnsupportedValueError as exc:
            raise UsageError(
                f"field {name!r} of {row(position)} holds "
                f"{type(exc.value).__name__} {show(exc.value)}, which merkle-db cannot store: "
                f"record values are {_SUPPORTED_VALUES} (nested up to {MAX_CBOR_DEPTH} levels)"
            ) from None
    array = pa.array(encoded, type=pa.binary())
    _check_depths(name, values, encoded, array, row)
    return array


def _check_depths(
    name: str, values: Sequence[Any], encoded: list[bytes | None], array: pa.Array, row: RowName
) -> None:
    """UsageError naming the first value of ``values`` (``encoded`` as ``array``) nested
    deeper than the reader reads (:func:`_check_depth`).

    Only a value whose CBOR is longer than :data:`MAX_CBOR_DEPTH` bytes can hold that
    many levels; Arrow finds them in one pass over the lengths, so that a column of
    ordinary values costs no Python work per value.
    """
    lengths = pc.binary_length(array)
    longest = pc.max(lengths).as_py()
    if longest is None or longest <= MAX_CBOR_DEPTH:
        return
    for position in pc.indices_nonzero(pc.greater(lengths, MAX_CBOR_DEPTH)).to_pylist():
        data = encoded[position]
        assert data is not None  # a null has no length
        try:
            _check_depth(data, values[position])
        except _TooDeepError:
            raise _too_deep(name, row(position), values[position]) from None


def _too_deep(name: str, row: str, value: Any) -> UsageError:
    # the value is not shown: the repr of a list nested this deep overflows Python's stack
    return UsageError(
        f"field {name!r} of {row} holds a {type(value).__name__} nested more than "
        f"{MAX_CBOR_DEPTH} levels deep (each list, tuple and dict is a level; a set or "
        f"Decimal inside is two, a datetime, date, UUID or big int one), which merkle-db "
        f"could not read back: flatten it, or store the deep part as text (json.dumps) "
        f"or bytes"
    )


def show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
