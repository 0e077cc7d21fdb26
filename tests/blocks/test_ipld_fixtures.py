"""The IPLD DAG-CBOR codec fixtures: our codec must agree byte for byte with IPLD's.

The fixtures are vendored in ``tests/blocks/ipld-fixtures`` (a copy of
``shared/ipld-fixtures``, MIT / Apache-2.0 as their licence files say), so
every checkout and CI run checks them. Each
positive fixture is a directory holding ``<cid>.dag-cbor``: it must decode
strictly, re-encode to the same bytes, and hash (SHA2-256) to its file name.
Each negative fixture is bytes that every DAG-CBOR decoder must refuse.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from merkle.blocks import CID, decode_node, encode_node
from merkle.errors import IntegrityError

FIXTURES = Path(__file__).resolve().parent / "ipld-fixtures"
POSITIVE = sorted((FIXTURES / "dag-cbor").glob("*/*.dag-cbor"))
NEGATIVE = [
    pytest.param(bytes.fromhex(case["hex"]), id=f"{path.stem}: {case['name']}")
    for path in sorted((FIXTURES / "negative-dag-cbor" / "decode").glob("*.json"))
    for case in json.loads(path.read_text())
]


def test_fixture_directories_are_found() -> None:
    assert len(POSITIVE) > 100
    assert NEGATIVE


@pytest.mark.parametrize("path", POSITIVE, ids=[path.parent.name for path in POSITIVE])
def test_fixture_decodes_and_reencodes_to_the_same_bytes_and_cid(path: Path) -> None:
    data = path.read_bytes()
    node = decode_node(data, strict=True)
    assert encode_node(node) == data
    assert str(CID.of(data, "dag-cbor", "sha2-256")) == path.name.removesuffix(".dag-cbor")


@pytest.mark.parametrize("data", NEGATIVE)
def test_negative_fixture_fails_to_decode(data: bytes) -> None:
    with pytest.raises(IntegrityError):
        decode_node(data)
    with pytest.raises(IntegrityError):
        decode_node(data, strict=True)
