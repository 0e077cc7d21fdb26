"""Key codecs by spec: ``key_codec("tuple(int,reverse(str))")``, and inference.

A table declares one key codec; it turns primary-key values into bytes whose
bytewise order is exactly the order of the values. What a codec is:
:mod:`merkle.tablets.keycodec`; the codecs: :mod:`merkle.tablets.keycodecs`;
their bytes: doc/format.md ("Key encoding"). This module turns a spec string
into a codec and picks one from a first key or an Arrow key type.
"""

from __future__ import annotations

import datetime
import functools
import re
from typing import Any

import numpy as np
import pyarrow as pa

from merkle.errors import UsageError
from merkle.tablets.keycodec import KEY_SPEC_FORMS, KeyCodec, _is_binary, _is_string, _show
from merkle.tablets.keycodecs import (
    BytesCodec,
    FloatCodec,
    IntCodec,
    ReverseCodec,
    StrCodec,
    TimestampCodec,
    TupleCodec,
)

__all__ = [
    "KEY_SPEC_FORMS",
    "KeyCodec",
    "infer_key_codec",
    "infer_key_codec_arrow",
    "key_codec",
]

# -- constructors -------------------------------------------------------------

_SCALARS: dict[str, KeyCodec] = {
    codec.spec: codec
    for codec in (IntCodec(), FloatCodec(), StrCodec(), BytesCodec(), TimestampCodec())
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
    if isinstance(value, bool | np.bool_ | np.timedelta64):  # a timedelta64 is an np.integer
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
        return ReverseCodec(parts[0]), pos
    return TupleCodec(parts), pos


def _bad_spec(spec: str, reason: str) -> UsageError:
    return UsageError(
        f"unknown key codec spec {spec!r} ({reason}): use one of {KEY_SPEC_FORMS}, "
        'nested as needed, e.g. "tuple(int,reverse(str))"'
    )
