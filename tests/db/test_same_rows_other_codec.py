"""Two tables holding the same rows under different key codecs share one connection.

Segments hold native keys, so such tables store the very same blocks; the
encoded keys of one codec were cached by block and served to the other table
(found by an adversarial probe): its lookups missed, its deletes were dropped
without a word, and a rewrite of a key stored a second record and a wrong
count, which a fresh connection then read.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import merkle

PAIRS = [("int", "reverse(int)"), ("tuple(str,int)", "tuple(str,reverse(int))")]


@pytest.fixture(params=["memory", "file"])
def uri(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return "memory://" if request.param == "memory" else str(tmp_path / "lake")


def _rows(spec: str) -> list[dict[str, object]]:
    if spec.startswith("tuple"):  # one b per a: the same order under both codecs
        return [{"a": s, "b": i, "v": 0} for i, s in enumerate("abcdefghij")]
    return [{"k": 5, "v": 0}]


def _key(spec: str) -> str | list[str]:
    return ["a", "b"] if spec.startswith("tuple") else "k"


def _one(spec: str) -> object:
    return ("c", 2) if spec.startswith("tuple") else 5


@pytest.fixture(params=PAIRS, ids=["int", "tuple"])
def pair(request: pytest.FixtureRequest, uri: str) -> Iterator[tuple[merkle.Database, str]]:
    first, second = request.param
    with merkle.connect(uri, create=True) as conn:
        db = conn.create_db("d")
        small = {"tablet_size_limit": 4, "patch_limit": 0, "patch_share": 0}
        for name, spec in (("first", first), ("second", second)):
            db = db.create_table(name, key=_key(spec), key_codec=spec, **small)
        rows = _rows(first)
        db = db.write("first", rows).write("second", rows).commit()
        assert db.get_records("first", [_one(first)])  # the first codec's keys now cached
        yield db, first


@pytest.mark.parametrize("flushed", [True, False], ids=["tablets", "pending"])
def test_a_lookup_finds_its_record(pair: tuple[merkle.Database, str], flushed: bool) -> None:
    db, spec = pair
    if not flushed:
        db = db.write("second", _rows(spec)[:1]).commit()
    key = _one(spec)
    assert list(db.get_records("second", [key])) == [key]


def test_a_delete_is_not_dropped(pair: tuple[merkle.Database, str], uri: str) -> None:
    db, spec = pair
    db = db.delete("second", [_one(spec)]).commit()
    expected = len(_rows(spec)) - 1
    assert db.describe_table("second")["count"] == expected
    if uri != "memory://":
        with merkle.connect(uri) as fresh:
            assert len(list(fresh.open_db("d").scan("second"))) == expected


def test_a_rewrite_keeps_one_record(pair: tuple[merkle.Database, str], uri: str) -> None:
    db, spec = pair
    row = dict(_rows(spec)[2 if spec.startswith("tuple") else 0], v=9)
    db = db.write("second", [row]).commit()
    expected = len(_rows(spec))
    assert db.describe_table("second")["count"] == expected
    assert len(list(db.scan("second"))) == expected
    if uri != "memory://":
        with merkle.connect(uri) as fresh:
            again = fresh.open_db("d")
            assert again.describe_table("second")["count"] == expected
            assert len(list(again.scan("second"))) == expected
