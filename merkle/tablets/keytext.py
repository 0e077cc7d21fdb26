"""Keys written as text, parsed by a table's key codec: the command line's and Spark's.

A table's key codec decides what a key's text means (``doc/cli.md``, "Keys"):

=============  ==========================================================
``int``        a decimal integer: ``42``, ``-7``
``float``      a number: ``2.5``, ``1e3``, ``-inf`` (NaN is never a key)
``str``        the text as it is
``bytes``      hexadecimal, optionally after ``0x``: ``00ff``, ``0x00ff``
``timestamp``  ISO-8601: ``2026-01-31T12:00:00Z``, ``2026-01-31`` (naive = UTC)
``tuple(...)`` a JSON array with one item per component: ``[2026, "eu"]``;
               an item is a JSON number, or a string parsed as above
``reverse(S)`` what ``S`` takes
=============  ==========================================================

These are the inverse of how the command line renders keys, so a key copied
from ``merkle scan`` can be pasted into ``merkle get``, or into a Spark
read's ``from_pk``. A key that does not parse is a :class:`UsageError`
naming the key and the codec.
"""

from __future__ import annotations

import json
import math
import re
from datetime import datetime
from typing import Any

from merkle.errors import UsageError
from merkle.tablets.keys import key_codec

#: The fractional seconds of an ISO-8601 time (after its seconds' two digits).
_FRACTION = re.compile(r"\d\d[.,](\d+)")

__all__ = ["key_from_text", "split_spec"]


class _BadKeyError(Exception):
    """The text does not parse as a key of one codec; the message says what is expected."""


def split_spec(spec: str) -> tuple[str, list[str]]:
    """A canonical codec spec as (name, argument specs): ``tuple(int,str)`` -> tuple, [int, str]."""
    if "(" not in spec:
        return spec, []
    name, _, rest = spec.partition("(")
    inner = rest[:-1]
    args: list[str] = []
    depth, start = 0, 0
    for i, ch in enumerate(inner):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            args.append(inner[start:i])
            start = i + 1
    args.append(inner[start:])
    return name, args


def _from_text(text: str, spec: str, prefix: bool = False) -> Any:
    name, args = split_spec(spec)
    if name == "reverse":
        return _from_text(text, args[0])
    if name == "str":
        return text
    if name == "int":
        try:
            return int(text.strip(), 10)
        except ValueError:
            raise _BadKeyError("expected a decimal integer such as 42") from None
    if name == "float":
        try:
            number = float(text.strip())
        except ValueError:
            raise _BadKeyError("expected a number such as 2.5") from None
        if math.isnan(number):
            raise _BadKeyError("NaN is never a key")
        return number
    if name == "bytes":
        digits = text.strip()
        digits = digits[2:] if digits[:2].lower() == "0x" else digits
        try:
            return bytes.fromhex(digits)
        except ValueError:
            raise _BadKeyError("expected hexadecimal bytes such as 00ff or 0x00ff") from None
    if name == "timestamp":
        fraction = _FRACTION.search(text)
        if fraction is not None and fraction.group(1)[6:].strip("0"):
            # fromisoformat drops digits past the microsecond without a word: a key
            # that is not the one given
            raise _BadKeyError(
                f"{text.strip()!r} has digits past the microsecond: the timestamp key codec "
                "stores whole microseconds; give at most six fractional digits"
            )
        try:
            return datetime.fromisoformat(text.strip())
        except ValueError:
            raise _BadKeyError("expected an ISO-8601 time such as 2026-01-31T12:00:00Z") from None
    if name == "tuple":
        try:
            items = json.loads(text)
        except json.JSONDecodeError:
            items = None
        if not isinstance(items, list):
            raise _BadKeyError(
                f"expected a JSON array of {len(args)} items such as {_example(args)}"
            )
        return _from_items(items, args, prefix)
    raise _BadKeyError(f"keys of codec {spec!r} cannot be given as text")


def _from_json(item: Any, spec: str) -> Any:
    """One tuple component given as a JSON value."""
    name, args = split_spec(spec)
    if name == "reverse":
        return _from_json(item, args[0])
    if isinstance(item, str):
        return _from_text(item, spec)
    if name in ("int", "float") and isinstance(item, int | float) and not isinstance(item, bool):
        return item
    if name == "tuple" and isinstance(item, list):
        return _from_items(item, args)
    raise _BadKeyError(f"{json.dumps(item)} is not a {spec} component")


def _from_items(items: list[Any], specs: list[str], prefix: bool = False) -> tuple[Any, ...]:
    if len(items) != len(specs) and not (prefix and 0 < len(items) < len(specs)):
        raise _BadKeyError(f"expected {len(specs)} items, got {len(items)}")
    return tuple(
        _from_json(item, spec) for item, spec in zip(items, specs[: len(items)], strict=True)
    )


def _example(specs: list[str]) -> str:
    samples = {"int": "1", "float": "2.5", "str": '"a"', "bytes": '"00ff"'}
    samples["timestamp"] = '"2026-01-31T00:00:00Z"'
    parts = []
    for spec in specs:
        name, args = split_spec(spec)
        while name == "reverse":
            name, args = split_spec(args[0])
        parts.append(samples.get(name, "[...]"))
    return "[" + ", ".join(parts) + "]"


def key_from_text(text: str, spec: str | None, *, prefix: bool = False) -> Any:
    """The key value ``text`` stands for under codec ``spec`` (``prefix``: a shorter
    tuple is a key prefix, a bound for scans of a composite key).

    ``spec`` None means the table has no codec yet (nothing was ever written):
    the text is returned as it is, since no key can match anyway.
    """
    if spec is None:
        return text
    try:
        value = _from_text(text, spec, prefix)
        codec = key_codec(spec)
        if prefix and codec.encode_prefix(value) is not None:
            return value  # a key prefix: a bound for scans of a composite key
        return codec.normalize(value)
    except _BadKeyError as exc:
        reason = str(exc)
    except UsageError as exc:
        reason = str(exc)
    raise UsageError(f"key {text!r} does not parse as key codec {spec!r}: {reason}")
