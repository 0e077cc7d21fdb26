"""A connection belongs to the process that opened it; a forked child opens its own.

A child forked from a process (``os.fork``, or multiprocessing's ``fork``
start method) inherits its connections without their threads: the store's
I/O pool and the table workers have no worker threads left, so work handed
to them waits forever, and the writer lease's renewing thread and the reader
leases' keeper are gone, perhaps holding a lock at the fork. doc/api.md says
processes each open their own connection: a use of a parent's connection in
a child (every use of its journals, and every commit) raises the
:class:`~merkle.errors.UsageError` made here, where it hung before. The
check compares the pid recorded at ``connect`` with :data:`merkle.storage.owner.pid`
(an attribute look-up; ``os.getpid()`` is a system call).

The parent's leases are not the child's either: a child that released them
(its ``atexit`` hooks and lease finalizers, run at its exit or when it drops
a value) would let a collection delete blocks its parent still reads or
writes. So at the fork, the child forgets them (at-fork hooks of
:mod:`merkle.refs.writer` and :mod:`merkle.db.readers`, beside the exit hooks
they undo), and ``Connection.close()`` in a child only marks the copy closed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from merkle.db.closed import closed_error
from merkle.errors import UsageError
from merkle.storage import owner

if TYPE_CHECKING:
    from merkle.db.connection import Connection

__all__ = ["unusable"]


def unusable(conn: Connection) -> UsageError:
    """The error of a use of ``conn`` when it is closed or belongs to another process."""
    if conn.closed:
        return closed_error(conn.uri)
    return owner.foreign_error(
        f"this connection (to {conn.uri})",
        conn._pid,
        f"a forked process must open its own: merkle.connect({conn.uri!r}) in the child "
        "(or start the child with multiprocessing's 'spawn' or 'forkserver' method and "
        "connect there)",
    )
