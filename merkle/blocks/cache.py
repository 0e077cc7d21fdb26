"""A least-recently-used cache bounded by the bytes of what it holds.

Decoded index nodes and segments are reused across reads; bounding the cache
by bytes (not entries) keeps memory predictable whatever the block sizes.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, TypeVar

__all__ = ["ByteLRU"]

V = TypeVar("V")


class ByteLRU(Generic[V]):
    """Maps keys to sized values; evicts least recently used entries past ``capacity`` bytes."""

    def __init__(self, capacity: int) -> None:
        self.capacity = max(0, int(capacity))
        self._items: OrderedDict[Hashable, tuple[V, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, key: Hashable) -> V | None:
        """The cached value, or None; a hit makes the entry most recently used."""
        with self._lock:
            item = self._items.get(key)
            if item is None:
                self.misses += 1
                return None
            self._items.move_to_end(key)
            self.hits += 1
            return item[0]

    def put(self, key: Hashable, value: V, size: int) -> None:
        """Cache ``value`` as ``size`` bytes; values larger than the whole budget are skipped."""
        if size > self.capacity:
            return
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._bytes -= old[1]
            self._items[key] = (value, size)
            self._bytes += size
            while self._bytes > self.capacity:
                _, (_, evicted) = self._items.popitem(last=False)
                self._bytes -= evicted

    def discard(self, key: Hashable) -> None:
        """Forget ``key`` if cached."""
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._bytes -= old[1]

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._bytes = 0

    @property
    def nbytes(self) -> int:
        """Bytes currently held."""
        return self._bytes

    def __len__(self) -> int:
        return len(self._items)
