"""The ``crawler`` command line (CONTRACTS.md section 2): thin, parses, calls, prints."""

from __future__ import annotations

from crawler.cli._app import app


def main() -> None:
    """Console-script entry point."""
    app()


__all__ = ["app", "main"]
