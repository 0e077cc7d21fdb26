"""Timestamp key fields: the field's own type, naive or zoned, over the UTC key codec.

The ``timestamp`` key codec stores every key as microseconds since the epoch
in UTC (its Arrow type is ``timestamp[us, tz=UTC]``; a naive value is taken
as UTC). The key *field* keeps the type the data gave it, as any field does:
an Arrow ``timestamp[us]`` key column makes a naive key field, and a first
write of records whose key datetimes are naive does too, as a naive datetime
in any other field does (:func:`record_key_type`). Reads give the field's
type back: ``to_arrow`` casts to it, and records of a naive key field hold
naive datetimes (:func:`naive_key_values`), the values that were written.

Every other output of keys follows the same field types, so that a key reads
as ``scan`` gives it wherever it shows: a decoded key (a tablet's bounds,
:func:`record_key`), a stored key column read as records (a merge conflict,
:func:`record_keys`) or as Arrow (a diff or a conflict table,
:func:`typed_key_column`, which gives each key field its own type: a
timestamp's unit and zone, an integer's width, as ``to_arrow`` does).

Records whose first write mixes naive and aware key datetimes are a
SchemaError, as such values are in any other new field. A table whose key
field is already UTC (every table written from records before) keeps it.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from merkle.errors import SchemaError
from merkle.lazy import compute as pc
from merkle.tablets.dicts import cast_to
from merkle.tablets.schema import show_value

if TYPE_CHECKING:
    from merkle.tablets.keycodec import KeyCodec

__all__ = [
    "is_naive_timestamp",
    "key_field_types",
    "naive_key_values",
    "record_key",
    "record_key_type",
    "record_keys",
    "typed_key_column",
]


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


def key_field_types(
    fields: Sequence[str], schema: pa.Schema | None
) -> tuple[pa.DataType | None, ...]:
    """The types of the key ``fields`` in ``schema``; None for a field it does not hold
    (a table never written, or one written before schemas: its keys are as stored)."""
    names = set(schema.names) if schema is not None else set()
    return tuple(
        schema.field(name).type if schema is not None and name in names else None for name in fields
    )


def record_key(key: Any, kinds: Sequence[pa.DataType | None]) -> Any:
    """A decoded key (``codec.decode``: UTC-aware datetimes) as records give it: the part
    of each naive timestamp key field of ``kinds`` (:func:`key_field_types`) naive, its
    UTC wall time, as :func:`naive_key_values` gives it. One key at a time: for the few
    keys decoded from bytes (a tablet's first and last key)."""
    if len(kinds) == 1:
        return _naive(key) if kinds[0] is not None and is_naive_timestamp(kinds[0]) else key
    if not any(kind is not None and is_naive_timestamp(kind) for kind in kinds):
        return key
    return tuple(
        _naive(part) if kind is not None and is_naive_timestamp(kind) else part
        for part, kind in zip(key, kinds, strict=True)
    )


def _naive(value: Any) -> Any:
    """A UTC-aware datetime as its naive UTC wall time (anything else as it is)."""
    if isinstance(value, datetime.datetime) and value.utcoffset() is not None:
        return value.astimezone(datetime.UTC).replace(tzinfo=None)
    return value


def record_keys(column: Any, codec: KeyCodec, kinds: Sequence[pa.DataType | None]) -> list[Any]:
    """The keys of a stored key ``column`` as records give them (``codec.to_python``, with
    each naive timestamp key field of ``kinds`` read by :func:`naive_key_values`)."""
    naive = [i for i, kind in enumerate(kinds) if kind is not None and is_naive_timestamp(kind)]
    if naive and len(kinds) == 1:
        return naive_key_values(column, 0, composite=False)  # the codec's keys not needed
    keys = codec.to_python(column)
    if not naive:
        return keys
    parts = {i: naive_key_values(column, i, composite=True) for i in naive}
    return [
        tuple(parts[i][row] if i in parts else part for i, part in enumerate(key))
        for row, key in enumerate(keys)
    ]


def typed_key_column(column: pa.Array, kinds: Sequence[pa.DataType | None]) -> pa.Array:
    """A stored key ``column`` (a composite key's struct, children in key order) with
    each key field as its type in ``kinds``, as ``to_arrow`` gives the field: a
    timestamp naive or zoned, in its unit (the codec stores ``timestamp[us,
    tz=UTC]``), an ``int32`` as ``int32`` (the codec stores ``int64``).

    The cast is exact: every stored key was written from a value of the field's type
    (a value the type would cut is refused on write), so a safe cast cannot fail."""
    if len(kinds) == 1:
        return _as_field_type(column, kinds[0])
    if not pa.types.is_struct(column.type) or column.type.num_fields != len(kinds):
        return column
    parts = [_as_field_type(pc.struct_field(column, [i]), kind) for i, kind in enumerate(kinds)]
    if all(part.type == column.type.field(i).type for i, part in enumerate(parts)):
        return column
    names = [column.type.field(i).name for i in range(len(kinds))]
    return pa.StructArray.from_arrays(parts, names=names)


def _as_field_type(part: pa.Array, kind: pa.DataType | None) -> pa.Array:
    """``part`` (a stored key field: the codec's type, such as ``int64`` for every
    integer key) as the field's type ``kind`` (``int32``, ``large_string``, a
    dictionary, a timestamp's unit and zone), as ``to_arrow`` gives it; as stored
    where no schema says (``kind`` None)."""
    if kind is None or part.type == kind:
        return part
    try:
        return cast_to(part, kind)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return part  # not a type this key was written from (a key a schema change re-typed)
