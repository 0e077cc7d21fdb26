"""The DAG-CBOR node codec: deterministic bytes, links as CBOR tag 42.

Equal content must give equal bytes (and so equal CIDs): that is what makes
structural sharing and deduplication work. The rules are DAG-CBOR's: map keys
are strings sorted length-first then bytewise, integers and lengths in their
shortest form, floats always 64-bit, no NaN or infinity, no indefinite
lengths, and the only tag is 42 (a link: ``0x00`` + CID bytes).

Encoding is :mod:`merkle.blocks.encoder` (see there why not cbor2). Decoding
is cbor2's C decoder with a tag hook that turns links into :class:`CID`
objects and refuses every other tag; ``strict=True`` also proves the bytes
are the canonical encoding, for blocks that come from outside.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Collection, Iterator, Mapping
from typing import Any, Final

import cbor2

from merkle.blocks.cid import CID, DAG_CBOR, RAW
from merkle.blocks.encoder import encode_node
from merkle.blocks.nesting import MAX_CBOR_DEPTH
from merkle.errors import IntegrityError, UsageError

__all__ = [
    "NODE_VERSION",
    "check_node",
    "decode_node",
    "decode_node_deferred",
    "decode_object",
    "encode_node",
    "is_newer_format",
    "iter_links",
    "link_of",
    "links_of",
    "resolve_links",
]

#: Format version written in every node's ``v`` field.
NODE_VERSION = 1

_LINK_TAG: Final = 42

#: The first five bytes of a link to a CIDv1 that merkle-db writes (the 0x00
#: prefix, version, codec, hash, digest size): such 37-byte links need no parsing.
_COMMON_LINK_STARTS: Final = frozenset(
    bytes((0, 1, codec, code, 32)) for codec in (DAG_CBOR, RAW) for code in (0x1E, 0x12)
)


def _link(tag: cbor2.CBORTag) -> CID:
    """The CID held by a decoded tag; :class:`IntegrityError` for any other tag or a bad link."""
    value = tag.value
    if (
        tag.tag == _LINK_TAG
        and type(value) is bytes
        and len(value) == 37
        and value[:5] in _COMMON_LINK_STARTS
    ):
        return CID(value[1:])
    if tag.tag != _LINK_TAG:
        raise IntegrityError(
            f"DAG-CBOR allows only tag 42 (links), found tag {tag.tag}; "
            "the block was not written by a DAG-CBOR encoder"
        )
    if not isinstance(value, bytes) or not value or value[0] != 0:
        raise IntegrityError(
            f"a tag-42 link must hold bytes starting with 0x00, found {value!r:.80}"
        )
    try:
        return CID.from_bytes(value[1:])
    except UsageError as exc:
        raise IntegrityError(f"a tag-42 link holds {exc}") from None


def _tag_hook_v6(tag: cbor2.CBORTag, _immutable: bool) -> CID:
    value = tag.value
    # The common case inline: a hook call per link is most of a node's decode time.
    if (
        tag.tag == _LINK_TAG
        and type(value) is bytes
        and len(value) == 37
        and value[:5] in _COMMON_LINK_STARTS
    ):
        return CID(value[1:])
    return _link(tag)


def _tag_hook_v5(_decoder: Any, tag: cbor2.CBORTag, *_: Any) -> CID:
    return _link(tag)


def _refuse_builtin_tag(tag: int) -> Callable[[Any, bool], Any]:
    def refuse(_value: Any, _immutable: bool) -> Any:
        raise IntegrityError(
            f"DAG-CBOR allows only tag 42 (links), found tag {tag}; "
            "the block was not written by a DAG-CBOR encoder"
        )

    return refuse


#: Tags cbor2 6 decodes by itself without asking the tag hook (dates, bignums,
#: decimals, shared values, string references, sets, ...): found by probing
#: every tag below 70000 (tests/blocks/test_codec.py repeats the probe).
_CBOR2_BUILTIN_TAGS: Final = (
    0, 1, 2, 3, 4, 5, 25, 28, 29, 30, 35, 36, 37, 52, 54, 100, 256, 258, 260, 261, 1004,
    43000, 55799,
)  # fmt: skip


def _cbor2_major() -> int:
    """6 when cbor2 takes ``semantic_decoders`` (cbor2 6), else 5.

    Asked of cbor2 itself, not of its package metadata: reading that imports
    ``importlib.metadata``, tens of milliseconds at every command's start.
    """
    try:
        cbor2.loads(b"\xf6", semantic_decoders={})
    except TypeError:
        return 5
    return 6


_CBOR2_MAJOR: Final = _cbor2_major()

_LOADS_OPTIONS: Final[dict[str, Any]] = (
    {
        "tag_hook": _tag_hook_v6,
        "semantic_decoders": {tag: _refuse_builtin_tag(tag) for tag in _CBOR2_BUILTIN_TAGS},
    }
    if _CBOR2_MAJOR >= 6
    else {"tag_hook": _tag_hook_v5}  # cbor2 5: built-in tags are refused by strict mode only
)
#: :func:`decode_node_deferred`'s options: no tag hook (cbor2 makes each tag a CBORTag).
_DEFERRED_OPTIONS: Final[dict[str, Any]] = {
    key: value for key, value in _LOADS_OPTIONS.items() if key != "tag_hook"
}


def decode_node(data: bytes, *, strict: bool = False) -> Any:
    """Decode DAG-CBOR bytes; links come back as :class:`CID` objects.

    Duplicate map keys, indefinite lengths, tags other than 42 and bytes after
    the one data item are always rejected. With ``strict=True`` the bytes must also be exactly the
    canonical encoding (key order, shortest integers, 64-bit floats, string
    keys): use it on blocks from outside, where the hash check alone does not
    prove canonical form. Failures raise :class:`IntegrityError`.
    """
    node = _decode(data, _LOADS_OPTIONS)
    if strict:
        _check_strict(node)
        try:
            canonical = encode_node(node)
        except UsageError as exc:
            raise IntegrityError(f"block is not valid DAG-CBOR: {exc}") from None
        if canonical != data:
            raise IntegrityError(
                "block is not in canonical DAG-CBOR form (key order, shortest integers "
                "or 64-bit floats differ); re-encode it with a DAG-CBOR encoder"
            )
    return node


def decode_object(
    data: bytes, node_type: str, damaged: Callable[[str], Exception]
) -> dict[str, Any]:
    """The map of type ``node_type`` a lake object (a lease, a lock, the config, ...) holds.

    Bytes that do not decode, or decode to anything else, raise
    ``damaged(problem)``: the caller's error, which names the object and the
    way out (doc/reliability.md: every decoder names what is damaged).
    """
    try:
        node = decode_node(data)
    except IntegrityError as exc:
        raise damaged(f"it does not decode ({exc})") from None
    if not isinstance(node, dict) or node.get("type") != node_type:
        raise damaged(f"it is not a {node_type} node")
    return node


def decode_node_deferred(data: bytes) -> Any:
    """:func:`decode_node` with every link left as the ``cbor2.CBORTag`` that holds it.

    For a reader that checks each field of the node itself and uses few of
    many links: a 100-child index node decodes in about half the time when
    its links are not made into :class:`CID` objects as they are met (one
    Python call each). Tags that cbor2 would decode by itself (dates, sets,
    shared values) are refused as by :func:`decode_node`; any other tag comes
    back as a ``CBORTag``, so the reader must take a link only through
    :func:`link_of` (which refuses a tag other than 42) and refuse a
    ``CBORTag`` anywhere else, or pass the node to :func:`resolve_links`.
    """
    return _decode(data, _DEFERRED_OPTIONS)


def link_of(value: Any) -> CID:
    """The CID of a link as :func:`decode_node_deferred` leaves it (or of a CID itself);
    :class:`IntegrityError` for any other value."""
    if type(value) is CID:
        return value
    if not isinstance(value, cbor2.CBORTag):
        raise IntegrityError(f"expected a link, found {type(value).__name__} {value!r:.40}")
    return _tag_hook_v6(value, False)


def resolve_links(node: Any) -> Any:
    """A node of :func:`decode_node_deferred` as :func:`decode_node` returns it: every
    tag made a CID, or refused as the decoder refuses it."""
    if isinstance(node, cbor2.CBORTag):
        return link_of(node)
    if isinstance(node, dict):
        return {key: resolve_links(value) for key, value in node.items()}
    if isinstance(node, list):
        return [resolve_links(item) for item in node]
    return node


def _decode(data: bytes, options: dict[str, Any]) -> Any:
    """One DAG-CBOR data item of ``data`` decoded with cbor2 ``options``; failures and
    trailing bytes as :class:`IntegrityError`."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise UsageError(f"decode_node wants bytes, got {type(data).__name__}")
    stream = io.BytesIO(data)
    try:
        node = cbor2.CBORDecoder(
            stream,
            allow_duplicate_keys=False,
            allow_indefinite=False,
            max_depth=MAX_CBOR_DEPTH,  # the encoder's limit: what it writes reads
            **options,
        ).decode()
    except IntegrityError:
        raise
    except cbor2.CBORDecodeError as exc:
        # cbor2 wraps what the tag hook raised; keep the hook's own message, and let an
        # interrupt (Ctrl-C while a hook ran) or a lack of memory out as what it is: the
        # block is not damaged.
        cause = exc.__cause__
        if isinstance(cause, IntegrityError | MemoryError) or (
            cause is not None and not isinstance(cause, Exception)
        ):
            raise cause from None
        raise IntegrityError(f"malformed DAG-CBOR block: {exc}") from None
    except RecursionError:
        raise IntegrityError("malformed DAG-CBOR block: nested too deeply to decode") from None
    except (ValueError, TypeError, EOFError) as exc:
        raise IntegrityError(f"malformed DAG-CBOR block: {exc}") from None
    if stream.tell() != len(data):
        raise IntegrityError(
            f"malformed DAG-CBOR block: {len(data) - stream.tell()} bytes follow its one "
            "data item; a block holds exactly one"
        )
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


def check_node(
    node: Any,
    expected_type: str,
    *,
    where: object = None,
    versions: Collection[int] = (NODE_VERSION,),
) -> dict[str, Any]:
    """Return ``node`` if it is a dict of ``type`` ``expected_type`` and a known version.

    Readers call this on every typed node, so a block of another kind or of a
    newer format is a clear :class:`IntegrityError` instead of a wrong answer.
    ``versions`` lists the format versions the caller reads (a node type whose
    layout grew a version reads the old ones too).
    """
    label = f" {where}" if where is not None else ""
    if not isinstance(node, dict):
        raise IntegrityError(f"node{label} is not a map (expected {expected_type})")
    found = node.get("type")
    if found != expected_type:
        raise IntegrityError(f"node{label} has type {found!r}, expected {expected_type!r}")
    version = node.get("v")
    if version not in versions or isinstance(version, bool):
        known = " and ".join(str(v) for v in sorted(versions))
        if not is_newer_format(node, versions):
            # No merkle-db writes a version missing, below 1 or not a number: damage.
            raise IntegrityError(
                f"node{label} of type {expected_type} is malformed: its format version is "
                f"{version!r}, not a version any merkle-db writes (this one reads {known})"
            )
        raise IntegrityError(
            f"node{label} of type {expected_type} has format version {version!r}; this "
            f"merkle-db reads version {known}: upgrade merkle-db to read it"
        )
    return node


def is_newer_format(node: Mapping[str, Any], versions: Collection[int] = (NODE_VERSION,)) -> bool:
    """Whether ``node``'s ``v`` names a format newer than every one of ``versions``:
    an upgrade reads it, where a ``v`` that is missing, not an integer or below 1
    is damage that no merkle-db could read."""
    version = node.get("v")
    return type(version) is int and version > max(versions)
