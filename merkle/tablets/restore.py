"""Stored columns given the schema's types back, and filters over rows in those types.

Segments store a field in its :func:`~merkle.tablets.schema.storage_type`
(no dictionaries, views or run-end encoding); a read gives each column the
field's own type (:func:`restore_column`), and a filter over rows in those
types (:func:`filtered`) works around the types Arrow cannot filter.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from merkle.lazy import compute as pc
from merkle.tablets.dicts import cast_to, has_dictionary, restore_fitting
from merkle.tablets.storedform import (
    LIST_ARRAYS,
    decode_run_ends,
    fresh_offsets,
    holds_run_ends,
    storage_type,
    stored_column,
)

__all__ = ["decode_run_ends", "filtered", "holds_run_ends", "null_column", "restore_column"]


def restore_column(column: Any, kind: pa.DataType, name: str = "") -> Any:
    """A stored column as the schema's type (struct fields matched by position).

    A column whose values outnumber a dictionary index type of ``kind``
    comes back as several chunks, each with a dictionary that fits
    (:func:`~merkle.tablets.dicts.restore_fitting`).
    """
    if column.type == kind:
        return column
    if pa.types.is_null(kind):  # a field not typed yet (no rows): a declared codec's type
        return pa.nulls(len(column))
    if isinstance(column, pa.ChunkedArray):
        if has_dictionary(kind):
            chunks = [
                piece
                for chunk in column.chunks
                for piece in restore_fitting(name, chunk, kind, restore_column)
            ]
            return pa.chunked_array(chunks, type=kind)
        return pa.chunked_array([restore_column(chunk, kind) for chunk in column.chunks], type=kind)
    if pa.types.is_struct(kind) and pa.types.is_struct(column.type):
        children = [
            restore_column(column.field(i), kind.field(i).type) for i in range(kind.num_fields)
        ]
        return pa.StructArray.from_arrays(
            children, fields=list(kind), mask=column.is_null() if column.null_count else None
        )
    if pa.types.is_map(kind) and pa.types.is_map(column.type) and holds_run_ends(kind):
        keys = restore_column(column.keys, kind.key_type)
        items = restore_column(column.items, kind.item_type)
        mask = column.is_null() if column.null_count else None
        offsets = fresh_offsets(column.offsets)
        return pa.MapArray.from_arrays(offsets, keys, items, type=kind, mask=mask)
    if pa.types.is_run_end_encoded(kind):
        return pc.run_end_encode(
            restore_column(column, kind.value_type), run_end_type=kind.run_end_type
        )
    lists = LIST_ARRAYS.get(kind.id) if column.type.id == kind.id else None
    if lists is None or not holds_run_ends(kind.value_type):
        return cast_to(column, kind)  # a plain cast, or dictionaries Arrow does not cast to
    # A list of run-end encoded items: no cast reaches them (and an empty column's cast
    # "succeeds" with an invalid array), so its items are restored.
    mask = column.is_null() if column.null_count else None
    if pa.types.is_fixed_size_list(kind):
        size = kind.list_size
        values = column.values.slice(column.offset * size, len(column) * size)
        items = restore_column(values, kind.value_type)
        return pa.FixedSizeListArray.from_arrays(items, type=kind, mask=mask)
    items = restore_column(column.values, kind.value_type)
    return lists.from_arrays(fresh_offsets(column.offsets), items, type=kind, mask=mask)


def null_column(count: int, kind: pa.DataType) -> pa.Array:
    """``count`` nulls of ``kind``: Arrow's own nulls of a type holding run-end encoded
    items are invalid (the items get a null bitmap), so those are restored from nulls
    of the stored type."""
    if not holds_run_ends(kind):
        return pa.nulls(count, kind)
    return restore_column(pa.nulls(count, storage_type(kind)), kind)


def filtered(rows: pa.Table, predicate: Any) -> pa.Table:
    """``rows.filter(predicate)`` of rows in the user's types (``predicate`` a
    ``pyarrow.compute.Expression``).

    Arrow has no filter kernel for string and binary views nor for run-end
    encoded columns (at any depth): such columns are filtered in their stored
    form (:func:`~merkle.tablets.schema.storage_type`, which the predicate
    compares as it would the declared type) and given their types back after,
    as a read gives them.
    """
    try:
        return rows.filter(predicate)
    except pa.ArrowNotImplementedError:
        if all(storage_type(field.type) == field.type for field in rows.schema):
            raise
    plain = [stored_column(column) for column in rows.columns]
    kept = pa.Table.from_arrays(plain, names=rows.column_names).filter(predicate)
    columns = [
        restore_column(kept.column(i), field.type, field.name)
        for i, field in enumerate(rows.schema)
    ]
    return pa.Table.from_arrays(columns, schema=rows.schema)
