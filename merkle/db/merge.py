"""Three-way merge of two database versions from their common ancestor.

``conn.merge(source, into)`` brings the changes ``source`` made since the
merge base into the head of ``into``, key by key, and commits the result
as one version of ``into`` whose journal entry names ``source`` as its
second parent (``merged_from``); several best merge bases (a criss-cross)
are merged into one virtual base first. The rules (also in ``doc/versions.md``):

* Rows: a key changed on one side only takes that change; changed the same
  way on both sides (both deleted, or both wrote equal records), it is
  taken once; changed differently, it is a conflict, which the resolver
  settles: ``"ours"`` keeps into's record, ``"theirs"`` takes source's,
  a callable gets ``{table, key, base, ours, theirs}`` (records as scan
  shows them, or None) and returns the record to keep (or None to delete), and ``"fail"`` raises
  :class:`~merkle.errors.MergeConflictError` listing every conflict.
* Tables: a side that did not change a table (same identity, settings,
  schema and records as the base) takes the other side's version of it, whatever that
  is (changed, created, dropped, re-created, re-keyed). A table created on
  both sides with the same key merges key by key from an empty base. A
  table changed on both sides merges key by key if both kept its identity
  and key; its metadata and families follow the side that changed them.
  Anything else (dropped on one side and changed on the other, re-created
  or re-keyed on one side and changed on the other, settings changed
  differently on both) is a table conflict: ``"ours"`` and ``"theirs"``
  pick a side's whole table, ``"fail"`` and callables raise. Metadata or
  families changed differently on both is a *settings* conflict: ``"ours"``
  and ``"theirs"`` take that side's metadata or families only, and the rows
  still merge key by key (nothing of the other side's rows is dropped).
* Database metadata follows the side that changed it; changed differently
  on both, it is a conflict like a table's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from merkle.db.ancestry import Lineage
from merkle.db.diff import rekeyed, settings_changed
from merkle.db.inputs import check_resolved
from merkle.db.landing import land
from merkle.db.mergerows import TableMerge, key_fields
from merkle.db.mergeschema import epoch_kept, fit_rows, merge_schemas
from merkle.db.ops import Op
from merkle.errors import ConflictError, MergeConflictError, NotFoundError, UsageError
from merkle.lazy import compute as pc
from merkle.refs import JournalConflictError, JournalEntry, WriterTicket
from merkle.tablets.diff import count_changes
from merkle.tablets.table import Table

if TYPE_CHECKING:
    from merkle.db.connection import Connection
    from merkle.db.database import Database

__all__ = ["RESOLVERS", "SETTINGS_CONFLICT_HINT", "TABLE_CONFLICT_HINT", "Resolver", "merge"]

Resolver = str | Callable[[dict[str, Any]], Mapping[str, Any] | None]
RESOLVERS = ("ours", "theirs", "fail")
#: Said with every table conflict: "ours"/"theirs" settle one by taking a whole table.
TABLE_CONFLICT_HINT = (
    "; a table conflict is settled by taking that side's whole table, so the other "
    "side's changes to that table are dropped: to keep both, make the table agree on "
    "both sides first (e.g. alter_schema to the same field types) and merge again"
)
#: Said with a conflict of a table's metadata or families, or of the database metadata:
#: "ours"/"theirs" settle it by taking that side's setting, not a whole table.
SETTINGS_CONFLICT_HINT = (
    "; a conflict of a table's metadata or families (or of the database metadata) is "
    "settled by taking that side's metadata or families only: the rows are still merged "
    "key by key"
)
_ATTEMPTS = 16
_DEPTH = 8  # criss-crosses nested below a merge's bases that a virtual base may merge


def _conflict_parts(conflicts: Mapping[str, Any], table_conflicts: Mapping[str, str]) -> str:
    """What conflicted, per table: ``t: 3 keys; u: schema of field 'x' ...``."""
    parts = [f"{name}: {rows.num_rows} keys" for name, rows in conflicts.items()]
    parts += [f"{name or 'database metadata'}: {why}" for name, why in table_conflicts.items()]
    return "; ".join(parts)


@dataclass(frozen=True)
class _MergedTable(Op):
    """A table the merge changed; a merge never replays (it is redone on a moved head)."""

    table: str

    def apply(self, db: Database) -> Database:
        raise ConflictError(f"merged table {self.table!r} cannot be replayed on another head")


class _Merge:
    """One attempt at merging theirs into ours (see the module doc for the rules)."""

    def __init__(
        self,
        base: Database,
        ours: Database,
        theirs: Database,
        resolve: Resolver,
        base_label: str | None = None,
    ) -> None:
        self.base, self.ours, self.theirs = base, ours, theirs
        # How errors name the base; a virtual one (merged bases) is named by its parts.
        self.base_label = base_label
        self.resolve = resolve
        self.result = ours
        self.conflicts: dict[str, pa.Table] = {}
        self.table_conflicts: dict[str, str] = {}
        #: The tables (``""``: the database metadata) whose conflict is of settings: a
        #: table's schema conflict returns before its settings are compared.
        self.settings_conflicts: set[str] = set()

    def _table(self, db: Database, name: str) -> Table | None:
        return db._table(name) if db.has_table(name) else None

    def _changed(self, base: Table | None, side: Table | None) -> bool:
        """Whether ``side`` changed the table since ``base``: identity, settings, schema
        (``settings_changed`` includes it: a schema-only change is a change to keep)
        or records."""
        if base is None or side is None:
            return (base is None) != (side is None)
        if base.root == side.root:
            return False
        return bool(settings_changed(base, side)) or count_changes(base, side).total > 0

    def run(self) -> Database:
        self._metadata()
        names = set(self.base.list_tables()) | set(self.ours.list_tables())
        for name in sorted(names | set(self.theirs.list_tables())):
            self._merge_table(name)
            self._keep_epoch(name)
        if self.conflicts or self.table_conflicts:
            raise self._error()
        return self.result

    def _error(self) -> MergeConflictError:
        parts = _conflict_parts(self.conflicts, self.table_conflicts)
        base = (
            f"{self.base.name!r} version {self.base.version}"
            if not self.base.dirty
            else f"the merge of {self.base_label or 'its several best merge bases'}"
        )
        return MergeConflictError(
            f"merging {self.theirs.name!r} version {self.theirs.version} into "
            f"{self.ours.name!r} version {self.ours.version} (base: {base}) found conflicts "
            f"({parts}); nothing was committed: resolve them with resolve='ours', "
            "'theirs' or a function" + self._hint(),
            {n: t for n, t in self.conflicts.items()},
            self.table_conflicts,
            settings_conflicts=self.settings_conflicts,
        )

    def _hint(self) -> str:
        """What ``"ours"``/``"theirs"`` would take for the table conflicts found."""
        whole = set(self.table_conflicts) - self.settings_conflicts
        return (TABLE_CONFLICT_HINT if whole else "") + (
            SETTINGS_CONFLICT_HINT if self.settings_conflicts & set(self.table_conflicts) else ""
        )

    def _side_wins(self, name: str, why: str, *, settings: bool = False) -> str | None:
        """Settle a table-level conflict: the winning side, or None (recorded as a conflict).

        ``settings``: a conflict of metadata or families only, which ``"ours"`` and
        ``"theirs"`` settle by that side's setting (the rows still merge key by key).
        """
        if self.resolve in ("ours", "theirs"):
            return str(self.resolve)
        self.table_conflicts[name] = why
        if settings:
            self.settings_conflicts.add(name)
        return None

    def _metadata(self) -> None:
        b, o, t = self.base.metadata, self.ours.metadata, self.theirs.metadata
        if t in (b, o):
            return
        why = "the metadata was changed on both sides"
        if o != b and self._side_wins("", why, settings=True) != "theirs":
            return
        self.result = self.result.alter_db_meta(lambda _old, new: new, t)

    def _keep_epoch(self, name: str) -> None:
        """The merged table's schema epoch at least both sides' (see :func:`epoch_kept`)."""
        if self.result.has_table(name):
            sides = (self._table(self.ours, name), self._table(self.theirs, name))
            kept = epoch_kept(self.result._table(name), *sides)
            if kept is not None:
                self._use_theirs(name, kept)

    def _use_theirs(self, name: str, theirs: Table | None) -> None:
        if theirs is None:
            if self.result.has_table(name):
                self.result = self.result.drop_table(name)
            return
        from merkle.db.tablestate import TableState as _TableState

        table = Table(self.result._ts, theirs.root)
        self.result = self.result._with_table(name, _TableState(table), _MergedTable(name))

    def _merge_table(self, name: str) -> None:
        b = self._table(self.base, name)
        o = self._table(self.ours, name)
        t = self._table(self.theirs, name)
        if not self._changed(b, t):
            return
        if not self._changed(b, o):
            self._use_theirs(name, t)
            return
        if o is None and t is None:
            return  # dropped on both sides
        if o is not None and t is not None and (b is None or _same_identity(b, o, t)):
            if b is not None or not rekeyed(o, t):
                self._rows(name, b, o, t)
                return
            why = "created on both sides with different keys"
        elif o is None or t is None:
            why = f"dropped on {'our' if o is None else 'their'} side and changed on the other"
        else:
            why = "re-created or re-keyed on one side and changed on the other"
        if self._side_wins(name, why) == "theirs":
            self._use_theirs(name, t)

    def _settings(self, name: str, b: Table | None, o: Table, t: Table) -> Table:
        """Ours' table with the settings theirs changed (families, metadata)."""
        table = self.result._table(name)
        for what, get in (("metadata", lambda x: x.root.meta), ("families", _families)):
            base_value = get(b) if b is not None else get(o)
            if get(t) == base_value or get(t) == get(o):
                continue
            if (
                get(o) != base_value
                and self._side_wins(name, f"its {what} changed on both sides", settings=True)
                != "theirs"
            ):
                continue
            table = (
                table.with_meta(t.root.meta)
                if what == "metadata"
                else table.with_families(t.root.families)
            )
        return table

    def _rows(self, name: str, b: Table | None, o: Table, t: Table) -> None:
        from merkle.db.tablestate import TableState as _TableState

        schemas = merge_schemas(b, o, t)
        if schemas.conflict is not None:
            if (
                self._side_wins(name, f"its schema cannot be merged: {schemas.conflict}")
                == "theirs"
            ):
                self._use_theirs(name, t)
            return
        table = self._settings(name, b, o, t)
        if schemas.ours is not None:
            table = table.alter_schema(schemas.ours)
        table = table.with_identities(schemas.ids, schemas.epoch)
        if not t.root.key_codec:  # theirs never held a record: no row to bring over
            if table is not self.result._table(name):
                self.result = self.result._with_table(name, _TableState(table), _MergedTable(name))
            return
        merge = TableMerge(b, o, t)
        version = self.result.version + 1
        taken_up, taken_del = merge.take_upserts, merge.take_deletes
        records: list[dict[str, Any]] = []
        deletes: list[Any] = []
        if len(merge.conflict_keys):
            if self.resolve == "theirs":
                taken_up, taken_del = merge.theirs_win()
            elif callable(self.resolve):
                for conflict in merge.conflict_records(b, o, t):
                    chosen = check_resolved(
                        self.resolve({"table": name, **conflict}), conflict["key"], o.key, name
                    )
                    if chosen is None:
                        deletes.append(conflict["key"])
                    else:
                        records.append({**chosen, **key_fields(o.key, conflict["key"])})
            elif self.resolve == "fail":
                self.conflicts[name] = merge.named_conflicts()
                return
        taken_up = fit_rows(taken_up, t, schemas.theirs)
        if len(taken_up) or len(taken_del):
            if not table.root.key_codec:
                table = Table(table.ts, replace(table.root, key_codec=t.root.key_codec))
            taken_del = taken_del.take(pc.sort_indices(taken_del))
            table = table.apply_changes(taken_up, taken_del, version)
        if table is not self.result._table(name):
            self.result = self.result._with_table(name, _TableState(table), _MergedTable(name))
        if records:
            self.result = self.result.write(name, records)
        if deletes:
            self.result = self.result.delete(name, deletes)


def _families(table: Table) -> dict[str, tuple[str, ...]]:
    return table.root.families


def _same_identity(b: Table, o: Table, t: Table) -> bool:
    return b.root.uid == o.root.uid == t.root.uid and not rekeyed(b, o) and not rekeyed(b, t)


def _check_resolve(resolve: Any) -> Resolver:
    if callable(resolve) or (isinstance(resolve, str) and resolve in RESOLVERS):
        return resolve  # type: ignore[no-any-return]
    raise UsageError(
        f"resolve must be 'ours', 'theirs', 'fail' or a function of a conflict, got {resolve!r}"
    )


def _open(conn: Connection, what: Database | str, role: str) -> Database:
    from merkle.db.database import Database

    if isinstance(what, Database):
        if not conn.same_lake(what._conn):
            raise UsageError(f"the merge {role} must be a database of {conn.uri}")
        if what.dirty:
            raise UsageError(f"the merge {role} has uncommitted changes: commit them first")
        return what
    if not isinstance(what, str):
        raise UsageError(f"the merge {role} must be a database name, got {type(what).__name__}")
    return conn.open_db(what)


def _base(conn: Connection, ours: Database, theirs: Database, base: Any) -> Database:
    from merkle.db.database import Database

    if base is None:
        lineage = Lineage(conn)
        found = lineage.merge_bases([ours.entry], [theirs.entry])
        if not found:
            raise NotFoundError(
                f"{ours.name!r} and {theirs.name!r} have no common ancestor in the journals "
                "(unrelated, or the history was trimmed); pass base= (a Database or a "
                f"version of {ours.name!r})"
            )
        if len(found) > 1:
            return _virtual_base(conn, lineage, found, 0)
        return conn.open_db(found[0].db, version=found[0].version)
    if isinstance(base, Database):
        return base
    if isinstance(base, int) and not isinstance(base, bool):
        return conn.open_db(ours.name, version=base)
    raise UsageError(f"base must be a Database or a version number, got {base!r}")


def _names(entries: list[JournalEntry]) -> str:
    return ", ".join(f"{e.db!r} version {e.version}" for e in entries)


def _virtual_base(
    conn: Connection,
    lineage: Lineage,
    bases: list[JournalEntry],
    depth: int,
    merge_bases: list[JournalEntry] | None = None,
) -> Database:
    """The merge of several best merge bases (a criss-cross merge), uncommitted: the
    base git's recursive strategy uses. Taking any one of them instead would make the
    other's changes look like changes of the side that merged it, so a change made
    after the criss-cross (a value set back) would be lost without a conflict.

    The bases are merged one by one, each pair from their own merge bases (merged
    the same way when several); a conflict between them raises MergeConflictError
    asking for ``base=``: there is no base value to merge from without a choice.
    ``merge_bases`` are the merge's own best bases (``bases`` when not nested), which
    the error names: those are what ``base=`` chooses between.
    """
    top = bases if merge_bases is None else merge_bases
    pairs = [(e.db, e.version) for e in top]
    merged = conn.open_db(bases[0].db, version=bases[0].version)
    done = [bases[0]]
    for entry in bases[1:]:
        other = conn.open_db(entry.db, version=entry.version)
        common = lineage.merge_bases(done, [entry])
        why = None
        if not common:
            why = "they have no common ancestor in the journals"
        elif len(common) > 1 and depth >= _DEPTH:
            why = f"their own merge bases nest more than {_DEPTH} criss-crosses deep"
        if why is None:
            below = (
                _virtual_base(conn, lineage, common, depth + 1, top)
                if len(common) > 1
                else conn.open_db(common[0].db, version=common[0].version)
            )
            try:
                merged = _Merge(below, merged, other, "fail", _names(common)).run()
            except MergeConflictError as e:
                raise MergeConflictError(
                    f"the merge has several best merge bases ({_names(top)}: each side "
                    "merged the other, a criss-cross), and merging them into one base "
                    f"conflicts ({_conflict_parts(e.conflicts, e.table_conflicts)}), which "
                    "resolve= does not settle; pass base= explicitly (a Database, or a version of "
                    "the database merged into) to say which to merge from",
                    e.conflicts,
                    e.table_conflicts,
                    settings_conflicts=e.settings_conflicts,
                    needs_base=True,
                    merge_bases=pairs,
                ) from e
        if why is not None:
            raise MergeConflictError(
                f"the merge has several best merge bases ({_names(top)}) that cannot be "
                f"merged into one: {why}; pass base= explicitly (a Database, or a version "
                "of the database merged into) to say which to merge from",
                needs_base=True,
                merge_bases=pairs,
            )
        done.append(entry)
    return merged


def _earlier_in_this_life(theirs: Database, ours: Database) -> bool:
    """Whether ``theirs`` is a version of ``ours``'s database at or before it, in the life
    ``ours`` belongs to: then an ancestor. A version from before a drop and create again
    is not (the database may have been created from an older root since), so it is
    merged as any other source."""
    if theirs.name != ours.name or theirs.version > ours.version:
        return False
    created = ours.entry.created
    return created is not None and theirs.version >= created


def merge(
    conn: Connection,
    source: Database | str,
    into: str,
    *,
    base: Database | int | None = None,
    resolve: Resolver = "fail",
    message: str | None = None,
    author: str | None = None,
) -> Database:
    """Merge ``source`` into the head of ``into`` and commit: the new head of ``into``.

    Nothing is committed when ``source`` has nothing ``into`` lacks (``into``
    is returned as it is) or when a conflict remains (MergeConflictError).
    """
    resolve = _check_resolve(resolve)
    if not isinstance(into, str):
        raise UsageError(f"merge into must be a database name, got {type(into).__name__}")
    for _ in range(_ATTEMPTS):
        ours = conn.open_db(into)
        theirs = _open(conn, source, "source")
        given = None if base is None else _base(conn, ours, theirs, base)  # checked first
        if _earlier_in_this_life(theirs, ours):
            return ours  # an ancestor: nothing of it is missing
        common = _base(conn, ours, theirs, None) if given is None else given
        if not common.dirty and common.root == theirs.root:
            return ours  # nothing new on their side
        result = _Merge(common, ours, theirs, resolve).run()
        text = message or f"merge {theirs.name} version {theirs.version} into {into}"
        try:
            return _commit(result, theirs, text, author)
        except JournalConflictError:
            continue  # into moved while merging: merge again onto the new head
    raise ConflictError(f"gave up merging into {into!r}: other writers kept committing to it first")


def _commit(result: Database, theirs: Database, message: str, author: str | None) -> Database:
    """Commit ``result`` (even with no changes of its own) with both parents recorded."""
    conn = result._conn
    root = result._save_root()

    def write(ticket: WriterTicket, first: bool) -> None:
        result._staging.flush_reachable([root], refresh_before=ticket.lease.start)

    def put() -> JournalEntry:
        return conn.refs.commit(
            result.name,
            result.version,
            str(root),
            author=author,
            message=message,
            merged_from={"db": theirs.name, "version": theirs.version},
        )

    return conn._database(land(conn, result.name, write, put))
