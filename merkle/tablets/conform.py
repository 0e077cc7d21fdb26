"""Rows checked against a table's schema: user data in as segment rows, and back out.

Writing (:func:`conform_arrow`, :func:`conform_records`): every value must
fit its field's type exactly (an int64 column fits an int32 field when every
value is in range; ``"12"`` never fits an int field; 1.5 never fits an int
field); a field the schema lacks is added, nullable, with the type the data
has (an all-null Arrow column: type null, which a later write of values
replaces by their type, see :func:`typed_names`); a schema-free field takes
any value as CBOR. A value that does not fit
is a :class:`~merkle.errors.SchemaError` naming the field, the record's key
and the value (an Arrow column is fitted in :mod:`merkle.tablets.fitcolumn`, a
field of records built in :mod:`merkle.tablets.recordcolumn`). The
result is in segment form: the key column first (in the key codec's type; a
composite key as one struct column), then the stored fields sorted by name,
each in its :func:`~merkle.tablets.schema.storage_type`.

Reading (:func:`present`, :func:`present_records`) is the inverse: the
schema's fields in the schema's order, with the schema's exact types.

Both directions cost time linear in the number of fields: a table may have
thousands. pyarrow builds a new list on every ``Table.column_names`` and
``Schema.names`` access, and ``Schema.append`` copies the schema, so each is
done once per table here (a set of names, one schema built at the end), never
once per field.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from merkle.errors import SchemaError, UsageError
from merkle.lazy import compute as pc
from merkle.tablets.dicts import (
    check_fits,
    declarable_type,
    has_dictionary,
)
from merkle.tablets.fitcolumn import fit_column
from merkle.tablets.freeform import in_micros, python_values
from merkle.tablets.keys import KeyCodec, infer_key_codec, infer_key_codec_arrow, key_codec
from merkle.tablets.keytimes import is_naive_timestamp, naive_key_values, record_key_type
from merkle.tablets.learnrecords import learned_field
from merkle.tablets.nanotext import nanos_texts
from merkle.tablets.nesting import check_nesting
from merkle.tablets.nullness import check_inner_nulls, check_nullability
from merkle.tablets.nulltypes import has_null, refined
from merkle.tablets.recordcolumn import check_kind_column, record_column
from merkle.tablets.restore import null_column, restore_column
from merkle.tablets.schema import (
    check_declared_type,
    composite_column,
    infer_type,
    is_free,
    plain_scalars,
    storage_type,
)
from merkle.tablets.segment import (
    arrow_to_records,
    cbor_array,
    cbor_field,
    column_values,
    is_cbor_field,
)

__all__ = [
    "Conformed",
    "KeyLayout",
    "codec_for_types",
    "conform_arrow",
    "conform_records",
    "fit_column",
    "present",
    "present_records",
    "schema_of_segments",
    "stored_field",
]


@dataclass(frozen=True, slots=True)
class KeyLayout:
    """A table's key: the user's key fields and the segment column that holds them."""

    fields: tuple[str, ...]

    @classmethod
    def of(cls, key: str | Sequence[str]) -> KeyLayout:
        names = (key,) if isinstance(key, str) else tuple(key)
        if not names or not all(isinstance(n, str) and n for n in names):
            raise UsageError(f"the key must be a field name or a list of field names, got {key!r}")
        if len(set(names)) != len(names):
            raise UsageError(f"the key {list(names)} names a field twice")
        return cls(names)

    @property
    def composite(self) -> bool:
        return len(self.fields) > 1

    @property
    def column(self) -> str:
        """The segment key column: the key field itself, or a struct of the key fields."""
        return composite_column(self.fields) if self.composite else self.fields[0]

    def key_of(self, record: Mapping[str, Any]) -> Any:
        """The key value of a record: one field's value, or a tuple for a composite key."""
        if self.composite:
            return tuple(record.get(name) for name in self.fields)
        return record.get(self.fields[0])

    def missing(self, record: Mapping[str, Any]) -> str | None:
        """The key fields ``record`` lacks, as errors name them ("the key field 'seq'")."""
        names = [name for name in self.fields if record.get(name) is None]
        if not names:
            return None
        return f"the key field {names[0]!r}" if len(names) == 1 else f"the key fields {names}"


@dataclass(frozen=True, slots=True)
class Conformed:
    """Rows in segment form, with the schema and key codec they were checked against."""

    rows: pa.Table
    schema: pa.Schema
    codec: KeyCodec


def codec_for_types(types: Sequence[pa.DataType]) -> KeyCodec:
    """The key codec of key fields of these Arrow types (one: its codec; several: a tuple)."""
    if len(types) == 1:
        return infer_key_codec_arrow(types[0])
    return key_codec("tuple(" + ",".join(infer_key_codec_arrow(t).spec for t in types) + ")")


# -- writing ---------------------------------------------------------------------


def _segment(
    key: KeyLayout, key_column: Any, codec: KeyCodec, stored: Mapping[str, tuple[pa.Field, Any]]
) -> pa.Table:
    fields = [pa.field(key.column, codec.arrow_type)]
    arrays = [key_column]
    for name in sorted(stored):
        field, array = stored[name]
        if array.null_count == len(array):
            continue  # None everywhere is the same as absent
        fields.append(field)
        arrays.append(array)
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


#: The field metadata by which Arrow names an extension type it does not know (a
#: user's type not registered in this process): its storage type carries these.
_EXTENSION_KEYS = (b"ARROW:extension:name", b"ARROW:extension:metadata")


def stored_field(field: pa.Field) -> pa.Field:
    """The segment field that stores a schema field (CBOR-marked binary if schema-free).

    A user's extension type that this process has not registered reads as its
    storage type with the extension's name in the field's metadata: that
    metadata is kept, so a segment written here holds the same bytes (and
    CID) as one written where the type is registered, and reads there as the
    extension type (plain storage there would not join the extension's other
    segments).
    """
    if is_free(field):
        return cbor_field(field.name)
    named = {k: v for k, v in (field.metadata or {}).items() if k in _EXTENSION_KEYS}
    if b"ARROW:extension:name" not in named:
        return pa.field(field.name, storage_type(field.type))
    return pa.field(field.name, storage_type(field.type), metadata=named)


def _check_names(names: Sequence[str], key: KeyLayout) -> None:
    for name in names:
        if not isinstance(name, str) or not name:
            raise UsageError(f"a field name must be a non-empty string, got {name!r}")
    duplicates = sorted(name for name, seen in Counter(names).items() if seen > 1)
    if duplicates:
        raise UsageError(f"the data has duplicate columns {duplicates}: rename them")
    if key.composite and key.column in names:
        raise UsageError(
            f"{key.column!r} is the name merkle-db gives the composite key {list(key.fields)}: "
            "rename that field"
        )


def conform_arrow(
    table: pa.Table,
    schema: pa.Schema | None,
    key: KeyLayout,
    codec: KeyCodec | None,
    *,
    new_free: bool = False,
    partial: bool = False,
) -> Conformed:
    """An Arrow table checked against ``schema`` (extended by its new fields), in segment form.

    ``new_free``: a field the schema lacks is added schema-free instead of typed.
    ``partial``: the rows are field changes, not whole records (a field they
    lack is not missing).
    """
    names = table.column_names
    _check_names(names, key)
    schema = schema if schema is not None else pa.schema([])
    known = typed_names(schema)
    for name in key.fields:
        if name not in names:
            raise UsageError(
                f"the Arrow data has no column {name!r}, a key field of this table "
                f"(columns: {names})"
            )
    key_types = []
    key_columns = []
    for name in key.fields:
        column = table.column(name)
        if column.null_count:
            raise UsageError(f"key field {name!r} holds nulls: every row needs its key")
        if name in known:
            kind = schema.field(name).type
            column = fit_column(name, column, kind, lambda i: f"row {i}", key_field=True)
        key_types.append(column.type)
        key_columns.append(column)
    if codec is None:
        codec = codec_for_types(key_types)
    try:
        if key.composite:
            chunks = [_combined(c) for c in key_columns]
            struct = pa.StructArray.from_arrays(chunks, names=[str(i) for i in range(len(chunks))])
            key_array = codec.check_column(struct)
        else:
            key_array = codec.check_column(key_columns[0])
    except UsageError as exc:
        raise UsageError(
            f"key {list(key.fields) if key.composite else key.fields[0]!r}: {exc}"
        ) from None

    def key_of(position: int) -> Any:
        return codec.to_python(key_array.slice(position, 1))[0]

    new_fields: list[pa.Field] = []
    for name, kind in zip(key.fields, key_types, strict=True):
        if name not in known:
            new_fields.append(table.schema.field(name).with_type(kind))
    stored: dict[str, tuple[pa.Field, Any]] = {}
    for field in table.schema:
        name = field.name
        if name in key.fields:
            continue
        # before any Python value, CBOR or segment comes of the column: a schema-free
        # field is held to what passes through Python, a typed one to Arrow IPC's limit
        free = is_free(schema.field(name)) if name in known else is_cbor_field(field) or new_free
        check_nesting(field.type, name, "the Arrow data", free=free)
        column = table.column(name)
        if name in known:
            target = schema.field(name)
            if has_null(target.type):  # null inside (list<null>): the data's type there
                learned = refined(target.type, declarable_type(field.type))
                if learned != target.type:
                    check_declared_type(learned, name, "the Arrow data")
                    target = target.with_type(learned)
                    new_fields.append(target)
        elif is_cbor_field(field) or (new_free and not pa.types.is_null(field.type)):
            target = cbor_field(name)
            new_fields.append(target)
        elif pa.types.is_null(field.type):  # kept, of type null: no type to learn yet
            declared = name in schema.names
            target = schema.field(name) if declared else pa.field(name, pa.null())
            new_fields.append(target)
        else:
            kind = declarable_type(field.type)
            check_declared_type(kind, name, "the Arrow data")  # before its values are cast
            target = pa.field(name, kind, nullable=True, metadata=field.metadata)
            new_fields.append(target)
        if is_free(target):
            if is_cbor_field(field):
                array = column.cast(pa.binary())
            else:
                values = column_values(pa.table([column], schema=pa.schema([field])), name)
                array = cbor_array(name, values, lambda i: f"the record with key {key_of(i)!r}")
        else:
            check_kind_column(name, column, target.type, key_of)
            array = _fitted(name, column, target.type, key_of)
            if column.type != target.type and has_dictionary(target.type):
                check_fits(name, array, target.type)  # Arrow of the field's type fits already
            check_inner_nulls(name, array, key_of)
        stored[name] = (stored_field(target), array)
    order = {name: i for i, name in enumerate(names)}
    full = _extend(schema, sorted(new_fields, key=lambda f: order[f.name]))
    if not partial:
        check_nullability(full, {n: a for n, (_, a) in stored.items()}, key.fields, key_of)
    return Conformed(_segment(key, key_array, codec, stored), full, codec)


def _fitted(name: str, column: Any, kind: pa.DataType, key_of: Any) -> Any:
    """``column`` fitted to the :func:`storage_type` of field ``name`` of type ``kind``;
    an error names the field by ``kind`` (a dictionary), not by the storage it is fitted to."""
    stored = storage_type(kind)
    try:
        return fit_column(name, column, stored, key_of)
    except SchemaError as exc:
        if stored == kind:
            raise
        raise SchemaError(str(exc).replace(f" is {stored}", f" is {kind}", 1)) from None


def _combined(column: Any) -> pa.Array:
    if isinstance(column, pa.ChunkedArray):
        return column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    return column


def _extend(schema: pa.Schema, fields: Sequence[pa.Field]) -> pa.Schema:
    """``schema`` (metadata kept) with ``fields`` after its own, built once: appending
    them one by one copies the schema each time, quadratic in the number of fields.

    A field of ``fields`` that ``schema`` has already (of type null: it had no type
    to learn, see :func:`typed_names`) takes its place, so it keeps its position.
    """
    if not fields:
        return schema
    learned = {f.name: f for f in fields}
    have = [learned.pop(f.name, f) for f in schema]
    return pa.schema([*have, *learned.values()], metadata=schema.metadata)


def typed_names(schema: pa.Schema) -> set[str]:
    """The fields of ``schema`` whose type is known: every field not of type null.

    A field of type null (declared so, written as an all-null Arrow column, or
    a key field before the first write) has had no type to learn: a write of
    values gives it the type they have, as a new field would get, in its place.
    Every value it held is null, a value of any type, so nothing stored changes.
    A field with ``null`` inside its type (``list<null>``) is typed: a write
    gives that inner null the type of its values the same way
    (:mod:`merkle.tablets.nulltypes`).
    """
    return {f.name for f in schema if not pa.types.is_null(f.type)}


def conform_records(
    records: Sequence[Mapping[str, Any]],
    schema: pa.Schema | None,
    key: KeyLayout,
    codec: KeyCodec | None,
    *,
    new_free: bool = False,
    partial: bool = False,
) -> Conformed:
    """Records (dicts holding the key fields) checked against ``schema``, in segment form.

    ``new_free``: a field the schema lacks is added schema-free instead of typed.
    ``partial``: the records are field changes, not whole records (a field
    they lack is not missing).
    """
    schema = schema if schema is not None else pa.schema([])
    keys: list[Any] = []
    columns: dict[str, list[Any]] = {}
    first_seen: dict[str, int] = {}  # field -> order of first appearance (the column order)
    count = len(records)
    for position, record in enumerate(records):
        if not isinstance(record, Mapping):
            raise UsageError(
                f"record {position} is of type {type(record).__name__}, not a mapping: "
                "write dicts of field name -> value"
            )
        missing = key.missing(record)
        if missing is not None:
            raise UsageError(
                f"record {position} has no value for {missing}: every record needs its primary key"
            )
        keys.append(key.key_of(record))
        for name, item in record.items():
            if name in key.fields:
                first_seen.setdefault(name, len(first_seen))
                continue
            values = columns.get(name)
            if values is None:
                if item is None:
                    continue
                values = columns[name] = [None] * count
                first_seen.setdefault(name, len(first_seen))
            values[position] = item
    _check_names(list(columns), key)
    nanos = {name for name, values in columns.items() if plain_scalars(values)}
    known = typed_names(schema)
    if codec is None:
        if all(name in known for name in key.fields):
            codec = codec_for_types([schema.field(name).type for name in key.fields])
        else:
            codec = infer_key_codec(keys[0])
    try:
        key_array = codec.to_arrow(keys)
    except UsageError as exc:
        raise UsageError(f"key {_key_label(key)}: {exc}") from None

    def key_of(position: int) -> Any:
        return keys[position]

    new_fields: list[pa.Field] = []
    parts = key_array.flatten() if key.composite else [key_array]
    for index, (name, part) in enumerate(zip(key.fields, parts, strict=True)):
        if name in known:
            fit_column(name, part, schema.field(name).type, key_of)  # range checks only
        else:  # the values' type: naive datetimes make a naive field (keytimes)
            values = [k[index] for k in keys] if key.composite else keys
            new_fields.append(pa.field(name, record_key_type(name, part.type, values, key_of)))
    stored: dict[str, tuple[pa.Field, Any]] = {}
    for name, values in columns.items():
        if name in known:
            target = schema.field(name)
            if has_null(target.type):  # null inside (list<null>): the values' type there
                learned = learned_field(target, name, values, key_of)
                if learned is not target:
                    target = learned
                    new_fields.append(target)
        elif new_free:
            target = cbor_field(name)
            new_fields.append(target)
        else:
            kind = infer_type(name, values, key_of)
            if pa.types.is_null(kind):
                continue
            target = pa.field(name, kind)
            new_fields.append(target)
        if is_free(target):
            array = cbor_array(name, values, lambda i: f"the record with key {keys[i]!r}")
        else:
            array = record_column(name, values, target.type, key_of, nanos=name in nanos)
        stored[name] = (stored_field(target), array)
    full = _extend(schema, sorted(new_fields, key=lambda f: first_seen.get(f.name, -1)))
    if not partial:
        check_nullability(full, {n: a for n, (_, a) in stored.items()}, key.fields, key_of)
    return Conformed(_segment(key, key_array, codec, stored), full, codec)


def _key_label(key: KeyLayout) -> str:
    return repr(list(key.fields)) if key.composite else repr(key.fields[0])


# -- reading ---------------------------------------------------------------------


def _wanted(schema: pa.Schema, key: KeyLayout, fields: Sequence[str] | None) -> list[pa.Field]:
    if fields is None:
        return list(schema)
    chosen = set(fields) | set(key.fields)
    return [field for field in schema if field.name in chosen]


def present(
    raw: pa.Table,
    schema: pa.Schema | None,
    key: KeyLayout,
    fields: Sequence[str] | None = None,
) -> pa.Table:
    """Segment rows as the user's table: the schema's fields, order and exact types."""
    if schema is None:
        return _key_parts_apart(raw, key)
    if (
        fields is None
        and schema.metadata is None
        and raw.schema.equals(schema, check_metadata=True)
    ):
        return raw  # already the user's table: what follows would rebuild it as it is
    held = set(raw.column_names)
    if key.column not in held:
        return raw
    count = raw.num_rows
    key_column = raw.column(key.column)
    if not key.composite:
        parts = {key.fields[0]: key_column}
    elif pa.types.is_struct(key_column.type):
        parts = {name: pc.struct_field(key_column, [i]) for i, name in enumerate(key.fields)}
    else:  # no codec chosen yet (a table never written): no rows, no struct
        parts = {name: pa.nulls(count) for name in key.fields}
    arrays = []
    chosen = _wanted(schema, key, fields)
    for field in chosen:
        name = field.name
        if name in parts:
            arrays.append(restore_column(parts[name], field.type, name))
        elif name in held:
            arrays.append(restore_column(raw.column(name), field.type, name))
        else:
            arrays.append(null_column(count, field.type))
    return pa.Table.from_arrays(arrays, schema=pa.schema(chosen))


def _key_parts_apart(raw: pa.Table, key: KeyLayout) -> pa.Table:
    """``raw`` with a composite key's storage column (a struct ``(g,n)``) given as the key
    fields ``g`` and ``n``, where no schema says more (a table never written): the key
    fields are ordinary columns in every table a read returns."""
    if not key.composite or key.column not in raw.column_names:
        return raw
    stored = raw.column(key.column)
    if not pa.types.is_struct(stored.type):
        return raw  # no codec chosen yet: nothing to split
    parts = [pc.struct_field(stored, [i]) for i in range(len(key.fields))]
    rest = [name for name in raw.column_names if name != key.column]
    return pa.Table.from_arrays(
        [*parts, *(raw.column(name) for name in rest)], names=[*key.fields, *rest]
    )


def present_records(
    raw: pa.Table,
    schema: pa.Schema | None,
    key: KeyLayout,
    codec: KeyCodec,
    fields: Sequence[str] | None = None,
) -> list[dict[str, Any]]:
    """Segment rows as records: the key fields and every non-null field, in schema order."""
    if schema is None:
        return arrow_to_records(raw, key_field=key.column, codec=codec, fields=fields)
    count = raw.num_rows
    held = set(raw.column_names)
    keys = codec.to_python(raw.column(key.column))
    records: list[dict[str, Any]] = [{} for _ in range(count)]
    for field in _wanted(schema, key, fields):
        name = field.name
        if name in key.fields:
            index = key.fields.index(name)
            values: list[Any] = [k[index] for k in keys] if key.composite else keys
            if is_naive_timestamp(field.type):  # the codec gives UTC; the field is naive
                values = naive_key_values(raw.column(key.column), index, key.composite)
        elif name in held:
            # Records need no dictionary encoding: the storage type gives the same values.
            column = restore_column(raw.column(name), storage_type(field.type))
            texts = nanos_texts(column)  # nanoseconds as the command line shows them
            column = column if texts is not None else in_micros(column, name)
            if texts is not None:
                values = texts
            elif is_free(field):
                values = column_values(
                    pa.table([column], schema=pa.schema([field.with_type(column.type)])), name
                )
            else:  # UTC times as datetime.UTC, as keys and CBOR give them
                kind = column.type
                utc = pa.types.is_timestamp(kind) and kind.tz in ("UTC", "+00:00")
                values = python_values(column, name, keys.__getitem__, utc=utc)
        else:
            continue
        for record, value in zip(records, values, strict=True):
            if value is not None:
                record[name] = value
    return records


def schema_of_segments(
    schema: pa.Schema | None, segments: Sequence[pa.Table], key: KeyLayout
) -> pa.Schema:
    """``schema`` extended by the fields of segments written elsewhere (``build_table``).

    The new fields are collected in the order first met and appended at once.
    """
    schema = schema if schema is not None else pa.schema([])
    known = set(schema.names)
    added: dict[str, pa.Field] = {}
    for segment in segments:
        for field in segment.schema:
            if field.name == key.column:
                kinds = field.type.fields if key.composite else [field.with_name(key.fields[0])]
                for name, kind in zip(key.fields, kinds, strict=True):
                    if name not in known and name not in added:
                        added[name] = pa.field(name, kind.type)
                continue
            if field.name in known or field.name in added:
                had = added[field.name] if field.name in added else schema.field(field.name)
                if stored_field(had).type != field.type:
                    raise SchemaError(
                        f"field {field.name!r} is {had.type} in the table, but a tablet "
                        f"stores it as {field.type}"
                    )
                continue
            check_declared_type(field.type, field.name, "a tablet built elsewhere")
            added[field.name] = (
                cbor_field(field.name) if is_cbor_field(field) else pa.field(field.name, field.type)
            )
    return _extend(schema, list(added.values()))
