"""Which rows of a column a cast to a field's type does not keep exactly, by Arrow kernels.

:func:`~merkle.tablets.fitcolumn.fit_column` casts a column to its field's type
and back; a row whose round trip differs does not fit. Comparing the two as
Python objects was slow and failed on values Python has no form for (a
timestamp beyond year 9999 raised a raw OverflowError), so :func:`misfit_rows`
compares them with Arrow and numpy kernels, inside lists, structs and maps too.

The round trip alone is no proof between decimals and floats: ``Decimal("0.1")``
into float32 becomes 0.10000000149..., which casts back to the decimal's one
digit as 0.1 again. A float is exactly a decimal of scale ``s`` only when it has
no more than ``s`` decimal places, which is when ``f * 2**s`` is a whole number
(``f`` is a binary fraction): :func:`misfit_rows` checks that too, both ways
(decimal into a float field, float into a decimal field).

Arrow's safe cast is no proof either where it rounds without an error (a float
into a narrower float, a decimal and a float into each other):
:func:`safe_cast_may_round` says when, so that a reader casting stored values to
a type asked for (a Spark user schema) checks them as a write does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeAlias

import numpy as np
import pyarrow as pa

from merkle.lazy import compute as pc
from merkle.tablets.dicts import decoded_values
from merkle.tablets.schema import is_list_type

__all__ = ["misfit_rows", "needs_exactness_check", "row_text", "safe_cast_may_round"]

_Mask: TypeAlias = "np.ndarray[Any, np.dtype[np.bool_]]"
Column: TypeAlias = pa.Array | pa.ChunkedArray

#: The items of a list :func:`row_text` shows (an error message shows 80 characters).
_SHOWN_ITEMS = 8

#: Beyond this, ``10.0 ** n`` is no longer exact in float64 (5**23 > 2**53).
_EXACT_POWERS_OF_TEN = 22


def needs_exactness_check(source: pa.DataType, target: pa.DataType) -> bool:
    """Whether a cast from ``source`` to ``target`` puts a decimal into a float or a float
    into a decimal anywhere (at the top, or inside lists, structs and maps), where a
    round trip that gives the value back does not prove the field holds it exactly."""
    return _anywhere(source, target, _is_decimal_float)


def safe_cast_may_round(source: pa.DataType, target: pa.DataType) -> bool:
    """Whether Arrow's safe cast from ``source`` to ``target`` may change a value without
    an error anywhere (at the top, or inside lists, structs and maps): it checks an
    integer's range and a float's fraction into an integer, but rounds a float into a
    narrower float (one beyond its range becomes an infinity), a decimal into a float
    and a float into a decimal. Such a cast is proved exact by :func:`misfit_rows`."""
    return _anywhere(source, target, _rounds)


def _is_decimal_float(source: pa.DataType, target: pa.DataType) -> bool:
    return _decimal_float(source, target) is not None


def _rounds(source: pa.DataType, target: pa.DataType) -> bool:
    """Whether Arrow's safe cast of one value of ``source`` into ``target`` may round it."""
    narrower = (
        pa.types.is_floating(source)
        and pa.types.is_floating(target)
        and target.bit_width < source.bit_width
    )
    return narrower or _is_decimal_float(source, target)


def _anywhere(
    source: pa.DataType, target: pa.DataType, leaf: Callable[[pa.DataType, pa.DataType], bool]
) -> bool:
    """Whether ``leaf`` holds for a pair of types at the top of a cast from ``source`` to
    ``target`` or anywhere inside them (list items, struct fields of one name, map keys
    and values)."""
    if pa.types.is_dictionary(source):
        source = source.value_type
    if pa.types.is_dictionary(target):
        target = target.value_type
    if leaf(source, target):
        return True
    if pa.types.is_map(source) and pa.types.is_map(target):
        return _anywhere(source.key_type, target.key_type, leaf) or (
            _anywhere(source.item_type, target.item_type, leaf)
        )
    if pa.types.is_struct(source) and pa.types.is_struct(target):
        return any(
            _anywhere(field.type, target.field(field.name).type, leaf)
            for field in source
            if target.get_field_index(field.name) >= 0
        )
    if is_list_type(source) and is_list_type(target):
        return _anywhere(source.value_type, target.value_type, leaf)
    return False


def misfit_rows(column: Column, candidate: Column, back: Column) -> _Mask:
    """Per row of ``column``: whether its value is not held exactly by ``candidate`` (the
    column cast to the field's type), anywhere inside it. ``back`` is ``candidate`` cast
    back to ``column``'s type; a row differs when ``back`` does (nulls equal nulls, NaN
    equals NaN), or when a decimal and a float of it are not the same number."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if isinstance(candidate, pa.ChunkedArray):
        candidate = candidate.combine_chunks()
    if isinstance(back, pa.ChunkedArray):
        back = back.combine_chunks()
    return _differs(column, back, candidate)


def row_text(column: Column, position: int) -> Any:
    """The value at ``position`` as Python, or, when Python has no form for it (a
    timestamp beyond year 9999), an object whose repr is Arrow's rendering."""
    row = column.slice(position, 1)
    if isinstance(row, pa.ChunkedArray):
        row = row.combine_chunks()
    try:
        return row.to_pylist()[0]
    except (OverflowError, ValueError, pa.ArrowException):
        pass
    kind = row.type
    if pa.types.is_dictionary(kind):
        return row_text(_decoded(row), 0)
    if pa.types.is_map(kind):
        return [tuple(entry.values()) for entry in row_text(_entries(row), 0)]
    if pa.types.is_struct(kind):
        return {f.name: row_text(pc.struct_field(row, [i]), 0) for i, f in enumerate(kind)}
    if is_list_type(kind):
        items = pc.list_flatten(row)
        shown = [row_text(items, i) for i in range(min(len(items), _SHOWN_ITEMS))]
        return [*shown, _Text("...")] if len(items) > _SHOWN_ITEMS else shown
    try:
        if pa.types.is_timestamp(kind):  # Arrow writes any year of a zoned timestamp
            ticks = row.cast(pa.int64())
            text = ticks.view(pa.timestamp(kind.unit, tz="UTC")).cast(pa.string())[0].as_py()
            return _Text(f"{text if kind.tz else text.rstrip('Z')} ({kind})")
        if pa.types.is_date(kind) or pa.types.is_duration(kind):
            ticks = row.cast(pa.int64() if kind.bit_width == 64 else pa.int32())[0].as_py()
            unit = getattr(kind, "unit", "days" if pa.types.is_date32(kind) else "ms")
            since = "" if pa.types.is_duration(kind) else " from the epoch"
            return _Text(f"{ticks} {unit}{since} ({kind})")
    except (pa.ArrowException, ValueError):
        pass
    lines = [line.strip() for line in row.to_string().splitlines()[1:-1]]
    return _Text(f"{' '.join(lines)} ({kind})")


class _Text(str):
    """A rendering that shows as itself (no quotes) in an error message."""

    def __repr__(self) -> str:
        return str(self)


# -- the walk -------------------------------------------------------------------


def _differs(column: pa.Array, back: pa.Array, candidate: pa.Array | None) -> _Mask:
    """:func:`misfit_rows` of one array; ``candidate`` None: the field has no such member."""
    if pa.types.is_dictionary(column.type):
        column, back = _decoded(column), _decoded(back)
    if candidate is not None and pa.types.is_dictionary(candidate.type):
        candidate = _decoded(candidate)
    kind = column.type
    if pa.types.is_map(kind):
        column, back = _entries(column), _entries(back)
        candidate = None if candidate is None else _entries(candidate)
        kind = column.type
    if pa.types.is_struct(kind) or is_list_type(kind):
        if back.type != kind or len(back) != len(column):
            return _slice_differs(column, back)
        rows = _null_differs(column, back)
        if pa.types.is_struct(kind):
            for index, field in enumerate(kind):
                inner = None
                if candidate is not None and pa.types.is_struct(candidate.type):
                    at = candidate.type.get_field_index(field.name)
                    inner = None if at < 0 else pc.struct_field(candidate, [at])
                rows |= _differs(
                    pc.struct_field(column, [index]), pc.struct_field(back, [index]), inner
                )
            return rows
        values, returned = pc.list_flatten(column), pc.list_flatten(back)
        if len(values) != len(returned):
            return _slice_differs(column, back)
        inner = None
        if candidate is not None and is_list_type(candidate.type):
            inner = pc.list_flatten(candidate)
            inner = inner if len(inner) == len(values) else None
        parents = pc.list_parent_indices(column).to_numpy(zero_copy_only=False)
        rows[parents[_differs(values, returned, inner)]] = True
        return rows
    rows = _leaf_differs(column, back)
    if candidate is not None:
        rows |= _not_the_same_number(column, candidate)
    return rows


def _leaf_differs(column: pa.Array, back: pa.Array) -> _Mask:
    """Rows of a flat column whose round trip differs."""
    try:
        equal = pc.equal(column, back)
    except (pa.ArrowNotImplementedError, pa.ArrowTypeError, pa.ArrowInvalid):
        return _slice_differs(column, back)  # no compare kernel (a union, say)
    same = pc.or_(pc.fill_null(equal, False), pc.and_(column.is_null(), back.is_null()))
    if pa.types.is_floating(column.type):
        both_nan = pc.and_(pc.is_nan(column), pc.is_nan(back))
        same = pc.or_(same, pc.fill_null(both_nan, False))
    result: _Mask = ~same.to_numpy(zero_copy_only=False)
    return result


def _not_the_same_number(column: pa.Array, candidate: pa.Array) -> _Mask:
    """Rows where a decimal and the float it became, or a float and the decimal it became,
    are not one number: the float has more decimal places than the decimal's scale."""
    pair = _decimal_float(column.type, candidate.type)
    if pair is None:
        return np.zeros(len(column), dtype=bool)
    floats, scale = (candidate, pair) if pa.types.is_decimal(column.type) else (column, pair)
    valid = floats.is_valid().to_numpy(zero_copy_only=False)
    values = pc.fill_null(floats.cast(pa.float64()), 0.0).to_numpy(zero_copy_only=False)
    with np.errstate(over="ignore", invalid="ignore"):
        if scale >= 0:
            scaled = np.ldexp(values, scale)  # exact: a power of two (inf: a whole number)
            exact = np.floor(scaled) == scaled
        elif -scale <= _EXACT_POWERS_OF_TEN:
            exact = np.fmod(values, 10.0**-scale) == 0  # fmod is exact
        else:
            exact = values == 0  # 5**23 divides no odd number below 2**53
    result: _Mask = valid & ~exact
    return result


def _decimal_float(source: pa.DataType, target: pa.DataType) -> int | None:
    """The decimal's scale when one of the two types is a decimal and the other a float."""
    if pa.types.is_decimal(source) and pa.types.is_floating(target):
        return int(source.scale)
    if pa.types.is_floating(source) and pa.types.is_decimal(target):
        return int(target.scale)
    return None


def _null_differs(column: pa.Array, back: pa.Array) -> _Mask:
    result: _Mask = pc.not_equal(column.is_null(), back.is_null()).to_numpy(zero_copy_only=False)
    return result


def _slice_differs(column: pa.Array, back: pa.Array) -> _Mask:
    """Row by row, for what no kernel compares: Arrow's equality of one-row slices."""
    if len(column) != len(back):
        return np.ones(len(column), dtype=bool)
    return np.fromiter(
        (not column.slice(i, 1).equals(back.slice(i, 1)) for i in range(len(column))),
        dtype=bool,
        count=len(column),
    )


def _entries(column: pa.Array) -> pa.Array:
    """A map column as the list of key-value structs it is laid out as."""
    kind = column.type
    entries = pa.struct([kind.key_field, kind.item_field])
    return column.view(pa.list_(pa.field("entries", entries, nullable=False)))


def _decoded(column: pa.Array) -> pa.Array:
    decoded = decoded_values(column)
    return decoded.combine_chunks() if isinstance(decoded, pa.ChunkedArray) else decoded
