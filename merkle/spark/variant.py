"""Spark VARIANT values from merkle's schema-free values, and back.

A field whose values do not share one type is stored as CBOR (see
doc/format.md, "Segments"); Spark sees it as ``VARIANT``, whose binary
encoding (a value and a metadata dictionary of object keys) is written here
and read back with pyspark's own decoder. Every value that VARIANT holds
exactly is mapped; anything else (ints beyond 64 bits, maps with non-string
keys, sets, tags CBOR carries but VARIANT does not) is a
:class:`~merkle.errors.UsageError` naming the value, and the ``mixed=cbor``
read option gives such fields as the raw CBOR bytes instead. doc/spark.md
lists the mapping.
"""

from __future__ import annotations

import datetime
import decimal
import struct
from typing import Any

from merkle.errors import UsageError

__all__ = ["VariantError", "from_variant", "to_variant"]

_PRIMITIVE, _SHORT_STR, _OBJECT, _ARRAY = 0, 1, 2, 3
_NULL, _TRUE, _FALSE, _INT1, _INT2, _INT4, _INT8, _DOUBLE = 0, 1, 2, 3, 4, 5, 6, 7
_DECIMAL4, _DECIMAL8, _DECIMAL16, _DATE, _TIMESTAMP, _TIMESTAMP_NTZ = 8, 9, 10, 11, 12, 13
_BINARY, _LONG_STR = 15, 16
_VERSION = 1
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_EPOCH_NTZ = datetime.datetime(1970, 1, 1)
_EPOCH_DAY = datetime.date(1970, 1, 1).toordinal()


class VariantError(UsageError):
    """A value that VARIANT cannot hold exactly."""


def _primitive(type_id: int) -> bytes:
    return bytes([(type_id << 2) | _PRIMITIVE])


def _size_of(value: int) -> int:
    """Bytes (1, 2 or 3) that hold unsigned ``value``, as Spark sizes offsets and ids."""
    if value <= 0xFF:
        return 1
    if value <= 0xFFFF:
        return 2
    if value <= 0xFFFFFF:
        return 3
    raise VariantError("a VARIANT value is limited to 16 MiB")


def _le(value: int, size: int, *, signed: bool = False) -> bytes:
    return value.to_bytes(size, "little", signed=signed)


class _Encoder:
    def __init__(self) -> None:
        self.keys: dict[str, int] = {}

    def key(self, name: str) -> int:
        return self.keys.setdefault(name, len(self.keys))

    def value(self, v: Any) -> bytes:
        if v is None:
            return _primitive(_NULL)
        if v is True or v is False:
            return _primitive(_TRUE if v else _FALSE)
        if isinstance(v, int):
            for type_id, size in ((_INT1, 1), (_INT2, 2), (_INT4, 4), (_INT8, 8)):
                if -(1 << (8 * size - 1)) <= v < 1 << (8 * size - 1):
                    return _primitive(type_id) + _le(v, size, signed=True)
            raise VariantError(f"the integer {v} does not fit VARIANT's 64-bit integers")
        if isinstance(v, float):
            return _primitive(_DOUBLE) + struct.pack("<d", v)
        if isinstance(v, str):
            data = v.encode("utf-8")
            if len(data) <= 0x3F:
                return bytes([(len(data) << 2) | _SHORT_STR]) + data
            return _primitive(_LONG_STR) + _le(len(data), 4) + data
        if isinstance(v, bytes):
            return _primitive(_BINARY) + _le(len(v), 4) + v
        if isinstance(v, decimal.Decimal):
            return self.decimal(v)
        if isinstance(v, datetime.datetime):
            if v.utcoffset() is None:
                micros = (v - _EPOCH_NTZ) // datetime.timedelta(microseconds=1)
                return _primitive(_TIMESTAMP_NTZ) + _le(micros, 8, signed=True)
            micros = (v - _EPOCH) // datetime.timedelta(microseconds=1)
            return _primitive(_TIMESTAMP) + _le(micros, 8, signed=True)
        if isinstance(v, datetime.date):
            return _primitive(_DATE) + _le(v.toordinal() - _EPOCH_DAY, 4, signed=True)
        if isinstance(v, list | tuple):
            return self.array([self.value(item) for item in v])
        if isinstance(v, dict):
            if not all(isinstance(k, str) for k in v):
                raise VariantError("a map with non-string keys has no VARIANT form")
            return self.object({k: self.value(item) for k, item in v.items()})
        raise VariantError(f"a {type(v).__name__} value has no VARIANT form")

    def decimal(self, v: decimal.Decimal) -> bytes:
        if not v.is_finite():
            raise VariantError(f"the decimal {v} has no VARIANT form")
        sign, digits, exponent = v.as_tuple()
        assert isinstance(exponent, int)
        if exponent > 0:  # 1E+3: VARIANT decimals have a scale >= 0
            v = v.quantize(decimal.Decimal(1))
            sign, digits, exponent = v.as_tuple()
            assert isinstance(exponent, int)
        scale, precision = -exponent, max(len(digits), -exponent)
        if precision > 38:
            raise VariantError(f"the decimal {v} has more than 38 digits")
        unscaled = int("".join(map(str, digits)) or "0") * (-1 if sign else 1)
        for type_id, size, most in ((_DECIMAL4, 4, 9), (_DECIMAL8, 8, 18), (_DECIMAL16, 16, 38)):
            if precision <= most:
                return _primitive(type_id) + _le(scale, 1) + _le(unscaled, size, signed=True)
        raise AssertionError("unreachable")

    def array(self, items: list[bytes]) -> bytes:
        data = b"".join(items)
        offsets, at = [], 0
        for item in items:
            offsets.append(at)
            at += len(item)
        offsets.append(at)
        large = len(items) > 0xFF
        width = _size_of(len(data))
        header = (((int(large) << 2) | (width - 1)) << 2) | _ARRAY
        head = bytes([header]) + _le(len(items), 4 if large else 1)
        return head + b"".join(_le(o, width) for o in offsets) + data

    def object(self, fields: dict[str, bytes]) -> bytes:
        # Field ids and offsets are listed in key order, as the JVM (String.compareTo) sorts.
        names = sorted(fields, key=lambda name: name.encode("utf-16-be"))
        ids = [self.key(name) for name in names]
        data = b"".join(fields[name] for name in names)
        offsets, at = [], 0
        for name in names:
            offsets.append(at)
            at += len(fields[name])
        offsets.append(at)
        large = len(names) > 0xFF
        id_width = _size_of(max(ids, default=0))
        width = _size_of(len(data))
        info = (int(large) << 4) | ((id_width - 1) << 2) | (width - 1)
        head = bytes([(info << 2) | _OBJECT]) + _le(len(names), 4 if large else 1)
        return (
            head
            + b"".join(_le(i, id_width) for i in ids)
            + b"".join(_le(o, width) for o in offsets)
            + data
        )

    def metadata(self) -> bytes:
        strings = [name.encode("utf-8") for name in self.keys]
        total = sum(len(s) for s in strings)
        width = _size_of(max(total, len(strings)))
        offsets, at = [], 0
        for s in strings:
            offsets.append(at)
            at += len(s)
        offsets.append(at)
        header = _VERSION | ((width - 1) << 6)
        return (
            bytes([header])
            + _le(len(strings), width)
            + b"".join(_le(o, width) for o in offsets)
            + b"".join(strings)
        )


def to_variant(value: Any) -> tuple[bytes, bytes]:
    """``(value, metadata)`` bytes of the VARIANT holding ``value`` (VariantError if none)."""
    encoder = _Encoder()
    encoded = encoder.value(value)
    return encoded, encoder.metadata()


def from_variant(value: bytes, metadata: bytes) -> Any:
    """The Python value of VARIANT bytes (timestamps with a zone come back in UTC)."""
    from pyspark.sql.types import VariantVal

    return VariantVal(bytes(value), bytes(metadata)).toPython()
