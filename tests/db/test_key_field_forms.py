"""A record's key field holding its own key in another form, as the key codec sees it.

``update({naive: {"t": aware_same_instant}})`` was refused as "another key",
though the timestamp codec takes a naive and an aware datetime of one instant
as one key (get_records, delete and writes agree); and ``{1: {"k": True}}``
was taken as key 1's own value, though a bool is no key. Writes of key ->
dict and merge resolvers share the check.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

import merkle
from merkle.db.inputs import same_value

NAIVE = datetime(2024, 1, 1)


@pytest.mark.parametrize(
    "given",
    [
        NAIVE.replace(tzinfo=UTC),
        (NAIVE + timedelta(hours=2)).replace(tzinfo=timezone(timedelta(hours=2))),
    ],
    ids=["utc", "plus-two"],
)
def test_an_update_naming_its_key_in_the_other_datetime_form_is_taken(given: datetime) -> None:
    conn = merkle.connect("memory://")
    db = conn.create_db("d").create_table("ts", key="t").write("ts", [{"t": NAIVE, "v": 1}])
    db = db.commit().update("ts", {NAIVE: {"t": given, "v": 3}}).commit()
    assert list(db.scan("ts")) == [{"t": NAIVE, "v": 3}]


def test_another_instant_is_still_another_key() -> None:
    conn = merkle.connect("memory://")
    db = conn.create_db("d").create_table("ts", key="t").write("ts", [{"t": NAIVE, "v": 1}])
    later = (NAIVE + timedelta(seconds=1)).replace(tzinfo=UTC)
    with pytest.raises(merkle.errors.UsageError, match="another key"):
        db.commit().update("ts", {NAIVE: {"t": later}})


def test_a_bool_is_not_the_key_one() -> None:
    conn = merkle.connect("memory://")
    db = conn.create_db("d").create_table("t", key="k").write("t", [{"k": 1, "v": 1}]).commit()
    with pytest.raises(merkle.errors.UsageError, match="another key"):
        db.update("t", {1: {"k": True}})
    with pytest.raises(merkle.errors.UsageError, match="must agree"):
        db.write("t", {1: {"k": True, "v": 2}})


def test_same_value_compares_as_keys() -> None:
    assert same_value(NAIVE, NAIVE.replace(tzinfo=UTC))
    assert not same_value(NAIVE, NAIVE.replace(tzinfo=timezone(timedelta(hours=1))))
    assert not same_value(1, True)
    assert same_value(True, True)
    assert same_value(1, 1.0)
