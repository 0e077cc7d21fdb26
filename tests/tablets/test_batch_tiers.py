"""Pending batches stay O(log n) for any sequence of commit sizes (doc/format.md, "Tiers").

The earlier rule merged only the newest four batches, and only when they
shared a tier: commits of mixed sizes (1 to 8 rows, or 1 and 4 rows
alternately) changed tier at nearly every batch, so nothing below was ever
merged and a table kept one batch per commit until its next flush (1,500
batches after 1,500 commits; every commit and point read slowed with them).
Here: the merge plan on its own against a model of folds (bound, adjacency,
rewrites per entry), then whole tables against a dict model.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import merkle
from merkle.blocks import BlockStore
from merkle.storage import open_store
from merkle.tablets import Limits, Table, TableStore, validate
from merkle.tablets import table as table_module
from merkle.tablets.tiers import TIER_FANIN, batch_tier, max_batches, plan_merges

#: No flush while the tests run: the pending list is all there is.
NO_FLUSH = Limits(patch=10**9)


def bound(entries: int) -> float:
    """The documented bound: 1.5 * log2(entries) + 3 batches."""
    return 1.5 * math.log2(max(entries, 1)) + 3


def mixed_sizes(n: int) -> list[int]:
    """The repro's mix: 1 to 8 rows a commit."""
    return [int(x) for x in np.random.default_rng(0).integers(1, 9, n)]


def alternating(n: int) -> list[int]:
    """The repro's adversary: 1 and 4 rows alternately (tiers 0, 1, 0, 1, ...)."""
    return [1, 4] * (n // 2)


# --- the plan alone, against a model of folds --------------------------------------


class _Model:
    """A pending list as the plan sees it: per batch (count, lower, upper) and the most
    times any of its entries has been written; folds add counts (no repeated keys)."""

    def __init__(self) -> None:
        self.batches: list[tuple[int, int, int]] = []
        self.writes: list[int] = []

    def commit(self, count: int, version: int) -> list[tuple[int, int]]:
        batches = [(count, version, version), *self.batches]
        writes = [1, *self.writes]
        plan = plan_merges(batches)
        self.batches, self.writes = [], []
        for start, stop in plan:
            run = batches[start:stop]
            self.batches.append((sum(b[0] for b in run), run[-1][1], run[0][2]))
            self.writes.append(max(writes[start:stop]) + (stop - start > 1))
        return plan

    def check(self) -> None:
        tiers = [batch_tier(count) for count, _, _ in self.batches]
        entries = sum(count for count, _, _ in self.batches)
        assert len(self.batches) <= max_batches(entries) <= bound(entries)
        # Oldest to newest, tiers never grow, and no four in a row share one.
        assert tiers == sorted(tiers)
        for i in range(len(tiers) - TIER_FANIN + 1):
            assert len(set(tiers[i : i + TIER_FANIN])) > 1
        # An entry is written by its commit, maybe once more when its batch takes in
        # smaller older ones, then only into a batch of a higher tier.
        for (count, _, _), written in zip(self.batches, self.writes, strict=True):
            assert written <= batch_tier(count) + 2


SIZES = st.one_of(
    st.lists(st.integers(1, 8), max_size=400),
    st.lists(st.integers(1, 5000), max_size=200),
    st.lists(st.sampled_from([1, 4, 16, 64, 3, 15, 63]), max_size=400),
    st.integers(1, 200).map(alternating),
    st.integers(1, 12).map(lambda n: [4**k for k in range(n)]),  # each commit a tier up
    st.integers(1, 12).map(lambda n: [4**k for k in range(n, 0, -1)] * 3),  # and down
)


@settings(max_examples=300, deadline=None)
@given(SIZES)
def test_plan_keeps_the_bound_for_any_commit_sizes(sizes: list[int]) -> None:
    """Every commit's plan folds adjacent runs covering the list, in order, and leaves
    at most 3 batches per tier (tiers falling from oldest to newest); each entry is
    rewritten at most once per tier; version ranges stay disjoint and ordered."""
    model = _Model()
    for version, size in enumerate(sizes, start=1):
        plan = model.commit(size, version)
        assert [start for start, _ in plan] == [0, *(stop for _, stop in plan[:-1])]
        model.check()
        uppers = [upper for _, _, upper in model.batches]
        lowers = [lower for _, lower, _ in model.batches]
        assert uppers[0] == version
        assert lowers[-1] == 1
        assert all(lo == up + 1 for lo, up in zip(lowers, uppers[1:], strict=False))


def test_plan_of_a_list_that_keeps_the_invariant_is_no_merge() -> None:
    """A list already in tiers plans no fold: a commit touches only the batches its new
    batch meets."""
    batches = [(1, 9, 9), (2, 8, 8), (5, 7, 7), (5, 6, 6), (4, 5, 5), (300, 1, 4)]
    assert plan_merges(batches) == [(i, i + 1) for i in range(len(batches))]


def test_plan_repairs_a_list_left_by_the_old_rule_in_one_pass() -> None:
    """1,500 batches of alternating tiers (what the old rule left) become a list within
    the bound in one plan, each batch folded once."""
    sizes = alternating(1500)
    batches = [(size, v, v) for v, size in reversed(list(enumerate(sizes, start=1)))]
    plan = plan_merges(batches)
    counts = [sum(b[0] for b in batches[start:stop]) for start, stop in plan]
    assert len(plan) <= max_batches(sum(sizes))
    tiers = [batch_tier(c) for c in counts]
    assert tiers == sorted(tiers)


def test_batches_of_one_version_are_folded_together() -> None:
    """Two batches holding one version (one commit applied twice) always become one."""
    assert plan_merges([(1, 5, 5), (64, 5, 5)]) == [(0, 2)]
    assert plan_merges([(1, 6, 6), (64, 5, 5)]) == [(0, 1), (1, 2)]


# --- whole tables against a dict model ---------------------------------------------


def _table() -> Table:
    ts = TableStore(BlockStore(open_store("memory://")))
    return Table.new(ts, key_field="k", key_codec="int", limits=NO_FLUSH)


def _check_pending(table: Table, versions: list[int]) -> None:
    """The pending list is within the bound, and its batches split the versions that
    wrote a batch (oldest first) into adjacent runs: each batch spans one run."""
    nodes = [table.ts.batch(cid) for cid in reversed(table.root.pending)]
    entries = sum(node.count for node in nodes)
    assert len(nodes) <= max_batches(entries) <= bound(entries), (len(nodes), entries)
    runs = [[v for v in versions if node.lower <= v <= node.upper] for node in nodes]
    assert [v for run in runs for v in run] == versions
    for run, node in zip(runs, nodes, strict=True):
        assert (run[0], run[-1]) == (node.lower, node.upper)


def _rows(table: Table) -> dict[int, Any]:
    return {row["k"]: row["v"] for row in table.to_arrow().to_pylist()}


@pytest.mark.parametrize(
    "sizes",
    [[1] * 1500, mixed_sizes(1500), alternating(1500)],
    ids=["one-row", "one-to-eight-rows", "one-and-four-rows"],
)
def test_repro_commit_sizes_keep_few_batches(sizes: list[int]) -> None:
    """The repro's three sequences of 1,500 commits: 9, 1,098 and 1,500 batches before;
    now all within 1.5 * log2(entries) + 3 (under 23 for these)."""
    table, key = _table(), 0
    model: dict[int, int] = {}
    for version, size in enumerate(sizes, start=1):
        keys = list(range(key, key + size))
        key += size
        table = table.write([{"k": k, "v": k} for k in keys], version)
        model.update({k: k for k in keys})
    _check_pending(table, list(range(1, len(sizes) + 1)))
    assert table.count == len(model)
    assert _rows(table) == model
    validate(table.ts, table)


TABLE_SIZES = st.one_of(
    st.lists(st.integers(1, 8), min_size=1, max_size=150),
    st.lists(st.integers(1, 40), min_size=1, max_size=100),
    st.integers(1, 75).map(alternating),
    st.integers(1, 5).map(lambda n: [4**k for k in range(n, 0, -1)] * 4),
)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(TABLE_SIZES, st.randoms(use_true_random=False))
def test_tables_keep_the_bound_and_read_like_a_dict(sizes: list[int], rnd: Any) -> None:
    """Commits of the given sizes, each writing or (one in five) deleting random keys out
    of 600 (keys repeat, so folds shrink): after every commit the pending list is within
    the bound and its batches span adjacent versions; reads (whole, by key) equal a
    dict's."""
    table = _table()
    model: dict[int, int] = {}
    versions: list[int] = []
    for version, size in enumerate(sizes, start=1):
        before = table.root.pending
        keys = rnd.sample(range(600), min(size, 600))
        if rnd.random() < 0.2:
            table = table.delete(keys, version)
            for k in keys:
                model.pop(k, None)
        else:
            table = table.write([{"k": k, "v": version} for k in keys], version)
            model.update(dict.fromkeys(keys, version))
        if table.root.pending != before:
            versions.append(version)
        _check_pending(table, versions)
    assert table.count == len(model)
    assert _rows(table) == model
    probe = [*range(0, 600, 7), 600, -1]
    got = {row["k"]: row["v"] for row in table.get(probe, None).to_pylist()}
    assert got == {k: model[k] for k in probe if k in model}
    validate(table.ts, table)


def test_a_long_list_left_by_the_old_rule_is_repaired_by_the_next_commit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A table whose commits merged nothing (as a lake the old rule left after mixed
    commits) comes back within the bound at its next commit, reading the same and
    keeping its version ranges."""

    def no_merges(ts: TableStore, pending: list[Any], *args: Any) -> list[Any]:
        return list(pending)

    monkeypatch.setattr(table_module, "merge_tier", no_merges)
    table = _table()
    model: dict[int, int] = {}
    sizes = alternating(300)
    for version, size in enumerate(sizes, start=1):
        keys = range(version * 10, version * 10 + size)
        table = table.write([{"k": k, "v": version} for k in keys], version)
        model.update({k: version for k in keys})
    assert len(table.root.pending) == 300
    monkeypatch.undo()
    table = table.write([{"k": 1, "v": -1}], len(sizes) + 1)
    model[1] = -1
    _check_pending(table, list(range(1, len(sizes) + 2)))
    assert _rows(table) == model
    validate(table.ts, table)


def test_database_commits_of_mixed_sizes_keep_reads_fast() -> None:
    """Through the database: 600 commits of 1 to 8 rows over a 2,000-row table leave a
    few batches (436 before), and point reads see the newest rows."""
    db = merkle.connect("memory://").create_db("d").create_table("t", key="k").commit()
    base = np.arange(2000, dtype=np.int64) * 2
    db = db.write("t", pa.table({"k": base, "v": np.zeros(2000, np.int64)})).commit()
    nxt = 1
    for n in mixed_sizes(600):
        keys = np.arange(nxt, nxt + 2 * n, 2, dtype=np.int64)
        nxt += 2 * n
        db = db.write("t", pa.table({"k": keys, "v": keys})).commit()
    pending = db._table("t").root.pending
    assert len(pending) <= 20
    got = db.get_records("t", [1, 3, 400, -1, nxt - 2])
    assert {k: r["v"] for k, r in got.items()} == {1: 1, 3: 3, 400: 0, nxt - 2: nxt - 2}
