"""The boundary searches behind head probing and time lookup: right answer, few probes."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from merkle.refs.search import gallop, last_true


class Counted:
    """The predicate ``v <= answer``, counting calls."""

    def __init__(self, answer: int) -> None:
        self.answer = answer
        self.calls: list[int] = []

    def __call__(self, version: int) -> bool:
        self.calls.append(version)
        return version <= self.answer


@given(start=st.integers(0, 10**6), distance=st.integers(0, 10**6))
def test_gallop_finds_the_boundary_in_logarithmic_probes(start: int, distance: int) -> None:
    pred = Counted(start + distance)
    assert gallop(pred, start) == start + distance
    assert start not in pred.calls, "the known-true start is not probed again"
    assert len(pred.calls) <= 2 * math.log2(distance + 1) + 2


def test_gallop_costs_one_probe_when_the_start_is_the_answer() -> None:
    pred = Counted(41)
    assert gallop(pred, 41) == 41
    assert pred.calls == [42]


@given(lo=st.integers(0, 10**6), width=st.integers(0, 10**6), data=st.data())
def test_last_true_finds_the_boundary(lo: int, width: int, data: st.DataObject) -> None:
    hi = lo + width
    answer = data.draw(st.integers(lo, hi))
    pred = Counted(answer)
    assert last_true(pred, lo, hi) == answer
    assert lo not in pred.calls, "the known-true low end is not probed again"
    assert len(pred.calls) <= math.ceil(math.log2(width + 1)) + 1
