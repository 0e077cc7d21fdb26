"""One version of one table: write, delete, flush, point reads and range scans.

A :class:`Table` is an immutable value: every change returns a new one whose
new blocks are already in the block store (the caller decides whether a
version that names them is ever committed). It needs no refs and no
connection, only a :class:`TableStore`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from merkle.blocks.cid import CID
from merkle.errors import IntegrityError, SchemaError, UsageError
from merkle.tablets.batch import (
    BatchContent,
    Overlay,
    delete_keys,
    fold,
    load_batch,
    upsert_keys,
    write_batch,
)
from merkle.tablets.conform import (
    KeyLayout,
    codec_for_types,
    conform_arrow,
    conform_records,
    present,
    present_records,
    schema_of_segments,
)
from merkle.tablets.fieldids import FieldId, carry_identities, with_identities
from merkle.tablets.keychecks import check_codec_fits, check_tablet_keys
from merkle.tablets.keys import KeyCodec, infer_key_codec, infer_key_codec_arrow
from merkle.tablets.keys import key_codec as parse_key_codec
from merkle.tablets.nodes import ChildRef, Limits, TableRoot
from merkle.tablets.patches import Patches
from merkle.tablets.reads import TableReads
from merkle.tablets.rows import SortedRows, empty_keys, sort_rows
from merkle.tablets.schema import key_schema_fields
from merkle.tablets.segment import (
    arrow_to_records,
    check_rows,
    normalize_arrow,
    records_to_arrow,
)
from merkle.tablets.settings import check_families, check_limits, unreversed
from merkle.tablets.spec import family_blocks
from merkle.tablets.store import TableStore
from merkle.tablets.tiers import merge_tier
from merkle.tablets.tree import TableSpec, Tree, node_ref

if TYPE_CHECKING:
    from merkle.tablets.evolve import SchemaChange

__all__ = ["Table", "check_families", "check_limits"]  # the checks live in .settings


class Table(TableReads):
    """An immutable table version over a :class:`TableStore`."""

    def __init__(self, ts: TableStore, root: TableRoot) -> None:
        self.ts = ts
        self.root = root
        self._data: ChildRef | None = None
        self._data_loaded = False
        self._overlay: Overlay | None = None
        self._in_merged_known: dict[bytes, bool] = {}  # keys looked up in the merged area

    # -- construction ------------------------------------------------------------

    @classmethod
    def new(
        cls,
        ts: TableStore,
        *,
        key_field: str | Sequence[str],
        key_codec: str | None = None,
        families: Mapping[str, Any] | None = None,
        limits: Limits | None = None,
        meta: Any = None,
        uid: str = "",
        typed: bool = False,
        schema: pa.Schema | None = None,
        schema_free: bool = False,
    ) -> Table:
        """An empty table (nothing is stored until :meth:`save`).

        A ``typed`` table keeps a schema: ``schema`` as declared, or inferred
        from the first write; a key of several fields needs ``typed``. With
        ``schema_free``, every field not declared in ``schema`` is schema-free.
        """
        if isinstance(key_field, str) and not key_field:
            raise UsageError(f"the key field must be a non-empty string, got {key_field!r}")
        layout = KeyLayout.of(key_field)
        if layout.composite and not typed:
            raise UsageError("a key of several fields needs a typed table")
        spec = parse_key_codec(key_codec).spec if key_codec is not None else None
        key_types: list[pa.DataType] = []
        if schema is not None and set(layout.fields) <= set(schema.names):
            key_types = [field.type for field in key_schema_fields(schema, layout.fields)]
        if any(pa.types.is_null(kind) for kind in key_types):
            key_types = []  # not typed yet (a schema of free fields only): the first write does
        if key_types:
            declared = codec_for_types(key_types)
            if spec is None:
                spec = declared.spec
        if spec is not None and layout.composite:
            arity = len(getattr(unreversed(parse_key_codec(spec)), "components", ()))
            if arity != len(layout.fields):
                raise UsageError(
                    f"key codec {spec!r} does not fit the key {list(layout.fields)}: "
                    f"use tuple(...) with one codec per key field"
                )
        if spec is not None and key_types:  # a given codec must store the declared key types
            check_codec_fits(layout.fields, key_types, spec)
        root = TableRoot(
            key_field=layout.column,
            key_codec=spec,
            families=check_families(families, layout.column, layout.fields),
            limits=limits or Limits(),
            data=None,
            pending=(),
            count=0,
            size=0,
            meta=meta,
            uid=uid,
            key_fields=layout.fields,
            typed=typed,
            schema=schema,
            free_default=schema_free,
        )
        return cls(ts, root)

    @classmethod
    def load(cls, ts: TableStore, cid: CID) -> Table:
        return cls(ts, ts.table(cid))

    def save(self) -> CID:
        """Store the root node; its CID names this table version."""
        return self.ts.put_node(self.root.to_node())

    def _with(self, *, renamed: Mapping[str, str] | None = None, **changes: Any) -> Table:
        """This table with root fields changed; a changed schema continues the field
        identities (``renamed``: old name -> new, see :mod:`merkle.tablets.fieldids`)."""
        root = replace(self.root, **changes)
        if "schema" in changes:
            root = carry_identities(self.root, root, renamed)
        return Table(self.ts, root)

    # -- properties ----------------------------------------------------------------

    @property
    def codec(self) -> KeyCodec | None:
        """The key codec, or None while the table is empty and no codec was given."""
        spec = self.root.key_codec
        return parse_key_codec(spec) if spec else None

    @property
    def spec(self) -> TableSpec:
        codec = self.codec
        if codec is None:
            raise UsageError("the table has no key codec yet: write a record first")
        return TableSpec(self.root.key_field, codec, self.root.families, self.root.limits)

    @property
    def count(self) -> int:
        return self.root.count

    @property
    def size(self) -> int:
        return self.root.size

    def patch_stats(self) -> dict[str, int]:
        """Records and bytes held in pending batches."""
        batches = [self.ts.batch(cid) for cid in self.root.pending]
        return {"count": sum(b.count for b in batches), "size": sum(b.size for b in batches)}

    def data_ref(self) -> ChildRef | None:
        """The root of the merged area (None when every record is still pending)."""
        if not self._data_loaded:
            self._data = node_ref(self.ts, self.root.data) if self.root.data is not None else None
            self._data_loaded = True
        return self._data

    def overlay(self) -> Overlay:
        """All pending batches folded into one view, patches resolved against this
        version's merged area (the fold is cached on this value; the view is new
        each call: see :meth:`Overlay.resolving`)."""
        if self._overlay is None:
            spec = self.spec
            self._overlay = Overlay.load(self.ts, self.root.pending, spec.key_field, spec.codec)
        return self._overlay.resolving(self.resolve_patches)

    def _tree(self) -> Tree:
        return Tree(self.ts, self.spec)

    @property
    def key(self) -> KeyLayout:
        """The key fields and the segment column that holds them."""
        return KeyLayout(self.root.key_fields)

    @property
    def schema(self) -> pa.Schema | None:
        """The table's schema (None for a table written before schemas, or not yet written)."""
        return self.root.schema

    # -- reading through the schema ------------------------------------------------

    def present(self, raw: pa.Table, fields: Sequence[str] | None = None) -> pa.Table:
        """Rows as read from segments, as the user's table (the schema's order and types)."""
        if not self.root.typed:
            return raw
        return present(raw, self.root.schema, self.key, fields)

    def records(self, raw: pa.Table, fields: Sequence[str] | None = None) -> list[dict[str, Any]]:
        """Rows as read from segments, as records (dicts holding the key fields)."""
        codec = self.codec
        if codec is None or not raw.num_rows:
            return []
        if not self.root.typed:
            return arrow_to_records(raw, key_field=self.root.key_field, codec=codec, fields=fields)
        try:
            return present_records(raw, self.root.schema, self.key, codec, fields)
        except UnicodeDecodeError as exc:  # rows are checked when written: an older writer's
            raise IntegrityError(
                f"a segment holds strings that are not UTF-8 ({exc}); merkle.tablets.validate "
                "names the block, and to_arrow still reads its bytes"
            ) from None

    # -- writes --------------------------------------------------------------------

    def with_codec_for(self, sample_key: Any = None, dtype: pa.DataType | None = None) -> Table:
        """This table with its key codec inferred from a first key (no-op when it has one)."""
        if self.root.key_codec:
            return self
        codec = infer_key_codec_arrow(dtype) if dtype is not None else infer_key_codec(sample_key)
        return self._with(key_codec=codec.spec)

    def prepare_rows(
        self, rows: pa.Table | pa.RecordBatch | Sequence[Mapping[str, Any]]
    ) -> tuple[Table, pa.Table]:
        """Validated Arrow rows for writing, and this table with its key codec chosen.

        Arrow input is checked and normalised column-wise; records (dicts that
        hold the key field) are converted schema-free. A table without a codec
        takes it from the first key (or the key column's type).
        """
        key_field = self.root.key_field
        if isinstance(rows, (pa.Table, pa.RecordBatch)):
            check_rows(rows if isinstance(rows, pa.Table) else pa.Table.from_batches([rows]))
        if self.root.typed:
            return self._conform(rows)
        if isinstance(rows, (pa.Table, pa.RecordBatch)):
            if key_field not in rows.schema.names:
                raise UsageError(
                    f"the Arrow data has no column {key_field!r}, the key field of this table"
                )
            table = self.with_codec_for(dtype=rows.schema.field(key_field).type)
            return table, normalize_arrow(rows, key_field=key_field, codec=table.spec.codec)
        records = list(rows)
        if not records:
            return self, pa.table({})
        first = records[0]
        if not isinstance(first, Mapping) or first.get(key_field) is None:
            raise UsageError(f"every record must be a dict holding the key field {key_field!r}")
        table = self.with_codec_for(first[key_field])
        return table, records_to_arrow(records, key_field=key_field, codec=table.spec.codec)

    def _conform(
        self, rows: pa.Table | pa.RecordBatch | Sequence[Mapping[str, Any]]
    ) -> tuple[Table, pa.Table]:
        if isinstance(rows, pa.RecordBatch):
            rows = pa.Table.from_batches([rows])
        if isinstance(rows, pa.Table):
            done = conform_arrow(
                rows, self.root.schema, self.key, self.codec, new_free=self.root.free_default
            )
        else:
            records = list(rows)
            if not records:
                return self, pa.table({})
            done = conform_records(
                records, self.root.schema, self.key, self.codec, new_free=self.root.free_default
            )
        table = self
        if done.codec.spec != self.root.key_codec or done.schema != self.root.schema:
            table = self._with(key_codec=done.codec.spec, schema=done.schema)
            table._data, table._data_loaded = self._data, self._data_loaded
        return table, done.rows

    def with_identities(self, ids: Mapping[str, FieldId], epoch: int) -> Table:
        """This table whose fields named in ``ids`` take those identities, its schema
        epoch at least ``epoch`` (a merge keeps the identities of the fields it brings)."""
        return Table(self.ts, with_identities(self.root, ids, epoch))

    def with_schema(self, schema: pa.Schema) -> Table:
        """This table with another schema (the caller keeps stored data consistent with it)."""
        return self._with(schema=schema)

    def write(
        self, rows: pa.Table | pa.RecordBatch | Sequence[Mapping[str, Any]], version: int
    ) -> Table:
        """Upsert whole records (replacing any record with the same key)."""
        table, arrow = self.prepare_rows(rows)
        if not arrow.num_rows:
            return self
        key_field, spec = self.root.key_field, table.spec
        upserts = sort_rows(arrow, key_field, spec.codec)
        return table.apply_changes(upserts, empty_keys(spec.codec), version)

    def delete(self, keys: Sequence[Any], version: int) -> Table:
        """Remove records by key; keys that are not present are fine."""
        codec = self.codec
        keys = list(keys)
        if codec is None or not keys:
            return self
        encoded = codec.encode_unique(keys)
        spec = self.spec
        deletes = pa.array(encoded, type=empty_keys(codec).type)
        empty = pa.table({spec.key_field: pa.array([], type=codec.arrow_type)})
        return self.apply_changes(SortedRows(empty, empty_keys(codec)), deletes, version)

    def apply_changes(
        self,
        upserts: SortedRows,
        deletes: pa.Array,
        version: int,
        patches: Patches | None = None,
    ) -> Table:
        """Write sorted, unique ``upserts``, remove ``deletes`` (encoded keys) and lay
        ``patches`` (keys disjoint from both) over existing records, as ``version``.

        Patches of keys without a record are dropped (an update inserts
        nothing). Small changes become a pending batch; a change above the
        flush threshold (:meth:`Limits.flush_above`) goes straight into the
        tablets together with everything pending.
        """
        if patches is not None and len(patches):
            patch_keys = patches.keys.to_pylist()
            live = self._live_before(patch_keys, self._in_merged(patch_keys))
            patches = patches.select(live) if live.any() else None
        else:
            patches = None
        n = len(upserts) + len(deletes) + (len(patches) if patches is not None else 0)
        if not n:
            return self
        spec, ts, pending = self.spec, self.ts, self.root.pending
        if isinstance(version, bool) or not isinstance(version, int) or version < 0:
            raise UsageError(f"a batch version must be a non-negative integer, got {version!r}")
        if pending and version < ts.batch(pending[0]).upper:
            # The table came from another database's lineage (a clone), whose version
            # numbers run ahead of this one's: keep the tags increasing within the table.
            version = ts.batch(pending[0]).upper + 1
        tree = self._tree()
        data = self.data_ref()
        limit = spec.limits.flush_above(data.count if data is not None else 0)
        if n > limit:
            # Too big to stay pending: fold everything into the tablets at once.
            contents = [
                BatchContent(
                    upserts,
                    np.zeros(len(upserts), bool),
                    deletes,
                    np.zeros(len(deletes), bool),
                    patches,
                ),
                *(load_batch(ts, cid, spec.key_field, spec.codec) for cid in pending),
            ]
            folded = self.resolve_patches(fold(contents, spec.key_field, spec.codec))
            return self._rebuilt(tree.apply(data, folded.upserts, folded.deletes))
        up_keys, del_keys = upserts.keys.to_pylist(), deletes.to_pylist()
        up_merged, del_merged = self._in_merged(up_keys), self._in_merged(del_keys)
        content = BatchContent(upserts, up_merged, deletes, del_merged, patches)
        # The new count, from whether each key was live before this change: pending
        # batches newest first decide, else the merged area (no overlay fold needed).
        # A patch changes no count.
        was_up = self._live_before(up_keys, up_merged)
        was_del = self._live_before(del_keys, del_merged)
        count = self.count + int((~was_up).sum()) - int(was_del.sum())
        batch = write_batch(ts, content, version, version)
        merged = merge_tier(ts, [batch, *pending], spec.key_field, spec.codec)
        table = self._with_pending(data, tuple(merged), count)
        if sum(ts.batch(cid).count for cid in merged) > limit:
            return table.flush()
        return table

    def live(self, keys: Sequence[bytes]) -> np.ndarray:
        """Whether each sorted, unique encoded key has a record in this version.

        Reads the key blocks of the merged area and the pending batches' key
        indexes, never a row.
        """
        if not keys:
            return np.zeros(0, dtype=bool)
        return self._live_before(keys, self._in_merged(keys))

    def _in_merged(self, keys: Sequence[bytes]) -> np.ndarray:
        """Whether each sorted, unique key is in the merged area (remembered on this value:
        a commit asks for the keys its no-change check asked for)."""
        known = self._in_merged_known
        todo = [key for key in keys if key not in known]
        if todo:
            known.update(zip(todo, self._tree().exists(self.data_ref(), todo), strict=True))
        return np.fromiter((known[key] for key in keys), dtype=bool, count=len(keys))

    def _live_before(self, keys: Sequence[bytes], in_merged: np.ndarray) -> np.ndarray:
        """Whether each key (sorted) had a record before the change being applied.

        The newest pending batch that holds a key decides (an upsert: live, a
        delete: gone); keys no batch holds are live if the merged area has them.
        Each batch is searched through its cached key index: no overlay fold.
        """
        live = in_merged.copy()
        undecided = np.ones(len(keys), dtype=bool)
        key_field, codec = self.root.key_field, self.spec.codec
        for cid in self.root.pending:
            where = np.flatnonzero(undecided)
            if not len(where):
                break
            batch = self.ts.batch(cid)
            todo = [keys[int(i)] for i in where]
            if batch.upserts is not None:
                hit = where[np.array(upsert_keys(self.ts, batch, key_field, codec).find(todo)) >= 0]
                live[hit] = True
                undecided[hit] = False
            if batch.deletes:
                hit = where[np.array(delete_keys(self.ts, cid, batch).find(todo)) >= 0]
                live[hit] = False
                undecided[hit] = False
        return live

    def _with_pending(
        self, data: ChildRef | None, pending: tuple[CID, ...], count: int | None = None
    ) -> Table:
        """This table with the given merged area and pending batches.

        ``count`` is the exact record count when the caller knows it; otherwise
        it comes from folding the pending batches (the overlay).
        """
        ts = self.ts
        base_count = data.count if data is not None else 0
        base_size = data.size if data is not None else 0
        overlay = None
        if count is None:
            spec = self.spec
            overlay = Overlay.load(ts, pending, spec.key_field, spec.codec)
            count = base_count + overlay.delta()
        table = self._with(
            data=data.cid if data is not None else None,
            pending=pending,
            count=count,
            size=base_size + sum(ts.batch(cid).size for cid in pending),
        )
        table._data, table._data_loaded = data, True
        if overlay is not None and not overlay.has_patches:
            table._overlay = overlay  # else a read must lay the patches over their records
        return table

    def _rebuilt(self, data: ChildRef | None) -> Table:
        return self._with_pending(data, (), data.count if data is not None else 0)

    def with_merged(self, data: ChildRef | None) -> Table:
        """This table with ``data`` as its whole merged area and nothing pending.

        For trees built outside this class (bulk writers, :mod:`merkle.tablets.bulk`):
        every pending change must already be in ``data``.
        """
        return self._rebuilt(data)

    def flush(self) -> Table:
        """Fold every pending batch into the tablets (a no-op when nothing is pending)."""
        if not self.root.pending:
            return self
        content = self.overlay().content
        return self._rebuilt(self._tree().apply(self.data_ref(), content.upserts, content.deletes))

    def with_meta(self, meta: Any) -> Table:
        return self._with(meta=meta)

    def with_families(self, families: Mapping[str, Any]) -> Table:
        """Rewrite every tablet with new field families."""
        checked = check_families(families, self.root.key_field, self.root.key_fields)
        flushed = self.flush()
        retyped = flushed._with(families=checked)
        if flushed.root.data is None or not self.root.key_codec:
            return retyped
        old, new = flushed._tree(), retyped._tree()
        leaves = list(old.leaves(flushed.data_ref()))
        pieces = self.ts.map(lambda ref: new.write_tablets(old.read_rows(ref.cid)), leaves)
        return retyped._rebuilt(new.finish([r for refs in pieces for r in refs]))

    def alter_schema(self, change: SchemaChange) -> Table:
        """This table with its schema changed (see :mod:`merkle.tablets.evolve` for the rules)."""
        if not self.root.typed:
            raise SchemaError(
                "this table was written before merkle-db kept schemas: it has none to alter "
                "(its fields are schema-free); copy it into a new table to give it one"
            )
        from merkle.tablets.evolve import plan_change, rewrite_rows, untyped_schema

        plan = plan_change(
            self.root.schema, self.key, self.root.families, change, self.root.key_codec
        )
        # Never written and created without a schema: plan_change starts from the key fields
        # typed null. A change that ends there changes nothing (doc/api.md: no version), and
        # the table keeps no schema, as before, for its first write to type.
        untouched = plan.schema.equals(untyped_schema(self.key), check_metadata=True)
        if self.root.schema is None and untouched and plan.families == self.root.families:
            return self
        if not plan.rewrite:
            return self._with(schema=plan.schema, renamed=plan.renamed)
        flushed = self.flush()
        changed = flushed._with(schema=plan.schema, families=plan.families, renamed=plan.renamed)
        if flushed.root.data is None or not self.root.key_codec:
            return changed
        old, new = flushed._tree(), changed._tree()
        column = self.root.key_field

        def rewrite(ref: ChildRef) -> list[ChildRef]:
            rows = old.read_rows(ref.cid)
            return new.write_tablets(SortedRows(rewrite_rows(rows.table, plan, column), rows.keys))

        pieces = self.ts.map(rewrite, list(old.leaves(flushed.data_ref())))
        return changed._rebuilt(new.finish([r for refs in pieces for r in refs]))

    def build_from(self, tablet_ids: Sequence[CID]) -> Table:
        """This table with its data replaced by the given tablets (pending changes dropped).

        Tablets written under other families (of another table, or of this one before an
        ``alter_families``) are rewritten into this table's, as too-big ones are cut again
        (:func:`_within_limits`): a projection reads only the blocks of the families the
        table puts its fields in, so a field a block keeps elsewhere read as null.
        """
        refs = [node_ref(self.ts, cid) for cid in tablet_ids]
        for i, ref in enumerate(refs):
            if ref.height != 0:
                raise UsageError(f"{ref.cid} is an index node, not a tablet")
            if i and ref.first_key <= refs[i - 1].last_key:
                raise UsageError(
                    f"tablets must be in key order without overlap: {ref.cid} starts at or "
                    f"before the end of {refs[i - 1].cid}"
                )
        if not self.root.key_codec:
            raise UsageError("build_table needs a table whose key codec is known")
        # No tablet node names its codec: a tablet of another key (field, type or order)
        # would pass the checks above and leave keys out of order and lookups missing.
        check_tablet_keys(self.ts, refs, self.key, self.root.key_codec)
        table = self
        cids = [cid for ref in refs for cid in self.ts.tablet(ref.cid).blocks()]
        if self.root.typed:
            segments = self.ts.segments(cids)
            schema = schema_of_segments(self.root.schema, segments, self.key)
            table = self.with_schema(schema)
            schemas = [segment.schema for segment in segments]
        else:  # the layout needs only each block's schema (a small read, never its data)
            schemas = self.ts.segment_schemas(cids)
        columns = {cid.bytes: s.names for cid, s in zip(cids, schemas, strict=True)}
        tree = table._tree()
        tree._fresh = {}
        refs = [fitted for ref in refs for fitted in _within_limits(tree, ref, columns)]
        return table._rebuilt(tree.finish(refs, check_all=True))


def _within_limits(tree: Tree, ref: ChildRef, columns: Mapping[bytes, list[str]]) -> list[ChildRef]:
    """A tablet given to ``build_table`` as tablets within this table's limits and families:
    itself, or its rows cut again when it (or a page of it) holds more records than this
    table allows (a tablet of a table with a bigger ``tablet_size_limit``), or written
    again when a block of it is not in this table's families (``columns``: each block's
    column names). Kept as it was, a too-big one read correctly but failed ``merkle
    verify`` until a write next touched it; one of other families read nulls."""
    spec = tree.leaves_io.spec
    node = tree.ts.tablet(ref.cid)
    if (
        node.count <= spec.limits.tablet_size
        and all(page.count <= spec.limits.page_rows for page in node.pages)
        and not any(spec.misplaced(name, columns[cid.bytes]) for name, cid in family_blocks(node))
    ):
        return [ref]
    return tree.write_tablets(tree.leaves_io.rows(ref.cid))
