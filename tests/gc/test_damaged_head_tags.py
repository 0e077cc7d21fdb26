"""A version a tag keeps opens while the database's head entry is damaged.

doc/operations.md ("Damaged lake objects") says to clone a version worth
keeping before dropping a database whose head entry is damaged. A version
retention had trimmed but a tag keeps could not be opened then (by version
or by tag): the "removed by retention" error looked up the oldest version
kept through the head search, which refused the damaged head, so the tag was
never asked (a regression probe found it).
"""

from __future__ import annotations

import pytest
from conftest import Lake
from gc_helpers import connect

from merkle.errors import NotFoundError
from merkle.refs import JournalEntryDamagedError
from merkle.refs.entry import entry_key


def test_a_tag_kept_version_opens_and_clones_below_a_damaged_head(lake: Lake) -> None:
    with connect(lake) as conn:
        db = conn.create_db("a").create_table("t", key="k").commit()
        for i in range(5):
            db = db.write("t", [{"k": i}]).commit()
        conn.tag("a", "keep", version=3)
        conn.refs.trim("a", 5)  # versions 0-4 leave the journal; the tag keeps 3
        conn.store.put(entry_key("a", db.version), b"\x01")  # bit rot in the head entry
    with connect(lake) as fresh:
        with pytest.raises(JournalEntryDamagedError):
            fresh.open_db("a")
        assert fresh.open_db("a", version=db.version - 1).to_arrow("t").num_rows == 4
        assert fresh.open_db("a", tag="keep").to_arrow("t").num_rows == 2
        kept = fresh.open_db("a", version=3)
        assert kept.to_arrow("t").num_rows == 2
        fresh.create_db("a-kept", root=kept)
        assert fresh.open_db("a-kept").to_arrow("t").num_rows == 2
        with pytest.raises(NotFoundError, match="removed by retention"):
            fresh.open_db("a", version=1)  # trimmed and kept by nothing
