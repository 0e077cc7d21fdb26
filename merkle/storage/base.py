"""The ObjectStore contract and the URI-scheme registry of backends.

An :class:`ObjectStore` maps string keys to immutable byte strings. It is the
only layer that talks to a disk or a bucket; blocks, refs and GC are written
against this interface alone, so every backend behaves the same and runs the
same conformance suite (``tests/storage/test_conformance.py``).

Keys are ``/``-separated paths of non-empty segments. A segment never starts
with ``.`` (backends keep their own temporary files under such names) and
holds no control character or backslash.
"""

from __future__ import annotations

import builtins
import errno
import importlib
import itertools
import os
import re
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, ClassVar, Self
from urllib.parse import SplitResult, urlsplit

from merkle.errors import NotFoundError, StorageError, UsageError
from merkle.storage import owner

if TYPE_CHECKING:
    from concurrent.futures import ThreadPoolExecutor

__all__ = [
    "NO_SPACE",
    "ObjectInfo",
    "ObjectStore",
    "check_data",
    "check_key",
    "check_prefix",
    "check_range",
    "items_failed",
    "map_in_runs",
    "open_store",
    "quote_location",
    "register_scheme",
    "supported_schemes",
]


#: The errors of a write that found no room: a full disk, or the user's quota used up.
NO_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT})


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    """What a listing or ``stat`` says of one stored object."""

    key: str
    size: int
    mtime: float  # seconds since the epoch (UTC), as the backend records it


#: Anything a valid key never holds: an empty segment, a segment starting with ".", a
#: backslash or a control character (one search instead of a loop over characters).
_BAD_KEY = re.compile(r"(?:^|/)(?:$|/|\.)|[\x00-\x1f\x7f\\]")


def check_key(key: object) -> str:
    """Return ``key`` if it is a valid object key, else raise :class:`UsageError`."""
    if not isinstance(key, str) or not key:
        raise UsageError(f"object key must be a non-empty string, got {key!r}")
    if _BAD_KEY.search(key) is None:
        return key
    for segment in key.split("/"):
        if not segment:
            raise UsageError(f"object key {key!r} has an empty path segment")
        if segment[0] == ".":
            raise UsageError(f"object key {key!r} has a segment starting with '.'")
        if "\\" in segment or any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in segment):
            raise UsageError(f"object key {key!r} holds a backslash or control character")
    return key


def map_in_runs(
    map_runs: Callable[
        [Callable[[Sequence[Any]], list[Any]], list[Sequence[Any]]], Iterable[list[Any]]
    ],
    fn: Callable[[Any], Any],
    items: Sequence[Any],
    runs: int,
) -> list[Any]:
    """``[fn(item) for item in items]``, handed to ``map_runs`` (a pool's map) as ``runs``
    contiguous runs of near-equal length, one task each, results in order.

    For work that costs less than handing it to a thread (a local ``stat``,
    a block read from a local disk): a task per run, not per item.
    """
    cuts = [len(items) * i // runs for i in range(runs + 1)]
    parts = [items[a:b] for a, b in itertools.pairwise(cuts)]
    done = map_runs(lambda run: [fn(item) for item in run], parts)
    return [result for run in done for result in run]


def items_failed(key: str, exc: StorageError) -> StorageError:
    """The error of a ``put_if_absent_after`` whose items failed uncertainly: definite.

    ``key`` was never written, so the call surely did not take effect as far as
    its caller can tell; the items (blocks, content-addressed) may or may not be
    stored, which does no harm: nothing names them until ``key`` exists, a retry
    writes or reuses them, and garbage collection removes ones left unnamed.
    Taken for ``key``'s own uncertainty, such a failure made a commit whose
    journal entry was never sent report "may or may not have been written".
    """
    return StorageError(
        f"{exc}; {key!r}, to be written after it, was not written, so trying again is "
        f"safe (the objects to precede {key!r} may or may not be stored, which is harmless: "
        "nothing refers to them yet)",
        definite=True,
    )


def check_data(key: str, data: object) -> bytes:
    """Return ``data`` as ``bytes`` or raise :class:`UsageError` naming ``key``."""
    if isinstance(data, bytes):
        return data
    if isinstance(data, (bytearray, memoryview)):
        return bytes(data)
    raise UsageError(f"data for {key!r} must be bytes, got {type(data).__name__}")


def check_prefix(prefix: object, *, directory: bool = False) -> str:
    """Return a listing ``prefix`` or raise :class:`UsageError`.

    With ``directory`` the prefix must be empty or end with ``/`` (as
    :meth:`ObjectStore.list_prefixes` wants).
    """
    if not isinstance(prefix, str):
        raise UsageError(f"a listing prefix must be a string, got {prefix!r}")
    if directory and prefix and not prefix.endswith("/"):
        raise UsageError(f"list_prefixes wants a prefix ending with '/', got {prefix!r}")
    return prefix


def check_range(key: str, start: object, length: object) -> tuple[int, int]:
    """Return ``(start, length)`` of a ranged read or raise :class:`UsageError` naming ``key``."""
    if (
        isinstance(start, int)
        and isinstance(length, int)
        and not isinstance(start, bool)
        and not isinstance(length, bool)
        and start >= 0
        and length >= 0
    ):
        return start, length
    raise UsageError(
        f"range of {key!r} must be two non-negative integers, got {start!r}+{length!r}"
    )


class ObjectStore(ABC):
    """A key -> bytes store with atomic puts and a conditional create.

    Guarantees every backend keeps:

    * ``put`` is atomic and durable when it returns: a reader sees the old
      bytes or the new ones, never a part, even after a crash.
    * ``put_if_absent`` creates the key only if no object holds it, and
      exactly one of any number of concurrent callers (threads, processes,
      machines) gets True.
    * ``list`` yields keys in ascending (UTF-8 byte) order.
    * A store pickles to a handle that re-opens the same location (clients,
      pools and locks are re-created after unpickling).
    """

    #: URI scheme(s) this backend serves, set by subclasses.
    schemes: ClassVar[tuple[str, ...]] = ()
    #: How many objects one listing request returns: listing n objects costs about
    #: n / list_page_size requests (1 where listing pays per object, as a directory scan
    #: that reads each file's timestamp does). Lets a caller choose between a listing
    #: and one ``stat`` per object.
    list_page_size: ClassVar[int] = 1

    @property
    @abstractmethod
    def uri(self) -> str:
        """The URI that re-opens this store with :func:`open_store`."""

    @property
    def location(self) -> str:
        """What tells this store's objects apart from every other store's: two stores
        with equal locations hold the same objects. The URI, unless options pick the
        place too (an S3 endpoint: the same bucket name on two servers is two lakes)."""
        return self.uri

    @classmethod
    @abstractmethod
    def from_uri(cls, parts: SplitResult, options: Mapping[str, Any]) -> ObjectStore:
        """Open the store named by a parsed URI (called by :func:`open_store`)."""

    # -- reads ---------------------------------------------------------------

    @abstractmethod
    def get(self, key: str) -> bytes:
        """The bytes stored at ``key``; :class:`NotFoundError` if there are none."""

    @abstractmethod
    def get_range(self, key: str, start: int, length: int) -> bytes:
        """Up to ``length`` bytes of ``key`` from offset ``start`` (short at the end)."""

    @abstractmethod
    def stat(self, key: str) -> ObjectInfo:
        """Size and modification time of ``key``; :class:`NotFoundError` if absent."""

    def stat_or_none(self, key: str) -> ObjectInfo | None:
        """:meth:`stat`, or None when ``key`` is absent: for a check where absence is the
        normal answer (a writer about to write a block). A file store does not look for
        a copy a killed collector moved aside here, which :meth:`stat` and the reads do."""
        try:
            return self.stat(key)
        except NotFoundError:
            return None

    def exists(self, key: str) -> bool:
        """Whether an object is stored at ``key``."""
        return self.stat_or_none(key) is not None

    @abstractmethod
    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        """Every object whose key starts with ``prefix``, in ascending key order."""

    @abstractmethod
    def list_prefixes(self, prefix: str = "") -> builtins.list[str]:
        """The distinct next path segments below ``prefix`` (which ends with ``/`` or is empty).

        ``list_prefixes("refs/")`` on keys ``refs/a/1``, ``refs/a/2``, ``refs/b/1``
        returns ``["a", "b"]``: a cheap directory listing, like S3's delimiter.
        """

    def get_many(self, keys: Sequence[str]) -> dict[str, bytes]:
        """The bytes of several keys; :class:`NotFoundError` if any is missing."""
        return dict(zip(keys, self.map_bulk(self.get, keys), strict=True))

    # -- writes --------------------------------------------------------------

    @abstractmethod
    def put(self, key: str, data: bytes) -> None:
        """Store ``data`` at ``key``, replacing what was there, atomically and durably."""

    @abstractmethod
    def put_if_absent(self, key: str, data: bytes) -> bool:
        """Create ``key`` only if it does not exist; True if this call created it."""

    def put_hint(self, key: str, data: bytes) -> None:
        """Store a hint: atomic like ``put``, but it need not survive a crash.

        For data that readers verify or can rebuild (the journal's HEAD
        pointer): backends may skip the flush that makes ``put`` durable.
        """
        self.put(key, data)

    def put_many(self, items: Iterable[tuple[str, bytes]]) -> None:
        """Store several objects; all are durable when this returns.

        Every key and value is checked before the first write, so bad input
        writes nothing.
        """
        pairs = [(check_key(key), check_data(key, data)) for key, data in items]
        self.map_bulk(lambda kv: self.put(kv[0], kv[1]), pairs)

    def put_if_absent_after(
        self, items: Iterable[tuple[str, bytes]], key: str, data: bytes
    ) -> bool:
        """``put_many(items)``, then ``put_if_absent(key, data)``: ``key`` never exists
        before every item is durable. True if this call created ``key``.

        The items are written whether or not ``key`` is created. Backends
        overlap what ordering allows (the file store flushes the bytes of the
        items and of ``key`` in one round); this default runs the two in turn.

        A :class:`StorageError`'s ``definite`` speaks of ``key``, the write a
        caller acts on: one that writing the items raised is definite (``key``
        was never attempted) even when the items may or may not have been
        stored, which is harmless while nothing names them (see
        :func:`items_failed`). Only a failure of ``key``'s own write can be
        indefinite.
        """
        try:
            self.put_many(items)
        except StorageError as exc:
            if exc.definite:
                raise
            raise items_failed(key, exc) from exc
        return self.put_if_absent(key, data)

    @abstractmethod
    def touch(self, key: str) -> None:
        """Set the modification time of ``key`` to now; :class:`NotFoundError` if absent."""

    @abstractmethod
    def delete(self, key: str) -> None:
        """Remove ``key``; removing a missing key is not an error."""

    def delete_many(self, keys: Iterable[str]) -> None:
        """Remove several keys (missing ones are skipped)."""
        self.map_bulk(self.delete, list(keys))

    #: Whether :meth:`delete_if_older` checks the timestamp as part of the delete.
    conditional_delete: bool = False

    def delete_if_older(self, key: str, cutoff: float) -> bool:
        """Remove ``key`` only if its timestamp is still older than ``cutoff``, checked
        where no writer can refresh it any more; whether it was removed. Only stores
        with :attr:`conditional_delete` can (a collection re-reads timestamps itself
        on the others)."""
        raise NotImplementedError(f"{type(self).__name__} cannot delete conditionally")

    # -- durability and leftovers ------------------------------------------------

    def make_durable(self, keys: Iterable[str]) -> None:
        """Make objects found present survive a crash before relying on them.

        Another process's write can be visible before it is durable (a file
        store between its rename and its directory flush). A writer that finds
        an object present and skips writing it (a block another transaction
        wrote) calls this before making anything durable that names it (a
        journal entry). Backends where visible means durable (memory, S3) do
        nothing.
        """
        return None

    def remove_stale_temporaries(self, older_than: float) -> tuple[int, int]:
        """Remove temporaries killed writers left, last written before ``older_than``.

        ``older_than`` is a time in seconds since the epoch (GC passes ``now -
        grace``). Returns ``(count, bytes)`` removed. Backends that write no
        temporaries (memory) remove nothing.
        """
        return 0, 0

    # -- life cycle ----------------------------------------------------------

    #: Threads used by the default bulk methods; 1 means serial.
    bulk_workers: int = 1
    #: Whether a metadata request (``stat``, ``exists``) costs microseconds (a local
    #: store), so that a few of them run inline rather than on the I/O pool.
    local: ClassVar[bool] = False
    _pool: ThreadPoolExecutor | None = None
    #: The process that made ``_pool`` (see :mod:`merkle.storage.owner`).
    _pool_pid: int = 0
    _pool_lock: ClassVar[threading.Lock] = threading.Lock()

    def map_bulk(self, fn: Callable[[Any], Any], items: Sequence[Any]) -> builtins.list[Any]:
        """Apply ``fn`` to every item, on the store's I/O thread pool when it has one.

        Layers above use this to run many small requests against the backend
        concurrently (S3 latency, parallel fsync) without pools of their own.

        On a local store each worker takes a run of items, not one item a
        task: a ``stat`` or an ``unlink`` costs microseconds, and handing each
        to a thread cost more than the call (a collection's re-check of 500
        blocks: 120 ms with one task each, 13 ms in runs; doc/benchmarks.md,
        the eleventh session's notes under "scale"). A remote request's
        latency only concurrency hides, so there every item stays a task of
        its own.
        """
        workers = self.bulk_workers
        if workers <= 1 or len(items) <= 1:
            return [fn(item) for item in items]
        pool = self._pool
        if pool is None or self._pool_pid != owner.pid:
            pool = self._own_pool(workers)
        if not self.local or len(items) <= workers:
            return list(pool.map(fn, items))
        return map_in_runs(pool.map, fn, items, workers)

    def _own_pool(self, workers: int) -> ThreadPoolExecutor:
        """The I/O pool, made on first use; UsageError in a fork of the process that made
        it, whose worker threads are not in this one (see :mod:`merkle.storage.owner`)."""
        if self._pool is not None and self._pool_pid != owner.pid:
            raise owner.foreign_error(
                f"the object store {self.uri}",
                self._pool_pid,
                f"open it again in this process: open_store({self.uri!r}) (or "
                f"merkle.connect({self.uri!r}) for a connection)",
            )
        with ObjectStore._pool_lock:
            if self._pool is None:
                from concurrent.futures import ThreadPoolExecutor  # (with logging: 3 ms)

                self._pool_pid = owner.pid  # before the pool: a pool never has a stale owner
                self._pool = ThreadPoolExecutor(
                    workers, thread_name_prefix=f"{type(self).__name__}-io"
                )
            return self._pool

    def close(self) -> None:
        """Release clients and threads; the store may not be used afterwards."""
        pool, self._pool = self._pool, None
        if pool is not None and self._pool_pid == owner.pid:
            pool.shutdown(wait=True)  # (a parent's pool, in a fork: its threads are not here)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def reopen_options(self) -> dict[str, Any]:
        """Options that :func:`open_store` needs besides the URI to re-open this store."""
        return {}

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickle as "how to open it again": clients, pools and locks are re-created.
        return (_reopen, (self.uri, self.reopen_options()))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.uri!r})"


def _new_pool_lock() -> None:
    # A forked child must not inherit the lock taken by another thread of its parent.
    ObjectStore._pool_lock = threading.Lock()


os.register_at_fork(after_in_child=_new_pool_lock)


# -- the URI registry ------------------------------------------------------------

_REGISTRY: dict[str, str] = {
    "memory": "merkle.storage.memory:MemoryStore",
    "file": "merkle.storage.file:FileStore",
    "s3": "merkle.storage.s3:S3Store",
}
_LOADED: dict[str, type[ObjectStore]] = {}
_SCHEME_RE = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*")


def register_scheme(scheme: str, target: str | type[ObjectStore]) -> None:
    """Serve ``scheme://`` URIs with a backend class or a lazy ``"module:Class"`` path.

    A string target is imported on the first :func:`open_store` of the scheme,
    so registering costs nothing and optional dependencies stay optional.
    """
    if not isinstance(scheme, str) or not _SCHEME_RE.fullmatch(scheme):
        raise UsageError(
            f"a URI scheme is a letter then letters, digits, +, - or ., got {scheme!r}"
        )
    scheme = scheme.lower()
    if isinstance(target, str):
        module_name, colon, class_name = target.partition(":")
        if not (module_name and colon and class_name):
            raise UsageError(f"a lazy backend is written 'module:Class', got {target!r}")
        _REGISTRY[scheme] = target
        _LOADED.pop(scheme, None)
    elif isinstance(target, type) and issubclass(target, ObjectStore):
        _REGISTRY[scheme] = f"{target.__module__}:{target.__qualname__}"
        _LOADED[scheme] = target
    else:
        raise UsageError(f"a backend is an ObjectStore subclass or 'module:Class', got {target!r}")


def supported_schemes() -> list[str]:
    """The URI schemes :func:`open_store` knows, sorted."""
    return sorted(_REGISTRY)


def _backend(scheme: str, uri: str) -> type[ObjectStore]:
    cls = _LOADED.get(scheme)
    if cls is not None:
        return cls
    target = _REGISTRY.get(scheme)
    if target is None:
        known = ", ".join(f"{s}://" for s in supported_schemes())
        raise UsageError(f"unknown storage scheme {scheme!r} in {uri!r}; supported: {known}")
    module_name, _, class_name = target.partition(":")
    try:
        loaded = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError) as exc:
        raise UsageError(
            f"cannot load the backend {target!r} for {scheme}:// URIs ({exc}); install the "
            "package that provides it or fix the register_scheme call"
        ) from exc
    if not (isinstance(loaded, type) and issubclass(loaded, ObjectStore)):
        raise UsageError(f"backend {target!r} for {scheme}:// is not an ObjectStore class")
    _LOADED[scheme] = loaded
    return loaded


def _reopen(uri: str, options: dict[str, Any]) -> ObjectStore:
    return open_store(uri, **options)


def quote_location(path: str) -> str:
    """``path`` as the path part of a store's URI, so that opening the URI gives ``path``
    back: ``%`` (which the backends decode), ``?`` and ``#`` (which would end the path)
    are percent-encoded, and so are control characters (which urlsplit drops without a
    word: a path holding a tab opened the lake at the path without it); everything else
    is left as it is, so that URIs stay readable (and a lake's URI, recorded in the
    journals of its copies, does not change)."""
    quoted = path.replace("%", "%25").replace("?", "%3F").replace("#", "%23")
    if any(map(_is_control, quoted)):
        quoted = "".join(f"%{ord(c):02X}" if _is_control(c) else c for c in quoted)
    return quoted


def _is_control(char: str) -> bool:
    """Whether ``char`` is a control character, which ``urlsplit`` drops from a URI."""
    return ord(char) < 0x20 or ord(char) == 0x7F


def open_store(uri: str | os.PathLike[str], **options: Any) -> ObjectStore:
    """Open the object store named by ``uri``.

    ``memory://`` (fresh) or ``memory://name`` (shared within the process),
    ``file:///absolute/path`` or a plain filesystem path, and
    ``s3://bucket/prefix`` (options ``endpoint_url``, ``region_name``,
    ``aws_access_key_id`` ..., ``bulk_workers``, ``max_attempts``; credentials
    otherwise from boto3's usual chain; see ``doc/storage.md``). Other schemes
    can be added with :func:`register_scheme`.
    """
    if isinstance(uri, os.PathLike):
        uri = os.fspath(uri)
    if not isinstance(uri, str) or not uri.strip():
        raise UsageError(f"a lake URI must be a non-empty string, got {uri!r}")
    if "://" not in uri:
        if ":" in uri.split("/", 1)[0] and not os.path.isabs(uri):
            raise UsageError(
                f"malformed lake URI {uri!r}: write scheme://location, e.g. file:///data/lake"
            )
        location = "file://" + quote_location(os.path.abspath(uri))
        return _backend("file", uri).from_uri(urlsplit(location), options)
    control = next(filter(_is_control, uri), None)
    if control is not None:
        # urlsplit drops tabs and newlines without a word: another lake would be opened.
        raise UsageError(
            f"malformed lake URI {uri!r}: it holds the control character {control!r}; "
            "remove it (or percent-encode it, where a location may hold one)"
        )
    scheme = uri.split("://", 1)[0].lower()
    if not scheme or not scheme.replace("+", "").replace("-", "").replace(".", "").isalnum():
        raise UsageError(f"malformed lake URI {uri!r}: the scheme {scheme!r} is not valid")
    cls = _backend(scheme, uri)
    try:
        parts = urlsplit(uri)
    except ValueError as exc:
        raise UsageError(f"malformed lake URI {uri!r}: {exc}") from None
    return cls.from_uri(parts, options)
