"""Segments: the Arrow tables that hold record data, and their IPC block bytes.

A segment is one Arrow table stored as a raw block (Arrow IPC stream, one
record batch). Its first column is the native key column of the table's key
codec, then one column per field, sorted by name. Records are schema-free, so
a column is native Arrow only when that is exact: a field whose values do not
all share one simple type (``1`` here, ``"a"`` there, ``1.5`` elsewhere; dicts,
nested lists, ints beyond 64 bits) is stored as CBOR-encoded binary and marked
with field metadata ``{b"merkle.encoding": b"cbor"}``, so every value comes back
exactly as written. A field that is None (or absent) in every row has no
column at all: None and absent are the same thing.

Field families split one table into a base segment (the key and every field
in no family) and one segment per family, so a projection reads only the
segments it needs. The layout and the compression choice are written down in
``doc/format.md`` ("Segments").
"""

from __future__ import annotations

import contextlib
import datetime
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from typing import Any

import cbor2
import numpy as np
import pyarrow as pa

from merkle.errors import IntegrityError, UsageError
from merkle.tablets.keys import KeyCodec
from merkle.tablets.segschema import decode_segment_schema, schema_message_size

__all__ = [
    "BASE_FAMILY",
    "CBOR_ENCODING",
    "ENCODING_KEY",
    "NAIVE_DATETIME_TAG",
    "SEGMENT_CODEC",
    "SEGMENT_COMPRESSION",
    "SEGMENT_COMPRESSION_LEVEL",
    "arrow_to_records",
    "cbor_array",
    "cbor_column",
    "cbor_field",
    "column_values",
    "concat_segments",
    "decode_segment",
    "encode_segment",
    "is_cbor_field",
    "join_families",
    "normalize_arrow",
    "project",
    "records_to_arrow",
    "split_families",
    "values_column",
]

#: Name of the family that holds the key column and every field in no family.
BASE_FAMILY = "base"
#: Field metadata key that says how a column's values are encoded.
ENCODING_KEY = b"merkle.encoding"
#: Value of :data:`ENCODING_KEY` for columns of CBOR-encoded values.
CBOR_ENCODING = b"cbor"
#: CBOR tag (merkle-db private) for a naive datetime: an ISO-8601 string, no offset.
NAIVE_DATETIME_TAG = 1835728897  # 0x6D6B0001, "mk" 1
#: Arrow IPC buffer compression of segment blocks and its level, chosen by
#: bench/segments.py (doc/format.md, "Segments"). Part of the format only in
#: that equal content must give equal bytes: readers accept any IPC codec.
SEGMENT_COMPRESSION = "zstd"
SEGMENT_COMPRESSION_LEVEL = 3
#: The codec object :func:`encode_segment` uses by default.
SEGMENT_CODEC = pa.Codec(SEGMENT_COMPRESSION, compression_level=SEGMENT_COMPRESSION_LEVEL)

_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1
_UTC = datetime.UTC
_CBOR_METADATA = {ENCODING_KEY: CBOR_ENCODING}
_SCALAR_TYPES: dict[type, pa.DataType] = {
    bool: pa.bool_(),
    int: pa.int64(),
    float: pa.float64(),
    str: pa.string(),
    bytes: pa.binary(),
}
_SUPPORTED_VALUES = (
    "None, bool, int, float, str, bytes, list, tuple, dict, set, datetime, date, Decimal, UUID"
)
_WRITE_OPTIONS = pa.ipc.IpcWriteOptions(compression=SEGMENT_CODEC)
_RowName = Callable[[int], str]
_IPC_EOS = b"\xff\xff\xff\xff\x00\x00\x00\x00"


# -- CBOR values --------------------------------------------------------------


class _UnsupportedValueError(Exception):
    """A value inside a record that CBOR cannot carry."""

    def __init__(self, value: Any) -> None:
        super().__init__(value)
        self.value = value


def _encode_datetime(encoder: cbor2.CBOREncoder, value: datetime.datetime) -> None:
    if value.utcoffset() is None:
        encoder.encode_semantic(NAIVE_DATETIME_TAG, value.isoformat())
    else:
        encoder.encode_datetime(value)


def _encode_other(encoder: cbor2.CBOREncoder, value: Any) -> None:
    if isinstance(value, np.generic):
        encoder.encode(value.item())
        return
    raise _UnsupportedValueError(value)


def _cbor_encode(value: Any) -> bytes:
    """CBOR of one record value; maps keep their insertion order, which reads give back.

    Equal values written in the same order give equal bytes. cbor2 refuses
    naive datetimes; only then is the slower encoder with the private tag used.
    """
    try:
        return cbor2.dumps(value, default=_encode_other)
    except _UnsupportedValueError:
        raise
    except (cbor2.CBOREncodeError, TypeError, ValueError, OverflowError, RecursionError):
        pass
    try:
        return cbor2.dumps(value, encoders=_CBOR_ENCODERS, default=_encode_other)
    except _UnsupportedValueError:
        raise
    except (cbor2.CBOREncodeError, TypeError, ValueError, OverflowError, RecursionError):
        raise _UnsupportedValueError(value) from None


_CBOR_ENCODERS: dict[type, Callable[[cbor2.CBOREncoder, Any], Any]] = {
    datetime.datetime: _encode_datetime
}


def _tag_hook(*args: Any) -> Any:
    # cbor2 6 calls tag_hook(tag, immutable); cbor2 5 called it (decoder, tag, ...).
    tag = args[0] if isinstance(args[0], cbor2.CBORTag) else args[1]
    if tag.tag == NAIVE_DATETIME_TAG and isinstance(tag.value, str):
        return datetime.datetime.fromisoformat(tag.value)
    return tag


def _cbor_decode(data: bytes, field: str) -> Any:
    try:
        return cbor2.loads(data, tag_hook=_tag_hook)
    except (cbor2.CBORDecodeError, ValueError, TypeError, EOFError) as exc:
        raise IntegrityError(f"field {field!r} holds a malformed CBOR value: {exc}") from None


def cbor_field(name: str) -> pa.Field:
    """The schema field of a CBOR-encoded column."""
    return pa.field(name, pa.binary(), metadata=_CBOR_METADATA)


def is_cbor_field(field: pa.Field) -> bool:
    """True when the column's values are CBOR-encoded (see :data:`ENCODING_KEY`)."""
    metadata = field.metadata
    return bool(metadata) and metadata.get(ENCODING_KEY) == CBOR_ENCODING


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
    _check_name(key_field, "the key field name")
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
                _check_name(name, f"a field name in record {position}")
                if value is None:
                    continue
                values = columns[name] = [None] * count
            if value is not None:
                values[position] = value if type(value) in _PLAIN_TYPES else _plain(value)
    fields = [pa.field(key_field, codec.arrow_type)]
    arrays = [codec.to_arrow(keys)]
    for name in sorted(columns):
        field, array = _column_from_values(name, columns[name], _record_with_key(keys))
        fields.append(field)
        arrays.append(array)
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


_PLAIN_TYPES = frozenset({bool, int, float, str, bytes, list, dict, datetime.datetime})


def _plain(value: Any) -> Any:
    """numpy scalars as Python values, bytes-likes as bytes: what comes back on read."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    return value


def _record_with_key(keys: list[Any]) -> _RowName:
    return lambda position: f"the record with key {_show(keys[position])}"


def _row_number(position: int) -> str:
    return f"row {position}"


def values_column(name: str, values: list[Any]) -> tuple[pa.Field, pa.Array]:
    """A column of Python values (None for null): native Arrow where exact, CBOR otherwise.

    The rule of :func:`records_to_arrow` for one field; UsageError naming the
    field and row for a value CBOR cannot carry.
    """
    _check_name(name, "a field name")
    field, array = _column_from_values(name, values, _row_number)
    return field, array


def cbor_column(table: pa.Table, name: str) -> pa.Array:
    """Column ``name`` of a segment table with every value CBOR-encoded (nulls stay null)."""
    return _cbor_array(name, column_values(table, name), _row_number)


def _column_from_values(name: str, values: list[Any], row: _RowName) -> tuple[pa.Field, Any]:
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


def cbor_array(name: str, values: Sequence[Any], row: _RowName) -> pa.Array:
    """A CBOR column of Python values; UsageError naming ``row(i)`` for one CBOR cannot carry."""
    return _cbor_array(name, [_plain(v) if v is not None else None for v in values], row)


def _cbor_array(name: str, values: Sequence[Any], row: _RowName) -> pa.Array:
    encoded: list[bytes | None] = []
    for position, value in enumerate(values):
        if value is None:
            encoded.append(None)
            continue
        try:
            encoded.append(_cbor_encode(value))
        except _UnsupportedValueError as exc:
            raise UsageError(
                f"field {name!r} of {row(position)} holds "
                f"{type(exc.value).__name__} {_show(exc.value)}, which merkle-db cannot store: "
                f"record values are {_SUPPORTED_VALUES} (nested freely)"
            ) from None
    return pa.array(encoded, type=pa.binary())


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
    wanted = _field_set(fields)
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
    except IntegrityError:
        raise
    except (pa.ArrowException, ValueError, OverflowError, TypeError, RecursionError) as exc:
        raise IntegrityError(
            f"field {name!r} of a segment holds values that cannot be read: {exc}"
        ) from None


def column_values(table: pa.Table, name: str) -> list[Any]:
    """The Python values of one column of a segment table (CBOR decoded, None for null)."""
    with _readable(name):
        return _column_values(table, name)


def _column_values(table: pa.Table, name: str) -> list[Any]:
    field = table.schema.field(name)
    column = table.column(name)
    if is_cbor_field(field):
        return [None if data is None else _cbor_decode(data, name) for data in column.to_pylist()]
    kind = field.type
    if pa.types.is_timestamp(kind) and kind.tz is not None:
        # Arrow gives zoneinfo("UTC"); records use datetime.UTC, as CBOR and key codecs do.
        naive = column.cast(pa.timestamp(kind.unit)).to_pylist()
        return [None if value is None else value.replace(tzinfo=_UTC) for value in naive]
    return list(column.to_pylist())


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
    _check_name(key_field, "the key field name")
    names = table.column_names
    for name in names:
        _check_name(name, "a column name")
    duplicates = sorted({name for name in names if names.count(name) > 1})
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
    return cbor_field(name), _cbor_array(name, values, _row_number)


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


# -- block bytes --------------------------------------------------------------


def encode_segment(table: pa.Table, *, compression: Any = SEGMENT_CODEC) -> bytes:
    """The block bytes of a segment: an Arrow IPC stream holding one record batch.

    One batch (chunks combined) makes the bytes a function of the content, so
    equal segments get equal CIDs. Buffers are compressed with
    :data:`SEGMENT_CODEC` (zstd level 3); ``compression`` (None, "lz4",
    "zstd" or a ``pyarrow.Codec``) exists for measurements: keep the default
    when writing blocks, or equal content stops deduplicating.
    """
    if not isinstance(table, pa.Table):
        raise UsageError(f"encode_segment takes a pyarrow Table, got {type(table).__name__}")
    combined = table.combine_chunks()
    batches = combined.to_batches()
    if len(batches) == 1:
        batch = batches[0]
    else:  # no rows: write one empty batch anyway, so a segment is always one batch
        batch = pa.RecordBatch.from_arrays(
            [pa.array([], type=field.type) for field in combined.schema], schema=combined.schema
        )
    sink = pa.BufferOutputStream()
    options = (
        _WRITE_OPTIONS
        if compression is SEGMENT_CODEC
        else pa.ipc.IpcWriteOptions(compression=compression)
    )
    with pa.ipc.new_stream(sink, combined.schema, options=options) as writer:
        writer.write_batch(batch)
    return bytes(sink.getvalue())


def decode_segment(data: bytes, columns: Collection[str] | None = None) -> pa.Table:
    """The table of segment block bytes (zero-copy when uncompressed).

    ``columns``: decode only the columns of these names (the others are not
    even decompressed), in segment order. IntegrityError when the bytes are
    not a complete one-batch Arrow IPC stream.
    """
    if not isinstance(data, bytes | bytearray | memoryview):
        raise UsageError(f"decode_segment takes bytes, got {type(data).__name__}")
    if not bytes(data[-len(_IPC_EOS) :]) == _IPC_EOS:
        raise IntegrityError(
            f"block of {len(data)} bytes is not a segment: it does not end like an Arrow IPC stream"
        )
    options = None
    if columns is not None:
        schema = decode_segment_schema(bytes(data[: schema_message_size(bytes(data[:8]))]))
        wanted = [i for i, field in enumerate(schema) if field.name in columns]
        if len(wanted) < len(schema):
            options = pa.ipc.IpcReadOptions(included_fields=wanted)
    try:
        reader = pa.ipc.open_stream(pa.py_buffer(data), options=options)
        batches = list(reader)
        table = pa.Table.from_batches(batches, schema=reader.schema)
        # Full: offsets in range and strings valid UTF-8 (readers turn them into str),
        # for the cost of one pass over the buffers, small beside decompressing them.
        table.validate(full=True)
        _check_names(table.schema)
    except (pa.ArrowException, OSError, ValueError) as exc:  # UnicodeDecodeError too
        raise IntegrityError(f"block of {len(data)} bytes is not a valid segment: {exc}") from None
    if len(batches) != 1:
        raise IntegrityError(f"a segment holds one record batch, this block holds {len(batches)}")
    return table


def _check_names(schema: pa.Schema) -> None:
    """Column names are distinct and non-empty; every field name, nested too, is UTF-8."""
    names = schema.names  # UnicodeDecodeError if one is not UTF-8
    if len(set(names)) != len(names) or "" in names:
        raise ValueError(f"column names must be distinct and non-empty, found {names!r:.200}")
    stack = list(schema)
    while stack:
        field = stack.pop()
        _ = field.name
        kind = field.type
        stack.extend(kind.field(i) for i in range(kind.num_fields))


# -- families -----------------------------------------------------------------


def split_families(
    table: pa.Table, *, key_field: str, families: Mapping[str, Collection[str]]
) -> dict[str, pa.Table]:
    """One table per family, rows aligned by position.

    ``"base"`` holds the key column and every field in no family; each family
    holds only its own fields (no key column). A family none of whose fields
    are present is a table with no columns and the same number of rows.
    Families must not share fields, hold the key field or be named "base".
    """
    field_family = _family_of_fields(families, key_field)
    names = table.column_names
    if key_field not in names:
        raise UsageError(f"the table has no key column {key_field!r} (columns: {names})")
    base = [key_field] + [n for n in names if n != key_field and n not in field_family]
    parts = {BASE_FAMILY: table.select(base)}
    for family in sorted(families):
        parts[family] = table.select([n for n in names if field_family.get(n) == family])
    return parts


def join_families(parts: Mapping[str, pa.Table]) -> pa.Table:
    """The inverse of :func:`split_families`: the parts' columns side by side.

    The base part's first column (the key) comes first, then every other
    column sorted by name, which is the segment column order.
    """
    base = parts.get(BASE_FAMILY)
    if base is None or base.num_columns == 0:
        raise UsageError(
            f"join_families needs the {BASE_FAMILY!r} part with the key column "
            f"(got parts {sorted(parts)})"
        )
    rows = base.num_rows
    columns: dict[str, tuple[pa.Field, Any]] = {}
    for family in [BASE_FAMILY, *sorted(name for name in parts if name != BASE_FAMILY)]:
        part = parts[family]
        if part.num_rows != rows:
            raise IntegrityError(
                f"family {family!r} has {part.num_rows} rows but the base has {rows}: "
                "the segments do not belong to one tablet"
            )
        for field, column in zip(part.schema, part.columns, strict=True):
            if field.name in columns:
                raise IntegrityError(f"field {field.name!r} appears in two families' segments")
            columns[field.name] = (field, column)
    key_name = base.column_names[0]
    order = [key_name, *sorted(name for name in columns if name != key_name)]
    return pa.Table.from_arrays(
        [columns[name][1] for name in order],
        schema=pa.schema([columns[name][0] for name in order]),
    )


def _family_of_fields(families: Mapping[str, Collection[str]], key_field: str) -> dict[str, str]:
    if not isinstance(families, Mapping):
        raise UsageError(
            f"families must be a mapping of family name -> field names, "
            f"got {type(families).__name__}"
        )
    owner: dict[str, str] = {}
    for family, members in families.items():
        _check_name(family, "a family name")
        if family == BASE_FAMILY:
            raise UsageError(
                f"{BASE_FAMILY!r} is the family of fields in no family: name the family otherwise"
            )
        if isinstance(members, str | bytes) or not isinstance(members, Collection):
            raise UsageError(
                f"family {family!r} must list field names (a set or list), "
                f"got {type(members).__name__}"
            )
        for name in members:
            _check_name(name, f"a field name in family {family!r}")
            if name == key_field:
                raise UsageError(
                    f"family {family!r} lists the key field {key_field!r}: the key is always "
                    "in the base segment; remove it from the family"
                )
            if name in owner and owner[name] != family:
                raise UsageError(
                    f"field {name!r} is in families {owner[name]!r} and {family!r}: "
                    "a field belongs to at most one family"
                )
            owner[name] = family
    return owner


# -- combining and projecting -------------------------------------------------


def concat_segments(tables: Sequence[pa.Table], *, key_field: str) -> pa.Table:
    """The rows of several segment tables, in order, under one schema.

    A column missing from a table is null there; a column that is null
    everywhere is dropped; a field whose types differ between tables (int64
    here, string there, CBOR elsewhere) becomes CBOR in the result, so every
    value still round-trips exactly. Vectorised except for that conversion.
    The key column comes first and must have one type in every table.
    """
    if not tables:
        raise UsageError("concat_segments needs at least one table")
    key_types: set[pa.DataType] = set()
    for position, table in enumerate(tables):
        if key_field not in table.column_names:
            raise UsageError(
                f"table {position} has no key column {key_field!r} (columns: {table.column_names})"
            )
        key_type = table.schema.field(key_field).type
        if key_type != pa.null():  # an empty table built without a codec
            key_types.add(key_type)
    if len(key_types) > 1:
        raise UsageError(
            f"the tables' key columns {key_field!r} have different types "
            f"{sorted(map(str, key_types))}: they belong to tables with different key codecs"
        )
    names = sorted({name for table in tables for name in table.column_names} - {key_field})
    key = pa.field(key_field, key_types.pop() if key_types else pa.null())
    keys = [table.column(key_field) for table in tables]
    if any(column.null_count for column in keys):
        raise UsageError(f"a key column {key_field!r} holds nulls: every row needs its key")
    fields = [key]
    columns = [_chunks([column.cast(key.type) for column in keys], key.type)]
    for name in names:
        merged = _merge_column(name, tables)
        if merged is not None:
            fields.append(merged[0])
            columns.append(merged[1])
    return pa.Table.from_arrays(columns, schema=pa.schema(fields))


def _merge_column(name: str, tables: Sequence[pa.Table]) -> tuple[pa.Field, Any] | None:
    """One column across tables, or None when it holds no value anywhere."""
    found: list[tuple[pa.Field, pa.ChunkedArray] | None] = []
    kinds: dict[tuple[pa.DataType, bool], pa.Field] = {}
    for table in tables:
        if name not in table.column_names:
            found.append(None)
            continue
        field, column = table.schema.field(name), table.column(name)
        if column.null_count == len(column):
            found.append(None)  # no values: takes any type
            continue
        found.append((field, column))
        kinds.setdefault((field.type, is_cbor_field(field)), field)
    if not kinds:
        return None
    if len(kinds) == 1:
        (target,) = kinds.values()
        pieces = [
            pa.nulls(len(table), target.type) if entry is None else entry[1]
            for table, entry in zip(tables, found, strict=True)
        ]
        return target, _chunks(pieces, target.type)
    pieces = []
    for table, entry in zip(tables, found, strict=True):
        if entry is None:
            pieces.append(pa.nulls(len(table), pa.binary()))
        elif is_cbor_field(entry[0]):
            pieces.append(entry[1])
        else:
            values = column_values(pa.table([entry[1]], schema=pa.schema([entry[0]])), name)
            pieces.append(_cbor_array(name, values, _row_number))
    return cbor_field(name), _chunks(pieces, pa.binary())


def _chunks(pieces: Sequence[Any], kind: pa.DataType) -> pa.ChunkedArray:
    chunks: list[pa.Array] = []
    for piece in pieces:
        if isinstance(piece, pa.ChunkedArray):
            chunks.extend(piece.chunks)
        else:
            chunks.append(piece)
    return pa.chunked_array(chunks, type=kind)


def project(table: pa.Table, fields: Collection[str] | None, *, key_field: str) -> pa.Table:
    """The key column and the requested fields that exist, in table order."""
    wanted = _field_set(fields)
    if wanted is None:
        return table
    return table.select(
        [name for name in table.column_names if name == key_field or name in wanted]
    )


# -- helpers ------------------------------------------------------------------


def _field_set(fields: Collection[str] | None) -> set[str] | None:
    if fields is None:
        return None
    if isinstance(fields, str | bytes) or not isinstance(fields, Collection):
        raise UsageError(
            f"fields must be a collection of field names (e.g. a list), got {fields!r}"
        )
    return set(fields)


def _check_name(name: Any, what: str) -> None:
    if not isinstance(name, str) or not name:
        raise UsageError(f"{what} must be a non-empty string, got {name!r}")


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
