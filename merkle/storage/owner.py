"""Which process owns a thread pool: a forked child must not wait on its parent's.

``os.fork`` (multiprocessing's default start method on Linux before Python
3.14) copies a process with only the thread that forked: a child inherits its
parent's thread pools without their worker threads, so work handed to one
waits forever, and any lock a parent's thread held at the fork stays taken.
So the objects that hold threads (a store's I/O pool, a table store's
workers, a connection's lease threads) belong to the process that made them,
and a child that uses one gets a :class:`~merkle.errors.UsageError` saying to
open its own, instead of hanging (doc/api.md: processes each open their own
connection).

:data:`pid` is this process's id, kept current by an at-fork hook: checking
it costs an attribute look-up (about 0.05 µs), where ``os.getpid()`` is a
system call (0.1 to 0.7 µs on a loaded machine). A fork made by C code that
bypasses Python's at-fork hooks is not seen.
"""

from __future__ import annotations

import os

from merkle.errors import UsageError

__all__ = ["foreign_error", "pid"]

#: The id of this process (read it as ``owner.pid``: a name imported from here would
#: keep the parent's id in a forked child).
pid: int = os.getpid()


def _after_fork_in_child() -> None:
    global pid
    pid = os.getpid()


os.register_at_fork(after_in_child=_after_fork_in_child)


def foreign_error(what: str, made_in: int, remedy: str) -> UsageError:
    """The error of a use of ``what``, made in process ``made_in``, in a fork of it."""
    return UsageError(
        f"{what} was opened in process {made_in}, and this is process {pid}, a fork of "
        "it: the threads it works with did not follow the fork (using it here would wait "
        f"for them forever); {remedy}"
    )
