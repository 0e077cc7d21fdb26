"""Every decoder of stored bytes, fed arbitrary and damaged input: an error of ours or a value.

A lake is read by many decoders: DAG-CBOR blocks, CIDs, the typed nodes of
tables (table root, index, tablet, batch) and databases, Arrow segments, key
codecs, journal entries and hints, leases, GC locks, tags, the GC policy and
reports, the lake's config, CAR files to import. Whatever bytes a damaged disk, a bad copy or a
hostile writer leaves, each must return a value or raise a ``merkle.errors``
error, never another exception, a hang or a crash. (Whether the value is
*right* is for the hash checks: a block read by CID is verified first; these
tests are about what gets past them, or has no hash at all.)

Inputs: arbitrary bytes; valid objects from a real lake (``samples.py``)
with bytes flipped, cut, inserted or duplicated; and valid decoded nodes
with fields replaced, removed or added. ``test_a_damaged_block_reached_from_a_version``
goes end to end: a damaged node or segment re-stored under its own CID and
linked from a new database version, which is then read every way there is.

Examples per test: 100 by default; ``MERKLE_FUZZ_EXAMPLES=20000`` for a long
run (see doc/reliability.md).
"""

from __future__ import annotations

import io
import os
import pickle
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from merkle.blocks.cid import CID, DAG_CBOR, RAW
from merkle.blocks.codec import decode_node, encode_node, iter_links
from merkle.db.connection import Connection
from merkle.db.dbroot import DbRoot
from merkle.db.lakeconfig import CONFIG_KEY
from merkle.errors import MerkleError, UsageError
from merkle.gc.policy import POLICY_KEY, Policy, load_policy
from merkle.gc.report import REPORT_PREFIX, load_reports
from merkle.refs import RefManager, gclock, leases, tags
from merkle.refs.entry import decode_slot, head_key, trimmed_key
from merkle.storage import open_store
from merkle.tablets.keys import infer_key_codec_arrow, key_codec
from merkle.tablets.nodes import BatchNode, IndexNode, TableRoot, TabletNode
from merkle.tablets.segment import arrow_to_records, decode_segment
from merkle.transfer.car import read_car

from .samples import DB, Sample, read_everything, relink, sample_lake

_SAMPLE: list[Sample] = []


def sample() -> Sample:
    """One sample lake for the module (built on first use; tests copy what they change)."""
    if not _SAMPLE:
        _SAMPLE.append(sample_lake())
    return _SAMPLE[0]


def refused_or_value(decode: Callable[..., Any], *args: Any) -> Any:
    """``decode(*args)``, or None if it raised a merkle error; anything else propagates."""
    try:
        return decode(*args)
    except MerkleError:
        return None


# -- strategies ----------------------------------------------------------------------------

_CIDS = st.builds(
    lambda data, codec: CID.of(data, codec), st.binary(max_size=8), st.sampled_from([DAG_CBOR, RAW])
)

#: Values decode_node can produce (and a few that only a damaged decoder could).
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.sampled_from([-1, 0, 2**31, 2**63 - 1, 2**64, -(2**64), 10**30]),
    st.floats(),
    st.text(max_size=12),
    st.binary(max_size=12),
    st.sampled_from([b"\x00" * 8, b"\xff" * 8]),
    _CIDS,
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


@st.composite
def damaged_bytes(draw: st.DrawFn, valid: list[bytes]) -> bytes:
    """Arbitrary bytes, or a valid encoding with a few bytes flipped, cut, inserted or repeated."""
    if not valid or draw(st.integers(0, 4)) == 0:
        return draw(st.binary(max_size=200))
    data = bytearray(draw(st.sampled_from(valid)))
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, len(data)))
        kind = draw(st.sampled_from(["flip", "set", "cut", "insert", "repeat", "truncate"]))
        if kind == "flip" and at < len(data):
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif kind == "set" and at < len(data):
            data[at] = draw(st.sampled_from([0x00, 0x17, 0x18, 0x1B, 0x1F, 0x7F, 0x9F, 0xBF, 0xFF]))
        elif kind == "cut":
            del data[at : at + draw(st.integers(1, 16))]
        elif kind == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=9))
        elif kind == "repeat":
            data[at:at] = data[at : at + draw(st.integers(1, 16))]
        else:
            del data[at:]
    return bytes(data)


def _paths(node: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path to a value inside a decoded node (map keys and list indexes)."""
    found = [path]
    if isinstance(node, dict):
        for key, value in node.items():
            found += _paths(value, (*path, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            found += _paths(value, (*path, i))
    return found


def _with(node: Any, path: tuple[Any, ...], value: Any) -> Any:
    """A copy of ``node`` with the value at ``path`` replaced (removed if ``_REMOVE``)."""
    if not path:
        return value
    copy = dict(node) if isinstance(node, dict) else list(node)
    inner = _with(copy[path[0]], path[1:], value)
    if inner is _REMOVE:
        del copy[path[0]]
    else:
        copy[path[0]] = inner
    return copy


_REMOVE = object()


@st.composite
def damaged_node(draw: st.DrawFn, valid: list[Any]) -> Any:
    """A valid decoded node with one to three values replaced, removed, or given a sibling."""
    node = draw(st.sampled_from(valid))
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(_paths(node)))
        kind = draw(st.sampled_from(["replace", "remove", "add"]))
        current = _get(node, path)
        if kind == "remove" and path:
            node = _with(node, path, _REMOVE)
        elif kind == "add" and isinstance(current, dict):
            node = _with(node, path, {**current, draw(st.text(max_size=8)): draw(values)})
        elif kind == "add" and isinstance(current, list):
            node = _with(node, path, [*current, draw(values)])
        else:
            node = _with(node, path, draw(values))
    return node


def _get(node: Any, path: tuple[Any, ...]) -> Any:
    for step in path:
        node = node[step]
    return node


def encodable(node: Any) -> bytes:
    """The DAG-CBOR of a damaged node (skips the example if DAG-CBOR cannot hold it)."""
    try:
        return encode_node(node)
    except UsageError:
        assume(False)
        raise


#: Examples per test: 100 in CI; MERKLE_FUZZ_EXAMPLES=20000 for a long run.
EXAMPLES = int(os.environ.get("MERKLE_FUZZ_EXAMPLES", "100"))
FUZZ = settings(
    deadline=None,
    max_examples=EXAMPLES,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
#: The end-to-end walk reads a whole database per example.
FUZZ_WALK = settings(FUZZ, max_examples=max(1, EXAMPLES * 3 // 5))


# -- blocks -------------------------------------------------------------------------------


def _all_blocks() -> list[bytes]:
    return list(sample().blocks.values())


def _node_blocks() -> list[bytes]:
    return [data for cid, data in sample().blocks.items() if cid.codec == DAG_CBOR]


@FUZZ
@given(st.data())
def test_decode_node_takes_any_bytes(data: st.DataObject) -> None:
    raw = data.draw(damaged_bytes(_node_blocks()))
    node = refused_or_value(decode_node, raw)
    if node is not None:
        list(iter_links(node))
    refused_or_value(lambda b: decode_node(b, strict=True), raw)


@FUZZ
@given(st.binary(max_size=80))
def test_cid_from_any_bytes(raw: bytes) -> None:
    cid = refused_or_value(CID.from_bytes, raw)
    if cid is not None:
        assert CID.parse(str(cid)) == cid


@FUZZ
@given(
    st.one_of(
        st.text(max_size=80),
        st.text("abcdefghijklmnopqrstuvwxyz234567", max_size=80).map("b".__add__),
    )
)
def test_cid_from_any_text(text: str) -> None:
    refused_or_value(CID.parse, text)


@FUZZ
@given(st.data())
def test_segments_from_any_bytes(data: st.DataObject) -> None:
    raw = data.draw(damaged_bytes(sample().raw_blocks()))
    table = refused_or_value(decode_segment, raw)
    if table is not None and table.num_columns:
        key_field = table.column_names[0]
        codec = refused_or_value(infer_key_codec_arrow, table.schema.field(key_field).type)
        if codec is not None:
            refused_or_value(lambda: arrow_to_records(table, key_field=key_field, codec=codec))


# -- typed nodes --------------------------------------------------------------------------

NODE_READERS: dict[str, Callable[[Any], Any]] = {
    "merkle/table": lambda node: TableRoot.from_node(node, "fuzzed"),
    # Every child made too: a lazy node must not defer a failure to its first use.
    "merkle/index": lambda node: IndexNode.from_node(node, "fuzzed").children,
    "merkle/tablet": lambda node: TabletNode.from_node(node, "fuzzed"),
    "merkle/batch": lambda node: BatchNode.from_node(node, "fuzzed"),
    "merkle/db": lambda node: DbRoot.from_node(node, "fuzzed"),
}


@pytest.mark.parametrize("node_type", sorted(NODE_READERS))
@FUZZ
@given(data=st.data())
def test_typed_nodes_from_damaged_nodes(node_type: str, data: st.DataObject) -> None:
    valid = [decode_node(raw) for raw in sample().nodes(node_type)]
    read = NODE_READERS[node_type]
    refused_or_value(read, data.draw(damaged_node(valid)))
    raw = data.draw(damaged_bytes(sample().nodes(node_type)))
    node = refused_or_value(decode_node, raw)
    if node is not None:
        refused_or_value(read, node)


KEY_SPECS = [
    "int",
    "float",
    "str",
    "bytes",
    "timestamp",
    "tuple(str,reverse(int))",
    "reverse(bytes)",
]


@FUZZ
@given(st.sampled_from(KEY_SPECS), st.data())
def test_key_codecs_decode_any_bytes(spec: str, data: st.DataObject) -> None:
    codec = key_codec(spec)
    valid = [codec.encode(v) for v in _key_samples(spec)]
    raw = data.draw(damaged_bytes(valid))
    value = refused_or_value(codec.decode, raw)
    if value is not None:
        refused_or_value(codec.encode, value)


def _key_samples(spec: str) -> list[Any]:
    import datetime

    return {
        "int": [0, -5, 2**62],
        "float": [0.0, -1.5, 1e300],
        "str": ["", "abc", "日本"],
        "bytes": [b"", b"\x00\xff"],
        "reverse(bytes)": [b"", b"\x00\xff"],
        "timestamp": [datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC)],
        "tuple(str,reverse(int))": [("a", 1), ("", -3)],
    }[spec]


@FUZZ
@given(st.text(max_size=40))
def test_key_codec_specs_from_any_text(spec: str) -> None:
    refused_or_value(key_codec, spec)


# -- the end to end walk --------------------------------------------------------------------


@FUZZ_WALK
@given(st.data())
def test_a_damaged_block_reached_from_a_version(data: st.DataObject) -> None:
    base = sample()
    lake = Sample(
        Connection(pickle.loads(pickle.dumps(base.conn.store)), workers=1),
        base.root,
        base.blocks,
        base.parent,
    )
    targets = sorted(cid for cid in base.blocks if cid != base.root)
    target = data.draw(st.sampled_from(targets))
    if target.codec == DAG_CBOR:
        damaged = encodable(data.draw(damaged_node([decode_node(base.blocks[target])])))
    else:
        damaged = data.draw(damaged_bytes([base.blocks[target]]))
    root = relink(lake, target, damaged)
    head = lake.conn.refs.head(DB)
    assert head is not None
    lake.conn.refs.commit(DB, head.version, str(root))
    try:
        db = lake.conn.open_db(DB)
        for _ in read_everything(db):
            pass
    except MerkleError:
        pass


# -- refs, leases, locks ------------------------------------------------------------------------


def _objects(kind: str) -> list[bytes]:
    return [raw for _, raw in sample().objects[kind]]


def damaged_objects(kind: str) -> st.SearchStrategy[bytes]:
    """Damaged bytes and damaged nodes of the sample's objects of ``kind`` (built lazily)."""

    def build() -> st.SearchStrategy[bytes]:
        valid = _objects(kind)
        nodes = [decode_node(raw) for raw in valid]
        return st.one_of(damaged_bytes(valid), damaged_node(nodes).map(encodable))

    return st.deferred(build)


#: Entry 1 of "shop", valid but for a time (microseconds) past datetime's range.
ENTRY_OUT_OF_RANGE = encode_node(
    {
        "type": "merkle/journal-entry",
        "v": 1,
        "db": DB,
        "version": 1,
        "root": None,
        "parent": 0,
        "time": 2**62,
        "author": None,
        "message": None,
        "meta": {},
        "forked_from": None,
    }
)


@FUZZ
@given(raw=damaged_objects("journal entry"))
@example(raw=ENTRY_OUT_OF_RANGE)
def test_journal_entries_from_damaged_bytes(raw: bytes) -> None:
    refused_or_value(decode_slot, raw, f"refs/{DB}/00000000000000000001", DB, 1)
    refused_or_value(decode_slot, raw, head_key(DB), DB, None)


MARKERS = st.one_of(st.binary(max_size=12), st.integers(-5, 10**20).map(lambda n: str(n).encode()))


@FUZZ
@given(hint=damaged_objects("journal entry"), marker=MARKERS)
@example(hint=ENTRY_OUT_OF_RANGE, marker=b"0")
def test_hints_and_markers_from_damaged_bytes(hint: bytes, marker: bytes) -> None:
    store = pickle.loads(pickle.dumps(sample().conn.store))
    store.put(head_key(DB), hint)
    store.put(trimmed_key(DB), marker)
    refs = RefManager(store)
    refused_or_value(refs.head, DB)
    refused_or_value(refs.history, DB)
    refused_or_value(refs.oldest_version, DB)


@FUZZ
@given(raw=damaged_objects("lease"), which=st.integers(0, 1))
def test_leases_from_damaged_bytes(raw: bytes, which: int) -> None:
    found = sample().objects["lease"]
    key = found[which % len(found)][0]
    refused_or_value(leases._decode, raw, key)


@FUZZ
@given(raw=damaged_objects("gc lock"))
def test_gc_locks_from_damaged_bytes(raw: bytes) -> None:
    key = sample().objects["gc lock"][0][0]
    refused_or_value(gclock._decode, raw, key, int(key.rsplit("/", 1)[1]))


@FUZZ
@given(raw=damaged_objects("tag"))
def test_tags_from_damaged_bytes(raw: bytes) -> None:
    key = sample().objects["tag"][0][0]
    refused_or_value(tags._decode, raw, key, DB, key.rsplit("/", 1)[1])


@FUZZ
@given(raw=st.deferred(lambda: damaged_bytes(_objects("car"))))
def test_car_files_from_damaged_bytes(raw: bytes) -> None:
    def read_all() -> None:
        _, blocks = read_car(io.BytesIO(raw), "fuzzed.car")
        for _ in blocks:
            pass

    refused_or_value(read_all)


# -- GC policy, reports, the lake config ------------------------------------------------------


def _store_with(key: str, raw: bytes) -> Any:
    store = open_store("memory://")
    store.put(key, raw)
    return store


@FUZZ
@given(raw=damaged_objects("policy"))
@example(raw=encode_node({"type": "merkle/gc-policy", "v": 1}))
def test_gc_policy_from_damaged_bytes(raw: bytes) -> None:
    node = refused_or_value(decode_node, raw)
    if node is not None:
        refused_or_value(Policy.from_node, node)
    refused_or_value(load_policy, _store_with(POLICY_KEY, raw))


@FUZZ
@given(st.data())
def test_gc_reports_from_damaged_bytes(data: st.DataObject) -> None:
    raw = data.draw(damaged_bytes(_objects("report")))
    refused_or_value(load_reports, _store_with(REPORT_PREFIX + "20240101T000000000000Z", raw))


@FUZZ
@given(st.data())
def test_lake_config_from_damaged_bytes(data: st.DataObject) -> None:
    raw = data.draw(damaged_bytes(_objects("lake config")))
    conn = refused_or_value(Connection, _store_with(CONFIG_KEY, raw))
    if conn is not None:
        conn.close()


def test_the_strategies_reach_every_node_type() -> None:
    """The fuzz tests above damage every kind of node the sample lake holds."""
    for node_type in NODE_READERS:
        assert sample().nodes(node_type), node_type
    assert sample().raw_blocks()
