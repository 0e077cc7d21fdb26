"""The key-by-key merge of one table's rows: what to take from theirs, and the conflicts.

Each side's changes since the merge base come from the tables' diff; a key
changed on one side only takes that change, changed the same way on both is
taken once, and changed differently is a conflict (see :mod:`merkle.db.merge`
for the rules of a whole database merge).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from merkle.lazy import compute as pc
from merkle.tablets.conform import KeyLayout
from merkle.tablets.diff import diff_tables, rows_equal
from merkle.tablets.keyindex import combine
from merkle.tablets.keytimes import key_field_types, record_keys, typed_key_column
from merkle.tablets.rows import SortedRows
from merkle.tablets.segment import concat_segments
from merkle.tablets.table import Table

__all__ = ["TableMerge", "key_fields"]


@dataclass
class _Changes:
    """One side's changes to a table since the base: new rows, deleted keys, base rows."""

    upserts: SortedRows
    deletes: pa.Array
    base: SortedRows  # the base's records of updated and deleted keys


def _sorted(parts: list[SortedRows], key_field: str, empty: SortedRows) -> SortedRows:
    parts = [p for p in parts if len(p)]
    if not parts:
        return empty
    table = concat_segments([p.table for p in parts], key_field=key_field)
    keys = pa.concat_arrays([combine(p.keys) for p in parts])
    order = pc.sort_indices(keys)
    return SortedRows(table.take(order), keys.take(order))


def _changes(base: Table | None, side: Table, empty: SortedRows) -> _Changes:
    key_field = side.root.key_field
    ups, dels, olds = [], [], []
    for change in diff_tables(base, side):
        ups += [change.inserted, change.updated_new]
        olds += [change.updated_old, change.deleted]
        dels.append(combine(change.deleted.keys))
    deletes = pa.concat_arrays(dels) if dels else empty.keys
    return _Changes(_sorted(ups, key_field, empty), deletes, _sorted(olds, key_field, empty))


def _empty_rows(table: Table) -> SortedRows:
    spec = table.spec
    rows = pa.table({spec.key_field: pa.array([], type=spec.codec.arrow_type)})
    return SortedRows(rows, spec.codec.encode_array(rows.column(spec.key_field)))


def _take(rows: SortedRows, mask: np.ndarray) -> SortedRows:
    keep = pa.array(mask, type=pa.bool_())
    return SortedRows(rows.table.filter(keep), rows.keys.filter(keep))


def _rows_at(rows: SortedRows, keys: pa.Array) -> tuple[pa.Table, np.ndarray]:
    """``rows`` aligned to ``keys`` (null rows where absent) and where they are present."""
    index = pc.index_in(keys, value_set=rows.keys)
    present = index.is_valid().to_numpy(zero_copy_only=False)
    return rows.table.take(index), present


def _struct(rows: pa.Table, present: np.ndarray, key_field: str) -> pa.Array:
    fields = [f for f in rows.schema if f.name != key_field]
    mask = pa.array(~present, type=pa.bool_())
    if not fields:
        return pa.array([{} if p else None for p in present], type=pa.struct([]))
    return pa.StructArray.from_arrays(
        [rows.column(f.name).combine_chunks() for f in fields], fields=fields, mask=mask
    )


class TableMerge:
    """The key-by-key merge of one table: what to take from theirs, and the conflicts."""

    def __init__(self, base: Table | None, ours: Table, theirs: Table) -> None:
        self.key_field = ours.root.key_field
        self.key_names = ours.root.key_fields
        # The key fields' types (naive or zoned timestamps): from a side that holds them.
        schema = ours.root.schema if ours.root.key_codec else theirs.root.schema
        self.key_types = key_field_types(self.key_names, schema)
        empty = _empty_rows(ours if ours.root.key_codec else theirs)
        self.ours = _changes(base, ours, empty)
        self.theirs = _changes(base, theirs, empty)
        o, t = self.ours, self.theirs
        o_keys = o.upserts.keys
        # Theirs' upserts: taken where ours left the key alone, skipped where ours made the
        # same record, a conflict otherwise.
        at = pc.index_in(t.upserts.keys, value_set=o_keys)
        up_in_ours = at.is_valid().to_numpy(zero_copy_only=False)
        up_deleted = pc.is_in(t.upserts.keys, value_set=o.deletes).to_numpy(zero_copy_only=False)
        same = np.zeros(len(t.upserts), dtype=bool)
        if up_in_ours.any():
            where = np.flatnonzero(up_in_ours)
            mine = o.upserts.table.take(at.filter(pa.array(up_in_ours)))
            theirs_rows = t.upserts.table.take(pa.array(where, type=pa.int64()))
            same[where] = rows_equal(mine, theirs_rows, self.key_field)
        self.take_upserts = _take(t.upserts, ~up_in_ours & ~up_deleted)
        up_conflict = (up_in_ours & ~same) | up_deleted
        # Theirs' deletes: taken unless ours wrote the key (both deleting is no conflict).
        del_written = pc.is_in(t.deletes, value_set=o_keys).to_numpy(zero_copy_only=False)
        del_deleted = pc.is_in(t.deletes, value_set=o.deletes).to_numpy(zero_copy_only=False)
        self.take_deletes = t.deletes.filter(pa.array(~del_written & ~del_deleted))
        conflict_keys = pa.concat_arrays(
            [t.upserts.keys.filter(pa.array(up_conflict)), t.deletes.filter(pa.array(del_written))]
        )
        self.conflict_keys = conflict_keys.take(pc.sort_indices(conflict_keys))

    def theirs_win(self) -> tuple[SortedRows, pa.Array]:
        """The upserts and deletes to take when theirs wins every conflict: theirs' record
        of each conflicting key, or its delete, besides what is taken anyway."""
        keys, theirs = self.conflict_keys, self.theirs.upserts
        extra = _take(theirs, pc.is_in(theirs.keys, value_set=keys).to_numpy(zero_copy_only=False))
        upserts = _sorted([self.take_upserts, extra], self.key_field, self.take_upserts)
        gone = keys.filter(pc.invert(pc.is_in(keys, value_set=theirs.keys)))
        return upserts, pa.concat_arrays([self.take_deletes, gone])

    def conflict_table(self) -> pa.Table:
        """The conflicts as Arrow: ``key``, ``base``, ``ours``, ``theirs``."""
        keys = self.conflict_keys
        o, t = self.ours, self.theirs
        everything = _unique(
            _sorted([t.upserts, o.upserts, o.base, t.base], self.key_field, o.base)
        )
        native, _ = _rows_at(everything, keys)
        columns: dict[str, Any] = {"key": native.column(self.key_field).combine_chunks()}
        base = _unique(_sorted([o.base, t.base], self.key_field, o.base))
        for name, rows in (("base", base), ("ours", o.upserts), ("theirs", t.upserts)):
            aligned, present = _rows_at(rows, keys)
            columns[name] = _struct(aligned, present, self.key_field)
        return pa.table(columns)

    def named_conflicts(self) -> pa.Table:
        """:meth:`conflict_table` with the key as records and ``to_arrow`` show it: a
        composite key a struct of its fields under their names (stored, they are named
        by position), each timestamp key field of its type (naive or zoned, its unit)."""
        table = self.conflict_table()
        key = table.column("key").combine_chunks()
        names = list(self.key_names)
        if len(names) > 1 and pa.types.is_struct(key.type) and key.type.num_fields == len(names):
            key = pa.StructArray.from_arrays(key.flatten(), names=names)
        return table.set_column(0, "key", typed_key_column(key, self.key_types))

    def conflict_records(
        self, base: Table | None, ours: Table, theirs: Table
    ) -> list[dict[str, Any]]:
        """The conflicts as dicts ``{base, ours, theirs, key}`` for a callable resolver.

        Each side's record is as ``scan`` of that side shows it (through its table's
        schema: a composite key's fields each a field, a naive timestamp key naive, a
        zoned field in its zone), and ``key`` as those records hold it."""
        keyed = ours if ours.root.key_codec else theirs
        codec = keyed.codec
        assert codec is not None
        table = self.conflict_table()
        key = table.column("key")
        keys = record_keys(key, codec, self.key_types)
        out: list[dict[str, Any]] = [{} for _ in keys]
        for side, owner in (("base", base), ("ours", ours), ("theirs", theirs)):
            struct = table.column(side).combine_chunks()
            assert isinstance(struct, pa.StructArray)
            held = struct.is_valid()
            rows = pa.table(
                [key.filter(held), *(struct.field(f.name).filter(held) for f in struct.type)],
                schema=pa.schema([pa.field(self.key_field, key.type), *list(struct.type)]),
            )
            reader = owner if owner is not None and owner.codec is not None else keyed
            records = iter(self._side_records(reader, rows))
            for rec, present in zip(out, held.to_pylist(), strict=True):
                rec[side] = next(records) if present else None
        for rec, value in zip(out, keys, strict=True):
            rec["key"] = value
        return out

    def _side_records(self, table: Table, rows: pa.Table) -> list[dict[str, Any]]:
        """One side's stored rows as records of ``table``, a composite key's fields each a
        field (a table without a schema gives its stored key column: split here)."""
        records = table.records(rows)
        if len(self.key_names) == 1:
            return records
        return [
            {**key_fields(table.key, r.pop(self.key_field)), **r} if self.key_field in r else r
            for r in records
        ]


def key_fields(layout: KeyLayout, key: Any) -> dict[str, Any]:
    """A key value as the record fields that hold it (a tuple's parts for a composite key)."""
    return (
        dict(zip(layout.fields, key, strict=True)) if layout.composite else {layout.fields[0]: key}
    )


def _unique(rows: SortedRows) -> SortedRows:
    n = len(rows)
    if n < 2:
        return rows
    keys = combine(rows.keys)
    keep = pa.concat_arrays([pa.array([True]), pc.not_equal(keys.slice(1), keys.slice(0, n - 1))])
    return SortedRows(rows.table.filter(keep), keys.filter(keep))
