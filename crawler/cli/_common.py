"""Shared CLI plumbing: settings, errors, output, and number options in ASCII digits.

Numbers are ASCII only: Python's ``int()`` and ``float()`` (which click's INT and FLOAT use)
accept any Unicode digit, so ``１０`` (fullwidth) would be taken as 10. ``ascii_int`` and
``ascii_float`` (pass as ``parser=``) refuse such input as click's own types refuse ``ten``.
"""

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


def _ascii(text: str, kind: type[int] | type[float], name: str) -> Any:
    if isinstance(text, kind):  # a default given as a number
        return text
    if not isinstance(text, str) or not text.isascii():
        raise ValueError(f"{text!r} is not a valid {name}: use ASCII digits (0-9)")
    return kind(text)


def ascii_int(text: str) -> int:
    """An option's integer, written in ASCII digits (``parser=ascii_int``)."""
    return int(_ascii(text, int, "integer"))


def ascii_float(text: str) -> float:
    """An option's number, written in ASCII digits (``parser=ascii_float``)."""
    return float(_ascii(text, float, "number"))


def fail(message: str, code: int = 1) -> NoReturn:
    """Print one clear line to stderr and exit non-zero."""
    err_console.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
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
