"""The key codecs themselves: int, float, timestamp, str, bytes, tuple and reverse.

Each implements :class:`~merkle.tablets.keycodec.KeyCodec` (the two forms of
every encoding, the vectorised column encoders, the checks); doc/format.md
("Key encoding") writes their bytes down. :mod:`merkle.tablets.keys` parses
specs into them.
"""

from __future__ import annotations

import datetime
import math
from abc import abstractmethod
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from merkle.errors import IntegrityError, UsageError
from merkle.lazy import compute as pc
from merkle.tablets.keycodec import (
    _COMPLEMENT,
    _DOUBLE,
    _EPOCH,
    _ESCAPED_ZERO,
    _INT64_MAX,
    _INT64_MIN,
    _MASK64,
    _ONE_MICROSECOND,
    _SIGN_BIT,
    _TERMINATOR,
    _UINT64,
    _UTC,
    _ZERO,
    Column,
    KeyCodec,
    _is_binary,
    _is_string,
    _KeyTypeError,
    _safe_cast,
    _show,
    _show_bytes,
    _U64Array,
)
from merkle.tablets.keyindex import words_binary

__all__ = [
    "BytesCodec",
    "FloatCodec",
    "IntCodec",
    "ReverseCodec",
    "StrCodec",
    "TimestampCodec",
    "TupleCodec",
]

# -- fixed-width scalars ------------------------------------------------------

#: From this many keys, :meth:`_Fixed8Codec.encode_unique` tries the vectorised path.
_MANY_KEYS = 16


class _Fixed8Codec(KeyCodec):
    """Codecs whose encoding is 8 bytes, big-endian, ordered as unsigned integers."""

    @property
    def natively_ordered(self) -> bool:
        return True

    @abstractmethod
    def _to_bits(self, value: Any) -> int:
        """The unsigned 64-bit integer whose big-endian bytes are the key."""

    @abstractmethod
    def _from_bits(self, bits: int) -> Any:
        """The value of a 64-bit pattern, or IntegrityError."""

    @abstractmethod
    def _bits_array(self, array: pa.Array) -> _U64Array:
        """``_to_bits`` of a checked native column, as a numpy uint64 array."""

    def _encode_delimited(self, value: Any) -> bytes:
        return _UINT64.pack(self._to_bits(value))

    def encode_unique(self, values: Sequence[Any]) -> list[bytes]:
        # Many keys of the plain type are encoded as one numpy array: a 1,000-key
        # lookup spent 3.5 ms encoding them one by one before it read anything.
        words = self._value_words(values) if len(values) >= _MANY_KEYS else None
        if words is None:
            return super().encode_unique(values)
        packed = np.unique(words).astype(">u8").tobytes()
        return [packed[i : i + 8] for i in range(0, len(packed), 8)]

    def _value_words(self, values: Sequence[Any]) -> _U64Array | None:
        """``_to_bits`` of every value, when each is of the one type the codec takes as it
        is; None sends the values one by one through ``normalize`` (its checks and errors)."""
        return None

    def _decode_delimited(self, data: bytes, pos: int) -> tuple[Any, int]:
        end = pos + 8
        if len(data) < end:
            raise IntegrityError(
                f"malformed key for codec {self.spec!r}: needs 8 bytes at offset {pos}, "
                f"got {_show_bytes(data)}"
            )
        return self._from_bits(_UINT64.unpack_from(data, pos)[0]), end

    def _encode_array_delimited(self, array: pa.Array) -> pa.Array:
        return words_binary(self._bits_array(array))

    def order_words(self, column: Column) -> _U64Array | None:
        array = self.check_column(column)
        return self._bits_array(array) if len(array) else None


class IntCodec(_Fixed8Codec):
    spec = "int"
    arrow_type = pa.int64()

    def _normalize(self, value: Any) -> Any:
        if isinstance(value, bool | np.bool_ | np.timedelta64) or not isinstance(
            value, int | np.integer
        ):  # a numpy timedelta64 is a numpy integer, but a length of time
            raise _KeyTypeError("expected an int")
        number = int(value)
        if not _INT64_MIN <= number <= _INT64_MAX:
            raise _KeyTypeError("int keys must fit in 64 bits (signed)")
        return number

    def _to_bits(self, value: int) -> int:
        return value + _SIGN_BIT

    def _from_bits(self, bits: int) -> int:
        return bits - _SIGN_BIT

    def _bits_array(self, array: pa.Array) -> _U64Array:
        values: _U64Array = array.to_numpy(zero_copy_only=False).view(np.uint64)
        return values ^ np.uint64(_SIGN_BIT)

    def _value_words(self, values: Sequence[Any]) -> _U64Array | None:
        if not all(type(value) is int for value in values):  # bool, numpy ints: one by one
            return None
        try:
            numbers = np.array(values, dtype=np.int64)
        except OverflowError:  # outside 64 bits: normalize names the key
            return None
        words: _U64Array = numbers.view(np.uint64) ^ np.uint64(_SIGN_BIT)
        return words

    def to_arrow(self, values: Sequence[Any]) -> pa.Array:
        # Plain ints convert in one pyarrow call (an update gathers its keys so); any other
        # value, or an int beyond 64 bits, goes one by one through normalize and its errors.
        if all(type(value) is int for value in values):
            try:
                return pa.array(values, type=pa.int64())
            except (OverflowError, pa.ArrowInvalid):
                pass
        return super().to_arrow(values)

    def _to_arrow(self, values: list[Any]) -> pa.Array:
        return pa.array(values, type=pa.int64())

    def _to_python(self, array: pa.Array) -> list[Any]:
        return list(array.to_pylist())

    def _check_column(self, array: pa.Array) -> pa.Array:
        if not pa.types.is_integer(array.type):
            raise _KeyTypeError("expected an integer column")
        return _safe_cast(array, pa.int64(), "integers must fit in int64")


class FloatCodec(_Fixed8Codec):
    spec = "float"
    arrow_type = pa.float64()

    def _normalize(self, value: Any) -> Any:
        if isinstance(value, bool | np.bool_ | np.timedelta64):
            raise _KeyTypeError("expected a float")
        if isinstance(value, float | np.floating):
            number = float(value)
        elif isinstance(value, int | np.integer):
            try:
                number = float(value)
            except OverflowError:
                number = math.inf
            if number != value:
                raise _KeyTypeError("this int has no exact float value")
        else:
            raise _KeyTypeError("expected a float")
        if math.isnan(number):
            raise _KeyTypeError("NaN is not a valid key")
        return number + 0.0  # -0.0 becomes 0.0

    def _to_bits(self, value: float) -> int:
        bits: int = _UINT64.unpack(_DOUBLE.pack(value))[0]
        return (~bits & _MASK64) if bits & _SIGN_BIT else bits | _SIGN_BIT

    def _from_bits(self, bits: int) -> float:
        raw = bits ^ _SIGN_BIT if bits & _SIGN_BIT else ~bits & _MASK64
        value: float = _DOUBLE.unpack(_UINT64.pack(raw))[0]
        if math.isnan(value) or raw == _SIGN_BIT:
            raise IntegrityError(
                f"malformed key for codec 'float': {value!r} is never written as a key"
            )
        return value

    def _bits_array(self, array: pa.Array) -> _U64Array:
        values = array.to_numpy(zero_copy_only=False) + 0.0
        bits: _U64Array = values.view(np.uint64)
        negative = (bits >> np.uint64(63)).astype(bool)
        flipped: _U64Array = np.where(negative, ~bits, bits | np.uint64(_SIGN_BIT))
        return flipped

    def _to_arrow(self, values: list[Any]) -> pa.Array:
        return pa.array(values, type=pa.float64())

    def _to_python(self, array: pa.Array) -> list[Any]:
        return list(array.to_pylist())

    def _check_column(self, array: pa.Array) -> pa.Array:
        if pa.types.is_integer(array.type):
            array = _safe_cast(array, pa.float64(), "integers must have exact float values")
        elif not pa.types.is_floating(array.type):
            raise _KeyTypeError("expected a floating-point column")
        array = _safe_cast(array, pa.float64(), "expected float64")
        if pc.any(pc.is_nan(array)).as_py():
            raise _KeyTypeError("NaN is not a valid key")
        return pc.add(array, pa.scalar(0.0))  # -0.0 becomes 0.0


class TimestampCodec(_Fixed8Codec):
    spec = "timestamp"
    arrow_type = pa.timestamp("us", tz="UTC")

    def _normalize(self, value: Any) -> Any:
        if not isinstance(value, datetime.datetime):
            raise _KeyTypeError("expected a datetime")
        if value.tzinfo is None or value.utcoffset() is None:
            value = value.replace(tzinfo=_UTC)
        return _micros_to_datetime(_whole_micros(value), _KeyTypeError)

    def _to_bits(self, value: datetime.datetime) -> int:
        return _whole_micros(value) + _SIGN_BIT

    def _from_bits(self, bits: int) -> datetime.datetime:
        return _micros_to_datetime(bits - _SIGN_BIT, IntegrityError)

    def _bits_array(self, array: pa.Array) -> _U64Array:
        micros: _U64Array = array.cast(pa.int64()).to_numpy(zero_copy_only=False).view(np.uint64)
        return micros ^ np.uint64(_SIGN_BIT)

    def _to_arrow(self, values: list[Any]) -> pa.Array:
        return pa.array(values, type=self.arrow_type)

    def _to_python(self, array: pa.Array) -> list[Any]:
        # Arrow gives zoneinfo UTC; keys use datetime.UTC like normalize().
        naive = array.cast(pa.timestamp("us")).to_pylist()
        return [value.replace(tzinfo=_UTC) for value in naive]

    def _check_column(self, array: pa.Array) -> pa.Array:
        if not pa.types.is_timestamp(array.type):
            raise _KeyTypeError("expected a timestamp column")
        # The stored integers are UTC for zoned types and taken as UTC for naive ones.
        micros = _safe_cast(
            array.cast(pa.timestamp(array.type.unit)),
            pa.timestamp("us"),
            "timestamps must be whole microseconds",
        )
        return micros.cast(pa.int64()).view(self.arrow_type)


# -- variable-width scalars ---------------------------------------------------


class _BytesLikeCodec(KeyCodec):
    """str and bytes: raw at top level, escaped and terminated when delimited."""

    @property
    def natively_ordered(self) -> bool:
        return True

    @abstractmethod
    def _to_raw(self, value: Any) -> bytes:
        """The raw bytes of a normalised value."""

    @abstractmethod
    def _from_raw(self, raw: bytes) -> Any:
        """The value of raw bytes, or IntegrityError."""

    def _encode_top(self, value: Any) -> bytes:
        return self._to_raw(value)

    def _decode_top(self, data: bytes) -> Any:
        return self._from_raw(data)

    def _encode_delimited(self, value: Any) -> bytes:
        return self._to_raw(value).replace(_ZERO, _ESCAPED_ZERO) + _TERMINATOR

    def _decode_delimited(self, data: bytes, pos: int) -> tuple[Any, int]:
        # Inside the value every 0x00 is followed by 0x01, so the first 0x00 0x00 ends it.
        end = data.find(_TERMINATOR, pos)
        if end < 0:
            raise IntegrityError(
                f"malformed key for codec {self.spec!r}: no terminator after offset {pos} "
                f"in {_show_bytes(data)}"
            )
        escaped = data[pos:end]
        if escaped.count(_ZERO) != escaped.count(_ESCAPED_ZERO):
            raise IntegrityError(
                f"malformed key for codec {self.spec!r}: bad escape in {_show_bytes(data)}"
            )
        return self._from_raw(escaped.replace(_ESCAPED_ZERO, _ZERO)), end + len(_TERMINATOR)

    def _encode_array_top(self, array: pa.Array) -> pa.Array:
        return array.cast(pa.binary())

    def _encode_array_delimited(self, array: pa.Array) -> pa.Array:
        escaped = pc.replace_substring(array.cast(pa.binary()), "\x00", "\x00\x01")
        return pc.binary_join_element_wise(
            escaped, pa.scalar(_TERMINATOR, pa.binary()), pa.scalar(b"", pa.binary())
        )

    def _to_python(self, array: pa.Array) -> list[Any]:
        return list(array.to_pylist())


class StrCodec(_BytesLikeCodec):
    spec = "str"
    arrow_type = pa.string()

    def _normalize(self, value: Any) -> Any:
        if not isinstance(value, str):
            raise _KeyTypeError("expected a str")
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise _KeyTypeError("the string is not valid Unicode (lone surrogate)") from None
        return str(value)

    def _to_raw(self, value: str) -> bytes:
        return value.encode("utf-8")

    def _from_raw(self, raw: bytes) -> str:
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise IntegrityError(
                f"malformed key for codec 'str': {_show_bytes(raw)} is not UTF-8"
            ) from None

    def _to_arrow(self, values: list[Any]) -> pa.Array:
        return pa.array(values, type=pa.string())

    def _check_column(self, array: pa.Array) -> pa.Array:
        if not _is_string(array.type):
            raise _KeyTypeError("expected a string column")
        return _safe_cast(array, pa.string(), "expected a string column")


class BytesCodec(_BytesLikeCodec):
    spec = "bytes"
    arrow_type = pa.binary()

    def _normalize(self, value: Any) -> Any:
        if not isinstance(value, bytes | bytearray | memoryview):
            raise _KeyTypeError("expected bytes")
        return bytes(value)

    def _to_raw(self, value: bytes) -> bytes:
        return value

    def _from_raw(self, raw: bytes) -> bytes:
        return raw

    def _to_arrow(self, values: list[Any]) -> pa.Array:
        return pa.array(values, type=pa.binary())

    def _check_column(self, array: pa.Array) -> pa.Array:
        if not _is_binary(array.type):
            raise _KeyTypeError("expected a binary column")
        return _safe_cast(array, pa.binary(), "expected a binary column")


# -- composites ---------------------------------------------------------------


class TupleCodec(KeyCodec):
    """Fixed-arity tuples, ordered component by component (delimited components)."""

    def __init__(self, components: Sequence[KeyCodec]) -> None:
        self.components = tuple(components)
        self.spec = "tuple(" + ",".join(codec.spec for codec in self.components) + ")"
        self.arrow_type = pa.struct(
            [pa.field(str(i), codec.arrow_type) for i, codec in enumerate(self.components)]
        )

    def _normalize(self, value: Any) -> Any:
        if not isinstance(value, tuple | list):
            raise _KeyTypeError(f"expected a tuple of {len(self.components)}")
        if len(value) != len(self.components):
            raise _KeyTypeError(
                f"expected a tuple of {len(self.components)}, got {len(value)} component(s)"
            )
        normalized = []
        for i, (codec, item) in enumerate(zip(self.components, value, strict=True)):
            try:
                normalized.append(codec._normalize(item))
            except _KeyTypeError as exc:
                raise _KeyTypeError(
                    f"component {i} ({_show(item)}, {type(item).__name__}) of codec "
                    f"{codec.spec!r}: {exc}"
                ) from None
        return tuple(normalized)

    def _encode_delimited(self, value: Any) -> bytes:
        return b"".join(
            codec._encode_delimited(item)
            for codec, item in zip(self.components, value, strict=True)
        )

    def encode_prefix(self, value: Any) -> bytes | None:
        if not isinstance(value, tuple | list) or not 0 < len(value) < len(self.components):
            return None
        head = TupleCodec(self.components[: len(value)])
        try:
            return head._encode_delimited(head._normalize(value))
        except _KeyTypeError as exc:
            raise UsageError(
                f"key prefix {_show(value)} does not fit key codec {self.spec!r}: {exc}"
            ) from None

    def _decode_delimited(self, data: bytes, pos: int) -> tuple[Any, int]:
        values = []
        for codec in self.components:
            item, pos = codec._decode_delimited(data, pos)
            values.append(item)
        return tuple(values), pos

    def _to_arrow(self, values: list[Any]) -> pa.Array:
        children = [
            codec._to_arrow([value[i] for value in values])
            for i, codec in enumerate(self.components)
        ]
        return pa.StructArray.from_arrays(children, fields=list(self.arrow_type))

    def _to_python(self, array: pa.Array) -> list[Any]:
        children = [
            codec._to_python(child)
            for codec, child in zip(self.components, array.flatten(), strict=True)
        ]
        return list(zip(*children, strict=True)) if children else []

    def _check_column(self, array: pa.Array) -> pa.Array:
        if not pa.types.is_struct(array.type) or array.type.num_fields != len(self.components):
            raise _KeyTypeError(
                f"expected a struct column of {len(self.components)} fields (one per component)"
            )
        checked = []
        for i, (codec, child) in enumerate(zip(self.components, array.flatten(), strict=True)):
            name = array.type.field(i).name
            if child.null_count:
                raise _KeyTypeError(f"struct field {name!r} holds nulls")
            try:
                checked.append(codec._check_column(child))
            except _KeyTypeError as exc:
                raise _KeyTypeError(
                    f"struct field {name!r} (component {i}, codec {codec.spec!r}): {exc}"
                ) from None
        return pa.StructArray.from_arrays(checked, fields=list(self.arrow_type))

    def _encode_array_delimited(self, array: pa.Array) -> pa.Array:
        parts = [
            codec._encode_array_delimited(child)
            for codec, child in zip(self.components, array.flatten(), strict=True)
        ]
        if len(parts) == 1:
            return parts[0]
        return pc.binary_join_element_wise(*parts, pa.scalar(b"", pa.binary()))


class ReverseCodec(KeyCodec):
    """The inverse order of another codec: the bytewise complement of its delimited form."""

    def __init__(self, inner: KeyCodec) -> None:
        self.inner = inner
        self.spec = f"reverse({inner.spec})"
        self.arrow_type = inner.arrow_type

    def _normalize(self, value: Any) -> Any:
        return self.inner._normalize(value)

    def _encode_delimited(self, value: Any) -> bytes:
        return self.inner._encode_delimited(value).translate(_COMPLEMENT)

    def encode_prefix(self, value: Any) -> bytes | None:
        """The complement of the inner codec's prefix: ``reverse(tuple(int,str))`` encodes
        ``(a, b)`` as the complement of ``enc(a) + enc(b)``, so every key whose first
        component is ``a`` starts with the complement of ``enc(a)`` (delimited forms are
        prefix-free), and those keys are one contiguous run in the reversed order too."""
        inner = self.inner.encode_prefix(value)
        return None if inner is None else inner.translate(_COMPLEMENT)

    def _decode_delimited(self, data: bytes, pos: int) -> tuple[Any, int]:
        value, used = self.inner._decode_delimited(data[pos:].translate(_COMPLEMENT), 0)
        return value, pos + used

    def _to_arrow(self, values: list[Any]) -> pa.Array:
        return self.inner._to_arrow(values)

    def _to_python(self, array: pa.Array) -> list[Any]:
        return self.inner._to_python(array)

    def _check_column(self, array: pa.Array) -> pa.Array:
        return self.inner._check_column(array)

    def _encode_array_delimited(self, array: pa.Array) -> pa.Array:
        return _complement(self.inner._encode_array_delimited(array))


# -- helpers ------------------------------------------------------------------


def _complement(array: pa.Array) -> pa.Array:
    """Every byte of every row of a null-free binary array, bitwise inverted."""
    count = len(array)
    if count == 0:
        return pa.array([], type=pa.binary())
    _, offsets_buffer, data_buffer = array.buffers()
    offsets = np.frombuffer(offsets_buffer, dtype=np.int32)[array.offset : array.offset + count + 1]
    start, stop = int(offsets[0]), int(offsets[-1])
    data = np.frombuffer(data_buffer, dtype=np.uint8, count=stop)[start:] if stop else offsets[:0]
    return pa.Array.from_buffers(
        pa.binary(),
        count,
        [None, pa.py_buffer(offsets - offsets[0]), pa.py_buffer(~data.astype(np.uint8))],
    )


def _whole_micros(value: datetime.datetime) -> int:
    """The microseconds from the epoch of an aware datetime, or _KeyTypeError when it has a
    fraction of one: a pandas ``Timestamp`` may hold nanoseconds, and cutting them would
    make a key name another record (write 1001 ns over the record at 1000 ns, read it for
    1001 ns), so such a key is refused, as an Arrow key column of them is."""
    micros, rest = divmod(value - _EPOCH, _ONE_MICROSECOND)
    if rest != datetime.timedelta(0):
        raise _KeyTypeError(
            f"the timestamp key codec stores whole microseconds, and this key has "
            f"{getattr(rest, 'nanoseconds', rest)} ns more; round it to microseconds first "
            "if that is what is meant (pandas: ts.floor('us') or ts.ceil('us'))"
        )
    return int(micros)


def _micros_to_datetime(micros: int, error: type[Exception]) -> datetime.datetime:
    try:
        return _EPOCH + datetime.timedelta(microseconds=micros)
    except OverflowError:
        raise error(
            f"{micros} microseconds since the epoch is outside the datetime range "
            "(years 1 to 9999 UTC)"
        ) from None
