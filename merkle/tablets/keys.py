"""Order-preserving, reversible key codecs.

A table declares one key codec; it turns primary-key values into bytes whose
bytewise order (Python ``bytes`` comparison, Arrow binary sort) is exactly the
order of the values. Index nodes, tablet ranges and pending batches all
compare these bytes, so the codec is part of the storage format: its spec
string (``"int"``, ``"tuple(int,reverse(str))"``, ...) is stored in every table
root, and its encodings are written down in ``doc/format.md`` ("Key
encoding").

Each codec has two encodings of a value. The *top-level* form is used when
the codec is the table's whole key: strings and bytes are their raw bytes, so
plain string keys stay compact and sort natively. The *delimited* form is
prefix-free (no encoding is a prefix of another) and is used for tuple
components and under ``reverse``: reversing order by complementing bytes is
only correct on a prefix-free encoding, which is the bug the original MerkleDB
reverse codec had ("a" vs "ab").

Bulk paths work on Arrow columns: :meth:`KeyCodec.encode_array` encodes a whole
native key column with numpy and Arrow compute kernels, never a Python loop.
"""

from __future__ import annotations

import datetime
import functools
import math
import re
import struct
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from merkle.errors import IntegrityError, UsageError

__all__ = [
    "KEY_SPEC_FORMS",
    "KeyCodec",
    "infer_key_codec",
    "infer_key_codec_arrow",
    "key_codec",
]

#: The forms a key codec spec can take, for error messages and documentation.
KEY_SPEC_FORMS = (
    '"int", "float", "str", "bytes", "timestamp", "tuple(<spec>,<spec>,...)", "reverse(<spec>)"'
)

_SIGN_BIT = 1 << 63
_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1
_MASK64 = (1 << 64) - 1
_UINT64 = struct.Struct(">Q")
_DOUBLE = struct.Struct(">d")
_UTC = datetime.UTC
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=_UTC)
_ONE_MICROSECOND = datetime.timedelta(microseconds=1)
_COMPLEMENT = bytes(255 - i for i in range(256))
# Delimited strings: 0x00 inside the value becomes 0x00 0x01, the end is 0x00 0x00.
_ZERO = b"\x00"
_ESCAPED_ZERO = b"\x00\x01"
_TERMINATOR = b"\x00\x00"

#: A native Arrow column: one array or a chunked one.
Column: TypeAlias = pa.Array | pa.ChunkedArray


_U64Array: TypeAlias = "np.ndarray[Any, np.dtype[np.uint64]]"


class _KeyTypeError(Exception):
    """A value does not fit a codec; public methods turn it into a UsageError."""


class KeyCodec(ABC):
    """An order-preserving, reversible mapping between key values and bytes.

    Codecs are immutable and compare equal when their specs are equal; get one
    with :func:`key_codec`, :func:`infer_key_codec` or
    :func:`infer_key_codec_arrow`.
    """

    #: The canonical spec stored in table roots.
    spec: str
    #: The Arrow type of the native key column in segments.
    arrow_type: pa.DataType

    # -- public API -----------------------------------------------------------

    def encode(self, value: Any) -> bytes:
        """The key bytes of ``value``; UsageError if it is not a key of this codec."""
        return self._encode_top(self.normalize(value))

    def encode_prefix(self, value: Any) -> bytes | None:
        """The encoded bytes every key starting with ``value`` starts with, or None.

        Only a tuple codec has prefixes: ``("DE",)`` under ``tuple(str,int)``
        bounds every key whose first component is ``"DE"``. None means
        ``value`` is not a proper prefix (encode it as a whole key).
        """
        return None

    def decode(self, data: bytes) -> Any:
        """The key value of encoded bytes; IntegrityError if they are malformed."""
        if not isinstance(data, bytes | bytearray | memoryview):
            raise UsageError(
                f"key codec {self.spec!r} decodes bytes, got {type(data).__name__}: "
                "pass the encoded key bytes"
            )
        return self._decode_top(bytes(data))

    def normalize(self, value: Any) -> Any:
        """The canonical Python value of a key (what :meth:`decode` gives back).

        Raises UsageError naming the value, its type and this codec's spec when
        the value is not a valid key.
        """
        try:
            return self._normalize(value)
        except _KeyTypeError as exc:
            raise UsageError(
                f"key {_show(value)} of type {type(value).__name__} does not fit key codec "
                f"{self.spec!r}: {exc}; pass a key of the table's key type"
            ) from None

    def to_arrow(self, values: Sequence[Any]) -> pa.Array:
        """A native key column (of :attr:`arrow_type`) from Python key values."""
        return self._to_arrow([self.normalize(value) for value in values])

    def to_python(self, column: Column) -> list[Any]:
        """The Python key values of a native key column (normalised values)."""
        array = _combine(column)
        if not array.type.equals(self.arrow_type):
            raise IntegrityError(
                f"key column has Arrow type {array.type}, but key codec {self.spec!r} "
                f"stores {self.arrow_type}: the segment does not belong to this table"
            )
        if array.null_count:
            raise IntegrityError(f"key column of codec {self.spec!r} holds nulls")
        return self._to_python(array)

    def encode_array(self, column: Column) -> pa.Array:
        """The encoded keys of a native key column, as a ``pa.binary()`` array.

        Row ``i`` equals ``encode(value_i)``. Vectorised (numpy and Arrow
        kernels) for every codec. The column is validated like
        :meth:`check_column` first.
        """
        return self._encode_array_top(self.check_column(column))

    def check_column(self, column: Column) -> pa.Array:
        """Validate a user-supplied Arrow key column and cast it to :attr:`arrow_type`.

        Nulls, NaN and types that do not fit raise UsageError naming the
        problem; ``-0.0`` becomes ``0.0``, naive timestamps are taken as UTC,
        narrower integer, float, string and binary types are widened.
        """
        if not isinstance(column, pa.Array | pa.ChunkedArray):
            raise UsageError(
                f"key codec {self.spec!r} checks a pyarrow Array or ChunkedArray, "
                f"got {type(column).__name__}"
            )
        array = _combine(column)
        if len(array) == 0 and pa.types.is_null(array.type):
            return pa.array([], type=self.arrow_type)  # an empty column built without a type
        if array.null_count:
            raise UsageError(
                f"key column holds {array.null_count} null(s): every record needs a key "
                f"(codec {self.spec!r})"
            )
        try:
            return self._check_column(array)
        except _KeyTypeError as exc:
            raise UsageError(
                f"key column of Arrow type {array.type} does not fit key codec {self.spec!r}: {exc}"
            ) from None

    @property
    def natively_ordered(self) -> bool:
        """True when sorting the native column (``pc.sort_indices``) gives the key order."""
        return False

    # -- equality -------------------------------------------------------------

    def __eq__(self, other: object) -> bool:
        return isinstance(other, KeyCodec) and other.spec == self.spec

    def __hash__(self) -> int:
        return hash(("KeyCodec", self.spec))

    def __repr__(self) -> str:
        return f"key_codec({self.spec!r})"

    # -- the parts each codec provides ----------------------------------------

    @abstractmethod
    def _normalize(self, value: Any) -> Any:
        """The canonical value, or _KeyTypeError saying what was expected."""

    @abstractmethod
    def _encode_delimited(self, value: Any) -> bytes:
        """Prefix-free encoding of a normalised value."""

    def _encode_top(self, value: Any) -> bytes:
        return self._encode_delimited(value)

    @abstractmethod
    def _decode_delimited(self, data: bytes, pos: int) -> tuple[Any, int]:
        """Decode the delimited form starting at ``pos``; return (value, end)."""

    def _decode_top(self, data: bytes) -> Any:
        value, end = self._decode_delimited(data, 0)
        if end != len(data):
            raise IntegrityError(
                f"malformed key for codec {self.spec!r}: {len(data) - end} trailing byte(s) "
                f"in {_show_bytes(data)}"
            )
        return value

    @abstractmethod
    def _to_arrow(self, values: list[Any]) -> pa.Array:
        """Native column from normalised values."""

    @abstractmethod
    def _to_python(self, array: pa.Array) -> list[Any]:
        """Python values from a native column without nulls."""

    @abstractmethod
    def _check_column(self, array: pa.Array) -> pa.Array:
        """Cast a null-free column to the native type, or _KeyTypeError."""

    @abstractmethod
    def _encode_array_delimited(self, array: pa.Array) -> pa.Array:
        """Delimited encodings of a checked native column, as binary."""

    def _encode_array_top(self, array: pa.Array) -> pa.Array:
        return self._encode_array_delimited(array)


# -- fixed-width scalars ------------------------------------------------------


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

    def _decode_delimited(self, data: bytes, pos: int) -> tuple[Any, int]:
        end = pos + 8
        if len(data) < end:
            raise IntegrityError(
                f"malformed key for codec {self.spec!r}: needs 8 bytes at offset {pos}, "
                f"got {_show_bytes(data)}"
            )
        return self._from_bits(_UINT64.unpack_from(data, pos)[0]), end

    def _encode_array_delimited(self, array: pa.Array) -> pa.Array:
        return _fixed8_binary(self._bits_array(array))


class _IntCodec(_Fixed8Codec):
    spec = "int"
    arrow_type = pa.int64()

    def _normalize(self, value: Any) -> Any:
        if isinstance(value, bool | np.bool_) or not isinstance(value, int | np.integer):
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

    def _to_arrow(self, values: list[Any]) -> pa.Array:
        return pa.array(values, type=pa.int64())

    def _to_python(self, array: pa.Array) -> list[Any]:
        return list(array.to_pylist())

    def _check_column(self, array: pa.Array) -> pa.Array:
        if not pa.types.is_integer(array.type):
            raise _KeyTypeError("expected an integer column")
        return _safe_cast(array, pa.int64(), "integers must fit in int64")


class _FloatCodec(_Fixed8Codec):
    spec = "float"
    arrow_type = pa.float64()

    def _normalize(self, value: Any) -> Any:
        if isinstance(value, bool | np.bool_):
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


class _TimestampCodec(_Fixed8Codec):
    spec = "timestamp"
    arrow_type = pa.timestamp("us", tz="UTC")

    def _normalize(self, value: Any) -> Any:
        if not isinstance(value, datetime.datetime):
            raise _KeyTypeError("expected a datetime")
        if value.tzinfo is None or value.utcoffset() is None:
            value = value.replace(tzinfo=_UTC)
        micros = (value - _EPOCH) // _ONE_MICROSECOND
        return _micros_to_datetime(micros, _KeyTypeError)

    def _to_bits(self, value: datetime.datetime) -> int:
        return (value - _EPOCH) // _ONE_MICROSECOND + _SIGN_BIT

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


class _StrCodec(_BytesLikeCodec):
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


class _BytesCodec(_BytesLikeCodec):
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


class _TupleCodec(KeyCodec):
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
        head = _TupleCodec(self.components[: len(value)])
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


class _ReverseCodec(KeyCodec):
    """The inverse order of another codec: the bytewise complement of its delimited form."""

    def __init__(self, inner: KeyCodec) -> None:
        self.inner = inner
        self.spec = f"reverse({inner.spec})"
        self.arrow_type = inner.arrow_type

    def _normalize(self, value: Any) -> Any:
        return self.inner._normalize(value)

    def _encode_delimited(self, value: Any) -> bytes:
        return self.inner._encode_delimited(value).translate(_COMPLEMENT)

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


# -- constructors -------------------------------------------------------------

_SCALARS: dict[str, KeyCodec] = {
    codec.spec: codec
    for codec in (_IntCodec(), _FloatCodec(), _StrCodec(), _BytesCodec(), _TimestampCodec())
}
_TOKEN = re.compile(r"\s*([A-Za-z_]+|[(),])")


@functools.lru_cache(maxsize=256)
def key_codec(spec: str) -> KeyCodec:
    """The codec of a spec such as ``"int"`` or ``"tuple(int,reverse(str))"``.

    Whitespace is ignored; the codec's :attr:`~KeyCodec.spec` is the canonical
    form. An unknown spec raises UsageError listing the valid forms.
    """
    if not isinstance(spec, str):
        raise UsageError(
            f"a key codec spec is a string, got {type(spec).__name__}: use one of {KEY_SPEC_FORMS}"
        )
    tokens = _tokenize(spec)
    codec, used = _parse(spec, tokens, 0)
    if used != len(tokens):
        raise _bad_spec(spec, f"unexpected {tokens[used]!r} after {codec.spec!r}")
    return codec


def infer_key_codec(value: Any) -> KeyCodec:
    """The codec for a table whose first written key is ``value``.

    int -> "int", float -> "float", str -> "str", bytes -> "bytes", datetime ->
    "timestamp", tuple (or list) -> "tuple(...)" of its components. Anything
    else (bool, None, dict, ...) raises UsageError.
    """
    if isinstance(value, bool | np.bool_):
        codec = None
    elif isinstance(value, int | np.integer):
        codec = _SCALARS["int"]
    elif isinstance(value, float | np.floating):
        codec = _SCALARS["float"]
    elif isinstance(value, str):
        codec = _SCALARS["str"]
    elif isinstance(value, bytes | bytearray | memoryview):
        codec = _SCALARS["bytes"]
    elif isinstance(value, datetime.datetime):
        codec = _SCALARS["timestamp"]
    elif isinstance(value, tuple | list) and value:
        codec = key_codec("tuple(" + ",".join(infer_key_codec(v).spec for v in value) + ")")
    else:
        codec = None
    if codec is None:
        raise UsageError(
            f"cannot use {_show(value)} of type {type(value).__name__} as a primary key: keys "
            "are int, float, str, bytes, datetime or non-empty tuples of those; "
            f"or declare key_codec= (one of {KEY_SPEC_FORMS})"
        )
    codec.normalize(value)
    return codec


def infer_key_codec_arrow(dtype: pa.DataType) -> KeyCodec:
    """The codec for a table whose first write is an Arrow key column of type ``dtype``."""
    if pa.types.is_integer(dtype):
        return _SCALARS["int"]
    if pa.types.is_floating(dtype):
        return _SCALARS["float"]
    if _is_string(dtype):
        return _SCALARS["str"]
    if _is_binary(dtype):
        return _SCALARS["bytes"]
    if pa.types.is_timestamp(dtype):
        return _SCALARS["timestamp"]
    if pa.types.is_struct(dtype) and dtype.num_fields:
        inner = ",".join(
            infer_key_codec_arrow(dtype.field(i).type).spec for i in range(dtype.num_fields)
        )
        return key_codec(f"tuple({inner})")
    raise UsageError(
        f"cannot use an Arrow column of type {dtype} as a primary key: key columns are "
        "integer, floating, string, binary, timestamp or a struct of those; "
        f"or declare key_codec= (one of {KEY_SPEC_FORMS})"
    )


def _tokenize(spec: str) -> list[str]:
    tokens = []
    pos = 0
    stripped = spec.rstrip()
    while pos < len(stripped):
        match = _TOKEN.match(stripped, pos)
        if match is None:
            raise _bad_spec(spec, f"unexpected character {stripped[pos:].lstrip()[:1]!r}")
        tokens.append(match.group(1))
        pos = match.end()
    if not tokens:
        raise _bad_spec(spec, "it is empty")
    return tokens


def _parse(spec: str, tokens: list[str], pos: int) -> tuple[KeyCodec, int]:
    if pos >= len(tokens):
        raise _bad_spec(spec, "it ends too early")
    name = tokens[pos]
    if name in _SCALARS:
        return _SCALARS[name], pos + 1
    if name in "(),":
        raise _bad_spec(spec, f"expected a codec, found {name!r}")
    if name not in ("tuple", "reverse"):
        raise _bad_spec(spec, f"unknown codec {name!r}")
    if pos + 1 >= len(tokens) or tokens[pos + 1] != "(":
        raise _bad_spec(spec, f"{name} needs parentheses")
    pos += 2
    parts = []
    while True:
        part, pos = _parse(spec, tokens, pos)
        parts.append(part)
        if pos >= len(tokens):
            raise _bad_spec(spec, "a parenthesis is not closed")
        if tokens[pos] == ")":
            pos += 1
            break
        if tokens[pos] != ",":
            raise _bad_spec(spec, f"unexpected {tokens[pos]!r}")
        pos += 1
    if name == "reverse":
        if len(parts) != 1:
            raise _bad_spec(spec, "reverse takes exactly one codec")
        return _ReverseCodec(parts[0]), pos
    return _TupleCodec(parts), pos


def _bad_spec(spec: str, reason: str) -> UsageError:
    return UsageError(
        f"unknown key codec spec {spec!r} ({reason}): use one of {KEY_SPEC_FORMS}, "
        'nested as needed, e.g. "tuple(int,reverse(str))"'
    )


# -- helpers ------------------------------------------------------------------


def _is_string(dtype: pa.DataType) -> bool:
    return bool(
        pa.types.is_string(dtype) or pa.types.is_large_string(dtype) or str(dtype) == "string_view"
    )


def _is_binary(dtype: pa.DataType) -> bool:
    return bool(
        pa.types.is_binary(dtype)
        or pa.types.is_large_binary(dtype)
        or pa.types.is_fixed_size_binary(dtype)
        or str(dtype) == "binary_view"
    )


def _combine(column: Column) -> pa.Array:
    if isinstance(column, pa.ChunkedArray):
        if column.num_chunks == 1:
            return column.chunk(0)
        return column.combine_chunks()
    return column


def _safe_cast(array: pa.Array, target: pa.DataType, reason: str) -> pa.Array:
    if array.type.equals(target):
        return array
    try:
        return array.cast(target, safe=True)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise _KeyTypeError(f"{reason} ({exc})") from None


def _fixed8_binary(bits: _U64Array) -> pa.Array:
    """A binary array whose row i is the 8 big-endian bytes of ``bits[i]``."""
    count = len(bits)
    data = np.ascontiguousarray(bits.astype(">u8"))
    offsets = np.arange(0, 8 * (count + 1), 8, dtype=np.int32)
    return pa.Array.from_buffers(
        pa.binary(), count, [None, pa.py_buffer(offsets), pa.py_buffer(data)]
    )


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


def _micros_to_datetime(micros: int, error: type[Exception]) -> datetime.datetime:
    try:
        return _EPOCH + datetime.timedelta(microseconds=micros)
    except OverflowError:
        raise error(
            f"{micros} microseconds since the epoch is outside the datetime range "
            "(years 1 to 9999 UTC)"
        ) from None


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _show_bytes(data: bytes) -> str:
    text = data[:40].hex()
    return f"0x{text}" + ("..." if len(data) > 40 else "")
