"""The exception hierarchy of merkle-db.

Every error the package raises on purpose is a :class:`MerkleError`. Where a
builtin fits, the subclass inherits it too, so ``except KeyError`` keeps
working for a missing database and ``except ValueError`` for a bad argument.
Messages name the thing that failed and say what to do about it.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = [
    "CommitIndeterminateError",
    "ConflictError",
    "IntegrityError",
    "MergeConflictError",
    "MerkleError",
    "NotFoundError",
    "SchemaError",
    "StorageError",
    "UsageError",
]


class MerkleError(Exception):
    """Root of every error raised by merkle-db."""

    def __str__(self) -> str:
        # KeyError quotes its argument in str(); keep messages readable everywhere.
        return str(self.args[0]) if self.args else self.__class__.__name__


class NotFoundError(MerkleError, KeyError):
    """A database, table, version, journal entry, key or block does not exist."""


class UsageError(MerkleError, ValueError):
    """The caller passed something invalid: a bad name, URI, key, value or option."""


class SchemaError(UsageError):
    """A value or column does not fit a table's schema, or a schema change breaks its rules.

    The message names the table, the field, the record's key and the value,
    and says how to make it fit (widen the field, declare it schema-free, or
    fix the data).
    """


class ConflictError(MerkleError):
    """A compare-and-set lost against another writer and could not be replayed."""


class MergeConflictError(ConflictError):
    """A merge found changes that it may not combine; nothing was committed.

    ``conflicts`` maps each table to a ``pyarrow.Table`` of the keys changed
    differently on both sides, with the columns ``key``, ``base``, ``ours``
    and ``theirs`` (structs of the records' fields; null where a side has no
    record). ``table_conflicts`` maps a table (or ``""`` for the database
    metadata) to why it cannot be merged key by key (dropped on one side and
    changed on the other, re-keyed, settings changed differently).
    ``settings_conflicts`` holds those of ``table_conflicts`` that are of
    settings only (a table's metadata or families, or the database metadata):
    ``resolve="ours"``/``"theirs"`` settles them by that side's settings, and
    the rows still merge key by key; the others take a side's whole table.

    ``needs_base`` is True when ``resolve=`` cannot settle the conflict at all:
    the merge has several best merge bases (a criss-cross) that cannot be
    merged into one, so ``base=`` must name the version to merge from;
    ``merge_bases`` then names them as ``(database, version)`` pairs, and
    ``conflicts``/``table_conflicts`` are those found merging them (if any).
    A caller (the command line) picks its advice from these, not the message.
    """

    def __init__(
        self,
        message: str,
        conflicts: dict[str, object] | None = None,
        table_conflicts: dict[str, str] | None = None,
        *,
        settings_conflicts: Iterable[str] = (),
        needs_base: bool = False,
        merge_bases: Iterable[tuple[str, int]] = (),
    ) -> None:
        super().__init__(message)
        self.conflicts = dict(conflicts or {})
        self.table_conflicts = dict(table_conflicts or {})
        self.settings_conflicts = frozenset(settings_conflicts) & set(self.table_conflicts)
        self.needs_base = needs_base
        self.merge_bases = tuple(merge_bases)


class CommitIndeterminateError(MerkleError):
    """The store could not say whether a commit happened; re-read the journal to learn it."""


class IntegrityError(MerkleError):
    """Stored bytes do not match their content address, or a stored node is malformed."""


class StorageError(MerkleError):
    """The storage backend failed.

    ``definite`` is True when the operation surely did not take effect (for
    example the request was refused before it reached the bucket) and False
    when it may have happened (a timeout after the request was sent).
    """

    def __init__(self, message: str, *, definite: bool = True) -> None:
        super().__init__(message)
        self.definite = definite
