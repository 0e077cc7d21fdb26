"""Nanosecond time columns brought to microseconds for Python records, or refused.

Python's ``datetime``, ``time`` and ``timedelta`` hold microseconds at
most. pyarrow gives pandas objects for nanosecond timestamps and durations
when pandas is importable (a ValueError when it is not) and cuts a
``time64[ns]`` to whole microseconds without a word, at the top level and
inside lists, structs and maps alike. Records must not depend on what else
is installed nor round silently: :func:`in_micros` casts every nanosecond
unit in a column's type (nested ones too) to microseconds, exactly, and a
value with nanoseconds is a UsageError naming the field and the value.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pyarrow as pa

from merkle.errors import UsageError

__all__ = [
    "FREE_NANOS",
    "READ_AS_ARROW",
    "holds_nanos",
    "in_micros",
    "micros_type",
    "ticks_type",
]

#: What to do about a value with nanoseconds, when records are read.
READ_AS_ARROW = "read it as Arrow (to_arrow, to_batches, get_arrow), where every nanosecond is kept"

#: What to do about a value with nanoseconds, when its field is declared schema-free
#: (``alter_schema(free=)``): the values would be Python's, which hold microseconds at most.
FREE_NANOS = (
    "a schema-free field holds Python values, so leave the field typed (it keeps every "
    "nanosecond), or first write its values rounded to microseconds (e.g. "
    "pyarrow.compute.floor_temporal(column, unit='microsecond')), then declare it schema-free"
)

_TIMES = (pa.types.is_timestamp, pa.types.is_time64, pa.types.is_duration)
_LISTS = (
    pa.types.is_list,
    pa.types.is_large_list,
    pa.types.is_fixed_size_list,
    pa.types.is_list_view,
    pa.types.is_large_list_view,
)


def _is_nanos(kind: pa.DataType) -> bool:
    return any(test(kind) for test in _TIMES) and kind.unit == "ns"


def holds_nanos(kind: pa.DataType) -> bool:
    """Whether ``kind`` is, or holds anywhere inside it, a nanosecond time type."""
    if _is_nanos(kind):
        return True
    if pa.types.is_dictionary(kind):
        return holds_nanos(kind.value_type)
    if isinstance(kind, pa.ExtensionType):
        return holds_nanos(kind.storage_type)
    if pa.types.is_run_end_encoded(kind):
        return holds_nanos(kind.value_type)
    return any(holds_nanos(kind.field(i).type) for i in range(kind.num_fields))


def micros_type(kind: pa.DataType) -> pa.DataType | None:
    """``kind`` with every nanosecond time unit in it (nested ones too) made microseconds;
    None when it holds none, or holds one inside a type this cannot rebuild (a union, an
    extension type: see :func:`holds_nanos`)."""
    return _rebuilt(kind, _micros_leaf)


def ticks_type(kind: pa.DataType) -> pa.DataType | None:
    """``kind`` with every nanosecond time type in it (nested ones too) made ``int64``, the
    ticks it stores (a cast to it keeps every nanosecond); None as :func:`micros_type`."""
    return _rebuilt(kind, lambda _: pa.int64())


def _micros_leaf(kind: pa.DataType) -> pa.DataType:
    if pa.types.is_timestamp(kind):
        return pa.timestamp("us", kind.tz)
    return pa.time64("us") if pa.types.is_time64(kind) else pa.duration("us")


def _rebuilt(kind: pa.DataType, leaf: Callable[[pa.DataType], pa.DataType]) -> pa.DataType | None:
    """``kind`` with each nanosecond time type in it replaced by ``leaf`` of it; None when
    it holds none, or holds one inside a type this cannot rebuild."""
    types = pa.types
    if _is_nanos(kind):
        return leaf(kind)
    if any(test(kind) for test in _LISTS):
        inner = _rebuilt(kind.value_type, leaf)
        if inner is None:
            return None
        field = kind.value_field.with_type(inner)
        if types.is_fixed_size_list(kind):
            return pa.list_(field, kind.list_size)
        if types.is_list_view(kind):
            return pa.list_view(field)
        if types.is_large_list_view(kind):
            return pa.large_list_view(field)
        return pa.large_list(field) if types.is_large_list(kind) else pa.list_(field)
    if types.is_map(kind):
        key, item = _rebuilt(kind.key_type, leaf), _rebuilt(kind.item_type, leaf)
        if key is None and item is None:
            return None
        return pa.map_(
            kind.key_field.with_type(key or kind.key_type),
            kind.item_field.with_type(item or kind.item_type),
            kind.keys_sorted,
        )
    if types.is_struct(kind):
        fields = [kind.field(i) for i in range(kind.num_fields)]
        inner_types = [_rebuilt(f.type, leaf) for f in fields]
        if all(t is None for t in inner_types):
            return None
        return pa.struct(
            [f if t is None else f.with_type(t) for f, t in zip(fields, inner_types, strict=True)]
        )
    if types.is_dictionary(kind):
        value = _rebuilt(kind.value_type, leaf)
        return None if value is None else pa.dictionary(kind.index_type, value, kind.ordered)
    return None


def in_micros(
    column: pa.ChunkedArray,
    name: str,
    *,
    fix: str = READ_AS_ARROW,
    row: Callable[[int], str] | None = None,
) -> pa.ChunkedArray:
    """A column whose type holds nanosecond times (timestamp, time64, duration; at the top
    level or inside lists, structs and maps) with them in microseconds, the finest unit of
    Python's datetime, time and timedelta; any other column as it is.

    A value with nanoseconds is a UsageError naming the field and the value, ending
    with ``fix`` (what to do instead): never a rounded value, never a pandas object.
    ``row(i)`` names the record of row ``i`` (``"the record with key 7"``): the error
    then names the first record holding one too.
    """
    kind = column.type
    if not holds_nanos(kind):
        return column
    micros = micros_type(kind)
    if micros is not None:
        try:
            return column.cast(micros)
        except pa.ArrowInvalid:
            pass  # a value with nanoseconds: named below
        except pa.ArrowNotImplementedError:
            micros = None
    first = _first_nanos(column)
    if micros is None and first is None:
        raise UsageError(
            f"field {name!r} ({kind}) holds nanosecond times inside a type whose values "
            f"Python records cannot show exactly: {fix}"
        )
    example = "" if first is None else f" (e.g. {first} ns)"
    position = None if row is None or micros is None else _first_row(column, micros)
    if position is not None:
        assert row is not None
        shown = "" if first is None else f"{first} ns, "
        example = f" ({shown}first in {row(position)})"
    raise UsageError(
        f"field {name!r} ({kind}) holds times to the nanosecond{example}, which Python's "
        f"datetime types cannot hold: {fix}"
    )


def _first_row(column: pa.ChunkedArray, micros: pa.DataType) -> int | None:
    """The first row of ``column`` that does not cast to ``micros`` exactly (the error
    path only): found by halving the rows, O(log n) casts, at any depth of nesting."""

    def fits(start: int, length: int) -> bool:
        # Taken, not sliced: a cast of a sliced list checks the values of every row.
        rows = column.take(pa.array(range(start, start + length), pa.int64()))
        try:
            rows.cast(micros)
        except pa.ArrowInvalid:
            return False
        return True

    low, high = 0, len(column)
    if fits(low, high):
        return None
    while high - low > 1:
        middle = (low + high) // 2
        if fits(low, middle - low):
            low = middle
        else:
            high = middle
    return low


def _first_nanos(column: pa.ChunkedArray) -> int | None:
    """The first nanosecond tick in ``column`` that is not a whole microsecond (the error
    path only), or None when none is found."""
    import numpy as np  # only to name a value in the error

    try:
        for chunk in column.chunks:
            for leaf in _leaves(chunk):
                ticks = leaf.view(pa.int64()).fill_null(0).to_numpy(zero_copy_only=False)
                odd = np.flatnonzero(ticks % 1000)
                if len(odd):
                    return int(ticks[odd[0]])
    except (pa.ArrowException, ValueError, TypeError):
        pass  # a layout not walked here: the error names no value
    return None


def _leaves(array: pa.Array) -> Iterator[pa.Array]:
    """The nanosecond time arrays inside ``array`` (its values, not its slots)."""
    kind = array.type
    if _is_nanos(kind):
        yield array
    elif pa.types.is_dictionary(kind):
        yield from _leaves(array.dictionary)
    elif pa.types.is_map(kind):
        yield from _leaves(array.keys)
        yield from _leaves(array.items)
    elif any(test(kind) for test in _LISTS):
        yield from _leaves(array.flatten())
    elif pa.types.is_struct(kind):
        for child in array.flatten():
            yield from _leaves(child)
