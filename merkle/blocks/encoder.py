"""The DAG-CBOR encoder: node values to their one canonical byte string.

Equal content must give equal bytes, so every rule is fixed: map keys are
strings sorted length-first then bytewise (by their UTF-8 bytes), integers and
lengths take their shortest form, floats are always 64-bit, NaN and infinity
are refused, lengths are always definite, and the only tag is 42 (a link:
``0x00`` + CID bytes).

Written here rather than delegated to cbor2 because cbor2 dispatches on exact
types: a ``float`` subclass such as ``numpy.float64`` slips past a float
override and is shrunk to 16 bits, an ``int`` subclass beyond 64 bits becomes
a bignum tag, an ``OrderedDict`` with integer keys bypasses a ``dict``
override, and a ``memoryview`` becomes an array of integers. Each of those
would give equal content different bytes or a block other IPLD tools reject.
This encoder normalises subclasses to their base type and is also about three
times faster on index nodes, whose long lists of ints, bytes and links take
inline fast paths below.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Mapping
from typing import Any, Final

from merkle.blocks.cid import CID
from merkle.blocks.nesting import MAX_CBOR_DEPTH
from merkle.errors import UsageError

__all__ = ["encode_node"]

_Append = Callable[[bytes], None]

_PACK_8: Final = struct.Struct(">BB").pack
_PACK_16: Final = struct.Struct(">BH").pack
_PACK_32: Final = struct.Struct(">BI").pack
_PACK_64: Final = struct.Struct(">BQ").pack
_PACK_DOUBLE: Final = struct.Struct(">Bd").pack

_UINT: Final = 0x00
_NEGINT: Final = 0x20
_BYTES: Final = 0x40
_TEXT: Final = 0x60
_ARRAY: Final = 0x80
_MAP: Final = 0xA0

#: One-byte heads (argument below 24) of every major type, indexed [major >> 5][n].
_TINY: Final = tuple(tuple(bytes((major | n,)) for n in range(24)) for major in range(0, 256, 32))
_TINY_UINT: Final = _TINY[0]
_TINY_BYTES: Final = _TINY[2]
_TINY_TEXT: Final = _TINY[3]

#: Tag 42, then a 37-byte string head, then the 0x00 multibase prefix: the
#: start of every link to a 36-byte CIDv1 (one-byte codes, 32-byte digest).
_LINK_36: Final = b"\xd8\x2a\x58\x25\x00"
_TAG_42: Final = b"\xd8\x2a"

_NULL: Final = b"\xf6"
_TRUE: Final = b"\xf5"
_FALSE: Final = b"\xf4"

_TYPES_HINT: Final = "use None, bool, int, float, str, bytes, list, dict with str keys, or CID"


def _head(major: int, n: int) -> bytes:
    """The shortest head of a major type with argument ``n`` (0 <= n < 2**64)."""
    if n < 24:
        return _TINY[major >> 5][n]
    if n < 0x100:
        return _PACK_8(major | 24, n)
    if n < 0x10000:
        return _PACK_16(major | 25, n)
    if n < 0x100000000:
        return _PACK_32(major | 26, n)
    return _PACK_64(major | 27, n)


def _int(value: int) -> bytes:
    if value >= 0:
        if value < 0x10000000000000000:
            return _head(_UINT, value)
    elif value >= -0x10000000000000000:
        return _head(_NEGINT, -1 - value)
    raise UsageError(
        f"DAG-CBOR integers are limited to 64 bits (-2**64 .. 2**64-1), got {value}; "
        "store larger numbers as bytes or str"
    )


def _float(value: float) -> bytes:
    if math.isnan(value) or math.isinf(value):
        raise UsageError(
            f"DAG-CBOR cannot store {value!r}: NaN and infinity are not allowed; store None instead"
        )
    return _PACK_DOUBLE(0xFB, value)


def _link(raw: bytes, append: _Append) -> None:
    if len(raw) == 36:
        append(_LINK_36)
    else:
        append(_TAG_42)
        append(_head(_BYTES, len(raw) + 1))
        append(b"\x00")
    append(raw)


class _TooDeepError(Exception):
    """A map, list or link of a node below :data:`MAX_CBOR_DEPTH` levels of others."""


def _items(values: Any, append: _Append, depth: int) -> None:
    """Encode a sequence's items; ints, bytes and links (most of an index node) inline.

    ``depth``: the levels (maps, lists, links) that enclose the items.
    """
    for item in values:
        kind = type(item)
        if kind is int:
            if 0 <= item < 0x100000000:
                if item < 24:
                    append(_TINY_UINT[item])
                elif item < 0x100:
                    append(_PACK_8(24, item))
                elif item < 0x10000:
                    append(_PACK_16(25, item))
                else:
                    append(_PACK_32(26, item))
            else:
                append(_int(item))
        elif kind is bytes:
            size = len(item)
            append(_TINY_BYTES[size] if size < 24 else _head(_BYTES, size))
            append(item)
        elif kind is CID:
            if depth >= MAX_CBOR_DEPTH:  # a link is a tag: one level more
                raise _TooDeepError
            _link(item.bytes, append)
        else:
            _value(item, append, depth)


def _map(value: Mapping[Any, Any], append: _Append, depth: int) -> None:
    entries = []
    for key, item in value.items():
        if not isinstance(key, str):
            raise UsageError(
                f"DAG-CBOR map keys must be strings, found {key!r} ({type(key).__name__})"
            )
        encoded = _utf8(key)
        entries.append((len(encoded), encoded, item))
    entries.sort(key=_map_order)
    append(_head(_MAP, len(entries)))
    for size, encoded, item in entries:
        append(_TINY_TEXT[size] if size < 24 else _head(_TEXT, size))
        append(encoded)
        _value(item, append, depth)


def _map_order(entry: tuple[int, bytes, Any]) -> tuple[int, bytes]:
    return entry[0], entry[1]


def _utf8(text: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        raise UsageError(
            f"string {text!r} is not valid Unicode (it holds a lone surrogate); "
            "DAG-CBOR strings must be valid UTF-8"
        ) from None


def _value(value: Any, append: _Append, depth: int) -> None:
    """Encode ``value``, which ``depth`` levels (maps, lists, links) enclose."""
    kind = type(value)
    if kind is dict:
        if depth >= MAX_CBOR_DEPTH:
            raise _TooDeepError
        _map(value, append, depth + 1)
    elif kind is list or kind is tuple:
        if depth >= MAX_CBOR_DEPTH:
            raise _TooDeepError
        append(_head(_ARRAY, len(value)))
        _items(value, append, depth + 1)
    elif kind is str:
        encoded = _utf8(value)
        append(_head(_TEXT, len(encoded)))
        append(encoded)
    elif kind is int or kind is bytes or kind is CID:
        _items((value,), append, depth)
    elif kind is float:
        append(_float(value))
    elif value is None:
        append(_NULL)
    elif value is True:
        append(_TRUE)
    elif value is False:
        append(_FALSE)
    else:
        _subclass(value, append, depth)


def _subclass(value: Any, append: _Append, depth: int) -> None:
    """Encode instances of subclasses (and stand-ins) of the base types as the base type."""
    if isinstance(value, int):  # IntEnum, numpy bools are not ints; bool was handled
        append(_int(int(value)))
    elif isinstance(value, float):  # numpy.float64 and friends
        append(_float(float(value)))
    elif isinstance(value, str):
        _value(str.__str__(value), append, depth)
    elif isinstance(value, (bytes, bytearray, memoryview)):
        _value(bytes(value), append, depth)
    elif isinstance(value, Mapping):
        if depth >= MAX_CBOR_DEPTH:
            raise _TooDeepError
        _map(value, append, depth + 1)
    elif isinstance(value, (list, tuple)):
        if depth >= MAX_CBOR_DEPTH:
            raise _TooDeepError
        append(_head(_ARRAY, len(value)))
        _items(value, append, depth + 1)
    else:
        raise UsageError(
            f"cannot store a value of type {type(value).__name__} in a node: {_TYPES_HINT}"
        )


def encode_node(node: Any, *, room: int = MAX_CBOR_DEPTH) -> bytes:
    """Encode a node (dicts, lists, scalars, CIDs) as canonical DAG-CBOR bytes.

    Tuples encode as lists; subclasses of the base types (``IntEnum``,
    ``numpy.float64``, ``OrderedDict``, ``bytearray``) encode as their base
    type, so equal content always gives equal bytes. Raises
    :class:`UsageError` on anything DAG-CBOR cannot hold: non-string map keys,
    NaN or infinite floats, integers beyond 64 bits, other types, and nesting
    deeper than ``room`` levels (each map, list and link one). ``room`` is at
    most :data:`~merkle.blocks.nesting.MAX_CBOR_DEPTH`, the depth the decoder
    reads; less checks a value that will sit inside a node, below its levels
    (metadata, which a root's map holds, has one level less).
    """
    room = min(room, MAX_CBOR_DEPTH)
    out: list[bytes] = []
    try:
        _value(node, out.append, MAX_CBOR_DEPTH - room)
    except _TooDeepError:
        raise UsageError(
            f"a value nested too deeply, more than {room} levels (each dict, list, tuple "
            f"and link is one), or one that holds itself, cannot be stored: DAG-CBOR "
            f"readers stop at {MAX_CBOR_DEPTH} levels. Flatten it, or store the deep "
            "part as text (json.dumps) or bytes"
        ) from None
    except RecursionError:
        raise UsageError(
            f"node is nested too deeply to encode (DAG-CBOR readers stop at {MAX_CBOR_DEPTH} "
            "levels; subclasses of dict and list take more of Python's stack), or holds "
            "itself; flatten it"
        ) from None
    return b"".join(out)
