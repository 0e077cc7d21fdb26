"""How a scan puts decoded pages together: once per run of pages, not page by page.

A cold 10M-row scan spent most of its calling thread joining each page's key
block and family blocks into a table, concatenating pages, merging tablets
column by column in Python and weighing every decoded block for a cache the
scan could only churn through. These tests hold the faster paths to the same
results as the page-by-page ones.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from merkle.blocks import BlockStore
from merkle.errors import UsageError
from merkle.storage.memory import MemoryStore
from merkle.tablets import Limits, Table, TableStore
from merkle.tablets import leaves as leaves_module
from merkle.tablets import segment as segment_module
from merkle.tablets import store as store_module
from merkle.tablets.pages import concat_pages, join_page, join_pages
from merkle.tablets.segment import concat_segments

LIMITS = Limits(tablet_size=2_000, branching=8, patch=100, page_size=128)
ROWS = 5_000


def _rows(keys: np.ndarray, *, blobs: bool = True) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(keys, pa.int64()),
            "name": pa.array([f"n{k}" for k in keys]),
            "price": pa.array(keys * 0.5),
            "blob": pa.array([f"{k}" * 3 if blobs else None for k in keys], pa.string()),
        }
    )


def _table(rows: pa.Table, ts: TableStore | None = None) -> Table:
    ts = ts or TableStore(BlockStore(MemoryStore()))
    table = Table.new(ts, key_field="id", families={"big": ["blob"]}, limits=LIMITS)
    return table.write(rows, version=1)


def _page_by_page(table: Table, fields: Any) -> pa.Table:
    """The rows of every tablet, each page joined alone and the pages concatenated."""
    io = table._tree().leaves_io
    parts = []
    for ref in table.tablets():
        tablet = io.node(ref.cid)
        parts.append(concat_pages([io.page_table(page, fields) for page in tablet.pages], "id"))
    return concat_pages(parts, "id")


@pytest.mark.parametrize("fields", [None, ["name"], ["blob"], ["price", "blob"], []])
def test_pages_joined_at_once_are_the_pages_joined_one_by_one(fields: Any) -> None:
    keys = np.random.default_rng(5).permutation(ROWS)
    table = _table(_rows(keys))
    io = table._tree().leaves_io
    for ref in table.tablets():
        tablet = io.node(ref.cid)
        assert len(tablet.pages) > 1
        joined = io.pages_table(tablet.pages, fields)
        one_by_one = concat_pages([io.page_table(page, fields) for page in tablet.pages], "id")
        assert joined.equals(one_by_one)
        assert joined.schema.equals(one_by_one.schema, check_metadata=True)
    assert table.to_arrow(fields=fields).equals(table.present(_page_by_page(table, fields), fields))


def test_pages_that_disagree_are_left_to_be_joined_one_by_one() -> None:
    keys = [pa.table({"id": pa.array([i, i + 1], pa.int64())}) for i in (0, 2, 4)]
    base = [pa.table({"name": ["a", "b"]}) for _ in range(3)]
    big = pa.table({"blob": ["x", "y"]})
    agree = [(k, {"base": b, "big": big}) for k, b in zip(keys, base, strict=True)]
    joined = join_pages(agree)
    assert joined is not None
    assert joined.equals(concat_pages([join_page(k, p, 2) for k, p in agree], "id"))
    # a page without the "big" family's block
    assert join_pages([*agree[:2], (keys[2], {"base": base[2]})]) is None
    # a family with another schema in one page (a field of another type)
    other = pa.table({"name": pa.array([1, 2], pa.int64())})
    assert join_pages([*agree[:2], (keys[2], {"base": other, "big": big})]) is None
    # a key block of another type
    wide = pa.table({"id": pa.array([4, 5], pa.int32())})
    assert join_pages([*agree[:2], (wide, {"base": base[2], "big": big})]) is None


def test_a_scan_joins_each_run_of_pages_once(monkeypatch: pytest.MonkeyPatch) -> None:
    table = _table(_rows(np.random.default_rng(6).permutation(ROWS)))
    pages = sum(len(table.ts.tablet(ref.cid).pages) for ref in table.tablets())
    joins: list[int] = []
    real = leaves_module.join_page

    def counting(keys: pa.Table, parts: Any, count: int) -> pa.Table:
        joins.append(count)
        return real(keys, parts, count)

    monkeypatch.setattr(leaves_module, "join_page", counting)
    monkeypatch.setattr("merkle.tablets.pages.join_page", counting)
    cold = Table.load(TableStore(table.ts.blocks), table.save())
    assert cold.to_arrow().num_rows == ROWS
    assert sum(joins) == ROWS
    assert len(joins) == len(table.tablets()) < pages


def _general(tables: list[pa.Table], monkeypatch: pytest.MonkeyPatch) -> pa.Table:
    with monkeypatch.context() as patch:
        patch.setattr(segment_module, "_concat_alike", lambda tables, key_field: None)
        return concat_segments(tables, key_field="id")


def test_tables_of_one_schema_concatenate_as_the_general_path_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    schema = pa.schema(
        [
            pa.field("zeta", pa.string(), metadata={b"m": b"1"}),
            pa.field("id", pa.int64(), nullable=False),
            pa.field("empty", pa.float64()),
            pa.field("alpha", pa.int32()),
        ],
        metadata={b"table": b"meta"},
    )

    def part(keys: list[int]) -> pa.Table:
        return pa.table(
            {
                "zeta": [f"z{k}" for k in keys],
                "id": keys,
                "empty": [None] * len(keys),
                "alpha": [None if k % 2 else k for k in keys],
            },
            schema=schema,
        )

    tables = [part([1, 2]), part([3]), part([]), part([4, 5, 6])]
    got = concat_segments(tables, key_field="id")
    want = _general(tables, monkeypatch)
    assert got.equals(want)
    assert got.schema.equals(want.schema, check_metadata=True)
    assert got.column_names == ["id", "alpha", "zeta"]  # the null-only "empty" dropped

    holed = pa.table({"id": pa.array([7, None], pa.int64())})
    with pytest.raises(UsageError, match="holds nulls"):
        concat_segments([holed, holed], key_field="id")
    with pytest.raises(UsageError, match="holds nulls"):
        _general([holed, holed], monkeypatch)


def _is_block(key: Any) -> bool:
    """Whether a key of the decoded cache is a block's (whole, or some of its columns)."""
    return isinstance(key, bytes) or (isinstance(key, tuple) and key[:1] == ("columns",))


def test_a_scan_bigger_than_the_cache_does_not_fill_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """As a lookup (tests/tablets/test_pages.py): what a scan could only churn through
    is not weighed and kept; a scan that fits keeps its blocks for the next read."""
    table = _table(_rows(np.random.default_rng(7).permutation(ROWS)))
    decoded: list[int] = []
    real = store_module.decode_segment

    def counting(data: bytes, columns: Any = None) -> pa.Table:
        decoded.append(len(data))
        return real(data, columns)

    monkeypatch.setattr(store_module, "decode_segment", counting)
    biggest = max(ref.size for ref in table.tablets())
    small = TableStore(table.ts.blocks, cache_bytes=3 * biggest)
    cold = Table.load(small, table.save())
    assert cold.to_arrow().num_rows == ROWS
    assert decoded
    assert not [key for key in small._segments._items if _is_block(key)]
    roomy = TableStore(table.ts.blocks)
    warm = Table.load(roomy, table.save())
    decoded.clear()
    first = warm.to_arrow()
    assert decoded
    assert [key for key in roomy._segments._items if _is_block(key)]
    decoded.clear()
    assert warm.to_arrow().equals(first)
    assert decoded == []  # the second scan decodes nothing
