"""Content identifiers: CIDv1 with a BLAKE3-256 or SHA2-256 multihash.

CID bytes are built by hand (``0x01, codec, hash code, 0x20, digest``: every
code we write is below 0x80, so each varint is one byte) because the
``multiformats`` package costs tens of microseconds a call. ``multiformats``
is used off the hot path: to parse and print CIDs we did not make (CIDv0,
other bases), and in tests as the reference our bytes must equal.
"""

from __future__ import annotations

import builtins
import hashlib
import re
from typing import Any, Final

import blake3

from merkle.errors import IntegrityError, UsageError

__all__ = [
    "BLAKE3",
    "CID",
    "DAG_CBOR",
    "RAW",
    "SHA2_256",
    "codec_code",
    "hash_code",
]

DAG_CBOR: Final = 0x71
RAW: Final = 0x55
BLAKE3: Final = 0x1E
SHA2_256: Final = 0x12

_CODECS: Final = {"dag-cbor": DAG_CBOR, "raw": RAW}
_HASHES: Final = {"blake3": BLAKE3, "sha2-256": SHA2_256}
_CODEC_NAMES: Final = {v: k for k, v in _CODECS.items()}
_HASH_NAMES: Final = {v: k for k, v in _HASHES.items()}


def codec_code(codec: str | int) -> int:
    """The multicodec code of ``"dag-cbor"`` or ``"raw"`` (codes pass through)."""
    if isinstance(codec, int) and codec in _CODEC_NAMES:
        return codec
    try:
        return _CODECS[codec]  # type: ignore[index]
    except (KeyError, TypeError):
        raise UsageError(f"unknown block codec {codec!r}; use one of {sorted(_CODECS)}") from None


def hash_code(name: str | int) -> int:
    """The multihash code of ``"blake3"`` or ``"sha2-256"`` (codes pass through)."""
    if isinstance(name, int) and name in _HASH_NAMES:
        return name
    try:
        return _HASHES[name]  # type: ignore[index]
    except (KeyError, TypeError):
        raise UsageError(f"unknown hash {name!r}; use one of {sorted(_HASHES)}") from None


def _digest(code: int, data: bytes) -> bytes:
    if code == BLAKE3:
        return blake3.blake3(
            data, max_threads=blake3.blake3.AUTO if len(data) > 1 << 20 else 1
        ).digest()
    if code == SHA2_256:
        return hashlib.sha256(data).digest()
    raise IntegrityError(f"cannot verify a block hashed with multihash code {code:#x}")


def _read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise ValueError("truncated or oversized varint")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


class CID:
    """An immutable content identifier, held as its binary form.

    Equality, hashing and ordering use the bytes. ``str()`` is the base32
    multibase form (``bafy...``) for CIDv1 and base58btc (``Qm...``) for v0.
    """

    __slots__ = ("_bytes", "_str")

    def __init__(self, raw: bytes) -> None:
        # No parsing here: this runs for every link decoded from a node.
        self._bytes = raw
        self._str: str | None = None

    # -- construction ----------------------------------------------------------

    @classmethod
    def of(cls, data: bytes, codec: str | int = DAG_CBOR, hash: str | int = BLAKE3) -> CID:
        """The CIDv1 of ``data`` stored with ``codec``, hashed with ``hash``."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise UsageError(f"a CID is computed over bytes, got {type(data).__name__}")
        h = hash_code(hash)
        return cls(bytes((1, codec_code(codec), h, 32)) + _digest(h, data))

    @classmethod
    def from_bytes(cls, raw: bytes) -> CID:
        """Parse and validate binary CID bytes (v0 or v1)."""
        if not isinstance(raw, (bytes, bytearray, memoryview)):
            raise UsageError(f"CID bytes must be bytes, got {type(raw).__name__}")
        raw = bytes(raw)
        try:
            _parse(raw)
        except ValueError as exc:
            shown = raw.hex() or "(empty)"
            raise UsageError(f"malformed CID bytes {shown}: {exc}") from None
        return cls(raw)

    @classmethod
    def parse(cls, text: str | CID) -> CID:
        """Parse a CID string (``bafy...``, ``Qm...``, any multibase) or return a CID as is."""
        if isinstance(text, CID):
            return text
        if not isinstance(text, str) or not text:
            raise UsageError(f"a CID must be a non-empty string, got {text!r}")
        if text[0] == "b":
            try:
                return cls.from_bytes(_base32_decode(text[1:]))
            except (ValueError, UsageError):
                pass
        try:
            from multiformats import CID as MFCID

            return cls.from_bytes(bytes(MFCID.decode(text)))
        except Exception:
            raise UsageError(f"{text!r} is not a valid CID") from None

    # -- properties ------------------------------------------------------------

    def __bytes__(self) -> bytes:
        return self._bytes

    @property
    def bytes(self) -> bytes:
        """The binary form."""
        return self._bytes

    @property
    def version(self) -> int:
        return 0 if self._bytes[:2] == b"\x12\x20" else 1

    @property
    def codec(self) -> int:
        """The multicodec code of the block's encoding (0x71 dag-cbor, 0x55 raw, ...)."""
        raw = self._bytes
        # A CIDv1 whose codec fits one varint byte (every codec merkle writes) is read
        # in place: marking and walking ask it of every link (a collection at 10M rows
        # parsed 5,500 CIDs whole for it).
        if len(raw) > 3 and raw[0] == 1 and raw[1] < 0x80:
            return raw[1]
        return _parse(raw)[1]

    @property
    def hash_code(self) -> int:
        """The multihash function code (0x1e BLAKE3, 0x12 SHA2-256, ...)."""
        raw = self._bytes
        if len(raw) > 3 and raw[0] == 1 and raw[1] < 0x80 and raw[2] < 0x80:
            return raw[2]
        return _parse(raw)[2]

    @property
    def digest(self) -> builtins.bytes:
        return _parse(self._bytes)[3]

    def verify(self, data: builtins.bytes) -> None:
        """Raise :class:`IntegrityError` unless ``data`` hashes to this CID."""
        _, _, code, digest = _parse(self._bytes)
        # The identity multihash (code 0) holds the data itself as its digest.
        ok = digest == data if code == 0 else _digest(code, data)[: len(digest)] == digest
        if not ok:
            raise IntegrityError(
                f"block {self} is corrupt: its bytes do not hash to its CID; "
                "restore it from a replica or run `merkle verify` to find other damage"
            )

    def __str__(self) -> str:
        if self._str is None:
            if self.version == 0:
                from multiformats import CID as MFCID

                self._str = str(MFCID.decode(self._bytes))
            else:
                self._str = "b" + _base32_encode(self._bytes)
        return self._str

    def __repr__(self) -> str:
        return f"CID({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CID) and other._bytes == self._bytes

    def __lt__(self, other: CID) -> bool:
        return self._bytes < other._bytes

    def __hash__(self) -> int:
        return hash(self._bytes)

    def __reduce__(self) -> tuple[Any, ...]:
        return (CID, (self._bytes,))


# Base32 (RFC 4648, lower case, no padding) is the multibase "b" form of CIDv1.
# The standard library's base64.b32encode/b32decode are pure Python before 3.13
# and cost several microseconds a CID; every block key is a CID string.
_BASE32 = "abcdefghijklmnopqrstuvwxyz234567"
_BASE32_PAIRS = tuple(a + b for a in _BASE32 for b in _BASE32)  # 10 bits -> 2 characters
_BASE32_TEXT = re.compile("[a-z2-7]*")
_BASE32_TO_INT_DIGITS = str.maketrans(_BASE32, "0123456789abcdefghijklmnopqrstuv")


def _base32_encode(raw: bytes) -> str:
    """Lower-case, unpadded RFC 4648 base32 of ``raw``."""
    size = len(raw)
    pad = -size % 5  # whole 40-bit groups: 8 characters each
    value = int.from_bytes(raw, "big") << (pad * 8)
    bits = (size + pad) * 8
    text = "".join([_BASE32_PAIRS[(value >> shift) & 0x3FF] for shift in range(bits - 10, -1, -10)])
    return text[: (size * 8 + 4) // 5]


def _base32_decode(text: str) -> bytes:
    """The bytes of lower-case, unpadded RFC 4648 base32; ValueError if it is not that."""
    if not _BASE32_TEXT.fullmatch(text):
        raise ValueError("not lower-case base32")
    size, spare = divmod(len(text) * 5, 8)
    if spare >= 5:
        raise ValueError("base32 text has an impossible length")
    value = int(text.translate(_BASE32_TO_INT_DIGITS), 32) if text else 0
    if value & ((1 << spare) - 1):
        raise ValueError("base32 text has non-zero padding bits")
    return (value >> spare).to_bytes(size, "big")


def _parse(raw: bytes) -> tuple[int, int, int, bytes]:
    """Split CID bytes into (version, codec, hash code, digest)."""
    if len(raw) == 34 and raw[0] == 0x12 and raw[1] == 0x20:
        return 0, DAG_PB, SHA2_256, raw[2:]
    version, pos = _read_varint(raw, 0)
    if version != 1:
        raise ValueError(f"unsupported CID version {version}")
    codec, pos = _read_varint(raw, pos)
    code, pos = _read_varint(raw, pos)
    size, pos = _read_varint(raw, pos)
    digest = raw[pos:]
    if len(digest) != size:
        raise ValueError(f"digest is {len(digest)} bytes, the multihash says {size}")
    return version, codec, code, digest


DAG_PB: Final = 0x70
