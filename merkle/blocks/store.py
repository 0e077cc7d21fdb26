"""Content-addressed blocks over an ObjectStore.

A block lives at ``blocks/<cid>``. Writing a block that already exists costs
a metadata check, never a second upload; but if the existing copy is older
than the caller's ``refresh_before`` time (the start of its writer lease) its
timestamp is refreshed, so a garbage collector that spares blocks newer than
the oldest live writer lease cannot delete a block a writer just re-used
(dulwich does the same for re-put loose objects). Every read re-hashes the
bytes and compares them with the CID.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from merkle.blocks.cache import ByteLRU
from merkle.blocks.cid import CID, DAG_CBOR, codec_code, hash_code
from merkle.blocks.codec import decode_node, encode_node
from merkle.errors import IntegrityError, MerkleError, NotFoundError, UsageError
from merkle.storage.base import ObjectInfo, ObjectStore

__all__ = ["BLOCK_PREFIX", "BlockStore", "MissingBlockError", "node_weight"]


def node_weight(size: int) -> int:
    """A decoded node's weight in the cache, from its encoded ``size``: CBOR decoded into
    Python dicts, lists and bytes takes about four times its bytes (a 891-byte tablet
    node: ~3.8 KB), and the cache must hold ``cache_bytes`` of memory, not of blocks."""
    return 4 * size + 512


#: Where blocks live in a lake.
BLOCK_PREFIX = "blocks/"

_DEFAULT_CACHE_BYTES = 64 << 20
#: Up to this many blocks, a local store's stats run inline (a pool hand-off costs more).
_INLINE_STATS = 16


class MissingBlockError(NotFoundError):
    """A block is not in the store; ``cid`` names it."""

    def __init__(self, message: str, cid: CID) -> None:
        super().__init__(message)
        self.cid = cid


class BlockStore:
    """Put, get and verify blocks by CID; cache decoded nodes within a byte budget."""

    def __init__(
        self,
        store: ObjectStore,
        *,
        hash: str | int = "blake3",
        cache_bytes: int = _DEFAULT_CACHE_BYTES,
        node_cache: ByteLRU[Any] | None = None,
    ) -> None:
        self.store = store
        self.hash_code = hash_code(hash)
        #: Decoded nodes by CID: views over one lake (staging, leased reads) share it.
        self.node_cache: ByteLRU[Any] = ByteLRU(cache_bytes) if node_cache is None else node_cache

    def __reduce__(self) -> tuple[Any, ...]:
        return (_reopen, (self.store, self.hash_code, self.node_cache.capacity))

    @staticmethod
    def key(cid: CID) -> str:
        """The object key of a block."""
        return BLOCK_PREFIX + str(cid)

    def cid_of(self, data: bytes, codec: str | int = DAG_CBOR) -> CID:
        """The CID ``data`` would get in this store, without storing it."""
        return CID.of(data, codec, self.hash_code)

    # -- writes --------------------------------------------------------------

    def put(
        self, data: bytes, codec: str | int = "raw", *, refresh_before: float | None = None
    ) -> CID:
        """Store one block and return its CID (see the module doc for ``refresh_before``)."""
        return self.put_many([(data, codec)], refresh_before=refresh_before)[0]

    def put_node(self, node: Any, *, refresh_before: float | None = None) -> CID:
        """Encode ``node`` as DAG-CBOR, store it, and cache ``node`` itself as its decoded form.

        The cache holds the caller's object: do not mutate it afterwards, and
        build nodes from lists and dicts (a tuple would be read back from the
        cache as a tuple, from storage as a list).
        """
        data = encode_node(node)
        cid = self.put(data, DAG_CBOR, refresh_before=refresh_before)
        self.node_cache.put(cid.bytes, node, node_weight(len(data)))
        return cid

    def put_nodes(self, nodes: Sequence[Any], *, refresh_before: float | None = None) -> list[CID]:
        """Encode and store several nodes in one concurrent write round (cached as ``put_node``)."""
        encoded = [encode_node(node) for node in nodes]
        cids = self.put_many([(data, DAG_CBOR) for data in encoded], refresh_before=refresh_before)
        for cid, node, data in zip(cids, nodes, encoded, strict=True):
            self.node_cache.put(cid.bytes, node, node_weight(len(data)))
        return cids

    def put_many(
        self,
        blocks: Iterable[tuple[bytes, str | int]],
        *,
        refresh_before: float | None = None,
        early: bool = False,
    ) -> list[CID]:
        """Store several blocks concurrently; every one is durable when this returns.

        ``early`` says the blocks are final and their bytes will not be asked
        for again soon (a bulk write's pages): a store that holds writes back
        (a transaction's staging area) may send them on at once.
        """
        cids: list[CID] = []
        pending: dict[str, bytes] = {}
        for data, codec in blocks:
            if not isinstance(data, (bytes, bytearray, memoryview)):
                raise UsageError(f"block data must be bytes, got {type(data).__name__}")
            if type(data) is not bytes:
                data = bytes(data)  # freeze a bytearray or memoryview; bytes are used as is
            cid = CID.of(data, codec_code(codec), self.hash_code)
            cids.append(cid)
            pending[self.key(cid)] = data
        self._store_absent(pending, refresh_before)
        return cids

    def put_hashed(
        self, blocks: Iterable[tuple[CID, bytes]], *, refresh_before: float | None = None
    ) -> None:
        """Store blocks whose CIDs this process computed itself from these very bytes.

        Skips re-hashing (a commit's staged blocks were hashed when they were
        made); never pass CIDs that came from outside.
        """
        self._store_absent({self.key(cid): data for cid, data in blocks}, refresh_before)

    def absent(
        self, blocks: Iterable[tuple[CID, bytes]], *, refresh_before: float | None
    ) -> list[tuple[str, bytes]]:
        """The (object key, bytes) of the blocks not stored yet; refreshes the others.

        For a caller that writes them itself, together with what must follow
        them (a commit writes them in one round with its journal entry). Like
        :meth:`put_hashed`, only for CIDs this process computed from the bytes.
        """
        return self._absent({self.key(cid): data for cid, data in blocks}, refresh_before)

    def _absent(
        self, pending: dict[str, bytes], refresh_before: float | None
    ) -> list[tuple[str, bytes]]:
        if not pending:
            return []
        keys = list(pending)
        if self.store.local and len(keys) <= _INLINE_STATS:
            present = [self._refresh(key, refresh_before) for key in keys]
        else:
            present = self.store.map_bulk(lambda key: self._refresh(key, refresh_before), keys)
        found = [key for key, there in zip(keys, present, strict=True) if there]
        if found:
            # Perhaps written by another process that has not made them durable yet:
            # what this caller commits next must not outlive them.
            self.store.make_durable(found)
        return [(key, pending[key]) for key, there in zip(keys, present, strict=True) if not there]

    def _store_absent(self, pending: dict[str, bytes], refresh_before: float | None) -> None:
        """Write the blocks not yet stored; refresh old timestamps of those that are."""
        missing = self._absent(pending, refresh_before)
        if missing:
            self.store.put_many(missing)

    def _refresh(self, key: str, refresh_before: float | None) -> bool:
        """Whether the block is present (refreshing an old timestamp), else it must be written."""
        info = self.store.stat_or_none(key)  # a miss is normal here: one failed stat
        if info is None:
            return False
        if refresh_before is not None and info.mtime < refresh_before:
            try:
                self.store.touch(key)
            except NotFoundError:
                return False  # deleted between stat and touch: write it again
        return True

    def present(self, cids: Sequence[CID], *, refresh_before: float | None) -> list[bool]:
        """Whether each block is stored, refreshing the timestamps of old ones.

        A writer that relies on a block it did not write (a copy that skips
        blocks the destination holds) calls this under its writer lease with
        ``refresh_before=lease.start``, exactly as a put of an existing block
        would: a collection then spares what was found.
        """
        keys = [self.key(cid) for cid in cids]
        found: list[bool] = self.store.map_bulk(
            lambda key: self._refresh(key, refresh_before), keys
        )
        return found

    def delete(self, cid: CID) -> None:
        """Remove a block (GC only: a referenced block must never be deleted)."""
        self.node_cache.discard(cid.bytes)
        self.store.delete(self.key(cid))

    def delete_many(self, cids: Iterable[CID]) -> None:
        """Remove several blocks (batched where the backend can)."""
        cids = list(cids)
        for cid in cids:
            self.node_cache.discard(cid.bytes)
        self.store.delete_many([self.key(cid) for cid in cids])

    def delete_many_if_older(
        self, items: Sequence[tuple[CID, int]], cutoff: float
    ) -> list[tuple[CID, int]] | None:
        """Remove each block (with its size) whose timestamp is still older than ``cutoff``,
        checked where no writer can refresh it any more; the ones removed. None when
        the store cannot (S3, memory): the caller re-reads the timestamps and deletes.
        """
        store = self.store
        if not store.conditional_delete:
            return None
        for cid, _ in items:
            self.node_cache.discard(cid.bytes)
        gone = store.map_bulk(
            lambda item: store.delete_if_older(self.key(item[0]), cutoff), list(items)
        )
        return [item for item, removed in zip(items, gone, strict=True) if removed]

    # -- reads ---------------------------------------------------------------

    def missing_error(self, cid: CID) -> MerkleError:
        """The error a read of ``cid`` raises when the block is not stored (for reads
        that go to the object store directly, such as a ranged read of a block's head)."""
        return self._missing(cid)

    def _missing(self, cid: CID) -> MerkleError:
        """The error a read of a block not stored raises (every read path makes it here)."""
        return MissingBlockError(
            f"block {cid} is missing from {self.store.uri}; it was never written "
            "or has been garbage-collected",
            cid,
        )

    def get(self, cid: CID) -> bytes:
        """The verified bytes of a block; :class:`IntegrityError` if they do not match."""
        return self._fetch((cid, self.key(cid)))

    def _fetch(self, pair: tuple[CID, str]) -> bytes:
        """Read and verify one block; read it once more before calling it corrupt.

        Bytes damaged on the way (a network path that flips a bit, an S3 proxy)
        are not damage at rest: a second read that verifies is the block. Only
        a mismatch that repeats is an :class:`IntegrityError`.
        """
        cid, key = pair
        try:
            data = self.store.get(key)
        except NotFoundError:
            raise self._missing(cid) from None
        try:
            cid.verify(data)
        except IntegrityError:
            try:
                data = self.store.get(key)
            except NotFoundError:
                raise self._missing(cid) from None
            cid.verify(data)
        return data

    def get_node(self, cid: CID) -> Any:
        """The decoded DAG-CBOR node of ``cid`` (shared from the cache: do not mutate it)."""
        node = self.node_cache.get(cid.bytes)
        if node is None:
            data = self.get(cid)
            node = decode_node(data)
            self.node_cache.put(cid.bytes, node, node_weight(len(data)))
        return node

    def get_many(self, cids: Sequence[CID]) -> dict[CID, bytes]:
        """The verified bytes of several blocks, fetched concurrently."""
        unique = list(dict.fromkeys(cids))
        keys = [self.key(cid) for cid in unique]
        return dict(
            zip(
                unique,
                self.store.map_bulk(self._fetch, list(zip(unique, keys, strict=True))),
                strict=True,
            )
        )

    def has(self, cid: CID) -> bool:
        """Whether the block is stored (no hash check)."""
        return self.store.exists(self.key(cid))

    def stat(self, cid: CID) -> ObjectInfo:
        """Size and timestamp of a stored block."""
        try:
            return self.store.stat(self.key(cid))
        except NotFoundError:
            raise self._missing(cid) from None

    def list(self, prefix: str = "") -> Iterator[tuple[CID, ObjectInfo]]:
        """Every stored block (whose CID string starts with ``prefix``) with its size and
        timestamp; unparseable keys are skipped."""
        for info in self.store.list(BLOCK_PREFIX + prefix):
            try:
                cid = CID.parse(info.key[len(BLOCK_PREFIX) :])
            except UsageError:
                continue
            yield cid, info


def _reopen(store: ObjectStore, code: int, cache_bytes: int) -> BlockStore:
    names = {0x1E: "blake3", 0x12: "sha2-256"}
    return BlockStore(store, hash=names[code], cache_bytes=cache_bytes)
