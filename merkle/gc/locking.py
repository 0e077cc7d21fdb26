"""Taking and holding the GC lock for a collection, saying so when another collection holds it.

A collection that finds the lock held waits for it (up to its writer wait, 60 s
by default) before it gives up with :class:`~merkle.refs.LockHeldError`. That
wait is said when it starts, as the wait for writer leases is: who holds the
lock (``host:pid`` as its holder recorded it), until when, how long this
collection waits, and what to do when that holder is surely gone. (``merkle
gc`` once waited the whole minute in silence, which looked like a hang.) While
held it is renewed in the background, and a release that fails says what it
holds up without hiding why the collection stopped.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from merkle.errors import StorageError
from merkle.refs.gclock import GCLock, LockState, read_lock
from merkle.refs.timing import Timing

if TYPE_CHECKING:
    from merkle.db.connection import Connection

__all__ = ["held_gc_lock", "lock_wait_notice", "take_gc_lock"]


def take_gc_lock(conn: Connection, ttl: float, wait: float, tell: Callable[[str], None]) -> GCLock:
    """The GC lock for ``ttl`` seconds, waiting up to ``wait`` seconds for another
    holder; ``tell`` hears, before the wait, who holds it and how long this waits."""
    timing = conn.leases.timing
    if wait > 0:
        current = read_lock(conn.store)
        if current is not None and current.held(timing, distrust_future=True):
            tell(lock_wait_notice(current, timing, wait))
    return conn.leases.acquire_gc_lock(ttl, wait_timeout=wait)


def lock_wait_notice(lock: LockState, timing: Timing, wait: float) -> str:
    """What a collection waiting for ``lock`` says as the wait starts."""
    return (
        f"waiting for the GC lock (at most {wait:g}s): another garbage collection holds it, "
        f"{lock.holder} (generation {lock.generation}), until "
        f"{timing.describe(lock.expires)} unless it renews it, plus a {timing.margin:g}s "
        "skew margin; if that collector is surely gone (its process is dead), stop this "
        "one and run `merkle gc --break-lock`"
    )


@contextlib.contextmanager
def held_gc_lock(lock: GCLock, ttl: float, timing: Timing) -> Iterator[GCLock]:
    """Keep renewing ``lock`` in the background; release it at the end."""
    stop = threading.Event()

    def renew() -> None:
        while not stop.wait(timing.renewal_interval(ttl, 3)):  # of its valid time
            with contextlib.suppress(Exception):
                lock.renew(ttl)

    thread = threading.Thread(target=renew, name="merkle-gc-lock", daemon=True)
    thread.start()
    try:
        yield lock
    except BaseException as exc:
        stop.set()
        thread.join()
        _release(lock, timing, exc)
        raise
    stop.set()
    thread.join()
    _release(lock, timing, None)


def _release(lock: GCLock, timing: Timing, failure: BaseException | None) -> None:
    """Release ``lock``; if that fails, say what it holds up, without hiding why GC stopped.

    A lock that cannot be written (a full disk, a lost connection) stays
    until it expires, as a killed collector's does: writers wait for it.
    When the collection itself failed (``failure``), its error is the one
    raised, with this as a note; otherwise the release error is.
    """
    try:
        lock.release()
    except StorageError as exc:
        problem = (
            f"the GC lock (generation {lock.generation}) could not be released ({exc}): "
            f"writers wait for it until it expires, "
            f"{timing.describe(lock.expires + timing.margin)}, or until "
            "`merkle gc --break-lock` ends it"
        )
        if failure is None:
            raise StorageError(problem) from exc
        failure.add_note(problem)
