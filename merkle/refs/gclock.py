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
while it is held, no new writer lease is granted. A collector that goes on
without waiting for some writer leases records their ids in its generation
(``passed``) before it deletes anything, so a writer can tell afterwards
whether its commit raced a sweep (see :mod:`merkle.refs.writer`).

A generation that cannot be decoded (a torn or foreign object) does not
stop the lake: it counts as held until its modification time plus
:data:`DAMAGED_LOCK_TTL`, then as expired, so the next collector replaces
it. ``break_gc_lock`` (``merkle gc --break-lock``) takes a new generation at
once, whatever the holder's expiry; the old holder sees the newer generation
before its next destructive step and stops.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from types import TracebackType
from typing import TYPE_CHECKING, Any

from merkle.blocks.codec import NODE_VERSION, decode_object, encode_node
from merkle.errors import IntegrityError, NotFoundError
from merkle.refs.errors import LeaseExpiredError, LockHeldError
from merkle.refs.timing import Timing
from merkle.storage.base import ObjectStore

if TYPE_CHECKING:
    from merkle.refs.leases import Lease

__all__ = [
    "DAMAGED_LOCK_TTL",
    "LOCK_PREFIX",
    "GCLock",
    "LockState",
    "WritersBusyError",
    "acquire_gc_lock",
    "break_gc_lock",
    "lock_key",
    "read_lock",
]

LOCK_PREFIX = "gc/lock/"
LOCK_TYPE = "merkle/gc-lock"
_DIGITS = 20
#: Seconds an undecodable lock generation counts as held after it was written: a
#: collector's own lock duration (``merkle.gc.collect.LOCK_TTL``), so that with the
#: skew margin it ends within a writer's default wait for the lock (60 s).
DAMAGED_LOCK_TTL = 30.0


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
    passed: tuple[str, ...] = ()  # writer lease ids the holder went on without
    damaged: bool = False  # read from an object that does not decode

    @property
    def key(self) -> str:
        return lock_key(self.generation)

    def held(self, timing: Timing, *, distrust_future: bool = False) -> bool:
        """Whether others must treat this generation as holding the lock.

        Bounded by what the observer saw (:meth:`Timing.observed_live`): a
        generation seen unchanged for longer than its stated duration is not
        held, whatever its holder's clock said (a live holder renews it).
        ``distrust_future`` (for a collector about to take the lock over, which
        is safe: the old holder stops at its next check) also ignores one whose
        start lies implausibly far in the observer's future. Writers never
        pass it: a live collector's lock must keep them out.
        """
        return not self.released and timing.observed_live(
            self.key, self.start, self.expires, distrust_future=distrust_future
        )


def lock_key(generation: int) -> str:
    """The key of lock generation ``generation``."""
    return f"{LOCK_PREFIX}{generation:0{_DIGITS}d}"


def _encode(state: LockState) -> bytes:
    node = {
        "type": LOCK_TYPE,
        "v": NODE_VERSION,
        "generation": state.generation,
        "holder": state.holder,
        "start": float(state.start),
        "expires": float(state.expires),
        "released": state.released,
    }
    if state.passed:
        node["passed"] = list(state.passed)
    return encode_node(node)


def _decode(data: bytes, key: str, generation: int) -> LockState:
    def damaged(problem: str) -> IntegrityError:
        return IntegrityError(
            f"GC lock object {key!r} is damaged: {problem}; delete it once no garbage "
            "collection is running"
        )

    node = decode_object(data, LOCK_TYPE, damaged)
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
    passed = node.get("passed", [])
    if not isinstance(passed, list) or not all(isinstance(p, str) for p in passed):
        raise damaged(f"field 'passed' holds {passed!r}")
    return LockState(
        node["generation"],
        node["holder"],
        node["start"],
        node["expires"],
        node["released"],
        tuple(passed),
    )


def _generations(store: ObjectStore) -> builtins.list[int]:
    found = []
    for info in store.list(LOCK_PREFIX):
        tail = info.key[len(LOCK_PREFIX) :]
        if len(tail) == _DIGITS and tail.isascii() and tail.isdigit():
            found.append(int(tail))
    return sorted(found)


def read_lock(store: ObjectStore) -> LockState | None:
    """The newest generation of the GC lock (held or not), or None if none exists.

    A generation that does not decode is returned as ``damaged``, held until
    its modification time plus :data:`DAMAGED_LOCK_TTL` (see the module doc).
    """
    while True:
        generations = _generations(store)
        if not generations:
            return None
        state = read_generation(store, generations[-1])
        if state is not None:
            return state
        # cleaned up by a newer holder just now: look again


def read_generation(store: ObjectStore, generation: int) -> LockState | None:
    """Generation ``generation`` of the lock; None if it no longer exists."""
    key = lock_key(generation)
    try:
        data = store.get(key)
    except NotFoundError:
        return None
    try:
        return _decode(data, key, generation)
    except IntegrityError:
        try:
            written = store.stat(key).mtime
        except NotFoundError:
            return None
        return LockState(
            generation,
            f"an unreadable lock object {key!r}",
            written,
            written + DAMAGED_LOCK_TTL,
            damaged=True,
        )


def newest_generation(store: ObjectStore) -> int:
    """The number of the newest lock generation, -1 if the lake never had a GC lock."""
    generations = _generations(store)
    return generations[-1] if generations else -1


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
        replaced: LockState | None = None,
    ) -> None:
        self.store = store
        self.state = state
        self._timing = timing
        self._live_writers = live_writers
        #: The generation taken over although its own times said it was held (its
        #: holder's clock ran ahead, or it stayed unchanged past its duration).
        self.replaced = replaced

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

    def record_passed(self, lease_ids: Sequence[str]) -> None:
        """Record (durably) the writer leases this holder goes on without.

        Called before the first destructive step that such a writer could
        race; a writer whose commit landed meanwhile finds its lease here and
        re-checks its commit (see :mod:`merkle.refs.writer`).
        """
        self.ensure_held()
        state = replace(self.state, passed=tuple(sorted({*self.state.passed, *lease_ids})))
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

    def wait_for_writers(
        self, timeout: float, notify: Callable[[Sequence[Lease]], None] | None = None
    ) -> None:
        """Wait until no writer lease is live, up to ``timeout`` seconds.

        Writers that register after the lock is visible withdraw at once, so
        in effect this waits for the writers that started before the lock
        to commit, release or expire (counting the skew margin). ``notify``
        is called with the leases waited for whenever that set changes.
        Raises :class:`WritersBusyError` naming them when the time is up.
        """
        timeout = self._timing.check_timeout(timeout, "the writer wait timeout")
        deadline = self._timing.now() + timeout
        told: set[str] = set()
        while True:
            writers = self._live_writers()
            if not writers:
                return
            if notify is not None and {w.id for w in writers} != told:
                told = {w.id for w in writers}
                notify(writers)
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
        if current is not None and current.held(timing, distrust_future=True):
            if timing.now() >= deadline:
                skew = timing.skew_note(current.start, current.expires)
                raise LockHeldError(
                    f"the GC lock is held by {current.holder} (generation "
                    f"{current.generation}) until {timing.describe(current.expires)} plus a "
                    f"{timing.margin:g}s skew margin{'; ' + skew if skew else ''}; another "
                    "garbage collection is running: retry later, or break the lock with "
                    "`merkle gc --break-lock` if that collector is surely gone",
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
        replaced = None
        if current is not None and not current.released and timing.observer_live(current.expires):
            replaced = current
        return GCLock(store, mine, timing, live_writers, replaced)


def break_gc_lock(store: ObjectStore, timing: Timing, holder: str) -> LockState | None:
    """Take the lock from whoever holds it and release it at once; the broken generation.

    For a collector that is surely gone (its process killed) when waiting
    for its lock to expire is not wanted: the new generation fences the old
    holder (it checks for a newer generation before each destructive step).
    Returns the generation that was broken, or None if none was held.
    """
    while True:
        current = read_lock(store)
        if current is None or not current.held(timing):
            return None
        start = timing.now()
        mine = LockState(current.generation + 1, holder, start, start, released=True)
        if store.put_if_absent(mine.key, _encode(mine)):
            return current
