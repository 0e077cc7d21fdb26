"""``scan`` with every option, against a model, over tablets, pending batches and buffered writes.

The table is built with small limits so its records are spread over many
tablets (a three-level tree), several pending batches and, on the
uncommitted value, buffered writes and deletes: a scan must merge them all.
Every combination of options is compared with :func:`model_scan`.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from conftest import Lake

import merkle
from merkle.errors import UsageError

from .conftest import Connect
from .helpers import model_scan

KEY = "k"


def _record(k: int, round_: int) -> dict[str, Any]:
    record: dict[str, Any] = {KEY: k, "a": k * 10 + round_, "b": f"b{k}"}
    if k % 3:
        record["c"] = [k, {"r": round_}]
    if k % 5 == 0:
        record["b"] = k  # mixed types in one field
    return record


def _build(conn: merkle.Connection) -> tuple[merkle.Database, dict[int, dict[str, Any]]]:
    """An uncommitted value over a committed table with tablets and pending batches."""
    model: dict[int, dict[str, Any]] = {}
    db = conn.create_db("scan").create_table(
        "t",
        key=KEY,
        key_codec="int",
        schema_free=True,  # the record model: field "b" mixes types
        families={"fam": {"a"}},
        tablet_size_limit=5,
        branching_factor=3,
        patch_limit=30,
    )

    def write(db: merkle.Database, keys: list[int], round_: int) -> merkle.Database:
        records = [_record(k, round_) for k in keys]
        model.update({r[KEY]: r for r in records})
        return db.write("t", records)

    def delete(db: merkle.Database, keys: list[int]) -> merkle.Database:
        for k in keys:
            model.pop(k, None)
        return db.delete("t", keys)

    db = write(db, list(range(0, 200, 2)), 0).commit()  # above the patch limit: tablets
    db = write(db, [1, 3, 99, 150, 201], 1).commit()  # pending
    db = delete(db, [0, 50, 51, 198]).commit()  # pending tombstones
    db = write(db, [5, 7, 100], 2).commit()
    db = write(db, [-4, 77, 150], 3)  # buffered, uncommitted
    db = delete(db, [2, 99, 1000])
    return db, model


def _cases() -> list[dict[str, Any]]:
    fixed: list[dict[str, Any]] = [
        {},
        {"reverse": True},
        {"fields": ["a"]},
        {"fields": ["b", "c"], "reverse": True},
        {"fields": []},
        {"from_pk": 10, "to_pk": 20},
        {"from_pk": 11, "to_pk": 19},  # bounds between keys
        {"from_pk": 20, "to_pk": 10},  # empty
        {"from_pk": 150, "to_pk": 150},
        {"from_pk": -1000},
        {"to_pk": 1000},
        {"from_pk": 1000},
        {"to_pk": -1000},
        {"from_index": 0, "to_index": 0},
        {"from_index": 3, "to_index": 9},
        {"from_index": 9, "to_index": 3},
        {"from_index": 90},
        {"to_index": 500},
        {"from_index": 500},
        {"offset": 0, "limit": 0},
        {"offset": 7},
        {"offset": 1000},
        {"limit": 1},
        {"limit": 1000},
        {"offset": 5, "limit": 10, "reverse": True},
        {"from_pk": 20, "to_pk": 120, "from_index": 15, "to_index": 40, "offset": 2, "limit": 5},
        {"from_pk": 20, "to_pk": 120, "from_index": 15, "offset": 2, "limit": 5, "reverse": True},
        {"from_pk": 100, "from_index": 10, "to_index": 60},  # the key bound wins
        {"to_pk": 30, "from_index": 10, "to_index": 60},  # the index bound wins at the start
    ]
    rng = random.Random(5)
    for _ in range(60):
        case: dict[str, Any] = {}
        if rng.random() < 0.4:
            case["from_pk"] = rng.randint(-10, 210)
        if rng.random() < 0.4:
            case["to_pk"] = rng.randint(-10, 210)
        if rng.random() < 0.3:
            case["from_index"] = rng.randint(0, 110)
        if rng.random() < 0.3:
            case["to_index"] = rng.randint(0, 110)
        if rng.random() < 0.4:
            case["offset"] = rng.randint(0, 30)
        if rng.random() < 0.5:
            case["limit"] = rng.randint(0, 40)
        if rng.random() < 0.5:
            case["reverse"] = True
        if rng.random() < 0.3:
            case["fields"] = rng.sample(["a", "b", "c"], rng.randint(1, 2))
        fixed.append(case)
    return fixed


CASES = _cases()


def test_scan_options_match_the_model(
    lake: Lake, conn: merkle.Connection, connect: Connect
) -> None:
    db, model = _build(conn)
    described = db.describe_table("t")
    assert described["tablets"] > 9  # a tree with more than one level of index
    assert described["patch"]["count"] > 0  # pending batches and buffered changes too
    for case in CASES:
        got = list(db.scan("t", **case))
        assert got == model_scan(model, KEY, **case), case
    # The same after commit, through another connection.
    db.commit()
    head = connect(lake).open_db("scan")
    for case in CASES:
        got = list(head.scan("t", **case))
        assert got == model_scan(model, KEY, **case), case


def test_scan_is_lazy_and_restartable(conn: merkle.Connection) -> None:
    db, model = _build(conn)
    first = db.scan("t")
    second = db.scan("t")
    assert next(first) == model[min(model)]
    assert list(second) == model_scan(model, KEY)
    assert [next(first)[KEY]] == [sorted(model)[1]]


def test_scan_with_string_keys(conn: merkle.Connection) -> None:
    names = ["pear", "apple", "fig", "apples", "", "banana", "zz", "a"]
    db = conn.create_db("scan").create_table("t", key="name", tablet_size_limit=2, patch_limit=3)
    db = db.write("t", [{"name": n, "len": len(n)} for n in names]).commit()
    model = {n: {"name": n, "len": len(n)} for n in names}
    cases: list[dict[str, Any]] = [
        {},
        {"from_pk": "apple", "to_pk": "b"},
        {"from_pk": "apples", "reverse": True},
        {"to_pk": "apple", "limit": 2},
        {"from_pk": "", "to_pk": ""},
        {"from_index": 1, "to_index": 4, "offset": 1, "reverse": True},
    ]
    for case in cases:
        assert list(db.scan("t", **case)) == model_scan(model, "name", **case), case


def test_empty_table_scans_empty(conn: merkle.Connection) -> None:
    db = conn.create_db("scan").create_table("t", key="k")
    assert list(db.scan("t")) == []
    assert list(db.scan("t", reverse=True, limit=3)) == []
    assert db.to_arrow("t").num_rows == 0


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("offset", -1),
        ("limit", -1),
        ("from_index", -2),
        ("to_index", "3"),
        ("limit", 1.5),
        ("fields", "a"),
    ],
)
def test_bad_scan_options_are_usage_errors(
    conn: merkle.Connection, option: str, value: Any
) -> None:
    db = conn.create_db("scan").create_table("t", key="k").write("t", [{"k": 1}])
    with pytest.raises(UsageError, match=option if option != "fields" else "field"):
        list(db.scan("t", **{option: value}))
