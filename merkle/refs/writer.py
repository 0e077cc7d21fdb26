"""The writer side of the GC handshake: one shared writer lease, and fenced commits.

Every commit writes its blocks under a writer lease so garbage collection
spares them. Taking a fresh lease per commit costs two durable writes and a
delete; a connection that commits often instead keeps one lease and reuses
it. A background thread renews the lease while a commit uses it and gives it
up after ``idle`` seconds without one, or as soon as it sees the GC lock
held and no commit running, so a collector waits at most about ``idle``
seconds for an idle connection. Leases still held when the interpreter exits
are released then (a script that forgets ``close()`` does not hold up the
next collection); a killed process's lease holds others up for its TTL plus
the skew margin, seconds.

**Fencing.** A collector waits for live writer leases only so long; it then
records the ones it goes on without in its lock generation (``passed``) and
appends a fence entry to every journal before it trims or deletes (see
``doc/refs.md``). A commit therefore runs as:

1. :meth:`WriterSession.hold` reads the GC lock (one read per commit) and
   hands out a :class:`WriterTicket`: the lease and the lock generation it saw
   not held;
2. the caller writes its blocks, checks the blocks it links from outside,
   and puts its journal entry;
3. :meth:`WriterSession.passed` reads the lock again. Unchanged, or a newer
   generation that did not pass this lease: no collection has deleted or
   trimmed anything since step 1, so the commit stands as it is (the common
   case, one listing). Otherwise the caller settles the commit with
   :func:`settle_passed_commit` and re-checks its blocks.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from merkle.errors import CommitIndeterminateError, UsageError
from merkle.refs.entry import JournalEntry, entry_key
from merkle.refs.errors import LockHeldError
from merkle.refs.gclock import newest_generation, read_generation, read_lock
from merkle.refs.journal import RefManager
from merkle.refs.leases import Lease, LeaseManager

__all__ = [
    "DEFAULT_WRITER_TTL",
    "WriterSession",
    "WriterTicket",
    "settle_passed_commit",
]

#: Writer leases last this long and are renewed while a commit runs; a killed
#: writer holds a collector up for this plus the skew margin.
DEFAULT_WRITER_TTL = 15.0

_SESSIONS: weakref.WeakSet[WriterSession] = weakref.WeakSet()


@dataclass(frozen=True)
class WriterTicket:
    """What one commit holds: the writer lease, and the GC lock generation it began under.

    ``lease`` is the lease as granted (its id and start never change);
    ``renewed``, where a thread keeps the lease renewed, gives it as last
    renewed, whose expiry is what :meth:`current` reports and a commit
    checks before it puts its entry.
    """

    lease: Lease
    generation: int
    renewed: Callable[[], Lease] | None = field(default=None, compare=False, repr=False)

    def current(self) -> Lease:
        """The lease as last renewed (the granted one where nothing renews it)."""
        return self.lease if self.renewed is None else self.renewed()


class WriterSession:
    """Hands out the connection's writer lease to commits (see the module doc)."""

    def __init__(
        self, leases: LeaseManager, *, ttl: float = DEFAULT_WRITER_TTL, idle: float = 2.0
    ) -> None:
        self.leases = leases
        self.ttl = ttl
        self.idle = idle
        self._lock = threading.Lock()
        self._lease: Lease | None = None
        # One entry per commit using a lease: its hold's token -> the lease id. A hold
        # registers with one assignment and gives back in its ``finally`` whatever it
        # registered, so an interrupt (Ctrl-C) at any point between leaves no use behind
        # (a count raised before the ``try`` was left raised for good: the lease then
        # stayed renewed while the process lived, and every collection waited for it).
        self._holders: dict[object, str] = {}
        self._retired: dict[str, Lease] = {}  # replaced leases still in use
        self._last_used = 0.0
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._closed = False
        _SESSIONS.add(self)

    def _usable(self, lease: Lease) -> bool:
        # Keep half the time the lease is valid to its holder (the TTL less the skew
        # margin) in hand, so a commit never runs into the expiry. Half the TTL itself
        # was more than that time where the margin is half the TTL or more: no lease was
        # ever usable, and every commit took a new one.
        timing = self.leases.timing
        return timing.holder_valid(lease.expires - timing.renewal_interval(self.ttl, 2))

    def _closed_error(self) -> UsageError:
        return UsageError(
            f"the connection to {self.leases.store.uri} is closed: connect again "
            "(merkle.connect) to write"
        )

    @contextlib.contextmanager
    def hold(self, db: str | None = None) -> Iterator[WriterTicket]:
        """A valid writer lease and the GC lock generation, for one commit.

        A new lease is acquired outside the session's lock: acquiring waits
        while a collection holds the GC lock, and the commits of other threads
        of this connection, and the thread renewing their lease, must not wait
        behind it (they did, so the collection waited for their leases to
        lapse, and their commits then failed).
        """
        token = object()
        try:
            with self._lock:
                if self._closed:
                    raise self._closed_error()
                lock = read_lock(self.leases.store)
                generation = -1 if lock is None else lock.generation
                held = lock is not None and lock.held(self.leases.timing)
                lease = self._lease
                if lease is not None and (
                    held or generation != lease.gc_generation or not self._usable(lease)
                ):
                    # A collection ran or runs since the lease was granted: it may have
                    # gone on without it, so this commit starts under a new one.
                    self._retire(lease)
                    lease = None
                if lease is not None:
                    self._holders[token] = lease.id
                    self._ensure_thread()
            if lease is None:
                lease = self._acquire(db, token)
                generation = lease.gc_generation
            yield WriterTicket(lease, generation, renewed=lambda: self._newest(lease))
        finally:
            self._give_back(token)

    def _give_back(self, token: object) -> None:
        """End the use a hold registered under ``token`` (none: nothing to do); release a
        retired lease whose last use it was."""
        # Unregistered before the lock is waited for (one atomic pop): a Ctrl-C during
        # that wait (other threads hold the lock across store reads) must not leave the
        # use registered. A retired lease left unreleased so is released by the
        # renewing thread once nothing uses it.
        lease_id = self._holders.pop(token, None)
        if lease_id is None:
            return
        with self._lock:
            self._last_used = time.monotonic()
            if not self._in_use(lease_id):
                retired = self._retired.pop(lease_id, None)
                if retired is not None:
                    self._release_quietly(retired)

    def _in_use(self, lease_id: str) -> bool:
        return lease_id in self._holders.values()

    def _acquire(self, db: str | None, token: object) -> Lease:
        """A new writer lease for one commit, in use under ``token`` (see :meth:`hold`).

        It becomes the session's lease unless another thread installed one
        meanwhile; then it serves this commit alone, as a retired lease does
        (renewed while used, released after).
        """
        lease = self.leases.acquire_writer(self.ttl, db=db)
        with self._lock:
            if self._closed:
                self._release_quietly(lease)
                raise self._closed_error()
            self._holders[token] = lease.id  # first: given back even if interrupted now
            if self._lease is None:
                self._lease = lease
            else:
                self._retired[lease.id] = lease
            self._ensure_thread()
        return lease

    def _newest(self, lease: Lease) -> Lease:
        """``lease`` as the renewing thread last renewed it (still handed out or retired)."""
        with self._lock:
            for held in (self._lease, self._retired.get(lease.id)):
                if held is not None and held.id == lease.id and held.expires > lease.expires:
                    return held
            return lease

    def _retire(self, lease: Lease) -> None:
        """Stop handing ``lease`` out; release it now, or when its last commit ends."""
        self._lease = None
        if self._in_use(lease.id):
            self._retired[lease.id] = lease
        else:
            self._release_quietly(lease)

    def _release_quietly(self, lease: Lease) -> None:
        with contextlib.suppress(Exception):
            self.leases.release(lease)

    def passed(self, ticket: WriterTicket) -> bool:
        """Whether a collection may have gone on without ``ticket``'s lease since it began.

        False when the GC lock is where the commit found it, or when the one
        collection that began since did not pass this lease (it then waits
        for it, and marks what the commit made once it is done).
        """
        store = self.leases.store
        newest = newest_generation(store)
        if newest == ticket.generation:
            return False
        if newest == ticket.generation + 1:
            state = read_generation(store, newest)
            if state is not None and not state.damaged:
                return ticket.lease.id in state.passed
        return True  # several collections since: the record of the first is gone

    def _ensure_thread(self) -> None:
        """Start the renewing thread unless one runs (called with ``_lock`` held)."""
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._maintain, name="merkle-writer-lease", daemon=True
            )
            self._thread.start()

    def _maintain(self) -> None:
        # Poll often enough that a waiting collector is not held up for long.
        every = self.leases.timing.renewal_interval(self.ttl)
        interval = max(0.05, min(self.idle, every) / 8)
        while not self._wake.wait(interval):
            with self._lock:
                if self._lease is None and not self._retired:
                    self._thread = None  # decided under the lock: hold() starts a new one
                    return
                for old in list(self._retired.values()):
                    if not self._in_use(old.id):  # its last use ended unreleased
                        del self._retired[old.id]
                        self._release_quietly(old)
                        continue
                    with contextlib.suppress(Exception):  # a lapse shows at commit time
                        if not self._usable(old):
                            self._retired[old.id] = self.leases.renew(old, self.ttl)
                lease = self._lease
                if lease is None:
                    continue
                active = self._in_use(lease.id)
                idle = not active and time.monotonic() - self._last_used > self.idle
                with contextlib.suppress(Exception):
                    if not active and (idle or self._gc_waiting()):
                        self._lease = None
                        self._release_quietly(lease)
                    elif not self._usable(lease):
                        self._lease = self.leases.renew(lease, self.ttl)

    def _gc_waiting(self) -> bool:
        lock = read_lock(self.leases.store)
        return lock is not None and lock.held(self.leases.timing)

    def release_idle(self) -> None:
        """Give the lease up now if no commit is using it (before a collection on this
        connection, which would otherwise count this idle lease as a running writer)."""
        with self._lock:
            lease = self._lease
            if lease is None or self._in_use(lease.id):
                return
            self._lease = None
        self._release_quietly(lease)

    def close(self) -> None:
        """Give the leases up and stop the background thread."""
        with self._lock:
            self._closed = True
            leases = [lease for lease in (self._lease, *self._retired.values()) if lease]
            self._lease = None
            self._retired.clear()
            thread = self._thread
        self._wake.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        for lease in leases:
            self._release_quietly(lease)


def _release_all() -> None:
    """At interpreter exit: give up every session's lease (daemon threads die silently)."""
    for session in list(_SESSIONS):
        session.close()


atexit.register(_release_all)


def _forget_after_fork() -> None:
    """In a forked child: the parent's sessions are the parent's (its exit must not
    release their leases, which the parent still holds; merkle.db.forked)."""
    _SESSIONS.clear()


os.register_at_fork(after_in_child=_forget_after_fork)


def settle_passed_commit(
    refs: RefManager, leases: LeaseManager, entry: JournalEntry, *, wait: float = 60.0
) -> None:
    """Decide the fate of a commit that a collection may have raced; raise if it cannot.

    Waits (up to ``wait`` seconds) for the collection to finish, then: the
    entry stands if it is at or above the retention floor (a slot there was
    never freed, so the put landed on a fresh slot, before the collection's
    fence) or if the entry after it was built on it (its ``prev`` names this
    entry's bytes). Otherwise it landed on a slot retention had freed, or its
    version was trimmed since; the two cannot be told apart, and a
    :class:`CommitIndeterminateError` says so. The caller still re-checks the
    blocks the entry reaches.
    """
    timing = leases.timing
    deadline = timing.now() + wait
    while True:
        lock = read_lock(leases.store)
        if lock is None or not lock.held(timing):
            break
        if timing.now() >= deadline:
            raise LockHeldError(
                f"the commit of version {entry.version} of database {entry.db!r} landed while "
                f"a garbage collection ({lock.holder}) was running without waiting for this "
                f"writer, and that collection did not finish within {wait:g}s; read the "
                "database's history to see whether the version is still there",
                holder=lock.holder,
                expires=lock.expires,
            )
        timing.pause(deadline, lock.expires + timing.margin)
    if entry.version >= refs.floor(entry.db):
        return
    following = refs._read(entry.db, entry.version + 1)
    if isinstance(following, JournalEntry) and following.prev == entry.digest:
        return
    raise CommitIndeterminateError(
        f"the commit to database {entry.db!r} was put at {entry_key(entry.db, entry.version)!r}, "
        "but a garbage collection went on without this writer (its process stalled or its "
        "clock is off) and retention has since removed that version; whether its changes are "
        "part of the history cannot be proven: read the head and apply them again if missing"
    )
