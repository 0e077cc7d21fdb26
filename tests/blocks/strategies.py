"""Hypothesis strategies for DAG-CBOR values and CIDs, shared by the block tests."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from merkle.blocks import CID

__all__ = ["cids", "dag_values", "int64s", "scalars"]

#: Every integer DAG-CBOR can hold: -2**64 .. 2**64-1.
int64s = st.integers(min_value=-(1 << 64), max_value=(1 << 64) - 1)

cids: st.SearchStrategy[CID] = st.builds(
    CID.of,
    st.binary(max_size=64),
    st.sampled_from(["raw", "dag-cbor"]),
    st.sampled_from(["blake3", "sha2-256"]),
)

scalars: st.SearchStrategy[Any] = st.one_of(
    st.none(),
    st.booleans(),
    int64s,
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(),
    st.binary(),
    cids,
)


def _containers(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.lists(children, max_size=6),
        st.dictionaries(st.text(max_size=8), children, max_size=6),
    )


#: Any value a node can hold, nested, with links inside lists and maps.
dag_values: st.SearchStrategy[Any] = st.recursive(scalars, _containers, max_leaves=40)
