"""The ``crawler`` command line (docs/cli.md): thin, parses, calls, prints."""

from __future__ import annotations

from crawler.cli import admin as _admin  # noqa: F401  (registers its commands)
from crawler.cli import demo as _demo  # noqa: F401
from crawler.cli import destinations as _destinations  # noqa: F401  (webhook destinations)
from crawler.cli import discover as _discover  # noqa: F401  (sources, discovered)
from crawler.cli import edit as _edit  # noqa: F401  (edit, pause, resume, revive)
from crawler.cli import events as _events  # noqa: F401  (the outbox: list, replay)
from crawler.cli import history as _history  # noqa: F401  (diff, changes)
from crawler.cli import run as _run  # noqa: F401
from crawler.cli import simulate as _simulate  # noqa: F401
from crawler.cli import status as _status  # noqa: F401
from crawler.cli import workers as _workers  # noqa: F401  (the cluster)
from crawler.cli._app import app


def main() -> None:
    """Console-script entry point."""
    app(prog_name="crawler")


__all__ = ["app", "main"]
