"""History commands: ``crawler diff`` (a change's before and after) and ``crawler changes``.

Both only read: they open an existing database at the current schema and never create or
migrate one (``open_existing_store``). ``diff`` colours its unified diff with rich on a
terminal and prints it plain when piped; ``--html`` prints ``difflib.HtmlDiff``'s page.
``changes`` pages through the changes a thousand at a time, so a large export streams.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from datetime import datetime
from typing import TYPE_CHECKING, Any

import typer
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from crawler.cli._app import app
from crawler.cli._common import (
    USAGE,
    ConfigOption,
    DatabaseOption,
    err_console,
    fail,
    out_console,
    settings_from,
    store_errors,
)
from crawler.cli._rules import parse_since
from crawler.settings import Settings

if TYPE_CHECKING:
    from crawler.store import ChangeInfo, ChangeText, Store

#: changes read per query by ``crawler changes``
PAGE = 1_000
_DIFF_STYLES = {"+": "green", "-": "red", "@": "cyan"}


def open_existing_store(settings: Settings) -> Store:
    """The database of ``settings`` for reading only: fails (nothing created) when there is
    none, or when its schema is not the current one."""
    from sqlalchemy.engine import make_url

    from crawler.store import Store, head_revision

    where = settings.database_url.split("@")[-1]
    url = make_url(settings.database_url)
    if url.get_backend_name() == "sqlite":
        from pathlib import Path

        path = url.database or ""
        if path in ("", ":memory:") or not Path(path).expanduser().is_file():
            fail(f"no database at {where}: check --database-url, or start `crawler run`")
    with store_errors():
        store = Store(settings.database_url)
        revision = store.revision()
    if revision is None:
        store.close()
        fail(f"no crawler database at {where}: check --database-url, or start `crawler run`")
    if revision != head_revision():
        store.close()
        fail(f"the database at {where} has an older schema: run `crawler db upgrade` first")
    return store


def _canonical(url: str) -> str:
    from crawler.fetch import validate_url

    try:
        return validate_url(url)
    except ValueError as exc:
        fail(str(exc))


def _print_diff(diff: str) -> None:
    """Coloured on a terminal (rich), plain when piped."""
    if not out_console.is_terminal:
        sys.stdout.write(diff)
        return
    for line in diff.splitlines():
        style = _DIFF_STYLES.get(line[:1])
        if line.startswith(("---", "+++")):
            style = "bold"
        out_console.print(Text(line, style=style or ""), soft_wrap=True, highlight=False)


@app.command()
def diff(
    url: str = typer.Argument(..., help="A watched URL."),
    change: int | None = typer.Option(
        None, "--change", help="The change's id (`crawler changes`); default: the newest."
    ),
    as_html: bool = typer.Option(False, "--html", help="An HTML page (side-by-side table)."),
    config: str | None = ConfigOption,
    database_url: str | None = DatabaseOption,
) -> None:
    """The unified diff of a change: the text it replaced, turned into the new text."""
    from crawler.detect import html_diff, unified_diff

    settings = settings_from(config, database_url=database_url)
    url = _canonical(url)
    store = open_existing_store(settings)
    try:
        with store_errors():
            change_id = store.latest_change_id(url) if change is None else change
            if change_id is None:
                fail(f"no change recorded for {url} (is it watched? `crawler show URL`)")
            found = store.change_text(change_id)
    finally:
        store.close()
    if found is None:
        fail(f"no change {change_id}: `crawler changes --url URL` lists them")
    if found.info.url != url:
        fail(f"change {change_id} is of {found.info.url}, not of {url}")
    if found.after is None:
        fail(
            f"the text of change {change_id} was not kept (store_snapshots was off, or "
            "snapshot_max_bytes is 0)"
        )
    before = found.before
    if before is None:
        err_console.print(
            f"note: the text before change {change_id} was not kept (the URL was watched "
            "before its texts were, or a change in between was not recorded): "
            "showing the whole new text as added"
        )
    info = found.info
    before_label = f"{url} (before, {(info.old_hash or '-')[:12]})"
    after_label = f"{url} (change {info.id}, {info.detected_at.isoformat()})"
    if as_html:
        sys.stdout.write(
            html_diff(before or "", found.after, before_label=before_label, after_label=after_label)
        )
        return
    text = unified_diff(
        before or "", found.after, before_label=before_label, after_label=after_label
    )
    if not text:
        err_console.print("the before and after texts read the same (only whitespace moved)")
        return
    _print_diff(text)


def _pages(
    store: Store, since: datetime | None, url: str | None, tag: str | None
) -> Iterator[list[ChangeInfo]]:
    after: int | None = None
    while True:
        with store_errors():
            page = store.list_changes(since=since, url=url, tag=tag, after_id=after, limit=PAGE)
        if not page:
            return
        yield page
        if len(page) < PAGE:
            return
        after = page[-1].id


def _documents(store: Store, page: list[ChangeInfo], with_text: bool) -> list[dict[str, Any]]:
    if not with_text:
        return [c.as_dict() for c in page]
    from crawler.detect import unified_diff

    with store_errors():
        texts: dict[int, ChangeText] = store.change_texts([c.id for c in page])
    out = []
    for c in page:
        found = texts.get(c.id)
        doc = c.as_dict()
        if found is not None:
            doc |= {"before": found.before, "after": found.after}
            doc["diff"] = (
                None
                if found.before is None or found.after is None
                else unified_diff(found.before, found.after, before_label=c.url, after_label=c.url)
            )
        out.append(doc)
    return out


@app.command()
def changes(
    since: str | None = typer.Option(
        None, "--since", help="Only changes detected since: a duration (1h, 2d) or ISO time."
    ),
    url: str | None = typer.Option(None, "--url", help="Only this URL's changes."),
    tag: str | None = typer.Option(None, "--tag", help="Only changes of URLs with this tag."),
    as_json: bool = typer.Option(False, "--json", help="A JSON list on stdout."),
    as_ndjson: bool = typer.Option(False, "--ndjson", help="One JSON object a line."),
    with_text: bool = typer.Option(
        False, "--text", help="With --json/--ndjson: each change's before, after and diff."
    ),
    config: str | None = ConfigOption,
    database_url: str | None = DatabaseOption,
) -> None:
    """The committed changes, oldest first: a table, a JSON list or NDJSON."""
    if as_json and as_ndjson:
        fail("give --json or --ndjson, not both", USAGE)
    if with_text and not (as_json or as_ndjson):
        fail("--text goes with --json or --ndjson", USAGE)
    try:
        start = None if since is None else parse_since(since)
    except ValueError as exc:
        fail(str(exc), USAGE)
    settings = settings_from(config, database_url=database_url)
    only = None if url is None else _canonical(url)
    store = open_existing_store(settings)
    try:
        if as_json or as_ndjson:
            _write_json(store, start, only, tag, with_text, as_ndjson)
        else:
            _print_table(store, start, only, tag)
    finally:
        store.close()


def _write_json(
    store: Store,
    since: datetime | None,
    url: str | None,
    tag: str | None,
    with_text: bool,
    ndjson: bool,
) -> None:
    """Streamed a page at a time: the JSON list is written as it is read."""
    write = sys.stdout.write
    first = True
    if not ndjson:
        write("[")
    for page in _pages(store, since, url, tag):
        for doc in _documents(store, page, with_text):
            if ndjson:
                write(json.dumps(doc) + "\n")
                continue
            write(("\n  " if first else ",\n  ") + json.dumps(doc))
            first = False
    if not ndjson:
        write("\n]\n" if not first else "]\n")


def _print_table(store: Store, since: datetime | None, url: str | None, tag: str | None) -> None:
    table = Table(title="changes")
    for col in ("id", "detected", "url", "old hash", "new hash", "tags"):
        table.add_column(col, overflow="fold")  # a URL is shown whole, over several lines
    count = 0
    for page in _pages(store, since, url, tag):
        for c in page:
            table.add_row(
                str(c.id),
                c.detected_at.isoformat()[:19],
                escape(c.url),
                (c.old_hash or "-")[:12],
                (c.new_hash or "-")[:12],
                ", ".join(c.tags),
            )
            count += 1
    out_console.print(table)
    err_console.print(f"{count} changes (`crawler diff URL --change ID` shows one)")
