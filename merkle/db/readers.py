"""Reader leases held by Database values: renewed in the background, released when done.

``conn.open_db(name, version=n, lease=True)`` writes a reader lease naming
the version's root, so garbage collection keeps every block of that version
while the value (or any value derived from it) is in use, even when
retention no longer keeps the version. One thread per connection renews all
held leases; a lease is released by ``Database.release()``, by leaving a
``with`` block, when the last value holding it is garbage-collected, or at
interpreter exit.

A lease that could not be renewed in time (the store failed, the process
stalled) is never silently trusted: the keeper takes a new lease and checks
that the version's entry is still in the journal (a collection that trimmed
it may have freed its blocks in between); if that fails the handle is
*lapsed*, and the next read of the value raises :class:`LeaseExpiredError`.

A read does not wait for the renewing thread to notice: it checks the lease's
own expiry (by this process's clock, less the skew margin), and a lease past
it is renewed or recovered there and then, before anything is read. A process
stalled past its lease (SIGSTOP, a paused VM, a laptop asleep) while a
collection elsewhere freed the version therefore gets LeaseExpiredError from
its next read, not whatever block read fails first; and a block found missing
in the middle of a leased read (the stall came after the check) is the same
LeaseExpiredError once the lease turns out lapsed (:class:`LeasedBlocks`).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import threading
import weakref
from collections.abc import Callable

from merkle.blocks.cid import CID
from merkle.blocks.store import BlockStore, MissingBlockError
from merkle.db.staging import StagedBlocks
from merkle.errors import MerkleError
from merkle.refs import Lease, LeaseExpiredError, LeaseManager

__all__ = ["LeasedBlocks", "ReaderLease", "ReaderLeaseKeeper", "leased_staging"]

_KEEPERS: weakref.WeakSet[ReaderLeaseKeeper] = weakref.WeakSet()

#: ``still_kept(db, version, root)``: whether the journal still holds that version.
StillKept = Callable[[str, int, str], bool]


class ReaderLease:
    """A handle on one held reader lease (shared by the Database values derived from it)."""

    def __init__(self, keeper: ReaderLeaseKeeper, lease: Lease) -> None:
        self._box = [lease]  # the current lease; renewals replace it
        self._keeper = keeper
        self.lapsed: str | None = None  # why the lease can no longer be relied on
        # One renewal, recovery or release at a time; reentrant, so that a release
        # from a signal handler that interrupted a renewal on its own thread goes on.
        self._renewing = threading.RLock()
        self._finalizer = weakref.finalize(self, keeper._release_box, self._box)

    @property
    def lease(self) -> Lease:
        return self._box[0]

    @property
    def released(self) -> bool:
        return not self._finalizer.alive

    def release(self) -> None:
        """Give the lease up (idempotent).

        Never while the lease is being renewed: a renewal checks that the lease
        object exists, then writes it again, and a release between the two was
        undone (the lease came back and kept its version from collections until
        it expired).
        """
        if not self._finalizer.alive:
            return  # released already, or inherited by a forked child (detached there)
        with self._renewing:
            self._finalizer()

    def check(self) -> None:
        """Raise :class:`LeaseExpiredError` if the lease lapsed (see the module doc).

        A lease past its own expiry (by this process's clock) is renewed, or
        recovered, now: the renewing thread may not have run since (a stalled
        process), and a collection may have passed the lease meanwhile.
        """
        keeper = self._keeper
        if self.lapsed is None and not self.released and not keeper.leases.is_valid(self.lease):
            keeper.renew(self)
        if self.lapsed is not None:
            raise self._lapsed_error()

    def block_missing(self, error: MissingBlockError) -> LeaseExpiredError | None:
        """A read under this lease found ``error``'s block missing: the LeaseExpiredError
        to raise instead when the lease lapsed (checked now, as :meth:`check` does), or
        None when it still holds (then the block is lost, not collected: damage)."""
        with contextlib.suppress(LeaseExpiredError):
            self.check()
        if self.lapsed is None:
            return None
        return self._lapsed_error(f"; block {error.cid} of it is gone already")

    def _lapsed_error(self, detail: str = "") -> LeaseExpiredError:
        lease = self.lease
        return LeaseExpiredError(
            f"the reader lease on database {lease.db!r} version {lease.version} lapsed "
            f"({self.lapsed}); garbage collection may have removed blocks of that "
            f"version{detail}: open it again (a version retention no longer keeps may be gone)"
        )


class LeasedBlocks(BlockStore):
    """The lake's blocks as a value opened with ``lease=True`` reads them.

    Reads are those of ``base`` (its store and node cache are shared); a block
    found missing while the value's lease has lapsed (by its own expiry, then
    not recovered) raises :class:`LeaseExpiredError` instead of
    :class:`MissingBlockError`: a collection freed the version under a reader
    that stalled past its lease.
    """

    def __init__(self, base: BlockStore, handle: ReaderLease) -> None:
        super().__init__(base.store, hash=base.hash_code, node_cache=base.node_cache)
        self._handle = handle

    def _missing(self, cid: CID) -> MerkleError:
        error = super()._missing(cid)
        assert isinstance(error, MissingBlockError)
        return self._handle.block_missing(error) or error


def leased_staging(blocks: BlockStore, handle: ReaderLease) -> StagedBlocks:
    """The staging area of a value read under ``handle`` (see :class:`LeasedBlocks`)."""
    return StagedBlocks(LeasedBlocks(blocks, handle))


class ReaderLeaseKeeper:
    """Grants reader leases and keeps the live ones renewed."""

    def __init__(
        self,
        leases: LeaseManager,
        *,
        ttl: float = 60.0,
        still_kept: StillKept | None = None,
    ) -> None:
        self.leases = leases
        self.ttl = ttl
        self._still_kept = still_kept
        self._held: weakref.WeakSet[ReaderLease] = weakref.WeakSet()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._wake = threading.Event()  # set on release and close: look again now
        self._thread: threading.Thread | None = None
        _KEEPERS.add(self)

    def hold(self, db: str, version: int, root: str) -> ReaderLease:
        """A new reader lease on ``db`` at ``version`` (whose root is ``root``)."""
        handle = ReaderLease(self, self.leases.acquire_reader(db, version, root, self.ttl))
        with self._lock:
            self._held.add(handle)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._renew_loop, name="merkle-reader-leases", daemon=True
                )
                self._thread.start()
        return handle

    def _release_box(self, box: list[Lease]) -> None:
        with contextlib.suppress(Exception):
            self.leases.release(box[0])
        self._wake.set()

    def _renew_loop(self) -> None:
        while True:
            # a quarter of the time the lease is valid to its holder (ttl less the margin)
            self._wake.wait(self.leases.timing.renewal_interval(self.ttl))
            self._wake.clear()
            if self._stop.is_set():
                with self._lock:
                    self._thread = None
                return
            with self._lock:
                handles = [h for h in self._held if not h.released and h.lapsed is None]
                if not handles:
                    self._thread = None  # decided under the lock: hold() starts a new one
                    return
            for handle in handles:
                self.renew(handle)

    def renew(self, handle: ReaderLease) -> None:
        """Renew one lease; recover it with a new one if it lapsed, or mark it lapsed.

        Called by the renewing thread and by a read that finds the lease past its
        expiry (:meth:`ReaderLease.check`): one at a time per lease.
        """
        with handle._renewing:
            if handle.lapsed is None and not handle.released:
                self._renew(handle)

    def _renew(self, handle: ReaderLease) -> None:
        lease = handle.lease
        try:
            handle._box[0] = self.leases.renew(lease, self.ttl)
            return
        except LeaseExpiredError as exc:
            reason = str(exc)
        except MerkleError as exc:
            if self.leases.is_valid(lease):
                return  # a failed renewal of a lease still valid: try again next round
            reason = f"renewing it failed: {exc}"
        self._recover(handle, lease, reason)

    def _recover(self, handle: ReaderLease, lease: Lease, reason: str) -> None:
        assert lease.db is not None
        assert lease.version is not None
        assert lease.root is not None
        try:
            fresh = self.leases.acquire_reader(lease.db, lease.version, lease.root, self.ttl)
        except MerkleError as exc:
            handle.lapsed = f"{reason}; a new lease could not be taken: {exc}"
            return
        # Lease first, then check the version is still kept (as open_db does).
        try:
            kept = self._still_kept is not None and self._still_kept(
                lease.db, lease.version, lease.root
            )
        except MerkleError:
            kept = False
        if not kept:
            self._release_box([fresh])
            handle.lapsed = f"{reason}; the version is no longer in the journal"
            return
        self._release_box([lease])
        handle._box[0] = fresh

    def close(self) -> None:
        """Release every held lease and stop renewing."""
        self._stop.set()
        self._wake.set()
        with self._lock:
            handles = list(self._held)
            thread = self._thread
        for handle in handles:
            handle.release()
        if thread is not None and thread is not threading.current_thread():
            thread.join()


def _release_all() -> None:
    """At interpreter exit: give up every held reader lease."""
    for keeper in list(_KEEPERS):
        keeper.close()


atexit.register(_release_all)


def _forget_after_fork() -> None:
    """In a forked child: the parent's reader leases are the parent's; neither the
    child's exit nor the finalizers of the handles it inherited may release them
    (merkle.db.forked)."""
    for keeper in list(_KEEPERS):
        for handle in list(keeper._held):
            handle._finalizer.detach()
            handle._renewing = threading.RLock()  # a renewal held it at the fork: not here
    _KEEPERS.clear()


os.register_at_fork(after_in_child=_forget_after_fork)
