"""A struct value whose members are not the struct field's is one SchemaError, however given.

Found in a Spark probe: Spark marks every member of a ``named_struct`` NOT
NULL, and a struct column with such members written into a struct field
that lacks one of them (an extra or a renamed member) failed with pyarrow's
raw ``ArrowTypeError: struct fields don't match: non-nullable out field 'b'
not found``, where nullable members gave a SchemaError. Each now names the
table, the field, the member and the record's key, as records do; so does a
value without a member the field marks NOT NULL (pyarrow stored a null there).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

import merkle
from merkle.errors import SchemaError


def _struct(names: str, *, nullable: bool) -> pa.StructType:
    return pa.struct([pa.field(n, pa.int64(), nullable=nullable) for n in names])


CASES = [
    ("a", _struct("ab", nullable=False), {"a": 1, "b": 2}, "member 'b'"),
    ("a", _struct("b", nullable=False), {"b": 1}, "member 'b'"),
    ("a", _struct("ab", nullable=True), {"a": 1, "b": 2}, "member 'b'"),
    ("a", pa.list_(_struct("ab", nullable=False)), [{"a": 1, "b": 2}], "member 'b'"),
    ("A", _struct("b", nullable=False), {"b": 1}, "member 'b'"),
    ("A", _struct("a", nullable=True), {"a": None}, "member 'a'.*NOT NULL"),
    ("A", None, {"a": None}, "member 'a'.*NOT NULL"),
]


@pytest.mark.parametrize(("members", "kind", "value", "says"), CASES)
def test_a_struct_of_other_members_is_a_schema_error(
    members: str, kind: pa.DataType | None, value: Any, says: str
) -> None:
    """``members``: the field's (lower case: nullable, upper: NOT NULL, as Spark makes
    them); ``kind`` None: the value is written as a record."""
    field_type = _struct(members.lower(), nullable=members.islower())
    stored = [{m.lower(): 1 for m in members}]
    if kind is not None and pa.types.is_list(kind):
        field_type, stored = pa.list_(field_type), [stored]
    conn = merkle.connect("memory://")
    first = pa.table({"k": [1], "st": pa.array(stored, field_type)})
    db = conn.create_db("d").create_table("t", key="k").write("t", first)
    data: Any = (
        [{"k": 2, "st": value}]
        if kind is None
        else pa.table({"k": [2, 3], "st": pa.array([value, None], kind)})
    )
    with pytest.raises(SchemaError, match=f"table 't'.*field 'st'.*key 2.*{says}"):
        db.write("t", data)
    assert db.to_arrow("t").num_rows == 1
