"""The ``merkle`` click group and the entry point of the console script.

Each command group lives in its own module (``db.py``, ``table.py``,
``load.py``, ``read.py``, ``compact.py``) and is registered on :data:`cli`
below. A new command (``merkle gc``, ``merkle verify``) is a new module whose
click command is added to :data:`COMMANDS`; it uses ``merkle.cli.common``
(``connection()``, ``CliError``, option decorators) and ``merkle.cli.output``
(``emit_rows``/``emit_record``, ``format_option``) like the others, so errors
and output look the same everywhere.
"""

from __future__ import annotations

import click

from merkle import __version__
from merkle.cli.common import CliState, MerkleGroup, parse_store_option
from merkle.cli.compact import compact
from merkle.cli.db import db
from merkle.cli.gc import gc, verify
from merkle.cli.load import load
from merkle.cli.read import get, scan
from merkle.cli.table import table
from merkle.cli.versions import COMMANDS as VERSION_COMMANDS

__all__ = ["COMMANDS", "cli", "main"]


def _store_options(
    ctx: click.Context, param: click.Parameter, values: tuple[str, ...]
) -> dict[str, object]:
    return dict(parse_store_option(text) for text in values)


@click.group(cls=MerkleGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="merkle")
@click.option(
    "--lake",
    envvar="MERKLE_LAKE",
    metavar="URI",
    help="The lake: file:///path, a plain path, memory://, or s3://bucket/prefix "
    "(default: $MERKLE_LAKE).",
)
@click.option(
    "--option",
    "-o",
    "options",
    multiple=True,
    metavar="KEY=VALUE",
    callback=_store_options,
    help="A storage option, such as endpoint_url=http://127.0.0.1:9000 for S3. Repeatable.",
)
@click.pass_context
def cli(ctx: click.Context, lake: str | None, options: dict[str, object]) -> None:
    """merkle-db: versioned, content-addressed tables on files or S3."""
    ctx.obj = CliState(lake, dict(options))


#: Every subcommand of ``merkle``, in the order ``merkle --help`` lists them
#: (click sorts them by name).
COMMANDS: list[click.Command] = [
    db,
    table,
    load,
    scan,
    get,
    compact,
    gc,
    verify,
    *VERSION_COMMANDS,
]

for _command in COMMANDS:
    cli.add_command(_command)


def main() -> None:
    """Run the command line."""
    cli()
