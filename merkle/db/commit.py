"""Committing a ``Database`` value: the compare-and-set loop, once per value.

:func:`commit_value` lands a value's changes as the database's next version,
replaying the recorded operations (:mod:`merkle.db.ops`) on the new head when
another writer committed first. A value commits once: a second call, from
this thread or another one racing it, waits for the first and gets its
result, instead of applying the changes again. A value derived from a
committed one continues from what that commit made
(:func:`continues_committed`), so the usual slip ``db.commit()`` (instead of
``db = db.commit()``) followed by more changes does not replay the
committed operations a second time.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, Protocol, TypeVar

if TYPE_CHECKING:
    from merkle.db.database import Database
    from merkle.refs import WriterTicket

__all__ = ["MAX_COMMIT_ATTEMPTS", "commit_value", "continues_committed"]

#: How often a commit replays on a moved head before giving up.
MAX_COMMIT_ATTEMPTS = 64

_P = ParamSpec("_P")
_R = TypeVar("_R")


class _Value(Protocol):
    _committed: Database | None


_S = TypeVar("_S", bound=_Value)


def continues_committed(
    method: Callable[Concatenate[_S, _P], _R],
) -> Callable[Concatenate[_S, _P], _R]:
    """A change method that, called on a value already committed, makes the change on the
    value its commit returned: the new value must not carry (and replay again) the
    operations that commit landed. The committed value itself is left as it is."""
    name = method.__name__

    @functools.wraps(method)
    def change(self: _S, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        committed = self._committed
        if committed is not None:
            result: _R = getattr(committed, name)(*args, **kwargs)
            return result
        return method(self, *args, **kwargs)

    return change


def commit_value(
    db: Database,
    message: str | None,
    author: str | None,
    rebase: bool,
    ticket: WriterTicket | None,
) -> Database:
    """``db.commit(...)`` (see its doc) for a value with changes: single-flight, so that
    committing one value from several threads at once makes one version."""
    with db._commit_lock:
        if db._committed is None:
            db._committed = _commit(db, message, author, rebase, ticket)
        return db._committed


def _commit(
    db: Database,
    message: str | None,
    author: str | None,
    rebase: bool,
    ticket: WriterTicket | None,
) -> Database:
    import random
    import time

    from merkle.blocks.store import MissingBlockError
    from merkle.db.landing import land_commit
    from merkle.db.noop import changes_nothing
    from merkle.errors import ConflictError
    from merkle.refs import JournalConflictError, LeaseExpiredError

    conn = db._conn
    try:
        unchanged = changes_nothing(db, db._tables)
    except MissingBlockError:
        # A collection removed the base version (others committed since, no reader lease):
        # the loop below finds the head moved and replays.
        unchanged = False
    if unchanged:
        return conn._database(db._entry)  # the data is as it was: no version
    name = db.name
    ops = db._ops  # replayed as recorded, on each new head
    for attempt in range(MAX_COMMIT_ATTEMPTS):
        try:
            entry = land_commit(db, author, message, ticket)
        except JournalConflictError as exc:
            conflict: ConflictError = exc
        except MissingBlockError as exc:
            # The root is built under the writer lease, after waiting out a running
            # collection: one that trimmed this transaction's base version (others
            # committed since) may have removed its blocks. That is a moved head.
            head = conn.refs.head(name)
            if head is None or head.version == db.version:
                raise
            conflict = JournalConflictError(name, db.version, head.version, str(exc))
        except LeaseExpiredError as exc:
            if ticket is not None:
                raise  # a bulk job's lease: its tasks' blocks cannot be written again here
            # The lease lapsed while the blocks were written (the process stalled): a
            # collection may have gone on without it and removed blocks written early,
            # whose bytes have left memory. Nothing was put: the transaction is built
            # again from its operations and lands under a new lease (on the same head,
            # rebase or not; on a moved one, as any replay).
            conflict = exc
            head = conn.refs.head(name)
            if head is not None and head.version == db.version:
                db = _replay(ops, conn._head_for_replay(db))
                continue
        else:
            return conn._database(entry)
        if not rebase:
            raise ConflictError(
                f"database {name!r} moved on from version {db.version} while this "
                f"transaction ran ({conflict}); commit(rebase=False) does not replay: "
                "open the database again and redo the changes"
            ) from conflict
        # Jittered backoff first, then the replay on the head found after it: sleeping
        # between the replay and the landing let a writer committing back to back move
        # the head every time, and this commit never landed.
        time.sleep(random.uniform(0, 0.002 * min(attempt + 1, 50)))
        db = _replay(ops, conn._head_for_replay(db))
    raise ConflictError(
        f"gave up committing to database {name!r} after {MAX_COMMIT_ATTEMPTS} "
        "attempts: other writers kept committing first; nothing was committed: commit "
        "again later, or make fewer, larger transactions (or write through one process)"
    )


def _replay(ops: tuple[Any, ...], head: Database) -> Database:
    """``head`` with the recorded operations made again, in order."""
    db = head
    for op in ops:
        db = op.apply(db)
    return db
