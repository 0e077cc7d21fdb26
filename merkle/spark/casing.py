"""A Spark write's column names matched to the table's fields as Spark matches names.

Spark resolves column names without regard to case unless
``spark.sql.caseSensitive`` is on (it is off by default), while merkle-db's
field names are exact. A DataFrame column ``Name`` written to a table with a
field ``name`` therefore means that field to a Spark user; taken as a new
field, it made a table with both ``name`` and ``Name``, which no Spark
session could read again (``[AMBIGUOUS_REFERENCE]``). So, when Spark ignores
case, each column takes the spelling of the one field it matches, and the
``key`` option is matched the same way; a column that matches several
fields, or two columns that match one another, are errors naming them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from pyspark.sql import SparkSession
from pyspark.sql.types import StructField, StructType

from merkle.errors import UsageError
from merkle.spark.options import WriteOptions

__all__ = ["CASE_CONF", "case_sensitive", "match_case"]


#: Spark's setting for matching names with or without regard to case.
CASE_CONF = "spark.sql.caseSensitive"


def case_sensitive(spark: SparkSession | None) -> bool:
    """Whether ``spark`` tells names apart by case. None: the active session; in a Spark
    task, which has none, the setting as Spark hands it to tasks (as a local property,
    like the session time zone); elsewhere (a data source's planner) Spark's default, off.
    """
    session = spark if spark is not None else SparkSession.getActiveSession()
    if session is not None:
        setting = session.conf.get(CASE_CONF, "false")
    else:
        from pyspark import TaskContext

        context = TaskContext.get()
        setting = context.getLocalProperty(CASE_CONF) if context is not None else None
    return str(setting or "false").strip().lower() == "true"


def match_case(
    opts: WriteOptions,
    schema: StructType,
    fields: Sequence[str] | None,
    *,
    sensitive: bool,
) -> tuple[WriteOptions, StructType]:
    """``opts`` and ``schema`` with names spelled as the table's ``fields`` (None: no table
    yet, so the ``key`` option is matched to the DataFrame's columns)."""
    if sensitive:
        return opts, schema
    columns = schema.fieldNames()
    _no_twins(columns, "the DataFrame has columns", "rename one of them")
    targets = list(fields) if fields is not None else columns
    spelled = [_spelling(name, targets, opts.table) for name in columns]
    renamed = StructType(
        [
            StructField(new, f.dataType, f.nullable, f.metadata)
            for f, new in zip(schema.fields, spelled, strict=True)
        ]
    )
    if opts.key is not None:
        keys = [_spelling(k.strip(), targets, opts.table) for k in opts.key.split(",")]
        opts = replace(opts, key=", ".join(keys))
    return opts, renamed if spelled != columns else schema


def _spelling(name: str, targets: Sequence[str], table: str) -> str:
    """The one of ``targets`` that ``name`` means when case does not count (else ``name``)."""
    if name in targets:
        return name
    folded = name.casefold()
    found = [t for t in targets if t.casefold() == folded]
    if len(found) > 1:
        raise UsageError(
            f"column {name!r} matches fields {found} of table {table!r}, which differ only "
            "in case: set spark.sql.caseSensitive=true to write them apart"
        )
    return found[0] if found else name


def _no_twins(names: Sequence[str], what: str, advice: str) -> None:
    seen: dict[str, str] = {}
    for name in names:
        other = seen.setdefault(name.casefold(), name)
        if other != name:
            raise UsageError(
                f"{what} {other!r} and {name!r}, which Spark takes for one name "
                f"(spark.sql.caseSensitive is off): {advice}, or turn it on"
            )
