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

An operation is recorded even when it changed nothing on the transaction's
base (an upsert whose rows all matched "skip", a ``delete_where`` that
matched nothing): on the new head it may change rows. A metadata function
whose result is the metadata there already is the exception: it is not
recorded (re-applied over a concurrent commit, it could only undo that
commit's change; see ``Database.alter_db_meta``). What an operation
keeps of the caller's input is copied when it is made
(:func:`~merkle.db.copies.snapshot`), so a caller that reuses its dicts and
lists cannot change what a replay writes.
A failure of a replayed operation, the user's own functions included
(``delete_where``, ``alter_db_meta``, ``alter_table_meta``, an upsert
``condition``), is a ``ConflictError`` naming the version replayed on.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from merkle.db.copies import snapshot
from merkle.errors import ConflictError, UsageError
from merkle.lazy import compute as pc
from merkle.tablets.evolve import SchemaChange
from merkle.tablets.fieldids import FieldId, identities
from merkle.tablets.schema import type_family

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
    "snapshot",
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


_REDO = (
    "this transaction was not committed: open the database again and redo its changes "
    "(or commit(rebase=False) to be told of any concurrent commit instead of replaying)"
)


class _FunctionFailedError(Exception):
    """Raised through merkle's code by a user function that failed on a replay (internal)."""

    def __init__(self, error: Exception) -> None:
        super().__init__(error)
        self.error = error


def _guarded(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn``, its failures marked so that the replay can tell them from merkle's own."""

    def call(*args: Any) -> Any:
        try:
            return fn(*args)
        except _FunctionFailedError:
            raise
        except Exception as exc:
            raise _FunctionFailedError(exc) from exc

    return call


def _replayed(
    table: str | None, db: Database, action: Callable[[], Database], what: str = "a change to"
) -> Database:
    """``action()``, its UsageError (the change does not fit the new head) or the failure of
    a user function it calls (made with :func:`_guarded`) as a ConflictError naming the
    replay, the version replayed on and what to do."""
    where = f"{what} table {table!r}" if table is not None else what
    try:
        return action()
    except _FunctionFailedError as failed:
        exc = failed.error
        raise ConflictError(
            f"cannot replay {where} on version {db.version} of database "
            f"{db.name!r}, which a concurrent commit made: its function raised "
            f"{type(exc).__name__}: {exc} on the data there; {_REDO}"
        ) from exc
    except UsageError as exc:
        raise ConflictError(
            f"cannot replay {where} on version {db.version} of database "
            f"{db.name!r}, which a concurrent commit made: {exc}; {_REDO}"
        ) from exc


def _gone_fields(
    db: Database, table: str, named: Iterable[str], known: Mapping[str, FieldId] | None
) -> list[str]:
    """The fields of ``named`` that the table had when the operation was made (``known``:
    name -> identity) and that it has no longer on ``db``: dropped or renamed by a
    concurrent commit, or dropped and added again (the name now holds another field)."""
    if known is None:
        return []
    root = db._table(table).root
    if not root.typed or root.schema is None:
        return []
    have = identities(root)
    return [
        name
        for name in dict.fromkeys(named)
        if name in known and (name not in have or have[name] != known[name])
    ]


def _check_fields_kept(
    db: Database, table: str, named: Iterable[str], known: Mapping[str, FieldId] | None
) -> None:
    """ConflictError when the replayed operation sets a field the new head dropped,
    renamed, or dropped and added again: replaying would silently re-create the old
    field, or put the old field's values into the new one."""
    gone = _gone_fields(db, table, named, known)
    if gone:
        root = db._table(table).root
        again = root.schema is not None and gone[0] in root.schema.names
        what = "dropped and added again" if again else "dropped or renamed"
        birth = identities(root)[gone[0]][0] if again else gone[0]
        if birth != gone[0]:  # another field was renamed onto the name
            what = f"renamed away, and field {birth!r} renamed to its name,"
        harm = (
            "put the old field's values into the new one" if again else "bring the old field back"
        )
        raise ConflictError(
            f"field {gone[0]!r} of table {table!r} was {what} by a concurrent "
            f"commit (database {db.name!r}, now at version {db.version}) and this "
            f"transaction changes it: replaying the change would {harm}; open the database "
            "again and redo the change on the table's new schema"
        )


def _replaced(db: Database, table: str, known: Mapping[str, FieldId] | None) -> list[str]:
    """The fields of ``known`` (name -> identity when the operation was made) whose name
    now holds another field on ``db``: dropped and added again, or another renamed to it."""
    root = db._table(table).root
    if known is None or not root.typed or root.schema is None:
        return []
    have = identities(root)
    return [name for name, ident in known.items() if name in have and have[name] != ident]


def _check_none_replaced(
    db: Database, table: str, known: Mapping[str, FieldId] | None, reader: str
) -> None:
    """ConflictError when a field the operation's transaction knew now names another
    field (dropped and added again, or another field renamed to its name): which fields
    a predicate or condition reads is not known, and on the new field it would decide
    by values it was not written for."""
    replaced = _replaced(db, table, known)
    if replaced:
        raise ConflictError(
            f"field {replaced[0]!r} of table {table!r} now names another field (dropped and "
            f"added again, or renamed to) after a concurrent commit (database {db.name!r}, "
            f"now at version {db.version}), and this transaction's operation may read it in "
            f"{reader}; {_REDO}"
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


def _retyped_empty(db: Database, table: str, rows: pa.Table, skip: list[str]) -> list[str]:
    """The columns of ``rows`` that hold no value and whose field the table has on ``db``
    with another type (not key fields)."""
    root = db._table(table).root
    if not root.typed or root.schema is None:
        return []
    schema = root.schema
    keys = set(db._table(table).key.fields)
    return [
        name
        for name, column in zip(rows.column_names, rows.columns, strict=True)
        if name not in skip
        and name not in keys
        and column.null_count == len(column)
        and name in schema.names
        and schema.field(name).type != column.type
    ]


def _check_key_types(db: Database, table: str, rows: pa.Table) -> None:
    """ConflictError when the recorded rows' keys are of another kind than the table's key
    fields on ``db``: a concurrent commit made the table's first write, which chose them
    (a key field's type cannot be changed, or made schema-free, afterwards)."""
    current = db._table(table)
    schema = current.root.schema
    if not current.root.typed or schema is None:
        return
    for name in current.key.fields:
        if name not in schema.names or name not in rows.column_names:
            continue
        want, have = schema.field(name).type, rows.schema.field(name).type
        if pa.types.is_null(have) or type_family(want) == type_family(have):
            continue
        raise _key_conflict(db, table, f"key field {name!r}", str(want), f"wrote {have} keys")


def _check_update_keys(db: Database, table: str, keys: Iterable[Any]) -> None:
    """ConflictError when an update's first key does not fit the table's key codec on
    ``db``: a concurrent first write chose the key type (as :func:`_check_key_types`)."""
    codec = db._table(table).codec
    first = next(iter(keys), None)
    if codec is None or first is None:
        return
    try:
        codec.normalize(first)
    except UsageError:
        raise _key_conflict(db, table, "the key", codec.spec, f"updates key {first!r}") from None


def _key_conflict(db: Database, table: str, field: str, want: str, did: str) -> ConflictError:
    return ConflictError(
        f"{field} of table {table!r} holds {want} keys on version {db.version} of database "
        f"{db.name!r}, which a concurrent commit made (it wrote the table's first records), "
        f"but this transaction {did}, and a key field's type cannot change (nor be made "
        "schema-free): this transaction was not committed; open the database again and "
        f"redo its changes with {want} keys"
    )


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
    known: Mapping[str, FieldId] | None = None

    def apply(self, db: Database) -> Database:
        _same_table(db, self.table, self.uid)
        _check_fields_kept(db, self.table, _names_in_rows(self.rows, non_null=True), self.known)
        _check_key_types(db, self.table, self.rows)
        rows = self.rows
        # The rows hold every column of the schema they were made under: an empty one the
        # new head no longer has must not re-create the field, and one whose field the new
        # head has with another type (dropped and added again) must not conflict: a
        # whole-record write that holds no value of a field is the same without the column.
        empty = _gone_fields(db, self.table, rows.column_names, self.known)
        empty += _retyped_empty(db, self.table, rows, empty)
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
    known: Mapping[str, FieldId] | None = None  # the table's fields when made (see Write)

    def apply(self, db: Database) -> Database:
        _same_table(db, self.table, self.uid)
        _check_fields_kept(db, self.table, _names_in_rows(self.changes, False), self.known)
        _check_update_keys(db, self.table, self.changes)
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
    known: Mapping[str, FieldId] | None = None  # the table's fields when made (see Write)

    def apply(self, db: Database) -> Database:
        _same_table(db, self.table, self.uid)
        _check_fields_kept(db, self.table, _names_in_rows(self.rows, False), self.known)
        if self.condition is not None:
            _check_none_replaced(db, self.table, self.known, "its condition")
        condition = _guarded(self.condition) if self.condition is not None else None
        return _replayed(
            self.table,
            db,
            lambda: db.upsert(
                self.table,
                self.rows,
                when_matched=self.when_matched,
                when_not_matched=self.when_not_matched,
                condition=condition,
            ),
            "an upsert into",
        )


@dataclass(frozen=True)
class DeleteWhere(Op):
    """A delete by predicate: what matches on the new head is deleted when replayed."""

    table: str
    uid: str
    predicate: Any
    known: Mapping[str, FieldId] | None = None  # the table's fields when made (see Write)

    def apply(self, db: Database) -> Database:
        _same_table(db, self.table, self.uid)
        _check_none_replaced(db, self.table, self.known, "its predicate")
        predicate = self.predicate
        if callable(predicate) and not isinstance(predicate, pc.Expression):
            predicate = _guarded(predicate)
        return _replayed(
            self.table, db, lambda: db.delete_where(self.table, predicate), "delete_where on"
        )


@dataclass(frozen=True)
class AlterDbMeta(Op):
    fn: Callable[..., Any]
    args: tuple[Any, ...]

    def apply(self, db: Database) -> Database:
        fn = _guarded(self.fn)
        return _replayed(None, db, lambda: db.alter_db_meta(fn, *self.args), "alter_db_meta")


@dataclass(frozen=True)
class AlterTableMeta(Op):
    table: str
    uid: str
    fn: Callable[..., Any]
    args: tuple[Any, ...]

    def apply(self, db: Database) -> Database:
        _same_table(db, self.table, self.uid)
        fn = _guarded(self.fn)
        return _replayed(
            self.table,
            db,
            lambda: db.alter_table_meta(self.table, fn, *self.args),
            "alter_table_meta of",
        )


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
    known: Mapping[str, FieldId] | None = None  # the table's fields when made (see Write)

    def apply(self, db: Database) -> Database:
        _same_table(db, self.table, self.uid)
        change = self.change
        named = {*change.drop, *change.rename, *change.widen, *change.nullable, *change.free}
        again = [n for n in _replaced(db, self.table, self.known) if n in named]
        if again:
            raise ConflictError(
                f"field {again[0]!r} of table {self.table!r} was dropped and added again by a "
                f"concurrent commit (database {db.name!r}, now at version {db.version}): this "
                f"transaction's alter_schema of the old field would change the new one; {_REDO}"
            )
        return _replayed(self.table, db, lambda: db._alter_schema(self.table, change))


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
