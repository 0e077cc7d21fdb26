"""``merkle table``: list, create, describe and drop the tables of a database."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import click

from merkle.cli.common import (
    MerkleGroup,
    commit_options,
    json_option,
    open_db,
    say,
    version_options,
)
from merkle.cli.output import emit_record, emit_rows, format_option

__all__ = ["parse_family", "table"]


@click.group(cls=MerkleGroup)
def table() -> None:
    """Tables of a database: list, create, describe, drop."""


@table.command("list")
@click.argument("db")
@version_options
@format_option
def list_tables(db: str, version: int | None, at: datetime | None, fmt: str | None) -> None:
    """The tables of database DB: name, records and bytes."""
    tables = open_db(db, version, at).describe()["tables"]
    rows = ({"name": name, **stats} for name, stats in tables.items())
    emit_rows(rows, fmt, columns=["name", "count", "size"])


def parse_family(text: str) -> tuple[str, list[str]]:
    """``name=a,b`` of ``--family`` as ``("name", ["a", "b"])``."""
    name, sep, fields = text.partition("=")
    members = [field.strip() for field in fields.split(",")]
    if not sep or not name.strip() or not all(members):
        raise click.BadParameter(
            f"{text!r} is not NAME=FIELD,FIELD,... (for example items=sku,qty)",
            param_hint="'--family'",
        )
    return name.strip(), members


def _families(
    ctx: click.Context, param: click.Parameter, values: tuple[str, ...]
) -> dict[str, list[str]] | None:
    families: dict[str, list[str]] = {}
    for text in values:
        name, members = parse_family(text)
        if name in families:
            raise click.BadParameter(f"family {name!r} is given twice", param_hint="'--family'")
        families[name] = members
    return families or None


@table.command("create")
@click.argument("db")
@click.argument("name")
@click.option("--key", "key", required=True, metavar="FIELD", help="The primary-key field.")
@click.option(
    "--key-codec",
    default=None,
    metavar="SPEC",
    help="int, float, str, bytes, timestamp, tuple(...), reverse(...) "
    "(default: inferred from the first write).",
)
@click.option(
    "--family",
    "families",
    multiple=True,
    metavar="NAME=A,B",
    callback=_families,
    help="A column family: fields stored (and read) apart from the others. Repeatable.",
)
@click.option(
    "--tablet-size-limit",
    type=int,
    default=None,
    metavar="N",
    help="Split tablets holding more than N records (default 100,000).",
)
@click.option(
    "--branching-factor", type=int, default=None, metavar="N", help="Children per index node."
)
@click.option(
    "--patch-limit",
    type=int,
    default=None,
    metavar="N",
    help="Fold pending batches into tablets only above N records (default 20,000)...",
)
@click.option(
    "--patch-share",
    type=int,
    default=None,
    metavar="PCT",
    help="...and above PCT percent of the table's records (default 50).",
)
@json_option("--metadata", "Metadata of the table, as JSON.")
@commit_options
def create(
    db: str,
    name: str,
    key: str,
    key_codec: str | None,
    families: dict[str, list[str]] | None,
    tablet_size_limit: int | None,
    branching_factor: int | None,
    patch_limit: int | None,
    patch_share: int | None,
    metadata: Any,
    message: str | None,
    author: str | None,
) -> None:
    """Create table NAME in database DB, keyed by --key FIELD."""
    done = (
        open_db(db)
        .create_table(
            name,
            key=key,
            key_codec=key_codec,
            families=families,
            metadata=metadata,
            tablet_size_limit=tablet_size_limit,
            branching_factor=branching_factor,
            patch_limit=patch_limit,
            patch_share=patch_share,
        )
        .commit(message=message or f"create table {name} (key {key})", author=author)
    )
    say(f"created table {name!r} in database {db!r} (version {done.version})")


@table.command("describe")
@click.argument("db")
@click.argument("name")
@version_options
@format_option
def describe(db: str, name: str, version: int | None, at: datetime | None, fmt: str | None) -> None:
    """Table NAME of database DB: key, codec, records, bytes, tablets, families, limits."""
    emit_record(open_db(db, version, at).describe_table(name), fmt)


@table.command("drop")
@click.argument("db")
@click.argument("name")
@commit_options
def drop(db: str, name: str, message: str | None, author: str | None) -> None:
    """Drop table NAME from database DB (earlier versions still hold it)."""
    dropped = open_db(db).drop_table(name)
    done = dropped.commit(message=message or f"drop table {name}", author=author)
    say(f"dropped table {name!r} from database {db!r} (version {done.version})")
