"""``Database.diff``: what changed between two versions, table by table.

The table-level part compares the database roots: tables created, dropped,
re-keyed or with other settings altered, and the metadata. The row-level
part is :func:`merkle.tablets.diff.diff_tables`, which reads only subtrees
and batches whose CIDs differ. Rows stream as Arrow record batches with the
columns ``key``, ``change`` (``insert`` / ``update`` / ``delete``), ``old``
and ``new`` (structs of the record's fields; null where there is no record).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from merkle.errors import NotFoundError, UsageError
from merkle.lazy import compute as pc
from merkle.tablets.diff import ChangeCounts, ChangeSet, count_changes, diff_tables
from merkle.tablets.keytimes import key_field_types, typed_key_column
from merkle.tablets.rows import SortedRows
from merkle.tablets.segment import concat_segments
from merkle.tablets.table import Table

if TYPE_CHECKING:
    from merkle.db.connection import Connection
    from merkle.db.database import Database
    from merkle.refs import JournalEntry

__all__ = [
    "CHANGE_DELETE",
    "CHANGE_INSERT",
    "CHANGE_UPDATE",
    "DatabaseDiff",
    "TableDiff",
    "commit_counts",
    "diff_databases",
    "resolve_other",
]

CHANGE_INSERT = "insert"
CHANGE_UPDATE = "update"
CHANGE_DELETE = "delete"


def settings_changed(old: Table, new: Table) -> list[str]:
    """Which settings of a table differ between two versions (rows aside).

    ``"schema"`` is among them when its fields changed (added, widened, made
    nullable or schema-free, dropped, renamed), by ``alter_schema`` or by a
    write that brought a new field.
    """
    a, b = old.root, new.root
    changed = []
    if a.uid != b.uid:
        changed.append("replaced")  # dropped and created again
    if a.key_field != b.key_field or (a.key_codec and b.key_codec and a.key_codec != b.key_codec):
        changed.append("key")
    if a.families != b.families:
        changed.append("families")
    if a.limits != b.limits:
        changed.append("limits")
    if a.meta != b.meta:
        changed.append("metadata")
    if schema_changed(old, new):
        changed.append("schema")
    return changed


def schema_changed(old: Table, new: Table) -> bool:
    """Whether the declared schema differs (fields, types, nullability, schema-free).

    A schema change is a change of the table even with no record changed: a
    record is what the schema shows of it, and a merge must not drop it.
    """
    a, b = old.root, new.root
    if a.typed != b.typed or a.free_default != b.free_default:
        return True
    if a.field_ids != b.field_ids or a.schema_epoch != b.schema_epoch:
        return True  # a field dropped and added again, even one that held no value
    if a.schema is None or b.schema is None:
        return a.schema is not b.schema
    return not a.schema.equals(b.schema, check_metadata=True)


def rekeyed(old: Table, new: Table) -> bool:
    """Whether rows of the two versions cannot be compared key by key."""
    a, b = old.root, new.root
    return a.key_field != b.key_field or bool(
        a.key_codec and b.key_codec and a.key_codec != b.key_codec
    )


@dataclass
class TableDiff:
    """The changes to one table: its status, altered settings, and changed records.

    ``status`` is ``created``, ``dropped``, ``rekeyed`` (key field or codec
    changed: every record is deleted and inserted again) or ``changed``.
    """

    name: str
    old: Table | None
    new: Table | None
    fields: Sequence[str] | None = None
    altered: list[str] = field(default_factory=list)
    _counts: ChangeCounts | None = None

    @property
    def status(self) -> str:
        if self.old is None:
            return "created"
        if self.new is None:
            return "dropped"
        if rekeyed(self.old, self.new):
            return "rekeyed"
        return "changed"

    @property
    def key_field(self) -> str:
        table = self.new if self.new is not None else self.old
        assert table is not None
        return table.root.key_field

    def change_sets(self) -> Iterator[ChangeSet]:
        """The changes in key order, rows in stored form (see merkle.tablets.diff)."""
        if self.status == "rekeyed":
            yield from diff_tables(self.old, None, fields=self.fields)
            yield from diff_tables(None, self.new, fields=self.fields)
            return
        yield from diff_tables(self.old, self.new, fields=self.fields)

    def batches(self) -> Iterator[pa.RecordBatch]:
        """The changed records as record batches: ``key``, ``change``, ``old``, ``new``.

        Records are schema-free, so the struct types may differ between
        batches when different rows hold different fields.
        """
        for change in self.change_sets():
            key_field = self._key_field_of(change)
            yield change_batch(
                change, key_field, self._key_names(key_field), self._key_types(key_field)
            )

    def _keyed(self, key_field: str) -> Table | None:
        """The version whose stored key column is ``key_field`` (the new one first)."""
        for table in (self.new, self.old):
            if table is not None and table.root.key_field == key_field:
                return table
        return None

    def _key_names(self, key_field: str) -> tuple[str, ...] | None:
        """The names of a composite key's fields, where ``key_field`` is its stored column
        (whose struct fields are named by position), else None."""
        table = self._keyed(key_field)
        if table is None or len(table.root.key_fields) < 2:
            return None
        return tuple(table.root.key_fields)

    def _key_types(self, key_field: str) -> tuple[pa.DataType | None, ...] | None:
        """The types of the key fields stored in ``key_field`` (:func:`key_field_types`)."""
        table = self._keyed(key_field)
        return None if table is None else key_field_types(table.root.key_fields, table.schema)

    def _key_field_of(self, change: ChangeSet) -> str:
        for rows in (change.inserted, change.deleted, change.updated_new):
            if len(rows):
                return str(rows.table.column_names[0])
        return self.key_field

    def to_arrow(self) -> pa.Table:
        """Every changed record in one Arrow table, in key order."""
        batches = list(self.batches())
        if not batches:
            return empty_change_table()
        tables = [pa.Table.from_batches([b]) for b in batches]
        try:
            return pa.concat_tables(tables, promote_options="permissive")
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
            raise UsageError(
                f"the changes of table {self.name!r} do not fit one Arrow table ({exc}); "
                "read them with batches()"
            ) from None

    def records(self) -> list[dict[str, Any]]:
        """The changes as dicts ``{key, change, old, new}`` (old/new: records or None).

        Records are what ``scan`` shows: the key fields (each field of a
        composite key) and every non-null field; ``key`` is the key value
        (a tuple for a composite key). All of them at once: a large diff
        streams with :meth:`iter_records`.
        """
        return list(self.iter_records())

    def iter_records(self) -> Iterator[dict[str, Any]]:
        """:meth:`records` one at a time, in key order, holding one change set (the
        changes of a few tablets' key range, as :meth:`batches` does) at once:
        ``merkle diff`` prints them as they come, so its memory does not grow with
        the diff."""
        for change in self.change_sets():
            yield from change_records(change, self.old, self.new)

    def counts(self) -> ChangeCounts:
        """Records inserted, updated and deleted (computed once)."""
        if self._counts is None:
            if self.fields is None and self.status != "rekeyed":
                self._counts = count_changes(self.old, self.new)
            else:
                total = ChangeCounts()
                for change in self.change_sets():
                    total += ChangeCounts(
                        len(change.inserted), len(change.updated_new), len(change.deleted)
                    )
                self._counts = total
        return self._counts


def empty_change_table() -> pa.Table:
    return pa.table(
        {
            "key": pa.array([], type=pa.null()),
            "change": pa.array([], type=pa.string()),
            "old": pa.array([], type=pa.struct([])),
            "new": pa.array([], type=pa.struct([])),
        }
    )


def _struct(rows: pa.Table, key_field: str, nulls_before: int, nulls_after: int) -> pa.Array:
    """The non-key columns of ``rows`` as a struct array, padded with null structs."""
    fields = [f for f in rows.schema if f.name != key_field]
    kind = pa.struct(fields)
    arrays = [rows.column(f.name).combine_chunks() for f in fields]
    if fields:
        body = pa.StructArray.from_arrays(arrays, fields=fields)
    else:
        body = pa.array([{}] * rows.num_rows, type=kind)
    parts = [pa.nulls(nulls_before, kind), body, pa.nulls(nulls_after, kind)]
    return pa.concat_arrays([p for p in parts if len(p)] or [pa.array([], type=kind)])


def change_batch(
    change: ChangeSet,
    key_field: str,
    key_names: Sequence[str] | None = None,
    key_types: Sequence[pa.DataType | None] | None = None,
) -> pa.RecordBatch:
    """One change set as a record batch in key order (see the module doc); a composite
    key is a struct of its fields under their names (``key_names``), as records show it,
    and a timestamp key field is of its type in ``key_types`` (naive or zoned, its unit),
    as ``to_arrow`` gives it, not the codec's stored ``timestamp[us, tz=UTC]``."""
    deleted, updated_old = change.deleted, change.updated_old
    updated_new, inserted = change.updated_new, change.inserted
    nd, nu, ni = len(deleted), len(updated_new), len(inserted)
    olds = [r.table for r in (deleted, updated_old) if len(r)]
    news = [r.table for r in (updated_new, inserted) if len(r)]
    empty = (inserted if ni else deleted).table.slice(0, 0)
    old_rows = concat_segments(olds, key_field=key_field) if olds else empty
    new_rows = concat_segments(news, key_field=key_field) if news else empty
    key = pa.concat_arrays(
        [
            r.table.column(key_field).combine_chunks()
            for r in (deleted, updated_new, inserted)
            if len(r)
        ]
        or [empty.column(key_field).combine_chunks()]
    )
    named = key_names is not None and pa.types.is_struct(key.type)
    if named and key_names is not None and key.type.num_fields == len(key_names):
        key = pa.StructArray.from_arrays(key.flatten(), names=list(key_names))
    kinds = pa.array(
        [CHANGE_DELETE] * nd + [CHANGE_UPDATE] * nu + [CHANGE_INSERT] * ni, type=pa.string()
    )
    batch = pa.table(
        {
            "key": key,
            "change": kinds,
            "old": _struct(old_rows, key_field, 0, ni),
            "new": _struct(new_rows, key_field, nd, 0),
        }
    )
    encoded = pa.concat_arrays(
        [r.keys for r in (deleted, updated_new, inserted) if len(r)] or [deleted.keys]
    )
    ordered = batch.take(pc.sort_indices(encoded))
    if key_types is not None:  # after the take: Arrow has none for a string_view key
        typed = typed_key_column(ordered.column("key").combine_chunks(), key_types)
        ordered = ordered.set_column(0, "key", typed)
    return pa.RecordBatch.from_arrays(
        [column.combine_chunks() for column in ordered.columns], schema=ordered.schema
    )


def change_records(change: ChangeSet, old: Table | None, new: Table | None) -> list[dict[str, Any]]:
    """One change set as dicts ``{key, change, old, new}`` in key order.

    Records read as ``scan`` shows them: old ones through ``old``'s schema, new
    ones through ``new``'s, so a composite key shows as its fields (``g``, ``n``),
    not as the struct column that stores it, and ``key`` is its tuple.
    """
    old = old if old is not None and old.codec is not None else new
    new = new if new is not None and new.codec is not None else old
    if old is None or new is None:
        return []

    def records(rows: SortedRows, table: Table) -> list[dict[str, Any]]:
        if not len(rows):
            return []
        return table.records(rows.table)  # the rows hold only the fields asked for

    out: list[tuple[bytes, dict[str, Any]]] = []
    old_key, new_key = old.key.key_of, new.key.key_of
    deleted = records(change.deleted, old)
    for key, rec in zip(change.deleted.keys.to_pylist(), deleted, strict=True):
        out.append((key, {"key": old_key(rec), "change": CHANGE_DELETE, "old": rec, "new": None}))
    olds, news = records(change.updated_old, old), records(change.updated_new, new)
    for key, before, after in zip(change.updated_new.keys.to_pylist(), olds, news, strict=True):
        out.append(
            (key, {"key": new_key(after), "change": CHANGE_UPDATE, "old": before, "new": after})
        )
    inserted = records(change.inserted, new)
    for key, rec in zip(change.inserted.keys.to_pylist(), inserted, strict=True):
        out.append((key, {"key": new_key(rec), "change": CHANGE_INSERT, "old": None, "new": rec}))
    out.sort(key=lambda item: item[0])
    return [rec for _, rec in out]


@dataclass
class DatabaseDiff:
    """The changes from ``old`` to ``new``: tables created, dropped, altered, and records."""

    old: Database
    new: Database
    tables: dict[str, TableDiff]
    metadata_changed: bool

    def __getitem__(self, name: str) -> TableDiff:
        try:
            return self.tables[name]
        except KeyError:
            raise NotFoundError(
                f"table {name!r} has no changes in this diff; changed tables: "
                f"{sorted(self.tables) or 'none'}"
            ) from None

    def __iter__(self) -> Iterator[str]:
        return iter(self.tables)

    @property
    def created(self) -> list[str]:
        return [n for n, t in self.tables.items() if t.status == "created"]

    @property
    def dropped(self) -> list[str]:
        return [n for n, t in self.tables.items() if t.status == "dropped"]

    @property
    def altered(self) -> dict[str, list[str]]:
        return {n: t.altered for n, t in self.tables.items() if t.altered}

    def summary(self) -> dict[str, Any]:
        """Counts per table and table-level changes (reads what differs to count records)."""
        rows = {}
        for name, table in self.tables.items():
            counts = table.counts()
            rows[name] = {
                "inserted": counts.inserted,
                "updated": counts.updated,
                "deleted": counts.deleted,
            }
        return {
            "from": {"db": self.old.name, "version": self.old.version},
            "to": {"db": self.new.name, "version": self.new.version},
            "tables_created": self.created,
            "tables_dropped": self.dropped,
            "tables_altered": self.altered,
            "metadata_changed": self.metadata_changed,
            "rows": rows,
        }


def resolve_other(db: Database, other: Any) -> Database:
    """``other`` of ``db.diff(other)`` as a Database value of the same lake."""
    from merkle.db.database import Database

    conn = db._conn
    if isinstance(other, Database):
        if not conn.same_lake(other._conn):
            raise UsageError("diff compares databases of one lake; sync them first")
        return other
    if isinstance(other, bool) or other is None:
        raise UsageError(
            f"diff needs a Database, a version number or a database name, got {other!r}"
        )
    if isinstance(other, int):
        try:
            return conn.open_db(db.name, version=other)
        except NotFoundError:
            drop = _drop_named(db, other)
            if drop is None:
                raise
            raise drop from None
    if isinstance(other, str):
        return conn.open_db(other)
    raise UsageError(
        f"diff needs a Database, a version number or a database name, got {type(other).__name__}"
    )


def _drop_named(db: Database, version: int) -> NotFoundError | None:
    """The error for ``db.diff(version)`` when ``version`` is a drop entry (None when it
    is not: the caller's own error stands).

    The drop holds no data. ``db.diff(db.version - 1)`` names it when ``db`` created
    the database again after it: such a version has no parent, as version 0 has none.
    """
    from merkle.db.ancestry import drop_below, held_before, kept_entry

    conn = db._conn
    try:
        entry = kept_entry(conn, db.name, version)
    except NotFoundError:
        return None
    if not entry.dropped:
        return None
    below = drop_below(conn, db.entry)
    again = (
        f"; version {db.version} created the database again after it, so it has no parent"
        if below is not None and below.version == version
        else ""
    )
    before = held_before(conn, entry)
    hint = f", e.g. version {before} (the last before the drop)" if before is not None else ""
    return NotFoundError(
        f"version {version} of database {db.name!r} is a drop: it holds no data to diff "
        f"against{again}. Diff against a version that holds data{hint}"
    )


def diff_databases(
    new: Database, other: Any, *, table: str | None = None, fields: Sequence[str] | None = None
) -> DatabaseDiff:
    """The changes that turn ``other`` (the older side) into ``new``."""
    old = resolve_other(new, other)
    names = sorted(set(old.list_tables()) | set(new.list_tables()))
    if table is not None:
        if not isinstance(table, str):
            raise UsageError(f"table must be a table name, got {type(table).__name__} {table!r}")
        if table not in names:
            raise NotFoundError(
                f"table {table!r} is in neither {old.name!r} version {old.version} nor "
                f"{new.name!r} version {new.version}"
            )
        names = [table]
    sides = {
        name: (
            old._table(name) if old.has_table(name) else None,
            new._table(name) if new.has_table(name) else None,
        )
        for name in names
    }
    if fields is not None:
        _check_diff_fields(fields, sides)
    tables: dict[str, TableDiff] = {}
    for name, (before, after) in sides.items():
        if before is not None and after is not None:
            if before.root == after.root:
                continue
            diff = TableDiff(name, before, after, fields, settings_changed(before, after))
        else:
            diff = TableDiff(name, before, after, fields)
        tables[name] = diff
    return DatabaseDiff(old, new, tables, old.metadata != new.metadata)


def _check_diff_fields(
    fields: Sequence[str], sides: dict[str, tuple[Table | None, Table | None]]
) -> None:
    """UsageError for a field that no table of the diff has on either side.

    A field some tables lack is fine (those compare the fields they have); one
    that none has is a typo, and comparing nothing would report no updates.
    """
    known: set[str] = set()
    for before, after in sides.values():
        for table in (before, after):
            if table is not None:
                known.update(table.root.key_fields)
                if table.schema is not None:
                    known.update(table.schema.names)
    unknown = [name for name in fields if name not in known]
    if unknown and sides:
        which = (
            f"table {next(iter(sides))!r} has no field {unknown[0]!r} in either version; its"
            if len(sides) == 1
            else f"no table of the diff has a field {unknown[0]!r} in either version; their"
        )
        raise UsageError(
            f"{which} fields: "
            f"{', '.join(sorted(known)) or '(none)'}: diff only fields the tables have "
            "(fields=None compares all)"
        )


def commit_counts(conn: Connection, entry: JournalEntry) -> ChangeCounts | None:
    """Records a committed version inserted, updated and deleted (None for a drop).

    Measured against its first parent: the previous entry, the source of a
    clone, or nothing for a database's first version. Reads only what differs.
    None too when the parent is gone (retention trimmed it and no tag keeps
    it): nothing to measure against.
    """
    from merkle.db.ancestry import kept_entry  # the parent may be kept by a tag only

    if entry.root is None:
        return None
    new = conn.open_db(entry.db, version=entry.version)
    try:
        if entry.forked_from is not None:
            source = entry.forked_from
            old = conn.open_db(source["db"], version=source["version"])
        elif entry.parent is not None and kept_entry(conn, entry.db, entry.parent).root is not None:
            old = conn.open_db(entry.db, version=entry.parent)
        else:
            old = None
    except NotFoundError:
        return None
    if old is None:
        total = ChangeCounts()
        for name in new.list_tables():
            total += count_changes(None, new._table(name))
        return total
    total = ChangeCounts()
    for table in diff_databases(new, old).tables.values():
        total += table.counts()
    return total
