"""Diff and merge see a float's bits: -0.0 is a change from 0.0, NaN is no change from NaN.

Arrow compares floats as numbers (-0.0 equals 0.0): a merge took a change
of sign on their side for no change and kept ours, and a commit of it alone
was dropped as "no change" (tests/db/test_api.py).
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import pyarrow as pa
import pytest

import merkle


@pytest.fixture
def conn() -> Iterator[merkle.Connection]:
    with merkle.connect("memory://") as c:
        yield c


def _sign(value: float) -> float:
    return math.copysign(1.0, value)


def test_a_change_of_sign_on_their_side_is_merged(conn: merkle.Connection) -> None:
    main = conn.create_db("main").create_table("a", key="k")
    main = main.write("a", pa.table({"k": [1, 2], "v": [0.0, 2.0]})).commit()
    dev = conn.create_db("dev", root=main)
    dev.write("a", pa.table({"k": [1], "v": [-0.0]})).commit()
    main.write("a", pa.table({"k": [2], "v": [3.0]})).commit()
    merged = conn.merge("dev", "main")
    rows = merged.get_records("a", [1, 2])
    assert _sign(rows[1]["v"]) == -1.0
    assert rows[2]["v"] == 3.0


def test_diff_counts_a_change_of_sign_and_not_an_equal_nan(conn: merkle.Connection) -> None:
    db = conn.create_db("main").create_table("a", key="k")
    old = db.write("a", pa.table({"k": [1, 2], "v": [0.0, float("nan")]})).commit()
    new = old.write("a", pa.table({"k": [1, 2], "v": [-0.0, float("nan")]})).commit()
    counts = new.diff(old)["a"].counts()
    assert (counts.inserted, counts.updated, counts.deleted) == (0, 1, 0)
    assert [r["key"] for r in new.diff(old)["a"].records()] == [1]
