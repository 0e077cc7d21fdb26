"""A plain lake path holding a control character opens the lake at that path.

A plain path became ``file://`` + the path, and ``urlsplit`` drops tabs and
newlines without a word: ``merkle.connect("/x/a\\tb")`` opened, and wrote
into, the lake at ``/x/ab``. Control characters are now percent-encoded in the
URI made of a path (as ``%``, ``?`` and ``#`` were), so the path given is the
path opened, and the store's URI opens it again.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import merkle
from merkle.storage import open_store
from merkle.storage.base import quote_location


@pytest.mark.parametrize("name", ["a\tb", "a\nb", "a\rb", "a\x7fb", "a\x01b"])
def test_a_path_with_a_control_character_is_the_lake_opened(tmp_path: Path, name: str) -> None:
    other = tmp_path / "ab"
    with merkle.connect(str(other)) as conn:
        conn.create_db("prod")
    mine = tmp_path / name
    with merkle.connect(str(mine)) as conn:
        conn.create_db("mine")
        again = conn.uri
    assert mine.is_dir()
    with merkle.connect(str(other)) as conn:
        assert conn.list_dbs() == ["prod"]
    with merkle.connect(again) as conn:  # the store's own URI opens the same lake
        assert conn.list_dbs() == ["mine"]


def test_quote_location_keeps_ordinary_paths_readable() -> None:
    assert quote_location("/data/lake one/é") == "/data/lake one/é"
    assert quote_location("/a%b?c#d\te") == "/a%25b%3Fc%23d%09e"


def test_a_uri_with_a_control_character_is_still_refused(tmp_path: Path) -> None:
    with pytest.raises(merkle.errors.UsageError, match="control character"):
        open_store(f"file://{tmp_path}/a\tb")
