"""Segments: the Arrow tables that hold record data, and their IPC block bytes.

A segment is one Arrow table stored as a raw block (Arrow IPC stream, one
record batch). Its first column is the native key column of the table's key
codec, then one column per field, sorted by name (a page's blocks split the
same columns: :mod:`merkle.tablets.pages`). How schema-free values become
columns is :mod:`merkle.tablets.freeform` (with :mod:`merkle.tablets.cbor`);
its names are re-exported here.

Field families split one table into a base segment (the key and every field
in no family) and one segment per family, so a projection reads only the
segments it needs. The layout and the compression choice are written down in
``doc/format.md`` ("Segments").
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

import pyarrow as pa

from merkle.errors import IntegrityError, UsageError
from merkle.tablets.cbor import (
    CBOR_ENCODING,
    ENCODING_KEY,
    NAIVE_DATETIME_TAG,
    _cbor_array,
    cbor_array,
    cbor_field,
    is_cbor_field,
    row_number,
)
from merkle.tablets.freeform import (
    arrow_to_records,
    cbor_column,
    check_name,
    column_values,
    field_set,
    normalize_arrow,
    records_to_arrow,
    values_column,
)
from merkle.tablets.nulltypes import fills_nulls, refined
from merkle.tablets.segschema import segment_layout
from merkle.tablets.storedform import stored_column

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
    "check_rows",
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
#: Arrow IPC buffer compression of segment and page blocks and its level, chosen by
#: bench/segments.py and bench/scale.py (doc/format.md, "Segments"): LZ4 decodes a
#: page five times as fast as zstd, which scans and lookups wait for, for about
#: half as many bytes again. Part of the format only in that equal content must
#: give equal bytes: readers accept any IPC codec.
SEGMENT_COMPRESSION = "lz4"
SEGMENT_COMPRESSION_LEVEL = 1
#: The codec object :func:`encode_segment` uses by default.
SEGMENT_CODEC = pa.Codec(SEGMENT_COMPRESSION, compression_level=SEGMENT_COMPRESSION_LEVEL)

# One thread per block: callers encode and decode many blocks at once on their own
# workers, and Arrow's pool would only add hand-offs (it halves a page's decode time).
_WRITE_OPTIONS = pa.ipc.IpcWriteOptions(compression=SEGMENT_CODEC, use_threads=False)
_PLAIN_WRITE_OPTIONS = pa.ipc.IpcWriteOptions(compression=None, use_threads=False)
_READ_OPTIONS = pa.ipc.IpcReadOptions(use_threads=False)
_IPC_EOS = b"\xff\xff\xff\xff\x00\x00\x00\x00"


# -- block bytes --------------------------------------------------------------


def encode_segment(table: pa.Table, *, compression: Any = SEGMENT_CODEC) -> bytes:
    """The block bytes of a segment: an Arrow IPC stream holding one record batch.

    One batch (chunks combined) makes the bytes a function of the content, so
    equal segments get equal CIDs. Buffers are compressed with
    :data:`SEGMENT_CODEC` (LZ4 frames); ``compression`` (None, "lz4",
    "zstd" or a ``pyarrow.Codec``) is otherwise only for a rule that depends
    on the content alone (key blocks of fixed-width keys: None, see
    ``pages.encode_page``) and for measurements: any other choice would stop
    equal content from deduplicating.
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
    if compression is SEGMENT_CODEC:
        options = _WRITE_OPTIONS
    elif compression is None:
        options = _PLAIN_WRITE_OPTIONS
    else:
        options = pa.ipc.IpcWriteOptions(compression=compression, use_threads=False)
    with pa.ipc.new_stream(sink, combined.schema, options=options) as writer:
        writer.write_batch(batch)
    return bytes(sink.getvalue())


def decode_segment(data: bytes, columns: Collection[str] | None = None) -> pa.Table:
    """The table of segment block bytes (zero-copy when uncompressed).

    ``columns``: decode only the columns of these names (the others are not
    even decompressed), in segment order. IntegrityError when the bytes are
    not a complete one-batch Arrow IPC stream. A column that a writer from
    before segments held storage types only stored as a view or run-end
    encoded comes out in its storage type (:func:`_in_storage_types`): every
    reader gets one form.
    """
    if not isinstance(data, bytes | bytearray | memoryview):
        raise UsageError(f"decode_segment takes bytes, got {type(data).__name__}")
    if not bytes(data[-len(_IPC_EOS) :]) == _IPC_EOS:
        raise IntegrityError(
            f"block of {len(data)} bytes is not a segment: it does not end like an Arrow IPC stream"
        )
    layout = segment_layout(data)
    options = _READ_OPTIONS
    none_wanted = False
    views = layout.strings
    if columns is not None:
        wanted, views = layout.projection(columns)
        # Arrow reads every field for an empty list: read the first, keep only the rows.
        none_wanted = not wanted and len(layout.schema) > 0
        if len(wanted) < len(layout.schema):
            options = pa.ipc.IpcReadOptions(included_fields=wanted or [0], use_threads=False)
            if none_wanted:
                views = {0: layout.strings[0]} if 0 in layout.strings else {}
    try:
        reader = pa.ipc.open_stream(pa.py_buffer(data), options=options)
        batches = list(reader)
        if len(batches) != 1:
            raise IntegrityError(
                f"a segment holds one record batch, this block holds {len(batches)}"
            )
        _check_batch(batches[0], views)
        table = pa.Table.from_batches(batches, schema=reader.schema)
        if none_wanted:
            return table.select([])
        if layout.older:
            table = _in_storage_types(table, layout.older)
    except (pa.ArrowException, OSError, ValueError) as exc:  # UnicodeDecodeError too
        raise IntegrityError(f"block of {len(data)} bytes is not a valid segment: {exc}") from None
    return table


def _in_storage_types(table: pa.Table, older: Mapping[str, pa.Field]) -> pa.Table:
    """``table`` with the columns named in ``older`` (a segment's views and run-end
    encoding, from before segments held storage types only) in their storage types
    (``older``: name -> the field as stored now).

    Arrow has no take, filter or sort kernel for those types: every fold of
    pending batches, merge and page rewrite over such a column failed (a delete
    of old rows committed, then no read of the table could fold it). Given in
    storage types, old segments read, merge and rewrite as new ones do, and a
    rewrite stores them in that form.
    """
    fields = []
    columns = []
    for field, column in zip(table.schema, table.columns, strict=True):
        now = older.get(field.name)
        if now is None:
            fields.append(field)
            columns.append(column)
        else:
            fields.append(now)
            columns.append(stored_column(column))
    return pa.Table.from_arrays(columns, schema=pa.schema(fields, metadata=table.schema.metadata))


def _check_batch(batch: pa.RecordBatch, views: Mapping[int, pa.DataType]) -> None:
    """Arrow's full validation of every column of a decoded batch, except that top-level
    strings (``views``: position -> the binary type, from the segment's layout) are
    checked as bytes, not as UTF-8.

    What makes reading a decoded block safe is checked here (buffer sizes,
    offsets in range and in order, nested children): a block that passed its
    hash may still come from a faulty or hostile writer. Their UTF-8 was
    checked when the rows were written (:func:`check_rows`) and is checked
    again by ``verify``: checking it on every read took half of a page's
    decoding (about 200 us of 800 for 16,384 rows of two short string
    columns), paid by every lookup and scan.
    """
    for i in range(batch.num_columns):
        column = batch.column(i)
        view = views.get(i)
        (column if view is None else column.view(view)).validate(full=True)


def check_rows(table: pa.Table) -> None:
    """UsageError unless Arrow rows given to be written are valid Arrow data throughout
    (offsets in range, strings UTF-8): such rows would be stored, and then fail
    every read of the blocks holding them."""
    for name, column in zip(table.column_names, table.columns, strict=True):
        try:
            column.validate(full=True)
        except (pa.ArrowException, ValueError) as exc:
            raise UsageError(
                f"column {name!r} of the rows to write is not valid Arrow data ({exc}); "
                "nothing was written: repair the data (bytes that are not UTF-8 belong in "
                "a binary column, not a string one)"
            ) from None


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
        check_name(family, "a family name")
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
            check_name(name, f"a field name in family {family!r}")
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

    Linear in the number of columns: each table's names are listed once (pyarrow
    builds a new list on every ``column_names`` access), not once per column.
    """
    if not tables:
        raise UsageError("concat_segments needs at least one table")
    alike = _concat_alike(tables, key_field)
    if alike is not None:
        return alike
    held = [set(table.column_names) for table in tables]
    key_types: set[pa.DataType] = set()
    for position, table in enumerate(tables):
        if key_field not in held[position]:
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
    names = sorted(set().union(*held) - {key_field})
    key = pa.field(key_field, key_types.pop() if key_types else pa.null())
    keys = [table.column(key_field) for table in tables]
    if any(column.null_count for column in keys):
        raise UsageError(f"a key column {key_field!r} holds nulls: every row needs its key")
    fields = [key]
    columns = [_chunks([column.cast(key.type) for column in keys], key.type)]
    for name in names:
        merged = _merge_column(name, tables, held)
        if merged is not None:
            fields.append(merged[0])
            columns.append(merged[1])
    return pa.Table.from_arrays(columns, schema=pa.schema(fields))


def _concat_alike(tables: Sequence[pa.Table], key_field: str) -> pa.Table | None:
    """:func:`concat_segments` of tables that share one schema (a scan's tablets, as a
    rule), without its per-table, per-column work in Python; None when they do not.

    The same table: the key column first, the other fields sorted by name, a
    field null in every row dropped, the key checked for nulls.
    """
    if len(tables) < 2:
        return None
    schema = tables[0].schema
    names = schema.names
    if key_field not in names or len(set(names)) != len(names):
        return None
    key_type = schema.field(key_field).type
    if key_type == pa.null() or not all(
        table.schema.equals(schema, check_metadata=True) for table in tables[1:]
    ):
        return None
    whole = pa.concat_tables(tables)
    key = whole.column(key_field)
    if key.null_count:
        raise UsageError(f"a key column {key_field!r} holds nulls: every row needs its key")
    fields = [pa.field(key_field, key_type)]
    columns = [key]
    for name in sorted(names):
        if name == key_field:
            continue
        column = whole.column(name)
        if column.null_count != len(column):
            fields.append(schema.field(name))
            columns.append(column)
    return pa.Table.from_arrays(columns, schema=pa.schema(fields))


def _merge_column(
    name: str, tables: Sequence[pa.Table], held: Sequence[Collection[str]]
) -> tuple[pa.Field, Any] | None:
    """One column across tables, or None when it holds no value anywhere.

    ``held``: each table's column names, listed once by the caller.
    """
    found: list[tuple[pa.Field, pa.ChunkedArray] | None] = []
    # (type, CBOR or not) -> the first field of that kind; compared, not hashed: a user's
    # extension type may be unhashable
    kinds: list[tuple[pa.DataType, bool, pa.Field]] = []
    for table, names in zip(tables, held, strict=True):
        if name not in names:
            found.append(None)
            continue
        field, column = table.schema.field(name), table.column(name)
        if column.null_count == len(column):
            found.append(None)  # no values: takes any type
            continue
        found.append((field, column))
        cbor = is_cbor_field(field)
        if not any(kind == field.type and free == cbor for kind, free, _ in kinds):
            kinds.append((field.type, cbor, field))
    if not kinds:
        return None
    wrapped = _extension_of_storage(kinds, found, tables)
    if wrapped is not None:
        return wrapped
    if len(kinds) == 1:
        target = kinds[0][2]
        pieces = [
            pa.nulls(len(table), target.type) if entry is None else entry[1]
            for table, entry in zip(tables, found, strict=True)
        ]
        return target, _chunks(pieces, target.type)
    joined = _joined(kinds)
    if joined is not None:
        pieces = [
            pa.nulls(len(table), joined.type) if entry is None else entry[1].cast(joined.type)
            for table, entry in zip(tables, found, strict=True)
        ]
        return joined, _chunks(pieces, joined.type)
    pieces = []
    for table, entry in zip(tables, found, strict=True):
        if entry is None:
            pieces.append(pa.nulls(len(table), pa.binary()))
        elif is_cbor_field(entry[0]):
            pieces.append(entry[1])
        else:
            values = column_values(pa.table([entry[1]], schema=pa.schema([entry[0]])), name)
            pieces.append(_cbor_array(name, values, row_number))
    return cbor_field(name), _chunks(pieces, pa.binary())


def _joined(kinds: Sequence[tuple[pa.DataType, bool, pa.Field]]) -> pa.Field | None:
    """The one typed field every kind of a column widens to by giving the ``null``
    inside it a type (``list<null>`` stored before a write typed the field
    ``list<int64>``, :mod:`~merkle.tablets.nulltypes`), or None: the column is
    then merged as CBOR. Every value of such a kind (an empty list, a null) is one
    of the joined type, so the cast changes none."""
    if any(free for _, free, _ in kinds):
        return None
    field = kinds[0][2]
    for kind, _, _ in kinds[1:]:
        joined = refined(field.type, kind)
        if not (joined == field.type or fills_nulls(field.type, joined)):
            return None
        if not (joined == kind or fills_nulls(kind, joined)):
            return None
        field = field.with_type(joined)
    return field


def _extension_of_storage(
    kinds: Sequence[tuple[pa.DataType, bool, pa.Field]],
    found: Sequence[tuple[pa.Field, pa.ChunkedArray] | None],
    tables: Sequence[pa.Table],
) -> tuple[pa.Field, Any] | None:
    """A column held as one extension type in some segments and as that type's plain
    storage in others, as the extension type; None for any other mix.

    A process where a user's extension type was not registered wrote its values
    as plain storage until the segment field kept the extension's name (see
    ``conform.stored_field``); those segments are the same values, not another
    type to join as CBOR (which the extension type could not be read back from).
    """
    if len(kinds) < 2 or any(free for _, free, _ in kinds):
        return None
    extensions = [kind for kind, _, _ in kinds if isinstance(kind, pa.BaseExtensionType)]
    if len(extensions) != 1:
        return None
    extension = extensions[0]
    if any(kind != extension and kind != extension.storage_type for kind, _, _ in kinds):
        return None
    field = next(field for kind, _, field in kinds if kind == extension)
    pieces: list[Any] = []
    for table, entry in zip(tables, found, strict=True):
        if entry is None:
            pieces.append(pa.nulls(len(table), extension))
        elif entry[1].type == extension:
            pieces.append(entry[1])
        else:
            pieces += [pa.ExtensionArray.from_storage(extension, c) for c in entry[1].chunks]
    return field, _chunks(pieces, extension)


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
    wanted = field_set(fields)
    if wanted is None:
        return table
    return table.select(
        [name for name in table.column_names if name == key_field or name in wanted]
    )
