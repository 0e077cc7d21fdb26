"""One column fitted to a field's type exactly, or a SchemaError naming the value.

:func:`fit_column` takes an Arrow column: a cast to the field's type is
accepted only when casting back gives the same values (an int64 column fits
an int32 field when every value is in range; 1.5 never fits an int field).
:func:`typed_array` takes Python values (records, or a column no cast kernel
converts exactly) and checks each with :func:`~merkle.tablets.fits.loss_check`,
since pyarrow would cut or round some without a word. Both are what
:mod:`merkle.tablets.conform` checks written rows with; they live here to keep
that module to its rows-in, rows-out logic.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa

from merkle.errors import SchemaError
from merkle.lazy import compute as pc
from merkle.tablets.dicts import decoded_values
from merkle.tablets.fits import loss_check
from merkle.tablets.schema import show_value, type_family

__all__ = ["fit_column", "typed_array"]


def fit_column(
    name: str, column: pa.Array | pa.ChunkedArray, target: pa.DataType, key_of: Callable[[int], Any]
) -> pa.Array | pa.ChunkedArray:
    """``column`` as ``target`` when every value converts exactly; SchemaError otherwise."""
    source = column.type
    if source == target:
        return column
    if pa.types.is_dictionary(source):
        column = decoded_values(column)  # no cast kernel for some (string_view: Polars)
        source = column.type
        if source == target:
            return column
    if pa.types.is_null(source):
        return pa.nulls(len(column), target)
    if type_family(source) != type_family(target):
        position = _first_valid(column)
        raise SchemaError(
            f"field {name!r} is {target}, but the data holds {source}"
            + _where(column, position, key_of)
            + f": convert the data, or change the field (alter_schema) or declare it "
            f"schema-free (alter_schema(table, free=[{name!r}]))"
        )
    try:
        candidate = column.cast(target, safe=False)
        back = candidate.cast(source, safe=False)
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid):
        # No exact cast kernel (int64 -> decimal128(10, 2), ...): convert value by value.
        return typed_array(name, column.to_pylist(), target, key_of)
    if back.equals(column):
        return candidate
    before, after = column.to_pylist(), back.to_pylist()
    for position, (a, b) in enumerate(zip(before, after, strict=True)):
        if a != b and not (a != a and b != b):  # NaN equals NaN here
            raise SchemaError(
                f"field {name!r} is {target}: the value {show_value(a)} of the record with key "
                f"{show_value(key_of(position))} does not fit it exactly (it would become "
                f"{show_value(candidate.slice(position, 1).to_pylist()[0])}): "
                f"{_way_out(name, target)}"
            )
    return candidate


def _way_out(name: str, target: pa.DataType) -> str:
    """What to do about a value a field cannot hold: a nested field cannot be widened."""
    free = f"alter_schema(table, free=[{name!r}]); CLI: merkle table alter DB T --free {name}"
    if pa.types.is_nested(target):
        return f"declare the field schema-free ({free}), or fix the value"
    return (
        f"widen the field (alter_schema(table, widen={{{name!r}: ...}})), declare it "
        f"schema-free ({free}), or fix the value"
    )


def _first_valid(column: pa.Array | pa.ChunkedArray) -> int | None:
    valid = pc.is_valid(column)
    index = pc.index(valid, True).as_py()
    return None if index is None or index < 0 else int(index)


def _where(column: Any, position: int | None, key_of: Callable[[int], Any]) -> str:
    if position is None:
        return ""
    value = column.slice(position, 1).to_pylist()[0]
    return f" (first: {show_value(value)}, key {show_value(key_of(position))})"


def typed_array(
    name: str, values: Sequence[Any], target: pa.DataType, key_of: Callable[[int], Any]
) -> pa.Array:
    """Python values as an array of ``target``; SchemaError naming the first that does not fit."""
    lost = loss_check(target)
    try:
        array = pa.array(values, type=target)
        if lost is None or not any(lost(v) for v in values if v is not None):
            return array
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        pass
    for position, value in enumerate(values):
        if value is None:
            continue
        try:
            reason = None if lost is None else lost(value)
            if reason:
                raise ValueError(reason)  # pyarrow would cut or round it without a word
            pa.array([value], type=target)
        except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
            raise SchemaError(
                f"field {name!r} is {target}: the value {show_value(value)} "
                f"({type(value).__name__}) of the record with key {show_value(key_of(position))} "
                f"does not fit it ({exc}): {_way_out(name, target)}"
            ) from None
    raise SchemaError(f"field {name!r} is {target}: its values do not fit it")
