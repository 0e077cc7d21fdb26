"""Database names: bad ones are a UsageError everywhere a name enters the ref manager."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from merkle.errors import UsageError
from merkle.refs import LeaseManager, RefManager, check_db_name
from merkle.storage import open_store

from .helpers import root

GOOD = ["shop", "shop-dev", "Sales 2024", "a.b", "données", "日本", "x" * 255, "HEAD", "_", "0"]
BAD = {
    "": "empty",
    "/": "'/'",
    "a/b": "'/'",
    ".": "'.'",
    "..": "'.'",
    ".hidden": "'.'",
    "a\\b": "backslash",
    "a\x00b": "control",
    "tab\there": "control",
    "new\nline": "control",
    "del\x7f": "control",
    "c1\x85": "control",
    " lead": "whitespace",
    "trail ": "whitespace",
    "x" * 256: "256 bytes",
    "é" * 128: "256 bytes",
    "e\u0301": "NFC",
    "\ud800": "surrogate",
}


@pytest.mark.parametrize("name", GOOD)
def test_good_names_pass(name: str) -> None:
    assert check_db_name(name) == name


@pytest.mark.parametrize(("name", "reason"), list(BAD.items()))
def test_bad_names_say_why_and_what_is_allowed(name: str, reason: str) -> None:
    with pytest.raises(UsageError, match="invalid database name") as info:
        check_db_name(name)
    message = str(info.value)
    assert reason in message
    assert "names are at most 255 UTF-8 bytes" in message


@pytest.mark.parametrize("name", [None, 3, b"shop"])
def test_non_string_names_are_usage_errors(name: object) -> None:
    with pytest.raises(UsageError, match="must be a string"):
        check_db_name(name)


@pytest.mark.parametrize("name", ["", "/", "..", "a\x00"])
def test_every_entry_point_checks_names(name: str) -> None:
    store = open_store("memory://")
    refs = RefManager(store)
    refs.commit("ok", None, root(1))
    calls: list[Callable[[], object]] = [
        lambda: refs.head(name),
        lambda: refs.commit(name, None, root(1)),
        lambda: refs.get(name, 0),
        lambda: refs.history(name),
        lambda: refs.drop(name),
        lambda: refs.clone("ok", name),
        lambda: refs.clone(name, "ok2"),
        lambda: refs.trim(name, 1),
        lambda: refs.oldest_version(name),
        lambda: LeaseManager(store).acquire_reader(name, 0, root(1), 600),
    ]
    for call in calls:
        with pytest.raises(UsageError, match="invalid database name"):
            call()
    assert all(info.key.startswith("refs/ok/") for info in store.list()), "wrote for a bad name"


def test_junk_directories_under_refs_are_not_databases() -> None:
    store = open_store("memory://")
    refs = RefManager(store)
    refs.commit("real", None, root(1))
    store.put("refs/has space /00000000000000000000", b"junk")  # invalid name: skipped
    store.put("refs/empty/notes.txt", b"junk")  # valid name, no entries: not a db
    assert refs.list_dbs() == ["real"]
