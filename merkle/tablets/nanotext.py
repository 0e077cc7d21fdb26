"""Nanosecond times as exact ISO text, for the records the command line prints.

Records hold Python's ``datetime``, ``time`` and ``timedelta``, which stop at
microseconds, so a record read of a value with nanoseconds is a UsageError
(:func:`~merkle.tablets.micros.in_micros`): a Python caller reads such a field
as Arrow. The ``merkle`` command has no Arrow to give: it prints records as
text (``scan``, ``get``, ``diff``), and ``merkle load`` reads every digit of a
``timestamp[ns]``, ``time64[ns]`` or ``duration[ns]`` back from that text. So
while :func:`nanos_as_text` is in effect, a column that holds nanoseconds is
read (by :func:`~merkle.tablets.conform.present_records`) with each of its
nanosecond times as the text the output would show for it, every digit kept:
``2023-11-14T22:13:20.000000001+00:00``, ``22:13:20.000000001``,
``0:00:00.000000001``. A time in whole microseconds is the text its Python
value renders as (``datetime.isoformat``, ``str(timedelta)``), so the output
of a value Python holds is the same whichever column it is in. A column
whose times are all whole microseconds is read as ever. It is a mode of the
command's reads only (a context variable): a Python record never holds text
in place of a time.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import pyarrow as pa

from merkle.tablets.micros import holds_nanos, micros_type, ticks_type

__all__ = ["nanos_as_text", "nanos_texts"]

_AS_TEXT: ContextVar[bool] = ContextVar("merkle_nanos_as_text", default=False)

#: Midnight of 1970-01-01, which timestamps count from (naive, and in UTC).
_EPOCH = datetime.datetime(1970, 1, 1)
_EPOCH_UTC = _EPOCH.replace(tzinfo=datetime.UTC)
#: The length of ``YYYY-MM-DDTHH:MM:SS.ffffff`` and ``HH:MM:SS.ffffff``: where the
#: digits beyond microseconds go, before any UTC offset.
_DATETIME_DIGITS = 26
_TIME_DIGITS = 15


@contextmanager
def nanos_as_text() -> Iterator[None]:
    """Within it, records read a column holding nanoseconds as text (see the module doc)."""
    token = _AS_TEXT.set(True)
    try:
        yield
    finally:
        _AS_TEXT.reset(token)


def nanos_texts(column: pa.ChunkedArray) -> list[Any] | None:
    """The Python values of ``column`` with each nanosecond time as its exact text, when
    :func:`nanos_as_text` is in effect and the column holds a time with nanoseconds
    (at the top or inside lists, structs and maps); else None: the column is read as
    ever (and a value with nanoseconds refused there, naming the field)."""
    kind = column.type
    if not _AS_TEXT.get() or not holds_nanos(kind):
        return None
    micros = micros_type(kind)
    if micros is not None:
        try:
            column.cast(micros)
            return None  # whole microseconds: Python's values, as ever
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            pass
    ticks = ticks_type(kind)
    if ticks is None:
        return None
    try:
        values = column.cast(ticks).to_pylist()
        return [_shown(value, kind) for value in values]
    except (pa.ArrowException, ValueError, OverflowError, KeyError):
        return None  # a type or zone not read here: refused as before, naming the field


def _shown(value: Any, kind: pa.DataType) -> Any:
    """``value`` (as ``to_pylist`` gives it with nanosecond times as their ticks) with each
    time of ``kind`` in nanoseconds as its text."""
    types = pa.types
    if value is None:
        return None
    if (types.is_timestamp(kind) or types.is_time64(kind) or types.is_duration(kind)) and (
        kind.unit == "ns"
    ):
        return _text(value, kind)
    if types.is_map(kind):
        return [(_shown(k, kind.key_type), _shown(v, kind.item_type)) for k, v in value]
    if (
        types.is_list(kind)
        or types.is_large_list(kind)
        or types.is_fixed_size_list(kind)
        or types.is_list_view(kind)
        or types.is_large_list_view(kind)
    ):
        return [_shown(item, kind.value_type) for item in value]
    if types.is_struct(kind):
        members = {kind.field(i).name: kind.field(i).type for i in range(kind.num_fields)}
        return {name: _shown(item, members[name]) for name, item in value.items()}
    if types.is_dictionary(kind):
        return _shown(value, kind.value_type)
    return value


def _text(ticks: int, kind: pa.DataType) -> str:
    """The text of ``ticks`` nanoseconds of ``kind``: as its Python value renders when
    they are whole microseconds, else with all nine digits of the fraction."""
    micros, nanos = divmod(ticks, 1000)
    digits = f"{nanos:03d}"
    if pa.types.is_duration(kind):
        span = datetime.timedelta(microseconds=micros)
        if not nanos:
            return str(span)
        return str(span) + ("" if span.microseconds else ".000000") + digits
    if pa.types.is_time64(kind):
        time = (_EPOCH + datetime.timedelta(microseconds=micros)).time()
        if not nanos:
            return time.isoformat()
        text = time.isoformat(timespec="microseconds")
        return text[:_TIME_DIGITS] + digits + text[_TIME_DIGITS:]
    moment = _EPOCH + datetime.timedelta(microseconds=micros)
    if kind.tz is not None:
        zone = pa.lib.string_to_tzinfo(kind.tz)
        moment = (_EPOCH_UTC + datetime.timedelta(microseconds=micros)).astimezone(zone)
    if not nanos:
        return moment.isoformat()
    text = moment.isoformat(timespec="microseconds")
    return text[:_DATETIME_DIGITS] + digits + text[_DATETIME_DIGITS:]
