"""The root Typer application; command modules attach themselves to it.

Help is click's plain formatter (``rich_markup_mode=None``), not Typer's rich panels: the
panels cut option and variable names to fit 80 columns (``--discovery-start-interval-s…``)
and draw boxes into piped output, while click's formatter wraps descriptions and never cuts
a name.
"""

from __future__ import annotations

import typer

from crawler import __version__
from crawler.cli._common import closing_stores

app = typer.Typer(
    name="crawler",
    help="An incremental web crawler that learns which URLs deserve its polling budget.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"crawler {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    ctx: typer.Context,
    version: bool = typer.Option(
        False,
        "--version",
        callback=_print_version,
        is_eager=True,
        help="Print the version and exit.",
    ),
) -> None:
    """An incremental web crawler that learns which URLs deserve its polling budget."""
    ctx.with_resource(closing_stores())  # the stores the command opens close with it
