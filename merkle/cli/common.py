"""What every ``merkle`` command shares: the lake connection, errors and common options.

A command module (``db.py``, ``table.py``, ``load.py``, ...) defines click
commands with these decorators and helpers and is registered on the group in
``main.py``. The rules they implement:

- The lake comes from ``--lake`` or ``$MERKLE_LAKE``; it is opened once, on
  first use, and closed when the command ends (:func:`connection`).
- A :class:`~merkle.errors.MerkleError` (or a :class:`CliError` raised by a
  command) ends the command with exit status 1 and ONE line on stderr,
  ``error: <message>``, never a traceback: :class:`MerkleGroup` does that for
  every command below it. Click's own usage errors keep exit status 2.
- Writing commands take ``--message/-m`` and ``--author`` (default
  ``$MERKLE_AUTHOR``) and commit exactly once (:func:`commit_options`).
- Reading commands take ``--version N`` or ``--at TIME`` (:func:`version_options`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import IO, Any, TypeVar

import click

import merkle
from merkle.errors import MerkleError

__all__ = [
    "CliError",
    "CliState",
    "MerkleGroup",
    "commit_options",
    "connection",
    "field_names",
    "fields_option",
    "json_option",
    "names_text",
    "one_line",
    "open_db",
    "parse_fields",
    "parse_store_option",
    "parse_time",
    "say",
    "split_names",
    "table_key",
    "version_options",
]

F = TypeVar("F", bound=Callable[..., Any])


def one_line(text: str) -> str:
    """``text`` on one line: each line break (and the spaces around it) becomes one space."""
    return " ".join(part.strip() for part in str(text).splitlines() if part.strip())


class CliError(click.ClickException):
    """A user error: exit status 1 and one line ``error: <message>`` on stderr."""

    exit_code = 1

    def __init__(self, message: str) -> None:
        super().__init__(one_line(message))

    def show(self, file: IO[Any] | None = None) -> None:
        click.echo(f"error: {self.format_message()}", file=file, err=file is None)


class MerkleGroup(click.Group):
    """A click group that turns library errors into :class:`CliError` for every subcommand.

    Subcommands (and nested groups) are invoked from inside this group's
    ``invoke``, so one ``except`` here covers them all, including errors raised
    while output is being streamed.
    """

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except MerkleError as exc:
            from merkle.cli.advice import for_cli

            # Notes say what else happened on the way out (a lock left held, say).
            text = " ".join([str(exc), *getattr(exc, "__notes__", ())])
            state = ctx.find_object(CliState)
            names = (state.db, state.table) if state is not None else (None, None)
            raise CliError(for_cli(text, *names)) from None


class CliState:
    """The root context's object: where the lake is, and its connection once opened.

    (A plain class: a dataclass costs half a millisecond to define at every start.)
    """

    def __init__(self, lake: str | None, options: dict[str, Any] | None = None) -> None:
        self.lake = lake
        self.options: dict[str, Any] = {} if options is None else options
        self.conn: merkle.Connection | None = None
        # The database and table the command works on, once known: they fill in the
        # commands an error's advice names (``merkle.cli.advice``).
        self.db: str | None = None
        self.table: str | None = None


def connection(ctx: click.Context | None = None, *, create: bool = False) -> merkle.Connection:
    """The lake's connection, opened on first use and closed when the command ends.

    Only a command that may start a new lake (``db create``) passes
    ``create=True``: elsewhere a mistyped location is an error, not a new lake.
    """
    ctx = ctx or click.get_current_context()
    root = ctx.find_root()
    state = root.find_object(CliState)
    if state is None:  # a command invoked on its own, outside the ``merkle`` group
        raise CliError("no lake: run this command through `merkle --lake URI ...`")
    if state.conn is None:
        if not state.lake:
            raise CliError("no lake given: pass --lake URI or set MERKLE_LAKE")
        state.conn = merkle.connect(state.lake, create=create, **state.options)
        root.call_on_close(state.conn.close)
    return state.conn


def _always_text(name: str) -> bool:
    """Options whose values are text even when they read as numbers: credentials
    (``aws_*``: a secret of digits, or with a leading zero, must stay as written), a
    region and an endpoint."""
    return name.startswith("aws_") or name in ("region_name", "endpoint_url")


def parse_store_option(text: str) -> tuple[str, Any]:
    """``KEY=VALUE`` of ``--option``: the value as an int or float when it reads as one
    (except the options that are always text, :func:`_always_text`)."""
    name, sep, raw = text.partition("=")
    name = name.strip()
    if not sep or not name:
        raise click.BadParameter(f"{text!r} is not KEY=VALUE", param_hint="'--option'")
    value: Any = raw
    if _always_text(name):
        return name, value
    for kind in (int, float):
        try:
            value = kind(raw)
        except ValueError:
            continue
        break
    return name, value


def say(message: str) -> None:
    """Print the one-line summary of what a command did (stdout)."""
    click.echo(message)


# -- reading a version -------------------------------------------------------------


def parse_time(ctx: click.Context, param: click.Parameter, value: str | None) -> datetime | None:
    """An ISO-8601 date or time (``2026-01-31``, ``2026-01-31T12:00:00Z``); naive is UTC."""
    if value is None:
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        raise click.BadParameter(
            f"{value!r} is not an ISO-8601 time such as 2026-01-31T12:00:00Z"
        ) from None


def version_options(fn: F) -> F:
    """``--version N`` / ``--at TIME``: which committed version to read (default: the head)."""
    fn = click.option(
        "--at",
        default=None,
        metavar="TIME",
        callback=parse_time,
        help="Read the newest version committed at or before this ISO-8601 time (naive = UTC).",
    )(fn)
    fn = click.option(
        "--version",
        "version",
        type=click.IntRange(min=0),
        default=None,
        metavar="N",
        help="Read version N instead of the head.",
    )(fn)
    return fn


def open_db(name: str, version: int | None = None, at: datetime | None = None) -> merkle.Database:
    """Database ``name`` at the head, or at ``version`` / ``at`` (never both)."""
    if version is not None and at is not None:
        raise CliError("pass --version or --at, not both")
    conn = connection()
    _state().db = name
    return conn.open_db(name, version=version, at=at)


def _state() -> CliState:
    state = click.get_current_context().find_root().find_object(CliState)
    return state if state is not None else CliState(None)


def table_key(db: merkle.Database, table: str) -> tuple[list[str], str | None]:
    """The key fields of ``table`` and its key codec spec (None until the first write).

    NotFoundError (exit 1) when the table does not exist, before any output.
    """
    _state().table = table
    info = db.describe_table(table)
    key = info["key"]
    return ([key] if isinstance(key, str) else list(key)), info["key_codec"]


# -- writing -------------------------------------------------------------------------


def commit_options(fn: F) -> F:
    """``--message/-m`` and ``--author``: recorded in the journal entry of the commit."""
    fn = click.option(
        "--author",
        envvar="MERKLE_AUTHOR",
        default=None,
        help="Author recorded with the commit (default: $MERKLE_AUTHOR).",
    )(fn)
    fn = click.option(
        "--message",
        "-m",
        default=None,
        help="Commit message (default: a description of what the command did).",
    )(fn)
    return fn


def json_option(name: str, help: str) -> Callable[[F], F]:
    """An option whose value is a JSON document (metadata)."""

    def convert(ctx: click.Context, param: click.Parameter, value: str | None) -> Any:
        if value is None:
            return None
        try:
            return json.loads(value)
        except json.JSONDecodeError as exc:
            raise click.BadParameter(f"not valid JSON: {exc}") from None

    return click.option(name, default=None, metavar="JSON", help=help, callback=convert)


# -- fields ------------------------------------------------------------------------


def field_names(text: str) -> list[str]:
    """The field names of one ``a,b`` list (ValueError saying what is wrong).

    Names are split on commas and stripped of the spaces around them, as they always
    were. A name that holds a comma (or starts with a double quote, or keeps spaces at
    its ends) is written in double quotes, as a CSV header writes it: ``'"a,b",c'`` is
    ``a,b`` and ``c``; a quote inside is doubled (``"say ""hi"" now"``). An empty
    name is an error.
    """
    names: list[str] = []
    at, end = 0, len(text)
    while True:
        start = at
        while start < end and text[start].isspace():
            start += 1
        if start < end and text[start] == '"':
            name, at = _quoted_name(text, start)
            while at < end and text[at].isspace():
                at += 1
            if at < end and text[at] != ",":
                raise ValueError(
                    f"{text!r} has {text[at]!r} after the quoted name {name!r}: "
                    "put a comma between names"
                )
        else:
            comma = text.find(",", at)
            stop = end if comma < 0 else comma
            name, at = text[at:stop].strip(), stop
        if not name:
            raise ValueError(f"{text!r} has an empty field name")
        names.append(name)
        if at >= end:
            return names
        at += 1  # past the comma
        if at >= end:
            raise ValueError(f"{text!r} has an empty field name")


def _quoted_name(text: str, start: int) -> tuple[str, int]:
    """The name quoted from ``text[start]`` (a double quote) and where after it the
    closing quote ends; ``""`` inside stands for one quote."""
    parts: list[str] = []
    at = start + 1
    while True:
        close = text.find('"', at)
        if close < 0:
            raise ValueError(
                f"{text!r} opens a quote it does not close: write a name in quotes as "
                '"a,b" (a quote inside doubled: "say ""hi""")'
            )
        parts.append(text[at:close])
        if text.startswith('"', close + 1):
            parts.append('"')
            at = close + 2
            continue
        return "".join(parts), close + 1


def names_text(names: Sequence[str]) -> str:
    """``names`` as a ``--fields`` list that reads back as them (:func:`field_names`): a
    name quoted when it holds a comma, starts with a quote or has spaces at its ends."""

    def written(name: str) -> str:
        plain = "," not in name and not name.startswith('"') and name == name.strip()
        return name if plain and name else '"' + name.replace('"', '""') + '"'

    return ", ".join(written(name) for name in names)


def split_names(values: Sequence[str], option: str) -> list[str]:
    """Field names given as ``a,b``, by repeating the option, or both (a name with a
    comma in double quotes: :func:`field_names`); CliError naming ``option``."""
    try:
        names = [name for text in values for name in field_names(text)]
    except ValueError as exc:
        raise CliError(f"{option} {exc}") from None
    if not names:
        raise CliError(f"{option} {','.join(values)!r} has an empty field name")
    return names


def parse_fields(texts: Sequence[str] | str | None) -> list[str] | None:
    """The names of ``--fields`` (repeatable, each ``a,b`` as :func:`field_names` reads
    it) in order; None when not given. A name that does not parse is a usage error."""
    if texts is None or isinstance(texts, str):
        texts = () if texts is None else (texts,)
    if not texts:
        return None
    try:
        return [name for text in texts for name in field_names(text)]
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="'--fields'") from None


def fields_option(fn: F) -> F:
    """``--fields a,b``: project records to these fields (the key field is always shown)."""
    return click.option(
        "--fields",
        multiple=True,
        metavar="A,B,...",
        help="Only these fields (comma-separated, or the option repeated; a name with a "
        "comma in double quotes: '\"a,b\"'); the key field is always included.",
    )(fn)
