"""Keys given as an Arrow table are refused with advice that works.

``get_records(t, pa.table(...))`` printed the whole table twice and advised
"pass [<the table>] for one key" (an Arrow table is not iterable, so it took
the branch for one key); a pandas DataFrame already got the advice to pass
the key column's values, and so does an Arrow table or batch now.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

import merkle


@pytest.mark.parametrize(
    "keys",
    [pa.table({"k": [1, 2]}), pa.record_batch({"k": [1, 2]})],
    ids=["table", "batch"],
)
def test_keys_as_arrow_rows_get_the_advice_to_pass_the_key_column(keys: object) -> None:
    conn = merkle.connect("memory://")
    db = conn.create_db("d").create_table("t", key="k").write("t", [{"k": 1}]).commit()
    with pytest.raises(merkle.errors.UsageError, match="pass the key column's values") as e:
        db.get_records("t", keys)
    assert "for one key" not in str(e.value)
    assert db.get_records("t", pa.table({"k": [1, 2]})["k"]) == {1: {"k": 1}}
