"""The GC lock: at most one garbage collector sweeps a lake at a time.

The lock is a series of *generations*, ``gc/lock/<n:020d>``, each created
with ``put_if_absent``; the holder is whoever created the newest generation,
while that generation is neither released nor expired. Taking the lock means
creating generation ``newest + 1``, which is allowed only once the newest is
released or expired by the observer's view (``expires + margin``), so two
breakers of an expired lock race for the same key and exactly one wins.
Renewing and releasing overwrite one's own generation. Older generations are
deleted by the next holder; because a deleted key could then be created
again by a stalled taker, every taker checks after creating its generation
that none newer exists, and gives way if one does.

Writers look at the newest generation too (see :mod:`merkle.refs.leases`):
while it is held, no new writer lease is granted.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from types import TracebackType
from typing import TYPE_CHECKING, Any

from merkle.blocks.codec import NODE_VERSION, decode_node, encode_node
from merkle.errors import IntegrityError, NotFoundError
from merkle.refs.errors import LeaseExpiredError, LockHeldError
from merkle.refs.timing import Timing
from merkle.storage.base import ObjectStore

if TYPE_CHECKING:
    from merkle.refs.leases import Lease

__all__ = [
    "LOCK_PREFIX",
    "GCLock",
    "LockState",
    "WritersBusyError",
    "acquire_gc_lock",
    "lock_key",
    "read_lock",
]

LOCK_PREFIX = "gc/lock/"
LOCK_TYPE = "merkle/gc-lock"
_DIGITS = 20


class WritersBusyError(LockHeldError):
    """Writer leases stayed live for the whole wait after the GC lock was taken."""


@dataclass(frozen=True)
class LockState:
    """One generation of the GC lock as stored."""

    generation: int
    holder: str
    start: float
    expires: float
    released: bool = False

    @property
    def key(self) -> str:
        return lock_key(self.generation)

    def held(self, timing: Timing) -> bool:
        """Whether others must treat this generation as holding the lock."""
        return not self.released and timing.observer_live(self.expires)


def lock_key(generation: int) -> str:
    """The key of lock generation ``generation``."""
    return f"{LOCK_PREFIX}{generation:0{_DIGITS}d}"


def _encode(state: LockState) -> bytes:
    return encode_node(
        {
            "type": LOCK_TYPE,
            "v": NODE_VERSION,
            "generation": state.generation,
            "holder": state.holder,
            "start": float(state.start),
            "expires": float(state.expires),
            "released": state.released,
        }
    )


def _decode(data: bytes, key: str, generation: int) -> LockState:
    def damaged(problem: str) -> IntegrityError:
        return IntegrityError(
            f"GC lock object {key!r} is damaged: {problem}; delete it once no garbage "
            "collection is running"
        )

    try:
        node = decode_node(data)
    except IntegrityError as exc:
        raise damaged(f"it does not decode ({exc})") from None
    if not isinstance(node, dict) or node.get("type") != LOCK_TYPE:
        raise damaged(f"it is not a {LOCK_TYPE} node")
    if node.get("v") != NODE_VERSION:
        raise IntegrityError(
            f"GC lock object {key!r} has format version {node.get('v')!r}; this merkle-db "
            f"reads version {NODE_VERSION}: upgrade merkle-db"
        )
    checks: dict[str, Callable[[Any], bool]] = {
        "generation": lambda v: v == generation,
        "holder": lambda v: isinstance(v, str),
        "start": lambda v: isinstance(v, float),
        "expires": lambda v: isinstance(v, float),
        "released": lambda v: isinstance(v, bool),
    }
    for name, ok in checks.items():
        if name not in node or not ok(node[name]):
            raise damaged(f"field {name!r} is missing or holds {node.get(name)!r}")
    return LockState(
        node["generation"], node["holder"], node["start"], node["expires"], node["released"]
    )


def _generations(store: ObjectStore) -> builtins.list[int]:
    found = []
    for info in store.list(LOCK_PREFIX):
        tail = info.key[len(LOCK_PREFIX) :]
        if len(tail) == _DIGITS and tail.isascii() and tail.isdigit():
            found.append(int(tail))
    return sorted(found)


def read_lock(store: ObjectStore) -> LockState | None:
    """The newest generation of the GC lock (held or not), or None if none exists."""
    while True:
        generations = _generations(store)
        if not generations:
            return None
        key = lock_key(generations[-1])
        try:
            return _decode(store.get(key), key, generations[-1])
        except NotFoundError:
            continue  # cleaned up by a newer holder just now: look again


class GCLock:
    """A held generation of the GC lock: renew it, check it, wait for writers, release it.

    Use as a context manager to release on exit. ``live_writers`` lists the
    live writer leases (given by the :class:`~merkle.refs.leases.LeaseManager`).
    """

    def __init__(
        self,
        store: ObjectStore,
        state: LockState,
        timing: Timing,
        live_writers: Callable[[], Sequence[Lease]],
    ) -> None:
        self.store = store
        self.state = state
        self._timing = timing
        self._live_writers = live_writers

    @property
    def generation(self) -> int:
        return self.state.generation

    @property
    def holder(self) -> str:
        return self.state.holder

    @property
    def expires(self) -> float:
        return self.state.expires

    def ensure_held(self) -> None:
        """Raise :class:`LeaseExpiredError` unless this lock is still ours to act on.

        Checks the holder's view of expiry (``margin`` early) and that no
        newer generation exists. Call it before each destructive step.
        """
        if self.state.released:
            raise LeaseExpiredError(f"GC lock generation {self.generation} was released")
        if not self._timing.holder_valid(self.state.expires):
            raise LeaseExpiredError(
                f"GC lock generation {self.generation} expired (by this holder's clock, with "
                f"the {self._timing.margin:g}s skew margin); stop and take the lock again"
            )
        newest = _generations(self.store)
        if newest and newest[-1] > self.generation:
            raise LeaseExpiredError(
                f"GC lock generation {self.generation} was taken over by generation "
                f"{newest[-1]}; stop: another garbage collector holds the lock"
            )

    def renew(self, ttl: float) -> None:
        """Extend the lock to ``ttl`` seconds from now; raises if it was already lost."""
        ttl = self._timing.check_ttl(ttl, "GC lock")
        self.ensure_held()
        state = replace(self.state, expires=self._timing.now() + ttl)
        self.store.put(state.key, _encode(state))
        self.state = state

    def release(self) -> None:
        """Give the lock up (idempotent; a lock already taken over is left alone)."""
        if self.state.released:
            return
        state = replace(self.state, released=True)
        newest = _generations(self.store)
        if newest and newest[-1] == self.generation:
            self.store.put(state.key, _encode(state))
        self.state = state

    def wait_for_writers(self, timeout: float) -> None:
        """Wait until no writer lease is live, up to ``timeout`` seconds.

        Writers that register after the lock is visible withdraw at once, so
        in effect this waits for the writers that started before the lock
        to commit, release or expire (counting the skew margin). Raises
        :class:`WritersBusyError` naming them when the time is up.
        """
        timeout = self._timing.check_timeout(timeout, "the writer wait timeout")
        deadline = self._timing.now() + timeout
        while True:
            writers = self._live_writers()
            if not writers:
                return
            if self._timing.now() >= deadline:
                names = ", ".join(f"{lease.id} ({lease.holder})" for lease in writers[:5])
                raise WritersBusyError(
                    f"{len(writers)} writer lease(s) still live after {timeout:g}s under the "
                    f"GC lock: {names}; retry the collection later",
                    holder=writers[0].holder,
                    expires=max(lease.expires for lease in writers),
                )
            wake = min(lease.expires for lease in writers) + self._timing.margin
            self._timing.pause(deadline, wake)

    def __enter__(self) -> GCLock:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"GCLock(generation={self.generation}, holder={self.holder!r})"


def acquire_gc_lock(
    store: ObjectStore,
    timing: Timing,
    holder: str,
    ttl: float,
    wait_timeout: float,
    live_writers: Callable[[], Sequence[Lease]],
) -> GCLock:
    """Take the GC lock, waiting up to ``wait_timeout`` seconds while another holds it."""
    ttl = timing.check_ttl(ttl, "GC lock")
    deadline = timing.now() + timing.check_timeout(wait_timeout, "wait_timeout")
    while True:
        current = read_lock(store)
        if current is not None and current.held(timing):
            if timing.now() >= deadline:
                raise LockHeldError(
                    f"the GC lock is held by {current.holder} (generation "
                    f"{current.generation}) until {current.expires:.3f} plus a "
                    f"{timing.margin:g}s skew margin; another garbage collection is running: "
                    "retry later",
                    holder=current.holder,
                    expires=current.expires,
                )
            timing.pause(deadline, current.expires + timing.margin)
            continue
        generation = 0 if current is None else current.generation + 1
        start = timing.now()
        mine = LockState(generation, holder, start, start + ttl)
        if not store.put_if_absent(mine.key, _encode(mine)):
            continue  # another taker won this generation: look again
        newer = [g for g in _generations(store) if g > generation]
        if newer:
            # Our key had been freed by cleanup and a newer generation exists:
            # step aside and look again.
            store.put(mine.key, _encode(replace(mine, released=True)))
            continue
        store.delete_many(lock_key(g) for g in _generations(store) if g < generation)
        return GCLock(store, mine, timing, live_writers)
