"""Commits of tables built by many processes at once (bulk engines such as Spark).

A bulk writer does not stage its blocks in one transaction: its tasks, in
other processes, write tablets straight to the lake under one writer lease,
and a driver builds the new table from them (:mod:`merkle.tablets.bulk`) and
commits once. This module gives such a driver what a transaction has inside:

* :func:`committed_table` and :func:`current_table`: a database value's table,
* :func:`lake_tables`: a table store that writes straight to the lake under a
  writer lease, refreshing the timestamp of every block it re-uses that is
  older than the lease (as a commit's staged writes do),
* :func:`replace_table`: the database value with one table replaced by a
  table built elsewhere, recorded as an operation that replays on a moved
  head only while that table is still the one the build started from, and
  is otherwise a :class:`ConflictError` naming both versions.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from merkle.blocks.cid import CID
from merkle.blocks.store import BlockStore
from merkle.db.ops import Op, _same_table
from merkle.db.tablestate import TableState as _TableState
from merkle.errors import ConflictError
from merkle.refs import Lease
from merkle.tablets.fieldids import carry_identities
from merkle.tablets.nodes import TableRoot
from merkle.tablets.store import TableStore
from merkle.tablets.table import Table

if TYPE_CHECKING:
    from merkle.db.connection import Connection
    from merkle.db.database import Database

__all__ = ["committed_table", "current_table", "lake_tables", "replace_table", "table_root"]


class _LeasedBlocks(BlockStore):
    """The lake's blocks, written under a writer lease (see :func:`lake_tables`)."""

    def __init__(self, base: BlockStore, lease_start: float) -> None:
        super().__init__(base.store, hash=base.hash_code, node_cache=base.node_cache)
        self.lease_start = lease_start

    def put_many(
        self,
        blocks: Iterable[tuple[bytes, str | int]],
        *,
        refresh_before: float | None = None,
        early: bool = False,
    ) -> list[CID]:
        # Every write goes to the lake at once: ``early`` changes nothing here.
        return super().put_many(blocks, refresh_before=refresh_before or self.lease_start)

    def put_hashed(
        self, blocks: Iterable[tuple[CID, bytes]], *, refresh_before: float | None = None
    ) -> None:
        super().put_hashed(blocks, refresh_before=refresh_before or self.lease_start)


def lake_tables(conn: Connection, lease: Lease) -> TableStore:
    """A table store over ``conn``'s caches whose writes go straight to the lake.

    Every block written or found already present is durable when the write
    returns; a present block older than ``lease`` has its timestamp
    refreshed, so garbage collection spares it like a new one. The caller
    holds ``lease`` (valid) until the commit that names the blocks lands.
    """
    return conn.tables.with_blocks(_LeasedBlocks(conn.blocks, lease.start))


def committed_table(db: Database, name: str) -> Table:
    """Table ``name`` as committed in ``db``'s version, read through the connection's caches.

    NotFoundError when the version has no such table.
    """
    cid = db._base.tables.get(name)
    if cid is None:
        raise db._no_table(name)
    return Table.load(db._conn.tables, cid)


def current_table(db: Database, name: str) -> Table:
    """Table ``name`` as this (possibly uncommitted) database value sees it."""
    return db._table(name)


def table_root(db: Database, name: str) -> str:
    """The CID string of table ``name``'s root in this database value (staged if changed)."""
    state = db._state(name)
    if not state.modified and not state.changes:
        found = db._table_root(name)
        if found is not None:
            return found
    return str(state.current(db.version + 1).save())


@dataclass(frozen=True)
class ReplaceTable(Op):
    """Table ``table``'s data replaced by ``root``'s, built from its version at ``based_on``.

    ``based_on`` None: built for the table this transaction creates.
    """

    table: str
    uid: str
    root: TableRoot
    based_on: str | None  # CID string of the table root the build started from
    base_version: int
    made: tuple[str, ...] = ()  # CID strings of the tablets the build wrote

    def apply(self, db: Database) -> Database:
        _same_table(db, self.table, self.uid)
        if self.based_on is not None and table_root(db, self.table) != self.based_on:
            raise ConflictError(
                f"table {self.table!r} of database {db.name!r} changed after version "
                f"{self.base_version}, which this bulk write read, and before version "
                f"{db.version}, on which it would commit; its tablets were not committed "
                "(blocks already written are reclaimed by garbage collection): run it again"
            )
        current = db._state(self.table).current(db.version + 1).root
        if self.root.key_fields != current.key_fields:
            raise ConflictError(
                f"table {self.table!r} is keyed by {list(current.key_fields)} now, not by "
                f"{list(self.root.key_fields)} as when this bulk write started"
            )
        root = replace(
            current,
            key_codec=self.root.key_codec,
            schema=self.root.schema if current.typed else current.schema,
            data=self.root.data,
            pending=self.root.pending,
            count=self.root.count,
            size=self.root.size,
        )
        root = carry_identities(current, root)  # fields the bulk write added are new ones
        # The commit proves the new tablets still stored, under its writer lease.
        db._staging.add_foreign(CID.parse(cid) for cid in self.made)
        return db._with_table(self.table, _TableState(Table(db._ts, root)), self)


def replace_table(
    db: Database,
    name: str,
    table: Table,
    *,
    based_on: str | None,
    base_version: int,
    made: Iterable[str] = (),
) -> Database:
    """``db`` with the data of table ``name`` replaced by ``table``'s (blocks in the lake).

    The table keeps its identity, settings and metadata; its key codec,
    schema (a typed table's), tree, pending batches, count and size become
    ``table``'s. ``based_on`` is the
    CID string of the table root the bulk write started from (:func:`table_root`
    of the version ``base_version`` it read), or None for a table created in
    this transaction. ``made`` names the tablets the build wrote (CID
    strings): the commit proves them still stored. Commit the result as
    usual: on a moved head the replacement replays if the table there is
    still ``based_on``, and is a ConflictError naming both versions otherwise.
    """
    uid = db._state(name).table.root.uid
    op = ReplaceTable(name, uid, table.root, based_on, base_version, tuple(made))
    return op.apply(db)
