"""Whether a Python value fits an Arrow type exactly.

pyarrow converts some Python values into a type with a loss and no word: a
float into an integer type is truncated, a datetime into a date loses its
time of day, a fraction of a second below a timestamp's, time's or
duration's unit is cut, a float into float32 is rounded. A value that does
not fit its field is a SchemaError (doc/api.md, "Schemas"), as the same
value given as Arrow data already was (a cast that does not round-trip).
"""

from __future__ import annotations

import datetime
import struct
from collections.abc import Callable
from typing import Any

import pyarrow as pa

__all__ = ["loss_check"]


def loss_check(target: pa.DataType) -> Callable[[Any], str | None] | None:
    """For a type pyarrow converts some Python values into with a loss (cutting or
    rounding them without a word), a function naming the loss of one value (None when
    it fits exactly); None for other types. Nested types are checked inside: a struct
    also loses a member its fields do not name, which pyarrow drops without a word."""
    if pa.types.is_struct(target):
        return _struct_check(target)
    if pa.types.is_list(target) or pa.types.is_large_list(target):
        return _items_check(loss_check(target.value_type))
    if pa.types.is_fixed_size_list(target):
        return _items_check(loss_check(target.value_type))
    if pa.types.is_integer(target):
        return lambda v: "it is not a whole number" if _fractional(v) else None
    if pa.types.is_float32(target):
        return _float32_loss
    if pa.types.is_date(target):
        return lambda v: (
            "it has a time of day, which a date drops"
            if isinstance(v, datetime.datetime) and v.time() != datetime.time()
            else None
        )
    unit = getattr(target, "unit", None)
    step = {"s": 1_000_000, "ms": 1_000}.get(unit or "")
    if step is None:
        return None
    if pa.types.is_timestamp(target) or pa.types.is_time(target):
        return lambda v: (
            f"it has a fraction of a second finer than the field's unit ({unit})"
            if isinstance(v, datetime.datetime | datetime.time) and v.microsecond % step
            else None
        )
    if pa.types.is_duration(target):
        return lambda v: (
            f"it has a fraction of a second finer than the field's unit ({unit})"
            if isinstance(v, datetime.timedelta) and v.microseconds % step
            else None
        )
    return None


def _struct_check(target: pa.StructType) -> Callable[[Any], str | None]:
    children = {
        target.field(i).name: loss_check(target.field(i).type) for i in range(target.num_fields)
    }

    def check(value: Any) -> str | None:
        if not isinstance(value, dict):
            return None  # pyarrow refuses what is not a mapping
        for name, member in value.items():
            if name not in children:
                return (
                    f"it has member {name!r}, which the struct's fields ({', '.join(children)}) "
                    "do not name and would be dropped"
                )
            inner = children[name]
            lost = None if inner is None or member is None else inner(member)
            if lost:
                return f"its member {name!r}: {lost}"
        return None

    return check


def _items_check(inner: Callable[[Any], str | None] | None) -> Callable[[Any], str | None] | None:
    if inner is None:
        return None

    def check(value: Any) -> str | None:
        if not isinstance(value, list | tuple):
            return None
        for item in value:
            lost = None if item is None else inner(item)
            if lost:
                return f"an item: {lost}"
        return None

    return check


def _float32_loss(value: Any) -> str | None:
    if not isinstance(value, float) or value != value:  # NaN is NaN in either width
        return None
    try:
        narrowed = struct.unpack("<f", struct.pack("<f", value))[0]
    except OverflowError:
        return "it is beyond the range of float32"
    return None if narrowed == value else f"float32 holds it only as {narrowed!r}"


def _fractional(value: Any) -> bool:
    return isinstance(value, float) and not value.is_integer()
