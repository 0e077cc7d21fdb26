"""Reader leases held by Database values: renewed in the background, released when done.

``conn.open_db(name, version=n, lease=True)`` writes a reader lease naming
the version's root, so garbage collection keeps every block of that version
while the value (or any value derived from it) is in use, even when
retention no longer keeps the version. One thread per connection renews all
held leases; a lease is released by ``Database.release()``, by leaving a
``with`` block, or when the last value holding it is garbage-collected.
"""

from __future__ import annotations

import contextlib
import threading
import weakref

from merkle.refs import Lease, LeaseManager

__all__ = ["ReaderLease", "ReaderLeaseKeeper"]


class ReaderLease:
    """A handle on one held reader lease (shared by the Database values derived from it)."""

    def __init__(self, keeper: ReaderLeaseKeeper, lease: Lease) -> None:
        self._box = [lease]  # the current lease; renewals replace it
        self._keeper = keeper
        self._finalizer = weakref.finalize(self, keeper._release_box, self._box)

    @property
    def lease(self) -> Lease:
        return self._box[0]

    @property
    def released(self) -> bool:
        return not self._finalizer.alive

    def release(self) -> None:
        """Give the lease up (idempotent)."""
        self._finalizer()


class ReaderLeaseKeeper:
    """Grants reader leases and keeps the live ones renewed."""

    def __init__(self, leases: LeaseManager, *, ttl: float = 60.0) -> None:
        self.leases = leases
        self.ttl = ttl
        self._held: weakref.WeakSet[ReaderLease] = weakref.WeakSet()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def hold(self, db: str, version: int, root: str) -> ReaderLease:
        """A new reader lease on ``db`` at ``version`` (whose root is ``root``)."""
        handle = ReaderLease(self, self.leases.acquire_reader(db, version, root, self.ttl))
        with self._lock:
            self._held.add(handle)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._renew_loop, name="merkle-reader-leases", daemon=True
                )
                self._thread.start()
        return handle

    def _release_box(self, box: list[Lease]) -> None:
        with contextlib.suppress(Exception):
            self.leases.release(box[0])

    def _renew_loop(self) -> None:
        while not self._stop.wait(self.ttl / 4):
            with self._lock:
                handles = [h for h in self._held if not h.released]
            if not handles:
                return
            for handle in handles:
                with contextlib.suppress(Exception):
                    handle._box[0] = self.leases.renew(handle._box[0], self.ttl)

    def close(self) -> None:
        """Release every held lease and stop renewing."""
        self._stop.set()
        with self._lock:
            handles = list(self._held)
        for handle in handles:
            handle.release()
        if self._thread is not None:
            self._thread.join()
