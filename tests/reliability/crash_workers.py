"""The processes the crash test kills: writers and collectors on one lake, with short timings.

Everything here runs in a child process (forked from a server that has
imported merkle, so a restart costs milliseconds). A writer commits small
random changes to two databases forever and, after each ``commit()``
returns, appends ``db version root`` to its acknowledgement log with one
``write`` (a line is whole or absent, even if the process dies right after).
A collector runs ``merkle.gc`` forever. Both report any exception that is
not a ``merkle.errors`` type to an errors file; the harness fails on it.

Timings are short so that crashed processes' leases and locks expire within
a trial: writer and reader leases of 3 s, a GC lock of 3 s, half a second of
clock-skew margin, no grace period. They are injected into the connection
(:func:`connect_short`), since the public API has no knob for them.
"""

from __future__ import annotations

import os
import random
import threading
import traceback
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import merkle
from merkle.db.connection import Connection
from merkle.db.readers import ReaderLeaseKeeper
from merkle.errors import MerkleError, NotFoundError
from merkle.refs import LeaseManager
from merkle.refs.writer import WriterSession
from merkle.storage import open_store

__all__ = [
    "CHURN",
    "GC_SETTINGS",
    "KEPT",
    "LEASE_TTL",
    "SKEW_MARGIN",
    "collector",
    "connect_short",
    "writer",
]

#: Every acknowledged version of this database must stay readable (retention keeps all).
KEPT = "kept"
#: Retention keeps the newest 3 versions of this one: trimming runs under crashes too.
CHURN = "churn"
CHURN_KEEP = 3

LEASE_TTL = 3.0
SKEW_MARGIN = 0.5
GC_SETTINGS: dict[str, Any] = {"grace": timedelta(0), "writer_wait": 1.0, "lock_ttl": 3.0}

_LIMITS: dict[str, Any] = {"tablet_size_limit": 8, "branching_factor": 3, "patch_limit": 6}
KEYS = 120


def connect_short(uri: str, *, clock: Callable[[], float] | None = None) -> Connection:
    """A connection whose leases, lock waits and skew margin are seconds, not minutes."""
    conn = Connection(open_store(uri), workers=1)
    leases = LeaseManager(
        conn.store,
        skew_margin=SKEW_MARGIN,
        poll_interval=0.05,
        **({"clock": clock} if clock else {}),
    )
    conn.leases = leases
    conn._writer = WriterSession(leases, ttl=LEASE_TTL, idle=0.2)
    conn._readers = ReaderLeaseKeeper(leases, ttl=LEASE_TTL, still_kept=conn._still_kept)
    return conn


def _report(errors: Path, who: str) -> None:
    with open(errors / f"{who}-{os.getpid()}.txt", "a") as f:
        f.write(traceback.format_exc() + "\n")


def _acknowledge(log_fd: int, db: merkle.Database) -> None:
    os.write(log_fd, f"{db.name} {db.version} {db.root}\n".encode())


def _one_commit(conn: Connection, rng: random.Random, log_fd: int) -> None:
    name = rng.choice([KEPT, KEPT, CHURN])
    try:
        db = conn.open_db(name)
    except NotFoundError:
        _acknowledge(log_fd, conn.create_db(name))
        return
    if "t" not in db.list_tables():
        db = db.create_table("t", key="id", **_LIMITS)
    choice = rng.random()
    if choice < 0.15 and db.version > 2:
        # A revert: re-commit an older version's rows, re-using its blocks.
        old = conn.open_db(name, version=rng.randrange(max(0, db.version - 5), db.version))
        if "t" in old.list_tables():
            rows = list(old.scan("t"))
            db = db.drop_table("t").create_table("t", key="id", **_LIMITS).write("t", rows)
    else:
        start = rng.randrange(KEYS)
        rows = [{"id": (start + i) % KEYS, "w": rng.random()} for i in range(rng.randint(1, 12))]
        db = db.write("t", rows)
        if choice > 0.8:
            db = db.delete("t", [rng.randrange(KEYS) for _ in range(3)])
    _acknowledge(log_fd, db.commit(message=f"pid {os.getpid()}"))


def writer(uri: str, ack_log: str, errors: str, seed: int) -> None:
    """Commit forever; log each acknowledged commit (never returns on its own)."""
    rng = random.Random(seed)
    conn = connect_short(uri)
    log_fd = os.open(ack_log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    while True:
        try:
            _one_commit(conn, rng, log_fd)
        except MerkleError:
            continue  # conflicts, a GC holding the lock, ...: try again
        except Exception:
            _report(Path(errors), "writer")


def collector(uri: str, errors: str, seed: int) -> None:
    """Collect garbage forever (never returns on its own)."""
    conn = connect_short(uri)
    while True:
        try:
            merkle.gc(conn, **GC_SETTINGS)
        except MerkleError:
            continue  # another collector holds the lock, a writer is busy, ...
        except Exception:
            _report(Path(errors), "collector")


def stall_in_rename(uri: str, stalled: Any) -> None:
    """Commit once, stalling for good when the block flush renames its first temp file.

    The temporary files of the flush are written and fsynced by then; the
    parent kills this process (SIGKILL) once ``stalled`` is set, leaving them.
    """
    real_replace = os.replace

    def replace(src: Any, dst: Any, **kwargs: Any) -> None:
        if os.path.basename(os.fspath(src)).startswith(".tmp-"):
            stalled.set()
            threading.Event().wait()  # until killed
        real_replace(src, dst, **kwargs)

    os.replace = replace  # type: ignore[assignment]
    conn = connect_short(uri)
    db = conn.open_db(KEPT)
    db.write("t", [{"id": i, "w": float(i)} for i in range(40)]).commit()
