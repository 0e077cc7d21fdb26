"""A Spark pipeline on merkle-db: raw files in, a versioned table out, a day of changes.

1. Day 1: raw CSV order files (with bad rows and duplicates) are cleaned
   with Spark and loaded into ``shop.orders`` in one commit.
2. Day 2: new orders and status changes are upserted, cancellations deleted,
   each in one commit, straight from Spark DataFrames.
3. Yesterday's version is read beside today's, and Spark compares them.
4. A clone of the database takes an experiment (a discount) without
   touching the source.
5. The pipeline's reads are done: it gives up their reader leases, and
   garbage collection keeps the newest version of each database.

Every read of the lake here is named (option ``lease_holder``): a Spark read
holds a reader lease on its version, which lives ``lease_ttl`` (900 s) past
its last task, since a data source is not told when a query ends. Without
``merkle.spark.release_reads`` the collection right after would keep the
versions these reads leased (yesterday's, and the heads since replaced).

Runs on ``local[*]``; ``python examples/spark_pipeline.py [--lake DIR]``
(needs Java 17+ and ``pip install -e '.[spark]'``). doc/spark.md shows its
output.
"""

from __future__ import annotations

import argparse
import csv
import random
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import merkle
import merkle.spark

STATUSES = ("new", "paid", "shipped")
#: The holder name of this pipeline's reader leases, given up before the collection.
READS = "spark-pipeline-example"
RAW_SCHEMA = (
    "order_id BIGINT, customer STRING, sku STRING, qty INT, unit_price DOUBLE, "
    "status STRING, updated_at TIMESTAMP"
)


def write_raw(folder: Path, day: int, orders: range, rng: random.Random) -> None:
    """Raw order events of one day as CSV files: some broken, some repeated."""
    folder.mkdir(parents=True, exist_ok=True)
    start = datetime(2026, 3, day, tzinfo=UTC)
    files = [open(folder / f"orders-{i}.csv", "w", newline="") for i in range(4)]  # noqa: SIM115
    writers = [csv.writer(f) for f in files]
    for w in writers:
        w.writerow(["order_id", "customer", "sku", "qty", "unit_price", "status", "updated_at"])
    for n, order in enumerate(orders):
        when = start + timedelta(seconds=n)
        qty = rng.randint(1, 5) if rng.random() > 0.01 else 0  # about 1% broken rows
        row = [
            order,
            f"c{order % 97}",
            f"sku-{order % 31}",
            qty,
            round(rng.uniform(2, 90), 2),
            STATUSES[0],
            when.isoformat(),
        ]
        writers[n % 4].writerow(row)
        if rng.random() < 0.05:  # a later event for the same order: it was paid
            later = [*row[:5], "paid", (when + timedelta(minutes=5)).isoformat()]
            writers[(n + 1) % 4].writerow(later)
    for f in files:
        f.close()


def clean(spark: Any, folder: Path) -> Any:
    """Typed, valid rows, the latest event of each order, with its amount."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F  # noqa: N812 (Spark's convention)

    raw = spark.read.csv(str(folder), header=True, schema=RAW_SCHEMA)
    valid = raw.where("qty > 0 AND unit_price > 0 AND order_id IS NOT NULL")
    latest = Window.partitionBy("order_id").orderBy(F.col("updated_at").desc())
    return (
        valid.withColumn("rank", F.row_number().over(latest))
        .where("rank = 1")
        .drop("rank")
        .withColumn("amount", F.round(F.col("qty") * F.col("unit_price"), 2))
    )


def orders(spark: Any, uri: str, version: int | None = None, database: str = "shop") -> Any:
    """The orders table of ``database`` (at ``version``, default the head) as a DataFrame."""
    read = spark.read.format("merkle").option("lake", uri).option("db", database)
    read = read.option("table", "orders").option("lease_holder", READS)
    return (read.option("version", version) if version is not None else read).load()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lake", help="lake directory (default: a temporary one)")
    parser.add_argument("--orders", type=int, default=200_000, help="orders on day 1")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="merkle-spark-pipeline-"))
    lake = Path(args.lake).resolve() if args.lake else work / "lake"
    uri = lake.as_uri()
    rng = random.Random(7)

    spark = merkle.spark.local_session()
    from pyspark.sql import functions as F  # noqa: N812 (Spark's convention)

    spark.sparkContext.setLogLevel("ERROR")
    conn = merkle.connect(uri)
    for name in ("shop", "shop-experiment"):
        if name in conn.list_dbs():
            conn.drop_db(name)
    conn.create_db("shop")
    print(f"lake: {uri}")

    # 1. day 1: raw files -> Spark -> one commit
    write_raw(work / "raw" / "day1", 1, range(args.orders), rng)
    day1 = clean(spark, work / "raw" / "day1")
    db = merkle.spark.write(day1, uri, "shop", "orders", key="order_id", message="day 1 load")
    yesterday = db.version
    info = db.describe_table("orders")
    count, tablets = info["count"], info["tablets"]
    print(f"day 1: loaded {count:,} orders in {tablets} tablets (version {db.version})")

    # 2. day 2: new orders and status changes upserted, cancellations deleted
    write_raw(work / "raw" / "day2", 2, range(args.orders, args.orders + args.orders // 10), rng)
    new_orders = clean(spark, work / "raw" / "day2")
    paid = orders(spark, uri).where("status = 'paid' AND order_id % 10 = 0")
    shipped = paid.withColumn("status", F.lit("shipped")).withColumn(
        "updated_at", F.current_timestamp()
    )
    db = merkle.spark.write(
        new_orders.unionByName(shipped), uri, "shop", "orders", message="day 2 orders and shipments"
    )
    cancelled = spark.range(0, args.orders, 97).withColumnRenamed("id", "order_id")
    db = merkle.spark.delete(spark, uri, "shop", "orders", cancelled, message="day 2 cancellations")
    print(
        f"day 2: {db.describe_table('orders')['count']:,} orders after upserts and "
        f"cancellations (version {db.version})"
    )

    # 3. yesterday beside today
    before, after = orders(spark, uri, yesterday).alias("b"), orders(spark, uri).alias("a")
    changes = (
        before.join(after, "order_id", "full_outer")
        .selectExpr(
            "CASE WHEN b.status IS NULL THEN 'added' WHEN a.status IS NULL THEN 'removed' "
            "WHEN b.status <> a.status THEN 'changed' ELSE 'same' END AS change"
        )
        .groupBy("change")
        .count()
        .orderBy("change")
    )
    print(
        "yesterday -> today:", ", ".join(f"{r['change']} {r['count']:,}" for r in changes.collect())
    )
    revenue = after.groupBy("status").sum("amount").orderBy("status").collect()
    print("revenue today by status:", ", ".join(f"{r[0]} {r[1]:,.2f}" for r in revenue))

    # 4. a clone for an experiment: a 10% discount on new orders, in the clone only
    conn.create_db("shop-experiment", root=conn.open_db("shop"))
    new = orders(spark, uri, database="shop-experiment").where("status = 'new'")
    discounted = new.withColumn("amount", F.round(F.col("amount") * 0.9, 2))
    merkle.spark.write(discounted, uri, "shop-experiment", "orders", message="10% off new orders")
    for name in ("shop", "shop-experiment"):
        total = orders(spark, uri, database=name).selectExpr("sum(amount)").collect()[0][0]
        print(f"{name}: revenue {total:,.2f}")

    # 5. the reading is done: give up the reads' leases, then garbage collection on
    # Spark keeps the newest version of each database
    conn.close()  # its idle writer lease would make the collector wait for it
    released = merkle.spark.release_reads(uri, READS)
    report = merkle.spark.gc(spark, uri, keep_versions=1, grace="0s")
    phases = ", ".join(f"{name} {seconds:.2f}s" for name, seconds in report.phases.items())
    print(
        f"gc: released {released} reader leases; freed {report.blocks_freed:,} blocks "
        f"({report.bytes_freed:,} bytes), kept {report.blocks_kept:,}; {phases}"
    )
    spark.stop()


if __name__ == "__main__":
    main()
