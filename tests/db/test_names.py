"""Table and field names at the edges: a clear UsageError, never a raw exception.

Before: an unpaired surrogate in a table name (``create_table``, any read),
in a record's field name, in ``alter_schema``'s ``add`` or ``rename`` raised
Python's own ``UnicodeEncodeError`` from deep in pyarrow; a key field so
named was refused only at ``commit()``. A table name with a C1 control
character (``"a\\x85"``) was accepted although the rule says printable, and
an NFD name made a second table that looks like the NFC one (database and
tag names already refused both).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import pytest

import merkle
from merkle.errors import UsageError


@pytest.fixture
def db() -> Iterator[merkle.Database]:
    with merkle.connect("memory://") as conn:
        yield conn.create_db("d").create_table("t", key="k").write("t", [{"k": 1, "a": 2}])


SURROGATE = "\ud800"


@pytest.mark.parametrize(
    "call",
    [
        pytest.param(lambda db: db.create_table(SURROGATE, key="k"), id="create-table"),
        pytest.param(lambda db: db.get_records(SURROGATE, [1]), id="read-table"),
        pytest.param(lambda db: db.write("t", [{"k": 2, SURROGATE: 1}]), id="record-field"),
        pytest.param(lambda db: db.create_table("u", key=SURROGATE), id="key-field"),
        pytest.param(lambda db: db.create_table("u", key=["g", SURROGATE]), id="key-part"),
        pytest.param(lambda db: db.alter_schema("t", add={SURROGATE: pa.int8()}), id="add"),
        pytest.param(lambda db: db.alter_schema("t", rename={"a": SURROGATE}), id="rename"),
    ],
)
def test_an_unpaired_surrogate_in_a_name_is_a_usage_error(
    db: merkle.Database, call: Callable[[merkle.Database], Any]
) -> None:
    with pytest.raises(UsageError, match="unpaired surrogate"):
        call(db)
    assert db.commit().get_records("t", [1]) == {1: {"k": 1, "a": 2}}


def test_a_new_table_name_must_be_printable_and_nfc(db: merkle.Database) -> None:
    with pytest.raises(UsageError, match="control character"):
        db.create_table("a\x85", key="k")
    with pytest.raises(UsageError, match="normal form NFC: use 'é'"):
        db.create_table("e\u0301", key="k")
    made = db.create_table("é", key="k").write("é", [{"k": 1}])
    assert made.list_tables() == ["t", "é"]
    assert made.get_records("é", [1]) == {1: {"k": 1}}
