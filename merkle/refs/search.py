"""Searches over versions for a monotone predicate: the head probe and time lookup.

The journal is a run of slots ``0..head``; a predicate such as "slot ``v``
exists" or "entry ``v`` is at or before time ``t``" is true up to some
version and false after it. These helpers find that boundary with few
probes: galloping (exponential then binary) when only a lower bound is
known, so finding the head costs O(log distance) reads whatever the history's
length; plain binary search when both bounds are.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["gallop", "last_true"]


def last_true(pred: Callable[[int], bool], lo: int, hi: int) -> int:
    """The largest ``v`` in ``[lo, hi]`` with ``pred(v)``, knowing ``pred(lo)`` holds.

    ``pred`` must be true then false over the range; ``pred(lo)`` is not
    called again. Costs about ``log2(hi - lo)`` calls.
    """
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if pred(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def gallop(pred: Callable[[int], bool], start: int) -> int:
    """The largest ``v >= start`` with ``pred(v)``, knowing ``pred(start)`` holds.

    Probes ``start + 1, start + 2, start + 4, ...`` until one fails, then
    binary-searches the last gap: about ``2 * log2(d) + 1`` calls when the
    answer is ``start + d``, and a single call when it is ``start``.
    """
    good = start
    step = 1
    while pred(start + step):
        good = start + step
        step *= 2
    return last_true(pred, good, start + step - 1)
