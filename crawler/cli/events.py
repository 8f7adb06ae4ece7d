"""``crawler events [--failed] [--json]`` and ``crawler events replay ID|--failed``."""

from __future__ import annotations

import typer
from rich.markup import escape
from rich.table import Table

from crawler.cli._app import app
from crawler.cli._common import (
    USAGE,
    ConfigOption,
    DatabaseOption,
    JsonOption,
    err_console,
    fail,
    open_store,
    out_console,
    print_json,
    settings_from,
    store_errors,
)

events_app = typer.Typer(
    help="The outbox's events and their deliveries (no sub-command: list them).",
    invoke_without_command=True,
)
app.add_typer(events_app, name="events")


@events_app.callback()
def events(
    ctx: typer.Context,
    failed: bool = typer.Option(False, "--failed", help="Only the dead-lettered deliveries."),
    limit: int = typer.Option(100, "--limit", min=1, help="How many, newest first."),
    config: str | None = ConfigOption,
    database_url: str | None = DatabaseOption,
    as_json: bool = JsonOption,
) -> None:
    """The latest deliveries: event id, type, URL, destination, status, attempts."""
    if ctx.invoked_subcommand is not None:
        return

    settings = settings_from(config, database_url=database_url)
    with store_errors():
        rows = open_store(settings).outbox.list_deliveries(failed=failed, limit=limit)
    if as_json:
        print_json({"deliveries": [r.as_json() for r in rows]})
        return
    table = Table()
    for col in ("id", "type", "url", "destination", "status", "attempts", "last answer"):
        table.add_column(col)
    for r in rows:
        table.add_row(
            f"msg_{r.event_id}",
            r.type,
            escape(r.url or ""),
            str(r.destination_id),
            r.status,
            str(r.attempts),
            escape((r.last_error or "")[:80]),
        )
    out_console.print(table)


@events_app.command("replay")
def events_replay(
    event_id: str | None = typer.Argument(None, help="An event id (msg_123 or 123)."),
    failed: bool = typer.Option(False, "--failed", help="Every dead-lettered delivery."),
    config: str | None = ConfigOption,
    database_url: str | None = DatabaseOption,
) -> None:
    """Send again: one event to every destination that had it, or (--failed) every
    dead-lettered delivery. The running service sends them (same ids) at its next pass."""
    from crawler.delivery import parse_message_id

    if (event_id is None) == (not failed):
        fail("give an event id or --failed (not both)", USAGE)
    try:
        wanted = parse_message_id(event_id) if event_id is not None else None
    except ValueError as exc:
        fail(str(exc), USAGE)
    settings = settings_from(config, database_url=database_url)
    with store_errors():
        n = open_store(settings).outbox.replay(wanted)
    if wanted is not None and n == 0:
        fail(f"no delivery of msg_{wanted} (see crawler events)")
    err_console.print(f"{n} deliver{'y' if n == 1 else 'ies'} queued again")
