"""``merkle db``: list, create, drop, clone, describe and show the history of databases."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import click

from merkle.cli.common import (
    MerkleGroup,
    commit_options,
    connection,
    json_option,
    open_db,
    say,
    version_options,
)
from merkle.cli.output import emit_record, emit_rows, format_option
from merkle.errors import IntegrityError

__all__ = ["db"]


@click.group(cls=MerkleGroup)
def db() -> None:
    """Databases: list, create, drop, clone, describe, log."""


@db.command("list")
@format_option
def list_dbs(fmt: str | None) -> None:
    """The live databases: name, head version and when it was committed.

    A database whose journal is damaged (its head entry does not decode, say) is
    listed without a version and time, the others as usual; the damage is then
    said on stderr (exit status 1), so one database does not hide the rest.
    """
    conn = connection()
    rows: list[dict[str, Any]] = []
    damaged: list[tuple[str, IntegrityError]] = []
    for name in conn.list_dbs():
        try:
            head = conn.history(name, limit=1)[0]
        except IntegrityError as exc:
            damaged.append((name, exc))
            rows.append({"name": name, "version": None, "time": None})
            continue
        rows.append({"name": name, "version": head.version, "time": head.time})
    emit_rows(rows, fmt, columns=["name", "version", "time"])
    if damaged:
        names = ", ".join(repr(name) for name, _ in damaged)
        raise IntegrityError(
            f"database(s) {names}, listed without a version, cannot be read: {damaged[0][1]}"
        )


@db.command("create")
@click.argument("name")
@json_option("--metadata", 'Metadata of the database, as JSON: \'{"owner": "ops"}\'.')
@commit_options
def create(name: str, metadata: Any, message: str | None, author: str | None) -> None:
    """Create an empty database NAME (committed at once, as version 0)."""
    created = connection(create=True).create_db(
        name, metadata=metadata, message=message or f"create database {name}", author=author
    )
    say(f"created database {name!r} (version {created.version})")


@db.command("drop")
@click.argument("name")
@commit_options
def drop(name: str, message: str | None, author: str | None) -> None:
    """Drop database NAME. Its history and blocks stay until `merkle gc`."""
    entry = connection().drop_db(name, message=message or f"drop database {name}", author=author)
    say(f"dropped database {name!r} at version {entry.version}; its data stays until `merkle gc`")


@db.command("clone")
@click.argument("source")
@click.argument("target")
@version_options
@commit_options
def clone(
    source: str,
    target: str,
    version: int | None,
    at: datetime | None,
    message: str | None,
    author: str | None,
) -> None:
    """Create TARGET as a copy-on-write clone of SOURCE (its head, or --version N): O(1)."""
    src = open_db(source, version, at)
    made = connection().create_db(
        target,
        root=src,
        message=message or f"clone {source} version {src.version}",
        author=author,
    )
    say(f"cloned database {source!r} version {src.version} as {target!r} (version {made.version})")


@db.command("describe")
@click.argument("name")
@version_options
@format_option
def describe(name: str, version: int | None, at: datetime | None, fmt: str | None) -> None:
    """Database NAME: its root, version, tables (records and bytes), metadata."""
    emit_record(open_db(name, version, at).describe(), fmt)


@db.command("log")
@click.argument("name")
@click.option(
    "--limit",
    "-n",
    type=click.IntRange(min=1),
    default=None,
    metavar="N",
    help="Show at most N versions.",
)
@click.option(
    "--no-counts",
    is_flag=True,
    help="Do not count the records each version changed (they cost a diff per version).",
)
@format_option
def log(name: str, limit: int | None, no_counts: bool, fmt: str | None) -> None:
    """The committed versions of database NAME, newest first (drops show an empty root).

    ``changes`` counts the records each version inserted (+), updated (~)
    and deleted (-), against its parent; a merge shows both parents.
    """
    from merkle.db.diff import commit_counts  # the diff code: only this command uses it

    conn = connection()
    entries = conn.history(name, limit)

    def changes(entry: Any) -> str | None:
        counts = None if no_counts else commit_counts(conn, entry)
        if counts is None:
            return None
        return f"+{counts.inserted} ~{counts.updated} -{counts.deleted}"

    rows = (
        {
            "version": entry.version,
            "time": entry.time,
            "author": entry.author,
            "message": entry.message,
            "changes": changes(entry),
            "root": entry.root,
            "forked_from": entry.forked_from,
            "merged_from": entry.merged_from,
        }
        for entry in entries
    )
    emit_rows(
        rows,
        fmt,
        columns=[
            "version",
            "time",
            "author",
            "message",
            "changes",
            "root",
            "forked_from",
            "merged_from",
        ],
    )
