"""Searches over versions for a monotone predicate: the head probe and time lookup.

The journal is a run of slots ``0..head``; a predicate such as "slot ``v``
exists" or "entry ``v`` is at or before time ``t``" is true up to some
version and false after it. These helpers find that boundary with few
rounds of probes: galloping (exponential, then a search of the last gap) when
only a lower bound is known, so finding the head costs O(log distance) reads
whatever the history's length; a search between bounds otherwise.

Probes are asked in batches of up to ``fanout`` versions, which the caller
may answer concurrently (S3: one round trip per batch): with ``fanout`` k a
round narrows a gap k+1 times instead of 2, so rounds fall from log2 to
log_(k+1). With ``fanout=1`` these are the classic sequential searches.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

__all__ = ["BatchPredicate", "gallop", "last_true"]

#: Answers a monotone predicate for several versions (in ascending order) at once.
BatchPredicate = Callable[[Sequence[int]], Sequence[bool]]


def _spread(lo: int, hi: int, fanout: int) -> list[int]:
    """Up to ``fanout`` distinct, evenly spaced versions in ``(lo, hi]``, ascending."""
    width = hi - lo
    if width <= fanout:
        return list(range(lo + 1, hi + 1))
    return [lo + -(-(i * width) // (fanout + 1)) for i in range(1, fanout + 1)]


def _split(points: Sequence[int], answers: Sequence[bool]) -> tuple[int | None, int | None]:
    """The last point answered True before the first False, and that first False."""
    good = bad = None
    for point, ok in zip(points, answers, strict=True):
        if not ok:
            bad = point
            break
        good = point
    return good, bad


def last_true(test: BatchPredicate, lo: int, hi: int, fanout: int = 1) -> int:
    """The largest ``v`` in ``[lo, hi]`` for which the predicate holds, knowing it holds at ``lo``.

    ``lo`` itself is never probed. With ``fanout=1`` this is binary search,
    about ``log2(hi - lo)`` probes.
    """
    while lo < hi:
        points = _spread(lo, hi, fanout)
        good, bad = _split(points, test(points))
        if good is not None:
            lo = good
        if bad is not None:
            hi = bad - 1
    return lo


def gallop(test: BatchPredicate, start: int, fanout: int = 1) -> int:
    """The largest ``v >= start`` for which the predicate holds, knowing it holds at ``start``.

    Probes ever larger steps past ``start`` (``start + 1, + 3, + 7, ...`` with
    ``fanout=1``) until one fails, then searches the last gap: about
    ``2 * log2(d) + 1`` probes when the answer is ``start + d``, and one
    when it is ``start``.
    """
    base, step = start, 1
    while True:
        points = [base + step * (1 << i) for i in range(fanout)]
        good, bad = _split(points, test(points))
        if good is not None:
            base = good
        if bad is not None:
            return last_true(test, base, bad - 1, fanout)
        step <<= fanout
