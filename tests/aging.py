"""Blocks made older than any grace period, on every test backend, without sleeping.

S3 keeps timestamps in whole seconds: a block written in the second a collection reads
the storage's clock counts as new whatever the grace, so a test that means "every
unreachable block is old" says so with :func:`settle` (tests written without it freed
nothing in 1 run of 4 on S3)."""

from __future__ import annotations

import time
from collections.abc import Iterable

import merkle
from merkle.blocks.store import BLOCK_PREFIX
from merkle.storage import ObjectStore
from merkle.storage.file import FileStore
from merkle.storage.memory import MemoryStore

__all__ = ["backdate", "settle"]


def settle(conn: merkle.Connection) -> None:
    """Make every block of the lake two hours old (see the module doc)."""
    blocks = [info.key for info in conn.store.list(BLOCK_PREFIX)]
    backdate(conn.store, blocks, time.time() - 7200)


def backdate(store: ObjectStore, keys: Iterable[str], mtime: float) -> None:
    """Set the modification time of ``keys`` on any test backend (no sleeping needed)."""
    keys = list(keys)
    if isinstance(store, (MemoryStore, FileStore)):
        for key in keys:
            store.set_mtime(key, mtime)
        return
    from s3faults import set_moto_mtime

    from merkle.storage.s3 import S3Store

    assert isinstance(store, S3Store), f"cannot backdate objects on {store!r}"
    for key in keys:
        set_moto_mtime(store, key, mtime)
