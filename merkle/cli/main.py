"""The ``merkle`` click group and the entry point of the console script."""

from __future__ import annotations

import click

from merkle import __version__

__all__ = ["cli", "main"]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="merkle")
@click.option(
    "--lake",
    envvar="MERKLE_LAKE",
    metavar="URI",
    help="The lake: file:///path, a plain path, memory://, or s3://bucket/prefix "
    "(default: $MERKLE_LAKE).",
)
@click.pass_context
def cli(ctx: click.Context, lake: str | None) -> None:
    """merkle-db: versioned, content-addressed tables on files or S3."""
    ctx.obj = {"lake": lake}


def main() -> None:
    """Run the command line."""
    cli()
