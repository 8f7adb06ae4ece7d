"""Shared CLI plumbing: settings, opening the store, errors and exit statuses, output, and
number options in ASCII digits.

Numbers are ASCII only: Python's ``int()`` and ``float()`` (which click's INT and FLOAT use)
accept any Unicode digit, so ``１０`` (fullwidth) would be taken as 10. ``ascii_int`` and
``ascii_float`` (pass as ``parser=``) refuse such input as click's own types refuse ``ten``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NoReturn

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from crawler.settings import Settings, SettingsError, load_settings

if TYPE_CHECKING:
    from crawler.store import Store

#: messages: never hard-wrapped (one message is one line on a pipe or in a log)
err_console = Console(stderr=True, soft_wrap=True)
out_console = Console()

ConfigOption = typer.Option(None, "--config", help="TOML settings file (or $CRAWLER_CONFIG).")
DatabaseOption = typer.Option(
    None, "--database-url", help="Database URL (or $CRAWLER_DATABASE_URL)."
)
JsonOption = typer.Option(False, "--json", help="One JSON document on stdout.")

#: exit status of input that can never work (nothing was written)
USAGE = 2


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


def print_rows(
    title: str, headers: Sequence[str], rows: Sequence[Sequence[str]], caption: str = ""
) -> None:
    """Rows whose first cell is a URL, on stdout: a table when it fits the console's width
    (80 columns on a pipe), else one block per row (the URL on its own line, the other
    cells as ``header=value`` below). A URL is never broken in pieces: it could not be copied
    (rich folds a too-narrow column, five characters a line)."""
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]
    if sum(widths) + 3 * len(widths) + 1 <= out_console.width:
        table = Table(title=title, caption=caption or None)
        for i, header in enumerate(headers):
            justify: Literal["left", "right"] = "left" if i == 0 else "right"
            table.add_column(header, no_wrap=True, justify=justify)
        for row in rows:
            table.add_row(*(escape(cell) for cell in row))
        out_console.print(table)
        return
    write = out_console.print
    write(escape(title), highlight=False, soft_wrap=True)
    for row in rows:
        write(escape(row[0]), highlight=False, soft_wrap=True)
        pairs = [
            f"{h.replace(' ', '_')}={v.replace(' ', '_')}"
            for h, v in zip(headers[1:], row[1:], strict=True)
            if v
        ]  # name=value: a line is wrapped between pairs, never inside one
        for line in _pack(pairs, out_console.width):
            write(escape(line), highlight=False, soft_wrap=True)
    if caption:
        write(escape(caption), highlight=False, soft_wrap=True)


def _pack(pairs: list[str], width: int) -> list[str]:
    """``pairs`` as indented lines of at most ``width`` characters (a longer pair alone)."""
    lines: list[str] = []
    line = ""
    for pair in pairs:
        if line and len(line) + 2 + len(pair) > width:
            lines.append(line)
            line = ""
        line = f"{line}  {pair}"
    return [*lines, line] if line else lines


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


def service_view(store: Store, settings: Settings) -> tuple[Settings, str]:
    """``settings`` with the running (or last) service's recorded settings in place of the
    command's own (slot length, scheduler, default bounds...: what ``crawler run`` used), and
    a note saying whose they are. The database URL stays the command's."""

    record = store.service_settings()
    if not record:
        return settings, "no service has run on this database: figures use this command's settings"
    fields = Settings.model_fields.keys() - {"database_url"}
    values = {k: v for k, v in record.items() if k in fields}
    try:
        merged = Settings.model_validate(settings.model_dump() | values)
    except ValueError:  # a record of another version: keep what validates
        merged = settings
    started = record.get("started_at", "?")
    return merged, f"settings of the service started {started}"


#: the stores opened by the command running, closed when it ends (``closing_stores``)
_open_stores: ContextVar[ExitStack | None] = ContextVar("open_stores", default=None)


@contextmanager
def closing_stores() -> Iterator[None]:
    """Close every store ``open_store`` opens inside this block when it ends, failed or
    not. The root command holds it around every command: a command run in a long-lived
    process (the tests, a script calling ``app``) would otherwise leave its connection
    pool, and on PostgreSQL its open connections, to the garbage collector."""
    with ExitStack() as stores:
        token = _open_stores.set(stores)
        try:
            yield
        finally:
            _open_stores.reset(token)


def open_store(settings: Settings, *, read_only: bool = False) -> Store:
    """The store, migrated to the current schema. ``read_only`` (``list``, ``show``,
    ``stats``...): a database that does not exist yet is not created: the command fails
    saying where it looked and what to run first.

    Inside a command (``closing_stores``) the store is closed when the command ends,
    failed or not; outside one the caller closes it."""
    from crawler.store import Store

    if read_only:
        _check_exists(settings.database_url)
    store = Store(settings.database_url)
    stores = _open_stores.get()
    if stores is not None:
        stores.callback(store.close)
    with store_errors():
        if read_only and store.revision() is None:
            store.close()
            fail(_no_database(settings.database_url, "has no crawler tables"))
        store.upgrade()
    return store


def _check_exists(database_url: str) -> None:
    """Fail unless an SQLite database's file exists (connecting would create it)."""
    from sqlalchemy.engine import make_url

    url = make_url(database_url)
    if url.get_backend_name() != "sqlite":
        return
    path = url.database or ""
    if path in ("", ":memory:") or path.startswith("file:"):
        return
    if not Path(path).is_file():
        fail(_no_database(database_url, f"does not exist ({Path(path).resolve()})"))


def _no_database(database_url: str, what: str) -> str:
    where = database_url.split("@")[-1]
    return (
        f"no crawler database: {where} {what}; watch a first URL with crawler add URL "
        "(or create it with crawler db upgrade), or point --database-url / "
        "CRAWLER_DATABASE_URL at the service's database"
    )
