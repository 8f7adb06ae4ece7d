"""The root Typer application; command modules attach themselves to it."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="crawler",
    help="An incremental web crawler that learns which URLs deserve its polling budget.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
