"""Garbage collection, retention and verification.

``merkle.gc(conn, ...)`` marks from every kept version, reader lease and
writer lease and sweeps what nothing reaches; ``merkle.verify(conn)`` re-hashes
everything reachable. Retention is stored per lake with per-database
overrides (``set_retention``). See doc/operations.md.

Every name here but ``verify`` is imported on first use: ``import merkle``
imports this package (see ``merkle/__init__.py``), and a command that only
reads must not pay for the collector. ``verify`` (a light module) is imported
now: the function has the name of its module, and importing the module later
would bind the module, not the function, as ``merkle.gc.verify``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from merkle.errors import UsageError
from merkle.gc.verify import verify
from merkle.lazy import lazy_attributes

if TYPE_CHECKING:
    from datetime import timedelta

    from merkle.db.connection import Connection
    from merkle.gc.collect import gc, journal_names
    from merkle.gc.fanout import Fanout
    from merkle.gc.mark import Marker, ReachabilityError
    from merkle.gc.policy import Policy, PolicyDamagedError, Retention, parse_duration
    from merkle.gc.report import DatabaseReport, GCReport, VerifyReport, load_reports

__getattr__ = lazy_attributes(
    __name__,
    {
        "DatabaseReport": "merkle.gc.report",
        "Fanout": "merkle.gc.fanout",
        "GCReport": "merkle.gc.report",
        "Marker": "merkle.gc.mark",
        "Policy": "merkle.gc.policy",
        "PolicyDamagedError": "merkle.gc.policy",
        "ReachabilityError": "merkle.gc.mark",
        "Retention": "merkle.gc.policy",
        "VerifyReport": "merkle.gc.report",
        "gc": "merkle.gc.collect",
        "journal_names": "merkle.gc.collect",
        "load_policy": "merkle.gc.policy",
        "load_reports": "merkle.gc.report",
        "parse_duration": "merkle.gc.policy",
        "save_policy": "merkle.gc.policy",
    },
)

__all__ = [
    "DatabaseReport",
    "Fanout",
    "GCReport",
    "Marker",
    "Policy",
    "PolicyDamagedError",
    "ReachabilityError",
    "Retention",
    "VerifyReport",
    "gc",
    "get_policy",
    "journal_names",
    "load_reports",
    "parse_duration",
    "set_retention",
    "verify",
]


#: How long set_retention may hold the GC lock: a read and a write of the policy. Short,
#: because writers wait while the lock is held (a killed call holds them up this long).
_POLICY_LOCK_TTL = 10.0


def get_policy(conn: Connection) -> Policy:
    """The lake's retention policy and grace period (UsageError on a closed connection;
    :class:`~merkle.gc.policy.PolicyDamagedError` when it is damaged: ``set_retention``
    replaces it)."""
    from merkle.db.closed import closed_error
    from merkle.gc.policy import load_policy

    if conn.closed:
        raise closed_error(conn.uri)
    return load_policy(conn.store)


def set_retention(
    conn: Connection,
    keep_versions: int | None = None,
    keep_within: timedelta | str | None = None,
    *,
    db: str | None = None,
    grace: timedelta | str | None = None,
    wait: float = 60.0,
) -> Policy:
    """Store the lake's default retention, or ``db``'s override, and the grace period.

    A call changes only what it names. The retention is ``keep_versions`` and
    ``keep_within`` together: naming either sets both (the one left out is no
    limit of its kind), for ``db`` or for the lake default. ``grace`` sets the
    lake's grace period and leaves every retention as it is. A call that names
    neither limit nor ``grace`` clears the limits: with ``db`` it removes the
    database's override (the lake default applies to it again), without it the
    lake default keeps every version again. (``grace`` alone once did that too,
    and the next collection trimmed what the override had kept.)

    The policy is one object changed by reading and writing it back, so the
    change is made holding the GC lock: two calls at once each keep their
    change (without the lock one override was lost, and a collection then
    trimmed versions it was set to keep), and a collection that read the old
    policy before the change deletes nothing (see :func:`merkle.gc.gc`). A
    running collection holds the lock: the call waits up to ``wait`` seconds
    for it, then raises :class:`~merkle.refs.LockHeldError`.

    A stored policy that is damaged (it does not decode, or holds no policy:
    :class:`~merkle.gc.policy.PolicyDamagedError`, which stops every collection)
    is replaced: what it held cannot be read, so the call starts from the
    defaults (every version kept, one hour of grace) and sets what it names;
    set the other overrides and the grace period again before collecting. A
    policy of a newer format is never replaced (an IntegrityError: upgrade).
    """
    from merkle.db.closed import closed_error
    from merkle.gc.policy import (
        Policy,
        PolicyDamagedError,
        Retention,
        load_policy,
        parse_duration,
        save_policy,
    )
    from merkle.refs import check_db_name

    if conn.closed:  # it would write the policy through a closed connection
        raise closed_error(conn.uri)
    within = parse_duration(keep_within, "keep_within") if keep_within is not None else None
    retention = Retention(keep_versions, within)
    new_grace = parse_duration(grace, "grace") if grace is not None else None
    if isinstance(wait, bool) or not isinstance(wait, int | float) or not wait >= 0:
        raise UsageError(f"set_retention(wait=) must be a number of seconds >= 0, got {wait!r}")
    if db is not None:
        check_db_name(db)  # before the lock: bad arguments write nothing
    with conn.leases.acquire_gc_lock(_POLICY_LOCK_TTL, wait_timeout=float(wait)) as lock:
        try:
            policy = load_policy(conn.store)
        except PolicyDamagedError:
            policy = Policy()  # what it held is lost: this call starts a new one
        if not retention.keeps_everything or new_grace is None:  # a limit, or nothing, named
            if db is None:
                policy = policy.with_default(retention)
            else:
                policy = policy.with_database(db, None if retention.keeps_everything else retention)
        if new_grace is not None:
            policy = Policy(policy.default, policy.databases, new_grace)
        lock.ensure_held()  # still ours: no collection or other call came in between
        save_policy(conn.store, policy)
    return policy
