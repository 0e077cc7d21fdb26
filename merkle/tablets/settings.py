"""Checks of a table's settings (families, limits) and small helpers of its key order."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from merkle.errors import UsageError
from merkle.tablets.keys import KeyCodec
from merkle.tablets.nodes import BASE, Limits
from merkle.tablets.ranges import successor

__all__ = ["check_families", "check_limits", "key_successor", "scan_bounds", "unreversed"]


def key_successor(prefix: bytes) -> bytes | None:
    """The least bytes above every string that starts with ``prefix`` (None: there is none)."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes([stripped[-1] + 1])


def scan_bounds(codec: KeyCodec, from_pk: Any, to_pk: Any) -> tuple[bytes | None, bytes | None]:
    """The encoded keys ``[lo, hi)`` of a scan from ``from_pk`` to ``to_pk``, both inclusive
    (None: unbounded on that side). A key prefix of a composite key bounds every key it
    starts (``("x",)`` to ``("x",)``: all of ``x``); any other value is encoded as a
    whole key, so a ``reverse(...)`` codec runs from the larger value to the smaller.
    ``db.scan`` and Spark's ``from_pk``/``to_pk`` both bound their reads so."""
    lo = hi = None
    if from_pk is not None:
        prefix = codec.encode_prefix(from_pk)
        lo = codec.encode(from_pk) if prefix is None else prefix
    if to_pk is not None:
        prefix = codec.encode_prefix(to_pk)
        hi = successor(codec.encode(to_pk)) if prefix is None else key_successor(prefix)
    return lo, hi


def unreversed(codec: KeyCodec) -> KeyCodec:
    while hasattr(codec, "inner"):
        codec = codec.inner
    return codec


def check_families(
    families: Mapping[str, Any] | None, key_field: str, key_fields: Sequence[str] = ()
) -> dict[str, tuple[str, ...]]:
    """Validate ``{family: fields}``; a field belongs to one family; never the key or ``base``.

    ``key_field`` is the segment key column; ``key_fields`` the user's key fields (a
    composite key's fields, each kept in the key column, so in no family either: both
    ``create_table`` and ``alter_families`` refuse them).
    """
    if families is None:
        return {}
    if not isinstance(families, Mapping):
        raise UsageError(f"families must be a mapping of name -> field names, got {families!r}")
    seen: dict[str, str] = {}
    out: dict[str, tuple[str, ...]] = {}
    for name, fields in families.items():
        if not isinstance(name, str) or not name or name == BASE:
            raise UsageError(
                f"family name {name!r} is invalid: use a non-empty name other than 'base'"
            )
        if isinstance(fields, str) or not hasattr(fields, "__iter__"):
            raise UsageError(f"family {name!r} must list field names, got {fields!r}")
        listed = list(fields)
        for field in listed:  # before set()/sorted(): both fail raw on unhashable/mixed names
            if not isinstance(field, str) or not field:
                raise UsageError(
                    f"family {name!r} holds an invalid field name {field!r}: "
                    "list field names as non-empty strings"
                )
        members = sorted(set(listed))
        for field in members:
            if field == key_field or field in key_fields:
                raise UsageError(f"the key field {field!r} cannot belong to family {name!r}")
            if field in seen:
                raise UsageError(
                    f"field {field!r} is in two families: {seen[field]!r} and {name!r}"
                )
            seen[field] = name
        out[name] = tuple(members)
    return out


def check_limits(
    tablet_size: int | None = None,
    branching: int | None = None,
    patch: int | None = None,
    patch_share: int | None = None,
) -> Limits:
    """Limits with defaults filled in; UsageError for values that cannot work."""
    default = Limits()
    values = {
        "tablet_size_limit": (tablet_size, default.tablet_size, 1),
        "branching_factor": (branching, default.branching, 3),
        "patch_limit": (patch, default.patch, 0),
        "patch_share": (patch_share, default.patch_share, 0),
    }
    chosen = []
    for name, (value, fallback, least) in values.items():
        if value is None:
            value = fallback
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise UsageError(f"{name} must be an integer >= {least}, got {value!r}")
        if name == "patch_share" and value > 1000:
            raise UsageError(f"patch_share is a percentage of the table, at most 1000, got {value}")
        chosen.append(value)
    return Limits(*chosen)
