"""merkle-db on Spark: read, write, update, delete and collect a lake at cluster scale.

::

    import merkle.spark
    merkle.spark.register(spark)       # the "merkle" data source on this session
    df = (spark.read.format("merkle").option("lake", uri).option("db", "shop")
          .option("table", "orders").load())
    merkle.spark.write(df2, uri, "shop", "orders", key="order_id")   # upsert by key, one commit
    merkle.spark.delete(spark, uri, "shop", "orders", keys_df)
    merkle.spark.release_reads(uri, "nightly")  # reads with .option("lease_holder", "nightly")
    merkle.spark.gc(spark, uri, keep_versions=10)

Needs pyspark 4.1+ (``pip install merkle-db[spark]``) and Java 17+. See
doc/spark.md.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from merkle.spark.bulk import delete, write
from merkle.spark.gc import gc
from merkle.spark.release import release_reads

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["delete", "gc", "local_session", "register", "release_reads", "session", "write"]

#: Spark setting that lets a Python data source take filters (``pushFilters``).
PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"


def register(spark: SparkSession) -> None:
    """Register the ``merkle`` data source on ``spark`` and enable its filter pushdown."""
    from merkle.spark.source import MerkleDataSource

    spark.conf.set(PUSHDOWN_CONF, "true")
    spark.dataSource.register(MerkleDataSource)


def local_session(cores: int | str = "*", app: str = "merkle", **conf: str) -> SparkSession:
    """A local Spark session (``local[cores]``) set up for merkle-db, with the source registered.

    Python workers run this interpreter (``PYSPARK_PYTHON``) and Spark binds
    to the loopback interface (``SPARK_LOCAL_IP``), as a machine without a
    cluster needs (both set unless already set); the UI and progress bar are
    off, the session time zone is UTC. ``conf`` adds Spark settings (dots
    written as ``__``: ``spark__driver__memory="2g"``).
    """
    return session(f"local[{cores}]", app, **conf)


def session(master: str, app: str = "merkle", **conf: str) -> SparkSession:
    """A Spark session on ``master`` (``local[4]``, ``spark://host:7077``, ``yarn``, ...) with
    the source registered and the settings of :func:`local_session`.

    Only a local master (``local``, ``local[...]``) gets this interpreter for
    its Python workers and the loopback interface: a cluster's executors run
    their own Python and must reach the driver over the network.
    """
    from pyspark.sql import SparkSession

    if master == "local" or master.startswith("local["):
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    settings = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.session.timeZone": "UTC",
        PUSHDOWN_CONF: "true",
        **{name.replace("__", "."): value for name, value in conf.items()},
    }
    builder = SparkSession.builder.master(master).appName(app)
    for name, value in settings.items():
        builder = builder.config(name, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark
