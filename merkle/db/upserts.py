"""The rows a conditional ``upsert`` writes (see ``Database.upsert``), merged in Arrow.

An upsert first decides which of the rows given apply, in the order given: a
row whose key has a record (stored, or left by an earlier row of the batch)
is matched, and merged, replaces it or is skipped, only where the condition
holds; a row whose key has none is inserted or skipped (:func:`decided`).

Then it builds what it writes. For a table with a schema no value passes
through Python: Python objects cannot hold every value Arrow does (a
``time64[ns]``, nanoseconds inside a list) and pyarrow rounds some of them
without a word. The rows given (Arrow as it is, records conformed to the
schema) are laid over the stored rows read as Arrow, and a field a row does
not give keeps its stored value (:func:`_laid_over`, :func:`_arrow_upserted`).
Only a ``condition`` sees records as dicts: a value a dict cannot hold
exactly is then a UsageError, never a rounded value.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Container, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from merkle.db.inputs import as_arrow, as_rows, is_arrow_like
from merkle.errors import UsageError
from merkle.lazy import compute as pc
from merkle.tablets.conform import conform_arrow, conform_records, present, stored_field
from merkle.tablets.micros import in_micros
from merkle.tablets.patches import choose
from merkle.tablets.schema import storage_type
from merkle.tablets.table import Table

__all__ = [
    "MATCHED",
    "NOT_MATCHED",
    "Condition",
    "decided",
    "merged_record",
    "normal_key",
    "upserted_records",
]

#: What ``upsert`` does with a record whose key exists: merge the given fields
#: into it, replace it whole, or leave it.
MATCHED = ("update", "replace", "skip")
#: What ``upsert`` does with a record whose key does not exist.
NOT_MATCHED = ("insert", "skip")

Condition = Callable[[dict[str, Any], dict[str, Any]], Any]

#: What to do instead when a condition would see a value a dict cannot hold.
_NO_CONDITION = (
    "upsert such rows without a condition (choose them as Arrow first, e.g. from "
    "get_arrow), which keeps every nanosecond"
)


@dataclass(slots=True)
class Outcome:
    """What an upsert leaves for one key: the rows given that apply, in order, since the
    record was last inserted or replaced, and whether they are laid over the stored
    record (``base``: only merges applied) or make the record alone."""

    base: bool
    rows: list[int] = field(default_factory=list)


def upserted_records(
    table: Table,
    rows: Any,
    matched: str,
    not_matched: str,
    condition: Condition | None,
    name: str = "this table",
) -> list[dict[str, Any]] | pa.Table:
    """What a conditional upsert writes (see ``Database.upsert``): whole records, as dicts
    or as the user's Arrow table; ``name`` names the table in errors."""
    if not isinstance(matched, str) or matched not in MATCHED:
        raise UsageError(f"when_matched must be one of {MATCHED}, got {matched!r}")
    if not isinstance(not_matched, str) or not_matched not in NOT_MATCHED:
        raise UsageError(f"when_not_matched must be one of {NOT_MATCHED}, got {not_matched!r}")
    if condition is not None and not callable(condition):
        raise UsageError("condition must be a function (current record, new record) -> bool")
    if is_arrow_like(rows):
        given = as_arrow(rows, table.root.schema, table.key, name)  # as write converts it
        if isinstance(given, pa.RecordBatch):
            given = pa.Table.from_batches([given])
        if table.root.typed:
            return _arrow_upserted(table, given, matched, not_matched, condition, name)
        # A table from before schemas keeps records as dicts: nanoseconds refused, not rounded.
        what = f"table {name!r} (from before schemas) keeps records as dicts"
        fix = "its records stop at microseconds: copy it into a table with a schema to keep them"
        incoming = python_rows(given, what, fix)
    else:
        listed = as_rows(rows, table.key, name, table.root.schema)
        incoming = [dict(r) for r in listed] if isinstance(listed, list) else listed.to_pylist()
    return _records_upserted(table, incoming, matched, not_matched, condition, name)


def decided(
    normals: Sequence[Any],
    stored: Container[Any],
    matched: str,
    not_matched: str,
    condition: Condition | None,
    new: Callable[[int], dict[str, Any]],
    old: Callable[[Any], dict[str, Any]],
) -> dict[Any, Outcome]:
    """Which rows apply, by normalised key (``normals[i]`` is row ``i``'s).

    Rows apply in order: a later row of a key sees (and its condition tests)
    the record as the earlier rows left it. ``stored`` holds the keys with a
    record; ``new(i)`` is row ``i`` as the condition sees it, ``old(key)`` the
    stored record (both asked for only when a condition is tested).
    """
    out: dict[Any, Outcome] = {}
    # The record as the condition sees it: a dict, or the row that made it (made a dict
    # only if a later row's condition is tested against it).
    seen: dict[Any, dict[str, Any] | int] = {}
    for i, normal in enumerate(normals):
        done = out.get(normal)
        if done is None and normal not in stored:
            if not_matched == "insert":
                out[normal] = Outcome(False, [i])
                seen[normal] = i
            continue
        if matched == "skip":
            continue
        if condition is not None:
            was = seen.get(normal)
            record = old(normal) if was is None else new(was) if isinstance(was, int) else was
            given = new(i)
            if not condition(dict(record), given):
                continue
            seen[normal] = i if matched == "replace" else merged_record(record, given)
        if matched == "replace":
            out[normal] = Outcome(False, [i])
        elif done is None:
            out[normal] = Outcome(True, [i])
        else:
            done.rows.append(i)
    return out


# -- records ---------------------------------------------------------------------


def _records_upserted(
    table: Table,
    incoming: list[dict[str, Any]],
    matched: str,
    not_matched: str,
    condition: Condition | None,
    name: str,
) -> list[dict[str, Any]] | pa.Table:
    """An upsert of records: merged as Arrow where a stored record is their base."""
    key = table.key
    codec = table.codec
    keys = [key.key_of(r) for r in incoming]
    normals = [normal_key(table, k) for k in keys]
    raw = None
    stored: set[Any] = set()
    if codec is not None and keys:
        raw = table.get(keys)
        if raw.num_rows:
            found = codec.to_python(raw.column(table.root.key_field))
            stored = {normal_key(table, k) for k in found}
    records: dict[Any, dict[str, Any]] | None = None

    def old(normal: Any) -> dict[str, Any]:
        nonlocal records
        if records is None:
            found = _condition_records(table, raw, name)
            records = {normal_key(table, key.key_of(r)): r for r in found}
        return records[normal]

    outcomes = decided(normals, stored, matched, not_matched, condition, incoming.__getitem__, old)
    changes = [_fold(incoming, outcome.rows) for outcome in outcomes.values()]
    bases = np.fromiter((o.base for o in outcomes.values()), bool, count=len(outcomes))
    if not table.root.typed:  # no schema: the records are exact as Python values
        return [
            merged_record(old(normal), change) if outcome.base else _present_fields(change)
            for (normal, outcome), change in zip(outcomes.items(), changes, strict=True)
        ]
    if not bases.any() or raw is None:  # nothing to merge with: the records as they are
        return [_present_fields(change) for change in changes]
    return _laid_over(table, raw, changes, bases, name)


def _fold(incoming: list[dict[str, Any]], rows: list[int]) -> dict[str, Any]:
    """The fields the rows give, later rows first (None kept: it removes the field)."""
    change: dict[str, Any] = {}
    for i in rows:
        change.update(incoming[i])
    return change


def _present_fields(record: Mapping[str, Any]) -> dict[str, Any]:
    return {name: value for name, value in record.items() if value is not None}


def _laid_over(
    table: Table, raw: pa.Table, changes: list[dict[str, Any]], bases: np.ndarray, name: str
) -> pa.Table:
    """The records ``changes`` make, as the user's Arrow table: the fields each change
    names (None: removed) laid over its stored record where ``bases`` says so.

    Both sides are conformed to the schema the changes make, so each field is one
    segment type on both; the stored rows are read as Arrow (every value exact).
    """
    key = table.key
    codec = table.codec
    assert codec is not None  # a stored record to lay changes over
    key_field = table.root.key_field
    try:
        done = conform_records(
            changes, table.root.schema, key, codec, new_free=table.root.free_default, partial=True
        )
    except UsageError as exc:  # SchemaError too: named as a write's errors are
        raise type(exc)(f"table {name!r}: {exc}") from None
    schema = done.schema
    rows = done.rows
    stored = conform_arrow(present(raw, schema, key), schema, key, codec, partial=True).rows
    index = pc.index_in(
        codec.encode_array(rows.column(key_field)),
        value_set=codec.encode_array(stored.column(key_field)),
    )
    index = pc.if_else(pa.array(bases), index, pa.scalar(None, index.type))
    aligned = stored.take(index)
    held, kept = set(rows.column_names), set(aligned.column_names)
    count = rows.num_rows
    named = {  # the rows that name each field (a table may have thousands: not them all)
        n: np.fromiter((n in c for c in changes), bool, count=count)
        for n in dict.fromkeys(n for c in changes for n in c)
    }
    names, arrays = [key_field], [rows.column(key_field)]
    for schema_field in schema:
        field_name = schema_field.name
        if field_name in key.fields:
            continue
        kind = stored_field(schema_field).type
        given = named.get(field_name)
        new = rows.column(field_name) if field_name in held else None
        old = aligned.column(field_name) if field_name in kept else None
        if given is None or not given.any():
            column = old
        elif given.all():
            column = new
        else:
            column = choose(  # if_else has no kernel for extension types: choose falls back
                pa.array(given),
                new if new is not None else pa.nulls(count, kind),
                old if old is not None else pa.nulls(count, kind),
            )
        if column is not None:
            names.append(field_name)
            arrays.append(column)
    return present(pa.table(arrays, names=names), schema, key)


# -- Arrow -----------------------------------------------------------------------


def _arrow_upserted(
    table: Table,
    given: pa.Table,
    matched: str,
    not_matched: str,
    condition: Condition | None,
    name: str,
) -> list[dict[str, Any]] | pa.Table:
    """An upsert of Arrow data into a table with a schema: the rows that apply, as given,
    with the stored values of the fields they do not have where a stored record is their
    base. Each row gives every column it has (a null removes the field), so a key's last
    applied row decides every given field."""
    key = table.key
    schema = table.root.schema
    key_field = table.root.key_field
    try:
        keys = conform_arrow(
            given.select([i for i, n in enumerate(given.column_names) if n in key.fields]),
            schema,
            key,
            table.codec,
            partial=True,
        )
    except UsageError as exc:  # SchemaError too
        raise type(exc)(f"table {name!r}: {exc}") from None
    codec = keys.codec
    encoded = codec.encode_array(keys.rows.column(key_field))
    raw = None
    stored_keys = pa.array([], pa.binary())
    if table.codec is not None and len(encoded):
        unique = pc.unique(encoded)
        raw = table.get_encoded(unique.take(pc.sort_indices(unique)).to_pylist())
        if raw.num_rows:
            stored_keys = codec.encode_array(raw.column(key_field))
    if condition is None:
        chosen, bases = _chosen(encoded, stored_keys, matched, not_matched)
    else:
        chosen, bases = _chosen_by(
            table, given, encoded, stored_keys, raw, matched, not_matched, condition, name
        )
    if not len(chosen):
        return []
    out = given if np.array_equal(chosen, np.arange(given.num_rows)) else _taken(given, chosen)
    if raw is None or schema is None or not bases.any():
        return out
    have = set(given.column_names)
    missing = [f.name for f in schema if f.name not in have and f.name not in key.fields]
    if not missing:
        return out
    index = pc.index_in(encoded.take(pa.array(chosen)), value_set=stored_keys)
    index = pc.if_else(pa.array(bases), index, pa.scalar(None, index.type))
    kept = present(raw.take(index), schema, key, missing)
    for field_name in missing:
        out = out.append_column(kept.schema.field(field_name), kept.column(field_name))
    return out


def _chosen(
    encoded: pa.Array, stored: pa.Array, matched: str, not_matched: str
) -> tuple[np.ndarray, np.ndarray]:
    """The rows that apply (:func:`decided` without a condition, vectorised): one per key
    at most, in row order, and whether each is laid over its stored record."""
    positions = pa.array(np.arange(len(encoded), dtype=np.int64))
    groups = (
        pa.table({"k": encoded, "i": positions})
        .group_by("k", use_threads=False)
        .aggregate([("i", "min"), ("i", "max")])
    )
    in_store = pc.is_in(groups.column("k"), value_set=stored).to_numpy(zero_copy_only=False)
    firsts = groups.column("i_min").to_numpy()
    lasts = groups.column("i_max").to_numpy()
    if matched == "skip":  # only a key's first row can apply: an insert
        chosen = firsts[~in_store] if not_matched == "insert" else firsts[:0]
        bases = np.zeros(len(chosen), dtype=bool)
    else:  # every row of a key applies once it has a record: the last one decides
        keep = np.ones(len(lasts), dtype=bool) if not_matched == "insert" else in_store
        chosen = lasts[keep]
        bases = in_store[keep] & (matched == "update")
    order = np.argsort(chosen, kind="stable")
    return chosen[order], bases[order]


def _chosen_by(
    table: Table,
    given: pa.Table,
    encoded: pa.Array,
    stored: pa.Array,
    raw: pa.Table | None,
    matched: str,
    not_matched: str,
    condition: Condition,
    name: str,
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_chosen` with a condition: tested row by row, on rows and records as dicts.

    Only rows that can meet the condition (their key has a record, or an earlier row) are
    made dicts; a value a dict cannot hold exactly is a UsageError (never rounded)."""
    normals = encoded.to_pylist()
    in_store = set(stored.to_pylist())
    repeated = {normal for normal, times in Counter(normals).items() if times > 1}
    needed = [i for i, n in enumerate(normals) if n in in_store or n in repeated]
    rows: dict[int, dict[str, Any]] = {}
    if needed and matched != "skip":
        what = f"table {name!r}: an upsert condition sees the rows given as dicts"
        dicts = python_rows(_taken(given, np.array(needed)), what, _NO_CONDITION)
        rows = dict(zip(needed, dicts, strict=True))
    records: dict[Any, dict[str, Any]] | None = None

    def old(normal: Any) -> dict[str, Any]:
        nonlocal records
        if records is None:
            found = _condition_records(table, raw, name)
            records = dict(zip(stored.to_pylist(), found, strict=True))
        return records[normal]

    outcomes = decided(normals, in_store, matched, not_matched, condition, rows.__getitem__, old)
    chosen = np.array([o.rows[-1] for o in outcomes.values()], dtype=np.int64)
    bases = np.array([o.base for o in outcomes.values()], dtype=bool)
    order = np.argsort(chosen, kind="stable")
    return chosen[order], bases[order]


def _taken(given: pa.Table, rows: np.ndarray) -> pa.Table:
    """Rows of the user's table, each column keeping its type where Arrow can take it back:
    Arrow has no take kernel for views or run-end encoding (Polars' strings are views)."""
    indices = pa.array(rows, pa.int64())
    try:
        return given.take(indices)
    except pa.ArrowNotImplementedError:
        pass
    columns = [_taken_column(given.column(i), indices) for i in range(given.num_columns)]
    return pa.Table.from_arrays(
        columns,
        schema=pa.schema([f.with_type(c.type) for f, c in zip(given.schema, columns, strict=True)]),
    )


def _taken_column(column: pa.ChunkedArray, indices: pa.Array) -> pa.ChunkedArray:
    try:
        return column.take(indices)
    except pa.ArrowNotImplementedError:
        pass
    kind = column.type
    if pa.types.is_run_end_encoded(kind):
        plain = _taken_column(pc.run_end_decode(column), indices)
        try:
            return pc.run_end_encode(plain, run_end_type=kind.run_end_type)
        except pa.ArrowNotImplementedError:
            return plain
    taken = column.cast(storage_type(kind)).take(indices)
    try:
        return taken.cast(kind)
    except pa.ArrowNotImplementedError:
        return taken  # the same values, in the type the table stores them in


# -- records as dicts ------------------------------------------------------------------


def python_rows(given: pa.Table, what: str, fix: str) -> list[dict[str, Any]]:
    """The rows of an Arrow table as dicts (None for null), with nanosecond times as exact
    microseconds: pyarrow would round a time64 and give pandas objects. A value with
    nanoseconds is a UsageError starting with ``what`` (why dicts are made), naming the
    field and the value, and ending with ``fix``."""
    try:
        columns = [in_micros(given.column(i), n, fix=fix) for i, n in enumerate(given.column_names)]
    except UsageError as exc:
        raise UsageError(f"{what}: {exc}") from None
    exact = pa.Table.from_arrays(columns, names=given.column_names)
    rows: list[dict[str, Any]] = exact.to_pylist()
    return rows


def _condition_records(table: Table, raw: pa.Table | None, name: str) -> list[dict[str, Any]]:
    """The stored records ``raw`` as the condition sees them (dicts), in ``raw``'s order."""
    if raw is None:
        return []
    try:
        for column_name, column in zip(raw.column_names, raw.columns, strict=True):
            in_micros(column, column_name, fix=_NO_CONDITION)  # says what to do instead
        return table.records(raw)
    except UsageError as exc:
        raise UsageError(
            f"table {name!r}: an upsert condition sees the stored records as dicts: {exc}"
        ) from None


def normal_key(table: Table, value: Any) -> Any:
    """A key value normalised by the table's codec (hashable: a list becomes a tuple)."""
    codec = table.codec
    if codec is None:
        return value
    normal = codec.normalize(value)
    return tuple(normal) if isinstance(normal, list) else normal


def merged_record(record: Mapping[str, Any], fields: Mapping[str, Any]) -> dict[str, Any]:
    """``record`` with ``fields`` set (a None removes the field)."""
    merged = dict(record)
    for name, value in fields.items():
        if value is None:
            merged.pop(name, None)
        else:
            merged[name] = value
    return merged
