"""Rows already in the user's schema are returned as they are: the result must be the
table that rebuilding them column by column gives, schema and metadata included."""

from __future__ import annotations

import pyarrow as pa
import pytest

from merkle.tablets.conform import KeyLayout, present

ROWS = pa.table(
    {
        "id": pa.array([1, 2, 3], pa.int64()),
        "name": pa.array(["a", None, "c"]),
        "ts": pa.array([1, 2, None], pa.timestamp("us", tz="UTC")),
    }
)


def _rebuilt(raw: pa.Table, schema: pa.Schema, key: KeyLayout) -> pa.Table:
    """present() by its general path: every field named, so no shortcut applies."""
    return present(raw, schema, key, list(schema.names))


@pytest.mark.parametrize(
    "schema",
    [
        ROWS.schema,
        ROWS.schema.with_metadata({"owner": "ops"}),
        pa.schema(
            [
                ROWS.schema.field(0),
                ROWS.schema.field(1).with_metadata({"a": "b"}),
                ROWS.schema.field(2),
            ]
        ),
        pa.schema([ROWS.schema.field(0), ROWS.schema.field(2), ROWS.schema.field(1)]),
        pa.schema([*ROWS.schema, pa.field("extra", pa.float64())]),
        pa.schema([ROWS.schema.field(0), ROWS.schema.field(1), pa.field("ts", pa.timestamp("us"))]),
    ],
    ids=["same", "schema-metadata", "field-metadata", "reordered", "extra-field", "other-type"],
)
def test_present_returns_what_the_rebuild_gives(schema: pa.Schema) -> None:
    key = KeyLayout.of("id")
    got = present(ROWS, schema, key)
    want = _rebuilt(ROWS, schema, key)
    assert got.equals(want, check_metadata=True)
    assert got.schema.equals(want.schema, check_metadata=True)
