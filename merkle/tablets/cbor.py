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
from collections.abc import Callable, Sequence
from typing import Any

import cbor2
import numpy as np
import pyarrow as pa

from merkle.errors import IntegrityError, UsageError

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


def _encode_datetime(encoder: cbor2.CBOREncoder, value: datetime.datetime) -> None:
    if value.utcoffset() is None:
        encoder.encode_semantic(NAIVE_DATETIME_TAG, value.isoformat())
    else:
        encoder.encode_datetime(value)


def _encode_other(encoder: cbor2.CBOREncoder, value: Any) -> None:
    if isinstance(value, np.generic):
        encoder.encode(value.item())
        return
    raise _UnsupportedValueError(value)


def _cbor_encode(value: Any) -> bytes:
    """CBOR of one record value; maps keep their insertion order, which reads give back.

    Equal values written in the same order give equal bytes. cbor2 refuses
    naive datetimes; only then is the slower encoder with the private tag used.
    """
    try:
        return cbor2.dumps(value, default=_encode_other)
    except _UnsupportedValueError:
        raise
    except (cbor2.CBOREncodeError, TypeError, ValueError, OverflowError, RecursionError):
        pass
    try:
        return cbor2.dumps(value, encoders=_CBOR_ENCODERS, default=_encode_other)
    except _UnsupportedValueError:
        raise
    except (cbor2.CBOREncodeError, TypeError, ValueError, OverflowError, RecursionError):
        raise _UnsupportedValueError(value) from None


_CBOR_ENCODERS: dict[type, Callable[[cbor2.CBOREncoder, Any], Any]] = {
    datetime.datetime: _encode_datetime
}


def _tag_hook(*args: Any) -> Any:
    # cbor2 6 calls tag_hook(tag, immutable); cbor2 5 called it (decoder, tag, ...).
    tag = args[0] if isinstance(args[0], cbor2.CBORTag) else args[1]
    if tag.tag == NAIVE_DATETIME_TAG and isinstance(tag.value, str):
        return datetime.datetime.fromisoformat(tag.value)
    return tag


def _cbor_decode(data: bytes, field: str) -> Any:
    try:
        return cbor2.loads(data, tag_hook=_tag_hook)
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
    """numpy scalars as Python values, bytes-likes as bytes: what comes back on read."""
    if isinstance(value, np.generic):
        return value.item()
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
        except _UnsupportedValueError as exc:
            raise UsageError(
                f"field {name!r} of {row(position)} holds "
                f"{type(exc.value).__name__} {show(exc.value)}, which merkle-db cannot store: "
                f"record values are {_SUPPORTED_VALUES} (nested freely)"
            ) from None
    return pa.array(encoded, type=pa.binary())


def show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
