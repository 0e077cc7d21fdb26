"""A bulk load holds one tablet's gathered rows at a time, not every tablet's.

Found at 10M rows: the load kept each tablet's gathered rows until the last
tablet was stored (a second copy of the whole input; peak 980 MiB against
Lance's 280). Measured here by the bytes Arrow holds each time a tablet
starts encoding, with one worker so the order is fixed: they must not grow
with the tablets already written. No timing.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from merkle.blocks import BlockStore
from merkle.storage.memory import MemoryStore
from merkle.tablets import Limits, Table, TableStore
from merkle.tablets.leaves import Leaves

ROWS = 200_000
TABLET = 10_000


def _shuffled(n: int) -> pa.Table:
    rng = np.random.default_rng(5)
    keys = rng.permutation(n)
    return pa.table(
        {
            "id": pa.array(keys, pa.int64()),
            "name": pa.array([f"name-{k:08d}" for k in keys]),
            "price": pa.array(rng.random(n)),
        }
    )


def test_a_bulk_load_holds_one_tablet_of_gathered_rows_at_a_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    data = _shuffled(ROWS)
    held: list[int] = []
    encode = Leaves._encode_rows

    def spy(self: Leaves, rows: object) -> object:
        held.append(pa.total_allocated_bytes())
        return encode(self, rows)  # type: ignore[arg-type]

    monkeypatch.setattr(Leaves, "_encode_rows", spy)
    ts = TableStore(BlockStore(MemoryStore()), workers=1)
    table = Table.new(ts, key_field="id", limits=Limits(tablet_size=TABLET))
    table = table.write(data, version=1)

    assert len(held) == ROWS // TABLET
    growth = held[-1] - held[0]
    # 19 more tablets of gathered rows would be ~0.9 of the input; what may grow is the
    # stored blocks' bytes in the memory store (compressed, and not Arrow's).
    assert growth < data.nbytes // 10, (growth, data.nbytes)
    assert table.to_arrow().sort_by("id").column("id").to_pylist() == list(range(ROWS))


def test_a_database_load_gathers_each_tablet_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """Through ``Database.write`` and ``commit`` too: the commit's fold of the
    transaction's one write must not gather the whole input into key order at once (a
    check of the fold's columns did, and a 10M-row load took 961 MiB over its input
    instead of 82 and twice the time)."""
    import merkle
    from merkle.tablets import rows as rows_module

    gathered: list[int] = []
    gather = rows_module.gather

    def spy(table: pa.Table, order: np.ndarray) -> pa.Table:
        gathered.append(len(order))
        return gather(table, order)

    monkeypatch.setattr(rows_module, "gather", spy)
    conn = merkle.connect("memory://")
    db = conn.create_db("shop").create_table("t", key="id", tablet_size_limit=TABLET)
    db = db.write("t", _shuffled(ROWS)).commit()
    assert gathered, "the load gathered no rows: the test no longer sees the gather"
    assert max(gathered) <= TABLET, max(gathered)
    assert db.describe_table("t")["count"] == ROWS
