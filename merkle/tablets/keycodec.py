"""Order-preserving, reversible key codecs: what every codec is (:class:`KeyCodec`).

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
import struct
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, TypeAlias

import numpy as np
import pyarrow as pa

from merkle.errors import IntegrityError, UsageError

__all__ = ["KEY_SPEC_FORMS", "Column", "KeyCodec"]

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

    def encode_unique(self, values: Sequence[Any]) -> list[bytes]:
        """The distinct key bytes of ``values``, sorted: what a lookup of many keys asks
        the tree for. UsageError as :meth:`encode` for a value that is not a key."""
        return sorted({self.encode(value) for value in values})

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

    def order_words(self, column: Column) -> _U64Array | None:
        """The keys of a native key column as unsigned 64-bit integers in key order, or None.

        For codecs whose encoding is exactly 8 bytes (int, float, timestamp)
        word ``i`` is ``encode(value_i)`` read as a big-endian integer, so a
        key index can be built without making the binary encodings at all
        (a page lookup's main cost before); other codecs answer None.
        """
        return None

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


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _show_bytes(data: bytes) -> str:
    text = data[:40].hex()
    return f"0x{text}" + ("..." if len(data) > 40 else "")
