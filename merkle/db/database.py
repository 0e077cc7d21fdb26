"""The ``Database`` value: one version of a database, plus uncommitted changes.

A ``Database`` is immutable: every change returns a new value, and nothing
reaches storage where others could see it before :meth:`Database.commit`.
Reads on an uncommitted value see its own writes: writes to a table are
buffered as Arrow and folded into one pending batch when the table is next
read or at commit, so a loop of small ``write`` calls costs one batch, not
one per call.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from merkle.blocks.cid import CID
from merkle.db.commit import continues_committed
from merkle.db.copies import snapshot
from merkle.db.dbroot import DbRoot
from merkle.db.inputs import (
    as_rows,
    check_families_arg,
    check_fields,
    check_function,
    check_key_codec_arg,
    check_key_fields,
    check_keys,
    check_metadata,
    check_names_list,
    check_table_name,
    given_metadata,
    same_metadata,
)
from merkle.db.records import RecordOps
from merkle.db.staging import StagedBlocks
from merkle.db.tableinfo import describe_table, list_tablets, read_stray_tablet
from merkle.db.tablestate import TableChange as _Change
from merkle.db.tablestate import TableState as _TableState
from merkle.db.tablestate import known_fields
from merkle.errors import NotFoundError, UsageError
from merkle.lazy import LazyModule
from merkle.refs import JournalEntry
from merkle.tablets.fieldids import FieldId
from merkle.tablets.rows import empty_keys, sort_rows
from merkle.tablets.schema import check_schema, with_free_fields
from merkle.tablets.store import TableStore
from merkle.tablets.table import Table, check_limits

if TYPE_CHECKING:
    from merkle.db import ops as db_ops
    from merkle.db.connection import Connection
    from merkle.db.diff import DatabaseDiff
    from merkle.db.readers import ReaderLease
    from merkle.refs import WriterTicket
    from merkle.tablets.evolve import SchemaChange
else:
    # The recorded changes (a dozen frozen dataclasses) are built by writes only:
    # imported when a value is first changed, not by a process that only reads.
    db_ops = LazyModule("merkle.db.ops")

__all__ = ["Database"]


class Database(RecordOps):
    """One version of a database and the changes made to it since (see the module doc)."""

    def __init__(
        self,
        conn: Connection,
        entry: JournalEntry,
        base: DbRoot,
        *,
        staging: StagedBlocks | None = None,
        tables: Mapping[str, _TableState | None] | None = None,
        meta: Any = None,
        meta_changed: bool = False,
        ops: tuple[db_ops.Op, ...] = (),
    ) -> None:
        self._conn = conn
        self._entry = entry
        self._base = base
        self._staging = staging or StagedBlocks(conn.blocks)
        self._ts: TableStore = conn.tables.with_blocks(self._staging)
        self._tables: dict[str, _TableState | None] = dict(tables or {})
        self._meta = meta if meta_changed else base.meta
        self._meta_changed = meta_changed
        self._ops = ops
        self._reader: ReaderLease | None = None
        self._committed: Database | None = None  # what commit() made of this value
        self._commit_lock = threading.Lock()  # one commit per value (merkle.db.commit)

    def _evolve(self, **changes: Any) -> Database:
        state: dict[str, Any] = {
            "staging": self._staging,
            "tables": self._tables,
            "meta": self._meta,
            "meta_changed": self._meta_changed,
            "ops": self._ops,
        }
        state.update(changes)
        derived = Database(self._conn, self._entry, self._base, **state)
        derived._reader = self._reader  # values derived from a leased one share its lease
        return derived

    def __repr__(self) -> str:
        dirty = f", {len(self._ops)} uncommitted changes" if self._ops else ""
        return f"<Database {self.name!r} version {self.version}{dirty}>"

    # -- identity ------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self._entry.db

    @property
    def version(self) -> int:
        """The committed version this value is based on."""
        return self._entry.version

    @property
    def root(self) -> str:
        """The CID string of the committed database root block this value is based on."""
        assert self._entry.root is not None
        return self._entry.root

    @property
    def entry(self) -> JournalEntry:
        """The journal entry of the committed version this value is based on (a copy)."""
        return self._entry.detached()

    @property
    def leased(self) -> bool:
        """Whether a reader lease keeps this value's version from garbage collection."""
        reader = self._reader
        return reader is not None and not reader.released and reader.lapsed is None

    def release(self) -> None:
        """Give up the reader lease of ``open_db(..., lease=True)`` (no-op without one)."""
        if self._reader is not None:
            self._reader.release()

    def __enter__(self) -> Database:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    @property
    def dirty(self) -> bool:
        """Whether this value holds changes that are not committed."""
        return bool(self._ops)

    # -- tables --------------------------------------------------------------------

    def has_table(self, name: str) -> bool:
        """Whether the database holds table ``name`` (without listing every table: a
        diff or merge asks this of each table, and databases may hold thousands)."""
        if not isinstance(name, str):
            raise UsageError(f"a table name is a string, got {type(name).__name__} {name!r}")
        if name in self._tables:
            return self._tables[name] is not None
        return name in self._base.tables

    def list_tables(self) -> list[str]:
        names = set(self._base.tables)
        for name, state in self._tables.items():
            if state is None:
                names.discard(name)
            else:
                names.add(name)
        return sorted(names)

    def _state(self, name: str) -> _TableState:
        check_table_name(name)
        if self._reader is not None:
            self._reader.check()  # a lapsed lease no longer protects what is read
        if name in self._tables:
            state = self._tables[name]
            if state is None:
                raise self._no_table(name)
            return state
        cid = self._base.tables.get(name)
        if cid is None:
            raise self._no_table(name)
        state = _TableState(Table.load(self._ts, cid), modified=False)
        self._tables[name] = state  # a cache fill: the value's meaning does not change
        return state

    def _no_table(self, name: str) -> NotFoundError:
        tables = ", ".join(repr(t) for t in self.list_tables()) or "none"
        return NotFoundError(
            f"database {self.name!r} (version {self.version}) has no table {name!r}; "
            f"its tables: {tables}"
        )

    def _table(self, name: str) -> Table:
        return self._state(name).current(self.version + 1)

    def _table_uid(self, name: str) -> str | None:
        try:
            return self._state(name).table.root.uid
        except NotFoundError:
            return None

    def _known(self, name: str, table: Table) -> Mapping[str, FieldId] | None:
        """What an operation records of table ``name``'s fields for its replay (see
        :func:`~merkle.db.tablestate.known_fields`): those the base version has."""
        cid = self._base.tables.get(name)
        return known_fields(table, self._ts.table(cid) if cid is not None else None)

    def _table_root(self, name: str) -> str | None:
        cid = self._base.tables.get(name)
        return str(cid) if cid is not None else None

    def _with_table(self, name: str, state: _TableState | None, op: db_ops.Op) -> Database:
        tables = dict(self._tables)
        tables[name] = state
        return self._evolve(tables=tables, ops=(*self._ops, op))

    @continues_committed
    def create_table(
        self,
        name: str,
        key: str | Sequence[str],
        key_codec: str | Sequence[str] | None = None,
        families: Mapping[str, Any] | None = None,
        metadata: Any = None,
        tablet_size_limit: int | None = None,
        branching_factor: int | None = None,
        patch_limit: int | None = None,
        patch_share: int | None = None,
        schema: pa.Schema | None = None,
        schema_free: bool | Sequence[str] = False,
    ) -> Database:
        """A new empty table whose records are identified by the field ``key``.

        ``key`` may list several fields (a composite key, ordered field by
        field; ``key_codec`` then lists one codec per field, or is a
        ``tuple(...)`` spec). ``schema`` declares the fields and their Arrow
        types; without it the first write decides them. ``schema_free`` makes
        fields schema-free (any value, stored as CBOR): ``True`` for every field
        not declared in ``schema`` (the record model), or a list of field
        names. Pending batches are
        folded into tablets once they hold more than ``patch_limit`` records
        and more than ``patch_share`` percent of the table (defaults 20,000
        and 50): see doc/format.md "Batch".
        """
        check_table_name(name, creating=True)
        if self.has_table(name):
            raise UsageError(
                f"table {name!r} already exists in database {self.name!r}; "
                "drop it first or choose another name"
            )
        import uuid  # the table's identity: only a new table needs one

        key = check_key_fields(key, name)
        limits = check_limits(tablet_size_limit, branching_factor, patch_limit, patch_share)
        op = db_ops.CreateTable(
            name,
            key,
            check_key_codec_arg(key_codec, name),
            check_families_arg(families, name),
            check_metadata(metadata, f"metadata of table {name!r}"),
            (limits.tablet_size, limits.branching, limits.patch, limits.patch_share),
            uuid.uuid4().hex,
            *with_free_fields(check_schema(schema, key), schema_free, key),
        )
        return self._create_table(op)

    def _create_table(self, op: db_ops.CreateTable) -> Database:
        limits = check_limits(*op.limits)
        table = Table.new(
            self._ts,
            key_field=op.key,
            key_codec=op.key_codec,
            families=op.families,
            limits=limits,
            meta=op.metadata,
            uid=op.uid,
            typed=True,
            schema=op.schema,
            schema_free=op.schema_free,
        )
        return self._with_table(op.table, _TableState(table), op)

    @continues_committed
    def drop_table(self, name: str) -> Database:
        state = self._state(name)
        return self._with_table(name, None, db_ops.DropTable(name, state.table.root.uid))

    def describe_table(self, name: str) -> dict[str, Any]:
        state = self._state(name)
        stored = self._table_root(name) if not (state.modified or state.changes) else None
        return describe_table(self._ts, self._table(name), name, stored)

    @continues_committed
    def alter_table_meta(self, name: str, fn: Callable[..., Any], *args: Any) -> Database:
        """This database with table ``name``'s metadata ``fn(metadata, *args)``; as
        :meth:`alter_db_meta`, ``fn`` gets a copy, and a result stored as the metadata
        already is leaves the value as it is."""
        check_function(fn, f"alter_table_meta of table {name!r}: fn")
        state = self._state(name)
        table = state.current(self.version + 1)
        was, args = table.root.meta, snapshot(args)  # the op keeps args: a replay's input
        meta = check_metadata(fn(given_metadata(was), *args), f"metadata of table {name!r}")
        if same_metadata(meta, was):
            return self
        op = db_ops.AlterTableMeta(name, table.root.uid, fn, args)
        return self._with_table(name, _TableState(table.with_meta(meta)), op)

    @continues_committed
    def alter_families(self, name: str, families: Mapping[str, Any]) -> Database:
        table = self._table(name)
        if families is None:
            raise UsageError(
                f"alter_families of table {name!r} needs a dict of family name -> field names"
            )
        families = check_families_arg(families, name) or {}
        op = db_ops.AlterFamilies(name, table.root.uid, families)
        return self._with_table(name, _TableState(table.with_families(families)), op)

    @continues_committed
    def alter_schema(
        self,
        name: str,
        *,
        add: Any = None,
        drop: Any = None,
        rename: Mapping[str, str] | None = None,
        widen: Mapping[str, Any] | None = None,
        nullable: Any = None,
        free: Any = None,
    ) -> Database:
        """Change a table's schema: ``add`` fields (pyarrow fields or ``{name: type}``;
        always nullable), ``drop`` or ``rename`` fields, ``widen`` types
        (``{name: type}``: int32 -> int64, float32 -> float64, ...), make fields
        ``nullable``, or make them ``free`` (schema-free). The rules are in
        doc/api.md, "Schemas"; breaking one is a SchemaError."""
        from merkle.db.inputs import check_renames, check_schema_change
        from merkle.tablets.evolve import SchemaChange

        check_renames(rename, name)
        change = SchemaChange.of(add, drop, rename, widen, nullable, free)
        check_schema_change(change, name)
        return self._alter_schema(name, change)

    def _alter_schema(self, name: str, change: SchemaChange) -> Database:
        table = self._table(name)
        try:
            altered = table.alter_schema(change)
        except UsageError as exc:
            raise type(exc)(f"table {name!r}: {exc}") from None
        if altered.root == table.root:
            return self  # nothing changed (a nullable field made nullable): no version
        op = db_ops.AlterSchema(name, table.root.uid, change, self._known(name, table))
        return self._with_table(name, _TableState(altered), op)

    # -- records -------------------------------------------------------------------

    @continues_committed
    def write(
        self,
        table: str,
        records: Iterable[Mapping[str, Any]]
        | Mapping[Any, Mapping[str, Any]]
        | pa.Table
        | pa.RecordBatch,
    ) -> Database:
        """Upsert whole records: dicts holding the key field, a mapping key -> dict, Arrow,
        or a DataFrame (pandas, Polars, anything with ``__arrow_c_stream__``)."""
        return self._upsert(
            table, records, lambda uid, rows, known: db_ops.Write(table, uid, rows, known)
        )

    def _upsert(
        self,
        table: str,
        records: Any,
        op: Callable[[str, pa.Table, Mapping[str, FieldId] | None], db_ops.Op],
        replayable: bool = False,
    ) -> Database:
        """``records`` written; the change recorded as ``op(uid, rows, known)``. With
        ``replayable`` (an upsert) the op is recorded even when there is nothing to write
        here: on a concurrent head it may write rows (see :mod:`merkle.db.ops`)."""
        state = self._state(table)
        # as_rows names the record at fault; the schema types a DataFrame's map column
        rows_in = as_rows(records, state.table.key, table, state.table.root.schema)
        try:
            current, rows = state.table.prepare_rows(rows_in)
        except UsageError as exc:
            raise type(exc)(f"table {table!r}: {exc}") from None
        except UnicodeEncodeError:  # Arrow cannot name a column so
            raise UsageError(
                f"table {table!r}: a field name of the records holds an unpaired surrogate, "
                "which UTF-8 cannot store"
            ) from None
        if not rows.num_rows and current.root == state.table.root:
            # No record, and the table's codec and schema are as they were.
            if not replayable:
                return self
            known = self._known(table, state.table)
            return self._with_table(table, state, op(state.table.root.uid, rows, known))
        # Zero rows that chose the codec or schema (an empty Arrow table written to a table
        # never written) are still a write: they set the schema, as declaring it would.
        change = _Change(upserts=sort_rows(rows, current.root.key_field, current.spec.codec))
        new_state = state.with_change(current, change)
        # The op keeps the rows as the user's table (a replay writes them again), and the
        # fields the table had, so a replay can tell a field dropped meanwhile from a new one.
        known = self._known(table, state.table)
        return self._with_table(
            table, new_state, op(current.root.uid, current.present(rows), known)
        )

    @continues_committed
    def delete(self, table: str, keys: Iterable[Any]) -> Database:
        """Remove records by key; keys that do not exist are fine (a blind delete)."""
        keys = tuple(check_keys(keys, table))
        return self._delete(table, keys, lambda uid: db_ops.Delete(table, uid, keys))

    def _delete(
        self,
        table: str,
        keys: Sequence[Any],
        op: Callable[[str], db_ops.Op],
        replayable: bool = False,
    ) -> Database:
        """``keys`` deleted; the change recorded as ``op(uid)``, even without keys when
        ``replayable`` (a delete_where may match records on a concurrent head)."""
        state = self._state(table)
        if not keys:
            return self._with_table(table, state, op(state.table.root.uid)) if replayable else self
        # A table never written has no codec yet: the keys choose it, as a write would
        # (the delete must still be recorded, to win over a concurrent write on replay).
        current = state.table.with_codec_for(keys[0])
        codec = current.spec.codec
        encoded = codec.encode_unique(keys)
        change = _Change(deletes=pa.array(encoded, type=empty_keys(codec).type))
        new_state = state.with_change(current, change)
        return self._with_table(table, new_state, op(current.root.uid))

    def _records(
        self, table: Table, rows: pa.Table, fields: Sequence[str] | None
    ) -> list[dict[str, Any]]:
        return table.records(rows, fields)

    # -- tablets -------------------------------------------------------------------

    def list_tablets(self, table: str) -> list[dict[str, Any]]:
        """The tablets of a table in key order: id (CID), count, size, start and end keys.

        Pending changes are not in any tablet yet: ``scan`` shows them; commit
        with a flushed table (``merkle compact`` or enough writes) to fold them in.
        """
        return list_tablets(self._table(table))

    def _tablet_owner(self, cid: CID) -> tuple[str, Table] | None:
        for name in self.list_tables():
            table = self._table(name)
            if any(ref.cid == cid for ref in table.tablets()):
                return name, table
        return None

    def read_tablet(
        self, tablet_id: str, fields: Sequence[str] | None = None
    ) -> Iterator[dict[str, Any]]:
        """The records stored in one tablet (by id), with the key field and ``fields`` (each
        a field of the table that holds the tablet, as every read checks)."""
        fields = check_fields(fields)
        cid = CID.parse(tablet_id)
        owner = self._tablet_owner(cid)
        if owner is not None:
            name, table = owner
            fields = self._read_fields(table, name, fields)
            rows = table.read_tablet(cid, fields)
            return iter(self._records(table, rows, fields))
        return read_stray_tablet(self._ts, cid, fields)

    @continues_committed
    def build_table(self, table: str, tablet_ids: Sequence[str]) -> Database:
        """This database with ``table``'s data replaced by the given tablets (in key order)."""
        state = self._state(table)
        cids = [CID.parse(t) for t in check_names_list(tablet_ids, "build_table's tablet_ids")]
        built = state.table.build_from(cids)
        self._staging.add_foreign(cids)  # proven stored at commit, under the writer lease
        op = db_ops.BuildTable(
            table, built.root.uid, [str(c) for c in cids], self._table_root(table) or ""
        )
        return self._with_table(table, _TableState(built), op)

    @continues_committed
    def compact(self, table: str | None = None) -> Database:
        """Fold pending batches into the tablets (of one table, or of every table).

        The data read back is the same; the committed version afterwards has
        no pending batches, so every record is in a tablet (``list_tablets``
        and bulk readers see it). Commit to keep the result.
        """
        db = self
        for name in [table] if table is not None else self.list_tables():
            current = db._table(name)
            if not current.root.pending:
                continue
            op = db_ops.Compact(name, current.root.uid)
            db = db._with_table(name, _TableState(current.flush()), op)
        return db

    # -- database ------------------------------------------------------------------

    @property
    def metadata(self) -> Any:
        """A copy of the metadata: the value's own is shared (see :mod:`merkle.db.copies`)."""
        return snapshot(self._meta)

    @continues_committed
    def alter_db_meta(self, fn: Callable[..., Any], *args: Any) -> Database:
        """This database with metadata ``fn(metadata, *args)``. ``fn`` gets a copy (the
        metadata is shared by every value of the version). A result stored as the
        metadata already is changes nothing and is not recorded: no version, and no
        replay over a concurrent commit's metadata (doc/api.md "Commit and conflicts")."""
        check_function(fn, "alter_db_meta: fn")
        was, args = self._meta, snapshot(args)  # the op keeps args: a replay's input
        what = f"metadata of database {self.name!r}"
        meta = check_metadata(fn(given_metadata(was), *args), what)
        if same_metadata(meta, was):
            return self
        # Back to the base's metadata (changed and changed back): no change to commit.
        changed = not same_metadata(meta, self._base.meta)
        return self._evolve(
            meta=meta, meta_changed=changed, ops=(*self._ops, db_ops.AlterDbMeta(fn, args))
        )

    def diff(
        self, other: Any, table: str | None = None, fields: Sequence[str] | None = None
    ) -> DatabaseDiff:
        """The changes from ``other`` (a Database, a version number of this database, or
        the name of a database of the lake) to this value: see :mod:`merkle.db.diff`."""
        from merkle.db.diff import diff_databases  # the diff machinery: only when asked

        return diff_databases(self, other, table=table, fields=check_fields(fields))

    def describe(self) -> dict[str, Any]:
        tables = {}
        for name in self.list_tables():
            table = self._table(name)
            tables[name] = {"count": table.count, "size": table.size}
        return {
            "id": self.root,
            "name": self.name,
            "version": self.version,
            "tables": tables,
            "updated_at": self._base.updated_at,
            "metadata": snapshot(self._meta),  # a copy: see the metadata property
        }

    # -- commit --------------------------------------------------------------------

    def _save_root(self) -> CID:
        """Stage every changed table root and a new database root; the root's CID."""
        version = self.version + 1
        tables = dict(self._base.tables)
        for name, state in self._tables.items():
            if state is None:
                tables.pop(name, None)
            elif state.modified:
                tables[name] = state.current(version).save()
        root = DbRoot(tables, self._meta, datetime.now(UTC))
        return self._ts.put_node(root.to_node())

    def commit(
        self,
        message: str | None = None,
        author: str | None = None,
        *,
        rebase: bool = True,
        ticket: WriterTicket | None = None,
    ) -> Database:
        """Make this value's changes the database's next version; the committed value.

        Compare-and-set on the journal. If another commit came first, the
        changes are replayed on the new head and committed again (``rebase``);
        with ``rebase=False`` any concurrent commit is a ``ConflictError``. A
        value without changes is returned as it is; committing the same value
        again, or from several threads at once, returns the value its first
        commit made, and changing a committed value changes that one (see
        :mod:`merkle.db.commit`). ``ticket``: the writer
        lease (and the GC lock generation it began under) that the caller has
        held since it wrote the first block this commit names, a bulk job's,
        used instead of the connection's own, so that a collection waiting for
        that lease cannot also block the commit.
        """
        if not self._ops:
            return self
        from merkle.db.commit import commit_value  # the commit path: not for a reader

        return commit_value(self, message, author, rebase, ticket)
