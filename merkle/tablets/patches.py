"""Field-level patches: changes to some fields of existing records, kept without the records.

``Database.update`` changes a few fields of records it has not read. Writing
whole records would need the current ones first (a page read per family
the records live in); a patch keeps only the key, the values given and,
per field, which rows set it (a set value of null removes the field). A
pending batch holds patches beside its upserts and deletes; they are laid
over the record underneath them when it is read, folded into it when the
batch merges with the older batch that holds it, and written into the
tablets at a flush.

A patch is only stored for a key that has a record when its commit is
made, so every patch has a record under it: in an older batch or in the
merged area.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from merkle.lazy import compute as pc
from merkle.tablets.keys import KeyCodec
from merkle.tablets.rows import SortedRows, empty_keys
from merkle.tablets.segment import concat_segments

__all__ = ["Patches", "apply_patches", "choose", "compose", "insert_field", "no_patches"]


@dataclass(frozen=True, slots=True)
class Patches:
    """Per key (sorted, unique): the fields set and their values.

    ``rows`` holds the key column and one column per patched field (null
    where a row does not set it, or sets it to null); ``masks[field][i]`` says
    whether row ``i`` sets ``field``.
    """

    rows: SortedRows
    masks: Mapping[str, np.ndarray]

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def keys(self) -> pa.Array:
        return self.rows.keys

    def select(self, keep: np.ndarray) -> Patches:
        """The patches of the rows where ``keep`` is true."""
        if bool(keep.all()):
            return self
        mask = pa.array(keep, type=pa.bool_())
        rows = SortedRows(self.rows.table.filter(mask), self.rows.keys.filter(mask))
        return Patches(rows, {name: bits[keep] for name, bits in self.masks.items()})

    def slice(self, start: int, stop: int) -> Patches:
        return Patches(
            self.rows.slice(start, stop), {n: b[start:stop] for n, b in self.masks.items()}
        )

    def project(self, fields: Sequence[str] | None) -> Patches:
        """Only the patched fields among ``fields`` (None: all)."""
        if fields is None:
            return self
        wanted = [name for name in self.masks if name in set(fields)]
        if len(wanted) == len(self.masks):
            return self
        table = self.rows.table
        rows = SortedRows(table.select([table.column_names[0], *wanted]), self.rows.keys)
        return Patches(rows, {name: self.masks[name] for name in wanted})


def no_patches(key_field: str, codec: KeyCodec) -> Patches:
    """An empty set of patches."""
    table = pa.table({key_field: pa.array([], type=codec.arrow_type)})
    return Patches(SortedRows(table, empty_keys(codec)), {})


def compose(newest_first: Sequence[Patches], key_field: str) -> Patches:
    """Several sets of patches as one: per key and field, the newest setting wins."""
    parts = [p for p in newest_first if len(p)]
    if len(parts) <= 1:
        return parts[0] if parts else newest_first[0]
    table = concat_segments([p.rows.table for p in parts], key_field=key_field)
    keys = pa.concat_arrays([p.keys for p in parts])
    rank = np.concatenate([np.full(len(p), r, dtype=np.int32) for r, p in enumerate(parts)])
    names = list(dict.fromkeys(name for p in parts for name in p.masks))
    masks = {
        name: np.concatenate([p.masks.get(name, np.zeros(len(p), dtype=bool)) for p in parts])
        for name in names
    }
    order = pc.sort_indices(
        pa.table({"k": keys, "r": rank}), [("k", "ascending"), ("r", "ascending")]
    )
    at = order.to_numpy()
    keys = keys.take(order)
    n = len(keys)
    first = np.ones(n, dtype=bool)
    if n > 1:
        first[1:] = pc.not_equal(keys.slice(1), keys.slice(0, n - 1)).to_numpy(zero_copy_only=False)
    group = np.cumsum(first) - 1
    heads = np.flatnonzero(first)
    fields = [table.schema.field(key_field)]
    columns = [table.column(key_field).take(pa.array(at[heads]))]
    out_masks = {}
    for name in names:
        sets = np.flatnonzero(masks[name][at])  # sorted positions that set the field
        if len(sets):
            sets = sets[np.r_[True, group[sets][1:] != group[sets][:-1]]]  # newest per key
        source = np.full(len(heads), -1, dtype=np.int64)
        source[group[sets]] = at[sets]
        out_masks[name] = source >= 0
        if name in table.column_names:  # else null wherever set: a removal
            field, column = table.schema.field(name), table.column(name)
        else:
            field = next(p.rows.table.schema.field(name) for p in parts if name in p.masks)
            column = pa.nulls(len(table), field.type)
        fields.append(field)
        columns.append(column.take(pa.array(source, mask=source < 0)))
    rows = pa.Table.from_arrays(columns, schema=pa.schema(fields))
    return Patches(SortedRows(rows, keys.filter(pa.array(first))), out_masks)


def apply_patches(base: SortedRows, patches: Patches, key_field: str) -> SortedRows:
    """``base`` with the patches of its keys laid over (rows without a patch unchanged)."""
    if not len(base) or not len(patches):
        return base
    index = pc.index_in(base.keys, value_set=patches.keys)
    if index.null_count == len(index):
        return base
    values = patches.rows.table.take(index)
    table = base.table
    for name, bits in patches.masks.items():
        sets = pa.array(bits, type=pa.bool_()).take(index).fill_null(False)
        field, new = values.schema.field(name), values.column(name)
        if name not in table.column_names:
            table = insert_field(table, field, choose(sets, new, pa.nulls(len(new), new.type)))
            continue
        old_field, old = table.schema.field(name), table.column(name)
        if old_field.equals(field):
            pass
        elif new.null_count == len(new):  # only removals: the stored type stays
            field, new = old_field, pa.nulls(len(new), old.type)
        elif old.null_count == len(old):
            old = pa.nulls(len(old), new.type)
        else:
            field, old, new = _common(key_field, name, old, new)
        table = table.set_column(table.column_names.index(name), field, choose(sets, new, old))
    return SortedRows(table, base.keys)


def choose(
    sets: pa.Array, new: pa.Array | pa.ChunkedArray, old: pa.Array | pa.ChunkedArray
) -> pa.Array | pa.ChunkedArray:
    """Per row, ``new`` where ``sets`` is true, else ``old`` (two columns of one type).

    ``if_else`` has no kernel for extension types (``pa.uuid()``, ``pa.json_()``, ...),
    nor for nested types holding one, and gives some types as another (``decimal32``,
    ``decimal64`` and a negative-scale decimal come back as ``decimal128``): those are
    picked with ``take`` from both columns laid end to end, which every type supports
    and which keeps the type.
    """
    try:
        chosen = pc.if_else(sets, new, old)
    except pa.ArrowNotImplementedError:
        chosen = None
    if chosen is not None and chosen.type == new.type:
        return chosen
    n = len(new)
    at = np.arange(n, dtype=np.int64)
    picks = np.where(sets.to_numpy(zero_copy_only=False), at, at + n)
    both = pa.chunked_array([*_chunks(new), *_chunks(old)], type=new.type)
    return both.take(pa.array(picks))


def _chunks(column: pa.Array | pa.ChunkedArray) -> list[pa.Array]:
    return list(column.chunks) if isinstance(column, pa.ChunkedArray) else [column]


def _common(
    key_field: str, name: str, old: pa.ChunkedArray, new: pa.ChunkedArray
) -> tuple[pa.Field, pa.ChunkedArray, pa.ChunkedArray]:
    """Two columns of one field in the type that holds both (as batches of one table merge)."""
    keys = pa.array(np.zeros(len(old), dtype=np.int8))
    both = concat_segments(
        [pa.table({key_field: keys, name: old}), pa.table({key_field: keys, name: new})],
        key_field=key_field,
    )
    column = both.column(name)
    return both.schema.field(name), column.slice(0, len(old)), column.slice(len(old))


def insert_field(table: pa.Table, field: pa.Field, column: pa.Array | pa.ChunkedArray) -> pa.Table:
    """A segment-form ``table`` with a new field (the fields after the key stay in name
    order, as segments keep them)."""
    names = table.column_names
    at = 1 + sum(1 for other in names[1:] if other < field.name)
    return table.add_column(at, field, column)
