"""The operations of a transaction, recorded so a commit that lost a race can replay them.

A :class:`~merkle.db.database.Database` value remembers every change made
since it was opened as a list of operations. When ``commit()`` finds that
another writer committed first, it re-applies them, in order, to the new
head: blind writes commute, and for a key both wrote, this later commit wins.
Replay is refused (``ConflictError``) when it would be wrong: a table this
transaction changes was dropped or re-created meanwhile (its ``uid``
differs), or a table it creates now exists.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
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
        if self.table in db.list_tables():
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
    table: str
    uid: str
    rows: pa.Table

    def apply(self, db: Database) -> Database:
        _same_table(db, self.table, self.uid)
        return _replayed(self.table, db, lambda: db.write(self.table, self.rows))


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

    def apply(self, db: Database) -> Database:
        _same_table(db, self.table, self.uid)
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

    def apply(self, db: Database) -> Database:
        _same_table(db, self.table, self.uid)
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
