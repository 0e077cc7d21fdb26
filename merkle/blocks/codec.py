"""The DAG-CBOR node codec: deterministic bytes, links as CBOR tag 42.

Equal content must give equal bytes (and so equal CIDs): that is what makes
structural sharing and deduplication work. The rules are DAG-CBOR's: map keys
are strings sorted length-first then bytewise, integers and lengths in their
shortest form, floats always 64-bit, no NaN or infinity, no indefinite
lengths, and the only tag is 42 (a link: ``0x00`` + CID bytes).

cbor2's ``canonical`` mode gives that key order and shortest integers but
shrinks floats to 16 or 32 bits, which DAG-CBOR forbids; a float encoder
override keeps them 64-bit, so no Python-side walk of the node is needed.
"""

from __future__ import annotations

import datetime
import decimal
import fractions
import math
import re
import struct
import uuid
from collections.abc import Iterator
from typing import Any

import cbor2

from merkle.blocks.cid import CID, DAG_CBOR, RAW
from merkle.errors import IntegrityError, UsageError

__all__ = [
    "NODE_VERSION",
    "check_node",
    "decode_node",
    "encode_node",
    "iter_links",
    "links_of",
]

#: Format version written in every node's ``v`` field.
NODE_VERSION = 1

_LINK_TAG = 42
_PACK_DOUBLE = struct.Struct(">Bd").pack


def _encode_float(encoder: cbor2.CBOREncoder, value: float) -> None:
    if math.isnan(value) or math.isinf(value):
        raise UsageError(f"DAG-CBOR cannot store {value!r}: NaN and infinity are not allowed")
    encoder.write(_PACK_DOUBLE(0xFB, value))


def _encode_other(encoder: cbor2.CBOREncoder, value: Any) -> None:
    if isinstance(value, CID):
        encoder.encode_semantic(_LINK_TAG, b"\x00" + value.bytes)
        return
    _reject(encoder, value)


def _encode_int(encoder: cbor2.CBOREncoder, value: int) -> None:
    if not -(1 << 64) <= value < (1 << 64):
        raise UsageError(f"DAG-CBOR integers are limited to 64 bits, got {value}")
    encoder.encode_int(value)


def _encode_map(encoder: cbor2.CBOREncoder, value: dict[Any, Any]) -> None:
    for key in value:
        if type(key) is not str:
            raise UsageError(f"DAG-CBOR map keys must be strings, found {key!r}")
    encoder.encode_map(value)  # sorted length-first by canonical mode


def _reject(_encoder: cbor2.CBOREncoder, value: Any) -> None:
    raise UsageError(
        f"cannot store a value of type {type(value).__name__} in a node: "
        "use None, bool, int, float, str, bytes, list, dict with str keys, or CID"
    )


# cbor2 would encode these with tags of its own, which DAG-CBOR does not allow.
_TAGGED_TYPES: tuple[type, ...] = (
    datetime.datetime,
    datetime.date,
    decimal.Decimal,
    fractions.Fraction,
    uuid.UUID,
    set,
    frozenset,
    re.Pattern,
)
_ENCODERS: dict[type, Any] = {float: _encode_float, int: _encode_int, dict: _encode_map}
_ENCODERS.update(dict.fromkeys(_TAGGED_TYPES, _reject))


def encode_node(node: Any) -> bytes:
    """Encode a node (dicts, lists, scalars, CIDs) as DAG-CBOR bytes.

    Raises :class:`UsageError` on anything DAG-CBOR cannot hold: non-string
    map keys, NaN or infinite floats, integers beyond 64 bits, other types.
    """
    try:
        return cbor2.dumps(node, canonical=True, encoders=_ENCODERS, default=_encode_other)
    except UsageError:
        raise
    except (cbor2.CBOREncodeError, TypeError, ValueError, OverflowError) as exc:
        raise UsageError(f"cannot encode node as DAG-CBOR: {exc}") from None


def _tag_hook(*args: Any) -> CID:
    # cbor2 6 calls tag_hook(tag, immutable); cbor2 5 called it (decoder, tag, ...).
    tag = args[0] if isinstance(args[0], cbor2.CBORTag) else args[1]
    if tag.tag != _LINK_TAG:
        raise IntegrityError(f"DAG-CBOR allows only tag 42 (links), found tag {tag.tag}")
    value = tag.value
    if not isinstance(value, bytes) or not value or value[0] != 0:
        raise IntegrityError("a tag-42 link must hold bytes starting with 0x00")
    return CID(value[1:])


def decode_node(data: bytes, *, strict: bool = False) -> Any:
    """Decode DAG-CBOR bytes; links come back as :class:`CID` objects.

    Duplicate map keys and indefinite lengths are always rejected. With
    ``strict=True`` the bytes must also be exactly the canonical encoding
    (key order, shortest integers, 64-bit floats): use it on blocks from
    outside, where the hash check alone does not prove canonical form.
    Failures raise :class:`IntegrityError`.
    """
    try:
        node = cbor2.loads(
            data, tag_hook=_tag_hook, allow_duplicate_keys=False, allow_indefinite=False
        )
    except IntegrityError:
        raise
    except (cbor2.CBORDecodeError, ValueError, TypeError, EOFError) as exc:
        raise IntegrityError(f"malformed DAG-CBOR block: {exc}") from None
    if strict:
        _check_strict(node)
        try:
            canonical = encode_node(node)
        except UsageError as exc:
            raise IntegrityError(f"block is not valid DAG-CBOR: {exc}") from None
        if canonical != data:
            raise IntegrityError("block is not in canonical DAG-CBOR form")
    return node


def _check_strict(node: Any) -> None:
    if isinstance(node, dict):
        for key, value in node.items():
            if not isinstance(key, str):
                raise IntegrityError(f"DAG-CBOR map keys must be strings, found {key!r}")
            _check_strict(value)
    elif isinstance(node, list):
        for item in node:
            _check_strict(item)
    elif not isinstance(node, (str, bytes, int, float, bool, CID, type(None))):
        raise IntegrityError(f"DAG-CBOR cannot hold a {type(node).__name__}")


def iter_links(node: Any) -> Iterator[CID]:
    """Every link held anywhere inside a decoded node, in encounter order."""
    if isinstance(node, CID):
        yield node
    elif isinstance(node, dict):
        for value in node.values():
            yield from iter_links(value)
    elif isinstance(node, list):
        for item in node:
            yield from iter_links(item)


def links_of(cid: CID, data: bytes) -> list[CID]:
    """The links of a stored block of any codec: none for raw, tag-42 values for DAG-CBOR.

    This is what lets GC, verify and export walk any block without knowing
    node types.
    """
    codec = cid.codec
    if codec == RAW:
        return []
    if codec == DAG_CBOR:
        return list(iter_links(decode_node(data)))
    raise IntegrityError(f"block {cid} has codec {codec:#x}, which merkle-db cannot walk")


def check_node(node: Any, expected_type: str, *, where: object = None) -> dict[str, Any]:
    """Return ``node`` if it is a dict of ``type`` ``expected_type`` and a known version.

    Readers call this on every typed node, so a block of another kind or of a
    newer format is a clear :class:`IntegrityError` instead of a wrong answer.
    """
    label = f" {where}" if where is not None else ""
    if not isinstance(node, dict):
        raise IntegrityError(f"node{label} is not a map (expected {expected_type})")
    found = node.get("type")
    if found != expected_type:
        raise IntegrityError(f"node{label} has type {found!r}, expected {expected_type!r}")
    version = node.get("v")
    if version != NODE_VERSION:
        raise IntegrityError(
            f"node{label} of type {expected_type} has format version {version!r}; this "
            f"merkle-db reads version {NODE_VERSION}: upgrade merkle-db to read it"
        )
    return node
