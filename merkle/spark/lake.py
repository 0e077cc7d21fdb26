"""What Spark tasks share within one Python worker: open lakes and held leases.

Nothing unpicklable travels to executors: a task gets a :class:`LakeRef`
(the URI and store options) and opens the lake itself. Spark reuses Python
workers between tasks, so connections (with their decoded-node and segment
caches) are kept per worker process and per lake, and closed at exit.

Leases: the driver takes one reader or writer lease per query; every task
that reads or writes under it renews it while it runs (a background thread
per worker renews all leases some running task holds), so the lease lives as
long as the job does and expires ``ttl`` seconds after its last task. The
driver of ``merkle.spark.write`` and ``delete`` holds its writer lease the same
way (:func:`hold_lease`) from the moment it takes it to the end of the job, so
that lease can be as short as an ordinary writer's: it lapses ``ttl`` seconds
after the driver dies, not ``ttl`` seconds after the last task of a long job.
"""

from __future__ import annotations

import atexit
import contextlib
import threading
from collections.abc import Iterator

from merkle.db.connection import Connection, connect
from merkle.errors import UsageError
from merkle.refs import Lease, LeaseExpiredError
from merkle.spark.options import LakeRef

__all__ = ["hold_lease", "open_lake", "renewed_lease"]

_lock = threading.Lock()
_lakes: dict[LakeRef, Connection] = {}


def open_lake(lake: LakeRef) -> Connection:
    """This worker's connection to ``lake`` (opened once, shared by its tasks)."""
    with _lock:
        conn = _lakes.get(lake)
        if conn is None:
            conn = connect(lake.uri, create=False, cache_bytes=lake.cache_bytes, **lake.kwargs())
            _lakes[lake] = conn
        return conn


@atexit.register
def _close_lakes() -> None:
    with _lock:
        conns = list(_lakes.values())
        _lakes.clear()
    for conn in conns:
        with contextlib.suppress(Exception):
            conn.close()


class _Renewer:
    """Renews the leases that running tasks of this worker hold.

    Each lease is renewed every quarter of the time its holder counts it valid
    (its ttl less the skew margin: :meth:`~merkle.refs.timing.Timing.renewal_interval`),
    not every quarter of its ttl, which came after that time for a ttl below 4/3 of the
    margin (6 s: valid 1 s, first renewed after 1.5 s, and never after).
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        # lease id -> (lake, lease as last renewed, ttl, seconds between renewals, holds)
        self.held: dict[str, tuple[LakeRef, Lease, float, float, int]] = {}
        self.wake = threading.Event()
        self.thread: threading.Thread | None = None

    def enter(self, lake: LakeRef, lease: Lease, ttl: float) -> None:
        with self.lock:
            found = self.held.get(lease.id)
            current = found[1] if found else lease
            count = found[4] if found else 0
            if count == 0:
                current = _renew(lake, current, ttl)  # also proves it has not expired
            every = open_lake(lake).leases.timing.renewal_interval(ttl)
            shortest = min((held[3] for held in self.held.values()), default=every)
            self.held[lease.id] = (lake, current, ttl, every, count + 1)
            if every < shortest:  # the loop sleeps for a longer lease's interval: wake it
                self.wake.set()
            if self.thread is None or not self.thread.is_alive():
                self.thread = threading.Thread(
                    target=self.loop, name="merkle-spark-leases", daemon=True
                )
                self.thread.start()

    def newest(self, lease: Lease) -> Lease:
        with self.lock:
            found = self.held.get(lease.id)
        return found[1] if found is not None and found[1].expires > lease.expires else lease

    def leave(self, lease: Lease) -> None:
        with self.lock:
            lake, current, ttl, every, count = self.held[lease.id]
            if count <= 1:
                del self.held[lease.id]
            else:
                self.held[lease.id] = (lake, current, ttl, every, count - 1)

    def loop(self) -> None:
        while True:
            with self.lock:
                if not self.held:
                    self.thread = None
                    return
                wait = min(held[3] for held in self.held.values())
            self.wake.wait(wait)
            self.wake.clear()  # a lease entered from here on is in the items below
            with self.lock:
                items = list(self.held.items())
            for lease_id, (lake, lease, ttl, _, _) in items:
                with contextlib.suppress(Exception):
                    renewed = _renew(lake, lease, ttl)
                    with self.lock:
                        entry = self.held.get(lease_id)
                        if entry is not None:
                            self.held[lease_id] = (entry[0], renewed, *entry[2:])


def _renew(lake: LakeRef, lease: Lease, ttl: float) -> Lease:
    leases = open_lake(lake).leases
    try:
        # The copy this task was given may be older than the lake's: the driver and
        # other tasks renewed the lease since the job was planned.
        return leases.renew(leases.current(lease), ttl)
    except LeaseExpiredError as exc:
        what = (
            f"the read of {lease.db!r} version {lease.version}"
            if lease.kind == "reader"
            else "the write"
        )
        released = (
            " (load the DataFrame again if merkle.spark.release_reads gave its lease up)"
            if lease.kind == "reader"
            else ""
        )
        raise UsageError(
            f"{what} lost its {lease.kind} lease before this task ran ({exc}); garbage "
            f"collection may have removed blocks it needs: run the job again{released}, with "
            "a larger lease_ttl option if it waited long"
        ) from None


_renewer = _Renewer()


def renewed_lease(lease: Lease) -> Lease:
    """``lease`` as this process last renewed it (within :func:`hold_lease`), else as given."""
    return _renewer.newest(lease)


@contextlib.contextmanager
def hold_lease(lake: LakeRef, lease: Lease, ttl: float) -> Iterator[None]:
    """Keep ``lease`` renewed while the block runs (UsageError if it already expired)."""
    _renewer.enter(lake, lease, ttl)
    try:
        yield
    finally:
        _renewer.leave(lease)
