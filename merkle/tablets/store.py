"""The read/write context of the table code: blocks plus decoded caches.

Table operations are pure functions from blocks to new blocks; this object
is what they read and write through. It keeps three byte-bounded caches so
that a block is never decoded twice while it is hot: parsed nodes, decoded
Arrow segments, and per-tablet key indexes for binary search. Segment
encoding and block writes run on a small thread pool (Arrow's IPC writer and
the compressors release the GIL).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Hashable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import pyarrow as pa

from merkle.blocks.cache import ByteLRU
from merkle.blocks.cid import CID, RAW
from merkle.blocks.codec import decode_node_deferred, resolve_links
from merkle.blocks.store import BlockStore
from merkle.errors import IntegrityError, NotFoundError
from merkle.storage import owner
from merkle.storage.base import map_in_runs
from merkle.tablets.keyindex import KeyIndex
from merkle.tablets.nodes import INDEX, TABLET, BatchNode, IndexNode, TableRoot, TabletNode
from merkle.tablets.segment import decode_segment, encode_segment
from merkle.tablets.segschema import decode_segment_schema, schema_message_size

if TYPE_CHECKING:
    from concurrent.futures import ThreadPoolExecutor

__all__ = ["DEFAULT_WORKERS", "Columns", "TableStore", "table_weight"]

#: The columns of a segment to decode (None: all of them).
Columns = frozenset[str] | None

_DEFAULT_CACHE_BYTES = 256 << 20
_SCHEMA_HEAD = 16 << 10  # first bytes of a segment read for its schema: almost always enough
_POOL_PREFIX = "merkle-tablets"
#: Encode/decode workers: one per core (more only oversubscribes the cores
#: that hashing and decompression already use), at least 2, at most 8.
DEFAULT_WORKERS = max(2, min(8, os.cpu_count() or 2))
#: A fan-out of at most this many blocks on a local store runs in the calling
#: thread: a point read's key page and family pages (see :meth:`TableStore.map_local`).
LOCAL_INLINE_BLOCKS = 3
N = TypeVar("N")


class _Shared:
    """Caches and worker threads that several TableStore views over one lake share."""

    def __init__(self, cache_bytes: int, workers: int) -> None:
        self.nodes: ByteLRU[Any] = ByteLRU(max(1 << 20, cache_bytes // 8))
        self.segments: ByteLRU[Any] = ByteLRU(cache_bytes)  # decoded segments, overlays
        self.key_indexes: ByteLRU[KeyIndex] = ByteLRU(max(1 << 20, cache_bytes // 4))
        self.cache_bytes = cache_bytes
        self.workers = workers
        self.pool: ThreadPoolExecutor | None = None
        self.lock = threading.Lock()
        #: The process these belong to: a fork's child has neither the workers nor
        #: perhaps the lock (see :mod:`merkle.storage.owner`).
        self.pid = owner.pid
        #: Decoded blocks a read holds at hand (see ``TableStore.holding``), with how
        #: many reads hold each.
        self.held: dict[tuple[bytes, Columns], tuple[pa.Table, int]] = {}

    def executor(self, uri: str) -> ThreadPoolExecutor:
        """The worker pool (made on first use); UsageError in a fork of the process that
        made these caches (the lake at ``uri``), where it would wait forever."""
        if self.pid != owner.pid:
            raise owner.foreign_error(
                f"the table workers of the connection to {uri}",
                self.pid,
                f"a forked process must open its own connection: merkle.connect({uri!r})",
            )
        with self.lock:
            if self.pool is None:
                # Imported with the first pool (it imports logging): a process that never
                # fans out, such as a command that reads one page, does not pay for it.
                from concurrent.futures import ThreadPoolExecutor

                self.pool = ThreadPoolExecutor(self.workers, thread_name_prefix=_POOL_PREFIX)
            return self.pool

    def close(self) -> None:
        if self.pid != owner.pid:  # a fork: the parent's workers are not here to stop
            self.pool = None
            return
        with self.lock:
            pool, self.pool = self.pool, None
        if pool is not None:
            pool.shutdown(wait=True)


class TableStore:
    """Blocks, parsed nodes, decoded segments and key indexes, with byte-bounded caches."""

    def __init__(
        self,
        blocks: BlockStore,
        *,
        cache_bytes: int = _DEFAULT_CACHE_BYTES,
        workers: int = DEFAULT_WORKERS,
        shared: _Shared | None = None,
    ) -> None:
        self.blocks = blocks
        self._shared = shared or _Shared(cache_bytes, workers)
        self._nodes = self._shared.nodes
        self._segments = self._shared.segments
        self._key_indexes = self._shared.key_indexes
        self._held = self._shared.held

    def __reduce__(self) -> tuple[Any, ...]:
        return (_reopen, (self.blocks, self._shared.cache_bytes, self._shared.workers))

    @property
    def cache_bytes(self) -> int:
        """The byte budget of the decoded-block cache."""
        return self._shared.cache_bytes

    def with_blocks(self, blocks: BlockStore) -> TableStore:
        """A view reading and writing through ``blocks`` that shares these caches and threads.

        Caches are keyed by CID, so a staging area and the lake can share
        them safely: equal CIDs are equal bytes.
        """
        return TableStore(blocks, shared=self._shared)

    # -- concurrency -------------------------------------------------------------

    def map(self, fn: Callable[[Any], N], items: Sequence[Any]) -> list[N]:
        """Apply ``fn`` to every item on the worker pool (in order).

        Calls made from a pool thread run inline: nested fan-out onto a bounded
        pool would deadlock once every worker waits for its own children.
        """
        if len(items) <= 1 or self._shared.workers <= 1 or _on_pool_thread():
            return [fn(item) for item in items]
        return list(self._shared.executor(self.blocks.store.uri).map(fn, items))

    def map_local(self, fn: Callable[[Any], N], items: Sequence[Any]) -> list[N]:
        """:meth:`map` for work on blocks: on a local store, in one task per worker.

        Reading a block from a local disk costs microseconds, so handing each
        block to a thread (and taking the interpreter lock back for each)
        costs more than the block's own work: each worker takes a run of
        blocks instead. On a remote store each block is a request whose
        latency only concurrency hides, so each is a task of its own.

        A point read (or a small range) reads a key page and a page per family:
        up to :data:`LOCAL_INLINE_BLOCKS` such blocks are read and decoded in the
        calling thread. Handing two pages to the pool took longer than decoding
        both here (1M-row table, one key: 0.75 against 0.65 ms with the pool
        running, 1.3-1.7 against 0.9 ms on a new connection, whose pool starts
        first, 3-3.6 against 0.9 ms while the other core was busy), and a
        process that reads one record never starts the pool nor imports
        ``concurrent.futures`` (``merkle get``). Three blocks (a key page and
        two families) stay inline; from 8 blocks on the pool is faster again.
        """
        workers = self._shared.workers
        local = self.blocks.store.local
        if local and len(items) <= LOCAL_INLINE_BLOCKS:
            return [fn(item) for item in items]
        if not local or len(items) <= workers:
            return self.map(fn, items)
        return map_in_runs(self.map, fn, items, workers)

    # -- nodes -------------------------------------------------------------------

    def _parsed(self, cid: CID, parse: Callable[[Any, object], N], weight: int) -> N:
        key = (parse, cid.bytes)
        node = self._nodes.get(key)
        if node is None:
            node = parse(self.blocks.get_node(cid), cid)
            self._nodes.put(key, node, weight)
        return node

    def table(self, cid: CID) -> TableRoot:
        return self._parsed(cid, TableRoot.from_node, _PARSED_NODE)

    def index(self, cid: CID) -> IndexNode:
        node = self._nodes.get((IndexNode.from_node, cid.bytes))
        if node is None:
            found = self.child(cid)
            if not isinstance(found, IndexNode):
                raise IntegrityError(f"node {cid} has type {TABLET!r}, expected {INDEX!r}")
            node = found
        return node

    def child(self, cid: CID) -> TabletNode | IndexNode:
        """The tablet or index node a link of the tree points to (parsed, cached).

        An index node not yet decoded is decoded with its links deferred (see
        :meth:`IndexNode.from_deferred`); a point read through a 100-child node
        uses one of them.
        """
        for parse in (TabletNode.from_node, IndexNode.from_node):
            parsed = self._nodes.get((parse, cid.bytes))
            if parsed is not None:
                return parsed  # type: ignore[no-any-return]
        decoded = self.blocks.node_cache.get(cid.bytes)
        deferred = decoded is None
        if deferred:
            decoded = decode_node_deferred(self.blocks.get(cid))
        kind = decoded.get("type") if isinstance(decoded, dict) else None
        if kind == INDEX:
            index = (
                IndexNode.from_deferred(decoded, cid)
                if deferred
                else IndexNode.from_node(decoded, cid)
            )
            self._nodes.put((IndexNode.from_node, cid.bytes), index, _INDEX_NODE)
            return index
        if kind == TABLET:
            tablet = TabletNode.from_node(resolve_links(decoded) if deferred else decoded, cid)
            self._nodes.put((TabletNode.from_node, cid.bytes), tablet, _PARSED_NODE)
            return tablet
        raise IntegrityError(f"block {cid} is a {kind!r} node, not a tablet or index node")

    def tablet(self, cid: CID) -> TabletNode:
        return self._parsed(cid, TabletNode.from_node, _PARSED_NODE)

    def batch(self, cid: CID) -> BatchNode:
        return self._parsed(cid, BatchNode.from_node, 4 << 10)

    def prefetch_nodes(self, cids: Sequence[CID]) -> None:
        """Fetch the uncached nodes among ``cids`` concurrently (into the node cache)."""
        cache = self.blocks.node_cache
        missing = [cid for cid in cids if cache.get(cid.bytes) is None]
        if len(missing) > 1:
            self.map(self.blocks.get_node, missing)

    def put_node(self, node: Any) -> CID:
        return self.blocks.put_node(node)

    def put_nodes(self, nodes: Sequence[Any]) -> list[CID]:
        """Store several nodes with one concurrent, durable write round."""
        return self.blocks.put_nodes(nodes)

    # -- segments ----------------------------------------------------------------

    def segment(self, cid: CID) -> pa.Table:
        """The decoded Arrow table of a segment block (cached)."""
        return self.segments([cid])[0]

    def segments(self, cids: Sequence[CID]) -> list[pa.Table]:
        """Decoded segments, fetching the uncached ones concurrently."""
        return self.segment_columns([(cid, None) for cid in cids])

    def segment_columns(
        self, items: Sequence[tuple[CID, Columns]], *, keep: bool = True
    ) -> list[pa.Table]:
        """Segments decoded to only the named columns (each item: a segment, its columns,
        None for all), fetching the uncached ones concurrently.

        A segment whose whole table is cached is projected from it; otherwise
        only the named columns are decompressed (the block is still read and
        verified whole), and the projection is cached under its columns,
        unless ``keep`` is false: a read bigger than the cache would only push
        out what it is about to read next (and keeping every decoded block
        alive made a 1,000-key lookup in 10M rows 10% slower).
        """
        found: dict[tuple[bytes, Columns], pa.Table] = {}
        missing: list[tuple[CID, Columns]] = []
        held = self._held
        for cid, names in items:
            key = (cid.bytes, names)
            if key in found:
                continue
            at_hand = held.get(key) if held else None
            if at_hand is not None:
                found[key] = at_hand[0]
                continue
            whole = self._segments.get(cid.bytes)
            if whole is not None:
                found[key] = (
                    whole
                    if names is None
                    else whole.select([n for n in whole.column_names if n in names])
                )
                continue
            part = None if names is None else self._segments.get(("columns", *key))
            if part is None:
                missing.append((cid, names))
            else:
                found[key] = part
        if missing:
            unique = list(dict.fromkeys(missing))
            decoded = self._fetch_decoded(unique)
            for (cid, names), table in zip(unique, decoded, strict=True):
                if keep:
                    cache_key: Hashable = (
                        cid.bytes if names is None else ("columns", cid.bytes, names)
                    )
                    self._segments.put(cache_key, table, table_weight(table))
                found[(cid.bytes, names)] = table
        return [found[(cid.bytes, names)] for cid, names in items]

    @contextlib.contextmanager
    def holding(self, items: Sequence[tuple[CID, Columns]], *, keep: bool = True) -> Iterator[None]:
        """:meth:`segment_columns` of ``items``, kept at hand until the block exits, however
        small the cache: a read that fetches blocks ahead (a scan, a run of pages) and
        then reads them page by page decodes each once. With a cache smaller than a
        run, every block was decoded two or three times (a 10M-row scan with a 4 MB
        cache: 0.9-1.5 s, against ~0.4 s with 12 MB). ``keep``: as for
        :meth:`segment_columns`."""
        tables = self.segment_columns(items, keep=keep)
        by_key = {
            (cid.bytes, names): table for (cid, names), table in zip(items, tables, strict=True)
        }
        with self._shared.lock:
            for key, decoded in by_key.items():
                table, holders = self._held.get(key, (decoded, 0))
                self._held[key] = (table, holders + 1)
        try:
            yield
        finally:
            with self._shared.lock:
                for key in by_key:
                    table, holders = self._held[key]
                    if holders > 1:
                        self._held[key] = (table, holders - 1)
                    else:
                        del self._held[key]

    def _fetch_decoded(self, items: Sequence[tuple[CID, Columns]]) -> list[pa.Table]:
        """Read, verify and decode segments (each to its columns), concurrently."""
        if len(items) > 1 and not self.blocks.store.local and _on_pool_thread():
            # A task on the pool (one page of a lookup) cannot fan out on the pool
            # again, and a remote block is a request whose latency only concurrency
            # hides: the store's own I/O threads fetch the task's blocks at once.
            data = self.blocks.get_many([cid for cid, _ in items])
            return [decode_segment(data[cid], names) for cid, names in items]
        # Each worker reads, verifies and decodes one segment: decoding starts as soon
        # as that block's bytes arrive, not after every block is read.
        return self.map_local(lambda item: decode_segment(self.blocks.get(item[0]), item[1]), items)

    def segment_schemas(self, cids: Sequence[CID]) -> list[pa.Schema]:
        """The schemas of segments, read from the first bytes of each block (cached).

        Costs one small ranged read per uncached segment, concurrently, and
        never the segment's data; the bytes are not hash-checked (see
        :func:`~merkle.tablets.segschema.decode_segment_schema`).
        """
        store = self.blocks.store

        def read(cid: CID) -> pa.Schema:
            key = self.blocks.key(cid)
            try:
                head = store.get_range(key, 0, _SCHEMA_HEAD)
                size = schema_message_size(head)
                if size > len(head):
                    head = store.get_range(key, 0, size)
            except NotFoundError:
                # as a whole-block read says it (a leased read: whether its lease lapsed)
                raise self.blocks.missing_error(cid) from None
            return decode_segment_schema(head)

        found: dict[bytes, pa.Schema] = {}
        missing = []
        for cid in dict.fromkeys(cids):
            schema = self._nodes.get(("schema", cid.bytes))
            if schema is None:
                missing.append(cid)
            else:
                found[cid.bytes] = schema
        for cid, schema in zip(missing, store.map_bulk(read, missing), strict=True):
            self._nodes.put(("schema", cid.bytes), schema, 1024)
            found[cid.bytes] = schema
        return [found[cid.bytes] for cid in cids]

    def put_segments(self, tables: Sequence[pa.Table]) -> list[tuple[CID, int]]:
        """Encode and store segments; (CID, stored bytes) for each, in order."""
        encoded = self.map(encode_segment, list(tables))
        return self.store_encoded(list(zip(tables, encoded, strict=True)))

    def store_encoded(
        self, segments: Sequence[tuple[pa.Table, bytes]], *, bulk: bool = False
    ) -> list[tuple[CID, int]]:
        """Store already-encoded segments (and cache their tables); (CID, bytes) each.

        ``bulk`` (a large write): the blocks may go to the lake at once
        (``BlockStore.put_many(early=True)``) and their tables are not cached,
        which would only push out what readers use.
        """
        cids = self.blocks.put_many([(data, RAW) for _, data in segments], early=bulk)
        if not bulk:
            for cid, (table, _) in zip(cids, segments, strict=True):
                self._segments.put(cid.bytes, table, table_weight(table))
        return [(cid, len(data)) for cid, (_, data) in zip(cids, segments, strict=True)]

    # -- key indexes -------------------------------------------------------------

    def key_index(
        self,
        owner: CID,
        build: Callable[[], pa.Array | KeyIndex],
        *,
        encoding: str,
        part: str = "",
        keep: bool = True,
    ) -> KeyIndex:
        """The key index of a tablet or batch (``part`` tells several of one block apart);
        ``build`` gives the encoded keys or a ready index (cached unless not ``keep``).

        ``encoding`` is the spec of the key codec that encoded the keys: two tables
        holding the same rows store the same blocks (segments hold native keys),
        and the encoded keys of one codec must never serve a table of another.
        """
        key = (part, encoding, owner.bytes)
        index = self._key_indexes.get(key)
        if index is None:
            built = build()
            index = built if isinstance(built, KeyIndex) else KeyIndex(built)
            if keep:
                self._key_indexes.put(key, index, index.nbytes)
        return index

    def cached(self, key: Hashable, build: Callable[[], N], weigh: Callable[[N], int]) -> N:
        """A derived value (e.g. a folded overlay) cached with the decoded nodes."""
        found = self._segments.get(key)  # the big cache: overlays weigh like segments
        if found is None:
            found = build()
            self._segments.put(key, found, weigh(found))
        return found

    def close(self) -> None:
        """Stop the worker threads (shared with every view of this store)."""
        self._shared.close()


def _on_pool_thread() -> bool:
    """Whether this thread is one of the workers (whose fan-out runs inline)."""
    return threading.current_thread().name.startswith(_POOL_PREFIX)


def _reopen(blocks: BlockStore, cache_bytes: int, workers: int) -> TableStore:
    return TableStore(blocks, cache_bytes=cache_bytes, workers=workers)


#: A parsed table root's or tablet node's weight in the node cache: ~2.3 KB measured for a
#: tablet node of a few pages (its page list, keys and CIDs as Python objects).
_PARSED_NODE = 2 << 10
#: The cache weight of a parsed index node (up to a few hundred children's columns).
_INDEX_NODE = 16 << 10

#: What a decoded table holds besides its buffers, measured (RSS) with pyarrow 26: ~2.1 KB
#: for two columns of one row, ~5.5 KB for six (the C++ table, schema, arrays and buffer
#: objects, the Python wrappers and the cache's key): charged so that a cache of pages of a
#: few rows stays within ``cache_bytes`` (one of 1 MB held 19 MB of 1-row pages).
_TABLE_OVERHEAD = 512
_COLUMN_OVERHEAD = 1024


def table_weight(table: pa.Table) -> int:
    """A decoded table's weight in the cache: the bytes of the buffers it keeps alive, plus
    the objects that hold them.

    Not ``Table.nbytes``, which works out the bytes its rows reference,
    buffer by buffer (18 us for a 4-column page, paid by every block a read
    decodes): the buffers' full size is what the cache holds in memory.
    """
    columns = int(table.num_columns)
    return int(table.get_total_buffer_size()) + _TABLE_OVERHEAD + _COLUMN_OVERHEAD * columns
