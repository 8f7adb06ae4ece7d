"""Shared CLI plumbing: settings, errors, output."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape

from crawler.settings import Settings, SettingsError, load_settings

err_console = Console(stderr=True)
out_console = Console()

ConfigOption = typer.Option(None, "--config", help="TOML settings file (or $CRAWLER_CONFIG).")
DatabaseOption = typer.Option(
    None, "--database-url", help="Database URL (or $CRAWLER_DATABASE_URL)."
)
JsonOption = typer.Option(False, "--json", help="One JSON document on stdout.")


def fail(message: str, code: int = 1) -> NoReturn:
    """Print one clear line to stderr and exit non-zero."""
    err_console.print(f"[bold red]error:[/] {escape(message)}", highlight=False)
    raise typer.Exit(code)


def settings_from(config: str | None, **overrides: Any) -> Settings:
    try:
        return load_settings(overrides, config)
    except SettingsError as exc:
        fail(str(exc))


def print_json(document: Any) -> None:
    sys.stdout.write(json.dumps(document, indent=2, default=str) + "\n")


@contextmanager
def store_errors() -> Iterator[None]:
    """Turn database failures into one clear line."""
    from crawler.store import StoreError

    try:
        yield
    except StoreError as exc:
        fail(f"{exc} (check --database-url / CRAWLER_DATABASE_URL, and that the server is up)")
