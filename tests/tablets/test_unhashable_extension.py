"""A user's extension type that Python cannot hash is written and read like any other.

pyarrow leaves a ``pa.ExtensionType`` subclass unhashable unless it defines
``__hash__`` (its own examples do not); caches keyed by Arrow type made every
write of such a field, at the top or nested, fail with ``TypeError:
unhashable type``.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import pyarrow as pa
import pytest

import merkle


class _Cents(pa.ExtensionType):
    """int64 cents, as a user would register it (no ``__hash__``)."""

    def __init__(self) -> None:
        super().__init__(pa.int64(), "merkle.test.unhashable_cents")

    def __arrow_ext_serialize__(self) -> bytes:
        return b""

    @classmethod
    def __arrow_ext_deserialize__(cls, storage_type: pa.DataType, serialized: bytes) -> _Cents:
        return cls()


with contextlib.suppress(pa.ArrowKeyError):  # registered by an earlier import of this module
    pa.register_extension_type(_Cents())


def test_the_type_is_unhashable() -> None:
    with pytest.raises(TypeError):
        hash(_Cents())


@pytest.mark.parametrize(
    ("kind", "value"),
    [(_Cents(), 125), (pa.list_(_Cents()), [1, 2]), (pa.struct([("c", _Cents())]), {"c": 7})],
    ids=["top", "list", "struct"],
)
def test_records_of_an_unhashable_extension_type_round_trip(
    tmp_path: Path, kind: pa.DataType, value: object
) -> None:
    schema = pa.schema([("k", pa.int64()), ("v", kind), ("o", pa.int64())])
    with merkle.connect(tmp_path.as_uri()) as conn:
        db = conn.create_db("d").create_table("t", key="k", schema=schema)
        db = db.write("t", [{"k": 1, "v": value}, {"k": 2, "o": 5}]).commit()
        db = db.upsert("t", [{"k": 2, "v": value}, {"k": 1, "o": 9}]).commit()
        db = db.update("t", {1: {"o": 10}}).commit()
        assert db.get_records("t", [1, 2]) == {
            1: {"k": 1, "v": value, "o": 10},
            2: {"k": 2, "v": value, "o": 5},
        }
        assert db.to_arrow("t").schema.field("v").type == kind
