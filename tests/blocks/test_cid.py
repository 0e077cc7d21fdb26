"""CIDs: our hand-built bytes and strings equal what the ``multiformats`` package makes."""

from __future__ import annotations

import base64
import pickle

import multiformats
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from multiformats import multihash

from merkle.blocks import BLAKE3, CID, DAG_CBOR, RAW, SHA2_256
from merkle.blocks.cid import _base32_decode, _base32_encode, _parse
from merkle.errors import IntegrityError, UsageError

CODECS = {"raw": RAW, "dag-cbor": DAG_CBOR}
HASHES = {"blake3": BLAKE3, "sha2-256": SHA2_256}


@settings(deadline=None)  # no timing thresholds on a shared machine
@given(
    data=st.binary(max_size=4096),
    codec=st.sampled_from(sorted(CODECS)),
    hash_name=st.sampled_from(sorted(HASHES)),
)
def test_cid_bytes_and_string_equal_the_multiformats_reference(
    data: bytes, codec: str, hash_name: str
) -> None:
    cid = CID.of(data, codec, hash_name)
    digest = multihash.digest(data, hash_name, size=32)
    reference = multiformats.CID("base32", 1, codec, digest)
    assert cid.bytes == bytes(reference)
    assert str(cid) == str(reference)
    assert cid.version == 1
    assert cid.codec == CODECS[codec]
    assert cid.hash_code == HASHES[hash_name]
    assert cid.digest == bytes(multihash.unwrap(digest))
    assert CID.parse(str(cid)) == cid
    assert CID.from_bytes(cid.bytes) == cid
    cid.verify(data)


def test_codes_pass_through_and_names_match() -> None:
    assert CID.of(b"x", DAG_CBOR, BLAKE3) == CID.of(b"x", "dag-cbor", "blake3")
    assert str(CID.of(b"x")).startswith("bafyr4i")  # dag-cbor, BLAKE3 by default


@pytest.mark.parametrize(
    "text",
    [
        "QmQg1v4o9xdT3Q14wh4S7dxZkDjyZ9ssFzFzyep1YrVJBY",
        "QmRgutAxd8t7oGkSm4wmeuByG6M51wcTso6cubDdQtuEfL",
        "QmXg9Pp2ytZ14xgmQjYEiHjVjMFXzCVVEcRTWJBmLgR39V",
    ],
)
def test_cidv0_strings_parse(text: str) -> None:
    cid = CID.parse(text)
    assert cid.version == 0
    assert cid.codec == 0x70  # dag-pb
    assert cid.hash_code == SHA2_256
    assert str(cid) == text
    assert cid.bytes == bytes(multiformats.CID.decode(text))


def test_other_multibase_strings_parse() -> None:
    cid = CID.of(b"hello", "raw", "sha2-256")
    base58 = multiformats.CID.decode(str(cid)).encode("base58btc")
    assert CID.parse(base58) == cid


def test_cid_is_ordered_hashable_and_pickles_as_bytes() -> None:
    a, b = CID.of(b"a"), CID.of(b"b")
    assert sorted([a, b]) == sorted([b, a])
    assert len({a, CID(a.bytes)}) == 1
    assert pickle.loads(pickle.dumps(a)) == a
    assert CID.parse(a) is a


def test_verify_detects_other_bytes() -> None:
    cid = CID.of(b"payload", "raw")
    with pytest.raises(IntegrityError, match=str(cid)):
        cid.verify(b"payloaD")


@pytest.mark.parametrize("bad", ["", "not a cid", "bafy", "Qm123", 42, None, b"bafy"])
def test_unparseable_cid_strings_are_usage_errors(bad: object) -> None:
    with pytest.raises(UsageError):
        CID.parse(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [b"", b"\x02\x71\x1e\x20", b"\x01\x71\x1e\x20" + b"\x00" * 31])
def test_malformed_cid_bytes_are_usage_errors(bad: bytes) -> None:
    with pytest.raises(UsageError, match="malformed CID bytes"):
        CID.from_bytes(bad)


@pytest.mark.parametrize(
    ("codec", "hash_name"), [("dag-json", "blake3"), ("raw", "md5"), (0x99, 0x1E)]
)
def test_unknown_codec_or_hash_is_a_usage_error(codec: object, hash_name: object) -> None:
    with pytest.raises(UsageError, match="unknown"):
        CID.of(b"x", codec, hash_name)  # type: ignore[arg-type]


@pytest.mark.parametrize("data", ["text", 5, None, [1]])
def test_cid_of_non_bytes_is_a_usage_error(data: object) -> None:
    with pytest.raises(UsageError, match="bytes"):
        CID.of(data)  # type: ignore[arg-type]


@settings(deadline=None)  # no timing thresholds on a shared machine
@given(st.binary(max_size=80))
def test_base32_matches_the_standard_library(raw: bytes) -> None:
    text = base64.b32encode(raw).decode("ascii").lower().rstrip("=")
    assert _base32_encode(raw) == text
    assert _base32_decode(text) == raw


@pytest.mark.parametrize("text", ["A", "1", "a", "aaa", "ab", "bafy!"])
def test_base32_decoding_refuses_what_is_not_canonical_base32(text: str) -> None:
    with pytest.raises(ValueError, match="base32"):
        _base32_decode(text)


@given(
    codec=st.integers(min_value=0, max_value=2**21),
    code=st.sampled_from([BLAKE3, SHA2_256, 0x1E + 0x80 * 3]),
    digest=st.binary(min_size=1, max_size=40),
)
def test_codec_and_hash_code_read_in_place_agree_with_a_full_parse(
    codec: int, code: int, digest: bytes
) -> None:
    from multiformats import varint

    raw = b"\x01" + varint.encode(codec) + varint.encode(code) + varint.encode(len(digest)) + digest
    cid = CID.from_bytes(raw)
    assert (cid.codec, cid.hash_code, cid.digest) == _parse(raw)[1:]
    assert (cid.codec, cid.hash_code) == (codec, code)


def test_codec_and_hash_code_of_a_cidv0() -> None:
    cid = CID.parse("QmbWqxBEKC3P8tqsKc98xmWNzrzDtRLMiMPL8wBuTGsMnR")
    assert (cid.version, cid.codec, cid.hash_code) == (0, 0x70, SHA2_256)
