"""Nesting limits: a writer refuses, when the value is taken, what no reader could read.

Two limits hold. CBOR (schema-free values, and metadata, which nodes hold)
nests at most ``MAX_CBOR_DEPTH`` (400) levels, the depth cbor2's decoder
reads: a deeper schema-free value used to be written and committed, and then
every read of it, every scan of its table and every look-up in its page
raised IntegrityError. Arrow IPC, which tablets are, nests at most 63 levels
of child types under a column: a typed field nested deeper used to fail at
commit with a raw ``ArrowInvalid``, or at write with a bare RecursionError.
Now both are a ``merkle.errors`` type from the call that gives the value,
naming the field (and the key) and the limit, and nothing is taken.
"""

from __future__ import annotations

import decimal
import io
from pathlib import Path
from typing import Any

import cbor2
import pyarrow as pa
import pytest

import merkle
from merkle.blocks.cid import CID
from merkle.blocks.codec import decode_node, encode_node
from merkle.errors import IntegrityError, SchemaError, UsageError
from merkle.tablets.nesting import FREE_ARROW_MAX_NESTING


def nest(depth: int, leaf: Any = 1) -> Any:
    """``leaf`` inside ``depth`` lists."""
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


def list_type(depth: int, leaf: pa.DataType | None = None) -> pa.DataType:
    kind = leaf or pa.int64()
    for _ in range(depth):
        kind = pa.list_(kind)
    return kind


def map_type(depth: int) -> pa.DataType:
    kind: pa.DataType = pa.int64()
    for _ in range(depth):
        kind = pa.map_(pa.string(), kind)
    return kind


def _reopened(path: Path) -> Any:
    """The database "d" as a new connection reads it: every value decoded from bytes."""
    return merkle.connect(str(path)).open_db("d")


# -- CBOR: schema-free values -----------------------------------------------------------


def test_schema_free_value_past_the_cbor_limit_is_refused_by_write(tmp_path: Path) -> None:
    db = merkle.connect(str(tmp_path)).create_db("d").create_table("t", key="k", schema_free=True)
    db = db.write("t", [{"k": i, "v": i} for i in range(50)])
    with pytest.raises(UsageError) as caught:
        db.write("t", [{"k": 5000, "v": nest(401)}])
    message = str(caught.value)
    assert "field 'v'" in message
    assert "key 5000" in message
    assert "400 levels" in message
    assert "flatten it" in message
    db = db.commit()  # nothing of the refused write was taken: the rest commits and reads
    reader = _reopened(tmp_path)
    assert sum(1 for _ in reader.scan("t")) == 50
    assert reader.get_records("t", [7]) == {7: {"k": 7, "v": 7}}


@pytest.mark.parametrize(
    ("depth", "leaf"),
    [
        (400, 1),  # 400 arrays
        (398, decimal.Decimal("1.5")),  # a Decimal is a tag around an array: two levels
        (398, {1, 2}),  # a set too
        (399, 2**70),  # a big int is a tag around bytes: one level
        (399, {"a": 1}),  # a dict is one
    ],
)
def test_schema_free_value_at_the_cbor_limit_reads_back(
    tmp_path: Path, depth: int, leaf: Any
) -> None:
    db = merkle.connect(str(tmp_path)).create_db("d").create_table("t", key="k", schema_free=True)
    db.write("t", [{"k": 1, "v": nest(depth, leaf)}, {"k": 2, "v": "x"}]).commit()
    reader = _reopened(tmp_path)
    assert reader.get_records("t", [1])[1]["v"] == nest(depth, leaf)
    assert [r["k"] for r in reader.scan("t")] == [1, 2]


@pytest.mark.parametrize(
    ("depth", "leaf"),
    [
        (401, 1),
        (399, decimal.Decimal("1.5")),
        (399, {1, 2}),
        (400, 2**70),
        (400, {"a": 1}),
        (3000, 1),  # far past it: refused the same way (its repr alone would overflow)
    ],
)
def test_schema_free_value_one_level_past_the_limit_is_refused(depth: int, leaf: Any) -> None:
    db = merkle.connect("memory://").create_db("d").create_table("t", key="k", schema_free=True)
    with pytest.raises(UsageError, match=r"field 'v' of the record with key 1 .*400 levels"):
        db.write("t", [{"k": 1, "v": nest(depth, leaf)}])
    assert sum(1 for _ in db.commit().scan("t")) == 0  # nothing was taken


@pytest.mark.parametrize("call", ["write", "upsert", "update"])
def test_every_call_that_sets_a_value_is_held_to_the_cbor_limit(call: str) -> None:
    db = merkle.connect("memory://").create_db("d").create_table("t", key="k", schema_free=True)
    db = db.write("t", [{"k": 1, "v": 1}]).commit()
    if call == "update":
        args: tuple[Any, ...] = ("t", {1: {"v": nest(401)}})
    else:
        args = ("t", [{"k": 1, "v": nest(401)}])
    with pytest.raises(UsageError, match=r"field 'v' of the record with key 1 .*400 levels"):
        getattr(db, call)(*args)
    assert db.get_records("t", [1]) == {1: {"k": 1, "v": 1}}


def test_declared_free_field_of_a_typed_table_is_held_to_the_cbor_limit(tmp_path: Path) -> None:
    db = merkle.connect(str(tmp_path)).create_db("d").create_table("t", key="k", schema_free=["f"])
    with pytest.raises(UsageError, match=r"field 'f' of the record with key 2 .*400 levels"):
        db.write("t", [{"k": 1, "f": 1}, {"k": 2, "f": {"a": nest(400)}}])
    db.write("t", [{"k": 1, "f": {"a": nest(399)}}]).commit()
    assert _reopened(tmp_path).get_records("t", [1])[1]["f"] == {"a": nest(399)}


def test_long_values_that_nest_little_are_taken(tmp_path: Path) -> None:
    """Values longer than the limit, full of bytes that look like CBOR heads (non-ASCII
    text, binary), or with many containers side by side, are stored as before."""
    values = [
        "é" * 2000,
        bytes(range(128, 224)) * 50,
        [[i] for i in range(1000)],
        {"doc": ["ü" * 300, {"n": nest(300)}, list(range(500))]},
    ]
    db = merkle.connect(str(tmp_path)).create_db("d").create_table("t", key="k", schema_free=True)
    db.write("t", [{"k": i, "v": v} for i, v in enumerate(values)]).commit()
    got = _reopened(tmp_path).get_records("t", list(range(len(values))))
    assert [got[i]["v"] for i in range(len(values))] == values


def test_the_reader_and_the_writer_share_one_limit() -> None:
    from merkle.blocks.nesting import MAX_CBOR_DEPTH
    from merkle.tablets.cbor import _cbor_decode

    assert MAX_CBOR_DEPTH == 400
    deepest = cbor2.dumps(nest(MAX_CBOR_DEPTH))
    assert _cbor_decode(deepest, "v") == nest(MAX_CBOR_DEPTH)
    with pytest.raises(IntegrityError, match="depth"):
        _cbor_decode(cbor2.dumps(nest(MAX_CBOR_DEPTH + 1)), "v")


# -- CBOR: nodes and metadata -------------------------------------------------------------


def test_node_encoder_refuses_what_the_node_decoder_cannot_read() -> None:
    assert decode_node(encode_node(nest(400))) == nest(400)
    with pytest.raises(UsageError, match="400 levels"):
        encode_node(nest(401))
    link = CID.of(b"x")  # a link is a tag: one level
    assert decode_node(encode_node(nest(399, link))) == nest(399, link)
    with pytest.raises(UsageError, match="400 levels"):
        encode_node(nest(400, link))
    assert decode_node(encode_node({"a": nest(398, link)})) == {"a": nest(398, link)}
    with pytest.raises(UsageError, match="400 levels"):
        encode_node({"a": nest(399, link)})
    with pytest.raises(IntegrityError, match="depth"):
        decode_node(b"\x81" * 401 + b"\x01")  # written elsewhere: still refused on read


def test_node_encoder_refuses_deep_mapping_and_sequence_subclasses() -> None:
    from collections import OrderedDict

    class Items(list):  # type: ignore[type-arg]
        pass

    def deep(depth: int) -> Any:
        value: Any = 1
        for i in range(depth):
            value = OrderedDict(a=value) if i % 2 else Items([value])
        return value

    assert decode_node(encode_node(deep(100))) == deep(100)
    with pytest.raises(UsageError, match="nested"):
        encode_node(deep(401))


@pytest.mark.parametrize("where", ["table", "db"])
def test_metadata_at_its_limit_reads_back_and_one_level_more_is_refused(
    tmp_path: Path, where: str
) -> None:
    db = merkle.connect(str(tmp_path)).create_db("d").create_table("t", key="k")

    def alter(value: Any) -> Any:
        if where == "table":
            return db.alter_table_meta("t", lambda _old: value)
        return db.alter_db_meta(lambda _old: value)

    with pytest.raises(UsageError) as caught:
        alter(nest(400))  # the root's own map is the 400th level
    assert f"metadata of {'table' if where == 'table' else 'database'}" in str(caught.value)
    assert "more than 399 levels" in str(caught.value)
    alter(nest(399)).commit()
    reader = _reopened(tmp_path)
    held = reader.describe_table("t")["metadata"] if where == "table" else reader.metadata
    assert held == nest(399)


def test_metadata_given_at_creation_is_held_to_the_limit() -> None:
    conn = merkle.connect("memory://")
    with pytest.raises(UsageError, match=r"metadata of database 'x'.*399 levels"):
        conn.create_db("x", metadata=nest(400))
    db = conn.create_db("d")
    with pytest.raises(UsageError, match=r"metadata of table 't'.*399 levels"):
        db.create_table("t", key="k", metadata={"a": nest(399)})


# -- Arrow: typed fields ------------------------------------------------------------------


def test_typed_field_at_arrows_limit_is_stored() -> None:
    db = merkle.connect("memory://").create_db("d").create_table("t", key="k")
    db = db.write("t", [{"k": 1, "l": nest(63)}]).commit()
    assert db.get_records("t", [1])[1]["l"] == nest(63)


@pytest.mark.parametrize("depth", [64, 400, 3000])
def test_typed_field_past_arrows_limit_is_refused_by_write(depth: int) -> None:
    db = merkle.connect("memory://").create_db("d").create_table("t", key="k")
    with pytest.raises(SchemaError) as caught:
        db.write("t", [{"k": 1, "l": nest(depth)}])
    message = str(caught.value)
    assert "field 'l'" in message
    assert "63 levels" in message
    assert "Arrow" in message
    assert "free_field('l')" in message


def test_refused_typed_write_takes_nothing() -> None:
    db = merkle.connect("memory://").create_db("d").create_table("t", key="k")
    db = db.write("t", [{"k": 0, "l": [1]}])
    with pytest.raises(SchemaError):
        db.write("t", [{"k": 1, "l2": nest(64)}])
    db = db.commit()  # the refused write left nothing behind to fail here
    assert db.get_records("t", [0, 1]) == {0: {"k": 0, "l": [1]}}
    assert db.describe_table("t")["schema"].names == ["k", "l"]


@pytest.mark.parametrize(
    "kind",
    [list_type(64), list_type(3000), map_type(32), list_type(62, map_type(1))],
    ids=["list64", "list3000", "map32", "list62-map"],
)
def test_declared_types_past_arrows_limit_are_refused(kind: pa.DataType) -> None:
    db = merkle.connect("memory://").create_db("d")
    schema = pa.schema([("k", pa.int64()), ("l", kind)])
    with pytest.raises(SchemaError, match=r"create_table\(schema=...\): field 'l' .*63 levels"):
        db.create_table("t", key="k", schema=schema)
    db = db.create_table("t", key="k")
    with pytest.raises(SchemaError, match=r"alter_schema: field 'l' .*63 levels"):
        db.alter_schema("t", add={"l": kind})
    with pytest.raises(SchemaError, match=r"alter_schema: field 'l' .*63 levels"):
        db.alter_schema("t", add=[pa.field("l", kind)])


def test_declared_types_at_arrows_limit_are_stored() -> None:
    schema = pa.schema([("k", pa.int64()), ("l", list_type(63)), ("m", map_type(31))])
    db = merkle.connect("memory://").create_db("d").create_table("t", key="k", schema=schema)
    deep_map: Any = 5
    for _ in range(31):
        deep_map = [("a", deep_map)]
    db = db.write("t", [{"k": 1, "l": nest(63), "m": deep_map}]).commit()
    record = db.get_records("t", [1])[1]
    assert record["l"] == nest(63)
    assert db.to_arrow("t").column("m").type == map_type(31)


def test_arrow_data_past_arrows_limit_is_refused() -> None:
    db = merkle.connect("memory://").create_db("d").create_table("t", key="k")
    for depth in (64, 600):
        data = pa.table({"k": [1, 2], "l": pa.array([nest(depth), None], type=list_type(depth))})
        with pytest.raises(SchemaError, match=r"the Arrow data: field 'l' .*63 levels"):
            db.write("t", data)
    data = pa.table({"k": [1], "l": pa.array([nest(63)], type=list_type(63))})
    db = db.write("t", data).commit()
    assert db.get_records("t", [1])[1]["l"] == nest(63)


# -- the count itself, against Arrow's IPC writer ------------------------------------------


class _Wrapped(pa.ExtensionType):
    def __init__(self, storage: pa.DataType) -> None:
        super().__init__(storage, "merkle.test.wrapped")

    def __arrow_ext_serialize__(self) -> bytes:
        return b""

    @classmethod
    def __arrow_ext_deserialize__(cls, storage: pa.DataType, serialized: bytes) -> _Wrapped:
        return cls(storage)


def _ipc_round_trips(kind: pa.DataType) -> bool:
    if isinstance(kind, pa.BaseExtensionType):
        array = pa.ExtensionArray.from_storage(kind, pa.nulls(1, kind.storage_type))
    else:
        array = pa.nulls(1, kind)
    table = pa.table({"x": array})
    sink = io.BytesIO()
    try:
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
        pa.ipc.open_stream(sink.getvalue()).read_all()
    except pa.ArrowInvalid:
        return False
    return True


@pytest.mark.parametrize(
    "wrap",
    [
        lambda k: k,
        pa.large_list,
        pa.list_view,
        lambda k: pa.list_(k, 1),
        lambda k: pa.struct([("a", k), ("b", pa.int8())]),
        lambda k: pa.map_(pa.string(), k),
        lambda k: pa.run_end_encoded(pa.int32(), k),
        _Wrapped,
    ],
    ids=["list", "large_list", "list_view", "fixed_size", "struct", "map", "run_end", "ext"],
)
def test_nesting_count_is_arrows(wrap: Any) -> None:
    from merkle.tablets.nesting import ARROW_MAX_NESTING, nesting_of

    for depth in range(58, 66):
        kind = wrap(list_type(depth))
        assert (nesting_of(kind) <= ARROW_MAX_NESTING) == _ipc_round_trips(kind), (wrap, depth)
    dictionary = list_type(63, pa.dictionary(pa.int8(), pa.string()))
    assert nesting_of(dictionary) == 63
    assert _ipc_round_trips(dictionary)


@pytest.mark.parametrize("free", ["table", "field"])
def test_arrow_data_nests_deeper_into_a_schema_free_field(free: str) -> None:
    """Arrow data into a schema-free field is stored as CBOR: Arrow's 63 levels do not
    bind it (a regression probe found it refused since the nesting limits), only the
    depth its values can pass through Python at."""
    if free == "table":
        options: dict[str, Any] = {"schema_free": True}
    else:
        options = {"schema": pa.schema([pa.field("k", pa.int64()), merkle.free_field("l")])}
    db = merkle.connect("memory://").create_db("d").create_table("t", key="k", **options)
    for depth in (64, FREE_ARROW_MAX_NESTING):
        data = pa.table({"k": [depth], "l": pa.array([nest(depth)], type=list_type(depth))})
        db = db.write("t", data)
    db = db.commit()
    assert db.get_records("t", [64])[64]["l"] == nest(64)
    assert db.get_records("t", [200])[200]["l"] == nest(FREE_ARROW_MAX_NESTING)
    deeper = FREE_ARROW_MAX_NESTING + 1
    data = pa.table({"k": [1], "l": pa.array([nest(deeper)], type=list_type(deeper))})
    with pytest.raises(SchemaError, match=r"schema-free field 'l' .* more than 200 levels"):
        db.write("t", data)
