"""Child-process bodies for the multi-process storage tests.

They live in their own small module so that a "spawn" child imports only
this and merkle, not a test module and pytest.
"""

from __future__ import annotations

import itertools
import os
import threading
from multiprocessing.connection import Connection
from multiprocessing.synchronize import Barrier
from typing import Any

from merkle.storage import open_store

#: Size of every object the crash test writes.
BIG_OBJECT_SIZE = 4 << 20


def big_object(version: int) -> bytes:
    """A recognisable object: an 8-byte version header, then one repeated byte."""
    return version.to_bytes(8, "big") + bytes([version % 251]) * (BIG_OBJECT_SIZE - 8)


def race_put_if_absent(
    uri: str, options: dict[str, Any], key: str, writer: int, barrier: Barrier, results: Any
) -> None:
    """Wait for every contender, then try to create ``key``; report (writer, won)."""
    store = open_store(uri, **options)
    data = f"process-{writer}".encode()
    barrier.wait()
    results.put((writer, store.put_if_absent(key, data)))
    store.close()


def overwrite_until_stalled(uri: str, key: str, stall_at: int, progress: Connection) -> None:
    """Overwrite ``key`` with big objects of versions 1, 2, ...; hang half-way through ``stall_at``.

    At version ``stall_at`` the store's file write is cut after half the bytes,
    the child reports ``("stalled", version)`` and waits forever, so that the
    parent can SIGKILL it in the middle of a write, every time.
    """
    store = open_store(uri)
    real_write = os.write

    def write_half_then_hang(fd: int, data: Any) -> int:
        written = real_write(fd, bytes(data[: len(data) // 2]))
        progress.send(("stalled", stall_at))
        threading.Event().wait()  # until SIGKILL
        return written

    for version in itertools.count(1):
        if version == stall_at:
            os.write = write_half_then_hang
        store.put(key, big_object(version))
        progress.send(("written", version))
