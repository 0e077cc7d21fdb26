"""Whether a transaction's changes leave every table as it was (then a commit makes no version).

Loading the same file twice, or writing records equal to the stored ones,
changes no data: ``commit`` then returns the version it was based on
instead of adding a version (and batches) that change nothing. Only
transactions that did nothing but write and delete records, or set
metadata (a metadata function whose result is the metadata already there
records nothing; one changed and then changed back is seen here), are
checked; the check stops at the first difference: an upsert of a key that has no
record, or a delete of one that has, is seen on key blocks alone (which the
commit reads anyway), and values are compared a row first, so a real change
costs at most one page read.

"As it was" is what a diff says (:func:`~merkle.tablets.rowequal.rows_equal`):
schema-free values whose stored bytes differ are compared by the diff's rule
before the commit is taken for a change, so that a commit the diff calls
unchanged makes no version. The one difference that rule does not count is a
map's key order (doc/versions.md): re-writing a dict in another order made a
version whose diff was empty.
"""

from __future__ import annotations

import itertools
from dataclasses import replace
from typing import TYPE_CHECKING

import pyarrow as pa

from merkle.db.inputs import same_metadata
from merkle.db.ops import AlterDbMeta, AlterTableMeta, Delete, DeleteWhere, Update, Upsert, Write
from merkle.db.tablestate import TableState
from merkle.tablets.diff import as_bits
from merkle.tablets.keyindex import combine
from merkle.tablets.nodes import TableRoot
from merkle.tablets.patches import Patches, apply_patches
from merkle.tablets.rowequal import rows_equal
from merkle.tablets.rows import SortedRows
from merkle.tablets.segment import is_cbor_field
from merkle.tablets.table import Table

if TYPE_CHECKING:
    from merkle.db.database import Database

__all__ = ["changes_nothing"]

#: The operations whose effect the check can see: records written and deleted, and
#: metadata set (and set back: one that sets what is there already records nothing).
_CHECKED_OPS = (Write, Delete, Update, Upsert, DeleteWhere, AlterDbMeta, AlterTableMeta)
_CHUNK = 65_536
_FIRST = 1  # a real change almost always shows in its first row


def changes_nothing(db: Database, tables: dict[str, TableState | None]) -> bool:
    """True when every buffered change of ``db`` writes what its base already holds, and
    the base is still the head."""
    if db._meta_changed or not all(isinstance(op, _CHECKED_OPS) for op in db._ops):
        return False
    for name, state in tables.items():
        if state is None:
            return False
        if not state.modified:
            continue  # only read
        base = db._base.tables.get(name)
        if base is None:
            return False
        stored = Table.load(db._ts, base)
        if not _same_root(stored.root, state.table.root):
            # The writes chose a codec or extended the schema, or a metadata function
            # left other metadata (or came after writes, which it folded into the root).
            return False
        if not state.changes:
            continue
        # The same root: read through the state's own table, whose key lookups the
        # commit then reuses.
        if not _same(state.table, state):
            return False
    head = db._conn.refs.head(db.name)
    # Others committed since: replay decides (a blind delete may win).
    return head is not None and head.version == db.version


def _same_root(stored: TableRoot, root: TableRoot) -> bool:
    """Whether a table root is the stored one: the same fields, and metadata stored as the
    same bytes (``==`` would take ``{"n": True}`` for ``{"n": 1}``)."""
    if not same_metadata(root.meta, stored.meta):
        return False
    return replace(stored, meta=None) == replace(root, meta=None)


def _same(table: Table, state: TableState) -> bool:
    codec = table.codec
    if codec is None:
        return False
    content = state.folded()
    rows = content.upserts
    # Whether keys exist is known from key blocks: a new key or a deleted record is a change.
    if len(rows) and not table.live(rows.keys.to_pylist()).all():
        return False
    if len(content.deletes) and table.live(content.deletes.to_pylist()).any():
        return False
    if content.patches is not None and not _patches_same(table, content.patches):
        return False
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
        if not _equal(_compact(found), _compact(wanted), table.root.key_field):
            return False
    return True


def _patches_same(table: Table, patches: Patches) -> bool:
    """Whether every patch of a live key sets the values its record already holds
    (a patch of a key without a record does nothing)."""
    live = table.live(patches.keys.to_pylist())
    patches = patches.select(live)
    key_field = table.root.key_field
    codec = table.codec
    assert codec is not None
    bounds = [0, *range(min(_FIRST, len(patches)), len(patches), _CHUNK), len(patches)]
    for start, stop in itertools.pairwise(bounds):
        if start >= stop:
            continue
        part = patches.slice(start, stop)
        found = table.get_encoded(part.keys.to_pylist())
        encoded = combine(codec.encode_array(found.column(key_field)))
        order = pa.compute.sort_indices(encoded)
        current = SortedRows(found.take(order), encoded.take(order))
        patched = apply_patches(current, part, key_field)
        if not _equal(_compact(current.table), _compact(patched.table), key_field):
            return False
    return True


def _compact(table: pa.Table) -> pa.Table:
    """The columns that hold a value, by name (the key column first stays first)."""
    names = [
        table.column_names[0],
        *sorted(n for n in table.column_names[1:] if table.column(n).null_count < table.num_rows),
    ]
    return table.select(names).combine_chunks()


def _equal(a: pa.Table, b: pa.Table, key_field: str) -> bool:
    """Whether two tables of the same keys, in the same order, hold equal records.

    Bit for bit first (the cheap answer, and the usual one for a reload). Arrow's
    ``equals`` compares floats as numbers: -0.0 equals 0.0 (so a commit that only
    changed a sign would be dropped as "no change") and NaN equals no NaN (so
    reloading a file holding one made a new version every time); floats are
    compared as their bits instead, as the stored blocks would be, at any depth
    (:func:`as_bits` reaches into every nested layout: one it left out, a list
    view, a union, an extension type, was compared as numbers and a write of
    -0.0 over 0.0 there was lost). :func:`rows_equal` uses the same rule, so a
    NaN over a NaN with another payload is a change to both. Only schema-free
    (CBOR) columns may differ in bytes and still hold what the diff calls equal (a
    dict written in another order): those are held to the diff's rule
    (:func:`rows_equal`); a typed column that differs is a change.
    """
    if a.column_names != b.column_names:
        return False
    differing = [
        name
        for name, x, y in zip(a.column_names, a.columns, b.columns, strict=True)
        if not (x.type == y.type and as_bits(x).equals(as_bits(y)))
    ]
    if not differing:
        return True
    if a.num_rows != b.num_rows or not all(
        is_cbor_field(a.schema.field(n)) and is_cbor_field(b.schema.field(n)) for n in differing
    ):
        return False
    columns = [key_field, *differing]
    return bool(rows_equal(a.select(columns), b.select(columns), key_field).all())
