"""The boundary searches behind head probing and time lookup: right answer, few rounds."""

from __future__ import annotations

import math
from collections.abc import Sequence

from hypothesis import given
from hypothesis import strategies as st

from merkle.refs.search import gallop, last_true


class Counted:
    """The batched predicate ``v <= answer``, recording each round of probes."""

    def __init__(self, answer: int) -> None:
        self.answer = answer
        self.rounds: list[list[int]] = []

    def __call__(self, versions: Sequence[int]) -> list[bool]:
        self.rounds.append(list(versions))
        return [version <= self.answer for version in versions]

    @property
    def probes(self) -> list[int]:
        return [version for batch in self.rounds for version in batch]


@given(start=st.integers(0, 10**6), distance=st.integers(0, 10**6))
def test_gallop_finds_the_boundary_in_logarithmic_probes(start: int, distance: int) -> None:
    pred = Counted(start + distance)
    assert gallop(pred, start) == start + distance
    assert start not in pred.probes, "the known-true start is not probed again"
    assert all(len(batch) == 1 for batch in pred.rounds)
    assert len(pred.rounds) <= 2 * math.log2(distance + 1) + 2


def test_gallop_costs_one_probe_when_the_start_is_the_answer() -> None:
    pred = Counted(41)
    assert gallop(pred, 41) == 41
    assert pred.rounds == [[42]]


@given(lo=st.integers(0, 10**6), width=st.integers(0, 10**6), data=st.data())
def test_last_true_finds_the_boundary(lo: int, width: int, data: st.DataObject) -> None:
    hi = lo + width
    answer = data.draw(st.integers(lo, hi))
    pred = Counted(answer)
    assert last_true(pred, lo, hi) == answer
    assert lo not in pred.probes, "the known-true low end is not probed again"
    assert len(pred.rounds) <= math.ceil(math.log2(width + 1)) + 1


@given(
    start=st.integers(0, 10**6),
    distance=st.integers(0, 10**6),
    fanout=st.integers(2, 16),
)
def test_wide_gallop_needs_fewer_rounds(start: int, distance: int, fanout: int) -> None:
    pred = Counted(start + distance)
    assert gallop(pred, start, fanout) == start + distance
    assert all(len(batch) <= fanout for batch in pred.rounds)
    assert all(batch == sorted(set(batch)) for batch in pred.rounds)
    # Growth by 2**fanout per round, then the gap shrinks (fanout + 1)-fold per round.
    grow = math.log(distance + 2, 2**fanout) + 1
    shrink = math.log(distance + 2, fanout + 1) + 1
    assert len(pred.rounds) <= grow + shrink + 1


@given(lo=st.integers(0, 10**6), width=st.integers(0, 10**6), data=st.data())
def test_wide_last_true_finds_the_boundary(lo: int, width: int, data: st.DataObject) -> None:
    fanout = data.draw(st.integers(2, 16))
    answer = data.draw(st.integers(lo, lo + width))
    pred = Counted(answer)
    assert last_true(pred, lo, lo + width, fanout) == answer
    assert len(pred.rounds) <= math.log(width + 1, fanout + 1) + 2


def test_a_growing_set_gives_an_answer_that_was_true_at_some_point() -> None:
    """The journal grows while we search: each answer read as a boundary was one."""
    answers = iter(range(10, 10_000, 37))
    current = [10]

    def growing(versions: Sequence[int]) -> list[bool]:
        result = [v <= current[0] for v in versions]
        current[0] = next(answers)
        return result

    found = gallop(growing, 0, 4)
    assert 10 <= found <= current[0]
