"""Quick start: a real session on a local lake.

Creates a database, bulk-loads a table from Arrow, queries it, commits an
update, reads the old version back (time travel), clones the database and
changes the clone while the source stays as it was. Run with ``make demo``
(or ``python examples/quickstart.py --lake PATH``); it can be run again.
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime, timedelta

import numpy as np
import pyarrow as pa

import merkle


def orders(n: int) -> pa.Table:
    """``n`` generated orders with shuffled keys."""
    rng = np.random.default_rng(42)
    ids = rng.permutation(n).astype(np.int64)
    start = datetime(2026, 1, 1, tzinfo=UTC)
    return pa.table(
        {
            "order_id": ids,
            "customer": pa.array([f"customer-{i % 500}" for i in ids]),
            "amount": np.round(rng.uniform(5, 500, n), 2),
            "status": pa.array(np.array(["new", "paid", "shipped"])[ids % 3]),
            "placed_at": pa.array([start + timedelta(minutes=int(i)) for i in ids]),
        }
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--lake", default="lake", help="lake URI or directory (default: ./lake)")
    parser.add_argument("--rows", type=int, default=100_000, help="orders to load")
    args = parser.parse_args()

    conn = merkle.connect(args.lake)
    print(f"lake: {conn.uri}")
    for name in ("shop", "shop-dev"):
        if name in conn.list_dbs():
            conn.drop_db(name)
            print(
                f"dropped the {name!r} left by an earlier run (its blocks stay until `merkle gc`)"
            )

    db = conn.create_db("shop", metadata={"owner": "demo"})
    db = db.create_table("orders", key="order_id")
    db = db.write("orders", orders(args.rows)).commit(message="initial load", author="demo")
    loaded = db.version  # not always 1: a name's versions go on after a drop (an earlier run)
    info = db.describe_table("orders")
    print(
        f"v{db.version}: loaded {info['count']:,} orders into {info['tablets']} tablets "
        f"({info['size'] / 1e6:.1f} MB of blocks)"
    )

    print(f"  order 42: {db.get_records('orders', [42])[42]}")
    first = list(db.scan("orders", fields=["amount", "status"], from_pk=10, to_pk=12))
    print(f"  orders 10..12 (two fields): {first}")
    paid = db.to_arrow("orders", fields=["status"]).column("status").to_pylist().count("paid")
    print(f"  paid orders: {paid:,}")

    db = db.write("orders", {42: {"customer": "customer-7", "amount": 1.0, "status": "refunded"}})
    db = db.delete("orders", [43, 44])
    print(
        f"  uncommitted: order 42 reads {db.get_records('orders', [42])[42]['status']!r} here, "
        f"others still see {conn.open_db('shop').get_records('orders', [42])[42]['status']!r}"
    )
    db = db.commit(message="refund 42, cancel 43 and 44", author="demo")
    print(f"v{db.version}: committed; {db.describe_table('orders')['count']:,} orders")

    old = conn.open_db("shop", version=loaded)
    was = old.get_records("orders", [42, 43])
    print(
        f"time travel to v{old.version}: order 42 was {was[42]['status']!r}, "
        f"order 43 existed: {43 in was}"
    )

    dev = conn.create_db("shop-dev", root=db)
    dev = dev.write("orders", [{"order_id": 42, "status": "under review"}]).commit(message="try")
    print(
        f"clone 'shop-dev' (O(1), shares every block): order 42 is "
        f"{dev.get_records('orders', [42])[42]['status']!r} there and still "
        f"{conn.open_db('shop').get_records('orders', [42])[42]['status']!r} in 'shop'"
    )

    print("history of 'shop':")
    for entry in conn.history("shop"):
        print(
            f"  v{entry.version} {entry.time:%Y-%m-%d %H:%M:%S} {entry.author or '-'}: "
            f"{entry.message or ''}"
        )
    print(f"databases: {conn.list_dbs()}")
    conn.close()


if __name__ == "__main__":
    main()
