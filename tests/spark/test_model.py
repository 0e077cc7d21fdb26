"""One table against a dict model, changed through Python and through Spark, read by Spark.

Random Python writes, deletes and compactions (so pending batches, flushes
and tablets of every shape happen, with tiny limits), random Spark writes
and deletes, and Spark reads with random key filters and projections. Every
read equals the model and ``db.to_arrow``; the tree passes the validator
after every step. Few examples, each of a few steps: Spark is slow to call.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

import merkle
import merkle.spark
from merkle.db.bulk import committed_table
from merkle.tablets import validate

pytestmark = pytest.mark.slow

KEYS = st.integers(min_value=0, max_value=60)
PY_VALUES = st.one_of(st.none(), st.integers(-3, 3), st.text(max_size=2), st.booleans())
PY_RECORDS = st.lists(
    st.fixed_dictionaries({"k": KEYS}, optional={"a": PY_VALUES, "b": st.text(max_size=2)}),
    min_size=1,
    max_size=15,
)
SPARK_RECORDS = st.lists(
    st.tuples(
        KEYS, st.one_of(st.none(), st.integers(-3, 3)), st.one_of(st.none(), st.text(max_size=2))
    ),
    min_size=1,
    max_size=15,
)
FILTERS = st.one_of(
    st.none(),
    st.builds(lambda a: f"k = {a}", KEYS),
    st.builds(lambda a: f"k < {a}", KEYS),
    st.builds(lambda a: f"k > {a}", KEYS),
    st.builds(lambda a, b: f"k >= {a} AND k <= {b}", KEYS, KEYS),
    st.builds(lambda a, b: f"k BETWEEN {a} AND {b}", KEYS, KEYS),
    st.builds(
        lambda ks: f"k IN ({', '.join(map(str, ks))})", st.lists(KEYS, min_size=1, max_size=4)
    ),
)


def _keep(where: str | None, k: int) -> bool:
    if where is None:
        return True
    if " IN " in where:
        return k in {int(v) for v in where.split("(")[1].rstrip(")").split(",")}
    expr = where.replace(" = ", " == ").replace("AND", "and")
    if "BETWEEN" in expr:
        lo, hi = expr.split("BETWEEN")[1].split("and")
        return int(lo) <= k <= int(hi)
    return bool(eval(expr, {}, {"k": k}))


def _plain(value: Any) -> Any:
    return value.toPython() if hasattr(value, "toPython") else value


class SparkModel(RuleBasedStateMachine):
    spark: Any = None

    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="merkle-spark-model-")
        self.uri = (Path(self.dir) / "lake").as_uri()
        self.conn = merkle.connect(self.uri)
        db = self.conn.create_db("m").create_table(
            "t",
            key="k",
            tablet_size_limit=5,
            patch_limit=8,
            patch_share=30,
            branching_factor=4,
            schema_free=True,  # the record model: any value in any field
        )
        db.commit()
        self.model: dict[int, dict[str, Any]] = {}

    def teardown(self) -> None:
        self.conn.close()

    def _db(self) -> merkle.Database:
        return self.conn.open_db("m")

    @rule(records=PY_RECORDS)
    def python_write(self, records: list[dict[str, Any]]) -> None:
        self._db().write("t", records).commit()
        for record in records:
            self.model[record["k"]] = {f: v for f, v in record.items() if v is not None}

    @rule(keys=st.lists(KEYS, min_size=1, max_size=10))
    def python_delete(self, keys: list[int]) -> None:
        self._db().delete("t", keys).commit()
        for k in keys:
            self.model.pop(k, None)

    @rule()
    def python_compact(self) -> None:
        self._db().compact("t").commit()

    @rule(rows=SPARK_RECORDS)
    def spark_write(self, rows: list[tuple[int, int | None, str | None]]) -> None:
        last = {k: (k, a, b) for k, a, b in rows}  # Spark rows have no order: one per key
        df = self.spark.createDataFrame(list(last.values()), "k long, a long, b string")
        merkle.spark.write(df.repartition(2), self.uri, "m", "t")
        for k, a, b in last.values():
            self.model[k] = {f: v for f, v in {"k": k, "a": a, "b": b}.items() if v is not None}

    @rule(keys=st.lists(KEYS, min_size=1, max_size=10))
    def spark_delete(self, keys: list[int]) -> None:
        df = self.spark.createDataFrame([(k,) for k in keys], "k long")
        merkle.spark.delete(self.spark, self.uri, "m", "t", df)
        for k in keys:
            self.model.pop(k, None)

    @rule(where=FILTERS, fields=st.sampled_from([None, "a", "b", "a,b"]))
    def spark_read(self, where: str | None, fields: str | None) -> None:
        db = self._db()
        if committed_table(db, "t").codec is None:
            return
        read = self.spark.read.format("merkle").option("lake", self.uri).option("db", "m")
        read = read.option("table", "t")
        if fields is not None:
            read = read.option("fields", fields)
        failed: Exception | None = None
        try:
            df = read.load()
        except Exception as exc:  # a projection on a field no segment holds
            failed = exc
        if failed is not None:  # a projection on a field the table's schema lacks
            missing = re.search(r"option 'fields' names '(\w+)', which table", str(failed))
            assert missing is not None, failed
            assert not any(missing.group(1) in record for record in self.model.values())
            return
        if where is not None:
            df = df.where(where)
        got = sorted(
            (
                {c: _plain(v) for c, v in row.asDict().items() if v is not None}
                for row in df.collect()
            ),
            key=lambda r: r["k"],
        )
        wanted = None if fields is None else {"k", *fields.split(",")}
        expected = [
            {f: v for f, v in self.model[k].items() if wanted is None or f in wanted}
            for k in sorted(self.model)
            if _keep(where, k)
        ]
        assert got == expected
        listed = None if fields is None else fields.split(",")
        python = [row for row in db.scan("t", fields=listed) if _keep(where, row["k"])]
        assert got == python

    @invariant()
    def valid_tree(self) -> None:
        validate(self.conn.tables, committed_table(self._db(), "t"))


def test_spark_model(spark: Any) -> None:
    SparkModel.spark = spark
    run_state_machine_as_test(
        SparkModel,
        settings=settings(
            max_examples=6,
            stateful_step_count=10,
            deadline=None,
            suppress_health_check=list(HealthCheck),
        ),
    )
