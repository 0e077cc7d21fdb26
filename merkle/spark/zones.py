"""Spark TIMESTAMP and TIMESTAMP_NTZ values written into a field of the other kind.

Spark's own ``CAST`` between the two uses the session time zone
(``spark.sql.session.timeZone``): a TIMESTAMP becomes its wall time in that
zone, and a TIMESTAMP_NTZ wall time is read as a time in that zone. A write
from Spark into an existing field of the other kind converts the same way,
so that it stores what ``CAST`` gives (the Python API keeps its UTC
convention, doc/api.md). A wall time the zone skips (a daylight-saving gap)
or repeats takes the offset in force before the change, as Spark's
(java.time's) conversion does. Top-level fields only: a timestamp nested in
a struct or array is converted as the Python API converts it.
"""

from __future__ import annotations

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql import SparkSession

from merkle.lazy import compute as pc

__all__ = ["ZONE_CONF", "session_zone", "task_zone", "zoned_like"]

#: Spark's setting for the session time zone.
ZONE_CONF = "spark.sql.session.timeZone"


def session_zone(spark: SparkSession | None) -> str | None:
    """The session time zone of ``spark`` (None: the active session; None if there is none)."""
    session = spark if spark is not None else SparkSession.getActiveSession()
    if session is None:
        return None
    zone = session.conf.get(ZONE_CONF, None)
    return str(zone) if zone else None


def task_zone() -> str | None:
    """The session time zone as a running Spark task sees it (Spark hands SQL settings to
    tasks as local properties), or None outside a task."""
    context = TaskContext.get()
    if context is None:
        return None
    zone = context.getLocalProperty(ZONE_CONF)
    return str(zone) if zone else None


def zoned_like(rows: pa.Table, stored: pa.Schema | None, zone: str) -> pa.Table:
    """``rows`` with each timestamp column whose field (in ``stored``) is of the other kind,
    aware or naive, converted by wall time in ``zone`` (see the module doc)."""
    if stored is None:
        return rows
    names = set(stored.names)
    for index, name in enumerate(rows.column_names):
        if name not in names:
            continue
        have, want = rows.schema.field(name).type, stored.field(name).type
        if not (pa.types.is_timestamp(have) and pa.types.is_timestamp(want)):
            continue
        column = rows.column(index)
        if have.tz is not None and want.tz is None:
            converted = _wall_time(column, zone)
        elif have.tz is None and want.tz is not None:
            converted = _instant(column, zone)
        else:
            continue
        rows = rows.set_column(index, rows.schema.field(name).with_type(converted.type), converted)
    return rows


def _wall_time(column: pa.ChunkedArray, zone: str) -> pa.ChunkedArray:
    """Aware instants as naive wall times in ``zone``."""
    return pc.local_timestamp(column.cast(pa.timestamp(column.type.unit, tz=zone)))


def _instant(column: pa.ChunkedArray, zone: str) -> pa.ChunkedArray:
    """Naive wall times read in ``zone``, as UTC instants. The offset is taken at the
    earliest instant a wall time may mean: before a gap or a repeated hour, that is
    the offset in force before the change, as java.time takes it."""
    unit = column.type.unit
    earliest = pc.assume_timezone(
        column, timezone=zone, ambiguous="earliest", nonexistent="earliest"
    )
    offset = pc.subtract(pc.local_timestamp(earliest), earliest.cast(pa.timestamp(unit)))
    return pc.subtract(column, offset).cast(pa.timestamp(unit, tz="UTC"))
