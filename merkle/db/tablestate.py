"""A table as one uncommitted transaction sees it: a materialised table plus buffered changes.

Writes to a table are buffered as sorted Arrow rows (or encoded keys to
delete) and folded into one pending batch only when the table is next read
or at commit, so a loop of small writes costs one batch, not one per call.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np
import pyarrow as pa

from merkle.tablets.batch import BatchContent, fold
from merkle.tablets.fieldids import FieldId, identities
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


@dataclass(frozen=True)
class TableState:
    """A table as this transaction sees it: a materialised table plus buffered changes."""

    table: Table
    changes: tuple[TableChange, ...] = ()
    modified: bool = True  # False for a table only loaded from the base version
    _cache: dict[str, Table] = field(default_factory=dict, compare=False, repr=False)

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

    def folded(self) -> BatchContent:
        """Every buffered change folded into one: the newest change of each key wins."""
        spec = self.table.spec
        codec = spec.codec
        contents = []
        empty = pa.table({spec.key_field: pa.array([], type=codec.arrow_type)})
        for change in reversed(self.changes):
            if change.upserts is not None:
                rows = change.upserts
                none = np.zeros(len(rows), bool)
                contents.append(BatchContent(rows, none, empty_keys(codec), np.zeros(0, bool)))
            elif change.patches is not None:
                none = np.zeros(0, bool)
                nothing = SortedRows(empty, empty_keys(codec))
                contents.append(
                    BatchContent(nothing, none, empty_keys(codec), none, change.patches)
                )
            else:
                assert change.deletes is not None
                dels = change.deletes
                contents.append(
                    BatchContent(
                        SortedRows(empty, empty_keys(codec)),
                        np.zeros(0, bool),
                        dels,
                        np.zeros(len(dels), bool),
                    )
                )
        return fold(contents, spec.key_field, codec)


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
