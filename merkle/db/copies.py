"""Copies of mutable values that cross the API: the caller's input, and stored values read.

A ``Database`` value is immutable, and what an operation keeps of its input is
copied when it is called (doc/api.md). Both promises break on a dict shared
with the caller: one the caller passed (``create_db(metadata=m)``, then an edit
of ``m``) or one a read handed out (``db.metadata``, which is the decoded root
that every value of the version on the connection shares). Either edit would
change values already made, and the next commit would store it. So inputs
are kept as :func:`snapshot` copies, and reads of stored metadata give one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["snapshot"]


def snapshot(value: Any) -> Any:
    """``value`` with every dict, list, set, bytearray and NumPy array in it copied: what an
    operation keeps of the caller's input, so that a caller reusing its dicts and lists
    after the call cannot change what a replay writes, and what a read gives of a stored
    value, so that editing the result cannot change the value. Other values (numbers,
    strings, bytes, CIDs, Arrow data) are immutable and kept as they are; a DataFrame
    arrives here as Arrow, copied where it shared the frame's memory
    (:mod:`merkle.db.frames`)."""
    if isinstance(value, Mapping):
        return {k: snapshot(v) for k, v in value.items()}
    if isinstance(value, list):
        return [snapshot(v) for v in value]
    if isinstance(value, tuple):  # a composite key, a namedtuple: kept unless it holds a list
        copied = [snapshot(v) for v in value]
        return value if all(a is b for a, b in zip(copied, value, strict=True)) else tuple(copied)
    if isinstance(value, set):
        return {snapshot(v) for v in value}
    if isinstance(value, bytearray):
        return bytearray(value)
    if isinstance(value, np.ndarray):
        return value.copy()
    return value
