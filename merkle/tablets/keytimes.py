"""Timestamp key fields: the field's own type, naive or zoned, over the UTC key codec.

The ``timestamp`` key codec stores every key as microseconds since the epoch
in UTC (its Arrow type is ``timestamp[us, tz=UTC]``; a naive value is taken
as UTC). The key *field* keeps the type the data gave it, as any field does:
an Arrow ``timestamp[us]`` key column makes a naive key field, and a first
write of records whose key datetimes are naive does too, as a naive datetime
in any other field does (:func:`record_key_type`). Reads give the field's
type back: ``to_arrow`` casts to it, and records of a naive key field hold
naive datetimes (:func:`naive_key_values`), the values that were written.

Records whose first write mixes naive and aware key datetimes are a
SchemaError, as such values are in any other new field. A table whose key
field is already UTC (every table written from records before) keeps it.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa

from merkle.errors import SchemaError
from merkle.lazy import compute as pc
from merkle.tablets.schema import show_value

__all__ = ["is_naive_timestamp", "naive_key_values", "record_key_type"]


def is_naive_timestamp(kind: pa.DataType) -> bool:
    """Whether ``kind`` is a timestamp without a time zone."""
    return pa.types.is_timestamp(kind) and kind.tz is None


def record_key_type(
    name: str, stored: pa.DataType, values: Sequence[Any], key_of: Callable[[int], Any]
) -> pa.DataType:
    """The type of a new key field ``name`` whose first written values (records) are
    ``values``, stored by the codec as ``stored``.

    ``stored`` unless it is a timestamp and the values are naive datetimes:
    then the timestamp without a zone (``datetime`` -> ``timestamp[us]``, as for
    any field). Naive and aware datetimes together are a SchemaError naming both.
    """
    if not pa.types.is_timestamp(stored):
        return stored
    naive: tuple[int, Any] | None = None
    aware: tuple[int, Any] | None = None
    for position, value in enumerate(values):
        if not isinstance(value, datetime.datetime):
            continue
        if value.utcoffset() is None:
            naive = naive or (position, value)
        else:
            aware = aware or (position, value)
        if naive is not None and aware is not None:
            raise SchemaError(
                f"key field {name!r} holds naive datetime {show_value(naive[1])} (key "
                f"{show_value(key_of(naive[0]))}) and aware datetime {show_value(aware[1])} "
                f"(key {show_value(key_of(aware[0]))}): write every key naive or every key "
                "with a zone (value.replace(tzinfo=datetime.UTC) makes a naive one UTC), or "
                "declare the key field's type (create_table(schema=...))"
            )
    if naive is not None:
        return pa.timestamp(stored.unit)
    return stored


def naive_key_values(column: Any, index: int, composite: bool) -> list[Any]:
    """The values of a naive timestamp key field as records give them: naive datetimes,
    the UTC wall time of the stored key ``column`` (the codec's UTC timestamps; for a
    composite key, its struct's part ``index``), as ``to_arrow`` gives them."""
    part = pc.struct_field(column, [index]) if composite else column
    values: list[Any] = pc.cast(part, pa.timestamp("us")).to_pylist()
    return values
