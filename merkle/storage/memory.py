"""An in-process object store: a dict under a lock.

``memory://`` opens a fresh, private store; ``memory://name`` opens the store
of that name shared by every opener in this process. A pickled anonymous
store carries its contents by value; a named one re-opens the store of that
name in the receiving process.
"""

from __future__ import annotations

import bisect
import builtins
import threading
import time
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import SplitResult

from merkle.errors import NotFoundError, UsageError
from merkle.storage.base import (
    ObjectInfo,
    ObjectStore,
    check_data,
    check_key,
    check_prefix,
    check_range,
)

__all__ = ["MemoryStore"]

_NAMED: dict[str, MemoryStore] = {}
_NAMED_LOCK = threading.Lock()


class MemoryStore(ObjectStore):
    """Keys in a sorted list beside a dict of (bytes, mtime); safe across threads."""

    schemes = ("memory",)
    local = True

    def __init__(self, name: str = "") -> None:
        self._name = name
        self._lock = threading.Lock()
        self._objects: dict[str, tuple[bytes, float]] = {}
        self._keys: list[str] = []  # sorted, for prefix listing

    @classmethod
    def from_uri(cls, parts: SplitResult, options: Mapping[str, Any]) -> MemoryStore:
        if options:
            raise UsageError(f"memory:// takes no options, got {sorted(options)}")
        if parts.query or parts.fragment:
            raise UsageError(
                f"malformed memory URI {parts.geturl()!r}: write memory:// or memory://name"
            )
        name = (parts.netloc + parts.path).strip("/")
        if not name:
            return cls()
        with _NAMED_LOCK:
            store = _NAMED.get(name)
            if store is None:
                store = _NAMED[name] = cls(name)
            return store

    @property
    def uri(self) -> str:
        return f"memory://{self._name}"

    @property
    def location(self) -> str:
        # An unnamed store is a lake of its own: no other store holds its objects.
        return self.uri if self._name else f"memory://<unnamed {id(self):#x}>"

    def __reduce__(self) -> tuple[Any, ...]:
        if self._name:
            return (_named, (self._name,))
        with self._lock:
            return (_restore, (dict(self._objects),))

    # -- reads ---------------------------------------------------------------

    def _missing(self, key: str) -> NotFoundError:
        return NotFoundError(f"no object {key!r} in {self.uri}")

    def get(self, key: str) -> bytes:
        try:
            return self._objects[check_key(key)][0]
        except KeyError:
            raise self._missing(key) from None

    def get_range(self, key: str, start: int, length: int) -> bytes:
        start, length = check_range(key, start, length)
        return self.get(key)[start : start + length]

    def stat(self, key: str) -> ObjectInfo:
        try:
            data, mtime = self._objects[check_key(key)]
        except KeyError:
            raise self._missing(key) from None
        return ObjectInfo(key, len(data), mtime)

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        check_prefix(prefix)
        with self._lock:
            start = bisect.bisect_left(self._keys, prefix)
            found = []
            for key in self._keys[start:]:
                if not key.startswith(prefix):
                    break
                data, mtime = self._objects[key]
                found.append(ObjectInfo(key, len(data), mtime))
        yield from found

    def list_prefixes(self, prefix: str = "") -> builtins.list[str]:
        check_prefix(prefix, directory=True)
        # A set: key "a" sorts before "a-b", which sorts before "a/c".
        return sorted({info.key[len(prefix) :].split("/", 1)[0] for info in self.list(prefix)})

    # -- writes --------------------------------------------------------------

    def _insert(self, key: str, data: bytes) -> None:
        if key not in self._objects:
            bisect.insort(self._keys, key)
        self._objects[key] = (data, time.time())

    def put(self, key: str, data: bytes) -> None:
        data = check_data(check_key(key), data)
        with self._lock:
            self._insert(key, data)

    def put_if_absent(self, key: str, data: bytes) -> bool:
        data = check_data(check_key(key), data)
        with self._lock:
            if key in self._objects:
                return False
            self._insert(key, data)
            return True

    def touch(self, key: str) -> None:
        self.set_mtime(key, time.time())

    def set_mtime(self, key: str, mtime: float) -> None:
        """Backdate or forward ``key``'s modification time (tests of GC grace periods)."""
        check_key(key)
        with self._lock:
            try:
                data, _ = self._objects[key]
            except KeyError:
                raise self._missing(key) from None
            self._objects[key] = (data, mtime)

    def delete(self, key: str) -> None:
        check_key(key)
        with self._lock:
            if self._objects.pop(key, None) is not None:
                index = bisect.bisect_left(self._keys, key)
                del self._keys[index]


def _named(name: str) -> MemoryStore:
    store = MemoryStore.from_uri(SplitResult("memory", name, "", "", ""), {})
    assert isinstance(store, MemoryStore)
    return store


def _restore(objects: dict[str, tuple[bytes, float]]) -> MemoryStore:
    store = MemoryStore()
    store._objects = objects
    store._keys = sorted(objects)
    return store
