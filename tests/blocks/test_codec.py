"""The DAG-CBOR codec: deterministic bytes, round trips, links, strictness, bad input."""

from __future__ import annotations

import datetime
import decimal
import enum
import math
import random
import re
import struct
import uuid
from collections import OrderedDict
from typing import Any

import cbor2
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from merkle.blocks import CID, check_node, decode_node, encode_node, iter_links, links_of
from merkle.blocks.codec import NODE_VERSION
from merkle.errors import IntegrityError, UsageError

from .strategies import cids, dag_values, int64s


def stable_id(value: Any) -> str:
    """repr without memory addresses: test IDs must be equal in every process (xdist)."""
    return re.sub(r" at 0x[0-9a-f]+", "", repr(value))


def reference_encoding(value: Any) -> bytes:
    """cbor2's canonical mode with 64-bit floats and tag-42 links: right for plain types."""

    def encode_float(encoder: cbor2.CBOREncoder, number: float) -> None:
        encoder.write(struct.pack(">Bd", 0xFB, number))

    def encode_link(encoder: cbor2.CBOREncoder, cid: CID) -> None:
        encoder.encode_semantic(42, b"\x00" + cid.bytes)

    return cbor2.dumps(value, canonical=True, encoders={float: encode_float}, default=encode_link)


@settings(deadline=None)  # no timing thresholds on a shared machine
@given(dag_values)
def test_round_trip_of_any_dag_cbor_value(value: Any) -> None:
    data = encode_node(value)
    decoded = decode_node(data, strict=True)
    assert decoded == value
    assert encode_node(decoded) == data


@settings(deadline=None)  # no timing thresholds on a shared machine
@given(dag_values)
def test_bytes_equal_the_cbor2_canonical_reference(value: Any) -> None:
    assert encode_node(value) == reference_encoding(value)


def reinserted(value: Any, rng: random.Random) -> Any:
    """The same value with every dict rebuilt in a shuffled insertion order."""
    if isinstance(value, dict):
        keys = list(value)
        rng.shuffle(keys)
        return {key: reinserted(value[key], rng) for key in keys}
    if isinstance(value, list):
        return [reinserted(item, rng) for item in value]
    return value


@settings(deadline=None)  # no timing thresholds on a shared machine
@given(
    st.recursive(
        st.dictionaries(st.text(max_size=6), int64s | st.text(max_size=4), max_size=8),
        lambda children: st.dictionaries(st.text(max_size=6), children, max_size=6),
        max_leaves=30,
    ),
    st.randoms(use_true_random=False),
)
def test_insertion_order_does_not_change_bytes_or_cid(
    node: dict[str, Any], rng: random.Random
) -> None:
    shuffled = reinserted(node, rng)
    assert encode_node(shuffled) == encode_node(node)
    assert CID.of(encode_node(shuffled)) == CID.of(encode_node(node))


def test_map_keys_sort_length_first_then_bytewise() -> None:
    data = encode_node({"bb": 1, "a": 2, "c": 3, "aaa": 4, "é": 5})
    assert list(cbor2.loads(data)) == ["a", "c", "bb", "é", "aaa"]


def test_floats_are_always_64_bit_and_ints_shortest() -> None:
    assert encode_node(1.0) == bytes.fromhex("fb3ff0000000000000")
    assert encode_node(0.5) == bytes.fromhex("fb3fe0000000000000")
    assert encode_node(23) == bytes.fromhex("17")
    assert encode_node(24) == bytes.fromhex("1818")
    assert encode_node(-(1 << 64)) == bytes.fromhex("3bffffffffffffffff")
    assert encode_node((1 << 64) - 1) == bytes.fromhex("1bffffffffffffffff")


def test_links_are_tag_42_with_a_zero_prefix() -> None:
    cid = CID.of(b"child", "raw")
    data = encode_node({"link": cid})
    assert data.endswith(b"\xd8\x2a\x58\x25\x00" + cid.bytes)
    assert decode_node(data) == {"link": cid}


def test_cidv0_links_round_trip() -> None:
    cid = CID.parse("QmQg1v4o9xdT3Q14wh4S7dxZkDjyZ9ssFzFzyep1YrVJBY")
    assert decode_node(encode_node([cid]), strict=True) == [cid]


class Color(enum.IntEnum):
    RED = 1


class Ratio(float):
    pass


class Name(str):
    pass


@pytest.mark.parametrize(
    ("value", "plain"),
    [
        (Color.RED, 1),
        (Ratio(1.5), 1.5),
        (np.float64(0.25), 0.25),
        (Name("x"), "x"),
        ({Name("k"): 1}, {"k": 1}),
        (OrderedDict([("b", 1), ("a", 2)]), {"a": 2, "b": 1}),
        (bytearray(b"ab"), b"ab"),
        (memoryview(b"ab"), b"ab"),
        ((1, (2, 3)), [1, [2, 3]]),
    ],
    ids=stable_id,
)
def test_subclasses_encode_as_their_base_type(value: Any, plain: Any) -> None:
    assert encode_node(value) == encode_node(plain)


@settings(deadline=None)  # no timing thresholds on a shared machine
@given(cids, cids)
def test_iter_links_and_links_of_find_links_in_lists_and_maps(a: CID, b: CID) -> None:
    node = {"x": [1, {"deep": a}], "y": b, "z": "not a link"}
    assert list(iter_links(node)) == [a, b]
    data = encode_node(node)
    assert links_of(CID.of(data, "dag-cbor"), data) == [a, b]
    assert links_of(CID.of(data, "raw"), data) == []


def test_links_of_refuses_codecs_it_cannot_walk() -> None:
    dag_pb = CID.parse("QmQg1v4o9xdT3Q14wh4S7dxZkDjyZ9ssFzFzyep1YrVJBY")
    with pytest.raises(IntegrityError, match="cannot walk"):
        links_of(dag_pb, b"")


def test_check_node_accepts_its_type_and_version() -> None:
    node = {"type": "merkle/table", "v": NODE_VERSION}
    assert check_node(node, "merkle/table") is node


@pytest.mark.parametrize(
    ("node", "message"),
    [
        ([], "not a map"),
        ({"type": "merkle/index", "v": 1}, "expected 'merkle/table'"),
        ({"type": "merkle/table", "v": 2}, "upgrade merkle-db"),
        ({"type": "merkle/table"}, "malformed: its format version is None"),
    ],
)
def test_check_node_rejects_other_types_and_versions(node: Any, message: str) -> None:
    with pytest.raises(IntegrityError, match=message):
        check_node(node, "merkle/table", where="root")


# -- bad input -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (math.nan, "NaN and infinity"),
        (math.inf, "NaN and infinity"),
        ([-math.inf], "NaN and infinity"),
        (np.float64("nan"), "NaN and infinity"),
        ({1: "a"}, "map keys must be strings"),
        ({b"k": "a"}, "map keys must be strings"),
        (OrderedDict([(1, "a")]), "map keys must be strings"),
        ({"a": {None: 1}}, "map keys must be strings"),
        (1 << 64, "64 bits"),
        (-(1 << 64) - 1, "64 bits"),
        ([Color.RED, 1 << 70], "64 bits"),
        (datetime.datetime(2024, 1, 1), "type datetime"),
        (datetime.date(2024, 1, 1), "type date"),
        (decimal.Decimal("1.5"), "type Decimal"),
        (uuid.UUID(int=0), "type UUID"),
        ({1, 2}, "type set"),
        (object(), "type object"),
        (np.int64(3), "type int64"),
        ("\ud800", "lone surrogate"),
    ],
    ids=stable_id,
)
def test_values_dag_cbor_cannot_hold_are_usage_errors(value: Any, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        encode_node(value)


def test_a_list_that_holds_itself_is_a_usage_error() -> None:
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(UsageError, match="nested too deeply"):
        encode_node(loop)


@pytest.mark.parametrize(
    ("hex_data", "message"),
    [
        ("d82b4100", "only tag 42"),  # tag 43
        ("c11a514b67b0", "only tag 42"),  # tag 1 (epoch time), which cbor2 decodes itself
        ("c249010000000000000000", "only tag 42"),  # tag 2: a bignum, 2**64
        ("d9d9f7a0", "only tag 42"),  # tag 55799: the self-described CBOR marker
        ("d82a4101", "starting with 0x00"),  # link without the 0x00 prefix
        ("d82a6161", "starting with 0x00"),  # link holding a string
        ("d82a40", "starting with 0x00"),  # empty link
        ("d82a4100", "malformed CID"),  # link to empty CID bytes
        ("d82a450001020304", "malformed CID"),  # truncated digest
        ("d82a430002711e", "malformed CID"),  # CID version 2
        ("9f01ff", "indefinite"),  # indefinite-length array
        ("a2616101616102", "map key"),  # duplicate key
        ("", "malformed"),  # nothing
        ("82", "malformed"),  # truncated array
        ("1c", "malformed"),  # reserved additional information
        ("0102", "follow its one data item"),  # two data items
        ("a000", "follow its one data item"),  # a trailing zero byte
    ],
)
def test_malformed_blocks_are_integrity_errors(hex_data: str, message: str) -> None:
    with pytest.raises(IntegrityError, match=message):
        decode_node(bytes.fromhex(hex_data))


@pytest.mark.slow
def test_every_tag_but_42_is_refused() -> None:
    """Probe every tag below 70000 (and some huge ones) with values cbor2 might decode itself."""
    payloads = [1, b"\x00" * 8, "2024-01-01T00:00:00Z", [1, 2], {"a": 1}]
    tags = [*range(70000), 1 << 32, (1 << 64) - 1]
    accepted = []
    for tag in tags:
        if tag == 42:
            continue
        for payload in payloads:
            try:
                decode_node(cbor2.dumps(cbor2.CBORTag(tag, payload)))
            except IntegrityError:
                continue
            accepted.append((tag, payload))
    assert accepted == []


@pytest.mark.parametrize(
    "hex_data",
    [
        "a2616201616102",  # keys out of order: {"b": 1, "a": 2}
        "1817",  # 23 encoded in two bytes
        "fa3fc00000",  # 1.5 as a 32-bit float
        "f93e00",  # 1.5 as a 16-bit float
        "a10102",  # integer map key
        "f7",  # undefined
    ],
)
def test_strict_decoding_refuses_non_canonical_bytes(hex_data: str) -> None:
    with pytest.raises(IntegrityError):
        decode_node(bytes.fromhex(hex_data), strict=True)


def test_decode_of_non_bytes_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="wants bytes"):
        decode_node("a0")  # type: ignore[arg-type]
