"""Segments written before segments held storage types only: views and run-end encoding.

merkle-db before 2026-11-27 stored a string or binary view field, and a run-end
encoded one, as given (at any depth: ``list<string_view>``, a struct member, a
map's keys and items), where segments now hold the storage type
(``schema.storage_type``; doc/format.md, "Segments"). The current code read such
a table, but Arrow has no take kernel for those types: a delete of old rows
committed and then no scan, lookup or ``to_arrow`` of the head could fold it
("Function 'array_take' has no kernel matching input types (string_view,
int64)"), and once the rows were in tablets every write, delete, update,
compaction and ``alter_families`` failed so (a compatibility probe with the real
old code). A run-end encoded field did not even read.

The decoder gives such columns in their storage type (``segment.decode_segment``),
so every reader and writer sees old segments as new ones. The old writer is
rebuilt here with the current encoder: the segment bytes of the old code are the
same IPC stream, only with the columns in the declared type, which
:func:`_old_writer` casts them to before encoding, as the old ``conform`` did.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, nullcontext
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import merkle
from merkle.blocks import BlockStore
from merkle.gc.verify import verify
from merkle.storage import open_store
from merkle.tablets import pages as pages_module
from merkle.tablets import segment as segment_module
from merkle.tablets import store as store_module
from merkle.tablets.keys import key_codec
from merkle.tablets.nodes import BASE, TabletNode
from merkle.tablets.schema import storage_type
from merkle.tablets.segment import cbor_field, decode_segment, encode_segment

REE = pa.run_end_encoded(pa.int32(), pa.string())
STRUCT = pa.struct([("x", pa.string_view()), ("y", pa.int64())])

#: A declared type an old merkle-db stored as it is, three values of it, and a fourth.
KINDS: dict[str, tuple[pa.DataType, list[Any], Any]] = {
    "string_view": (pa.string_view(), ["a", "b", "c"], "z"),
    "binary_view": (pa.binary_view(), [b"a", b"b", b"c"], b"z"),
    "list_of_views": (pa.list_(pa.string_view()), [["a"], ["b", "c"], []], ["z", "y"]),
    "struct_member": (
        STRUCT,
        [{"x": "a", "y": 1}, {"x": "b", "y": 2}, {"x": "c", "y": 3}],
        {"x": "z", "y": 9},
    ),
    "map_of_views": (
        pa.map_(pa.string_view(), pa.binary_view()),
        [[("k", b"a")], [("k", b"b"), ("l", b"c")], []],
        [("z", b"z")],
    ),
    "run_ends": (REE, ["a", "a", "b"], "z"),
}

#: Where the old rows are: a pending batch, pages of version 2 tablets, pages and an
#: update patch holding the field, version 1 (unpaged) tablets.
LAYOUTS = ["pending", "pages", "patch", "version1"]


def _old_form(column: Any, kind: pa.DataType) -> Any:
    """``column`` (in its storage type) in the declared ``kind``, as the old code stored it."""
    if pa.types.is_run_end_encoded(kind):
        return pc.run_end_encode(column, run_end_type=kind.run_end_type)
    return column.cast(kind)


def _in_old_form(table: pa.Table, kinds: Mapping[str, pa.DataType]) -> pa.Table:
    fields, columns = [], []
    for field, column in zip(table.schema, table.columns, strict=True):
        kind = kinds.get(field.name)
        fields.append(field if kind is None else field.with_type(kind))
        columns.append(column if kind is None else _old_form(column, kind))
    return pa.Table.from_arrays(columns, schema=pa.schema(fields))


@contextmanager
def _old_writer(
    monkeypatch: pytest.MonkeyPatch, kinds: Mapping[str, pa.DataType]
) -> Iterator[None]:
    """Segments and pages encoded as the old code encoded them: the fields named in
    ``kinds`` in those (declared) types, not in their storage types."""
    real = segment_module.encode_segment

    def encode(table: pa.Table, *, compression: Any = segment_module.SEGMENT_CODEC) -> bytes:
        return real(_in_old_form(table, kinds), compression=compression)

    with monkeypatch.context() as patched:
        patched.setattr(store_module, "encode_segment", encode)
        patched.setattr(pages_module, "encode_segment", encode)
        yield


def _stored_types(uri: str, name: str) -> set[pa.DataType]:
    """The types of column ``name`` in every segment block of the lake at ``uri``, from
    the raw bytes (what is stored, not what a decoder gives)."""
    store = open_store(uri)
    found = set()
    for info in store.list("blocks/"):
        data = store.get(info.key)
        if data[:4] != b"\xff\xff\xff\xff":
            continue  # a node
        schema = pa.ipc.open_stream(data).schema
        if name in schema.names:
            found.add(schema.field(name).type)
    return found


def _rows(kind: str) -> list[dict[str, Any]]:
    _, values, _ = KINDS[kind]
    return [{"id": i + 1, "v": value, "n": 10 * (i + 1)} for i, value in enumerate(values)]


def _lake(kind: str, layout: str, monkeypatch: pytest.MonkeyPatch | None) -> str:
    """A lake holding table ``t`` (field ``v`` of ``kind``) with its rows where ``layout``
    says; written by the old writer when ``monkeypatch`` is given, else by this code."""
    declared, values, _ = KINDS[kind]
    schema = pa.schema([("id", pa.int64()), ("v", declared), ("n", pa.int64())])
    uri = f"memory://old-views-{uuid.uuid4().hex}"
    old = {"v": declared} if monkeypatch is not None else {}
    with merkle.connect(uri) as conn:
        db = conn.create_db("s").create_table("t", key="id", schema=schema)
        if layout == "version1":
            db = db.commit()
            ids = _version_1_tablets(uri, schema, _rows(kind), old)
            db.build_table("t", ids).commit()
            return uri
        with _old_writer(monkeypatch, old) if monkeypatch is not None else nullcontext():
            db = db.write("t", _rows(kind)).commit()
            if layout in ("pages", "patch"):
                db = db.compact("t").commit()
            if layout == "patch":
                db.update("t", {3: {"v": values[0]}}).commit()
    return uri


def _version_1_tablets(
    uri: str, schema: pa.Schema, rows: list[dict[str, Any]], old: Mapping[str, pa.DataType]
) -> list[str]:
    """One version 1 tablet (one segment for the base family, no pages), as merkle-db
    wrote them before pages: the fields in ``old`` in those types. ``build_table`` links
    it (it refused one holding views before: "field 'v' is string_view in the table,
    but a tablet stores it as string_view")."""
    stored = pa.schema([field.with_type(storage_type(field.type)) for field in schema])
    table = _in_old_form(pa.Table.from_pylist(rows, schema=stored), old)
    blocks = BlockStore(open_store(uri))
    data = encode_segment(table)
    segment = blocks.put(data, "raw")
    first, last = (key_codec("int").encode(rows[at]["id"]) for at in (0, -1))
    node = TabletNode(len(rows), len(data), first, last, {BASE: segment})
    return [str(blocks.put_node(node.to_node()))]


def _head(uri: str) -> dict[str, Any]:
    """Every read of the head of table ``t``, from a connection with cold caches."""
    with merkle.connect(uri) as conn:
        db = conn.open_db("s")
        arrow = db.to_arrow("t")
        return {
            "scan": list(db.scan("t")),
            "get_records": db.get_records("t", [1, 2, 3, 4]),
            "to_arrow": arrow.to_pylist(),
            "types": [field.type for field in arrow.schema],
            "fields": db.to_arrow("t", fields=["v"]).to_pylist(),
            "dataset": db.dataset("t").to_table(filter=pc.field("n") >= 20).to_pylist(),
            "verified": verify(conn, "s").ok,
        }


def _change(name: str, kind: str) -> Callable[[Any], Any]:
    new = KINDS[kind][2]
    return {
        "delete": lambda db: db.delete("t", [1]),
        "write": lambda db: db.write("t", [{"id": 4, "v": new, "n": 40}]),
        "write_over": lambda db: db.write("t", [{"id": 2, "v": new, "n": 21}]),
        "update": lambda db: db.update("t", {2: {"v": new}, 3: {"n": 31}}),
        "upsert": lambda db: db.upsert("t", [{"id": 3, "v": new, "n": 33}, {"id": 5, "n": 5}]),
        "delete_where": lambda db: db.delete_where("t", pc.field("n") == 20),
        "compact": lambda db: db.compact("t"),
        "alter_families": lambda db: db.alter_families("t", {"f": ["v"]}),
        "alter_schema": lambda db: db.alter_schema("t", add={"w": pa.int64()}),
    }[name]


CHANGES = [
    "delete",
    "write",
    "write_over",
    "update",
    "upsert",
    "delete_where",
    "compact",
    "alter_families",
    "alter_schema",
]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("kind", list(KINDS))
def test_old_segments_read_as_new_ones(
    kind: str, layout: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A table whose segments hold the declared view (or run-end encoded) type reads as
    the same table written by this code, in the declared type."""
    old = _lake(kind, layout, monkeypatch)
    assert _stored_types(old, "v") == {KINDS[kind][0]}  # the old form, really stored
    expected = _head(_lake(kind, layout, None))
    assert _head(old) == expected
    assert expected["types"][1] == KINDS[kind][0]
    assert expected["verified"]


@pytest.mark.parametrize("change", CHANGES)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("kind", list(KINDS))
def test_every_change_of_old_segments_lands_and_reads(
    kind: str, layout: str, change: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each change, committed over the old segments, lands, and the head then reads as
    the head of the same change to a table this code wrote (before: the fold and page
    rewrite took rows of the view column, which Arrow has no kernel for)."""
    heads = []
    for writer in (monkeypatch, None):
        uri = _lake(kind, layout, writer)
        with merkle.connect(uri) as conn:
            _change(change, kind)(conn.open_db("s")).commit()
        heads.append(_head(uri))
    assert heads[0] == heads[1]
    assert heads[0]["verified"]


def test_the_probe_case_a_delete_of_pending_string_views(monkeypatch: pytest.MonkeyPatch) -> None:
    """The probe's table: a string_view field in a pending batch, one delete."""
    uri = _lake("string_view", "pending", monkeypatch)
    with merkle.connect(uri) as conn:
        conn.open_db("s").delete("t", [1]).commit("delete 1")
    with merkle.connect(uri) as conn:
        db = conn.open_db("s")
        assert [(r["id"], r["v"]) for r in db.scan("t")] == [(2, "b"), (3, "c")]
        assert db.get_records("t", [2])[2]["v"] == "b"
        assert db.to_arrow("t").schema.field("v").type == pa.string_view()


def test_a_compaction_stores_old_segments_in_storage_types(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A rewrite of old rows writes them as this code writes any rows."""
    uri = _lake("list_of_views", "pages", monkeypatch)
    with merkle.connect(uri) as conn:
        conn.open_db("s").write("t", [{"id": 9, "v": ["q"], "n": 90}]).compact("t").commit()
        head = conn.open_db("s")
        blocks = [cid for ref in head._table("t").tablets() for cid in _family_blocks(head, ref)]
        kinds = {head._ts.segment(cid).schema.field("v").type for cid in blocks}
    assert kinds == {pa.list_(pa.string())}
    raw = {
        pa.ipc.open_stream(open_store(uri).get(BlockStore.key(cid))).schema.field("v").type
        for cid in blocks
    }
    assert raw == {pa.list_(pa.string())}


def _family_blocks(db: Any, ref: Any) -> list[Any]:
    tablet = db._ts.tablet(ref.cid)
    return [page.families[BASE] for page in tablet.pages]


# -- the decoder -------------------------------------------------------------------


def _old_segment() -> tuple[pa.Table, pa.Table]:
    """A segment table as the old code stored it (every kind, a CBOR column beside), and
    the same table in storage types."""
    columns: dict[str, Any] = {"id": pa.array([1, 2, 3], pa.int64())}
    for name, (kind, values, _) in KINDS.items():
        columns[name] = pa.array(values, storage_type(kind))
    columns["nulls"] = pa.array(["a", None, "c"], pa.string())
    plain = pa.table(columns)
    free = cbor_field("free")
    plain = plain.append_column(free, pa.array([b"\x01", b"\x02", b"\x03"], pa.binary()))
    kinds = {name: kind for name, (kind, _, _) in KINDS.items()}
    kinds["nulls"] = pa.string_view()
    return _in_old_form(plain, kinds), plain


def test_the_decoder_gives_old_columns_in_storage_types() -> None:
    """Views and run-end encoding at any depth come out in the storage type with the
    same values; names, nullability and field metadata (a CBOR column) are kept."""
    old, plain = _old_segment()
    decoded = decode_segment(encode_segment(old))
    assert decoded.schema.equals(plain.schema, check_metadata=True)
    assert decoded.equals(plain)
    decoded.validate(full=True)
    # A segment already in storage types decodes as it is.
    assert decode_segment(encode_segment(plain)).equals(plain)


def test_a_projected_decode_of_an_old_segment_gives_storage_types() -> None:
    old, plain = _old_segment()
    data = encode_segment(old)
    wanted = ["id", "list_of_views", "run_ends", "free"]
    assert decode_segment(data, wanted).equals(plain.select(wanted))
    assert decode_segment(data, ["string_view"]).equals(plain.select(["string_view"]))
    nothing = decode_segment(data, [])
    assert nothing.num_rows == 3
    assert nothing.num_columns == 0


def test_map_keys_stay_not_null_when_an_old_map_is_decoded() -> None:
    old, _ = _old_segment()
    decoded = decode_segment(encode_segment(old), ["map_of_views"])
    kind = decoded.schema.field("map_of_views").type
    assert kind == pa.map_(pa.string(), pa.binary())
    assert not kind.key_field.nullable
