"""``merkle.cli.isoticks`` counts exactly, in integers where the unit holds the value.

The counts were Fractions for every value (a 200,000-row CSV of times loaded
twice as slowly as before they were exact); they are ints now, and a Fraction
only for a value finer than the unit, which the load refuses. Checked against
an exact reference for random times, timestamps with offsets, and units.
"""

from __future__ import annotations

import datetime as dt
from fractions import Fraction

from hypothesis import given
from hypothesis import strategies as st

from merkle.cli.isoticks import time_ticks, timestamp_ticks

PER = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}
units = st.sampled_from(sorted(PER))
digits = st.text(alphabet="0123456789", min_size=1, max_size=12)


def _exact(whole_seconds: int, fraction: str, unit: str) -> Fraction:
    return (whole_seconds + Fraction(int(fraction), 10 ** len(fraction))) * PER[unit]


def _check(got: int | Fraction, want: Fraction) -> None:
    assert got == want
    assert isinstance(got, int) == (want.denominator == 1)


@given(st.times(), digits, units)
def test_a_time_counts_its_unit_exactly(value: dt.time, fraction: str, unit: str) -> None:
    text = value.replace(microsecond=0).isoformat() + "." + fraction
    seconds = (value.hour * 60 + value.minute) * 60 + value.second
    _check(time_ticks(text, unit), _exact(seconds, fraction, unit))


@given(
    st.datetimes(min_value=dt.datetime(1, 1, 2), max_value=dt.datetime(9999, 12, 30)),
    digits,
    st.integers(min_value=-23 * 60, max_value=23 * 60),
    units,
)
def test_a_timestamp_counts_its_instant_exactly(
    value: dt.datetime, fraction: str, offset_minutes: int, unit: str
) -> None:
    zone = dt.timezone(dt.timedelta(minutes=offset_minutes))
    text = value.replace(microsecond=0, tzinfo=zone).isoformat() + ""
    head, _, tail = text.partition("+") if "+" in text[10:] else text.rpartition("-")
    text = f"{head}.{fraction}{'+' if '+' in text[10:] else '-'}{tail}"
    wall = value.replace(microsecond=0) - dt.datetime(1970, 1, 1)
    seconds = wall.days * 86_400 + wall.seconds - offset_minutes * 60
    _check(timestamp_ticks(text, unit), _exact(seconds, fraction, unit))
