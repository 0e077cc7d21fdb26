"""Bulk plans against the table they cut: every key read once, every write equal to Table.write.

The functions of :mod:`merkle.tablets.bulk` are what Spark tasks run; here
they run in one process on tables with tiny limits, after random writes,
deletes and flushes, so tablets, gaps and pending batches are everywhere.
"""

from __future__ import annotations

import itertools
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from merkle.blocks import BlockStore
from merkle.blocks.store import MissingBlockError
from merkle.storage import open_store
from merkle.tablets import Limits, Table, TableStore, bulk, validate
from merkle.tablets.ranges import KeyRanges, successor

KEYS = st.integers(min_value=0, max_value=200)
CHANGES = st.lists(
    st.tuples(st.booleans(), st.lists(KEYS, min_size=1, max_size=25)), min_size=1, max_size=8
)


def _table(changes: list[tuple[bool, list[int]]]) -> tuple[Table, dict[int, dict[str, Any]]]:
    ts = TableStore(BlockStore(open_store("memory://")))
    limits = Limits(tablet_size=6, branching=4, patch=10, patch_share=30)
    table = Table.new(ts, key_field="k", key_codec="int", families={"f": {"b"}}, limits=limits)
    model: dict[int, dict[str, Any]] = {}
    for version, (is_write, keys) in enumerate(changes, start=1):
        if is_write:
            rows = [{"k": k, "a": version, "b": str(k)} for k in keys]
            table = table.write(rows, version)
            model.update({r["k"]: r for r in rows})
        else:
            table = table.delete(keys, version)
            for k in keys:
                model.pop(k, None)
    return table, model


def _ranges(table: Table, bounds: list[tuple[int, int]]) -> KeyRanges:
    assert table.codec is not None
    enc = table.codec.encode
    return KeyRanges.union_of(KeyRanges.between(enc(a), successor(enc(b))) for a, b in bounds)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    changes=CHANGES,
    bounds=st.one_of(st.none(), st.lists(st.tuples(KEYS, KEYS), max_size=3)),
    fields=st.sampled_from([None, ["a"], ["b"], []]),
    target=st.integers(min_value=1, max_value=3000),
)
def test_slices_read_every_key_exactly_once(
    changes: list[tuple[bool, list[int]]],
    bounds: list[tuple[int, int]] | None,
    fields: list[str] | None,
    target: int,
) -> None:
    table, model = _table(changes)
    keys = None if bounds is None else _ranges(table, bounds)
    got: list[dict[str, Any]] = []
    for slices in bulk.plan_reads(table, target_bytes=target, keys=keys):
        for rows in bulk.read_slices(table, slices, fields=fields, keys=keys):
            got.extend(rows.to_pylist())
    wanted = sorted(k for k in model if bounds is None or any(a <= k <= b for a, b in bounds))
    assert [row["k"] for row in got] == wanted
    for row in got:
        expected = model[row["k"]]
        assert {f: v for f, v in row.items() if v is not None} == {
            f: v for f, v in expected.items() if fields is None or f == "k" or f in fields
        }


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    changes=CHANGES,
    new=st.lists(KEYS, max_size=40),
    deleting=st.booleans(),
)
def test_group_rewrites_and_splice_equal_a_table_write(
    changes: list[tuple[bool, list[int]]], new: list[int], deleting: bool
) -> None:
    table, _ = _table(changes)
    groups = bulk.plan_groups(table)
    assert [g.index for g in groups] == list(range(len(groups)))
    assert groups[0].lo is None
    assert groups[-1].hi is None
    assert all(a.hi == b.lo for a, b in itertools.pairwise(groups))
    rows = pa.table({"k": pa.array(new, pa.int64()), "a": pa.array([-1] * len(new), pa.int64())})
    assert table.codec is not None
    ids = bulk.route(table.codec.encode_array(rows.column("k")), [g.lo for g in groups[1:]])
    leaves: list[bulk.TabletInfo] = []
    fresh: set[str] = set()
    for group in groups:
        part = rows.filter(pa.array(ids == group.index))
        if deleting:
            made = bulk.rewrite_group(table, group, deletes=part.column("k"))
        else:
            made = bulk.rewrite_group(table, group, upserts=part)
        if made is None:
            if group.tablet is not None:
                leaves.append(group.tablet)
        else:
            leaves.extend(made)
            fresh.update(t.cid for t in made)
    absorbed: set[str] = set()  # tablets merged with an underfull new neighbour
    for a, b in reversed(bulk.plan_merges(table, leaves, fresh)):
        absorbed.update(t.cid for t in leaves[a:b])
        merged = bulk.merge_leaves(table, leaves[a:b])
        leaves[a:b] = merged
        fresh.update(t.cid for t in merged)
    built = bulk.splice(table, leaves, fresh=fresh)
    validate(table.ts, built)
    expected = table.delete(new, 99) if deleting else table.write(rows, 99)
    assert built.to_arrow().to_pylist() == expected.to_arrow().to_pylist()
    assert built.count == expected.count
    assert not built.root.pending
    kept = {str(r.cid) for r in built.tablets()}
    for group in groups:  # a tablet none of whose keys changed is reused by link
        hit = (ids == group.index).any() or table.overlay().has_entries(group.lo, group.hi)
        if group.tablet is not None and not hit and group.tablet.cid not in absorbed:
            assert group.tablet.cid in kept


def test_arrow_schema_marks_mixed_fields() -> None:
    table, _ = _table([(True, [1, 2, 3])])
    table = table.write([{"k": 50, "a": "text", "c": [1.5]}], 9).flush()
    schema = bulk.arrow_schema(table)
    assert schema.names == ["k", "a", "b", "c"]
    assert schema.field("a").metadata == {b"merkle.encoding": b"cbor"}
    assert schema.field("b").type == pa.string()
    assert schema.field("c").type == pa.list_(pa.float64())
    assert not schema.field("k").nullable


def test_route_handles_variable_length_keys() -> None:
    keys = pa.array([b"b", b"a", b"zz", b"m", b"c\x00"], pa.binary())
    assert bulk.route(keys, [b"b", b"c\x00", b"n"]).tolist() == [1, 0, 3, 2, 2]
    words = pa.array([(5).to_bytes(8, "big"), (9).to_bytes(8, "big")], pa.binary())
    assert bulk.route(words, [successor((5).to_bytes(8, "big"))]).tolist() == [0, 1]


def test_key_ranges_algebra() -> None:
    r = KeyRanges.union_of(
        [KeyRanges.between(b"a", b"c"), KeyRanges.between(b"b", b"d"), KeyRanges.points([b"x"])]
    )
    assert r.ranges == ((b"a", b"d"), (b"x", b"x\x00"))
    assert r.intersect(KeyRanges.between(b"c", None)).ranges == ((b"c", b"d"), (b"x", b"x\x00"))
    assert r.overlaps(b"w", b"y")
    assert not r.overlaps(b"e", b"w")
    assert r.covers(b"a", b"b")
    assert not r.covers(b"a", b"e")
    assert KeyRanges.everything().intersect(r) == r
    assert KeyRanges.between(b"b", b"a").is_empty
    picked = r.select(pa.array([b"0", b"a", b"b", b"e", b"x", b"y"], pa.binary()))
    assert picked is not None
    assert picked.to_pylist() == [1, 2, 4]


def _family_blocks(table: Table, tablet: Any, family: str) -> list[Any]:
    """The blocks of one family in a tablet: in every page, or its one segment (version 1)."""
    node = table.ts.tablet(tablet)
    if not node.pages:
        return [node.segments[family]]
    return [page.families[family] for page in node.pages if page.families.get(family)]


def test_a_projection_fetches_only_the_families_it_needs() -> None:
    table, model = _table([(True, list(range(40)))])
    table = table.flush()
    fetched: list[str] = []
    blocks = table.ts.blocks
    real_get = blocks.get

    def counting_get(cid: Any) -> bytes:
        fetched.append(str(cid))
        return real_get(cid)

    blocks.get = counting_get  # type: ignore[method-assign]
    fresh = Table(TableStore(blocks), table.root)  # no decoded segments cached
    family = {str(cid) for ref in fresh.tablets() for cid in _family_blocks(fresh, ref.cid, "f")}
    assert family
    rows = [
        r
        for s in bulk.plan_reads(fresh, target_bytes=1)
        for t in bulk.read_slices(fresh, s, fields=["a"])
        for r in t.to_pylist()
    ]
    assert [r["k"] for r in rows] == sorted(model)
    assert fetched
    assert not family & set(fetched)
    rows = [
        r
        for s in bulk.plan_reads(fresh, target_bytes=1)
        for t in bulk.read_slices(fresh, s, fields=["b"])
        for r in t.to_pylist()
    ]
    assert family <= set(fetched)
    assert all(r["b"] == str(r["k"]) for r in rows)


def test_a_bulk_write_makes_the_tablets_a_flush_makes() -> None:
    """Paged tablets: group rewrites keep untouched pages, so the tree is the flush's, by CID."""
    ts = TableStore(BlockStore(open_store("memory://")))
    limits = Limits(tablet_size=2_000, branching=8, patch=100, page_size=128)
    table = Table.new(ts, key_field="k", key_codec="int", families={"f": {"b"}}, limits=limits)

    def rows(keys: list[int]) -> pa.Table:
        return pa.table(
            {"k": pa.array(keys, pa.int64()), "a": keys, "b": [f"{k}" * 3 for k in keys]}
        )

    table = table.write(rows(list(range(0, 10_000, 2))), 1).flush()
    table = table.write(rows([7, 9]), 2)  # pending changes, laid under the bulk write's
    new = rows([1_001, 1_003, 3_000, 9_999])
    groups = bulk.plan_groups(table)
    ids = bulk.route(bulk.encode_keys(table, new), [g.lo for g in groups[1:]])
    leaves: list[bulk.TabletInfo] = []
    fresh: set[str] = set()
    for group in groups:
        made = bulk.rewrite_group(table, group, upserts=new.filter(pa.array(ids == group.index)))
        if made is None:
            leaves += [group.tablet] if group.tablet is not None else []
        else:
            leaves += made
            fresh.update(t.cid for t in made)
    for a, b in reversed(bulk.plan_merges(table, leaves, fresh)):
        leaves[a:b] = merged = bulk.merge_leaves(table, leaves[a:b])
        fresh.update(t.cid for t in merged)
    built = bulk.splice(table, leaves, fresh=fresh)
    flushed = table.write(new, 3).flush()
    assert all(ts.tablet(ref.cid).paged for ref in built.tablets())
    assert built.data_ref() == flushed.data_ref()
    before = {tuple(p.blocks()) for ref in table.tablets() for p in ts.tablet(ref.cid).pages}
    after = {tuple(p.blocks()) for ref in built.tablets() for p in ts.tablet(ref.cid).pages}
    assert len(after - before) == 4  # the pages of 7 and 9, 1,001 and 1,003, 3,000, 9,999


def test_arrow_schema_of_a_missing_segment_is_a_missing_block() -> None:
    """The schema is read from each segment's first bytes by a ranged read of the
    object store; a block gone was the store's bare NotFoundError, which a leased
    reader could not tell from a lapsed lease."""
    table, _ = _table([(True, [1, 2, 3])])
    table = table.write([{"k": 50, "a": "text"}], 9).flush()
    ref = next(iter(table.tablets()))
    page = table.ts.tablet(ref.cid).pages[0]
    family = next(cid for cid in page.families.values() if cid is not None)
    table.ts.blocks.delete(family)
    with pytest.raises(MissingBlockError, match=str(family)):
        bulk.arrow_schema(table)
