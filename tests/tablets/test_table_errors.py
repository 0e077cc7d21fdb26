"""Bad input to the table layer: a clear merkle.errors exception and no partial state."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pyarrow as pa
import pytest

from merkle.blocks import BlockStore
from merkle.errors import IntegrityError, UsageError
from merkle.storage.memory import MemoryStore
from merkle.tablets import Limits, Table, TableStore, check_limits, validate
from merkle.tablets.nodes import IndexNode


@pytest.fixture
def setup() -> tuple[MemoryStore, TableStore, Table]:
    store = MemoryStore()
    ts = TableStore(BlockStore(store))
    table = Table.new(ts, key_field="id", limits=Limits(tablet_size=4, branching=4, patch=4))
    table = table.write([{"id": i, "v": i} for i in range(40)], version=1)
    return store, ts, table


def _keys(store: MemoryStore) -> set[str]:
    return {info.key for info in store.list()}


@pytest.mark.parametrize(
    ("records", "message"),
    [
        ([{"id": "seven", "v": 1}], "int"),
        ([{"id": True}], "int"),
        ([{"id": 1 << 70}], "64"),
        ([{"v": 1}], "id"),
        ([{"id": None, "v": 1}], "id"),
        ([{"id": 1, "": 2}], "field name"),
        ([{"id": 1, 5: 2}], "field name"),
        ([{"id": 1, "v": object()}], "object"),
        (["not a dict"], "dict"),
    ],
)
def test_bad_writes_raise_and_write_nothing(
    setup: tuple[MemoryStore, TableStore, Table], records: list[Any], message: str
) -> None:
    store, _, table = setup
    before = _keys(store)
    with pytest.raises(UsageError, match=message):
        table.write(records, version=2)
    assert _keys(store) == before
    assert table.count == 40


def test_bad_arrow_writes(setup: tuple[MemoryStore, TableStore, Table]) -> None:
    store, _, table = setup
    before = _keys(store)
    with pytest.raises(UsageError, match="id"):
        table.write(pa.table({"other": [1, 2]}), version=2)
    with pytest.raises(UsageError):
        table.write(pa.table({"id": pa.array([1, None])}), version=2)
    with pytest.raises(UsageError):
        table.write(pa.table({"id": ["a", "b"]}), version=2)
    assert _keys(store) == before


def test_bad_reads(setup: tuple[MemoryStore, TableStore, Table]) -> None:
    _, _, table = setup
    with pytest.raises(UsageError, match="int"):
        table.get(["x"])
    with pytest.raises(UsageError, match="int"):
        table.delete([1.5], version=2)
    with pytest.raises(UsageError, match="int"):
        list(table.scan(from_pk="a"))
    for option in ("offset", "limit", "from_index", "to_index"):
        with pytest.raises(UsageError, match=option):
            list(table.scan(**{option: -1}))


def test_bad_settings() -> None:
    ts = TableStore(BlockStore(MemoryStore()))
    with pytest.raises(UsageError, match="key field"):
        Table.new(ts, key_field="")
    with pytest.raises(UsageError, match="codec"):
        Table.new(ts, key_field="id", key_codec="complex")
    with pytest.raises(UsageError, match="base"):
        Table.new(ts, key_field="id", families={"base": {"a"}})
    with pytest.raises(UsageError, match="two families"):
        Table.new(ts, key_field="id", families={"f": {"a"}, "g": {"a"}})
    with pytest.raises(UsageError, match="key field"):
        Table.new(ts, key_field="id", families={"f": {"id"}})
    with pytest.raises(UsageError, match="branching_factor"):
        check_limits(branching=1)
    with pytest.raises(UsageError, match="tablet_size_limit"):
        check_limits(tablet_size=0)


def test_build_from_rejects_unordered_tablets(setup: tuple[MemoryStore, TableStore, Table]) -> None:
    _, _, table = setup
    table = table.flush()
    tablets = [ref.cid for ref in table.tablets()]
    with pytest.raises(UsageError, match="key order"):
        table.build_from(list(reversed(tablets)))
    index = table.root.data
    assert index is not None
    with pytest.raises(UsageError, match="index node"):
        table.build_from([index])
    rebuilt = table.build_from(tablets[:3])
    assert rebuilt.count == sum(ref.count for ref in table.tablets()[:3])


def test_validate_names_the_broken_place(setup: tuple[MemoryStore, TableStore, Table]) -> None:
    _, ts, table = setup
    table = table.flush()
    validate(ts, table)
    with pytest.raises(IntegrityError, match="root: count"):
        validate(ts, Table(ts, replace(table.root, count=table.count + 1)))
    # An index node that misstates one child's count.
    data = table.root.data
    assert data is not None
    node = ts.index(data)
    first = node.children[0]
    bad = IndexNode(node.height, (replace(first, count=first.count + 1), *node.children[1:]))
    bad_cid = ts.put_node(bad.to_node())
    broken = Table(ts, replace(table.root, data=bad_cid, count=table.count + 1))
    with pytest.raises(IntegrityError, match=r"data/children\[0\]"):
        validate(ts, broken)


@pytest.mark.parametrize("typed", [False, True])
@pytest.mark.parametrize("count", [2, 40])  # a pending batch; tablets
def test_validate_finds_strings_an_old_writer_stored_unchecked(
    monkeypatch: pytest.MonkeyPatch, count: int, typed: bool
) -> None:
    """Rows are checked when written; a lake written before that (or by a faulty
    writer) may hold strings that are not UTF-8: reads return their bytes, and
    ``validate`` names the block."""
    import merkle.tablets.table as table_module

    ts = TableStore(BlockStore(MemoryStore()))
    offsets = pa.array([0, *range(1, count + 1)], pa.int32()).buffers()[1]
    bad = pa.Array.from_buffers(
        pa.string(), count, [None, pa.py_buffer(offsets), pa.py_buffer(b"\xff" * count)]
    )
    rows = pa.table({"id": pa.array(range(count), pa.int64()), "v": bad})
    limits = Limits(tablet_size=4, branching=4, patch=4)
    schema = rows.schema if typed else None
    with pytest.raises(UsageError, match="UTF8"):
        Table.new(ts, key_field="id", limits=limits, typed=typed, schema=schema).write(
            rows, version=1
        )
    monkeypatch.setattr(table_module, "check_rows", lambda rows: None)  # an older writer
    table = Table.new(ts, key_field="id", limits=limits, typed=typed, schema=schema).write(
        rows, version=1
    )
    cold_ts = TableStore(BlockStore(ts.blocks.store))
    cold = Table.load(cold_ts, table.save())
    assert cold.to_arrow().num_rows == count
    assert bool(cold.tablets()) == (count > 4)
    with pytest.raises(IntegrityError, match=r"UTF-8|'v'"):  # as records: a clear error
        cold.records(cold.get([0]))
    with pytest.raises(IntegrityError, match="not UTF-8"):
        validate(cold_ts, cold)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("counts", [True], "integer"),
        ("counts", [-1], ">= 0"),
        ("sizes", [1.5], "integer"),
        ("keys", ["text"], "byte strings"),
        ("last_keys", [None], "byte strings"),
        ("children", ["bafy"], "CIDs"),
        ("height", 0, ">= 1"),
    ],
)
def test_a_malformed_index_node_is_an_integrity_error(
    setup: tuple[MemoryStore, TableStore, Table], field: str, value: Any, message: str
) -> None:
    """Each column of an index node is checked whole (IndexNode.from_node), and an intact
    node reads back as the columns it stores."""
    _, ts, table = setup
    data = table.flush().root.data
    assert data is not None
    node = ts.blocks.get_node(data)
    read = IndexNode.from_node(node, "ok")
    assert read.keys == tuple(node["keys"])
    assert [c.cid for c in read.children] == node["children"]
    assert [(c.count, c.size, c.last_key) for c in read.children] == list(
        zip(node["counts"], node["sizes"], node["last_keys"], strict=True)
    )
    assert {c.height for c in read.children} == {node["height"] - 1}
    damaged = dict(node)
    if isinstance(value, list):
        column = list(node[field])
        column[-1 if field == "keys" else 0] = value[0]
        damaged[field] = column
    else:
        damaged[field] = value
    with pytest.raises(IntegrityError, match=message):
        IndexNode.from_node(damaged, "damaged")
