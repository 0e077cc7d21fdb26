"""The ``merkle`` click group and the entry point of the console script.

Each command group lives in its own module (``db.py``, ``table.py``,
``load.py``, ``read.py``, ``compact.py``) and is named in :data:`COMMANDS`
below. A new command (``merkle gc``, ``merkle verify``) is a new module whose
click command is added to :data:`COMMANDS`; it uses ``merkle.cli.common``
(``connection()``, ``CliError``, option decorators) and ``merkle.cli.output``
(``emit_rows``/``emit_record``, ``format_option``) like the others, so errors
and output look the same everywhere.

A command's module is imported only when that command runs (or ``--help``
lists them all): ``merkle get`` does not pay for the CSV and Parquet readers
of ``merkle load``, nor ``merkle scan`` for the CAR code of ``merkle export``.
"""

from __future__ import annotations

import atexit
import gc
import importlib
import os
import sys
from typing import Any

import click

from merkle import __version__
from merkle.cli.common import CliState, MerkleGroup, parse_store_option

__all__ = ["COMMANDS", "cli", "main"]

#: Every subcommand of ``merkle``: its name and where it is defined.
COMMANDS: dict[str, str] = {
    "db": "merkle.cli.db:db",
    "table": "merkle.cli.table:table",
    "load": "merkle.cli.load:load",
    "scan": "merkle.cli.read:scan",
    "get": "merkle.cli.read:get",
    "compact": "merkle.cli.compact:compact",
    "gc": "merkle.cli.gc:gc",
    "verify": "merkle.cli.gc:verify",
    "diff": "merkle.cli.versions:diff",
    "merge": "merkle.cli.versions:merge",
    "tag": "merkle.cli.versions:tag",
    "push": "merkle.cli.versions:push",
    "pull": "merkle.cli.versions:pull",
    "export": "merkle.cli.versions:export",
    "import": "merkle.cli.versions:import_",
}


class _Commands(MerkleGroup):
    """The root group: each subcommand's module is imported when the command is used."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        where = COMMANDS.get(name)
        if where is None:
            return None
        module, attribute = where.split(":")
        command = getattr(importlib.import_module(module), attribute)
        assert isinstance(command, click.Command)
        return command


def _store_options(
    ctx: click.Context, param: click.Parameter, values: tuple[str, ...]
) -> dict[str, object]:
    return dict(parse_store_option(text) for text in values)


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
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


class _NoPandas:
    """Keeps pandas out of the command line's process (a meta path finder).

    pyarrow imports pandas (when it is installed) the first time it builds
    an array, only to check whether its input is a pandas object: a fifth of
    a second at every start. No command hands pyarrow a pandas object, so the
    command line (not the library) tells that check pandas is absent. (A
    plain class: the import system only calls ``find_spec``, and subclassing
    ``importlib.abc.MetaPathFinder`` would import ``importlib.resources`` and
    ``tempfile`` at every start.)
    """

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name == "pandas" or name.startswith("pandas."):
            raise ModuleNotFoundError(f"the merkle command line does not use {name}", name=name)


def main() -> None:
    """Run the command line.

    Before any command imports numpy (through pyarrow), OpenBLAS is told to
    start no worker threads unless the environment says otherwise: no command
    does linear algebra, and OpenBLAS's idle workers spin on a core for the
    life of the process, competing with the command's own threads (on a
    2-core machine ``merkle get`` took 8 ms, 6%, less without them).

    A stdout whose encoding cannot hold every character (``PYTHONIOENCODING=latin-1``)
    escapes the characters it cannot hold instead of failing half-way through the
    output with UnicodeEncodeError (``merkle.cli.output.tolerate_encoding``).

    When the interpreter exits, it runs the cyclic garbage collector over every
    object there is (numpy's and pyarrow's too), once before and once while it
    tears the modules down: about 10 ms, 8% of ``merkle get``, to free memory
    the system takes back anyway. The last exit handler moves every object to
    the collector's permanent generation (``gc.freeze``), which those passes
    skip. Objects left in reference cycles are then not finalized at exit,
    which Python never promises (every command closes its connection and
    files itself, and the reader leases' exit handler runs before this one).
    """
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    out: Any = sys.stdout
    encoding = getattr(out, "encoding", None) or "utf-8"
    if not encoding.lower().replace("-", "").startswith("utf") and hasattr(out, "reconfigure"):
        # A character stdout cannot encode is escaped, not a crash half-way through
        # the output (merkle.cli.output.tolerate_encoding; JSON escapes it the JSON way).
        out.reconfigure(errors="backslashreplace")
    atexit.register(gc.freeze)  # before any command registers one: it runs after theirs
    if "pandas" not in sys.modules:
        sys.meta_path.insert(0, _NoPandas())
    cli()


if __name__ == "__main__":  # python -m merkle.cli.main ...
    main()
