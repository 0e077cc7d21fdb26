"""An ObjectStore wrapper that counts calls, to prove what BlockStore does and does not do."""

from __future__ import annotations

import builtins
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from typing import Any
from urllib.parse import SplitResult

from merkle.storage import ObjectStore
from merkle.storage.base import ObjectInfo

__all__ = ["SpyStore"]


class SpyStore(ObjectStore):
    """Forwards every call to ``inner``; ``calls`` counts them, ``written`` lists uploaded keys."""

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner
        self.calls: Counter[str] = Counter()
        self.written: list[str] = []

    def reset(self) -> None:
        self.calls.clear()
        self.written.clear()

    @property
    def uri(self) -> str:
        return self.inner.uri

    @classmethod
    def from_uri(cls, parts: SplitResult, options: Mapping[str, Any]) -> ObjectStore:
        raise NotImplementedError("a SpyStore wraps an open store")

    def get(self, key: str) -> bytes:
        self.calls["get"] += 1
        return self.inner.get(key)

    def get_range(self, key: str, start: int, length: int) -> bytes:
        self.calls["get_range"] += 1
        return self.inner.get_range(key, start, length)

    def stat(self, key: str) -> ObjectInfo:
        self.calls["stat"] += 1
        return self.inner.stat(key)

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        self.calls["list"] += 1
        return self.inner.list(prefix)

    def list_prefixes(self, prefix: str = "") -> builtins.list[str]:
        self.calls["list_prefixes"] += 1
        return self.inner.list_prefixes(prefix)

    def put(self, key: str, data: bytes) -> None:
        self.calls["put"] += 1
        self.written.append(key)
        self.inner.put(key, data)

    def put_many(self, items: Iterable[tuple[str, bytes]]) -> None:
        pairs = builtins.list(items)
        self.calls["put_many"] += 1
        self.written.extend(key for key, _ in pairs)
        self.inner.put_many(pairs)

    def put_if_absent(self, key: str, data: bytes) -> bool:
        self.calls["put_if_absent"] += 1
        self.written.append(key)
        return self.inner.put_if_absent(key, data)

    def touch(self, key: str) -> None:
        self.calls["touch"] += 1
        self.inner.touch(key)

    def delete(self, key: str) -> None:
        self.calls["delete"] += 1
        self.inner.delete(key)
