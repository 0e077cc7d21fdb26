"""Partial and conditional writes: ``update``, ``upsert`` (MERGE-like) and ``delete_where``.

Each is computed against the table as the transaction sees it and turned
into whole records to write (or keys to delete). The operation itself (not
its result) is what the transaction records, so a commit that lost a race
re-runs it on the new head (:mod:`merkle.db.ops`): an update changes the
fields of the record as it is *then*, a conditional upsert tests its
condition again, ``delete_where`` deletes what matches then. ``upsert`` is
built in :mod:`merkle.db.upserts` (merged as Arrow) and exported here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from merkle.db.inputs import disagreeing_field, key_parts
from merkle.db.upserts import MATCHED, NOT_MATCHED, upserted_records
from merkle.db.upserts import merged_record as _merged
from merkle.db.upserts import normal_key as _normal
from merkle.errors import SchemaError, UsageError
from merkle.lazy import compute as pc
from merkle.tablets.conform import KeyLayout, conform_arrow, conform_records, stored_field
from merkle.tablets.patches import Patches, choose, insert_field
from merkle.tablets.restore import filtered
from merkle.tablets.rows import SortedRows, sort_rows
from merkle.tablets.schema import is_free, show_value
from merkle.tablets.table import Table

__all__ = [
    "MATCHED",
    "NOT_MATCHED",
    "deleted_keys",
    "update_patches",
    "updated_rows",
    "upserted_records",
]


def update_patches(
    table: Table, changes: Mapping[Any, Mapping[str, Any]]
) -> tuple[Table, Patches] | None:
    """The patches ``{key: {field: value}}`` makes (see :mod:`merkle.tablets.patches`), and
    the table with any new field in its schema; None when there is nothing to do.

    Reads no record: the values are conformed to the table's schema here and
    laid over the records when they are read or flushed; keys without a
    record are dropped at commit. For a table from before schemas (records
    merged one by one) use :func:`updated_rows`.
    """
    changes = _checked_changes(table, changes)
    codec = table.codec
    if codec is None or not changes:
        return None
    key = table.key
    schema = table.root.schema
    column = table.root.key_field
    uniform = _uniform_arrow(table, changes)
    if uniform is not None:  # the same typed fields in every change: columnar
        done = conform_arrow(uniform, schema, key, codec, partial=True)
    else:
        if key.composite:
            partial = [{**_key_record(key, k), **f} for k, f in changes.items()]
        else:
            name = key.fields[0]
            partial = [{name: k, **f} for k, f in changes.items()]
        done = conform_records(
            partial, schema, key, codec, new_free=table.root.free_default, partial=True
        )
    rows = sort_rows(done.rows, column, codec)
    if uniform is not None:
        touched: list[Mapping[str, Any]] = []
    else:
        encoded = codec.encode_array(done.rows.column(column)).to_pylist()
        by_key = dict(zip(encoded, changes.values(), strict=True))
        touched = [by_key[k] for k in rows.keys.to_pylist()]
    stored = rows.table
    masks: dict[str, np.ndarray] = {}
    for name in dict.fromkeys(n for f in changes.values() for n in f):
        if name not in stored.column_names:
            if name not in done.schema.names:
                continue  # never a field and only ever set to None: nothing to do
            field = stored_field(done.schema.field(name))
            stored = insert_field(stored, field, pa.nulls(len(stored), field.type))
        if uniform is not None:
            masks[name] = np.ones(len(stored), dtype=bool)
        else:
            masks[name] = np.fromiter((name in f for f in touched), bool, count=len(touched))
        _check_removal(done.schema, name, stored, masks[name])
    if not masks:
        return None
    stored = stored.select([column, *(n for n in stored.column_names if n in masks)])
    return table.with_schema(done.schema), Patches(SortedRows(stored, rows.keys), masks)


#: Arrow types a change's values may be gathered into directly: Python values of these
#: convert to Arrow as the record path converts them.
_PLAIN = (pa.types.is_integer, pa.types.is_floating, pa.types.is_string, pa.types.is_boolean)
#: The Python types pyarrow infers a column of exactly: after an int, it takes an object
#: it does not know through int() (np.float16(2.5) becomes 2, a UUID its number).
_INFERRED = (int, float, str, np.integer, np.float32, np.bool_, type(None))


def _uniform_arrow(table: Table, changes: Mapping[Any, Mapping[str, Any]]) -> pa.Table | None:
    """The changes as an Arrow table when every change sets the same fields, each typed
    in the schema as a number, string or boolean; else None (the record path)."""
    schema = table.root.schema
    key = table.key
    if key.composite or schema is None:
        return None
    names = tuple(next(iter(changes.values())))
    if not names or any(tuple(f) != names for f in changes.values()):
        return None
    for name in names:
        if name not in schema.names:
            return None
        field = schema.field(name)
        if is_free(field) or not any(test(field.type) for test in _PLAIN):
            return None
    codec = table.codec
    if codec is None:
        return None
    # The codec gathers the keys: pyarrow would cut a pandas Timestamp's nanoseconds.
    columns: dict[str, Any] = {key.fields[0]: codec.to_arrow(list(changes))}
    for name in names:
        values = [f[name] for f in changes.values()]
        if not all(issubclass(kind, _INFERRED) for kind in set(map(type, values))):
            return None  # the record path checks what pyarrow would take through int()
        columns[name] = values
    try:
        return pa.table(columns)
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        return None  # values Arrow cannot gather: the record path names the one at fault


def _check_removal(schema: pa.Schema, name: str, stored: pa.Table, sets: np.ndarray) -> None:
    """A change may not remove (set to None) a field the schema says is not nullable."""
    if name not in schema.names or schema.field(name).nullable:
        return
    removed = np.flatnonzero(sets & stored.column(name).is_null().to_numpy(zero_copy_only=False))
    if len(removed):
        key = stored.column(0)[int(removed[0])].as_py()
        raise SchemaError(
            f"field {name!r} is not nullable: the update of key {show_value(key)} cannot "
            f"remove it (give it a value, or make it nullable with alter_schema)"
        )


def updated_rows(
    table: Table, changes: Mapping[Any, Mapping[str, Any]]
) -> tuple[Table, SortedRows] | None:
    """The whole records ``{key: {field: value}}`` makes (only the given fields change), in
    segment form and key order, and the table with any new field in its schema.

    A key with no record is left alone (an update inserts nothing); a value
    of None removes the field. Vectorised: the changes become Arrow columns
    that replace the current ones where a record names the field.
    """
    changes = _checked_changes(table, changes)
    codec = table.codec
    if codec is None or not changes:
        return None
    encoded = [codec.encode(k) for k in changes]
    current = table.get_encoded(sorted(set(encoded)))
    if not current.num_rows:
        return None
    if not table.root.typed:  # a table from before schemas: merge the records one by one
        by_key = {_normal(table, table.key.key_of(r)): r for r in table.records(current)}
        merged = [_merged(by_key[k], f) for k, f in _normalised(table, changes) if k in by_key]
        prepared, rows = table.prepare_rows(merged)
        return prepared, sort_rows(rows, table.root.key_field, codec)
    key = table.key
    partial = [{**_key_record(key, k), **f} for k, f in changes.items()]
    done = conform_records(
        partial, table.root.schema, key, codec, new_free=table.root.free_default, partial=True
    )
    column = table.root.key_field
    update = sort_rows(done.rows, column, codec)
    old = sort_rows(current, column, codec)
    present = pc.is_in(update.keys, value_set=old.keys)
    new = update.table.filter(present)
    touched_by = dict(zip(encoded, changes.values(), strict=True))
    keys = update.keys.filter(present).to_pylist()
    stored = {f.name: f for f in done.rows.schema}
    out = {name: old.table.column(name) for name in old.table.column_names}
    for name in dict.fromkeys(n for f in changes.values() for n in f):
        field = stored.get(name)
        if field is None:
            if name not in done.schema.names:
                continue  # never a field and only ever set to None: nothing to do
            field = stored_field(done.schema.field(name))
        touched = pa.array([name in touched_by[k] for k in keys], pa.bool_())
        new_column = (
            new.column(name) if name in new.column_names else pa.nulls(len(keys), field.type)
        )
        old_column = out.get(name, pa.nulls(len(keys), field.type))
        out[name] = choose(touched, new_column, old_column)  # keeps the type
    names = [column, *sorted(n for n in out if n != column)]
    fields = [old.table.schema.field(column)] + [
        stored[n] if n in stored else old.table.schema.field(n) for n in names[1:]
    ]
    rows = pa.Table.from_arrays([out[n] for n in names], schema=pa.schema(fields))
    return table.with_schema(done.schema), SortedRows(rows, old.keys)


def _key_record(key: KeyLayout, value: Any) -> dict[str, Any]:
    if key.composite:
        return dict(zip(key.fields, value, strict=True))
    return {key.fields[0]: value}


def _normalised(
    table: Table, changes: Mapping[Any, Mapping[str, Any]]
) -> list[tuple[Any, Mapping[str, Any]]]:
    return [(_normal(table, k), f) for k, f in changes.items()]


def _checked_changes(table: Table, changes: Any) -> Mapping[Any, Mapping[str, Any]]:
    """``changes`` checked, without the key fields a change names with its own key's value.

    A change may name a key field (as ``write``'s key -> dict form may) when the value
    agrees with the key it is under: it changes nothing and is left out. A value that
    differs would move the record, which an update cannot: a UsageError saying so."""
    if not isinstance(changes, Mapping):
        raise UsageError(
            f"update takes a mapping key -> {{field: value}}, got {type(changes).__name__}"
        )
    key = table.key
    out: dict[Any, Mapping[str, Any]] = {}
    dropped = False
    for value, fields in changes.items():
        if not isinstance(fields, Mapping):
            raise UsageError(f"update of key {value!r}: the changes must be a dict of fields")
        parts = key_parts(key, value, f"update of key {value!r}")
        name = disagreeing_field(parts, fields)
        if name is not None:
            raise UsageError(
                f"update of key {value!r} sets the key field {name!r} to {fields[name]!r}, "
                "another key: an update cannot move a record; delete it and write it under "
                "its new key instead"
            )
        if any(name in fields for name in parts):
            fields = {name: item for name, item in fields.items() if name not in parts}
            dropped = True
        out[value] = fields
    return out if dropped else changes


def deleted_keys(table: Table, predicate: Any) -> list[Any]:
    """The keys of the records ``predicate`` holds for: a ``pyarrow.compute.Expression`` over
    the table's columns, or a function of one record."""
    if not isinstance(predicate, pc.Expression) and not callable(predicate):
        raise UsageError(
            "delete_where takes a pyarrow.compute.Expression (pc.field('qty') == 0) or a "
            f"function record -> bool, got {type(predicate).__name__}"
        )
    codec = table.codec
    if codec is None:
        return []
    keys: list[Any] = []
    key_field = table.root.key_field
    for raw in table.scan():
        if isinstance(predicate, pc.Expression):
            present = table.present(raw)
            row = _row_column(present.column_names)
            rows = present.append_column(row, pa.array(range(raw.num_rows), pa.int64()))
            try:
                chosen = filtered(rows, predicate).column(row)
            except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
                # Arrow lists the columns it had: not the row numbers added here.
                why = "\n".join(line for line in str(exc).splitlines() if row not in line)
                raise UsageError(
                    f"delete_where cannot evaluate {predicate} on the table's columns "
                    f"{', '.join(present.column_names)}: {why}"
                ) from None
            keys += codec.to_python(raw.column(key_field).take(chosen))
        else:
            mask = pa.array([bool(predicate(r)) for r in table.records(raw)], pa.bool_())
            keys += codec.to_python(raw.column(key_field).filter(mask))
    return keys


def _row_column(names: list[str]) -> str:
    """A name for the row numbers ``delete_where`` adds that no column of the table has
    (a field may be named anything, "\\x00row" too): the filter must find one column."""
    taken = set(names)
    row = "\x00row"
    while row in taken:
        row += "\x00"
    return row
