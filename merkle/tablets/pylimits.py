"""What Python's datetime types hold, to say why a stored value has no Python form.

Arrow holds temporal values far beyond Python's: a ``date32`` past year 9999,
a ``duration`` of 2**62 seconds. Reading one as a record is refused
(:func:`merkle.tablets.freeform.python_values`); the message must name the
limit of the value's own kind (a duration has no years and no time zone), so
:func:`python_limit` finds the kind of the value that fails, inside lists,
structs and maps too, and says what Python holds of that kind.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa

from merkle.tablets.fits import is_list_like

__all__ = ["failing_kind", "python_limit"]

#: The errors Python's conversion of an Arrow value raises when it has no Python form.
_UNCONVERTIBLE = (OverflowError, ValueError)


def _fails(array: pa.Array, convert: Callable[[pa.Array], Any]) -> bool:
    try:
        convert(array)
    except _UNCONVERTIBLE:
        return True
    return False


def _children(array: pa.Array) -> list[pa.Array]:
    """The arrays of values ``array`` (one record's value) is made of, each as the
    parent holds it (a list's items within its offsets, a struct's members where the
    struct is not null)."""
    if isinstance(array, pa.ExtensionArray):
        return [array.storage]
    if isinstance(array, pa.DictionaryArray):
        return [array.dictionary_decode()]
    if isinstance(array, pa.StructArray):
        return list(array.flatten())
    if isinstance(array, pa.MapArray):
        # Arrow has no list_flatten kernel for a map; its keys and items are whole-column
        # arrays (not cut to a slice), so they are cut to the slice's offsets here.
        offsets = array.offsets
        start = offsets[0].as_py()
        length = offsets[-1].as_py() - start
        return [array.keys.slice(start, length), array.items.slice(start, length)]
    return [array.flatten()] if is_list_like(array.type) else []


def failing_kind(
    array: pa.Array, convert: Callable[[pa.Array], Any] = pa.Array.to_pylist
) -> pa.DataType | None:
    """The type of the innermost value in ``array`` that ``convert`` cannot make a
    Python value of (``array`` itself when no child fails alone); None when it all
    converts. Meant for one record's value, on the error path."""
    if not _fails(array, convert):
        return None
    for child in _children(array):
        kind = failing_kind(child)
        if kind is not None:
            return kind
    return array.type


def python_limit(kind: pa.DataType, *, top: bool = True) -> str | None:
    """What Python holds of values of ``kind``, as a phrase; None for a kind whose
    values all have a Python form. ``top``: ``kind`` is a field's own type (a zoned
    timestamp field is made in its zone), not a type inside a nested value (made
    in UTC first, then moved to its zone)."""
    if pa.types.is_duration(kind):
        return "a duration is a Python timedelta, which holds -999,999,999 to 999,999,999 days"
    if pa.types.is_date(kind):
        return "a date is a Python date, which holds years 1 to 9999"
    if pa.types.is_time(kind):
        return "a time is a Python time of day, which holds 00:00 to 23:59:59.999999"
    if pa.types.is_timestamp(kind):
        if kind.tz is None:
            return "a timestamp is a Python datetime, which holds years 1 to 9999"
        where = (
            f"in the field's time zone ({kind.tz})"
            if top
            else f"both in UTC and in its time zone ({kind.tz})"
        )
        return f"a timestamp is a Python datetime, which holds years 1 to 9999 {where}"
    return None
