"""An ObjectStore wrapper that makes chosen calls fail, time out, lie or lag.

``FaultyStore(inner)`` forwards every operation of the :class:`ObjectStore`
contract to ``inner`` and counts the calls. A :class:`Fault` names a call (the
k-th call of all, or of one operation) and what happens to it:

* ``"refused"``: nothing happens; the caller gets ``StorageError(definite=True)``
  (a throttled or refused request, a 503 SlowDown before sending).
* ``"timeout"``: nothing happens, after ``delay`` seconds; the caller gets
  ``StorageError(definite=False)``: it cannot know (a 5xx or a read timeout
  on a request that never arrived).
* ``"applied"``: the operation happens, then the caller gets
  ``StorageError(definite=False)`` (the reply was lost).
* ``"partial"``: a bulk write (``put_many``, ``delete_many``) applies its first
  half, then ``StorageError(definite=False)``; other operations as ``"timeout"``.
* ``"delay"``: the operation happens after ``delay`` seconds and succeeds.

Reads never change anything, so a failed read is always ``definite=True``.
Faults fire once each. ``threads`` limits counting and faults to calls made
on those threads (a scenario's own thread, not a connection's background
lease renewals), which keeps call positions the same from run to run; calls
from other threads pass through untouched.

``log`` lists every counted call as ``(operation, key or prefix)``;
``fired`` lists the faults that fired, with the call they hit.

A pickled FaultyStore is its inner store (faults do not travel).
"""

from __future__ import annotations

import builtins
import threading
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar
from urllib.parse import SplitResult

from merkle.errors import StorageError, UsageError
from merkle.storage import ObjectStore
from merkle.storage.base import ObjectInfo

__all__ = [
    "BULK_WRITES",
    "FAULT_KINDS",
    "READS",
    "WRITES",
    "Fault",
    "FaultKind",
    "FaultyStore",
    "InjectedFaultError",
]

FaultKind = Literal["refused", "timeout", "applied", "partial", "delay"]
FAULT_KINDS: tuple[FaultKind, ...] = ("refused", "timeout", "applied", "partial", "delay")

#: Operations that change nothing.
READS = frozenset({"get", "get_range", "stat", "exists", "list", "list_prefixes", "get_many"})
#: Operations that change the store (or its durability).
WRITES = frozenset(
    {
        "put",
        "put_if_absent",
        "put_hint",
        "put_many",
        "touch",
        "delete",
        "delete_many",
        "make_durable",
        "remove_stale_temporaries",
    }
)
#: Writes of several keys, which ``"partial"`` can cut in half.
BULK_WRITES = frozenset({"put_many", "delete_many"})

_T = TypeVar("_T")


class InjectedFaultError(StorageError):
    """A StorageError this wrapper made up (so tests can tell it from a real one)."""


@dataclass(frozen=True)
class Fault:
    """Make call number ``at`` (1-based; of all calls, or of ``op`` only) go wrong as ``kind``."""

    kind: FaultKind
    at: int
    op: str | None = None
    delay: float = 0.0

    def __post_init__(self) -> None:
        if self.kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault kind {self.kind!r}; known: {FAULT_KINDS}")
        if self.at < 1:
            raise ValueError(f"calls are numbered from 1, got at={self.at}")
        if self.op is not None and self.op not in READS | WRITES:
            raise ValueError(f"unknown operation {self.op!r}")


@dataclass(frozen=True)
class Fired:
    """A fault that fired: the call it hit (its number among all counted calls)."""

    fault: Fault
    call: int
    op: str
    subject: str


class FaultyStore(ObjectStore):
    """Forwards to ``inner``; injects the :class:`Fault` s given (see the module doc)."""

    def __init__(
        self,
        inner: ObjectStore,
        faults: Iterable[Fault] = (),
        *,
        threads: Collection[int] | None = None,
        sleep: Callable[[float], None] = time.sleep,
        bulk_workers: int = 1,
    ) -> None:
        self.inner = inner
        self.list_page_size = inner.list_page_size  # type: ignore[misc]  # its callers' choices
        self.bulk_workers = bulk_workers
        self.threads = None if threads is None else frozenset(threads)
        self.sleep = sleep
        self.log: list[tuple[str, str]] = []
        self.fired: list[Fired] = []
        self._faults = list(faults)
        self._per_op: Counter[str] = Counter()
        self._lock = threading.Lock()

    def inject(self, *faults: Fault) -> None:
        """Add faults (positions count from the store's first call, not from now)."""
        with self._lock:
            self._faults.extend(faults)

    @property
    def calls(self) -> int:
        """How many calls were counted so far."""
        return len(self.log)

    # -- the one place calls go through -------------------------------------------------

    def _due(self, op: str, subject: str) -> Fault | None:
        if self.threads is not None and threading.get_ident() not in self.threads:
            return None
        with self._lock:
            self.log.append((op, subject))
            self._per_op[op] += 1
            number, op_number = len(self.log), self._per_op[op]
            for fault in self._faults:
                if fault.at == (number if fault.op is None else op_number) and fault.op in (
                    None,
                    op,
                ):
                    self._faults.remove(fault)
                    self.fired.append(Fired(fault, number, op, subject))
                    return fault
        return None

    def _call(
        self,
        op: str,
        subject: str,
        run: Callable[[], _T],
        half: Callable[[], object] | None = None,
    ) -> _T:
        fault = self._due(op, subject)
        if fault is None:
            return run()
        what = f"injected {fault.kind} fault on {op} of {subject!r} (call {self.calls})"
        if fault.kind == "delay":
            self.sleep(fault.delay)
            return run()
        if op in READS or fault.kind == "refused":
            if fault.kind == "timeout":
                self.sleep(fault.delay)
            raise InjectedFaultError(f"{what}: 503 SlowDown, nothing was done", definite=True)
        if fault.kind == "applied":
            run()
        elif fault.kind == "partial" and half is not None:
            half()
        else:
            self.sleep(fault.delay)
        raise InjectedFaultError(
            f"{what}: timed out; it may or may not have happened", definite=False
        )

    # -- identity ---------------------------------------------------------------------------

    @property
    def uri(self) -> str:
        return self.inner.uri

    @classmethod
    def from_uri(cls, parts: SplitResult, options: Mapping[str, Any]) -> ObjectStore:
        raise UsageError("a FaultyStore wraps an open store; it has no URI of its own")

    def reopen_options(self) -> dict[str, Any]:
        return self.inner.reopen_options()

    def __reduce__(self) -> tuple[Any, ...]:
        return self.inner.__reduce__()

    def close(self) -> None:
        super().close()
        self.inner.close()

    # -- reads --------------------------------------------------------------------------------

    def get(self, key: str) -> bytes:
        return self._call("get", key, lambda: self.inner.get(key))

    def get_range(self, key: str, start: int, length: int) -> bytes:
        return self._call("get_range", key, lambda: self.inner.get_range(key, start, length))

    def stat(self, key: str) -> ObjectInfo:
        return self._call("stat", key, lambda: self.inner.stat(key))

    def exists(self, key: str) -> bool:
        return self._call("exists", key, lambda: self.inner.exists(key))

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        listed = self._call("list", prefix, lambda: builtins.list(self.inner.list(prefix)))
        return iter(listed)

    def list_prefixes(self, prefix: str = "") -> builtins.list[str]:
        return self._call("list_prefixes", prefix, lambda: self.inner.list_prefixes(prefix))

    def get_many(self, keys: Sequence[str]) -> dict[str, bytes]:
        keys = builtins.list(keys)
        return self._call("get_many", _first(keys), lambda: self.inner.get_many(keys))

    # -- writes -------------------------------------------------------------------------------

    def put(self, key: str, data: bytes) -> None:
        self._call("put", key, lambda: self.inner.put(key, data))

    def put_if_absent(self, key: str, data: bytes) -> bool:
        return self._call("put_if_absent", key, lambda: self.inner.put_if_absent(key, data))

    def put_hint(self, key: str, data: bytes) -> None:
        self._call("put_hint", key, lambda: self.inner.put_hint(key, data))

    def put_many(self, items: Iterable[tuple[str, bytes]]) -> None:
        pairs = builtins.list(items)
        self._call(
            "put_many",
            _first([key for key, _ in pairs]),
            lambda: self.inner.put_many(pairs),
            lambda: self.inner.put_many(pairs[: len(pairs) // 2]),
        )

    def touch(self, key: str) -> None:
        self._call("touch", key, lambda: self.inner.touch(key))

    def delete(self, key: str) -> None:
        self._call("delete", key, lambda: self.inner.delete(key))

    def delete_many(self, keys: Iterable[str]) -> None:
        keys = builtins.list(keys)
        self._call(
            "delete_many",
            _first(keys),
            lambda: self.inner.delete_many(keys),
            lambda: self.inner.delete_many(keys[: len(keys) // 2]),
        )

    def make_durable(self, keys: Iterable[str]) -> None:
        keys = builtins.list(keys)
        self._call("make_durable", _first(keys), lambda: self.inner.make_durable(keys))

    def remove_stale_temporaries(self, older_than: float) -> tuple[int, int]:
        return self._call(
            "remove_stale_temporaries",
            f"before {older_than:.0f}",
            lambda: self.inner.remove_stale_temporaries(older_than),
        )

    def set_mtime(self, key: str, mtime: float) -> None:
        """The inner store's ``set_mtime`` (memory and file stores), not counted."""
        self.inner.set_mtime(key, mtime)  # type: ignore[attr-defined]


def _first(keys: Sequence[str]) -> str:
    if not keys:
        return "(none)"
    return keys[0] if len(keys) == 1 else f"{keys[0]} and {len(keys) - 1} more"
