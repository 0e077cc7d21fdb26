"""Whether written rows keep the nullability their schema declares, at the top and inside.

A field marked NOT NULL must hold a value in every whole record
(:func:`check_nullability`). Inside a nested field, the schema can mark a
list's items, a map's values or a struct's members NOT NULL as well; pyarrow
builds such an array from Python values, and casts Arrow data to such a type,
with the nulls kept and no word, and the table read back then contradicts its
own schema (Parquet refuses to write it). :func:`check_inner_nulls` refuses a
null in such a place, on every write path (records and Arrow data, whole or
partial): it runs Arrow kernels over the column, one level of nesting at a
time, and only for types that mark something inside NOT NULL (the default
marks nothing, and costs a type walk, cached).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from merkle.errors import SchemaError
from merkle.lazy import compute as pc
from merkle.tablets.schema import is_list_type, show_value
from merkle.tablets.typecache import per_type

__all__ = ["check_inner_nulls", "check_nullability", "first_null"]


def check_nullability(
    schema: pa.Schema,
    stored: Mapping[str, Any],
    key_fields: Sequence[str],
    key_of: Callable[[int], Any],
) -> None:
    """SchemaError for a NOT NULL field (not a key field) that ``stored`` (the written
    columns by name) lacks, or where one of its rows is null."""
    for field in schema:
        if field.nullable or field.name in key_fields:
            continue
        column = stored.get(field.name)
        if column is None:
            raise SchemaError(
                f"field {field.name!r} is not nullable, but the records "
                f"(first key {show_value(key_of(0))}) do not hold it: give it a value, "
                f"or make it nullable (alter_schema(table, nullable=[{field.name!r}]))"
            )
        if column.null_count:
            position = first_null(column)
            raise SchemaError(
                f"field {field.name!r} is not nullable, but the record with key "
                f"{show_value(key_of(position))} has no value for it"
            )


def first_null(column: Any) -> int:
    """The position of the first null of ``column`` (which holds one)."""
    return int(pc.index(pc.is_null(column), True).as_py())


def check_inner_nulls(name: str, column: Any, key_of: Callable[[int], Any]) -> None:
    """SchemaError naming field ``name`` and the record (``key_of(row)``) where ``column``
    (in segment form) holds a null that its type marks NOT NULL inside: a list's item,
    a map's value, or a struct's member (of a struct that is itself there)."""
    if not _marks_inside(column.type):
        return
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    start = 0
    for chunk in chunks:
        found = _first_inner_null(chunk)
        if found is not None:
            row, where = found
            raise SchemaError(
                f"field {name!r} is {column.type}: the record with key "
                f"{show_value(key_of(start + row))} holds a null as {where}, which the "
                "field marks NOT NULL: give a value there, or declare the field "
                f"schema-free (alter_schema(table, free=[{name!r}]))"
            )
        start += len(chunk)


@per_type
def _marks_inside(kind: pa.DataType) -> bool:
    """Whether ``kind`` marks a list item, map value or struct member NOT NULL anywhere."""
    if is_list_type(kind):
        return not kind.value_field.nullable or _marks_inside(kind.value_type)
    if pa.types.is_map(kind):
        return (
            not kind.item_field.nullable
            or _marks_inside(kind.key_type)
            or _marks_inside(kind.item_type)
        )
    if pa.types.is_struct(kind):
        return any(
            not kind.field(i).nullable or _marks_inside(kind.field(i).type)
            for i in range(kind.num_fields)
        )
    return False


def _first_inner_null(array: pa.Array) -> tuple[int, str] | None:
    """The first row of ``array`` holding a null its type forbids inside, and where."""
    kind = array.type
    if is_list_type(kind) or pa.types.is_map(kind):
        return _in_lists(array)
    if pa.types.is_struct(kind):
        return _in_struct(array)
    return None


def _in_lists(array: pa.Array) -> tuple[int, str] | None:
    """A list (or map) column: its items (a map's entries) are checked all at once, and a
    finding is traced back to its row through the lists' lengths."""
    kind = array.type
    if pa.types.is_map(kind):
        # a map is a list of entry structs: viewed so (the value field nullable, or
        # Arrow refuses the view), its entries are flattened as a list's items are
        entries = pa.struct([kind.key_field, kind.item_field.with_nullable(True)])
        array = array.view(pa.list_(entries))
        flat = array.flatten()
        parts = [
            (flat.field(0), kind.key_field, "a map's key"),
            (flat.field(1), kind.item_field, "a map's value"),
        ]
    else:
        parts = [(array.flatten(), kind.value_field, "a list's item")]
    for values, field, what in parts:
        position: int | None = None
        where = what
        if not field.nullable and values.null_count:
            position = first_null(values)
        elif _marks_inside(field.type):
            inner = _first_inner_null(values)
            if inner is not None:
                position, where = inner[0], f"{inner[1]} inside {what}"
        if position is not None:
            lengths = pc.fill_null(pc.list_value_length(array), 0).to_numpy(zero_copy_only=False)
            row = int(np.searchsorted(np.cumsum(lengths), position, side="right"))
            return row, where
    return None


def _in_struct(array: pa.StructArray) -> tuple[int, str] | None:
    """A struct column: a member is null where its struct is not (the members of a null
    struct are null with it, which is no fault)."""
    kind = array.type
    members = array.flatten()  # each member null where its struct is null, too
    for i in range(kind.num_fields):
        field, member = kind.field(i), members[i]
        what = f"member {field.name!r}"
        if not field.nullable and member.null_count:
            wrong = pc.and_(pc.is_null(member), pc.is_valid(array))
            position = pc.index(wrong, True).as_py()
            if position is not None and position >= 0:
                return int(position), what
        if _marks_inside(field.type):
            inner = _first_inner_null(member)
            if inner is not None:
                return inner[0], f"{inner[1]} inside {what}"
    return None
