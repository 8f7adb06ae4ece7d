"""Operator commands on watched URLs: edit, pause, resume, revive.

``crawler edit`` changes a watched URL in place: its id stays, and with it everything the
scheduler learned (``url_state`` rows are keyed by the id; remove + re-add kept the id too
but lost nothing only by luck of ``add``'s re-activation, and could not change bounds). Every
command bumps the watch-list version, so a running service applies the change at its next
slot.

Durations are parsed and shown by ``_rules.py``.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import typer
from rich.markup import escape

from crawler.cli._app import app
from crawler.cli._common import (
    USAGE,
    ConfigOption,
    DatabaseOption,
    JsonOption,
    ascii_float,
    err_console,
    fail,
    open_store,
    print_json,
    service_view,
    settings_from,
    store_errors,
)
from crawler.cli._rules import DurationHelp, format_duration, parse_duration

if TYPE_CHECKING:
    from crawler.settings import Settings
    from crawler.store import Store


def _canonical(urls: list[str]) -> list[str]:
    from crawler.fetch import validate_url

    out = []
    for raw in urls:
        try:
            out.append(validate_url(raw))
        except ValueError:
            out.append(raw)
    return out


def _selected(store: Store, urls: list[str], tags: list[str], what: str) -> list[tuple[int, str]]:
    """The watched URLs named or tagged; says which are not watched; exits if none."""
    wanted = _canonical(urls)
    found = store.select_urls(wanted, tags)
    missing = sorted(set(wanted) - {u for _, u in found})
    for url in missing:
        err_console.print(f"[yellow]not watched[/] {escape(url)}", highlight=False)
    if not found:
        fail(f"nothing to {what}: no watched URL matches")
    return found


def _open(config: str | None, database_url: str | None) -> tuple[Settings, Store]:
    settings = settings_from(config, database_url=database_url)
    return settings, open_store(settings)


@app.command()
def edit(
    urls: list[str] = typer.Argument(None, help="Watched URLs to change."),
    tagged: list[str] = typer.Option(None, "--tagged", help="Also change the URLs with this tag."),
    importance: float | None = typer.Option(
        None, "--importance", parser=ascii_float, help="Value of a change, in (0, 1]."
    ),
    min_interval: str | None = typer.Option(
        None, "--min-interval", help=f"Least time between two polls ({DurationHelp})."
    ),
    max_interval: str | None = typer.Option(
        None, "--max-interval", help=f"Most time between two polls ({DurationHelp})."
    ),
    selector: str | None = typer.Option(
        None, "--selector", help="CSS selector to watch ('' watches the whole page)."
    ),
    ignore: list[str] = typer.Option(
        None, "--ignore", help="Regex removed before hashing (replaces the URL's patterns)."
    ),
    no_ignore: bool = typer.Option(False, "--no-ignore", help="Drop the ignore patterns."),
    tag: list[str] = typer.Option(None, "--tag", help="Add a tag."),
    untag: list[str] = typer.Option(None, "--untag", help="Remove a tag."),
    config: str | None = ConfigOption,
    database_url: str | None = DatabaseOption,
    as_json: bool = JsonOption,
) -> None:
    """Change watched URLs in place: importance, bounds, selector, ignore patterns, tags.
    The URL keeps its id and everything the scheduler learned about it; a running service
    applies the change at its next slot."""
    from crawler.cli._validate import validate_rules
    from crawler.store import check_tag

    values: dict[str, Any] = {}
    if importance is not None:
        if not 0 < importance <= 1:
            fail("--importance must be in (0, 1]", USAGE)
        values["importance"] = importance
    try:
        if min_interval is not None:
            values["min_interval_s"] = parse_duration(min_interval)
        if max_interval is not None:
            values["max_interval_s"] = parse_duration(max_interval)
        for t in [*(tag or ()), *(untag or ())]:
            check_tag(t)
    except ValueError as exc:
        fail(str(exc), USAGE)
    low, high = values.get("min_interval_s"), values.get("max_interval_s")
    if low and high and low > high:
        fail("--min-interval must not be longer than --max-interval", USAGE)
    if ignore and no_ignore:
        fail("--ignore and --no-ignore together", USAGE)
    patterns = tuple(ignore or ())
    try:
        validate_rules(selector or None, patterns)
    except ValueError as exc:
        fail(str(exc), USAGE)
    if selector is not None:
        values["selector"] = selector or None
    if patterns or no_ignore:
        values["ignore_patterns"] = json.dumps(list(patterns)) if patterns else None
    if not values and not tag and not untag:
        fail("nothing to change: give --importance, --min-interval, --max-interval, "
             "--selector, --ignore, --no-ignore, --tag or --untag", USAGE)  # fmt: skip
    if not urls and not tagged:
        fail("no URLs given: pass URLs or --tagged TAG", USAGE)
    settings, store = _open(config, database_url)
    with store_errors():
        found = _selected(store, urls or [], tagged or [], "edit")
        store.edit_urls([i for i, _ in found], values, tag or (), untag or ())
        service, _ = service_view(store, settings)
    _note_short_interval(values.get("min_interval_s"), service.slot_seconds)
    changed = values | {"tags_added": tag or [], "tags_removed": untag or []}
    if as_json:
        print_json({"edited": [u for _, u in found], "changes": changed})
    else:
        err_console.print(f"edited {len(found)}")


def _note_short_interval(seconds: float | None, slot_seconds: float) -> None:
    """A minimum interval shorter than the running service's slot bounds nothing (a URL is
    polled at most once a slot anyway): say so, with the service's slot length."""
    if seconds and seconds < slot_seconds:
        err_console.print(
            f"note: --min-interval {format_duration(seconds)} is shorter than the service's "
            f"{slot_seconds:g} s slot: the URL is polled at most once a slot anyway",
            highlight=False,
        )


def _switch(
    urls: list[str] | None,
    tag: list[str] | None,
    config: str | None,
    database_url: str | None,
    paused: bool,
) -> None:
    if not urls and not tag:
        fail("no URLs given: pass URLs or --tag TAG", USAGE)
    _, store = _open(config, database_url)
    what = "pause" if paused else "resume"
    with store_errors():
        found = _selected(store, urls or [], tag or [], what)
        store.edit_urls([i for i, _ in found], {"paused": paused})
    err_console.print(f"{'paused' if paused else 'resumed'} {len(found)}")


@app.command()
def pause(
    urls: list[str] = typer.Argument(None, help="Watched URLs to pause."),
    tag: list[str] = typer.Option(None, "--tag", help="Pause the URLs with this tag."),
    config: str | None = ConfigOption,
    database_url: str | None = DatabaseOption,
) -> None:
    """Stop polling URLs without forgetting what was learned about them."""
    _switch(urls, tag, config, database_url, True)


@app.command()
def resume(
    urls: list[str] = typer.Argument(None, help="Paused URLs to poll again."),
    tag: list[str] = typer.Option(None, "--tag", help="Resume the URLs with this tag."),
    config: str | None = ConfigOption,
    database_url: str | None = DatabaseOption,
) -> None:
    """Poll paused URLs again, with their bounds and learning as they were."""
    _switch(urls, tag, config, database_url, False)


@app.command()
def revive(
    urls: list[str] = typer.Argument(None, help="Failing or retired URLs to try again."),
    failing: bool = typer.Option(False, "--failing", help="Revive every failing URL."),
    tag: list[str] = typer.Option(None, "--tag", help="Revive the URLs with this tag."),
    config: str | None = ConfigOption,
    database_url: str | None = DatabaseOption,
) -> None:
    """End the failure streak of URLs (retired ones included): they are polled at their
    learned rate again from the next slot."""
    if not urls and not tag and not failing:
        fail("no URLs given: pass URLs, --tag TAG or --failing", USAGE)
    _, store = _open(config, database_url)
    with store_errors():
        found = _selected(store, urls or [], tag or [], "revive") if urls or tag else []
        ids = {i for i, _ in found}
        if failing:
            ids |= {row.url_id for _, row in store.url_failures()}
        store.revive_urls(sorted(ids))
    err_console.print(f"revived {len(ids)}")
