"""BlockStore on every backend: round trips, verification on read, refresh, no re-uploads."""

from __future__ import annotations

import importlib.util
import os
import pickle
import time
from collections.abc import Iterator
from typing import Any

import pytest

from merkle.blocks import CID, BlockStore, encode_node
from merkle.errors import IntegrityError, NotFoundError, UsageError
from merkle.storage import ObjectStore
from merkle.storage.file import FileStore
from merkle.storage.memory import MemoryStore

from .spy import SpyStore

SIZES = [0, 1, 1000, 70_000, 1 << 20]


@pytest.fixture
def objects(lake: Any) -> Iterator[ObjectStore]:
    """An open ObjectStore on a fresh lake of each backend, closed after the test."""
    if lake.kind == "s3" and importlib.util.find_spec("merkle.storage.s3") is None:
        pytest.skip("the S3 backend (merkle/storage/s3.py) is not in this checkout yet")
    with lake.open() as opened:
        yield opened


@pytest.fixture
def blocks(objects: ObjectStore) -> BlockStore:
    return BlockStore(objects)


def payload(size: int, seed: int = 0) -> bytes:
    return (seed.to_bytes(4, "big") * (size // 4 + 1))[:size] if size else b""


def flip_a_bit(data: bytes) -> bytes:
    return bytes([data[0] ^ 0x01]) + data[1:]


def backdate(store: ObjectStore, key: str, mtime: float) -> None:
    if isinstance(store, MemoryStore):
        store.set_mtime(key, mtime)
    elif isinstance(store, FileStore):
        path = os.path.join(store.root, *key.split("/"))
        os.utime(path, (mtime, mtime))
    else:
        pytest.skip(f"cannot backdate an object on {type(store).__name__}")


# -- round trips -----------------------------------------------------------------


@pytest.mark.parametrize("size", SIZES)
def test_raw_block_round_trip(blocks: BlockStore, size: int) -> None:
    data = os.urandom(size)
    cid = blocks.put(data)
    assert cid == CID.of(data, "raw", "blake3")
    assert blocks.get(cid) == data
    assert blocks.has(cid)
    assert blocks.stat(cid).size == size


def test_node_round_trip_with_links(blocks: BlockStore) -> None:
    leaf = blocks.put(b"leaf bytes")
    node = {"type": "merkle/test", "v": 1, "children": [leaf], "meta": {"n": 1.5, "k": b"\x00"}}
    cid = blocks.put_node(node)
    assert cid == CID.of(encode_node(node), "dag-cbor")
    fresh = BlockStore(blocks.store)  # no cache: decodes from storage
    assert fresh.get_node(cid) == node
    assert fresh.get_node(cid) is fresh.get_node(cid)  # the second read is the cached one


def test_sha2_lake_makes_sha2_cids(objects: ObjectStore) -> None:
    blocks = BlockStore(objects, hash="sha2-256")
    cid = blocks.put(b"x")
    assert cid == CID.of(b"x", "raw", "sha2-256")
    assert blocks.cid_of(b"x", "raw") == cid
    assert blocks.get(cid) == b"x"


def test_put_many_and_get_many(blocks: BlockStore) -> None:
    datas = [payload(size, seed) for seed, size in enumerate([10, 5000, 0, 70_000])]
    codecs = ["raw", "raw", "raw", "dag-cbor"]
    datas[3] = encode_node({"big": datas[3]})
    cids = blocks.put_many(zip(datas, codecs, strict=True))
    assert cids == [CID.of(d, c) for d, c in zip(datas, codecs, strict=True)]
    fetched = blocks.get_many([*cids, cids[0]])
    assert fetched == dict(zip(cids, datas, strict=True))


def test_listing_and_deleting_blocks(blocks: BlockStore) -> None:
    cids = blocks.put_many([(b"a", "raw"), (b"b", "raw")])
    node = blocks.put_node({"x": 1})
    listed = {cid: info.size for cid, info in blocks.list()}
    assert listed == {cids[0]: 1, cids[1]: 1, node: len(encode_node({"x": 1}))}
    blocks.delete(node)
    blocks.delete_many(cids)
    assert list(blocks.list()) == []
    with pytest.raises(NotFoundError):
        blocks.get_node(node)  # deleting also forgets the cached node


def test_block_store_pickles_to_the_same_lake(blocks: BlockStore) -> None:
    cid = blocks.put(b"shared")
    if isinstance(blocks.store, MemoryStore) and not blocks.store.uri.removeprefix("memory://"):
        pytest.skip("an anonymous memory store pickles by value")
    copy = pickle.loads(pickle.dumps(blocks))
    assert copy.hash_code == blocks.hash_code
    assert copy.get(cid) == b"shared"


# -- verification on read --------------------------------------------------------


@pytest.mark.parametrize("size", [1, 1000, 1 << 20])
def test_a_flipped_bit_is_detected_on_read(blocks: BlockStore, size: int) -> None:
    data = payload(size, 7)
    cid = blocks.put(data)
    key = BlockStore.key(cid)
    blocks.store.put(key, flip_a_bit(blocks.store.get(key)))
    with pytest.raises(IntegrityError, match=str(cid)):
        blocks.get(cid)
    with pytest.raises(IntegrityError, match=str(cid)):
        blocks.get_many([cid])


def test_a_corrupted_node_is_detected_before_decoding(blocks: BlockStore) -> None:
    cid = blocks.put_node({"type": "merkle/test", "v": 1})
    key = BlockStore.key(cid)
    blocks.store.put(key, flip_a_bit(blocks.store.get(key)))
    with pytest.raises(IntegrityError, match=str(cid)):
        BlockStore(blocks.store).get_node(cid)


def test_a_missing_block_is_not_found_naming_the_cid(blocks: BlockStore) -> None:
    cid = CID.of(b"never stored", "raw")
    for read in (blocks.get, blocks.get_node, blocks.stat, lambda c: blocks.get_many([c])):
        with pytest.raises(NotFoundError, match=str(cid)):
            read(cid)
    assert not blocks.has(cid)


# -- existing blocks: refreshed, never re-uploaded -------------------------------


def test_putting_an_existing_block_never_uploads_it_again(objects: ObjectStore) -> None:
    spy = SpyStore(objects)
    blocks = BlockStore(spy)
    blocks.put_many([(b"one", "raw"), (b"two", "raw")])
    blocks.put_node({"n": 1})
    assert len(spy.written) == 3
    spy.reset()
    blocks.put(b"one")
    blocks.put_many([(b"one", "raw"), (b"two", "raw"), (b"one", "raw")])
    blocks.put_node({"n": 1}, refresh_before=time.time() + 3600)
    assert spy.written == []
    assert spy.calls["put"] + spy.calls["put_many"] + spy.calls["put_if_absent"] == 0


def test_a_batch_uploads_only_the_missing_blocks(objects: ObjectStore) -> None:
    spy = SpyStore(objects)
    blocks = BlockStore(spy)
    old = blocks.put(b"old")
    spy.reset()
    new = blocks.put_many([(b"old", "raw"), (b"new", "raw"), (b"new", "raw")])
    assert new[0] == old
    assert spy.written == [BlockStore.key(new[1])]


def test_an_old_existing_block_is_refreshed(objects: ObjectStore) -> None:
    blocks = BlockStore(objects)
    cid = blocks.put(b"reused")
    key = BlockStore.key(cid)
    lease_start = time.time() - 60
    backdate(objects, key, lease_start - 3600)
    blocks.put(b"reused", refresh_before=lease_start)
    assert objects.stat(key).mtime >= lease_start


def test_a_recent_existing_block_is_left_alone(objects: ObjectStore) -> None:
    blocks = BlockStore(objects)
    cid = blocks.put(b"reused")
    key = BlockStore.key(cid)
    lease_start = time.time() - 3600
    backdate(objects, key, lease_start + 60)
    blocks.put(b"reused", refresh_before=lease_start)
    assert objects.stat(key).mtime == pytest.approx(lease_start + 60, abs=1e-3)
    blocks.put(b"reused")  # no lease: never refreshed
    assert objects.stat(key).mtime == pytest.approx(lease_start + 60, abs=1e-3)


def test_refresh_touches_only_blocks_older_than_the_lease(objects: ObjectStore) -> None:
    spy = SpyStore(objects)
    blocks = BlockStore(spy)
    blocks.put(b"reused")
    spy.reset()
    blocks.put(b"reused", refresh_before=time.time() + 3600)  # the block predates the lease
    assert spy.calls["touch"] == 1
    spy.reset()
    blocks.put(b"reused", refresh_before=0.0)  # the block is newer than the lease
    blocks.put(b"reused")
    assert spy.calls["touch"] == 0


# -- bad input -------------------------------------------------------------------


@pytest.mark.parametrize("data", ["text", 42, None, [b"x"]])
def test_non_bytes_data_is_a_usage_error(blocks: BlockStore, data: object) -> None:
    with pytest.raises(UsageError, match="must be bytes"):
        blocks.put(data)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="must be bytes"):
        blocks.put_many([(b"fine", "raw"), (data, "raw")])  # type: ignore[list-item]
    assert list(blocks.list()) == []  # nothing of a rejected batch is written


@pytest.mark.parametrize("codec", ["json", "dag-json", 0x70, None])
def test_unknown_codec_is_a_usage_error(blocks: BlockStore, codec: object) -> None:
    with pytest.raises(UsageError, match="unknown block codec"):
        blocks.put(b"x", codec)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["md5", "sha256", "", 0x13])
def test_unknown_hash_is_a_usage_error(objects: ObjectStore, name: object) -> None:
    with pytest.raises(UsageError, match="unknown hash"):
        BlockStore(objects, hash=name)  # type: ignore[arg-type]


def test_a_node_dag_cbor_cannot_hold_is_a_usage_error_and_writes_nothing(
    blocks: BlockStore,
) -> None:
    with pytest.raises(UsageError, match="NaN"):
        blocks.put_node({"x": float("nan")})
    assert list(blocks.list()) == []


def test_put_nodes_stores_and_caches_every_node(blocks: BlockStore) -> None:
    nodes = [{"type": "merkle/test", "v": 1, "i": i} for i in range(5)]
    cids = blocks.put_nodes(nodes)
    assert cids == [CID.of(encode_node(node), "dag-cbor") for node in nodes]
    assert [blocks.get_node(cid) for cid in cids] == nodes
    fresh = BlockStore(blocks.store)
    assert [fresh.get_node(cid) for cid in cids] == nodes
