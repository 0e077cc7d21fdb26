"""Blocks of an uncommitted transaction, held in memory until commit.

Nothing a transaction writes reaches the lake before ``commit()``: its blocks
are staged here (reads see them first, then the lake). At commit, only the
staged blocks reachable from the new root are written, concurrently and
durably, under the writer lease, before the journal entry that names them.
Intermediate blocks (batches merged away within the transaction) never
reach storage.

A new root also links blocks it did not stage. Those of the version the
transaction is based on need no check: the commit's compare-and-set succeeds
only while that version is the head, which every collection keeps (and a
collection that goes on without this writer fences it off first). Blocks
taken from anywhere else (``build_table``'s tablets) are registered as
*foreign*, and the commit proves, under its writer lease, that every block
they reach is stored: a cost proportional to what is linked from outside.

A large write does not wait for the commit: while the commit builds its root
under its writer lease (:meth:`StagedBlocks.writing_early`), blocks put with
``early=True`` (the pages of a bulk write) are written durably in the
background as they are made, so encoding and writing overlap, and their bytes
leave memory once they are stored.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from merkle.blocks.cid import CID, DAG_CBOR, codec_code
from merkle.blocks.codec import decode_node, iter_links
from merkle.blocks.store import BlockStore, MissingBlockError
from merkle.blocks.walk import missing_below
from merkle.errors import MerkleError, NotFoundError, UsageError
from merkle.storage.base import ObjectInfo

if TYPE_CHECKING:
    from concurrent.futures import Future, ThreadPoolExecutor

__all__ = ["StagedBlocks"]


class StagedBlocks(BlockStore):
    """A BlockStore whose writes stay in memory until :meth:`flush_reachable`."""

    def __init__(
        self, base: BlockStore, *, explain: Callable[[MerkleError], MerkleError] | None = None
    ) -> None:
        """``explain``: what a block missing from ``base`` means for the value reading it
        (a head opened without a lease: see ``merkle.db.unleased``)."""
        super().__init__(base.store, hash=base.hash_code, node_cache=base.node_cache)
        self.base = base
        self._explain = explain
        self._staged: dict[CID, bytes] = {}
        self._foreign: set[CID] = set()
        self._lock = threading.Lock()
        self._early: _EarlyWriter | None = None
        self._sent: set[CID] = set()  # written early and dropped from memory

    def __reduce__(self) -> tuple[Any, ...]:
        raise UsageError("an uncommitted transaction cannot be pickled: commit it first")

    @property
    def staged_bytes(self) -> int:
        """Bytes held in memory."""
        return sum(len(data) for data in self._staged.values())

    def put_many(
        self,
        blocks: Iterable[tuple[bytes, str | int]],
        *,
        refresh_before: float | None = None,
        early: bool = False,
    ) -> list[CID]:
        cids = []
        hashed = []
        for data, codec in blocks:
            if not isinstance(data, (bytes, bytearray, memoryview)):
                raise UsageError(f"block data must be bytes, got {type(data).__name__}")
            data = bytes(data)
            cid = CID.of(data, codec_code(codec), self.hash_code)
            with self._lock:
                self._staged.setdefault(cid, data)
            cids.append(cid)
            hashed.append((cid, data))
        writer = self._early
        if early and writer is not None:
            writer.send(hashed, self._stored)
        return cids

    def _stored(self, blocks: Sequence[tuple[CID, bytes]]) -> None:
        """Blocks written early are durable: their bytes leave memory."""
        with self._lock:
            for cid, _ in blocks:
                if self._staged.pop(cid, None) is not None:
                    self._sent.add(cid)

    @contextlib.contextmanager
    def writing_early(self, refresh_before: float) -> Iterator[None]:
        """While held, blocks put with ``early=True`` are written to the lake at once.

        Hold it only under a writer lease (started at ``refresh_before``):
        blocks reach the lake before any entry names them, and the lease is
        what keeps a collection from removing them meanwhile. Leaving waits
        for every write and raises the first that failed.
        """
        writer = _EarlyWriter(self.base, refresh_before)
        self._early = writer
        try:
            yield
        except BaseException:
            self._early = None
            with contextlib.suppress(Exception):  # the first error is the one to see
                writer.finish()
            raise
        self._early = None
        writer.finish()

    def _missing(self, cid: CID) -> MerkleError:
        error = self.base.missing_error(cid)  # the base's reads say what a missing block means
        return error if self._explain is None else self._explain(error)

    def get(self, cid: CID) -> bytes:
        data = self._staged.get(cid)
        if data is not None:
            return data
        if self._explain is None:
            return self.base.get(cid)
        try:
            return self.base.get(cid)
        except MissingBlockError as exc:
            raise self._explain(exc) from None

    def get_many(self, cids: Sequence[CID]) -> dict[CID, bytes]:
        found = {cid: self._staged[cid] for cid in cids if cid in self._staged}
        rest = [cid for cid in cids if cid not in found]
        if rest:
            try:
                found.update(self.base.get_many(rest))
            except MissingBlockError as exc:
                if self._explain is None:
                    raise
                raise self._explain(exc) from None
        return found

    def has(self, cid: CID) -> bool:
        return cid in self._staged or self.base.has(cid)

    def stat(self, cid: CID) -> ObjectInfo:
        data = self._staged.get(cid)
        if data is not None:
            return ObjectInfo(self.key(cid), len(data), time.time())
        return self.base.stat(cid)

    def add_foreign(self, cids: Iterable[CID]) -> None:
        """Register blocks that this transaction links but took from outside its base version."""
        with self._lock:
            self._foreign.update(cids)

    def lost(self, roots: Sequence[CID]) -> list[CID]:
        """Blocks ``roots`` reach that this transaction cannot write again and the lake
        no longer holds: written early (their bytes left memory once stored), or
        foreign (with what they reach; at most one of these is named).

        Early blocks the roots do not reach (made and then superseded within
        this commit) are not asked about: nothing needs them.
        """
        _, foreign, sent = self._walk(roots)
        there = self.base.present(sent, refresh_before=None)
        lost = [cid for cid, found in zip(sent, there, strict=True) if not found]
        below = missing_below(self.base, foreign) if foreign else None
        return lost if below is None else [*lost, below]

    def reachable(self, roots: Sequence[CID]) -> tuple[list[tuple[CID, bytes]], list[CID]]:
        """The staged blocks reachable from ``roots``, and the foreign blocks they link."""
        found, foreign, _ = self._walk(roots)
        return found, foreign

    def _walk(self, roots: Sequence[CID]) -> tuple[list[tuple[CID, bytes]], list[CID], list[CID]]:
        """What ``roots`` reach through staged nodes: the staged blocks, the foreign
        blocks, and the blocks written early (raw pages: nothing below them)."""
        seen: set[CID] = set()
        found: list[tuple[CID, bytes]] = []
        foreign: list[CID] = []
        sent: list[CID] = []
        stack = list(roots)
        while stack:
            cid = stack.pop()
            if cid in seen:
                continue
            seen.add(cid)
            data = self._staged.get(cid)
            if data is None:
                if cid in self._foreign:
                    foreign.append(cid)
                elif cid in self._sent:
                    sent.append(cid)
                continue  # already in the lake
            found.append((cid, data))
            if cid.codec == DAG_CBOR:
                node = self.node_cache.get(cid.bytes)
                stack.extend(iter_links(node if node is not None else decode_node(data)))
        return found, foreign, sent

    def flush_reachable(self, roots: Sequence[CID], *, refresh_before: float | None) -> int:
        """Write the staged blocks ``roots`` reach, and prove the foreign ones stored.

        Returns how many staged blocks there were. Blocks already stored are
        not written again (a missing one is: this also repairs a version
        whose blocks a collection raced). Raises :class:`NotFoundError` naming
        a block a foreign link reaches that the lake no longer holds.
        """
        blocks, missing = self.unwritten(roots, refresh_before=refresh_before)
        if missing:
            self.base.store.put_many(missing)
        return len(blocks)

    def unwritten(
        self, roots: Sequence[CID], *, refresh_before: float | None, prove_foreign: bool = True
    ) -> tuple[list[tuple[CID, bytes]], list[tuple[str, bytes]]]:
        """What :meth:`flush_reachable` needs, without writing: the staged blocks ``roots``
        reach, and the (object key, bytes) of those the lake lacks.

        A commit writes the latter in one round with its journal entry
        (``RefManager.commit(before=...)``). Refreshes the blocks found
        stored and proves the foreign ones stored, as a flush does (unless
        ``prove_foreign`` is False: a commit already landed asks :meth:`lost`).
        """
        blocks, foreign = self.reachable(roots)
        # Hashed when staged (put_many above): no second pass over the bytes.
        missing = self.base.absent(blocks, refresh_before=refresh_before)
        if foreign and prove_foreign:
            lost = missing_below(self.base, foreign)
            if lost is None:
                # Found, not written: another process's write may be visible before it
                # is durable (a file store before its directory flush).
                self.base.store.make_durable(self.base.key(cid) for cid in foreign)
            if lost is not None:
                raise NotFoundError(
                    f"block {lost} is missing from {self.base.store.uri}: this transaction "
                    "links it (through tablets taken from another version, e.g. by "
                    "build_table) and garbage collection has removed it; nothing was "
                    "committed: build the tablets again from a version that is kept"
                )
        return blocks, missing


#: Bytes of early blocks being written at once; beyond them, the encoders wait.
_EARLY_BYTES_IN_FLIGHT = 96 << 20


class _EarlyWriter:
    """Writes batches of blocks durably in the background, a bounded amount at a time."""

    def __init__(self, base: BlockStore, refresh_before: float) -> None:
        self.base = base
        self.refresh_before = refresh_before
        self.pool: ThreadPoolExecutor | None = None
        self.futures: list[Future[None]] = []
        self.room = threading.Condition()
        self.in_flight = 0

    def send(
        self,
        blocks: list[tuple[CID, bytes]],
        done: Callable[[Sequence[tuple[CID, bytes]]], None],
    ) -> None:
        size = sum(len(data) for _, data in blocks)
        with self.room:
            self.room.wait_for(
                lambda: not self.in_flight or self.in_flight + size <= _EARLY_BYTES_IN_FLIGHT
            )
            self.in_flight += size

        def write() -> None:
            try:
                self.base.put_hashed(blocks, refresh_before=self.refresh_before)
                done(blocks)
            finally:
                with self.room:
                    self.in_flight -= size
                    self.room.notify_all()

        with self.room:
            if self.pool is None:
                from concurrent.futures import ThreadPoolExecutor  # (with logging: 3 ms)

                self.pool = ThreadPoolExecutor(2, thread_name_prefix="merkle-early-write")
            self.futures.append(self.pool.submit(write))

    def finish(self) -> None:
        try:
            for future in self.futures:
                future.result()
        finally:
            if self.pool is not None:
                self.pool.shutdown(wait=True)
