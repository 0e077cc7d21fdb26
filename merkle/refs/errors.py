"""Errors of the ref manager that carry the facts a caller needs to react.

Each is a subclass of the matching :mod:`merkle.errors` class, so callers
that only know the base classes keep working; the attributes let the
database layer reload, retry or report without parsing messages.
"""

from __future__ import annotations

from merkle.errors import CommitIndeterminateError, ConflictError, IntegrityError

__all__ = [
    "JournalConflictError",
    "JournalEntryDamagedError",
    "JournalGapError",
    "JournalIndeterminateError",
    "LeaseExpiredError",
    "LockHeldError",
]


class JournalConflictError(ConflictError):
    """A commit lost: the journal of ``db`` is not at ``expected`` but at ``found``.

    ``expected`` is None when the caller meant to create the database;
    ``found`` is None when the database does not exist.
    """

    def __init__(self, db: str, expected: int | None, found: int | None, detail: str = "") -> None:
        want = "absent (a create)" if expected is None else f"at version {expected}"
        have = "absent" if found is None else f"at version {found}"
        extra = f" ({detail})" if detail else ""
        super().__init__(
            f"commit to database {db!r} lost a race: expected the journal {want}, found it "
            f"{have}{extra}; reload the head and retry or replay your changes"
        )
        self.db = db
        self.expected = expected
        self.found = found


class JournalGapError(IntegrityError):
    """Entry ``missing`` of ``db`` is gone while a newer entry exists above it.

    Only outside damage deletes a journal entry between the retention floor
    and the head. Serving the entry below the gap as the head would show a
    shorter history, and committing into the gap would write a version that
    readers who find the real head never see, so both refuse.
    """

    def __init__(self, db: str, missing: int, key: str) -> None:
        super().__init__(
            f"the journal of database {db!r} is damaged: entry {key!r} (version {missing}) "
            f"is missing while version {missing + 1} exists above it (only outside damage "
            "deletes an entry); nothing was read past it or written into it: run "
            "`merkle verify`, then restore the entry from a backup or give up the versions "
            'below the gap, as doc/operations.md ("How GC stays safe") describes'
        )
        self.db = db
        self.missing = missing


class JournalEntryDamagedError(IntegrityError):
    """Journal object ``key`` of ``db`` (entry ``version``; None for the ``HEAD`` hint) is
    damaged: its bytes do not decode, or do not hold the entry its key names.

    The way out of a damaged entry (other than restoring it from a backup) is
    trimming: ``trim(db, version + 1)`` gives up the versions up to it. Trimming
    never removes the head, so a damaged head is first covered by a drop:
    ``drop_db`` (``merkle db drop``) writes its drop entry above it.
    """

    def __init__(self, db: str, version: int | None, key: str, problem: str) -> None:
        if not isinstance(version, int):  # None: the HEAD hint (a tag's copy checks its own)
            advice = "delete it: it is only a hint, and readers find the head without it"
        else:
            advice = (
                "restore it from a backup, or give up the versions up to it with "
                f"conn.refs.trim({db!r}, {version + 1}); if it is the head, which trimming "
                f"never removes, drop the database first (`merkle db drop {db}` writes its "
                'drop entry above it), as doc/operations.md ("Damaged lake objects") says'
            )
        super().__init__(f"journal object {key!r} is damaged: {problem}; {advice}")
        self.problem = problem
        self.db = db
        self.version = version
        self.key = key


class JournalIndeterminateError(CommitIndeterminateError):
    """The store could not say whether entry ``version`` of ``db`` was written.

    Read ``RefManager.get(db, version)`` later: if it holds ``root`` (and
    your author, message and time), the commit happened; if it holds
    something else, it did not; if it is still absent, the request may
    still land and the question stays open.
    """

    def __init__(self, db: str, version: int, root: str | None, cause: BaseException) -> None:
        super().__init__(
            f"the commit of version {version} of database {db!r} may or may not have been "
            f"written ({cause}); read version {version} of {db!r} to learn whether it holds "
            f"root {root}, and do not assume either outcome before that"
        )
        self.db = db
        self.version = version
        self.root = root


class LeaseExpiredError(ConflictError):
    """A lease or the GC lock expired (by its holder's clock and margin) or was taken over."""


class LockHeldError(ConflictError):
    """The GC lock is held by someone else and did not come free within the wait."""

    def __init__(self, message: str, *, holder: str, expires: float) -> None:
        super().__init__(message)
        self.holder = holder
        self.expires = expires
