"""Structural sharing: a small change writes O(height + batch) blocks, never O(tablets)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from merkle.blocks import BlockStore
from merkle.storage.memory import MemoryStore
from merkle.tablets import Limits, Table, TableStore, validate

ROWS = 1_000_000


def _block_keys(store: MemoryStore) -> set[str]:
    return {info.key for info in store.list("blocks/")}


@pytest.fixture(scope="module")
def big() -> tuple[MemoryStore, TableStore, Table]:
    store = MemoryStore()
    ts = TableStore(BlockStore(store))
    keys = np.random.default_rng(7).permutation(ROWS).astype(np.int64)
    data = pa.table({"id": keys, "v": keys * 3, "name": pa.array([f"n{k % 97}" for k in keys])})
    # Small tablets and fan-out so the tree is wide (1,000 tablets) and deep (3 levels).
    limits = Limits(tablet_size=1_000, branching=16, patch=1_000)
    table = Table.new(ts, key_field="id", limits=limits).write(data, version=1)
    return store, ts, table


@pytest.mark.slow
def test_bulk_build_shape(big: tuple[MemoryStore, TableStore, Table]) -> None:
    _, ts, table = big
    assert table.count == ROWS
    assert len(table.tablets()) == 1_000
    assert table.data_ref() is not None
    assert table.data_ref().height == 3
    validate(ts, table)


@pytest.mark.slow
def test_one_update_pending_writes_a_batch_and_a_root(
    big: tuple[MemoryStore, TableStore, Table],
) -> None:
    store, _, table = big
    before = _block_keys(store)
    updated = table.write([{"id": 123_456, "v": -1}], version=2)
    updated.save()
    new = _block_keys(store) - before
    # The batch node, its upserts segment and the table root.
    assert len(new) == 3
    assert updated.count == ROWS


@pytest.mark.slow
def test_one_update_flushed_rewrites_only_its_path(
    big: tuple[MemoryStore, TableStore, Table],
) -> None:
    store, ts, table = big
    height = table.data_ref().height  # type: ignore[union-attr]
    before = _block_keys(store)
    updated = table.write([{"id": 654_321, "v": -1}], version=2).flush()
    updated.save()
    new = _block_keys(store) - before
    # Batch (node + segment), one tablet (node + base segment), one index node per
    # level and the table root: O(height), against 1,000 tablets in the table.
    assert len(new) <= 2 + 2 + height + 1
    assert updated.count == ROWS
    assert updated.get([654_321]).to_pylist()[0]["v"] == -1
    unchanged = {ref.cid for ref in table.tablets()} & {ref.cid for ref in updated.tablets()}
    assert len(unchanged) == 999
    validate(ts, updated)
