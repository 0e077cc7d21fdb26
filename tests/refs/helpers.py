"""Test helpers for the ref manager: roots, controllable clocks, a fault-injecting store."""

from __future__ import annotations

import builtins
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import SplitResult

from merkle.blocks.cid import CID
from merkle.errors import StorageError
from merkle.storage.base import ObjectInfo, ObjectStore

T0 = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)


def root(label: object) -> str:
    """A distinct, valid root CID string for ``label``."""
    return str(CID.of(repr(label).encode()))


class Now:
    """A settable wall clock for commit times (returns ``self.value``)."""

    def __init__(self, start: datetime = T0) -> None:
        self.value = start

    def __call__(self) -> datetime:
        return self.value

    def advance(self, seconds: float) -> datetime:
        self.value += timedelta(seconds=seconds)
        return self.value


class FakeClock:
    """Epoch seconds that move only when told to; ``sleep`` moves them (no real waiting)."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self.now = start
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


class FaultyStore(ObjectStore):
    """Wraps a store; ``fail(op, ...)`` makes the next calls of ``op`` raise.

    ``applied=True`` performs the operation before raising (the write happened
    but the caller cannot know); ``definite`` is the StorageError's flag.
    """

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner
        self._faults: dict[str, list[tuple[bool, bool, str | None]]] = {}
        self.calls: dict[str, int] = {}

    def fail(
        self,
        op: str,
        *,
        times: int = 1,
        applied: bool = False,
        definite: bool = False,
        key: str | None = None,
    ) -> None:
        """Make the next ``times`` calls of ``op`` (on ``key`` only, if given) fail."""
        self._faults.setdefault(op, []).extend([(applied, definite, key)] * times)

    def _run(self, op: str, fn: Callable[[], Any], key: str | None = None) -> Any:
        self.calls[op] = self.calls.get(op, 0) + 1
        pending = self._faults.get(op)
        if not pending or pending[0][2] not in (None, key):
            return fn()
        applied, definite, _ = pending.pop(0)
        if applied:
            fn()
        raise StorageError(f"injected {op} failure", definite=definite)

    @property
    def uri(self) -> str:
        return self.inner.uri

    @classmethod
    def from_uri(cls, parts: SplitResult, options: Mapping[str, Any]) -> ObjectStore:
        raise NotImplementedError

    def get(self, key: str) -> bytes:
        return self._run("get", lambda: self.inner.get(key), key)  # type: ignore[no-any-return]

    def get_range(self, key: str, start: int, length: int) -> bytes:
        return self.inner.get_range(key, start, length)

    def stat(self, key: str) -> ObjectInfo:
        return self._run("stat", lambda: self.inner.stat(key), key)  # type: ignore[no-any-return]

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        return self._run("list", lambda: iter(builtins.list(self.inner.list(prefix))))  # type: ignore[no-any-return]

    def list_prefixes(self, prefix: str = "") -> builtins.list[str]:
        return self.inner.list_prefixes(prefix)

    def put(self, key: str, data: bytes) -> None:
        self._run("put", lambda: self.inner.put(key, data), key)

    def put_if_absent(self, key: str, data: bytes) -> bool:
        return self._run("put_if_absent", lambda: self.inner.put_if_absent(key, data), key)  # type: ignore[no-any-return]

    def touch(self, key: str) -> None:
        self.inner.touch(key)

    def delete(self, key: str) -> None:
        self._run("delete", lambda: self.inner.delete(key), key)

    def make_durable(self, keys: Iterable[str]) -> None:
        listed = builtins.list(keys)
        self._run("make_durable", lambda: self.inner.make_durable(listed), listed[0])
