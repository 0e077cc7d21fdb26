"""A push run as a child process that SIGKILLs itself at its k-th write to the destination.

``python -m tests.versions.sync_worker SRC DST DB KILL_AT LOG``: pushes DB from
the lake SRC to the lake DST; before each write to DST it appends the key to
LOG (so the test can count how often each block was written across runs),
and before write number KILL_AT (1-based; 0: never) it kills itself with
SIGKILL: no cleanup, no finally blocks, exactly as a crash.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterable

import merkle
from merkle.storage import open_store

from .counting import CountingStore


class KillingStore(CountingStore):
    def __init__(self, inner: object, kill_at: int, log: str) -> None:
        super().__init__(inner)  # type: ignore[arg-type]
        self.kill_at = kill_at
        self.count = 0
        self.log = open(log, "a", buffering=1)  # noqa: SIM115 (lives as long as the process)

    def _write(self, key: str, data: bytes) -> None:
        self.count += 1
        if self.count == self.kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        self.log.write(key + "\n")
        super()._write(key, data)

    def put_many(self, items: Iterable[tuple[str, bytes]]) -> None:
        for key, data in items:  # one at a time: every write is a kill point
            self.put(key, data)


def main() -> None:
    src_uri, dst_uri, db, kill_at, log = sys.argv[1:6]
    store = KillingStore(open_store(dst_uri, bulk_workers=1), int(kill_at), log)
    with merkle.connect(src_uri) as src, merkle.Connection(store) as dst:
        report = merkle.sync(src, dst, db)
        print(report.summary())


if __name__ == "__main__":
    main()
