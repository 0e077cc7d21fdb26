"""``merkle table``: list, create, describe and drop the tables of a database."""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime
from typing import Any

import click
import pyarrow as pa

from merkle.cli.common import (
    CliError,
    MerkleGroup,
    commit_options,
    field_names,
    json_option,
    open_db,
    say,
    split_names,
    version_options,
)
from merkle.cli.output import emit_record, emit_rows, format_option
from merkle.tablets.schema import is_free

__all__ = ["parse_family", "show_schema", "split_names", "table"]


@click.group(cls=MerkleGroup)
def table() -> None:
    """Tables of a database: list, create, describe, alter, drop."""


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
    try:
        members = field_names(fields)  # a member with a comma in double quotes
    except ValueError:
        members = []
    if not sep or not name.strip() or not members:
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
@click.option(
    "--key",
    "keys",
    required=True,
    multiple=True,
    metavar="FIELD",
    help="The primary-key field; several (--key a,b or --key a --key b) make a composite key.",
)
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
@click.option(
    "--schema",
    default=None,
    metavar="NAME:TYPE,...",
    help="Declare fields and their Arrow types, e.g. id:int32,amount:decimal128(10,2) "
    "(default: the first write decides).",
)
@click.option(
    "--schema-free",
    "schema_free",
    default=None,
    metavar="A,B|all",
    help="Schema-free fields (any value, stored as CBOR); 'all' for every undeclared field.",
)
@json_option("--metadata", "Metadata of the table, as JSON.")
@commit_options
def create(
    db: str,
    name: str,
    keys: tuple[str, ...],
    key_codec: str | None,
    families: dict[str, list[str]] | None,
    tablet_size_limit: int | None,
    branching_factor: int | None,
    patch_limit: int | None,
    patch_share: int | None,
    schema: str | None,
    schema_free: str | None,
    metadata: Any,
    message: str | None,
    author: str | None,
) -> None:
    """Create table NAME in database DB, keyed by --key FIELD."""
    # Type names need pyarrow: imported only by the commands that take types.
    from merkle.cli.typenames import parse_fields

    key = split_names(keys, "--key")
    free: bool | list[str] = False
    if schema_free is not None:
        free = True if schema_free == "all" else split_names((schema_free,), "--schema-free")
    declared = parse_fields(schema, "--schema")
    done = (
        open_db(db)
        .create_table(
            name,
            key=key[0] if len(key) == 1 else key,
            key_codec=key_codec,
            schema=pa.schema(declared) if declared else None,
            schema_free=free,
            families=families,
            metadata=metadata,
            tablet_size_limit=tablet_size_limit,
            branching_factor=branching_factor,
            patch_limit=patch_limit,
            patch_share=patch_share,
        )
        .commit(message=message or f"create table {name} (key {','.join(key)})", author=author)
    )
    say(f"created table {name!r} in database {db!r} (version {done.version})")


@table.command("describe")
@click.argument("db")
@click.argument("name")
@version_options
@format_option
def describe(db: str, name: str, version: int | None, at: datetime | None, fmt: str | None) -> None:
    """Table NAME of database DB: key, codec, records, bytes, tablets, families, limits, schema."""
    info = open_db(db, version, at).describe_table(name)
    info["schema"] = show_schema(info["schema"])
    emit_record(info, fmt)


def show_schema(schema: pa.Schema | None) -> list[str] | None:
    """A schema as lines ``name: type`` (``not null``, ``schema-free`` marked)."""
    if schema is None:
        return None
    return [
        f"{f.name}: any (schema-free)"
        if is_free(f)
        else f"{f.name}: {f.type}{'' if f.nullable else ' not null'}"
        for f in schema
    ]


@table.command("alter")
@click.argument("db")
@click.argument("name")
@click.option("--add", "add", multiple=True, metavar="NAME:TYPE", help="Add a nullable field.")
@click.option("--drop", "drop", multiple=True, metavar="NAME", help="Drop a field.")
@click.option("--rename", "rename", multiple=True, metavar="OLD=NEW", help="Rename a field.")
@click.option("--widen", "widen", multiple=True, metavar="NAME:TYPE", help="Widen a field's type.")
@click.option("--nullable", "nullable", multiple=True, metavar="NAME", help="Allow nulls.")
@click.option("--free", "free", multiple=True, metavar="NAME", help="Make a field schema-free.")
@commit_options
def alter(
    db: str,
    name: str,
    add: tuple[str, ...],
    drop: tuple[str, ...],
    rename: tuple[str, ...],
    widen: tuple[str, ...],
    nullable: tuple[str, ...],
    free: tuple[str, ...],
    message: str | None,
    author: str | None,
) -> None:
    """Change the schema of table NAME in database DB (the rules: doc/api.md, "Schemas")."""
    from merkle.cli.typenames import parse_types  # (see create)

    renames: dict[str, str] = {}
    for text in rename:
        old, sep, new = text.partition("=")
        if not sep or not old.strip() or not new.strip():
            raise CliError(f"--rename {text!r} is not OLD=NEW (for example --rename qty=quantity)")
        _once(renames, old.strip(), "--rename")
        if new.strip() in renames.values():
            raise CliError(f"--rename gives the new name {new.strip()!r} more than once")
        renames[old.strip()] = new.strip()
    for option, names in (("--drop", drop), ("--nullable", nullable), ("--free", free)):
        seen: set[str] = set()
        for field in names:
            _once(seen, field, option)
            seen.add(field)
    if not (add or drop or rename or widen or nullable or free):
        raise CliError(
            "nothing to alter: pass --add, --drop, --rename, --widen, --nullable or --free"
        )
    base = open_db(db)
    done = base.alter_schema(
        name,
        add=parse_types(",".join(add), "--add"),
        drop=list(drop),
        rename=renames,
        widen=parse_types(",".join(widen), "--widen"),
        nullable=list(nullable),
        free=list(free),
    ).commit(message=message or f"alter the schema of table {name}", author=author)
    if done.version == base.version:
        say(f"no change: table {name!r} in database {db!r} already has that schema")
        return
    say(f"altered the schema of table {name!r} in database {db!r} (version {done.version})")


def _once(seen: Collection[str], name: str, option: str) -> None:
    """Refuse a field that ``option`` gives again (as ``--add`` and ``--widen`` do):
    keeping one silently would be a guess."""
    if name in seen:
        raise CliError(f"{option} gives field {name!r} more than once")


@table.command("drop")
@click.argument("db")
@click.argument("name")
@commit_options
def drop(db: str, name: str, message: str | None, author: str | None) -> None:
    """Drop table NAME from database DB (earlier versions still hold it)."""
    dropped = open_db(db).drop_table(name)
    done = dropped.commit(message=message or f"drop table {name}", author=author)
    say(f"dropped table {name!r} from database {db!r} (version {done.version})")
