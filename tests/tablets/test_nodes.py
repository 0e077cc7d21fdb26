"""Index nodes read from blocks build their children only when asked, and a node decoded
with its links deferred makes each link only then: the lazy node must answer every
question exactly as the node it was written from, and a damaged one must be refused as
the eager decoding refuses it."""

from __future__ import annotations

from typing import Any

import cbor2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from merkle.blocks.cid import CID
from merkle.blocks.codec import decode_node, decode_node_deferred, encode_node
from merkle.errors import IntegrityError
from merkle.tablets.nodes import ChildRef, IndexNode


@st.composite
def index_nodes(draw: st.DrawFn) -> IndexNode:
    n = draw(st.integers(1, 40))
    firsts = sorted(draw(st.sets(st.binary(min_size=1, max_size=6), min_size=n, max_size=n)))
    height = draw(st.integers(1, 4))
    children = tuple(
        ChildRef(
            CID.of(first),
            height - 1,
            draw(st.integers(0, 10**9)),
            draw(st.integers(0, 10**12)),
            first,
            first + draw(st.binary(max_size=3)),
        )
        for first in firsts
    )
    return IndexNode(height, children)


@settings(max_examples=60, deadline=None)
@given(node=index_nodes(), data=st.data(), deferred=st.booleans())
def test_index_node_read_from_a_block_answers_like_the_node_written(
    node: IndexNode, data: st.DataObject, deferred: bool
) -> None:
    block = encode_node(node.to_node())
    read = (
        IndexNode.from_deferred(decode_node_deferred(block), "test")
        if deferred
        else IndexNode.from_node(decode_node(block), "test")
    )
    # Asked in a drawn order, so a child made alone or among all is checked both ways.
    i = data.draw(st.integers(0, len(node.children) - 1))
    assert read.child(i) == node.children[i]
    assert read.keys == node.keys
    assert len(read) == len(node.children)
    assert read.count == sum(child.count for child in node.children)
    assert read.size == sum(child.size for child in node.children)
    assert read.counts() == [child.count for child in node.children]
    assert read.first_key == node.children[0].first_key
    assert read.last_key == node.children[-1].last_key
    assert read.height == node.height
    assert read.children == node.children
    assert read.child(i) == node.children[i]
    assert read == node
    assert hash(read) == hash(node)
    assert read.to_node() == node.to_node()


def _node(**changes: Any) -> dict[str, Any]:
    children = tuple(ChildRef(CID.of(k), 0, 1, 1, k, k) for k in (b"a", b"b", b"c"))
    return {**IndexNode(1, children).to_node(), **changes}


def _tags(value: Any) -> Any:
    """``value`` with CIDs as the tags that hold them, for cbor2 to encode as they are."""
    if isinstance(value, CID):
        return cbor2.CBORTag(42, b"\x00" + value.bytes)
    if isinstance(value, dict):
        return {key: _tags(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_tags(item) for item in value]
    return value


def _block(node: dict[str, Any]) -> bytes:
    return cbor2.dumps(_tags(node), canonical=True)


def _deferred(node: dict[str, Any]) -> IndexNode:
    return IndexNode.from_deferred(decode_node_deferred(_block(node)), "t")


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        # a link whose tag is not 42, where a link belongs: refused when that child is read
        ({"children": [cbor2.CBORTag(43, b"\x00" + CID.of(b"a").bytes)] * 3}, "only tag 42"),
        # a tag-42 value that is no CID
        ({"children": [cbor2.CBORTag(42, b"\x00\x01")] * 3}, "tag-42 link"),
        # a tag where a count belongs
        ({"counts": [cbor2.CBORTag(42, b"\x00" + CID.of(b"a").bytes), 1, 1]}, "integer"),
    ],
)
def test_a_damaged_deferred_index_node_is_refused(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(IntegrityError, match=message):
        _deferred(_node(**changes)).child(1)


def test_a_tag_outside_the_fields_of_an_index_node_is_refused_as_decode_node_refuses_it() -> None:
    """A node with a field the deferred reading does not check is resolved whole first."""
    node = _node(extra=cbor2.CBORTag(99, 1))
    with pytest.raises(IntegrityError, match="only tag 42"):
        decode_node(_block(node))
    with pytest.raises(IntegrityError, match="only tag 42"):
        _deferred(node)
