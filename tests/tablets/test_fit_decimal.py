"""Arrow values a field cannot hold, though an unchecked cast and back keeps them.

A cast without Arrow's checks can wrap a value and unwrap it again: a decimal
beyond the field's precision keeps its digits (123456789012.5 into
decimal(10, 2)), -1 into uint64 becomes 2**64 - 1 and casts back to -1. Such a
value must be a SchemaError naming the field, with nothing committed: stored,
it made every later read of the table fail.
"""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import merkle
from merkle.errors import SchemaError

CASES = [
    pytest.param(
        pa.decimal128(20, 1),
        pa.decimal128(10, 2),
        Decimal("12.5"),
        Decimal("123456789012.5"),
        id="decimal-precision",
    ),
    pytest.param(
        pa.decimal256(40, 0),
        pa.decimal128(38, 0),
        Decimal(10**20),
        Decimal(10**38),
        id="decimal256-into-decimal128",
    ),
    pytest.param(pa.int64(), pa.uint64(), 5, -1, id="negative-into-unsigned"),
    pytest.param(pa.uint64(), pa.int64(), 7, 2**63, id="unsigned-beyond-int64"),
    pytest.param(
        pa.list_(pa.decimal128(20, 1)),
        pa.list_(pa.decimal128(10, 2)),
        [Decimal("1.5")],
        [Decimal("1.5"), Decimal("123456789012.5")],
        id="decimal-in-list",
    ),
    pytest.param(
        pa.struct([("n", pa.int64())]),
        pa.struct([("n", pa.uint64())]),
        {"n": 3},
        {"n": -1},
        id="negative-in-struct",
    ),
]


@pytest.mark.parametrize(("source", "field", "fits", "too_big"), CASES)
def test_value_beyond_the_field_is_refused(
    tmp_path: Path, source: pa.DataType, field: pa.DataType, fits: Any, too_big: Any
) -> None:
    """A value that fits is stored exactly; one that does not is a SchemaError naming
    the field and the record, and the table stays as it was, readable."""
    schema = pa.schema([("k", pa.int64()), ("v", field)])
    with merkle.connect(tmp_path.joinpath("lake").as_uri()) as conn:
        db = conn.create_db("d").create_table("t", key="k", schema=schema).commit()
        good = pa.table({"k": pa.array([1], pa.int64()), "v": pa.array([fits], source)})
        db = db.write("t", good).commit()
        bad = pa.table({"k": pa.array([2], pa.int64()), "v": pa.array([too_big], source)})
        with pytest.raises(SchemaError, match=r"field 'v' is .*record with key 2 does not fit"):
            db.write("t", bad)
        reopened = conn.open_db("d")
        assert reopened.version == db.version
        assert reopened.to_arrow("t").to_pylist() == [{"k": 1, "v": fits}]
