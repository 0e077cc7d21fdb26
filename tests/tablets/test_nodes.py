"""Index nodes read from blocks build their children only when asked: the lazy node must
answer every question exactly as the node it was written from."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from merkle.blocks.cid import CID
from merkle.blocks.codec import decode_node, encode_node
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
@given(node=index_nodes(), data=st.data())
def test_index_node_read_from_a_block_answers_like_the_node_written(
    node: IndexNode, data: st.DataObject
) -> None:
    read = IndexNode.from_node(decode_node(encode_node(node.to_node())), "test")
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
