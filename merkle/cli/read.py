"""``merkle scan`` and ``merkle get``: read records, in any output format.

Both read with :func:`~merkle.tablets.nanotext.nanos_as_text`: a time with
nanoseconds is printed as its exact ISO text, which ``merkle load`` reads back.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

import click

from merkle.cli.common import (
    CliError,
    fields_option,
    names_text,
    open_db,
    parse_fields,
    version_options,
)
from merkle.cli.keys import parse_key, parse_keys
from merkle.cli.output import cell, emit_rows, format_option
from merkle.tablets.nanotext import nanos_as_text

__all__ = ["get", "scan"]


def _table_key(
    database: Any, db: str, table: str, names: list[str] | None
) -> tuple[list[str], str | None]:
    """The key fields and key codec of ``table`` (as :func:`table_key`), after checking
    that ``--fields`` names only fields the table has in the version read: a typo
    would otherwise print records without it, as if its values were missing."""
    info = database.describe_table(table)
    key = info["key"]
    if names:
        known = [] if info["schema"] is None else info["schema"].names
        unknown = [name for name in names if name not in known]
        if unknown:
            listed = names_text(known) if known else "none yet"
            raise CliError(
                f"--fields: table {db}.{table} has no field {unknown[0]!r}; its fields: {listed}"
            )
    return ([key] if isinstance(key, str) else list(key)), info["key_codec"]


@click.command(short_help="Records of a table in key order.")
@click.argument("db")
@click.argument("table")
@click.option("--from", "from_key", default=None, metavar="KEY", help="First key (inclusive).")
@click.option("--to", "to_key", default=None, metavar="KEY", help="Last key (inclusive).")
@fields_option
@click.option(
    "--offset", type=click.IntRange(min=0), default=None, metavar="N", help="Skip N records first."
)
@click.option(
    "--limit",
    "-n",
    type=click.IntRange(min=0),
    default=None,
    metavar="N",
    help="At most N records.",
)
@click.option("--reverse", is_flag=True, help="Descending key order.")
@version_options
@format_option
def scan(
    db: str,
    table: str,
    from_key: str | None,
    to_key: str | None,
    fields: tuple[str, ...],
    offset: int | None,
    limit: int | None,
    reverse: bool,
    version: int | None,
    at: datetime | None,
    fmt: str | None,
) -> None:
    """Records of TABLE in database DB, in key order.

    KEYs are parsed by the table's key codec (see `merkle get --help`).
    """
    names = parse_fields(fields)
    database = open_db(db, version, at)
    key_fields, spec = _table_key(database, db, table, names)
    records = database.scan(
        table,
        fields=names,
        from_pk=None if from_key is None else parse_key(from_key, spec, prefix=True),
        to_pk=None if to_key is None else parse_key(to_key, spec, prefix=True),
        offset=offset,
        limit=limit,
        reverse=reverse,
    )
    with nanos_as_text():  # records are made as they are printed
        emit_rows(records, fmt, columns=[*key_fields, *(names or ())])


#: An argument that starts like a negative number: ``-7``, ``-2.5``, ``-.5``, ``-1e3``, ``-inf``.
_NEGATIVE = re.compile(r"-(\d|\.\d|inf(inity)?$)", re.IGNORECASE)


class _KeysCommand(click.Command):
    """A command whose KEY arguments may be negative numbers: ``merkle get DB T -7``.

    click reads any ``-...`` word as an option, so ``-7`` was "No such option".
    Here a word that starts like a negative number, is not an option of the
    command and is not the value of the option before it is an argument (as
    if it came after ``--``). Every other ``-...`` word is still an option,
    so a mistyped option is still a usage error and never a key.
    """

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        takes_value: set[str] = set()
        known: set[str] = set()
        for param in self.get_params(ctx):
            if isinstance(param, click.Option):
                names = {*param.opts, *param.secondary_opts}
                known |= names
                if not param.is_flag and not param.count:
                    takes_value |= set(param.opts)
        options: list[str] = []
        arguments: list[str] = []
        i = 0
        while i < len(args):
            word = args[i]
            if word == "--":
                arguments += args[i + 1 :]
                break
            if word in known or (word.startswith("-") and not _NEGATIVE.match(word)):
                options.append(word)
                if word in takes_value and i + 1 < len(args):
                    options.append(args[i + 1])
                    i += 1
            else:
                arguments.append(word)
            i += 1
        return super().parse_args(ctx, [*options, "--", *arguments])


@click.command(cls=_KeysCommand, short_help="The records of some keys.")
@click.argument("db")
@click.argument("table")
@click.argument("keys", nargs=-1, required=True, metavar="KEY...")
@fields_option
@version_options
@format_option
def get(
    db: str,
    table: str,
    keys: tuple[str, ...],
    fields: tuple[str, ...],
    version: int | None,
    at: datetime | None,
    fmt: str | None,
) -> None:
    """The records of the given KEYs in TABLE of database DB, in the order given.

    \b
    Keys are parsed by the table's key codec:
      int, float   a number: 42, -7, 2.5
      str          the text as it is
      bytes        hexadecimal: 00ff or 0x00ff
      timestamp    ISO-8601: 2026-01-31T12:00:00Z (naive = UTC)
      tuple(...)   a JSON array: '[2026, "eu"]'
    A negative number is a key (get DB T -7); a key that starts with "-"
    otherwise comes after "--" (get DB T -- -abc).
    Exit status 1 (after printing the records found) when a key has no record.
    """
    names = parse_fields(fields)
    database = open_db(db, version, at)
    key_fields, spec = _table_key(database, db, table, names)
    wanted = list(dict.fromkeys(parse_keys(keys, spec)))
    with nanos_as_text():
        found = database.get_records(table, wanted, fields=names)
    emit_rows(
        (found[key] for key in wanted if key in found),
        fmt,
        columns=[*key_fields, *(names or ())],
    )
    missing = [key for key in wanted if key not in found]
    if missing:
        shown = ", ".join(cell(key) for key in missing[:10])
        more = f" and {len(missing) - 10} more" if len(missing) > 10 else ""
        raise CliError(f"no record in {db}.{table} for key {shown}{more}")
