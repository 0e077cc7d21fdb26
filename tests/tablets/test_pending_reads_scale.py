"""Reads bounded by keys cost their key range, not the pending area.

The pending batches may hold up to half a table (``patch_share``). A scan
with ``from_pk``/``to_pk`` (or ``to_arrow`` of a key range) must fold only
the pending changes in its range: no timing here, the work is counted (the
entries given to :func:`merkle.tablets.batch.fold`). The model tests at the
end check, against a dict, every scan of a table value that has folded no
overlay yet (the path a fresh connection takes), patches included.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from hypothesis import strategies as st
from hypothesis.stateful import rule

import merkle.tablets.batch as batch_module
from merkle.blocks import BlockStore
from merkle.storage import open_store
from merkle.tablets import Limits, Table, TableStore
from tests.tablets import test_table_model as models

MERGED = 4_000  # even keys 0, 2, ..., in the tablets
PENDING = 3_000  # odd keys, spread over the table, in three pending batches


@pytest.fixture(name="setup")
def _setup() -> tuple[BlockStore, Any]:
    """A table of MERGED merged rows and PENDING pending ones (plus pending deletes and
    replacements of merged keys), saved: (its block store, its root CID)."""
    blocks = BlockStore(open_store("memory://"))
    ts = TableStore(blocks)
    limits = Limits(tablet_size=256, branching=8, patch=1_000_000, page_size=64)
    table = Table.new(ts, key_field="k", key_codec="int", limits=limits)
    even = list(range(0, 2 * MERGED, 2))
    table = table.write(pa.table({"k": even, "v": even}), 1).flush()
    assert not table.root.pending
    odd = list(range(1, 2 * MERGED, 2))[:PENDING]
    for version, part in enumerate((odd[0::3], odd[1::3], odd[2::3]), start=2):
        table = table.write(pa.table({"k": part, "v": [-k for k in part]}), version)
    table = table.delete(list(range(0, 2 * MERGED, 40)), 5)  # merged keys removed
    table = table.write(pa.table({"k": list(range(4, 2 * MERGED, 40)), "v": [7] * 200}), 6)
    assert len(table.root.pending) >= 2
    return blocks, table.save()


def _expected(lo: int, hi: int) -> list[tuple[int, int]]:
    """The (key, value) pairs the setup leaves in ``[lo, hi]``."""
    out = []
    for k in range(lo, hi + 1):
        if k % 2 and k < 2 * PENDING:
            out.append((k, -k))
        elif k % 2 == 0 and k < 2 * MERGED and k % 40 != 0:
            out.append((k, 7 if k % 40 == 4 else k))
    return out


def _pairs(table: pa.Table) -> list[tuple[int, int]]:
    return list(zip(table.column("k").to_pylist(), table.column("v").to_pylist(), strict=True))


@pytest.fixture(name="folded")
def _folded(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The pending entries each fold is given, as a list that grows with each fold."""
    counts: list[int] = []
    real = batch_module.fold

    def counting(contents: Any, key_field: str, codec: Any) -> Any:
        counts.append(sum(content.count for content in contents))
        return real(contents, key_field, codec)

    monkeypatch.setattr(batch_module, "fold", counting)
    return counts


def _fresh(setup: tuple[BlockStore, Any]) -> Table:
    """The table as a new connection reads it: a new store, nothing folded or cached."""
    blocks, cid = setup
    return Table.load(TableStore(blocks), cid)


def test_a_key_range_scan_folds_only_its_range(setup: Any, folded: list[int]) -> None:
    table = _fresh(setup)
    pending = table.patch_stats()["count"]
    assert pending > PENDING
    rows = pa.concat_tables(table.scan(from_pk=2_000, to_pk=2_040))
    assert _pairs(rows) == _expected(2_000, 2_040)
    # Every pending change in [2000, 2040] may be folded (about 25), not the ~3,400 pending.
    assert sum(folded) <= 40, (sum(folded), pending)


def test_to_arrow_of_a_key_range_folds_only_its_range(setup: Any, folded: list[int]) -> None:
    table = _fresh(setup)
    assert _pairs(table.to_arrow(from_pk=5_001, to_pk=5_100)) == _expected(5_001, 5_100)
    assert sum(folded) <= 100


@pytest.mark.parametrize(
    ("from_pk", "to_pk", "offset", "limit", "reverse"),
    [
        (2_000, None, None, 10, False),
        (None, 30, 3, None, False),
        (None, 7_990, 2, 5, True),
        (1_001, 1_101, 4, 6, True),
        (7_000, 9_000, None, None, False),
    ],
)
def test_offsets_and_limits_count_from_the_key_bounds(
    setup: Any,
    folded: list[int],
    from_pk: int | None,
    to_pk: int | None,
    offset: int | None,
    limit: int | None,
    reverse: bool,
) -> None:
    table = _fresh(setup)
    parts = list(
        table.scan(from_pk=from_pk, to_pk=to_pk, offset=offset, limit=limit, reverse=reverse)
    )
    got = _pairs(pa.concat_tables(parts)) if parts else []
    expected = _expected(from_pk or 0, to_pk if to_pk is not None else 2 * MERGED)
    if reverse:
        expected.reverse()
    expected = expected[offset or 0 :]
    if limit is not None:
        expected = expected[:limit]
    assert got == expected
    if from_pk is not None and to_pk is not None:
        assert sum(folded) <= to_pk - from_pk  # the range's changes, not the pending area


def test_index_bounds_still_count_the_whole_table(setup: Any) -> None:
    """``from_index``/``to_index`` are ranks in the whole table: they give what they did."""
    table = _fresh(setup)
    everything = _expected(0, 2 * MERGED)
    got = _pairs(pa.concat_tables(table.scan(from_pk=100, from_index=1_000, to_index=1_009)))
    assert got == [pair for pair in everything[1_000:1_010] if pair[0] >= 100]
    assert table.count == len(everything)


_SCAN_ARGS: dict[str, Any] = {
    "fields": models.FIELDS,
    "bounds": st.one_of(  # bounded on at least one side: the path under test
        st.tuples(models.KEYS, st.one_of(st.none(), models.KEYS)),
        st.tuples(st.none(), models.KEYS),
    ),
    "offset": st.one_of(st.none(), st.integers(0, 20)),
    "limit": st.one_of(st.none(), st.integers(0, 20)),
    "reverse": st.booleans(),
}


class _FreshScans:
    """A rule scanning a copy of the table value that has folded nothing yet (the
    invariants fold the whole overlay on ``self.table``), as a new connection does."""

    @rule(**_SCAN_ARGS)
    def fresh_scan(
        self,
        fields: list[str] | None,
        bounds: tuple[int | None, int | None],
        offset: int | None,
        limit: int | None,
        reverse: bool,
    ) -> None:
        model: Any = self
        kept = model.table
        model.table = Table(model.ts, kept.root)
        try:
            models.TableModel.scan(model, fields, bounds, (None, None), offset, limit, reverse)
        finally:
            model.table = kept


class FreshScanModel(_FreshScans, models.TableModel):
    pass


class FreshScanPatchedModel(_FreshScans, models.PatchedTableModel):
    pass


FreshScanModel.TestCase.settings = models.TableModel.TestCase.settings
FreshScanPatchedModel.TestCase.settings = models.TableModel.TestCase.settings
test_fresh_scan_model = FreshScanModel.TestCase
test_fresh_scan_patched_model = FreshScanPatchedModel.TestCase


def test_pending_patches_in_a_key_range_are_laid_over_their_records() -> None:
    """Patches over merged records and over pending upserts, in and out of the range."""
    from merkle.db.changes import update_patches
    from merkle.tablets.rows import SortedRows

    blocks = BlockStore(open_store("memory://"))
    limits = Limits(tablet_size=32, branching=4, patch=100_000, page_size=8)
    table = Table.new(
        TableStore(blocks),
        key_field="k",
        key_codec="int",
        limits=limits,
        typed=True,
        schema_free=True,
    )
    table = table.write([{"k": k, "a": k, "b": "m"} for k in range(0, 400, 2)], 1).flush()
    table = table.write([{"k": k, "a": k, "b": "p"} for k in range(1, 400, 4)], 2)
    for version, keys in ((3, range(40, 120, 3)), (5, range(100, 300, 7))):
        done = update_patches(table, {k: {"a": -version, "c": version} for k in keys})
        assert done is not None
        table, patches = done
        empty = table.get([], None)
        no_keys = table.spec.codec.encode_array(empty.column("k"))
        table = table.apply_changes(SortedRows(empty, no_keys), no_keys, version, patches)
    table = table.delete(list(range(0, 400, 11)), 6)
    cid = table.save()
    everything = Table.load(TableStore(blocks), cid).to_arrow().to_pylist()
    assert any(row.get("c") for row in everything)
    for lo, hi in ((0, 399), (41, 60), (99, 180), (250, 251), (5, 5), (390, 1_000)):
        got = Table.load(TableStore(blocks), cid).to_arrow(from_pk=lo, to_pk=hi).to_pylist()
        assert got == [row for row in everything if lo <= row["k"] <= hi], (lo, hi)
