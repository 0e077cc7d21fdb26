"""Reader leases in garbage collection: every live one is a root, unless its version is freed.

A reader (``open_db(..., lease=True)``, ``merkle.sync``, an export, a lease
recovery in :mod:`merkle.db.readers`) writes its lease first and checks
second that its version is still kept (in the journal, or by a tag), and
reads no block before that check. A collection trims before its last look at
reader leases (step 5 of :mod:`merkle.gc.collect`), so for a version it
trims it either sees the lease and marks it, or the reader's check fails and
the reader backs off. A lease written after that last look, for a version
that collection trims and sweeps, therefore belongs to a reader that will
never read it; but the lease stays live until released (about 65 s when the
reader was killed between its lease and its check), and marking it finds
blocks missing. That is no damage, and must not stop the collections that
start meanwhile.

So a lease is marked like a kept version (a block missing or corrupt stops
the collection: :class:`ReachabilityError`) unless both hold:

* its version is no longer kept: neither the journal nor a tag holds it
  with the lease's root (the very check the reader makes, which never turns
  true again: a trimmed slot never comes back, and a tag is only made for a
  version the journal still holds);
* a block it reaches is missing (not merely corrupt).

Then it is a lease of a version already freed: it is skipped and counted in
the report (``reader_leases_stale``). Skipping never frees a block a valid
reader needs: a reader whose check succeeded wrote its lease before the trim
of its version, so the collection that trimmed it saw the lease after the
trim and marked every block of it (all present then: a version's blocks are
only freed after it is trimmed), and every later collection marks them again
from the lease. Its blocks stay present, and its lease is never skipped.

A lease is marked on trial, on a layer over the marked set (:class:`_Layer`):
a walk that stops at a missing block has already taken nodes for marked whose
children it never reached, and the roots marked after it (heads that moved,
tags) would skip those subtrees. Only a walk that completes is merged.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from merkle.blocks.cid import CID
from merkle.blocks.walk import missing_below
from merkle.errors import IntegrityError, MerkleError, NotFoundError
from merkle.gc.mark import Marker, ReachabilityError
from merkle.refs import Lease

if TYPE_CHECKING:
    from merkle.db.connection import Connection
    from merkle.gc.fanout import Fanout, Roots

__all__ = ["ReaderRoots"]


class _Layer(set[bytes]):
    """Marked CIDs layered over ``base``: a member of ``base`` counts as one (a walk skips
    it), and what a walk adds stays in this layer until it is merged."""

    def __init__(self, base: set[bytes]) -> None:
        super().__init__()
        self.base = base

    def __contains__(self, item: object) -> bool:
        return item in self.base or set.__contains__(self, item)


class ReaderRoots:
    """The live reader leases of a lake as collection roots (see the module doc)."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.seen: set[str] = set()  # ids of the leases looked at (marked or skipped)
        self.marked = 0
        #: Leases of versions already freed, as "id (holder) on 'db' vN".
        self.stale: list[str] = []

    def mark(self, marker: Marker, fanout: Fanout) -> None:
        """Mark from every live reader lease not looked at yet (skipping stale ones)."""
        fresh = [
            lease
            for lease in self.conn.leases.live("reader")
            if lease.id not in self.seen and lease.root is not None
        ]
        self.seen.update(lease.id for lease in fresh)
        roots = [(CID.parse(_root(lease)), _where(lease)) for lease in fresh]
        if _trial(marker, fanout, roots) is None:
            self.marked += len(fresh)
            return
        # Some lease reaches a missing or corrupt block: find which, one at a time.
        for lease, root in zip(fresh, roots, strict=True):
            error = _trial(marker, fanout, [root])
            if error is None:
                self.marked += 1
            elif self._freed(lease, root[0], error):
                self.stale.append(f"{lease.id} ({lease.holder}) on {lease.db!r} v{lease.version}")
            else:
                raise error

    def _freed(self, lease: Lease, root: CID, error: ReachabilityError) -> bool:
        """Whether ``lease`` (whose mark failed with ``error``) is of a version already
        freed: no longer kept, and a block it reaches is missing."""
        assert lease.db is not None
        assert lease.version is not None
        try:
            if self.conn._still_kept(lease.db, lease.version, _root(lease)):
                return False
        except NotFoundError:
            pass  # no such journal (any more): not kept
        except MerkleError:
            return False  # the journal cannot be read: judge nothing, stop as before
        cause = error.__cause__
        while cause is not None:
            if isinstance(cause, NotFoundError):
                return True
            if isinstance(cause, IntegrityError):
                return False  # present but corrupt: damage, not a freed version
            cause = cause.__cause__
        # The walk that failed ran elsewhere (a Spark task) and left no cause: look here.
        try:
            return missing_below(self.conn.blocks, [root]) is not None
        except MerkleError:
            return False


def _root(lease: Lease) -> str:
    assert lease.root is not None
    return lease.root


def _where(lease: Lease) -> str:
    return f"reader lease {lease.id} on {lease.db!r} version {lease.version}"


def _trial(marker: Marker, fanout: Fanout, roots: Roots) -> ReachabilityError | None:
    """Mark ``roots`` into ``marker`` if every block they reach is there; else the error,
    with ``marker`` as it was (see :class:`_Layer`)."""
    if not roots:
        return None
    layer = _Layer(marker.marked)
    trial = Marker(marker.blocks, layer)
    try:
        fanout.mark(trial, roots)
    except ReachabilityError as exc:
        return exc
    marker.marked.update(layer)
    marker.nodes_read += trial.nodes_read
    return None
