"""A table as one uncommitted transaction sees it: a materialised table plus buffered changes.

Writes to a table are buffered as sorted Arrow rows (or encoded keys to
delete) and folded into one pending batch only when the table is next read
or at commit, so a loop of small writes costs one batch, not one per call.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np
import pyarrow as pa

from merkle.lazy import compute as pc
from merkle.tablets.batch import BatchContent, fold
from merkle.tablets.fieldids import FieldId, identities
from merkle.tablets.keys import KeyCodec
from merkle.tablets.nodes import TableRoot
from merkle.tablets.patches import Patches
from merkle.tablets.rows import SortedRows, empty_keys
from merkle.tablets.table import Table

__all__ = ["TableChange", "TableState", "known_fields"]


@dataclass(frozen=True)
class TableChange:
    """A buffered write (sorted Arrow rows), delete (encoded keys) or field-level update
    (patches) on one table."""

    upserts: SortedRows | None = None
    deletes: pa.Array | None = None
    patches: Patches | None = None


@dataclass
class _Folded:
    """A state's buffered changes folded into one, with what decides whether a state that
    adds one more change may fold it onto this (see :meth:`TableState.folded`)."""

    content: BatchContent
    spec: tuple[str, str]  # key field and key codec the changes were folded with
    unpatched: bool  # no patches in the fold or the changes folded
    _holds_values: bool | None = None  # every upserts column holds a value (on first ask)

    def extendable(self, key_field: str) -> bool:
        """Whether one more change may be folded onto this fold alone: no patches, and
        every column of its upserts holds a value. Asked only when a state extends it:
        the check reads the fold's rows, which a bulk load's commit (a fold no state
        extends) keeps ungathered until each tablet's worker gathers its own."""
        if not self.unpatched:
            return False
        if self._holds_values is None:
            self._holds_values = _all_hold_values(self.content, key_field)
        return self._holds_values


@dataclass(frozen=True)
class TableState:
    """A table as this transaction sees it: a materialised table plus buffered changes.

    A state made by :meth:`with_change` keeps its parent's cache (``_prior``): once the
    parent has folded its changes, this state folds its one new change onto that fold
    instead of folding every change again, so a loop of read-modify calls in one
    transaction (each read folds) costs O(changes), not O(changes²).
    """

    table: Table
    changes: tuple[TableChange, ...] = ()
    modified: bool = True  # False for a table only loaded from the base version
    _cache: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    # The cache of the state this one extends by its last change (None: no such state).
    # Its dict, not the state: a long chain of states keeps no older state alive.
    _prior: dict[str, Any] | None = field(default=None, compare=False, repr=False)

    def with_change(self, table: Table, change: TableChange) -> TableState:
        """This state with ``change`` buffered, ``table`` being the table as the change
        left it (its codec chosen, its schema extended)."""
        return TableState(table, (*self.changes, change), _prior=self._cache)

    def current(self, version: int) -> Table:
        """The table with every buffered change folded in (computed once per value)."""
        if not self.changes:
            return self.table
        done = self._cache.get("table")
        if done is None:
            folded = self.folded()
            done = self.table.apply_changes(folded.upserts, folded.deletes, version, folded.patches)
            self._cache["table"] = done
        return done

    def live(self, keys: list[bytes]) -> np.ndarray:
        """Whether each sorted, unique encoded key has a record as this transaction sees
        it: in the table, or written by a buffered change, and not deleted by a later one.
        Reads key blocks, never a row; folds the buffered changes (once per value)."""
        live = self.table.live(keys)
        if not self.changes or not keys:
            return live
        content = self.folded()  # the newest change of a key decides, as in a read
        asked = pa.array(keys, type=pa.binary())
        written = pc.is_in(asked, value_set=content.upserts.keys.cast(pa.binary()))
        deleted = pc.is_in(asked, value_set=content.deletes.cast(pa.binary()))
        has = np.asarray(written.to_numpy(zero_copy_only=False), dtype=bool) | live
        gone = np.asarray(deleted.to_numpy(zero_copy_only=False), dtype=bool)
        result: np.ndarray = has & ~gone
        return result

    def folded(self) -> BatchContent:
        """Every buffered change folded into one: the newest change of each key wins
        (computed once per value).

        Folding is "newest wins", so ``fold([new, fold(older)])`` is
        ``fold([new, *older])``: when the parent state (:meth:`with_change`) has
        folded its changes, only the new change and that fold are folded. The
        result is the very content a fold of every change gives, down to the
        segment's columns and types, which :func:`~merkle.tablets.batch.fold`
        derives from every folded table, overwritten rows included (a column
        holding values only in overwritten rows is kept, null; a column whose
        values have two types becomes CBOR). The parent's fold shows those
        choices exactly when each of its columns still holds a value, and it has
        no patches (composed and laid over rows the same way); otherwise every
        change is folded, as without a parent.
        """
        done: _Folded | None = self._cache.get("folded")
        if done is None:
            done = self._fold()
            self._cache["folded"] = done
        return done.content

    def _fold(self) -> _Folded:
        spec = self.table.spec
        key_field, codec = spec.key_field, spec.codec
        kind = (key_field, codec.spec)
        prior = self._prior.get("folded") if self._prior is not None else None
        last = self.changes[-1] if self.changes else None
        if (
            last is not None
            and isinstance(prior, _Folded)
            and prior.spec == kind
            and last.patches is None
            and prior.extendable(key_field)
        ):
            contents = [_content(last, key_field, codec), prior.content]
        else:
            contents = [_content(c, key_field, codec) for c in reversed(self.changes)]
        content = fold(contents, key_field, codec)
        patched = content.patches is not None or any(c.patch_count for c in contents)
        return _Folded(content, kind, not patched)


def _content(change: TableChange, key_field: str, codec: KeyCodec) -> BatchContent:
    """One buffered change as a batch's content (nothing in the merged area, as
    :meth:`Table.apply_changes` decides that itself)."""
    keys = empty_keys(codec)
    if change.upserts is not None:
        rows = change.upserts
        return BatchContent(rows, np.zeros(len(rows), bool), keys, np.zeros(0, bool))
    none = np.zeros(0, bool)
    nothing = SortedRows(pa.table({key_field: pa.array([], type=codec.arrow_type)}), keys)
    if change.patches is not None:
        return BatchContent(nothing, none, keys, none, change.patches)
    assert change.deletes is not None
    dels = change.deletes
    return BatchContent(nothing, none, dels, np.zeros(len(dels), bool))


def _all_hold_values(content: BatchContent, key_field: str) -> bool:
    """Whether every column of a fold's upserts but the key holds a value (not only
    nulls): then the fold's columns and their types are what every folded change
    decided (see :meth:`TableState.folded`)."""
    table = content.upserts.table
    n = table.num_rows
    return all(
        table.column(i).null_count < n
        for i, name in enumerate(table.column_names)
        if name != key_field
    )


def known_fields(table: Table, base: TableRoot | None) -> Mapping[str, FieldId] | None:
    """The fields of a typed table's schema that its transaction's base version (``base``,
    the table's root there) has, with their identities (None for a table without a
    schema): recorded with a write so that its replay can tell a field a concurrent
    commit dropped, renamed, or dropped and added again from the field the write set
    (see :mod:`merkle.db.ops`). A field the transaction added itself is left out: its
    replay adds it again, born in the new head's epoch, which is no concurrent change."""
    if not table.root.typed or table.root.schema is None:
        return None
    born = set(identities(base).values()) if base is not None and base.typed else set()
    return MappingProxyType({n: i for n, i in identities(table.root).items() if i in born})
