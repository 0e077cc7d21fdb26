"""One writer lease shared by a connection's commits.

Every commit must write its blocks under a writer lease (so GC spares them).
Taking a fresh lease per commit costs two durable writes and a delete; a
connection that commits often instead keeps one lease and reuses it, which
is safe because GC protects every block written or refreshed after the
oldest live writer lease started.

The lease must not starve the collector: before each commit the GC lock is
read, and if a collection holds it the lease is given up and a new one is
requested (which waits for the collection). A background thread renews the
lease while it is in use and gives it up after ``idle`` seconds without a
commit, or as soon as it sees the GC lock held and no commit running, so a
collection waits at most about ``idle`` seconds for this connection.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator

from merkle.refs import Lease, LeaseManager
from merkle.refs.gclock import read_lock

__all__ = ["WriterSession"]


class WriterSession:
    """Hands out the connection's writer lease to commits (see the module doc)."""

    def __init__(self, leases: LeaseManager, *, ttl: float = 120.0, idle: float = 2.0) -> None:
        self.leases = leases
        self.ttl = ttl
        self.idle = idle
        self._lock = threading.Lock()
        self._lease: Lease | None = None
        self._active = 0
        self._last_used = 0.0
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._closed = False

    def _gc_waiting(self) -> bool:
        lock = read_lock(self.leases.store)
        return lock is not None and lock.held(self.leases.timing)

    def _usable(self, lease: Lease | None) -> bool:
        # Keep a margin of half the TTL, so a commit never runs into the expiry.
        return lease is not None and self.leases.timing.holder_valid(lease.expires - self.ttl / 2)

    @contextlib.contextmanager
    def hold(self, db: str | None = None) -> Iterator[Lease]:
        """A valid writer lease for the duration of the block (shared with other commits)."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the connection is closed")
            lease = self._lease
            if lease is not None and (not self._usable(lease) or self._gc_waiting()):
                if self._active == 0:
                    self.leases.release(lease)
                self._lease = lease = None
            if lease is None:
                lease = self._lease = self.leases.acquire_writer(self.ttl, db=db)
            self._active += 1
            self._ensure_thread()
        try:
            yield lease
        finally:
            with self._lock:
                self._active -= 1
                self._last_used = time.monotonic()

    def _ensure_thread(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(
                target=self._maintain, name="merkle-writer-lease", daemon=True
            )
            self._thread.start()

    def _maintain(self) -> None:
        # Poll often enough that a waiting collector is not held up for long.
        interval = max(0.05, min(self.idle, self.ttl / 4) / 8)
        while not self._wake.wait(interval):
            with self._lock:
                lease = self._lease
                if lease is None:
                    return
                idle = self._active == 0 and time.monotonic() - self._last_used > self.idle
                with contextlib.suppress(Exception):
                    if self._active == 0 and (idle or self._gc_waiting()):
                        self.leases.release(lease)
                        self._lease = None
                        return
                    if not self._usable(lease):
                        self._lease = self.leases.renew(lease, self.ttl)

    def release_idle(self) -> None:
        """Give the lease up now if no commit is using it (before a collection on this
        connection, which would otherwise count this idle lease as a running writer)."""
        with self._lock:
            lease = self._lease
            if lease is None or self._active:
                return
            self._lease = None
        with contextlib.suppress(Exception):
            self.leases.release(lease)

    def close(self) -> None:
        """Give the lease up and stop the background thread."""
        with self._lock:
            self._closed = True
            lease, self._lease = self._lease, None
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
        if lease is not None:
            with contextlib.suppress(Exception):
                self.leases.release(lease)
