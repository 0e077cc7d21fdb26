"""ISO-8601 times and timestamps as the exact count of a field's unit, every digit kept.

Python's ``datetime.fromisoformat`` and ``time.fromisoformat`` take any number of
fractional-second digits but keep only six: ``00:00:00.000000001`` becomes
midnight, ``00:00:00.0000015`` one microsecond. A ``time64[ns]`` or
``timestamp[ns]`` field holds those digits, and a ``time64[us]`` field does not
hold the seventh, so a value read through them alone would be cut without a word
(doc/cli.md: "No value is rounded, cut or made infinite"). Here the text is still
checked and read by ``fromisoformat`` (every form it takes is taken), but the
fraction of a second is read from the text, all its digits, and the result is a
:class:`~fractions.Fraction` count of the unit: a whole number when the unit holds
the value, else the caller refuses it.
"""

from __future__ import annotations

import datetime
import re
from fractions import Fraction

__all__ = ["time_ticks", "timestamp_ticks", "unit_digits"]

#: A unit's count per second.
_PER_SECOND = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}
#: The fraction of a second: the first ``.`` or ``,`` after a digit, with all its digits.
_FRACTION = re.compile(r"(?<=\d)[.,](\d+)")
#: Midnight of 1970-01-01 (UTC), which timestamps count from.
_EPOCH = datetime.datetime(1970, 1, 1)


def _count(text: str, micros: int, whole: int, per: int) -> int | Fraction:
    """``whole`` seconds plus the fraction of a second ``text`` writes, as a count of a
    unit of ``per`` a second: an int when the unit holds it, else a Fraction (which
    the caller refuses). ``micros`` is what ``fromisoformat`` read of the fraction:
    its six first digits must be those (else the first fraction in the text is not
    the seconds', e.g. it is in a UTC offset: ValueError). Integers only on the way:
    a Fraction per value made a 200,000-row load of times twice as slow."""
    match = _FRACTION.search(text)
    if match is None:
        if micros:
            raise ValueError(f"no fraction of a second found in {text!r}")
        return whole * per
    digits = match.group(1)
    if int(digits[:6].ljust(6, "0")) != micros:
        raise ValueError(f"the fraction of a second of {text!r} is not where it was read")
    scale = int(10 ** len(digits))  # int ** int is typed as possibly a float
    ticks, rest = divmod(int(digits) * per, scale)
    if rest:
        return Fraction(whole * per) + Fraction(int(digits) * per, scale)
    return whole * per + ticks


def time_ticks(text: str, unit: str) -> int | Fraction:
    """The time of day ``text`` (ISO-8601, as ``time.fromisoformat`` reads it) as a count
    of ``unit`` (``s``, ``ms``, ``us``, ``ns``) since midnight; ValueError if ``text``
    is not a time. A UTC offset is dropped, as Arrow drops a ``time``'s ``tzinfo``."""
    value = datetime.time.fromisoformat(text)
    seconds = (value.hour * 60 + value.minute) * 60 + value.second
    return _count(text, value.microsecond, seconds, _PER_SECOND[unit])


def timestamp_ticks(text: str, unit: str) -> int | Fraction:
    """The timestamp ``text`` (ISO-8601, as ``datetime.fromisoformat`` reads it) as a count
    of ``unit`` since 1970-01-01T00:00 UTC; ValueError if ``text`` is not one. A time
    with a UTC offset counts its instant; one without counts its wall time as UTC, as
    pyarrow stores a naive ``datetime`` (in a zoned field too)."""
    value = datetime.datetime.fromisoformat(text)
    # The wall time's count and the offset's are taken apart and subtracted as whole
    # numbers: the instant of 0001-01-01T00:00+01:00 (or 9999-12-31T23:30-01:00) lies
    # outside what a Python datetime holds, so ``value - offset`` would overflow.
    wall = _micros(value.replace(microsecond=0, tzinfo=None) - _EPOCH)
    offset = _micros(value.utcoffset() or datetime.timedelta(0))
    seconds, part = divmod(wall - offset, 1_000_000)
    if part:  # an offset with a fraction of a second: counted exactly
        extra = Fraction(part, 1_000_000) * _PER_SECOND[unit]
        return _count(text, value.microsecond, seconds, _PER_SECOND[unit]) + extra
    return _count(text, value.microsecond, seconds, _PER_SECOND[unit])


def _micros(span: datetime.timedelta) -> int:
    """``span`` as a whole count of microseconds."""
    return (span.days * 86_400 + span.seconds) * 1_000_000 + span.microseconds


def unit_digits(unit: str) -> str:
    """The digits of a second ``unit`` holds, as an error names them: ``6 digits at most``."""
    digits = len(str(_PER_SECOND[unit])) - 1
    return f"{digits} digits at most" if digits else "whole seconds"
