"""An ObjectStore wrapper that counts block reads and writes, with their bytes.

Cost tests open a connection on it (``merkle.Connection(CountingStore(inner))``)
and assert on what was read or written, never on time.
"""

from __future__ import annotations

import builtins
import threading
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from typing import Any
from urllib.parse import SplitResult

from merkle.storage import ObjectStore
from merkle.storage.base import ObjectInfo

__all__ = ["CountingStore"]


class CountingStore(ObjectStore):
    """Forwards every call to ``inner``; counts block gets and puts and their bytes."""

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner
        self.bulk_workers = inner.bulk_workers
        self._lock = threading.Lock()
        self.reads: Counter[str] = Counter()  # key -> times read
        self.read_bytes = 0
        self.writes: Counter[str] = Counter()  # key -> times written
        self.write_bytes = 0

    def reset(self) -> None:
        with self._lock:
            self.reads.clear()
            self.writes.clear()
            self.read_bytes = self.write_bytes = 0

    @property
    def block_reads(self) -> int:
        return sum(n for k, n in self.reads.items() if k.startswith("blocks/"))

    @property
    def block_writes(self) -> int:
        return sum(n for k, n in self.writes.items() if k.startswith("blocks/"))

    def read_keys(self) -> set[str]:
        return {k for k in self.reads if k.startswith("blocks/")}

    @property
    def uri(self) -> str:
        return self.inner.uri

    @classmethod
    def from_uri(cls, parts: SplitResult, options: Mapping[str, Any]) -> ObjectStore:
        raise NotImplementedError("a CountingStore wraps an open store")

    def _read(self, key: str, data: bytes) -> bytes:
        with self._lock:
            self.reads[key] += 1
            if key.startswith("blocks/"):
                self.read_bytes += len(data)
        return data

    def _write(self, key: str, data: bytes) -> None:
        with self._lock:
            self.writes[key] += 1
            if key.startswith("blocks/"):
                self.write_bytes += len(data)

    def get(self, key: str) -> bytes:
        return self._read(key, self.inner.get(key))

    def get_range(self, key: str, start: int, length: int) -> bytes:
        return self._read(key, self.inner.get_range(key, start, length))

    def stat(self, key: str) -> ObjectInfo:
        return self.inner.stat(key)

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        return self.inner.list(prefix)

    def list_prefixes(self, prefix: str = "") -> builtins.list[str]:
        return self.inner.list_prefixes(prefix)

    def put(self, key: str, data: bytes) -> None:
        self._write(key, data)
        self.inner.put(key, data)

    def put_many(self, items: Iterable[tuple[str, bytes]]) -> None:
        pairs = builtins.list(items)
        for key, data in pairs:
            self._write(key, data)
        self.inner.put_many(pairs)

    def put_if_absent(self, key: str, data: bytes) -> bool:
        self._write(key, data)
        return self.inner.put_if_absent(key, data)

    def put_hint(self, key: str, data: bytes) -> None:
        self._write(key, data)
        self.inner.put_hint(key, data)

    def touch(self, key: str) -> None:
        self.inner.touch(key)

    def delete(self, key: str) -> None:
        self.inner.delete(key)

    def close(self) -> None:
        self.inner.close()
