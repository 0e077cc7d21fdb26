"""The ``Database`` value: one version of a database, plus uncommitted changes.

A ``Database`` is immutable: every change returns a new value, and nothing
reaches storage where others could see it before :meth:`Database.commit`.
Reads on an uncommitted value see its own writes: writes to a table are
buffered as Arrow and folded into one pending batch when the table is next
read or at commit, so a loop of small ``write`` calls costs one batch, not
one per call.
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from merkle.blocks.cid import CID
from merkle.blocks.codec import encode_node
from merkle.db.dbroot import DbRoot
from merkle.db.ops import (
    AlterDbMeta,
    AlterFamilies,
    AlterTableMeta,
    BuildTable,
    Compact,
    CreateTable,
    Delete,
    DropTable,
    Op,
    Write,
)
from merkle.db.readers import ReaderLease
from merkle.db.staging import StagedBlocks
from merkle.errors import ConflictError, MerkleError, NotFoundError, UsageError
from merkle.refs import JournalConflictError, JournalEntry, WriterTicket
from merkle.tablets.batch import BatchContent, fold
from merkle.tablets.keys import KeyCodec, infer_key_codec_arrow
from merkle.tablets.rows import SortedRows, empty_keys, sort_rows
from merkle.tablets.segment import arrow_to_records
from merkle.tablets.store import TableStore
from merkle.tablets.table import Table, check_limits

if TYPE_CHECKING:
    from merkle.db.connection import Connection

__all__ = ["Database"]

#: How often a commit replays on a moved head before giving up.
MAX_COMMIT_ATTEMPTS = 64


def check_table_name(name: object) -> str:
    """A table name: a non-empty string of printable characters, at most 255 bytes."""
    if not isinstance(name, str) or not name:
        raise UsageError(f"a table name must be a non-empty string, got {name!r}")
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in name) or len(name.encode()) > 255:
        raise UsageError(
            f"table name {name!r} is invalid: use at most 255 bytes and no control characters"
        )
    return name


def check_metadata(value: Any, what: str) -> Any:
    """``value`` if it can be stored in a node (DAG-CBOR), else a UsageError naming ``what``."""
    try:
        encode_node(value)
    except UsageError as exc:
        raise UsageError(f"{what} cannot be stored: {exc}") from None
    return value


@dataclass(frozen=True)
class _Change:
    """A buffered write (sorted Arrow rows) or delete (encoded keys) on one table."""

    upserts: SortedRows | None = None
    deletes: pa.Array | None = None


@dataclass(frozen=True)
class _TableState:
    """A table as this transaction sees it: a materialised table plus buffered changes."""

    table: Table
    changes: tuple[_Change, ...] = ()
    modified: bool = True  # False for a table only loaded from the base version
    _cache: dict[str, Table] = field(default_factory=dict, compare=False, repr=False)

    def current(self, version: int) -> Table:
        """The table with every buffered change folded in (computed once per value)."""
        if not self.changes:
            return self.table
        done = self._cache.get("table")
        if done is None:
            spec = self.table.spec
            codec = spec.codec
            contents = []
            for change in reversed(self.changes):
                if change.upserts is not None:
                    rows = change.upserts
                    none = np.zeros(len(rows), bool)
                    contents.append(BatchContent(rows, none, empty_keys(codec), np.zeros(0, bool)))
                else:
                    assert change.deletes is not None
                    empty = pa.table({spec.key_field: pa.array([], type=codec.arrow_type)})
                    dels = change.deletes
                    contents.append(
                        BatchContent(
                            SortedRows(empty, empty_keys(codec)),
                            np.zeros(0, bool),
                            dels,
                            np.zeros(len(dels), bool),
                        )
                    )
            folded = fold(contents, spec.key_field, codec)
            done = self.table.apply_changes(folded.upserts, folded.deletes, version)
            self._cache["table"] = done
        return done


class Database:
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
        ops: tuple[Op, ...] = (),
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
        """The journal entry of the committed version this value is based on."""
        return self._entry

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

    def _table_root(self, name: str) -> str | None:
        cid = self._base.tables.get(name)
        return str(cid) if cid is not None else None

    def _with_table(self, name: str, state: _TableState | None, op: Op) -> Database:
        tables = dict(self._tables)
        tables[name] = state
        return self._evolve(tables=tables, ops=(*self._ops, op))

    def create_table(
        self,
        name: str,
        key: str,
        key_codec: str | None = None,
        families: Mapping[str, Any] | None = None,
        metadata: Any = None,
        tablet_size_limit: int | None = None,
        branching_factor: int | None = None,
        patch_limit: int | None = None,
        patch_share: int | None = None,
    ) -> Database:
        """A new empty table whose records are identified by the field ``key``.

        Pending batches are folded into tablets once they hold more than
        ``patch_limit`` records and more than ``patch_share`` percent of the
        table (defaults 20,000 and 50): see doc/format.md "Batch".
        """
        check_table_name(name)
        if name in self.list_tables():
            raise UsageError(
                f"table {name!r} already exists in database {self.name!r}; "
                "drop it first or choose another name"
            )
        limits = check_limits(tablet_size_limit, branching_factor, patch_limit, patch_share)
        op = CreateTable(
            name,
            key,
            key_codec,
            dict(families) if families is not None else None,
            check_metadata(metadata, f"metadata of table {name!r}"),
            (limits.tablet_size, limits.branching, limits.patch, limits.patch_share),
            uuid.uuid4().hex,
        )
        return self._create_table(op)

    def _create_table(self, op: CreateTable) -> Database:
        limits = check_limits(*op.limits)
        table = Table.new(
            self._ts,
            key_field=op.key,
            key_codec=op.key_codec,
            families=op.families,
            limits=limits,
            meta=op.metadata,
            uid=op.uid,
        )
        return self._with_table(op.table, _TableState(table), op)

    def drop_table(self, name: str) -> Database:
        state = self._state(name)
        return self._with_table(name, None, DropTable(name, state.table.root.uid))

    def describe_table(self, name: str) -> dict[str, Any]:
        table = self._table(name)
        root = table.root
        return {
            "id": str(self._ts.put_node(root.to_node())),
            "name": name,
            "key": root.key_field,
            "key_codec": root.key_codec,
            "tablets": len(table.tablets()),
            "count": table.count,
            "size": table.size,
            "patch": table.patch_stats(),
            "families": {f: sorted(fields) for f, fields in root.families.items()},
            "limits": {
                "tablet_size_limit": root.limits.tablet_size,
                "branching_factor": root.limits.branching,
                "patch_limit": root.limits.patch,
                "patch_share": root.limits.patch_share,
            },
            "metadata": root.meta,
        }

    def alter_table_meta(self, name: str, fn: Callable[..., Any], *args: Any) -> Database:
        state = self._state(name)
        table = state.current(self.version + 1)
        meta = check_metadata(fn(table.root.meta, *args), f"metadata of table {name!r}")
        op = AlterTableMeta(name, table.root.uid, fn, args)
        return self._with_table(name, _TableState(table.with_meta(meta)), op)

    def alter_families(self, name: str, families: Mapping[str, Any]) -> Database:
        table = self._table(name)
        op = AlterFamilies(name, table.root.uid, dict(families))
        return self._with_table(name, _TableState(table.with_families(families)), op)

    # -- records -------------------------------------------------------------------

    def write(
        self,
        table: str,
        records: Iterable[Mapping[str, Any]]
        | Mapping[Any, Mapping[str, Any]]
        | pa.Table
        | pa.RecordBatch,
    ) -> Database:
        """Upsert whole records: dicts holding the key field, a mapping key -> dict, or Arrow."""
        state = self._state(table)
        key_field = state.table.root.key_field
        if not isinstance(records, (pa.Table, pa.RecordBatch)):
            records = _as_record_list(records, key_field, table)  # names the record at fault
        try:
            current, rows = state.table.prepare_rows(records)
        except UsageError as exc:
            raise UsageError(f"table {table!r}: {exc}") from None
        if not rows.num_rows:
            return self
        codec = current.spec.codec
        change = _Change(upserts=sort_rows(rows, key_field, codec))
        new_state = _TableState(current, (*state.changes, change))
        return self._with_table(table, new_state, Write(table, current.root.uid, rows))

    def delete(self, table: str, keys: Iterable[Any]) -> Database:
        """Remove records by key; keys that do not exist are fine (a blind delete)."""
        state = self._state(table)
        keys = tuple(keys)
        if not keys:
            return self
        # A table never written has no codec yet: the keys choose it, as a write would
        # (the delete must still be recorded, to win over a concurrent write on replay).
        current = state.table.with_codec_for(keys[0])
        codec = current.spec.codec
        encoded = sorted({codec.encode(k) for k in keys})
        change = _Change(deletes=pa.array(encoded, type=empty_keys(codec).type))
        new_state = _TableState(current, (*state.changes, change))
        return self._with_table(table, new_state, Delete(table, current.root.uid, keys))

    def _records(
        self, table: Table, rows: pa.Table, fields: Sequence[str] | None
    ) -> list[dict[str, Any]]:
        codec = table.codec
        if codec is None or not rows.num_rows:
            return []
        return arrow_to_records(rows, key_field=table.root.key_field, codec=codec, fields=fields)

    def get_records(
        self, table: str, keys: Iterable[Any], fields: Sequence[str] | None = None
    ) -> dict[Any, dict[str, Any]]:
        """``{key: record}`` for the keys that exist (with the key field and ``fields``)."""
        fields = _check_fields(fields)
        current = self._table(table)
        rows = current.get(list(keys), fields)
        key_field = current.root.key_field
        return {rec[key_field]: rec for rec in self._records(current, rows, fields)}

    def scan(
        self,
        table: str,
        fields: Sequence[str] | None = None,
        from_pk: Any = None,
        to_pk: Any = None,
        from_index: int | None = None,
        to_index: int | None = None,
        offset: int | None = None,
        limit: int | None = None,
        reverse: bool = False,
    ) -> Iterator[dict[str, Any]]:
        """Records in key order (``reverse``: descending); bounds are inclusive."""
        fields = _check_fields(fields)
        current = self._table(table)
        batches = current.scan(
            fields=fields,
            from_pk=from_pk,
            to_pk=to_pk,
            from_index=from_index,
            to_index=to_index,
            offset=offset,
            limit=limit,
            reverse=reverse,
        )
        return (rec for batch in batches for rec in self._records(current, batch, fields))

    def to_arrow(
        self,
        table: str,
        fields: Sequence[str] | None = None,
        from_pk: Any = None,
        to_pk: Any = None,
    ) -> pa.Table:
        """The table (or a key range of it) as one Arrow table, in key order."""
        return self._table(table).to_arrow(
            fields=_check_fields(fields), from_pk=from_pk, to_pk=to_pk
        )

    # -- tablets -------------------------------------------------------------------

    def list_tablets(self, table: str) -> list[dict[str, Any]]:
        """The tablets of a table in key order: id (CID), count, size, start and end keys.

        Pending changes are not in any tablet yet: ``scan`` shows them; commit
        with a flushed table (``merkle compact`` or enough writes) to fold them in.
        """
        current = self._table(table)
        codec = current.codec
        out = []
        for ref in current.tablets():
            assert codec is not None
            out.append(
                {
                    "id": str(ref.cid),
                    "count": ref.count,
                    "size": ref.size,
                    "start": codec.decode(ref.first_key),
                    "end": codec.decode(ref.last_key),
                }
            )
        return out

    def _tablet_owner(self, cid: CID) -> Table | None:
        for name in self.list_tables():
            table = self._table(name)
            if any(ref.cid == cid for ref in table.tablets()):
                return table
        return None

    def read_tablet(
        self, tablet_id: str, fields: Sequence[str] | None = None
    ) -> Iterator[dict[str, Any]]:
        """The records stored in one tablet (by id), with the key field and ``fields``."""
        fields = _check_fields(fields)
        cid = CID.parse(tablet_id)
        owner = self._tablet_owner(cid)
        if owner is not None:
            rows = owner.read_tablet(cid, fields)
            return iter(self._records(owner, rows, fields))
        # A tablet made outside this database (e.g. by a bulk job): read it by its own schema.
        try:
            node = self._ts.tablet(cid)
        except MerkleError as exc:
            raise NotFoundError(f"{tablet_id} is not a readable tablet: {exc}") from None
        base = self._ts.segment(node.segments["base"])
        key_field = base.column_names[0]
        codec: KeyCodec = infer_key_codec_arrow(base.schema.field(key_field).type)
        stray = Table.new(self._ts, key_field=key_field, key_codec=codec.spec)
        rows = stray.read_tablet(cid, fields)
        return iter(arrow_to_records(rows, key_field=key_field, codec=codec, fields=fields))

    def build_table(self, table: str, tablet_ids: Sequence[str]) -> Database:
        """This database with ``table``'s data replaced by the given tablets (in key order)."""
        state = self._state(table)
        cids = [CID.parse(t) for t in tablet_ids]
        built = state.table.build_from(cids)
        self._staging.add_foreign(cids)  # proven stored at commit, under the writer lease
        op = BuildTable(
            table, built.root.uid, [str(c) for c in cids], self._table_root(table) or ""
        )
        return self._with_table(table, _TableState(built), op)

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
            op = Compact(name, current.root.uid)
            db = db._with_table(name, _TableState(current.flush()), op)
        return db

    # -- database ------------------------------------------------------------------

    @property
    def metadata(self) -> Any:
        return self._meta

    def alter_db_meta(self, fn: Callable[..., Any], *args: Any) -> Database:
        """This database with metadata ``fn(metadata, *args)``."""
        meta = check_metadata(fn(self._meta, *args), f"metadata of database {self.name!r}")
        return self._evolve(meta=meta, meta_changed=True, ops=(*self._ops, AlterDbMeta(fn, args)))

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
            "metadata": self._meta,
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
        again returns the version its first commit made. ``ticket``: the writer
        lease (and the GC lock generation it began under) that the caller has
        held since it wrote the first block this commit names, a bulk job's,
        used instead of the connection's own, so that a collection waiting for
        that lease cannot also block the commit.
        """
        if not self._ops:
            return self
        if self._committed is not None:
            return self._committed  # committing the same value twice makes one version
        db = self
        conn = self._conn
        for attempt in range(MAX_COMMIT_ATTEMPTS):
            root = db._save_root()
            conflict: ConflictError | None = None
            raced = False
            held = nullcontext(ticket) if ticket is not None else conn.writer_lease()
            with held as using:
                db._staging.flush_reachable([root], refresh_before=using.lease.start)
                conn.leases.ensure_valid(using.lease)
                try:
                    entry = conn.refs.commit(
                        db.name, db.version, str(root), author=author, message=message
                    )
                except JournalConflictError as exc:
                    conflict = exc
                else:
                    raced = conn._settle(using, entry)
            if conflict is None:
                if raced:  # a collection may have removed blocks it could not see we need
                    with conn.writer_lease() as again:
                        db._staging.flush_reachable([root], refresh_before=again.lease.start)
                self._committed = conn._database(entry)
                return self._committed
            if not rebase:
                raise ConflictError(
                    f"database {db.name!r} moved on from version {db.version} while this "
                    f"transaction ran ({conflict}); commit(rebase=False) does not replay: "
                    "open the database again and redo the changes"
                ) from conflict
            db = db._replay(conn._head_for_replay(db))
            time.sleep(random.uniform(0, 0.002 * min(attempt + 1, 50)))  # jittered backoff
        raise ConflictError(
            f"gave up committing to database {self.name!r} after {MAX_COMMIT_ATTEMPTS} "
            "attempts: other writers kept committing first"
        )

    def _replay(self, head: Database) -> Database:
        db = head
        for op in self._ops:
            db = op.apply(db)
        return db


def _check_fields(fields: Sequence[str] | None) -> list[str] | None:
    if fields is None:
        return None
    if isinstance(fields, str):
        raise UsageError(f"fields must be a list of field names, not the string {fields!r}")
    out = list(fields)
    for f in out:
        if not isinstance(f, str) or not f:
            raise UsageError(f"field names must be non-empty strings, got {f!r}")
    return out


def _as_record_list(records: Any, key_field: str, table: str) -> list[Mapping[str, Any]]:
    """Records as a list of mappings holding the key field (a key -> dict mapping is expanded)."""
    if isinstance(records, Mapping):
        out: list[Mapping[str, Any]] = []
        for key, record in records.items():
            if not isinstance(record, Mapping):
                raise UsageError(
                    f"records for table {table!r} given as a mapping must map keys to dicts; "
                    f"key {key!r} maps to {type(record).__name__}"
                )
            if key_field in record and record[key_field] != key:
                raise UsageError(
                    f"record under key {key!r} holds {key_field}={record[key_field]!r}: "
                    "the two must agree"
                )
            out.append({**record, key_field: key})
        return out
    if isinstance(records, (str, bytes)) or not isinstance(records, Iterable):
        raise UsageError(
            f"records for table {table!r} must be dicts, a mapping key -> dict, or Arrow data; "
            f"got {type(records).__name__}"
        )
    listed = list(records)
    for i, record in enumerate(listed):
        if not isinstance(record, Mapping):
            raise UsageError(
                f"record {i} for table {table!r} is a {type(record).__name__}, not a dict"
            )
        if record.get(key_field) is None:
            raise UsageError(
                f"record {i} for table {table!r} has no value for the key field {key_field!r}"
            )
    return listed
