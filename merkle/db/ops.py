"""The operations of a transaction, recorded so a commit that lost a race can replay them.

A :class:`~merkle.db.database.Database` value remembers every change made
since it was opened as a list of operations. When ``commit()`` finds that
another writer committed first, it re-applies them, in order, to the new
head: blind writes commute, and for a key both wrote, this later commit wins.
Replay is refused (``ConflictError``) when it would be wrong: a table this
transaction changes was dropped or re-created meanwhile (its ``uid``
differs), a table it creates now exists, or a write, update or upsert sets
a field that a concurrent commit dropped or renamed (replaying it would
bring the old field back holding only this transaction's values, as
``merge`` reports for the same case).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from merkle.errors import ConflictError, UsageError
from merkle.tablets.evolve import SchemaChange

if TYPE_CHECKING:
    from merkle.db.database import Database

__all__ = [
    "AlterDbMeta",
    "AlterFamilies",
    "AlterSchema",
    "AlterTableMeta",
    "BuildTable",
    "Compact",
    "CreateTable",
    "Delete",
    "DeleteWhere",
    "DropTable",
    "Op",
    "Update",
    "Upsert",
    "Write",
]


class Op:
    """One recorded change; ``apply`` makes it again on another database value."""

    def apply(self, db: Database) -> Database:
        raise NotImplementedError


def _same_table(db: Database, table: str, uid: str) -> None:
    found = db._table_uid(table)
    if found != uid:
        what = "dropped" if found is None else "dropped and created again"
        raise ConflictError(
            f"table {table!r} of database {db.name!r} was {what} by a concurrent commit "
            f"(now at version {db.version}); this transaction's changes to it cannot be "
            "replayed: open the database again and redo them"
        )


def _replayed(table: str, db: Database, action: Callable[[], Database]) -> Database:
    try:
        return action()
    except UsageError as exc:
        raise ConflictError(
            f"cannot replay a change to table {table!r} on version {db.version} of "
            f"database {db.name!r}, which a concurrent commit made: {exc}"
        ) from exc


def _gone_fields(
    db: Database, table: str, named: Iterable[str], known: frozenset[str] | None
) -> list[str]:
    """The fields of ``named`` that the table had when the operation was made (``known``)
    and that it has no longer on ``db``: dropped or renamed by a concurrent commit."""
    if known is None:
        return []
    root = db._table(table).root
    if not root.typed or root.schema is None:
        return []
    have = set(root.schema.names)
    return [name for name in dict.fromkeys(named) if name in known and name not in have]


def _check_fields_kept(
    db: Database, table: str, named: Iterable[str], known: frozenset[str] | None
) -> None:
    """ConflictError when the replayed operation sets a field the new head dropped or
    renamed: replaying would silently re-create the old field."""
    gone = _gone_fields(db, table, named, known)
    if gone:
        raise ConflictError(
            f"field {gone[0]!r} of table {table!r} was dropped or renamed by a concurrent "
            f"commit (database {db.name!r}, now at version {db.version}) and this "
            "transaction changes it: replaying the change would bring the old field back; "
            "open the database again and redo the change on the table's new schema"
        )


def _names_in_rows(rows: Any, non_null: bool) -> list[str]:
    """The field names rows (Arrow, a list of dicts, or a mapping key -> dict) set;
    with ``non_null`` only Arrow columns holding a value."""
    if isinstance(rows, pa.Table | pa.RecordBatch):
        return [
            name
            for name, column in zip(rows.column_names, rows.columns, strict=True)
            if not non_null or column.null_count < len(column)
        ]
    records = rows.values() if isinstance(rows, Mapping) else rows
    return list(dict.fromkeys(n for r in records if isinstance(r, Mapping) for n in r))


@dataclass(frozen=True)
class CreateTable(Op):
    table: str
    key: str | tuple[str, ...]
    key_codec: str | None
    families: Mapping[str, Any] | None
    metadata: Any
    limits: tuple[int, int, int, int]
    uid: str
    schema: pa.Schema | None = None
    schema_free: bool = False

    def apply(self, db: Database) -> Database:
        if db.has_table(self.table):
            raise ConflictError(
                f"table {self.table!r} was created in database {db.name!r} by a concurrent "
                f"commit (version {db.version}) while this transaction created it too"
            )
        return db._create_table(self)


@dataclass(frozen=True)
class DropTable(Op):
    table: str
    uid: str

    def apply(self, db: Database) -> Database:
        _same_table(db, self.table, self.uid)
        return db.drop_table(self.table)


@dataclass(frozen=True)
class Write(Op):
    """Whole records. ``known``: the table's fields when the write was made (None: not
    checked), to tell a field the new head dropped or renamed from a new one."""

    table: str
    uid: str
    rows: pa.Table
    known: frozenset[str] | None = None

    def apply(self, db: Database) -> Database:
        _same_table(db, self.table, self.uid)
        _check_fields_kept(db, self.table, _names_in_rows(self.rows, non_null=True), self.known)
        rows = self.rows
        # The rows hold every column of the schema they were made under: an empty one the
        # new head no longer has must not re-create the field.
        empty = _gone_fields(db, self.table, rows.column_names, self.known)
        if empty:
            rows = rows.drop_columns(empty)
        return _replayed(self.table, db, lambda: db.write(self.table, rows))


@dataclass(frozen=True)
class Delete(Op):
    table: str
    uid: str
    keys: tuple[Any, ...]

    def apply(self, db: Database) -> Database:
        _same_table(db, self.table, self.uid)
        return _replayed(self.table, db, lambda: db.delete(self.table, self.keys))


@dataclass(frozen=True)
class Update(Op):
    """Only the given fields of existing records: re-read on the new head when replayed."""

    table: str
    uid: str
    changes: Mapping[Any, Mapping[str, Any]]
    known: frozenset[str] | None = None  # the table's fields when made (see Write)

    def apply(self, db: Database) -> Database:
        _same_table(db, self.table, self.uid)
        _check_fields_kept(db, self.table, _names_in_rows(self.changes, False), self.known)
        return _replayed(self.table, db, lambda: db.update(self.table, self.changes))


@dataclass(frozen=True)
class Upsert(Op):
    """A conditional upsert: matched / not matched decided again on the new head."""

    table: str
    uid: str
    rows: Any
    when_matched: str
    when_not_matched: str
    condition: Callable[..., Any] | None
    known: frozenset[str] | None = None  # the table's fields when made (see Write)

    def apply(self, db: Database) -> Database:
        _same_table(db, self.table, self.uid)
        _check_fields_kept(db, self.table, _names_in_rows(self.rows, False), self.known)
        return _replayed(
            self.table,
            db,
            lambda: db.upsert(
                self.table,
                self.rows,
                when_matched=self.when_matched,
                when_not_matched=self.when_not_matched,
                condition=self.condition,
            ),
        )


@dataclass(frozen=True)
class DeleteWhere(Op):
    """A delete by predicate: what matches on the new head is deleted when replayed."""

    table: str
    uid: str
    predicate: Any

    def apply(self, db: Database) -> Database:
        _same_table(db, self.table, self.uid)
        return _replayed(self.table, db, lambda: db.delete_where(self.table, self.predicate))


@dataclass(frozen=True)
class AlterDbMeta(Op):
    fn: Callable[..., Any]
    args: tuple[Any, ...]

    def apply(self, db: Database) -> Database:
        return db.alter_db_meta(self.fn, *self.args)


@dataclass(frozen=True)
class AlterTableMeta(Op):
    table: str
    uid: str
    fn: Callable[..., Any]
    args: tuple[Any, ...]

    def apply(self, db: Database) -> Database:
        _same_table(db, self.table, self.uid)
        return db.alter_table_meta(self.table, self.fn, *self.args)


@dataclass(frozen=True)
class AlterFamilies(Op):
    table: str
    uid: str
    families: Mapping[str, Any]

    def apply(self, db: Database) -> Database:
        _same_table(db, self.table, self.uid)
        return db.alter_families(self.table, self.families)


@dataclass(frozen=True)
class AlterSchema(Op):
    table: str
    uid: str
    change: SchemaChange

    def apply(self, db: Database) -> Database:
        _same_table(db, self.table, self.uid)
        return _replayed(self.table, db, lambda: db._alter_schema(self.table, self.change))


@dataclass(frozen=True)
class Compact(Op):
    table: str
    uid: str

    def apply(self, db: Database) -> Database:
        _same_table(db, self.table, self.uid)
        return db.compact(self.table)


@dataclass(frozen=True)
class BuildTable(Op):
    table: str
    uid: str
    tablet_ids: Sequence[str]
    based_on: str  # CID of the table root the tablets were built from

    def apply(self, db: Database) -> Database:
        # The tablets replace the table's data: replaying over a concurrent change to
        # the same table would silently lose that change.
        _same_table(db, self.table, self.uid)
        if (db._table_root(self.table) or "") == self.based_on:
            return db.build_table(self.table, self.tablet_ids)
        raise ConflictError(
            f"table {self.table!r} of database {db.name!r} changed while build_table "
            f"was rebuilding it (now at version {db.version}); run the build again"
        )
