"""The three stores of the comparison benchmarks (merkle-db, Delta Lake, Lance), the
generated table they load, and the interleaved timers that run them in turns.

``bench/compare.py`` and ``bench/scale.py`` drive them; each store is used the way
its documentation shows for the operation (see ``bench/compare.py``)."""

from __future__ import annotations

import functools
import os
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import deltalake
import lance
import numpy as np
import pyarrow as pa

import merkle
from bench.common import (
    Timing,
)

__all__ = [
    "DB",
    "DELTA",
    "KEY",
    "LANCE",
    "MERKLE",
    "PEERS",
    "STATUSES",
    "T0_US",
    "TABLE",
    "YEAR_US",
    "DeltaSide",
    "LanceSide",
    "MerkleSide",
    "Side",
    "clone_one",
    "dir_bytes",
    "each",
    "get_many",
    "get_one",
    "make_table",
    "measure",
    "sides",
    "time_rotating",
    "with_values",
]

T = TypeVar("T")

KEY = "id"
TABLE = "rows"
DB = "bench"
MERKLE, DELTA, LANCE = "merkle-db", "Delta Lake", "Lance"
PEERS = (DELTA, LANCE)
STATUSES = np.array(["new", "paid", "shipped", "delivered", "returned"])
T0_US = 1_704_067_200_000_000  # 2024-01-01T00:00:00Z in microseconds
YEAR_US = 365 * 86_400 * 1_000_000

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
