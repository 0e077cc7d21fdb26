"""Spark filters on the key field as sets of encoded keys (filter pushdown).

``=``, ``<``, ``<=``, ``>``, ``>=``, ``IN`` and ``BETWEEN`` (which Spark
pushes as ``>=`` and ``<=``) on the key field, and their conjunction, become
one :class:`~merkle.tablets.ranges.KeyRanges`: the read plans only the
tablets that meet it and cuts each tablet's rows down to it exactly, so
Spark need not evaluate these filters again. ``key IS NOT NULL`` holds for
every row. Any other filter, a value the key codec cannot encode, or a range
filter on a reversed or composite key is left to Spark.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pyspark.sql.datasource import (
    EqualNullSafe,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    LessThan,
    LessThanOrEqual,
)

from merkle.errors import UsageError
from merkle.tablets.keys import KeyCodec
from merkle.tablets.ranges import KeyRanges, successor
from merkle.tablets.settings import scan_bounds

__all__ = ["key_filters", "pk_bounds"]

_ORDERED = ("int", "float", "str", "bytes", "timestamp")


def _encode(codec: KeyCodec, value: Any) -> bytes | None:
    if value is None:
        return None
    try:
        return codec.encode(value)
    except UsageError:
        return None


def _one(filter: Filter, codec: KeyCodec) -> KeyRanges | None:
    """The keys a filter on the key field keeps (None: it cannot be pushed)."""
    if isinstance(filter, IsNotNull):
        return KeyRanges.everything()
    if isinstance(filter, In):
        keys = [_encode(codec, value) for value in filter.value]
        if any(key is None for key in keys):
            return None
        return KeyRanges.points(k for k in keys if k is not None)
    value = getattr(filter, "value", None)
    key = _encode(codec, value)
    if key is None:
        return None
    if isinstance(filter, EqualTo | EqualNullSafe):
        return KeyRanges.points([key])
    if codec.spec not in _ORDERED:
        return None  # a reversed or composite order: let Spark compare
    if isinstance(filter, GreaterThan):
        return KeyRanges.between(successor(key), None)
    if isinstance(filter, GreaterThanOrEqual):
        return KeyRanges.between(key, None)
    if isinstance(filter, LessThan):
        return KeyRanges.between(None, key)
    if isinstance(filter, LessThanOrEqual):
        return KeyRanges.between(None, successor(key))
    return None


def key_filters(
    filters: Sequence[Filter], key_field: str, codec: KeyCodec
) -> tuple[KeyRanges, list[Filter]]:
    """The key set the pushable filters keep, and the filters left for Spark."""
    keys = KeyRanges.everything()
    rest: list[Filter] = []
    for filter in filters:
        ranges = _one(filter, codec) if getattr(filter, "attribute", None) == (key_field,) else None
        if ranges is None:
            rest.append(filter)
        else:
            keys = keys.intersect(ranges)
    return keys, rest


def pk_bounds(codec: KeyCodec, from_pk: Any, to_pk: Any) -> KeyRanges:
    """The keys from ``from_pk`` to ``to_pk`` in table order, inclusive, exactly as
    ``db.scan`` bounds them (:func:`merkle.tablets.settings.scan_bounds`)."""
    return KeyRanges.between(*scan_bounds(codec, from_pk, to_pk))
