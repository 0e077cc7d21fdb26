"""merkle-db against Delta Lake (``deltalake``) and Lance (``pylance``), same data, same run.

Issue 5. One generated table (1,000,000 rows: a shuffled int64 key, a short
string, a float, a low-cardinality string, a timestamp) is loaded into all
three stores on the local disk, under one temporary directory, and then:

1. bulk load (a new table from Arrow, committed);
2. full scan to Arrow, from a fresh handle and from an open one;
3. 1,000 single-key lookups (merkle-db ``get_arrow`` with one key; Lance
   with a BTREE scalar index on the key; Delta with a SQL filter);
4. one lookup of 1,000 keys;
5. 1,000 commits of 10 upserted rows (5 updates, 5 inserts) into the loaded
   table: latency and bytes written per commit (growth of the directory);
6. bytes on disk after 100 commits that each update 1% of the rows (random
   keys), every version kept;
7. opening the first version after those updates and scanning it;
8. clone, at 1,000,000 and 10,000,000 rows.

Each peer is used the way its documentation shows for the operation
(``write_deltalake``, ``DeltaTable.merge``, ``QueryBuilder``,
``DeltaTable(path, version=...)``; ``lance.write_dataset``, ``merge_insert``,
``create_scalar_index(..., index_type="BTREE")``, ``lance.dataset(path,
version=...)``, ``shallow_clone``). Competitors take turns operation by
operation (interleaved), so they share the machine's background load, and
the disk is synced (untimed) before each timed operation.

Every target is the ratio of merkle-db's time (or bytes) to the better of the
two peers in this run; the section marks each met or missed and, for every
missed one, profiles merkle-db's side (``bench/compare_profile.py``: the
wall-clock time inside the functions that make up the operation, then a
sampled profile, py-spy when installed) and says what costs the time.

Run: ``python -m bench compare [--quick]`` (``--quick``: 100,000 rows, fewer
commits, clone at 100,000 and 1,000,000 rows).
"""

from __future__ import annotations

import functools
import gc
import itertools
import os
import shutil
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import deltalake
import lance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

import merkle
from bench.common import (
    Timing,
    fmt_bytes,
    fmt_duration,
    machine_info,
    markdown_table,
    temp_dir,
)
from bench.compare_profile import Spot, lake_census, phases, sample

__all__ = ["run"]

T = TypeVar("T")

KEY = "id"
TABLE = "rows"
DB = "bench"
MERKLE, DELTA, LANCE = "merkle-db", "Delta Lake", "Lance"
PEERS = (DELTA, LANCE)
STATUSES = np.array(["new", "paid", "shipped", "delivered", "returned"])
T0_US = 1_704_067_200_000_000  # 2024-01-01T00:00:00Z in microseconds
YEAR_US = 365 * 86_400 * 1_000_000


@dataclass(frozen=True)
class Sizes:
    """How much of everything one run does."""

    rows: int  # the loaded table
    big_rows: int  # the second clone size
    load_rounds: int  # bulk loads per system (at least 3: the tables are reused)
    scans: int
    lookups: int  # single-key lookups
    warmup: int  # unmeasured single-key lookups on a fresh handle first
    many_keys: int  # keys in the multi-key lookup
    many_rounds: int
    commits: int  # small upsert commits
    commit_rows: int
    delta_every: int  # Delta takes every n-th small commit (each rewrites its data file)
    lance_upkeep: int  # Lance compacts and folds new rows into its index every n small commits
    updates: int  # 1% update commits
    update_fraction: float
    after_lookups: int  # single-key lookups again after the small commits
    travels: int
    clones: int


FULL = Sizes(
    rows=1_000_000,
    big_rows=10_000_000,
    load_rounds=3,
    scans=11,
    lookups=1_000,
    warmup=10,
    many_keys=1_000,
    many_rounds=5,
    commits=1_000,
    commit_rows=10,
    delta_every=10,
    lance_upkeep=100,
    updates=100,
    update_fraction=0.01,
    after_lookups=200,
    travels=11,
    clones=5,
)
QUICK = Sizes(
    rows=100_000,
    big_rows=1_000_000,
    load_rounds=3,
    scans=3,
    lookups=200,
    warmup=10,
    many_keys=1_000,
    many_rounds=3,
    commits=100,
    commit_rows=10,
    delta_every=10,
    lance_upkeep=25,
    updates=10,
    update_fraction=0.01,
    after_lookups=50,
    travels=3,
    clones=3,
)

#: merkle-db's clone counts as "the same time at both sizes" within this factor (noise).
CLONE_TOLERANCE = 1.5


# -- data ---------------------------------------------------------------------------


def make_table(n: int, seed: int) -> pa.Table:
    """``n`` rows: a shuffled int64 key 0..n-1 and four typed columns."""
    rng = np.random.default_rng(seed)
    keys = rng.permutation(n).astype(np.int64)
    return with_values(keys, rng)


def with_values(keys: np.ndarray, rng: np.random.Generator) -> pa.Table:
    """Rows for ``keys`` with freshly drawn values (the same schema as :func:`make_table`)."""
    n = len(keys)
    names = pa.array([f"user-{i:05d}" for i in range(100_000)])
    return pa.table(
        {
            KEY: pa.array(keys, pa.int64()),
            "name": names.take(pa.array(rng.integers(0, len(names), n))),
            "price": pa.array(np.round(rng.lognormal(3.0, 1.0, n), 2)),
            "status": pa.array(STATUSES[rng.integers(0, len(STATUSES), n)]),
            "ts": pa.array(T0_US + rng.integers(0, YEAR_US, n), pa.timestamp("us", tz="UTC")),
        }
    )


def dir_bytes(path: Path) -> tuple[int, int]:
    """(apparent bytes, allocated bytes) of every file under ``path``."""
    apparent = allocated = 0
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            st = os.stat(os.path.join(dirpath, name))
            apparent += st.st_size
            allocated += st.st_blocks * 512
    return apparent, allocated


# -- the three stores ----------------------------------------------------------------


class MerkleSide:
    """merkle-db on a ``file://`` lake: one database, one table."""

    label = MERKLE

    def __init__(self, root: Path, *, fsync: bool = True, patch_limit: int | None = None) -> None:
        self.root = root
        self.fsync = fsync
        self.patch_limit = patch_limit
        self.conn: merkle.Connection | None = None
        self.db: merkle.Database | None = None
        self.first_version = 0

    def _connect(self) -> merkle.Connection:
        if self.conn is not None:
            self.conn.close()
        self.conn = merkle.connect(self.root.as_uri(), fsync=self.fsync)
        return self.conn

    def load(self, data: pa.Table) -> None:
        """Create the database and table and commit ``data`` (durable when it returns)."""
        conn = self._connect()
        db = conn.create_db(DB).create_table(TABLE, key=KEY, patch_limit=self.patch_limit)
        self.db = db.write(TABLE, data).commit(message="load")
        self.first_version = self.db.version

    def reopen(self) -> None:
        """A new connection (empty caches) at the head."""
        self.db = self._connect().open_db(DB)

    def open_scan(self) -> pa.Table:
        self.reopen()
        return self.scan()

    def scan(self) -> pa.Table:
        assert self.db is not None
        return self.db.to_arrow(TABLE)

    def get(self, keys: list[int]) -> pa.Table:
        """The rows as an Arrow table, as the peers' lookups return them (``get_records``
        would add a Python dict per record, which the peers are not asked for)."""
        assert self.db is not None
        return self.db.get_arrow(TABLE, keys)

    def upsert(self, rows: pa.Table) -> None:
        assert self.db is not None
        self.db = self.db.write(TABLE, rows).commit()

    def travel_scan(self) -> pa.Table:
        with merkle.connect(self.root.as_uri(), fsync=self.fsync) as conn:
            return conn.open_db(DB, version=self.first_version).to_arrow(TABLE)

    def clone(self, i: int) -> None:
        assert self.conn is not None
        assert self.db is not None
        self.conn.create_db(f"clone-{i}", root=self.db)

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


def _key_filter(keys: list[int]) -> str:
    """The SQL predicate selecting ``keys`` (Delta's query and Lance's filter share it)."""
    return f"{KEY} = {keys[0]}" if len(keys) == 1 else f"{KEY} IN ({','.join(map(str, keys))})"


class DeltaSide:
    """A Delta Lake table through delta-rs (``deltalake``)."""

    label = DELTA

    def __init__(self, root: Path) -> None:
        self.root = root
        self.path = str(root / "table")
        self.dt: deltalake.DeltaTable | None = None
        self.qb: deltalake.QueryBuilder | None = None

    def load(self, data: pa.Table) -> None:
        deltalake.write_deltalake(self.path, data)
        self.reopen()

    def reopen(self) -> None:
        self.dt = deltalake.DeltaTable(self.path)
        self.qb = deltalake.QueryBuilder().register("t", self.dt)

    def open_scan(self) -> pa.Table:
        return deltalake.DeltaTable(self.path).to_pyarrow_table()

    def scan(self) -> pa.Table:
        assert self.dt is not None
        return self.dt.to_pyarrow_table()

    def get(self, keys: list[int]) -> pa.Table:
        assert self.qb is not None
        return pa.table(self.qb.execute(f"SELECT * FROM t WHERE {_key_filter(keys)}").read_all())

    def upsert(self, rows: pa.Table) -> None:
        assert self.dt is not None
        (
            self.dt.merge(rows, predicate=f"t.{KEY} = s.{KEY}", source_alias="s", target_alias="t")
            .when_matched_update_all()
            .when_not_matched_insert_all()
            .execute()
        )
        self.qb = deltalake.QueryBuilder().register("t", self.dt)

    def travel_scan(self) -> pa.Table:
        return deltalake.DeltaTable(self.path, version=0).to_pyarrow_table()

    def clone(self, i: int) -> None:
        # delta-rs has no CLONE (shallow clone is an open pull request): copy the table.
        shutil.copytree(self.path, self.root / f"clone-{i}")

    def close(self) -> None:
        self.dt = self.qb = None


class LanceSide:
    """A Lance dataset (``pylance``)."""

    label = LANCE

    def __init__(self, root: Path) -> None:
        self.root = root
        self.path = str(root / "table.lance")
        self.ds: lance.LanceDataset | None = None
        self.first_version = 1

    def load(self, data: pa.Table) -> None:
        self.ds = lance.write_dataset(data, self.path)
        self.first_version = self.ds.version

    def index(self) -> None:
        assert self.ds is not None
        self.ds.create_scalar_index(KEY, index_type="BTREE")

    def reopen(self) -> None:
        self.ds = lance.dataset(self.path)

    def maintain(self) -> None:
        """The upkeep Lance's documentation asks for after many small writes: merge the
        small fragments, fold the new rows into the index."""
        assert self.ds is not None
        self.ds.optimize.compact_files()
        self.ds.optimize.optimize_indices()

    def open_scan(self) -> pa.Table:
        return lance.dataset(self.path).to_table()

    def scan(self) -> pa.Table:
        assert self.ds is not None
        return self.ds.to_table()

    def get(self, keys: list[int]) -> pa.Table:
        assert self.ds is not None
        return self.ds.to_table(filter=_key_filter(keys))

    def upsert(self, rows: pa.Table) -> None:
        assert self.ds is not None
        self.ds.merge_insert(KEY).when_matched_update_all().when_not_matched_insert_all().execute(
            rows
        )

    def travel_scan(self) -> pa.Table:
        return lance.dataset(self.path, version=self.first_version).to_table()

    def clone(self, i: int) -> None:
        assert self.ds is not None
        self.ds.shallow_clone(str(self.root / f"clone-{i}.lance"), self.ds.version)

    def close(self) -> None:
        self.ds = None


Side = MerkleSide | DeltaSide | LanceSide


def sides(root: Path) -> dict[str, Side]:
    """One fresh store of each kind under ``root``."""
    made: dict[str, Side] = {
        MERKLE: MerkleSide(root / "merkle"),
        DELTA: DeltaSide(root / "delta"),
        LANCE: LanceSide(root / "lance"),
    }
    for side in made.values():
        side.root.mkdir(parents=True, exist_ok=True)
    return made


# -- measuring ------------------------------------------------------------------------


def each(stores: Mapping[str, Side], op: Callable[[Side, T], Any]) -> dict[str, Callable[[T], Any]]:
    """``{label: item -> op(store, item)}``: one competitor per store, for the timers."""
    return {label: functools.partial(op, side) for label, side in stores.items()}


def measure(fns: Mapping[str, Callable[[T], Any]], items: Sequence[T]) -> dict[str, Timing]:
    """Every competitor on every item, taking turns, the disk settled before each call."""
    return {label: Timing(tuple(taken)) for label, taken in time_rotating(fns, items).items()}


def clone_one(side: Side, i: int) -> None:
    side.clone(i)


def get_one(side: Side, key: int) -> Any:
    return side.get([key])


def get_many(side: Side, keys: list[int]) -> Any:
    return side.get(keys)


def time_rotating(
    fns: Mapping[str, Callable[[T], Any]],
    items: Sequence[T],
    every: Mapping[str, int] | None = None,
    *,
    start: int = 0,
    settle: Callable[[], Any] | None = os.sync,
) -> dict[str, list[float]]:
    """:func:`bench.common.time_interleaved` where ``every[label] = k`` runs a competitor on
    every k-th item only (one far slower, or far bigger on disk, per operation).

    ``start`` numbers the first item (for a run split into parts); the samples
    come back in item order, as lists so that parts can be joined. ``settle``
    runs untimed before every timed call: by default ``os.sync``, so that no
    store pays, in its own fsyncs, for the writes another store left dirty in
    the page cache (the peers do not fsync; merkle-db does).
    """
    every = every or {}
    labels = list(fns)
    samples: dict[str, list[float]] = {label: [] for label in labels}
    clock = time.perf_counter
    for index, item in enumerate(items, start):
        for turn in range(len(labels)):
            label = labels[(index + turn) % len(labels)]
            if index % every.get(label, 1):
                continue
            if settle is not None:
                settle()
            began = clock()
            fns[label](item)
            samples[label].append(clock() - began)
    return samples


@dataclass
class Row:
    """One line of the targets table."""

    name: str
    values: dict[str, float]  # per system: seconds or bytes
    unit: str  # "s" or "B"
    target: float | None  # merkle / best peer must be <= target (None: informational)
    detail: dict[str, str] = field(default_factory=dict)  # shown instead of the value

    @property
    def best_peer(self) -> float:
        return min(self.values[p] for p in PEERS if p in self.values)

    @property
    def ratio(self) -> float:
        return self.values[MERKLE] / self.best_peer

    @property
    def met(self) -> bool | None:
        return None if self.target is None else self.ratio <= self.target

    def cell(self, label: str) -> str:
        if label in self.detail:
            return self.detail[label]
        if label not in self.values:
            return "-"
        value = self.values[label]
        return fmt_bytes(int(value)) if self.unit == "B" else fmt_duration(value)


def verdict(met: bool | None) -> str:
    return "" if met is None else ("**met**" if met else "**missed**")


def targets_table(rows: list[Row]) -> str:
    body = []
    for row in rows:
        target = "-" if row.target is None else f"<= {row.target:g}"
        body.append(
            [
                row.name,
                row.cell(MERKLE),
                row.cell(DELTA),
                row.cell(LANCE),
                f"{row.ratio:.2f}",
                target,
                verdict(row.met),
            ]
        )
    return markdown_table(
        ["operation", MERKLE, DELTA, LANCE, "merkle-db / best peer", "target", ""], body
    )


@dataclass
class Report:
    """Everything the section prints, gathered as the steps run."""

    rows: list[Row] = field(default_factory=list)
    extra: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    profiles: list[str] = field(default_factory=list)
    clone: str = ""


# -- the steps --------------------------------------------------------------------------


def step_load(data: pa.Table, scratch: Path, sizes: Sizes, report: Report) -> list[dict[str, Side]]:
    """Bulk load, interleaved rounds; every round's stores are kept for later steps."""
    rounds: list[dict[str, Side]] = [sides(scratch / f"load{i}") for i in range(sizes.load_rounds)]
    fns = {
        label: functools.partial(lambda label, i: rounds[i][label].load(data), label)
        for label in (MERKLE, DELTA, LANCE)
    }
    timings = measure(fns, range(sizes.load_rounds))
    on_disk = {label: dir_bytes(rounds[0][label].root)[0] for label in fns}
    report.rows.append(
        Row(
            f"1. bulk load, {sizes.rows:,} rows (median of {sizes.load_rounds})",
            {label: t.median for label, t in timings.items()},
            "s",
            1.0,
        )
    )
    report.extra.append(Row("size on disk after the load", dict(on_disk), "B", None))
    if not report.rows[-1].met:
        side = MerkleSide(scratch / "profile-load")
        counter = itertools.count()

        def load_again() -> None:
            side.root = scratch / f"profile-load-{next(counter)}"
            side.load(data)

        report.profiles.append(profile_section("1. bulk load", load_again, 3, LOAD_SPOTS))
        side.close()
    return rounds


def step_scan(stores: dict[str, Side], n: int, sizes: Sizes, report: Report) -> None:
    """Full scan to Arrow from a fresh handle (files in the page cache), then from an open one."""
    for side in stores.values():
        assert side.open_scan().num_rows == n
    fresh = measure(each(stores, lambda s, _i: s.open_scan()), range(sizes.scans))
    for side in stores.values():
        side.reopen()
        side.scan()
    warm = measure(each(stores, lambda s, _i: s.scan()), range(sizes.scans))
    report.rows.append(
        Row(
            "2. full scan to Arrow, fresh handle (median)",
            {label: t.median for label, t in fresh.items()},
            "s",
            1.0,
        )
    )
    report.rows.append(
        Row(
            "2. full scan to Arrow, open handle, second scan (median)",
            {label: t.median for label, t in warm.items()},
            "s",
            None,
        )
    )
    if not report.rows[-2].met:
        merkle_side = stores[MERKLE]
        report.profiles.append(
            profile_section("2. full scan, fresh handle", merkle_side.open_scan, 20, READ_SPOTS)
        )


def step_lookups(stores: dict[str, Side], n: int, sizes: Sizes, report: Report, seed: int) -> None:
    """Single-key lookups (fresh handles, a few unmeasured first) and one multi-key lookup."""
    lance_side = stores[LANCE]
    assert isinstance(lance_side, LanceSide)
    index = measure({LANCE: lambda _i: lance_side.index()}, [0])[LANCE]
    report.notes.append(
        f"Lance's BTREE index on `{KEY}` took {fmt_duration(index.total)} to build after the "
        "load (not counted in the load); merkle-db and Delta need no index step."
    )
    rng = np.random.default_rng(seed)
    for side in stores.values():
        side.reopen()
        for k in rng.integers(0, n, sizes.warmup):
            side.get([int(k)])
    keys = [int(k) for k in rng.integers(0, n, sizes.lookups)]
    fns = each(stores, get_one)
    for label, fn in fns.items():
        found = fn(keys[0])
        assert len(found) == 1, f"{label} did not find key {keys[0]}"
    one = measure(fns, keys)
    row = Row(
        f"3. single-key lookup, p50 of {sizes.lookups:,}",
        {label: t.p50 for label, t in one.items()},
        "s",
        0.5,
    )
    report.rows.append(row)
    report.extra.append(
        Row(
            "3. single-key lookup, p99",
            {label: t.p99 for label, t in one.items()},
            "s",
            None,
        )
    )
    report.extra.append(
        Row(
            "3. single-key lookup, mean",
            {label: t.total / len(t) for label, t in one.items()},
            "s",
            None,
        )
    )
    if not row.met:
        merkle_side = stores[MERKLE]
        it = itertools.cycle(keys)
        report.profiles.append(
            profile_section(
                "3. single-key lookup",
                lambda: merkle_side.get([next(it)]),
                len(keys) * 5,
                LOOKUP_SPOTS,
            )
        )

    batches = [
        [int(k) for k in rng.choice(n, sizes.many_keys, replace=False)]
        for _ in range(sizes.many_rounds)
    ]
    many_fns = each(stores, get_many)
    for label, many_fn in many_fns.items():
        assert len(many_fn(batches[0])) == sizes.many_keys, f"{label} lost keys"
    many = measure(many_fns, batches)
    row = Row(
        f"4. one lookup of {sizes.many_keys:,} keys (median of {sizes.many_rounds})",
        {label: t.median for label, t in many.items()},
        "s",
        1.0,
    )
    report.rows.append(row)
    if not row.met:
        merkle_side = stores[MERKLE]
        it2 = itertools.cycle(batches)
        report.profiles.append(
            profile_section(
                f"4. lookup of {sizes.many_keys:,} keys",
                lambda: merkle_side.get(next(it2)),
                len(batches) * 4,
                LOOKUP_SPOTS,
            )
        )


def step_commits(
    stores: dict[str, Side], n: int, sizes: Sizes, report: Report, seed: int, scratch: Path
) -> None:
    """Small upsert commits into the loaded tables; latency and directory growth."""
    rng = np.random.default_rng(seed)
    half = sizes.commit_rows // 2
    batches = []
    for i in range(sizes.commits):
        updated = rng.choice(n, sizes.commit_rows - half, replace=False)
        inserted = n + i * half + np.arange(half)
        batches.append(with_values(np.concatenate([updated, inserted]).astype(np.int64), rng))

    # The same lake without fsync: the peers do not fsync on local disk (see the notes).
    merkle_side = stores[MERKLE]
    assert isinstance(merkle_side, MerkleSide)
    twin_root = scratch / "merkle-nofsync"
    merkle_side.close()
    shutil.copytree(merkle_side.root, twin_root)
    twin = MerkleSide(twin_root, fsync=False)
    twin.first_version = merkle_side.first_version
    nofsync = f"{MERKLE}, fsync off"
    competitors: dict[str, Side] = {**stores, nofsync: twin}
    for side in competitors.values():
        side.reopen()
    lance_side = stores[LANCE]
    assert isinstance(lance_side, LanceSide)
    before = {label: dir_bytes(side.root) for label, side in competitors.items()}
    fns = each(competitors, lambda s, rows: s.upsert(rows))
    samples: dict[str, list[float]] = {label: [] for label in competitors}
    upkeep: list[float] = []
    for first in range(0, len(batches), sizes.lance_upkeep):
        part = time_rotating(
            fns,
            batches[first : first + sizes.lance_upkeep],
            every={DELTA: sizes.delta_every},
            start=first,
        )
        for label, taken in part.items():
            samples[label].extend(taken)
        began = time.perf_counter()
        lance_side.maintain()
        upkeep.append(time.perf_counter() - began)
    timings = {label: Timing(tuple(taken)) for label, taken in samples.items()}
    after = {label: dir_bytes(side.root) for label, side in competitors.items()}
    grown = {
        label: (
            (after[label][0] - before[label][0]) / len(timings[label]),
            (after[label][1] - before[label][1]) / len(timings[label]),
        )
        for label in competitors
    }
    counts = {label: len(t) for label, t in timings.items()}
    delta_note = f" (Delta: {counts[DELTA]})" if counts[DELTA] != sizes.commits else ""
    row = Row(
        f"5. commit of {sizes.commit_rows} upserted rows, p50 of {sizes.commits:,}{delta_note}",
        {label: timings[label].p50 for label in stores},
        "s",
        0.5,
    )
    report.rows.append(row)
    report.extra.append(
        Row(
            "5. commit of 10 rows, p99",
            {label: timings[label].p99 for label in stores},
            "s",
            None,
        )
    )
    tenth = {label: max(1, len(timings[label]) // 10) for label in stores}
    report.extra.append(
        Row(
            "5. commit of 10 rows, p50 of the first tenth of the commits",
            {label: Timing(timings[label].samples[: tenth[label]]).p50 for label in stores},
            "s",
            None,
        )
    )
    report.extra.append(
        Row(
            "5. commit of 10 rows, p50 of the last tenth of the commits",
            {label: Timing(timings[label].samples[-tenth[label] :]).p50 for label in stores},
            "s",
            None,
        )
    )
    lance_mean = (timings[LANCE].total + sum(upkeep)) / len(timings[LANCE])
    report.extra.append(
        Row(
            "5. commit of 10 rows, mean (Lance: with its upkeep spread over the commits)",
            {
                **{label: timings[label].total / len(timings[label]) for label in stores},
                LANCE: lance_mean,
            },
            "s",
            None,
        )
    )
    report.notes.append(
        f"Lance ran its documented upkeep (`optimize.compact_files()` then "
        f"`optimize.optimize_indices()`) after every {sizes.lance_upkeep} small commits, "
        f"outside the commit timings: {len(upkeep)} runs, median "
        f"{fmt_duration(Timing(tuple(upkeep)).median)}. "
        "Without it each merge_insert slows down as small fragments pile up, and single-key "
        "lookups scan the unindexed fragments. Its bytes per commit include the compactions."
    )
    report.extra.append(
        Row(
            "5. bytes written per 10-row commit (directory growth / commits)",
            {label: grown[label][0] for label in stores},
            "B",
            None,
        )
    )
    report.extra.append(
        Row(
            "5. ... allocated on disk per commit (4 KiB blocks)",
            {label: grown[label][1] for label in stores},
            "B",
            None,
        )
    )
    report.notes.append(
        f"With fsync off, the same {MERKLE} commits took p50 {fmt_duration(timings[nofsync].p50)}, "
        f"p99 {fmt_duration(timings[nofsync].p99)} "
        f"(ratio to the best peer {timings[nofsync].p50 / row.best_peer:.2f}): the durability the "
        "peers give on a local disk."
    )
    if counts[DELTA] != sizes.commits:
        report.notes.append(
            f"Delta took part in every {sizes.delta_every}th small commit only ({counts[DELTA]} "
            "commits): each delta-rs merge rewrites the whole data file holding a matched row, "
            f"{fmt_bytes(int(grown[DELTA][0]))} per commit here, so {sizes.commits:,} commits "
            f"would write {fmt_bytes(int(grown[DELTA][0] * sizes.commits))}. Its cost per "
            "commit does not depend on how many came before."
        )

    # Reads after the commits: merkle-db holds them as pending batches, Lance as new fragments.
    rng2 = np.random.default_rng(seed + 1)
    keys = [int(k) for k in rng2.integers(0, n, sizes.after_lookups)]
    for side in stores.values():
        side.reopen()
        for k in keys[: sizes.warmup]:
            side.get([k])
    after_lookups = measure(each(stores, get_one), keys)
    report.extra.append(
        Row(
            f"5. then single-key lookup, p50 of {sizes.after_lookups}",
            {label: t.p50 for label, t in after_lookups.items()},
            "s",
            None,
        )
    )
    twin.close()
    if not row.met:
        profile_batches = itertools.cycle(batches[:200])
        merkle_side.reopen()
        report.profiles.append(
            profile_section(
                f"5. commit of {sizes.commit_rows} rows",
                lambda: merkle_side.upsert(next(profile_batches)),
                min(200, len(batches)),
                COMMIT_SPOTS,
            )
        )


def step_updates(
    stores: dict[str, Side], data: pa.Table, sizes: Sizes, report: Report, seed: int, scratch: Path
) -> None:
    """100 commits that each update 1% of the rows; bytes on disk with every version kept."""
    n = data.num_rows
    rng = np.random.default_rng(seed)
    per = max(1, int(n * sizes.update_fraction))
    batches = [
        with_values(np.sort(rng.choice(n, per, replace=False)).astype(np.int64), rng)
        for _ in range(sizes.updates)
    ]
    # A what-if beside the default: the same table with a higher patch limit.
    whatif_limit = n // 4
    whatif = MerkleSide(scratch / "merkle-patch", patch_limit=whatif_limit)
    whatif.root.mkdir(parents=True)
    whatif.load(data)
    whatif_label = f"{MERKLE}, patch_limit={whatif_limit:,}"
    competitors: dict[str, Side] = {**stores, whatif_label: whatif}
    merkle_side = stores[MERKLE]
    assert isinstance(merkle_side, MerkleSide)
    census_before = lake_census(merkle_side.root)
    for side in competitors.values():
        side.reopen()
    loaded = {label: dir_bytes(side.root)[0] for label, side in competitors.items()}
    timings = measure(each(competitors, lambda s, rows: s.upsert(rows)), batches)
    final = {label: dir_bytes(side.root) for label, side in competitors.items()}
    row = Row(
        f"6. bytes on disk after {sizes.updates} commits updating {sizes.update_fraction:.0%} each",
        {label: final[label][0] for label in stores},
        "B",
        1.0,
    )
    report.rows.append(row)
    report.extra.append(
        Row(
            "6. ... of which written by the updates",
            {label: final[label][0] - loaded[label] for label in stores},
            "B",
            None,
        )
    )
    report.extra.append(
        Row(
            f"6. commit of {per:,} updated rows, p50",
            {label: timings[label].p50 for label in stores},
            "s",
            None,
        )
    )
    report.notes.append(
        f"What-if for 6: the same merkle-db table created with `patch_limit={whatif_limit:,}` "
        f"(default 20,000 rows) ends at {fmt_bytes(final[whatif_label][0])} "
        f"(ratio {final[whatif_label][0] / row.best_peer:.2f} to the best peer), its update "
        f"commits p50 {fmt_duration(timings[whatif_label].p50)}."
    )
    if not row.met:
        census = lake_census(merkle_side.root).minus(census_before)
        report.profiles.append(
            f"**6. bytes after the updates**: what the {sizes.updates} update commits added to "
            f"merkle-db's lake, by kind of block ({fmt_bytes(census.total)} in all).\n\n"
            + census.markdown("added by the updates")
        )
    whatif.close()

    # 7. Time travel: the first version, from fresh handles, after all those versions.
    for label, side in stores.items():
        old = side.travel_scan()
        assert old.num_rows == n, f"{label}: the first version has {old.num_rows} rows"
        total = pc.sum(old.column("price")).as_py()
        expected = pc.sum(data.column("price")).as_py()
        assert abs(total - expected) < 1e-6 * abs(expected), f"{label}: wrong first version"
    travel = measure(
        each(stores, lambda s, _i: s.travel_scan()),
        range(sizes.travels),
    )
    row = Row(
        f"7. open the first version (of {sizes.updates + 1}) and scan it (median)",
        {label: t.median for label, t in travel.items()},
        "s",
        1.0,
    )
    report.rows.append(row)
    if not row.met:
        report.profiles.append(
            profile_section(
                "7. open the first version and scan it", merkle_side.travel_scan, 20, READ_SPOTS
            )
        )


def step_clone(
    small: dict[str, Side], scratch: Path, sizes: Sizes, report: Report, seed: int
) -> None:
    """Clone at two sizes: the loaded tables, then tables of ``big_rows`` loaded here."""
    for side in small.values():
        side.reopen()
    at_small = measure(each(small, clone_one), range(sizes.clones))
    big = sides(scratch / "big")
    big_data = [make_table(sizes.big_rows, seed)]
    big_load = measure(each(big, lambda s, i: s.load(big_data[i])), [0])
    big_data.clear()  # 10 million rows: free them before cloning
    gc.collect()
    for side in big.values():
        side.reopen()
    at_big = measure(each(big, clone_one), range(sizes.clones))
    report.extra.append(
        Row(
            f"bulk load, {sizes.big_rows:,} rows (one each)",
            {label: t.median for label, t in big_load.items()},
            "s",
            None,
        )
    )
    rows_small = Row(
        f"8. clone at {sizes.rows:,} rows (median of {sizes.clones})",
        {label: t.median for label, t in at_small.items()},
        "s",
        None,
    )
    rows_big = Row(
        f"8. clone at {sizes.big_rows:,} rows (median of {sizes.clones})",
        {label: t.median for label, t in at_big.items()},
        "s",
        None,
    )
    report.rows.extend([rows_small, rows_big])
    growth = {label: rows_big.values[label] / rows_small.values[label] for label in big}
    met = growth[MERKLE] <= CLONE_TOLERANCE
    report.clone = (
        f"clone time at {sizes.big_rows:,} rows / at {sizes.rows:,} rows: "
        + ", ".join(f"{label} {g:.2f}" for label, g in growth.items())
        + f". Target: merkle-db takes the same time at both sizes (within {CLONE_TOLERANCE}x, "
        f"timer noise): {verdict(met)}."
    )
    if not met:
        merkle_side = big[MERKLE]
        counter = itertools.count(100)
        report.profiles.append(
            profile_section(
                f"8. clone at {sizes.big_rows:,} rows",
                lambda: merkle_side.clone(next(counter)),
                5,
            )
        )
    for side in big.values():
        side.close()


def profile_section(
    title: str, fn: Callable[[], Any], runs: int, spots: list[Spot] | None = None
) -> str:
    """Wall-clock phases of ``fn`` (exact, I/O included), then a sampled profile."""
    parts = [f"**{title}**, merkle-db's side."]
    if spots:
        parts.append("Where the wall-clock time goes (each function timed on every call):")
        parts.append(phases(fn, spots, runs=runs).markdown())
    parts.append("Sampled: " + sample(fn, runs=runs).markdown())
    return "\n\n".join(parts)


#: The functions timed for each missed target's phase table (``module:qualname``).
LOAD_SPOTS = [
    Spot("sort the rows by key", "merkle.db.database:sort_rows"),
    Spot("cut, encode, hash and stage the tablets", "merkle.tablets.store:TableStore.put_segments"),
    Spot("encode one segment", "merkle.tablets.store:encode_segment", threads=True),
    Spot("write the blocks durably", "merkle.db.staging:StagedBlocks.flush_reachable"),
    Spot("journal entry (compare-and-set)", "merkle.refs.journal:RefManager.commit"),
]
READ_SPOTS = [
    Spot("connect", "merkle.db.connection:Connection.__init__"),
    Spot("open the version", "merkle.db.connection:Connection.open_db"),
    Spot("read the table (`to_arrow`)", "merkle.db.database:Database.to_arrow"),
    Spot("read and verify blocks", "merkle.blocks.store:BlockStore.get_many", nested=True),
    Spot("decode segments", "merkle.tablets.store:decode_segment", threads=True),
    Spot("close the connection", "merkle.db.connection:Connection.close"),
]
LOOKUP_SPOTS = [
    Spot("find the rows (`Table.get`)", "merkle.tablets.table:Table.get"),
    Spot("read the tablet's rows", "merkle.tablets.tree:Tree.read_rows", nested=True),
    Spot("concatenate the pieces", "merkle.tablets.table:concat_segments", nested=True),
    Spot("turn the rows into dicts", "merkle.db.database:Database._records"),
]
COMMIT_SPOTS = [
    Spot("buffer the rows (`Database.write`)", "merkle.db.database:Database.write"),
    Spot("fold them into the table", "merkle.tablets.table:Table.apply_changes"),
    Spot("rebuild the pending overlay", "merkle.tablets.batch:Overlay.load", nested=True),
    Spot("merge batch tiers", "merkle.tablets.table:merge_tier", nested=True),
    Spot("encode the new batch", "merkle.tablets.table:write_batch", nested=True),
    Spot("write the blocks durably", "merkle.db.staging:StagedBlocks.flush_reachable"),
    Spot("journal entry (compare-and-set)", "merkle.refs.journal:RefManager.commit"),
]


# -- the section ----------------------------------------------------------------------


SETUP = """\
All three stores live under one temporary directory on the local disk
(`$MERKLE_BENCH_TMP`, {fs}); the same Arrow table ({rows:,} rows: `id` int64,
shuffled; `name` short string; `price` float64; `status` one of 5 strings;
`ts` timestamp[us, UTC]) is loaded into each, and competitors take turns
operation by operation so that they share the machine's background load.
Before every timed operation the dirty pages of the page cache are written
out (`os.sync`, untimed), so that merkle-db's fsyncs never wait for writes a
peer left unsynced.
Caches: the OS page cache is warm everywhere (the data was just written; {memory}
of RAM, nothing is dropped). A *fresh handle* is a new `merkle.connect` +
`open_db`, a new `DeltaTable`, a new `lance.dataset`: no in-process cache. The
lookups run on a handle opened just before, after {warmup} unmeasured lookups
(merkle-db then holds the decoded tablets it touched, Lance its index pages).

How each store is used: merkle-db `create_db`/`create_table`/`write`/`commit`,
`to_arrow`, `get_arrow` (lookups return Arrow, as the peers' do), `open_db(version=)`,
`create_db(root=db)`; Delta
`write_deltalake`, `DeltaTable.to_pyarrow_table`, `QueryBuilder` SQL
`WHERE id = k` / `id IN (...)` (DataFusion; the fastest of the documented
filters here), `DeltaTable.merge` (update all / insert all),
`DeltaTable(path, version=0)`, and for a clone `shutil.copytree` of the table
(delta-rs has no CLONE; shallow clone is an open pull request,
delta-io/delta-rs#3938); Lance `write_dataset`, `to_table`,
`create_scalar_index(index_type="BTREE")` + `to_table(filter=)`,
`merge_insert` (update all / insert all), `lance.dataset(path, version=)`,
`shallow_clone`. Default settings everywhere; all versions are kept (no
vacuum, cleanup or GC runs; Lance's automatic cleanup only removes versions
older than 14 days).

Durability: merkle-db fsyncs every commit (blocks, then the journal entry).
Neither peer fsyncs on a local disk (object_store's local file system writes
and renames without fsync; checked with strace: no fsync or fdatasync in a
Delta merge or a Lance merge_insert), so row 5 also shows merkle-db with
`fsync=False`. Times are medians unless said; bytes are apparent file sizes;
merkle-db / best peer is merkle-db's number over the better of the two peers."""


def progress(started: float, what: str) -> None:
    """A line on stderr: the full run takes minutes."""
    print(
        f"   compare: {time.perf_counter() - started:6.0f} s  {what}", file=sys.stderr, flush=True
    )


def run(quick: bool) -> str:
    sizes = QUICK if quick else FULL
    seed = 5
    report = Report()
    started = time.perf_counter()
    data = make_table(sizes.rows, seed)
    with temp_dir("merkle-compare-") as scratch:
        info = machine_info()
        fs, memory = info["scratch filesystem"], info.get("memory", "?")
        progress(started, "1. bulk load")
        rounds = step_load(data, scratch, sizes, report)
        main, updates, clones = rounds[-1], rounds[1], rounds[0]
        progress(started, "2. full scan")
        step_scan(main, sizes.rows, sizes, report)
        progress(started, "3-4. lookups")
        step_lookups(main, sizes.rows, sizes, report, seed + 1)
        progress(started, "5. small commits")
        step_commits(main, sizes.rows, sizes, report, seed + 2, scratch)
        progress(started, "6-7. updates, bytes, time travel")
        step_updates(updates, data, sizes, report, seed + 3, scratch)
        progress(started, "8. clone")
        step_clone(clones, scratch, sizes, report, seed + 4)
        progress(started, "done")
        for store in rounds:
            for side in store.values():
                side.close()
    met = [r for r in report.rows if r.met is not None]
    summary = (
        f"{sum(1 for r in met if r.met)} of {len(met)} time and size targets met; " + report.clone
    )
    parts = [
        SETUP.format(fs=fs, memory=memory, rows=sizes.rows, warmup=sizes.warmup),
        "### Targets",
        targets_table(report.rows),
        summary,
        "### More numbers from the same run",
        targets_table(report.extra),
        "\n".join(f"- {note}" for note in report.notes),
    ]
    missed = [r.name for r in report.rows if r.met is False]
    if missed or report.profiles:
        parts.append("### Where merkle-db's time goes on the missed targets")
        parts.append(
            "merkle-db repeats the operation twice more (`bench/compare_profile.py`): "
            "once with the functions that make it up timed on every call (wall clock, "
            "I/O waits included), once sampled across threads (py-spy when it is "
            "installed: shares of busy-thread samples, native calls charged to the "
            "merkle-db function that made them; a thread waiting on I/O is idle and not "
            "counted). After each profile: what the time goes to and what would close "
            "the gap."
        )
        for profile in report.profiles:  # each begins "**<step number>. ..."
            parts.append(profile)
            step = profile.removeprefix("**").split(" ", 1)[0]
            if step in NOTES:
                parts.append(NOTES[step])
    return "\n\n".join(parts)


#: What would close each gap, by the row's step number; printed for the rows missed in a run.
#: From the profiles above and side measurements on the benchmark machine (November 2026).
NOTES: dict[str, str] = {
    "1.": """\
**Bulk load: why it misses, and what is left.** merkle-db keeps a table
sorted by encoded key in a B+-tree of tablets; Lance writes the rows in the
order they came, with light encodings and no fsync. A load therefore sorts
first (`merkle/tablets/rows.py:sort_rows`: an unstable `np.argsort` of the
8-byte keys, a stable one only when keys repeat), then each worker gathers
its own tablet's rows (`Table.take`, the string columns dominate), encodes
them as zstd-3 Arrow IPC and the blocks are hashed (BLAKE3) and fsynced. Done
so far: the unstable sort and the per-tablet gather on every core took the
load from 727 ms to 340-420 ms (it varies between runs on the 2-core
benchmark machine). What is left is the gather and the
compression: a random gather over the whole table (it grows with size), and
zstd-3 (lz4 encodes a tablet in 8.1 ms, zstd-1 in 15.1 ms, zstd-3 in
21.7 ms; zstd-3 was chosen for the bytes it saves, see the segments
section). Sorting is the price of what the sort buys: point lookups 2.4x
faster than Lance's BTREE index without any index, and key-range scans that
read only the tablets they need. A load that arrives in key order skips the
sort.""",
    "2.": """\
**Full scan, fresh handle: what would close the gap.** Opening is cheap; the
time is reading: `BlockStore.get_many` reads and BLAKE3-verifies every
segment (on the calling thread, before any decoding starts), then
`segment.py:decode_segment` decompresses them (zstd) on the worker pool,
where a tablet takes far longer than alone (5.44 ms in the segments section)
because 4 workers and BLAKE3's own threads share 2 cores. Levers: decode each
segment as soon as its bytes arrive instead of after all of them; segments
that decode faster (lz4: 2.87 ms a tablet; uncompressed is zero-copy, at 2.6x
the bytes); no more worker threads than cores. A second scan on an open
handle is served from the decoded-segment cache.""",
    "3.": """\
**Single-key lookup: what costs the time.** The key is found in microseconds
(`tree.py:Tree.locate`, `keyindex.py:KeyIndex.find`); most of a lookup is
building Arrow and Python objects for one row: `segment.py:concat_segments`
even when there is one piece, `tree.py:Tree.read_rows` joining families of a
single-family tablet, and `segment.py:arrow_to_records`. A fast path for one
piece and one family, and `to_pylist` for typed columns, would remove them.""",
    "4.": """\
**1,000-key lookup: what costs the time.** See the profile: per-tablet takes
and the conversion of the rows to dicts (`segment.py:arrow_to_records`).""",
    "5.": """\
**10-row commit: what costs the time.** Each commit rebuilds the overlay of
every pending batch (`batch.py:Overlay.load`, folding all of them again),
merges tiers (`batch.py:merge_tier`), encodes the new batch and makes it
durable in several fsync rounds (blocks, directory, journal entry). Keeping
the overlay incrementally (the previous overlay plus the new batch) and
fewer fsync rounds are the levers.""",
    "6.": """\
**Bytes after 1% updates: what would close the gap.** Nearly all the bytes
are tablet segments rewritten by flushes: a commit of 10,000 rows goes to a
pending batch, and when the pending rows pass `patch_limit` (20,000 by
default) `table.py:Table.flush` rewrites every tablet the pending keys touch,
which for random keys is every tablet, so each flush writes the table again
and every version keeps its copy. Lance appends the changed rows as a new
fragment plus a deletion file. Levers: a patch limit that scales with the
table (the what-if above), pending batches merged with a larger fan-in so a
row is rewritten fewer times before the flush, and column families for
tables whose updates touch a few columns (here every column changes).""",
    "7.": """\
**Opening the first version and scanning it: what would close the gap.**
Opening a version is O(1) (one journal entry and a root node); the time is the
scan, decode-bound as in row 2, and the same levers apply.""",
}
