"""Schema-free records and user Arrow tables in segment form, and back.

The record model (tables without a schema, and schema-free fields): a
column is native Arrow only where that round-trips exactly, CBOR otherwise
(:mod:`merkle.tablets.cbor`); None and absent are the same thing, so a field
that is None everywhere has no column. :func:`records_to_arrow` and
:func:`normalize_arrow` bring records and user Arrow tables to that form,
:func:`arrow_to_records` and :func:`column_values` read it back. The rules
are doc/format.md, "Segments".
"""

from __future__ import annotations

import contextlib
import datetime
import functools
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa

from merkle.errors import IntegrityError, UsageError
from merkle.tablets.cbor import (
    RowName,
    _cbor_array,
    _cbor_decode,
    cbor_field,
    is_cbor_field,
    plain,
    row_number,
    show,
)
from merkle.tablets.keys import KeyCodec
from merkle.tablets.micros import FREE_NANOS, in_micros
from merkle.tablets.nesting import check_nesting
from merkle.tablets.pylimits import failing_kind, python_limit

__all__ = [
    "arrow_to_records",
    "cbor_column",
    "check_name",
    "check_zones",
    "column_values",
    "field_set",
    "in_micros",
    "normalize_arrow",
    "python_values",
    "records_to_arrow",
    "unknown_time_zone",
    "values_column",
]

_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1
_UTC = datetime.UTC
_SCALAR_TYPES: dict[type, pa.DataType] = {
    bool: pa.bool_(),
    int: pa.int64(),
    float: pa.float64(),
    str: pa.string(),
    bytes: pa.binary(),
}
_PLAIN_TYPES = frozenset({bool, int, float, str, bytes, list, dict, datetime.datetime})


# -- records -> Arrow ---------------------------------------------------------


def records_to_arrow(
    records: Iterable[Mapping[str, Any]], *, key_field: str, codec: KeyCodec
) -> pa.Table:
    """An Arrow table of records: the key column first, then one column per field.

    Fields are the union of the records' fields, sorted by name; None is the
    same as absent, and a field that is None everywhere has no column.
    Columns are native Arrow where that is exact (bool, int64, float64,
    string, binary, timestamp[us] for naive datetimes, timestamp[us, UTC] for
    aware ones, lists of one of the first five), CBOR otherwise. Rows keep the
    order of ``records``. Raises UsageError (and builds nothing) for a record
    that is not a mapping, a missing or None key, a field name that is not a
    non-empty string, or a value CBOR cannot carry.
    """
    check_name(key_field, "the key field name")
    if isinstance(records, Mapping | str | bytes):
        raise UsageError(
            f"records must be a sequence of mappings, got a {type(records).__name__}: "
            "pass a list of dicts"
        )
    rows = records if isinstance(records, Sequence) else list(records)
    count = len(rows)
    keys: list[Any] = []
    columns: dict[str, list[Any]] = {}
    for position, record in enumerate(rows):
        if type(record) is not dict and not isinstance(record, Mapping):
            raise UsageError(
                f"record {position} is of type {type(record).__name__}, not a mapping: "
                "write dicts of field name -> value"
            )
        key = record.get(key_field)
        if key is None:
            raise UsageError(
                f"record {position} has no key field {key_field!r} (or it is None): "
                "every record needs its primary key"
            )
        keys.append(key)
        for name, value in record.items():
            values = columns.get(name)
            if values is None:  # a name not seen yet: check it once
                if name == key_field:
                    continue
                check_name(name, f"a field name in record {position}")
                if value is None:
                    continue
                values = columns[name] = [None] * count
            if value is not None:
                values[position] = value if type(value) in _PLAIN_TYPES else plain(value)
    fields = [pa.field(key_field, codec.arrow_type)]
    arrays = [codec.to_arrow(keys)]
    for name in sorted(columns):
        field, array = _column_from_values(name, columns[name], _record_with_key(keys))
        fields.append(field)
        arrays.append(array)
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def _record_with_key(keys: list[Any]) -> RowName:
    return lambda position: f"the record with key {show(keys[position])}"


def values_column(name: str, values: list[Any]) -> tuple[pa.Field, pa.Array]:
    """A column of Python values (None for null): native Arrow where exact, CBOR otherwise.

    The rule of :func:`records_to_arrow` for one field; UsageError naming the
    field and row for a value CBOR cannot carry.
    """
    check_name(name, "a field name")
    field, array = _column_from_values(name, values, row_number)
    return field, array


def cbor_column(table: pa.Table, name: str) -> pa.Array:
    """Column ``name`` of a segment table with every value CBOR-encoded (nulls stay null)."""
    return _cbor_array(name, column_values(table, name), row_number)


def _column_from_values(name: str, values: list[Any], row: RowName) -> tuple[pa.Field, Any]:
    present = [value for value in values if value is not None]
    kinds = {type(value) for value in present}
    native = _native_type(kinds, present) if len(kinds) == 1 else None
    if native is not None:
        try:
            return pa.field(name, native), pa.array(values, type=native)
        except (pa.ArrowException, UnicodeError, OverflowError, TypeError, ValueError):
            pass  # CBOR below says which value is unsupported
    return cbor_field(name), _cbor_array(name, values, row)


def _native_type(kinds: set[type], present: list[Any]) -> pa.DataType | None:
    """The exact native Arrow type of values of one Python type, or None for CBOR."""
    (kind,) = kinds
    if kind is int:
        return pa.int64() if min(present) >= _INT64_MIN and max(present) <= _INT64_MAX else None
    if kind in _SCALAR_TYPES:
        return _SCALAR_TYPES[kind]
    if kind is datetime.datetime:
        naive = {value.utcoffset() is None for value in present}
        if naive == {True}:
            return pa.timestamp("us")
        if naive == {False} and all(_utc_representable(value) for value in present):
            return pa.timestamp("us", tz="UTC")
        return None
    if kind is list:
        items = [item for value in present for item in value if item is not None]
        item_kinds = {type(item) for item in items}
        if len(item_kinds) != 1 or not item_kinds <= _SCALAR_TYPES.keys():
            return None
        item_type = _native_type(item_kinds, items)
        return None if item_type is None else pa.list_(item_type)
    return None


def _utc_representable(value: datetime.datetime) -> bool:
    """False for the few aware datetimes whose UTC time falls outside years 1 to 9999."""
    try:
        value.astimezone(_UTC)
    except OverflowError:
        return False
    return True


# -- Arrow -> records ---------------------------------------------------------


def arrow_to_records(
    table: pa.Table,
    *,
    key_field: str,
    codec: KeyCodec,
    fields: Collection[str] | None = None,
) -> list[dict[str, Any]]:
    """Records of a segment table: the key plus every non-null field.

    ``fields`` limits the fields (None means all; names that are not columns
    are ignored; the key field is always included). CBOR columns are decoded.
    """
    if key_field not in table.column_names:
        raise IntegrityError(
            f"segment has no key column {key_field!r} (columns: {table.column_names})"
        )
    wanted = field_set(fields)
    with _readable(key_field):
        keys = codec.to_python(table.column(key_field))
    records: list[dict[str, Any]] = [{key_field: key} for key in keys]
    for name in table.column_names:
        if name == key_field or (wanted is not None and name not in wanted):
            continue
        for record, value in zip(records, column_values(table, name), strict=True):
            if value is not None:
                record[name] = value
    return records


@contextlib.contextmanager
def _readable(name: str) -> Iterator[None]:
    """Turn a failure to convert a column's stored values to Python into an IntegrityError.

    Segments this package writes always convert; a crafted or damaged one may
    hold a timestamp out of Python's range, an unknown time zone, and the like.
    """
    try:
        yield
    except (IntegrityError, UsageError):  # UsageError: a value records cannot hold
        raise
    except (pa.ArrowException, ValueError, OverflowError, TypeError, RecursionError) as exc:
        raise IntegrityError(
            f"field {name!r} of a segment holds values that cannot be read: {exc}"
        ) from None


def column_values(table: pa.Table, name: str, *, freeing: RowName | None = None) -> list[Any]:
    """The Python values of one column of a segment table (CBOR decoded, None for null).

    ``freeing``: the values are made schema-free (``alter_schema(free=)``), and
    ``freeing(i)`` names the record of row ``i``: a time with nanoseconds is then a
    UsageError naming that record, with advice that fits that call (not "read it as
    Arrow", which is for reads).
    """
    with _readable(name):
        return _column_values(table, name, freeing)


def _column_values(table: pa.Table, name: str, freeing: RowName | None = None) -> list[Any]:
    field = table.schema.field(name)
    if freeing is None:
        column = in_micros(table.column(name), name)
    else:
        column = in_micros(table.column(name), name, fix=FREE_NANOS, row=freeing)
    if is_cbor_field(field):
        return [None if data is None else _cbor_decode(data, name) for data in column.to_pylist()]
    kind = column.type
    if pa.types.is_timestamp(kind) and kind.tz is not None:
        return _utc_values(column)
    check_zones(kind, name)
    return list(column.to_pylist())


def _utc_values(column: pa.ChunkedArray) -> list[Any]:
    """A zoned timestamp column as datetimes in ``datetime.UTC``.

    Arrow gives zoneinfo("UTC"); records use datetime.UTC, as CBOR and key
    codecs do. The stored values are UTC instants: seen as naive timestamps
    without a cast.
    """
    naive_type = pa.timestamp(column.type.unit)
    naive = [value for chunk in column.chunks for value in chunk.view(naive_type).to_pylist()]
    return [None if value is None else value.replace(tzinfo=_UTC) for value in naive]


@functools.lru_cache(maxsize=256)
def _known_zone(zone: str) -> bool:
    """Whether pyarrow can turn the time zone name ``zone`` into a tzinfo, as reads must."""
    try:
        pa.lib.string_to_tzinfo(zone)
    except Exception:  # pytz or zoneinfo, each with its own errors
        return False
    return True


def unknown_time_zone(kind: pa.DataType) -> str | None:
    """The first time zone of a timestamp in ``kind`` (nested types too) that is unknown."""
    if pa.types.is_timestamp(kind):
        return None if kind.tz is None or _known_zone(kind.tz) else kind.tz
    if pa.types.is_dictionary(kind):
        return unknown_time_zone(kind.value_type)
    if isinstance(kind, pa.ExtensionType):
        return unknown_time_zone(kind.storage_type)
    for i in range(kind.num_fields):
        zone = unknown_time_zone(kind.field(i).type)
        if zone is not None:
            return zone
    return None


def check_zones(kind: pa.DataType, name: str) -> None:
    """UsageError for a column whose type names a time zone Python does not know: each
    value would be a raw error (a table written before such zones were refused)."""
    zone = unknown_time_zone(kind)
    if zone is not None:
        raise UsageError(
            f"field {name!r} ({kind}) names the unknown time zone {zone!r}, so its values have "
            "no Python form: read it as Arrow (to_arrow, to_batches, get_arrow)"
        )


def python_values(
    column: pa.ChunkedArray, name: str, key_of: Callable[[int], Any], *, utc: bool = False
) -> list[Any]:
    """The Python values of a typed (not schema-free) column, for records.

    ``utc``: the column is a timestamp in UTC, given as datetimes in
    ``datetime.UTC``. A value Arrow holds but Python cannot (a time before
    year 1 or after 9999 once in the field's zone, e.g. 0001-01-01T00:00Z in
    America/New_York) is a UsageError naming the field and the record's key:
    such a column is read as Arrow, as nanoseconds are (:func:`in_micros`).
    """
    convert = _utc_values if utc else _plain_values
    check_zones(column.type, name)
    try:
        return convert(column)
    except UnicodeDecodeError:
        raise  # not UTF-8: damage, not a value out of Python's range (Table.records)
    except (OverflowError, ValueError) as exc:
        error = exc
    kind = column.type
    if pa.types.is_timestamp(kind) and kind.tz is not None and not utc:
        convert = _zoned_values
        try:
            return convert(column)
        except (OverflowError, ValueError) as exc:
            error = exc
    position = _first_failing(column, convert)
    where = (
        "a value"
        if position is None
        else f"the value of the record with key {show(key_of(position))}"
    )
    raise UsageError(
        f"field {name!r} ({column.type}): {where} has no Python form "
        f"({_why(column, position, convert, error)}): read it as Arrow (to_arrow, "
        "to_batches, get_arrow), where it is kept exactly"
    ) from None


def _why(
    column: pa.ChunkedArray,
    position: int | None,
    convert: Callable[[pa.ChunkedArray], list[Any]],
    error: Exception,
) -> str:
    """Why the value at ``position`` has no Python form: the limit of the kind of value
    that fails (a duration's days, a date's years), inside a nested value too; the
    conversion's own error when the kind has no known limit."""
    kind: pa.DataType | None = column.type
    if position is not None and not pa.types.is_timestamp(column.type):
        kind = failing_kind(column.slice(position, 1).combine_chunks())
    top = kind == column.type
    limit = None if kind is None else python_limit(kind, top=top)
    if limit is None:
        return str(error)
    if top:
        return limit
    return f"it holds a {kind} value beyond that: {limit}"


def _first_failing(
    column: pa.ChunkedArray, convert: Callable[[pa.ChunkedArray], list[Any]]
) -> int | None:
    """The position of the first value ``convert`` fails on (the error path only):
    halving, so a long column costs a few conversions, not one per row."""

    def fails(start: int, length: int) -> bool:
        try:
            convert(column.slice(start, length))
        except (OverflowError, ValueError):
            return True
        return False

    start, length = 0, len(column)
    if not length or not fails(start, length):
        return None
    while length > 1:
        half = length // 2
        if fails(start, half):
            length = half
        else:
            start, length = start + half, length - half
    return start


def _plain_values(column: pa.ChunkedArray) -> list[Any]:
    return list(column.to_pylist())


def _zoned_values(column: pa.ChunkedArray) -> list[Any]:
    """A zoned timestamp column as datetimes in its zone, made from the wall time there.

    pyarrow makes each value in UTC first, which fails for an instant within
    years 1 to 9999 in the field's zone but not in UTC (0001-01-01 05:30 in
    Asia/Kolkata, whose offset then was +05:53:28, is in year 0 in UTC): the
    datetime the user wrote. The wall time comes from Arrow's time zone
    database; ``fold`` picks the one of two equal wall times (the hour a clock
    goes back) whose offset is the value's. Only the error path pays for it.
    """
    from merkle.lazy import compute as pc  # the error path only

    kind = column.type
    zone = pa.lib.string_to_tzinfo(kind.tz)
    per_second = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}[kind.unit]
    local = pc.local_timestamp(column)
    out: list[Any] = []
    for chunk, wall_chunk in zip(column.chunks, local.chunks, strict=True):
        ticks = chunk.view(pa.int64()).to_pylist()
        wall_ticks = wall_chunk.view(pa.int64()).to_pylist()
        for wall, at, here in zip(wall_chunk.to_pylist(), ticks, wall_ticks, strict=True):
            if wall is None:
                out.append(None)
                continue
            offset = datetime.timedelta(microseconds=(here - at) * 1_000_000 // per_second)
            value = wall.replace(tzinfo=zone)
            if value.utcoffset() != offset:
                value = value.replace(fold=1)
            if value.utcoffset() != offset:
                raise ValueError(f"{wall} has no offset {offset} in {kind.tz}")
            out.append(value)
    return out


# -- user-supplied Arrow ------------------------------------------------------


def normalize_arrow(
    table: pa.Table | pa.RecordBatch, *, key_field: str, codec: KeyCodec
) -> pa.Table:
    """A user-supplied Arrow table in segment form, ready to write.

    The key column must be present (UsageError naming it) and valid for the
    codec (:meth:`KeyCodec.check_column`); it moves first and the fields
    follow sorted by name. Narrow types are widened to the segment types
    (int64, float64, string, binary, timestamp[us] / timestamp[us, UTC], lists
    of those), all-null columns are dropped, and types with no native segment
    form (structs, decimals, dates, nested lists, uint64 beyond int64, ...)
    become CBOR columns. Schema metadata is dropped.
    """
    if isinstance(table, pa.RecordBatch):
        table = pa.Table.from_batches([table])
    if not isinstance(table, pa.Table):
        raise UsageError(
            f"expected a pyarrow Table or RecordBatch, got {type(table).__name__}: "
            "convert the data with pyarrow.table(...) or write records as dicts"
        )
    check_name(key_field, "the key field name")
    names = table.column_names
    for name in names:
        check_name(name, "a column name")
    duplicates = sorted(name for name, times in Counter(names).items() if times > 1)
    if duplicates:
        raise UsageError(f"the Arrow table has duplicate columns {duplicates}: rename them")
    if key_field not in names:
        raise UsageError(
            f"the Arrow table has no key column {key_field!r} (columns: {names}): "
            "add it or pass the table's key field"
        )
    fields = [pa.field(key_field, codec.arrow_type)]
    try:
        key_column = codec.check_column(table.column(key_field))
    except UsageError as exc:
        raise UsageError(f"key field {key_field!r}: {exc}") from None
    arrays: list[Any] = [key_column]
    for name in sorted(names):
        if name == key_field:
            continue
        column = table.column(name)
        check_nesting(column.type, name, "the Arrow data", free=True)  # stored as CBOR
        if column.null_count == len(column):
            continue  # None everywhere is the same as absent
        field, array = _canonical_column(table.schema.field(name), column)
        fields.append(field)
        arrays.append(array)
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def _canonical_column(field: pa.Field, column: pa.ChunkedArray) -> tuple[pa.Field, Any]:
    """One user column as a segment column: native where exact, CBOR otherwise."""
    name = field.name
    if is_cbor_field(field):
        if not (pa.types.is_binary(field.type) or pa.types.is_large_binary(field.type)):
            raise UsageError(
                f"column {name!r} is marked CBOR but has type {field.type}: "
                "CBOR columns are binary; drop the merkle.encoding metadata"
            )
        column = column.cast(pa.binary())
        for data in column.to_pylist():
            if data is not None:
                _check_cbor(name, data)
        return cbor_field(name), column
    target = _native_target(field.type)
    if target is not None:
        try:
            return pa.field(name, target), column.cast(target, safe=True)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            if pa.types.is_timestamp(field.type):
                raise UsageError(
                    f"column {name!r} holds timestamps finer than microseconds ({exc}): "
                    "round them to microseconds first"
                ) from None
    values = column_values(pa.table([column], names=[name]), name)
    return cbor_field(name), _cbor_array(name, values, row_number)


def _check_cbor(name: str, data: bytes) -> None:
    try:
        _cbor_decode(data, name)
    except IntegrityError as exc:
        raise UsageError(f"{exc}: fix the column or drop its merkle.encoding metadata") from None


def _native_target(kind: pa.DataType) -> pa.DataType | None:
    """The segment type a user column casts to exactly, or None for CBOR."""
    types = pa.types
    if types.is_dictionary(kind):
        return _native_target(kind.value_type)
    if types.is_boolean(kind):
        return pa.bool_()
    if types.is_integer(kind):
        return pa.int64()  # uint64 beyond int64 fails the safe cast and becomes CBOR
    if types.is_floating(kind):
        return pa.float64()
    if types.is_string(kind) or types.is_large_string(kind) or str(kind) == "string_view":
        return pa.string()
    if (
        types.is_binary(kind)
        or types.is_large_binary(kind)
        or types.is_fixed_size_binary(kind)
        or str(kind) == "binary_view"
    ):
        return pa.binary()
    if types.is_timestamp(kind):
        return pa.timestamp("us", tz=None if kind.tz is None else "UTC")
    if types.is_list(kind) or types.is_large_list(kind) or types.is_fixed_size_list(kind):
        item = kind.value_type
        item_target = None if types.is_timestamp(item) else _native_target(item)
        if item_target is not None and item_target in _SCALAR_TYPES.values():
            return pa.list_(item_target)
    return None


# -- helpers ------------------------------------------------------------------


def field_set(fields: Collection[str] | None) -> set[str] | None:
    if fields is None:
        return None
    if isinstance(fields, str | bytes) or not isinstance(fields, Collection):
        raise UsageError(
            f"fields must be a collection of field names (e.g. a list), got {fields!r}"
        )
    return set(fields)


def check_name(name: Any, what: str) -> None:
    if not isinstance(name, str) or not name:
        raise UsageError(f"{what} must be a non-empty string, got {name!r}")
