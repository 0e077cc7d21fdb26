"""Whether a transaction's changes leave every table as it was (then a commit makes no version).

Loading the same file twice, or writing records equal to the stored ones,
changes no data: ``commit`` then returns the version it was based on
instead of adding a version (and batches) that change nothing. Only
transactions that did nothing but write and delete records are checked;
the check stops at the first difference, so a real change costs one small
lookup.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

import pyarrow as pa

from merkle.db.ops import Delete, DeleteWhere, Update, Upsert, Write
from merkle.db.tablestate import TableState
from merkle.tablets.keyindex import combine
from merkle.tablets.table import Table

if TYPE_CHECKING:
    from merkle.db.database import Database

__all__ = ["changes_nothing"]

_DATA_OPS = (Write, Delete, Update, Upsert, DeleteWhere)
_CHUNK = 65_536
_FIRST = 32


def changes_nothing(db: Database, tables: dict[str, TableState | None]) -> bool:
    """True when every buffered change of ``db`` writes what its base already holds, and
    the base is still the head."""
    if db._meta_changed or not all(isinstance(op, _DATA_OPS) for op in db._ops):
        return False
    head = db._conn.refs.head(db.name)
    if head is None or head.version != db.version:
        return False  # others committed since: replay decides (a blind delete may win)
    for name, state in tables.items():
        if state is None or not state.changes:
            if state is None:
                return False
            continue
        base = db._base.tables.get(name)
        if base is None:
            return False
        stored = Table.load(db._ts, base)
        if stored.root != state.table.root:
            return False  # the writes chose a codec or extended the schema
        if not _same(stored, state):
            return False
    return True


def _same(table: Table, state: TableState) -> bool:
    codec = table.codec
    if codec is None:
        return False
    content = state.folded()
    deleted = [codec.decode(k) for k in content.deletes.to_pylist()]
    if deleted and table.get(deleted).num_rows:
        return False
    rows = content.upserts
    # A few rows first: a real change almost always shows there, for one small lookup.
    bounds = [0, *range(min(_FIRST, len(rows)), len(rows), _CHUNK), len(rows)]
    for start, stop in itertools.pairwise(bounds):
        if start >= stop:
            continue
        part = rows.slice(start, stop)
        wanted = part.table
        keys = codec.to_python(wanted.column(table.root.key_field))
        found = table.get(keys)
        if found.num_rows != wanted.num_rows:
            return False
        encoded = combine(codec.encode_array(found.column(table.root.key_field)))
        found = found.take(pa.compute.sort_indices(encoded))
        if not _equal(_compact(found), _compact(wanted)):
            return False
    return True


def _compact(table: pa.Table) -> pa.Table:
    """The columns that hold a value, by name (the key column first stays first)."""
    names = [
        table.column_names[0],
        *sorted(n for n in table.column_names[1:] if table.column(n).null_count < table.num_rows),
    ]
    return table.select(names).combine_chunks()


def _equal(a: pa.Table, b: pa.Table) -> bool:
    return a.column_names == b.column_names and all(
        x.type == y.type and x.equals(y) for x, y in zip(a.columns, b.columns, strict=True)
    )
