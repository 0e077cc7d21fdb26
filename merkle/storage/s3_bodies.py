"""Whether a GetObject body is the object's bytes, by what the response says about them.

Blocks are content-addressed: the block store checks every block against its
CID, and reads a block once more before calling it corrupt. Every other lake
object (journal entries, the HEAD hint, ``TRIMMED``, the lake config, leases,
the GC lock, tags, the GC policy, reports) carries no such check, so a byte
flipped on the way (by a proxy, a load balancer, the network) was taken for
the object: a journal entry read so was chained into the next commit's
``prev`` and left the journal "damaged" for good, and a ``TRIMMED`` read so
made a collection trim versions its retention keeps.

Botocore checks a response checksum only if the client asks for one
(``response_checksum_validation=when_supported``, the default, asks on every
GET) and the object has one (botocore adds a CRC32 to every put unless
``request_checksum_calculation=when_required``). S3-compatible stores are
usually run with both set to ``when_required``, so nothing was checked there.
What every S3 store does send is the ETag, which for an object stored by one
``PutObject`` without SSE-KMS or SSE-C (every object merkle writes, unless the
bucket encrypts with KMS) is the hex MD5 of its bytes.

A body is *confirmed* (:func:`confirmed`) when its MD5 is the ETag, or when
botocore checked a full-object checksum of it. Otherwise
:meth:`S3Store.get <merkle.storage.s3.S3Store.get>` reads the object again
and trusts it once two reads in a row return the same bytes (a store whose
ETags are not MD5s, or an object encrypted with KMS, costs two GETs a read);
bodies that keep differing are a retryable :class:`~merkle.errors.StorageError`,
never damage at rest. An object damaged at rest reads the same every time and
still gets its decoder's damage error.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping
from typing import Any

from merkle.errors import StorageError

__all__ = ["CONTENT_ADDRESSED", "checksum_checked", "confirmed", "etag_md5", "read_confirmed"]

#: Keys whose bytes their readers check against their names (``merkle.blocks.store``):
#: read once, as they are verified anyway (and may be large, where an MD5 costs).
CONTENT_ADDRESSED = "blocks/"

# A single-part ETag: 32 hex digits, quoted (a multipart one ends in "-<parts>").
_MD5_ETAG = re.compile(r'"?([0-9a-fA-F]{32})"?')

#: Full-object checksums botocore computes without the optional CRT package; it
#: skips the others (CRC32C, CRC64NVME) silently when that package is missing.
_CHECKED_BY_BOTOCORE = ("ChecksumCRC32", "ChecksumSHA1", "ChecksumSHA256")


def etag_md5(response: Mapping[str, Any]) -> str | None:
    """The MD5 (lowercase hex) that the ETag of a GetObject ``response`` may be, else None."""
    match = _MD5_ETAG.fullmatch(str(response.get("ETag", "")).strip())
    return match.group(1).lower() if match else None


def checksum_checked(response: Mapping[str, Any], validation: object) -> bool:
    """Whether botocore has checked the body of ``response`` against a full-object checksum.

    With ``validation`` (the client's ``response_checksum_validation``) at
    ``when_supported`` botocore asks for the object's checksum on every GET
    and checks the body against it as it is read (a mismatch raises
    ``FlexibleChecksumError``, which the store retries). A composite
    checksum (of a multipart upload, ``...-<parts>``) is not checked.
    """
    if validation != "when_supported":
        return False
    if str(response.get("ChecksumType", "FULL_OBJECT")).upper() != "FULL_OBJECT":
        return False
    return any(
        (value := response.get(name)) and "-" not in str(value) for name in _CHECKED_BY_BOTOCORE
    )


def confirmed(data: bytes, response: Mapping[str, Any], validation: object) -> bool:
    """Whether ``data``, the body of the GetObject ``response``, is confirmed by it:
    its MD5 is the ETag, or botocore checked a checksum of it (see the module doc)."""
    expected = etag_md5(response)
    if expected is not None and hashlib.md5(data, usedforsecurity=False).hexdigest() == expected:
        return True
    return checksum_checked(response, validation)


def read_confirmed(
    read: Callable[[], tuple[bytes, Mapping[str, Any]]],
    *,
    validation: object,
    reads: int,
    pause: Callable[[int], None],
    what: str,
) -> bytes:
    """The body ``read()`` returns once it is confirmed, or twice in a row the same.

    ``read`` is one GetObject with the store's retries (body, response).
    Up to ``reads`` reads (at least two), with ``pause(n)`` before the
    third and later ones. Bodies that keep differing, none confirmed, were
    damaged on the way: a :class:`StorageError` (definite: a read changes
    nothing; worth retrying), not the damage error of a decoder, which would
    send the user to a backup for an object that is whole.
    """
    previous: bytes | None = None
    for n in range(max(2, reads)):
        if n >= 2:
            pause(n - 2)
        data, response = read()
        if data == previous or confirmed(data, response, validation):
            return data
        previous = data
    raise StorageError(
        f"{what} failed: {max(2, reads)} reads returned different bytes, none matching "
        "the object's ETag (MD5) or checksum, so they were damaged on the way (a proxy, "
        "a load balancer or the network between here and the endpoint); the stored "
        "object may be whole and nothing was changed: try again, and check that path "
        "if it recurs",
        definite=True,
    )
