"""Reader and writer leases, and the handshake between writers and the GC lock.

A **reader lease** promises GC that a reader still uses one root of one
database version; a **writer lease** covers a writer from its first block
write to its commit, so GC does not sweep blocks that are written but not yet
committed. Each lease is one object ``leases/<id>`` (DAG-CBOR, type
``merkle/lease``) with a wall-clock expiry, read with the skew margin of
:mod:`merkle.refs.timing`: its holder stops trusting it ``margin`` seconds
early, GC keeps respecting it ``margin`` seconds late.

Writers and GC meet in a store-then-check handshake (``doc/refs.md``): a
writer first writes its lease, then looks at the GC lock, and withdraws
(deletes its lease and waits) if the lock is held; GC first takes the lock,
then waits for the writer leases it can see. On a linearizable store one of
the two always sees the other, so GC never sweeps under a writer it missed.
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Literal

from merkle.blocks.cid import CID
from merkle.blocks.codec import NODE_VERSION, decode_object, encode_node
from merkle.errors import IntegrityError, NotFoundError, UsageError
from merkle.refs.errors import LeaseExpiredError, LockHeldError
from merkle.refs.gclock import GCLock, LockState, acquire_gc_lock, break_gc_lock, read_lock
from merkle.refs.names import check_db_name
from merkle.refs.timing import DEFAULT_POLL_INTERVAL, DEFAULT_SKEW_MARGIN, Timing
from merkle.storage.base import ObjectStore

__all__ = [
    "DEFAULT_SKEW_MARGIN",
    "DEFAULT_WRITER_WAIT",
    "LEASE_PREFIX",
    "Lease",
    "LeaseKind",
    "LeaseManager",
]

LeaseKind = Literal["reader", "writer"]
LEASE_PREFIX = "leases/"
LEASE_TYPE = "merkle/lease"
#: Seconds a writer waits by default for a running garbage collection.
DEFAULT_WRITER_WAIT = 60.0
_KINDS: tuple[LeaseKind, ...] = ("reader", "writer")


@dataclass(frozen=True)
class Lease:
    """A granted lease. ``start`` and ``expires`` are epoch seconds by the holder's clock.

    Reader leases name the ``db``, ``version`` and ``root`` they protect;
    writer leases may name the ``db`` they write (informational only: GC
    protects every block a live writer may have written, whatever the db).
    ``gc_generation`` (not stored) is the newest GC lock generation the
    grant saw, not held (-1: none): a writer uses it to tell whether a
    collection started since.
    """

    id: str
    kind: LeaseKind
    start: float
    expires: float
    db: str | None
    version: int | None
    root: str | None
    holder: str
    gc_generation: int = field(default=-1, compare=False)

    @property
    def key(self) -> str:
        return LEASE_PREFIX + self.id


def _encode(lease: Lease) -> bytes:
    return encode_node(
        {
            "type": LEASE_TYPE,
            "v": NODE_VERSION,
            "id": lease.id,
            "kind": lease.kind,
            "start": float(lease.start),
            "expires": float(lease.expires),
            "db": lease.db,
            "version": lease.version,
            "root": None if lease.root is None else CID.parse(lease.root),
            "holder": lease.holder,
        }
    )


def _decode(data: bytes, key: str) -> Lease:
    def damaged(problem: str) -> IntegrityError:
        return IntegrityError(
            f"lease object {key!r} is damaged: {problem}; GC cannot tell what it protects, "
            "so it stops: delete the object once its holder is surely gone"
        )

    node = decode_object(data, LEASE_TYPE, damaged)
    if node.get("v") != NODE_VERSION:
        raise IntegrityError(
            f"lease object {key!r} has format version {node.get('v')!r}; this merkle-db "
            f"reads version {NODE_VERSION}: upgrade merkle-db"
        )
    lease_id = key[len(LEASE_PREFIX) :]
    checks: dict[str, Callable[[object], bool]] = {
        "id": lambda v: v == lease_id,
        "kind": lambda v: v in _KINDS and lease_id.startswith(f"{v}-"),
        "start": lambda v: isinstance(v, float),
        "expires": lambda v: isinstance(v, float),
        "db": lambda v: v is None or isinstance(v, str),
        "version": lambda v: v is None or (isinstance(v, int) and not isinstance(v, bool)),
        "root": lambda v: v is None or isinstance(v, CID),
        "holder": lambda v: isinstance(v, str),
    }
    for name, ok in checks.items():
        if name not in node or not ok(node[name]):
            raise damaged(f"field {name!r} is missing or holds {node.get(name)!r}")
    if node["kind"] == "reader" and (node["db"] is None or node["root"] is None):
        raise damaged("a reader lease without a database or root")
    return Lease(
        id=lease_id,
        kind=node["kind"],
        start=node["start"],
        expires=node["expires"],
        db=node["db"],
        version=node["version"],
        root=None if node["root"] is None else str(node["root"]),
        holder=node["holder"],
    )


def _default_holder() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


class LeaseManager:
    """Grant, renew, release and list leases in a lake; take the GC lock.

    ``clock`` (epoch seconds) and ``sleep`` are injectable so tests control
    time; ``skew_margin`` (default :data:`DEFAULT_SKEW_MARGIN`, 5 s) is the
    clock disagreement tolerated; ``holder`` names this process in leases
    (default ``host:pid``).
    """

    def __init__(
        self,
        store: ObjectStore,
        *,
        clock: Callable[[], float] = time.time,
        skew_margin: float = DEFAULT_SKEW_MARGIN,
        sleep: Callable[[float], None] = time.sleep,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        holder: str | None = None,
    ) -> None:
        self.store = store
        self.timing = Timing(clock, sleep, skew_margin, poll_interval)
        if holder is not None and not isinstance(holder, str):
            raise UsageError(f"holder must be a string, got {type(holder).__name__}")
        self.holder = holder or _default_holder()

    # -- granting ------------------------------------------------------------------

    def _grant(
        self,
        kind: LeaseKind,
        ttl: float,
        db: str | None,
        version: int | None,
        root: str | None,
    ) -> Lease:
        start = self.timing.now()
        lease = Lease(
            f"{kind}-{uuid.uuid4().hex}", kind, start, start + ttl, db, version, root, self.holder
        )
        if not self.store.put_if_absent(lease.key, _encode(lease)):
            raise IntegrityError(f"lease id {lease.id} already exists; uuid4 collided")
        return lease

    def acquire_reader(self, db: str, version: int, root: str, ttl: float) -> Lease:
        """Protect ``root`` (of ``db`` at ``version``) from GC for ``ttl`` seconds."""
        db = check_db_name(db)
        if not isinstance(version, int) or isinstance(version, bool) or version < 0:
            raise UsageError(f"version must be a non-negative integer, got {version!r}")
        if not isinstance(root, (str, CID)):
            raise UsageError(f"a root must be a CID string, got {type(root).__name__}")
        ttl = self.timing.check_ttl(ttl, "reader lease")
        return self._grant("reader", ttl, db, version, str(CID.parse(root)))

    def acquire_writer(
        self, ttl: float, *, db: str | None = None, wait_timeout: float = DEFAULT_WRITER_WAIT
    ) -> Lease:
        """A writer lease for ``ttl`` seconds, granted once no GC holds the lock.

        Writes the lease, then looks at the GC lock; while the lock is held,
        withdraws the lease and waits (up to ``wait_timeout`` seconds), then
        raises :class:`LockHeldError` naming the holder.
        """
        ttl = self.timing.check_ttl(ttl, "writer lease")
        if db is not None:
            db = check_db_name(db)
        deadline = self.timing.now() + self.timing.check_timeout(wait_timeout, "wait_timeout")
        while True:
            lease = self._grant("writer", ttl, db, None, None)
            try:
                lock = read_lock(self.store)
            except BaseException:
                self.store.delete(lease.key)  # withdraw: no lease without a checked lock
                raise
            if lock is None or not lock.held(self.timing):
                return replace(lease, gc_generation=-1 if lock is None else lock.generation)
            self.store.delete(lease.key)
            if self.timing.now() >= deadline:
                skew = self.timing.skew_note(lock.start, lock.expires)
                raise LockHeldError(
                    f"cannot start writing: a garbage collection holds the GC lock "
                    f"({lock.holder}, generation {lock.generation}, expiring "
                    f"{self.timing.describe(lock.expires)}, plus a {self.timing.margin:g}s "
                    f"skew margin{'; ' + skew if skew else ''}) and did not finish within "
                    f"{wait_timeout:g}s; retry later, or break the lock with "
                    "`merkle gc --break-lock` if that collector is surely gone",
                    holder=lock.holder,
                    expires=lock.expires,
                )
            self.timing.pause(deadline, lock.expires + self.timing.margin)

    # -- holding -------------------------------------------------------------------

    def is_valid(self, lease: Lease) -> bool:
        """Whether the holder may still rely on ``lease`` (expiry minus the margin)."""
        return self.timing.holder_valid(lease.expires)

    def ensure_valid(self, lease: Lease) -> None:
        """Raise :class:`LeaseExpiredError` unless the holder may still rely on ``lease``.

        A writer calls this right before committing: a writer whose lease
        expired must re-check that its blocks still exist before it commits.
        """
        if not self.is_valid(lease):
            raise LeaseExpiredError(
                f"{lease.kind} lease {lease.id} expired {self.timing.describe(lease.expires)} "
                f"(counting a {self.timing.margin:g}s skew margin); GC may have removed what "
                "it protected: take a new lease and check your blocks again"
            )

    def current(self, lease: Lease) -> Lease:
        """``lease`` as the lake holds it now: its expiry is the one garbage collection
        respects, whatever the copy given says.

        Several processes may renew one lease (a Spark job's driver and its
        tasks): a copy pickled when the job was planned keeps the expiry of
        then, while the lake's object has moved on (or, had nobody renewed
        it, lapsed: then so has the lease, whatever a copy says).
        :class:`LeaseExpiredError` if the object is gone (released, or removed
        by a collection after it expired).
        """
        try:
            stored = _decode(self.store.get(lease.key), lease.key)
        except NotFoundError:
            raise LeaseExpiredError(
                f"{lease.kind} lease {lease.id} was released or removed; take a new lease"
            ) from None
        if stored.id != lease.id or stored.start != lease.start:
            raise IntegrityError(f"lease object {lease.key!r} holds another lease ({stored.id})")
        return stored

    def renew(self, lease: Lease, ttl: float) -> Lease:
        """The same lease, expiring ``ttl`` seconds from now.

        Raises :class:`LeaseExpiredError` if it already expired (by the
        holder's view) or was released: an expired lease cannot be revived.
        """
        ttl = self.timing.check_ttl(ttl, f"{lease.kind} lease")
        self.ensure_valid(lease)
        if not self.store.exists(lease.key):
            raise LeaseExpiredError(
                f"{lease.kind} lease {lease.id} was released or removed; take a new lease"
            )
        renewed = replace(lease, expires=self.timing.now() + ttl)
        self.store.put(renewed.key, _encode(renewed))
        return renewed

    def lease_holders(self, kind: str | None = None) -> list[Lease]:
        """Every lease object of ``kind`` present, live or expired, oldest start first."""
        return sorted(self._all(kind), key=lambda lease: (lease.start, lease.id))

    def release(self, lease: Lease) -> None:
        """Give ``lease`` up (idempotent)."""
        self.store.delete(lease.key)

    # -- observing -----------------------------------------------------------------

    def _all(self, kind: str | None) -> list[Lease]:
        if kind is not None and kind not in _KINDS:
            raise UsageError(f"lease kind must be 'reader', 'writer' or None, got {kind!r}")
        prefix = LEASE_PREFIX + (f"{kind}-" if kind else "")
        keys = [info.key for info in self.store.list(prefix)]

        def load(key: str) -> Lease | None:
            try:
                return _decode(self.store.get(key), key)
            except NotFoundError:
                return None  # released while we listed

        return [lease for lease in self.store.map_bulk(load, keys) if lease is not None]

    def live(self, kind: str | None = None) -> list[Lease]:
        """Leases others must still respect (expiry plus the margin), oldest start first.

        ``kind`` is ``"reader"``, ``"writer"`` or None for both. A damaged
        lease object is an :class:`IntegrityError`: GC cannot know what it
        protects.
        """
        leases = [lease for lease in self._all(kind) if self.respected(lease)]
        return sorted(leases, key=lambda lease: (lease.start, lease.id))

    def respected(self, lease: Lease) -> bool:
        """Whether others must still respect ``lease`` (its expiry plus the margin).

        Bounded by what this process saw (:meth:`Timing.observed_live`): a
        lease seen unchanged for longer than its stated duration is over,
        whatever its holder's clock said; a writer lease whose start lies
        implausibly far in this machine's future is over at once (garbage
        collection fences off a writer it goes on without, so that is safe;
        a reader lease keeps its blocks, so it is only ever bounded).
        """
        return self.timing.observed_live(
            lease.key, lease.start, lease.expires, distrust_future=lease.kind == "writer"
        )

    def reap_expired(self) -> int:
        """Delete lease objects no longer respected (see :meth:`respected`); returns how many."""
        dead = [lease.key for lease in self._all(None) if not self.respected(lease)]
        self.store.delete_many(dead)
        return len(dead)

    # -- the GC lock ---------------------------------------------------------------

    def acquire_gc_lock(self, ttl: float, *, wait_timeout: float = 0) -> GCLock:
        """Take the GC lock for ``ttl`` seconds, waiting up to ``wait_timeout`` for a holder.

        Raises :class:`LockHeldError` when another collector holds it past
        the wait. Afterwards call :meth:`GCLock.wait_for_writers` before
        sweeping, and :meth:`GCLock.ensure_held` before each destructive step.
        """
        return acquire_gc_lock(
            self.store,
            self.timing,
            self.holder,
            ttl,
            wait_timeout,
            lambda: self.live("writer"),
        )

    def break_gc_lock(self) -> LockState | None:
        """Take the GC lock from its holder and release it (see :func:`break_gc_lock`)."""
        return break_gc_lock(self.store, self.timing, self.holder)
