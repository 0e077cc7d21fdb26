"""Dictionary-encoded fields: values that outnumber the index type, on write and on read.

Segments store a dictionary field decoded (:func:`~merkle.tablets.schema.storage_type`),
so writes to one field may together hold more distinct values than its index
type can number (two writes of 100 values each to a ``dictionary<int8,
string>`` field: 200 values, indices only to 127). Every such version must
stay readable: :func:`restore_fitting` gives such a column as several chunks,
each with its own dictionary that fits (Arrow allows one dictionary per chunk,
and ``to_batches`` yields batches that each fit). Only a column that overflows
pays: the others are cast once, as before.

One write is held to what Arrow itself accepts (:func:`check_fits`): the
values of one array (one chunk of user Arrow, all records of one write) must
fit one dictionary of the field's index type, or the write is a SchemaError
naming the field, the index type and the count.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa

from merkle.errors import SchemaError
from merkle.lazy import compute as pc
from merkle.tablets.typecache import per_type

__all__ = [
    "cast_to",
    "check_dictionaries",
    "check_fits",
    "declarable_type",
    "decoded_values",
    "has_dictionary",
    "index_capacity",
    "restore_fitting",
]


@per_type
def has_dictionary(kind: pa.DataType) -> bool:
    """Whether ``kind`` is, or holds anywhere inside, a dictionary type (cached per type)."""
    if pa.types.is_dictionary(kind):
        return True
    return any(has_dictionary(kind.field(i).type) for i in range(kind.num_fields))


def _dictionaries(kind: pa.DataType) -> list[pa.DictionaryType]:
    if pa.types.is_dictionary(kind):
        return [kind]
    return [d for i in range(kind.num_fields) for d in _dictionaries(kind.field(i).type)]


def index_capacity(index: pa.DataType) -> int:
    """How many dictionary values an index type can number (int8: 128, uint8: 256):
    indices are never negative."""
    bits = int(index.bit_width) - (1 if pa.types.is_signed_integer(index) else 0)
    return 1 << bits


def _advice(name: str, kind: pa.DataType) -> str:
    plain = kind.value_type if pa.types.is_dictionary(kind) else "its value type"
    return (
        f"declare the field with a wider index (dictionary<int16|int32, ...>; an existing "
        f"field: alter_schema(table, widen={{{name!r}: ...}})) or as {plain}"
    )


def check_fits(name: str, array: pa.Array | pa.ChunkedArray, kind: pa.DataType) -> None:
    """SchemaError unless each chunk of ``array`` (storage form) can be cast to ``kind``.

    Call it only for a ``kind`` that :func:`has_dictionary`: it casts the values.
    """
    chunks = array.chunks if isinstance(array, pa.ChunkedArray) else [array]
    for chunk in chunks:
        try:
            cast_to(chunk, kind)
        except pa.ArrowInvalid:
            raise _too_many(name, chunk, kind, "one write") from None


def cast_to(array: pa.Array, kind: pa.DataType) -> pa.Array:
    """``array`` (storage form: no dictionaries) as ``kind``, which has dictionaries.

    Arrow casts strings and bytes to a dictionary type, but not numbers, dates
    or decimals (``dictionary<int8, int64>``, a pandas ``Categorical`` of
    ints): those are dictionary-encoded, then given the index type. A struct's
    children are cast one by one, so a struct may hold such a dictionary too
    (:func:`check_dictionaries` refuses one inside a list or map).
    """
    try:
        return array.cast(kind)
    except pa.ArrowNotImplementedError:
        if pa.types.is_dictionary(kind) and not pa.types.is_dictionary(array.type):
            values = array if array.type == kind.value_type else array.cast(kind.value_type)
            return values.dictionary_encode().cast(kind)
        if not (pa.types.is_struct(kind) and pa.types.is_struct(array.type)):
            raise
    children = [cast_to(array.field(i), kind.field(i).type) for i in range(kind.num_fields)]
    return pa.StructArray.from_arrays(
        children, fields=list(kind), mask=array.is_null() if array.null_count else None
    )


def _castable(value_type: pa.DataType) -> bool:
    """Whether Arrow casts values of this type to a dictionary of them, even nested."""
    types = pa.types
    return bool(
        types.is_string(value_type)
        or types.is_large_string(value_type)
        or types.is_binary(value_type)
        or types.is_large_binary(value_type)
        or types.is_null(value_type)
    )


def _encodable(value_type: pa.DataType) -> bool:
    """Whether Arrow dictionary-encodes values of this type (no nested types)."""
    types = pa.types
    return bool(
        _castable(value_type)
        or types.is_integer(value_type)
        or types.is_floating(value_type)
        or types.is_decimal(value_type)
        or types.is_temporal(value_type)
        or types.is_boolean(value_type)
        or types.is_fixed_size_binary(value_type)
    )


def _unsupported(kind: pa.DataType, in_list: bool) -> pa.DataType | None:
    if pa.types.is_dictionary(kind):
        value = kind.value_type
        return None if _castable(value) or (_encodable(value) and not in_list) else kind
    nested = in_list or not pa.types.is_struct(kind)
    for i in range(kind.num_fields):
        found = _unsupported(kind.field(i).type, nested)
        if found is not None:
            return found
    return None


def check_dictionaries(kind: pa.DataType, name: str, where: str) -> None:
    """SchemaError when field ``name`` of ``kind`` holds a dictionary type merkle-db cannot
    rebuild on read: values of a nested type (``dictionary<int8, list<int64>>``), or
    values other than strings and bytes inside a list or map. Segments store
    dictionaries decoded, so every read would fail: refused when declared, added or
    learned from a write, like an unknown time zone."""
    found = _unsupported(kind, in_list=False)
    if found is None:
        return
    raise SchemaError(
        f"{where}: field {name!r} is {kind}: merkle-db stores dictionaries of strings or "
        "bytes anywhere, and of numbers, dates, decimals or bools outside lists and maps, "
        f"not {found}; declare {found.value_type} in its place"
    )


def _too_many(name: str, chunk: pa.Array, kind: pa.DataType, what: str) -> SchemaError:
    if pa.types.is_dictionary(kind):
        count = pc.count_distinct(chunk, mode="only_valid").as_py()
        index = kind.index_type
        return SchemaError(
            f"field {name!r} is {kind}: {what} holds {count} distinct values, but its "
            f"index type {index} numbers at most {index_capacity(index)}: {_advice(name, kind)}"
        )
    indices = ", ".join(sorted({str(d.index_type) for d in _dictionaries(kind)}))
    return SchemaError(
        f"field {name!r} is {kind}: {what} holds more distinct values than its dictionary "
        f"index type ({indices}) can number: {_advice(name, kind)}"
    )


def restore_fitting(
    name: str,
    chunk: pa.Array,
    kind: pa.DataType,
    restore: Callable[[Any, pa.DataType], Any],
) -> list[pa.Array]:
    """``chunk`` as ``kind`` by ``restore``: one array when its dictionaries fit their
    index types, else consecutive slices that each fit (each with its own dictionary).

    Only the overflow case does more than one cast: a failing piece is halved
    until each half fits. A single row that cannot fit (a list of more distinct
    values than its index numbers) is a SchemaError naming the field.
    """
    try:
        return [restore(chunk, kind)]
    except pa.ArrowInvalid:
        if len(chunk) <= 1:
            raise _too_many(name, chunk, kind, "a record") from None
    half = len(chunk) // 2
    pieces = [chunk.slice(0, half), chunk.slice(half)]
    if not pa.types.is_dictionary(kind):
        # A cast of a sliced list casts all its child values: copy just the slice's.
        pieces = [pa.concat_arrays([piece]) for piece in pieces]
    return [part for piece in pieces for part in restore_fitting(name, piece, kind, restore)]


def declarable_type(kind: pa.DataType) -> pa.DataType:
    """The type a new field takes from data of ``kind``: Arrow cannot build a dictionary of
    views (Polars' categoricals), so such a field is a dictionary of strings or bytes."""
    if pa.types.is_dictionary(kind) and str(kind.value_type) in ("string_view", "binary_view"):
        plain = pa.string() if str(kind.value_type) == "string_view" else pa.binary()
        return pa.dictionary(kind.index_type, plain, kind.ordered)
    return kind


def decoded_values(column: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """A dictionary column's values: Arrow has no cast or take kernel for dictionaries of
    views (Polars' categoricals are dictionary<string_view>), so those decode as strings,
    and no cast from a dictionary of nested values (lists, structs), which are taken."""
    try:
        return column.cast(column.type.value_type)
    except pa.ArrowNotImplementedError:
        value_type = column.type.value_type
        view = str(value_type) in ("string_view", "binary_view")
        plain = (
            (pa.string() if str(value_type) == "string_view" else pa.binary())
            if view
            else value_type
        )
        chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
        decoded = [
            (chunk.dictionary.cast(plain) if view else chunk.dictionary).take(chunk.indices)
            for chunk in chunks
        ]
        return pa.chunked_array(decoded, type=plain)
