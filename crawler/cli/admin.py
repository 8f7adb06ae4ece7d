"""Admin commands: add, remove, list, show, stats, db upgrade."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.markup import escape
from rich.table import Table

from crawler.cli import _rules
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
    out_console,
    print_json,
    print_rows,
    service_view,
    settings_from,
    store_errors,
)
from crawler.settings import Settings

if TYPE_CHECKING:  # imported where used: `crawler status` (a health check) loads none of it
    from crawler.store import Store

#: exit status of ``add`` given other options for a URL already watched (see ``_conflicts``)
NOT_CHANGED = 1

db_app = typer.Typer(help="Database maintenance.", no_args_is_help=True)
app.add_typer(db_app, name="db")


@db_app.command("upgrade")
def db_upgrade(
    config: str | None = ConfigOption, database_url: str | None = DatabaseOption
) -> None:
    """Apply the database migrations (``crawler run`` does this on start too)."""
    from crawler.store import Store

    settings = settings_from(config, database_url=database_url)
    with store_errors():
        Store(settings.database_url).upgrade()
    err_console.print(f"database is up to date: {settings.database_url.split('@')[-1]}")


@app.command()
def add(
    urls: list[str] = typer.Argument(None, help="URLs to watch."),
    file: str | None = typer.Option(
        None,
        "--file",
        "-f",
        help="A file of URLs (one per line), a sitemap.xml or an OPML "
        "file; - reads standard input.",
    ),
    importance: float | None = typer.Option(
        None, "--importance", parser=ascii_float, help="Value of a change, in (0, 1] (default 1)."
    ),
    selector: str | None = typer.Option(None, "--selector", help="CSS selector to watch."),
    ignore: list[str] = typer.Option(None, "--ignore", help="Regex removed before hashing."),
    tag: list[str] = typer.Option(None, "--tag", help="Tag the URLs (repeatable)."),
    skip_invalid: bool = typer.Option(
        False,
        "--skip-invalid",
        help="Add the valid URLs even if some are invalid (those are reported and skipped).",
    ),
    config: str | None = ConfigOption,
    database_url: str | None = DatabaseOption,
    as_json: bool = JsonOption,
) -> None:
    """Watch URLs. Every URL is checked with the crawl's own rules first; if any is invalid
    nothing is added (exit 2) unless --skip-invalid. A URL already watched is reported; one
    watched with other options is not changed (exit 1): crawler edit changes it."""
    from crawler.cli._sources import SourceUrl, read_url_source
    from crawler.cli._validate import check_url, validate_rules
    from crawler.fetch import AddressPolicy
    from crawler.store import NewUrl, check_tag

    if importance is not None and not 0 < importance <= 1:
        fail("--importance must be in (0, 1]", USAGE)
    patterns = tuple(ignore or ())
    try:
        validate_rules(selector, patterns)
        for t in tag or ():  # tags select URLs for edit, pause, resume, revive
            check_tag(t)
    except ValueError as exc:
        fail(str(exc), USAGE)
    candidates = [SourceUrl(u, 0) for u in urls or []]
    if file is not None:
        try:
            candidates += read_url_source(sys.stdin.read() if file == "-" else Path(file))
        except (OSError, ValueError) as exc:
            fail(f"cannot read {file}: {exc}", USAGE)
    if not candidates:
        fail("no URLs given: pass URLs or --file PATH", USAGE)
    settings = settings_from(config, database_url=database_url)
    policy = AddressPolicy(settings.allow_private_addresses)
    entries: list[NewUrl] = []
    invalid: list[dict[str, Any]] = []
    source = "-" if file == "-" else file
    for raw, line in candidates:
        try:
            url = check_url(raw, policy)
            entries.append(
                NewUrl(url, 1.0 if importance is None else importance, selector, patterns)
            )
        except ValueError as exc:
            bad: dict[str, Any] = {"url": _clip(raw), "error": str(exc)}
            if line:
                bad |= {"file": source, "line": line}
            invalid.append(bad)
    refused = bool(invalid) and not skip_invalid
    with store_errors():
        store = open_store(settings)
        report = store.add_urls([] if refused else entries)
        if tag and not refused:  # tag the new, re-activated and already watched ones
            tagged = [i for _, i in report.added + report.reactivated]
            tagged += [i for i, _ in store.select_urls(report.already_watched)]
            store.edit_urls(tagged, {}, tag)
        conflicts = [] if refused else _conflicts(store, report.already_watched, importance,
                                                   selector, ignore)  # fmt: skip
    if as_json:
        print_json(
            {
                "added": [u for u, _ in report.added],
                "reactivated": [u for u, _ in report.reactivated],
                "already_watched": report.already_watched,
                "not_changed": conflicts,
                "invalid": invalid,
            }
        )
    else:
        for bad in invalid:
            where = f"{bad['file']}:{bad['line']}: " if "line" in bad else ""
            message = escape(f"{where}{bad['error']}")
            label = "skipped" if skip_invalid else "refused"  # the error says what is wrong
            err_console.print(f"[yellow]{label}:[/] {message}", highlight=False)
        differ = {c["url"] for c in conflicts}
        for url in dict.fromkeys(report.already_watched):
            if url not in differ:
                err_console.print(f"[dim]already watched[/] {escape(url)}", highlight=False)
        for c in conflicts:
            err_console.print(
                f"[yellow]already watched with other options, not changed:[/] "
                f"{escape(c['url'])} ({escape(c['differs'])}); to change it run: "
                f"{escape(c['edit'])}",
                highlight=False,
            )
        if refused:
            err_console.print(
                f"nothing added: {len(invalid)} invalid URL(s) of {len(candidates)}; fix them, "
                "or pass --skip-invalid to add the valid ones"
            )
        else:
            err_console.print(
                f"added {len(report.added)}, re-activated {len(report.reactivated)}, "
                f"already watched {len(report.already_watched)}, invalid {len(invalid)}"
            )
    if refused or (invalid and not entries):
        raise typer.Exit(USAGE)
    if conflicts:
        raise typer.Exit(NOT_CHANGED)


def _conflicts(
    store: Store,
    watched: list[str],
    importance: float | None,
    selector: str | None,
    ignore: list[str] | None,
) -> list[dict[str, str]]:
    """The already watched URLs whose options differ from the ones given to ``add``: not
    changed (a re-run of a bulk ``add`` must not overwrite what ``crawler edit`` set), each
    with the ``crawler edit`` command that would apply them."""
    import shlex

    if importance is None and selector is None and not ignore:
        return []
    import numpy as np

    found = store.select_urls(list(dict.fromkeys(watched)))  # a few queries, not one a URL
    records = store.url_records(i for i, _ in found)
    ids, weights = store.active_urls()
    out = []
    for uid, url in found:
        record = records.get(uid)
        at = int(np.searchsorted(ids, uid))
        if record is None or at >= ids.size or ids[at] != uid:
            continue
        current = float(weights[at])
        differs, flags = [], []
        if importance is not None and abs(current - importance) > 1e-9:
            differs.append(f"importance {current:g}, not {importance:g}")
            flags += ["--importance", f"{importance:g}"]
        if selector is not None and record.selector != selector:
            differs.append(f"selector {record.selector or 'none'}, not {selector}")
            flags += ["--selector", selector]
        if ignore and list(record.ignore_patterns) != list(ignore):
            differs.append(f"ignore patterns {list(record.ignore_patterns)}, not {list(ignore)}")
            for pattern in ignore:
                flags += ["--ignore", pattern]
        if differs:
            edit = shlex.join(["crawler", "edit", url, *flags])
            out.append({"url": url, "differs": "; ".join(differs), "edit": edit})
    return out


def _clip(url: str, keep: int = 200) -> str:
    """A URL short enough to print (a 10 MB line is reported by its start)."""
    return url if len(url) <= keep else f"{url[:keep]}... ({len(url):,} characters)"


@app.command()
def remove(
    urls: list[str] = typer.Argument(..., help="URLs to stop watching."),
    config: str | None = ConfigOption,
    database_url: str | None = DatabaseOption,
) -> None:
    """Stop watching URLs (their history is kept)."""
    from crawler.fetch import validate_url

    settings = settings_from(config, database_url=database_url)
    canonical = []
    for raw in urls:
        try:
            canonical.append(validate_url(raw))
        except ValueError:
            canonical.append(raw)
    with store_errors():
        removed = open_store(settings).remove_urls(canonical)
    missing = sorted(set(canonical) - set(removed))
    for url in missing:
        err_console.print(f"[yellow]not watched[/] {escape(url)}", highlight=False)
    err_console.print(f"removed {len(removed)}")
    if missing and not removed:
        raise typer.Exit(1)


def learned_frequencies(store: Store, settings: Settings) -> dict[int, float]:
    """The configured scheduler's wanted polls per slot by URL id (empty if none saved)."""
    try:
        return store.wanted_frequencies(settings.scheduler)
    except (ValueError, KeyError) as exc:
        err_console.print(f"[yellow]scheduler state unreadable:[/] {exc}")
        return {}


def _cap_text(cap: dict[str, Any] | None) -> str:
    """A host's politeness cap for ``crawler list``: polls per slot, and whether it binds
    (the scheduler would give the host more polls without it)."""
    if cap is None:
        return ""
    return f"{cap['polls_per_slot']:.3g}" + (" binds" if cap["binding"] else "")


@app.command("list")
def list_urls(
    config: str | None = ConfigOption,
    database_url: str | None = DatabaseOption,
    as_json: bool = JsonOption,
    removed: bool = typer.Option(False, "--removed", help="Include removed URLs."),
    failing: bool = typer.Option(
        False, "--failing", help="Only the failing URLs: streak, last error, retired."
    ),
) -> None:
    """Watched URLs with importance, wanted frequency, bounds, pause, last poll, hits,
    misses, errors."""
    from crawler.sites import host_key

    settings = settings_from(config, database_url=database_url)
    with store_errors():
        store = open_store(settings, read_only=True)
        if failing:
            _rules.print_failing(store, settings, as_json)
            return
        settings, whose = service_view(store, settings)
        rows = store.list_urls(include_removed=removed)
        wanted = learned_frequencies(store, settings)
        rules = _rules.url_rules(store, settings)
        caps = store.host_caps()  # the politeness caps the service last wrote
    docs: list[dict[str, Any]] = []
    for row in rows:
        doc = row.as_dict()
        doc["wanted_frequency"] = wanted.get(row.id)
        doc |= _rules.defaults(settings) | rules.get(row.id, {})
        cap = caps.get(host_key(row.host))
        doc["host_cap"] = None if cap is None else {
            "polls_per_slot": cap.cap,
            "planned": cap.planned,
            "binding": cap.binding,
            "reason": cap.reason,
        }  # fmt: skip
        docs.append(doc)
    if as_json:
        print_json({"scheduler": settings.scheduler, "settings": whose, "urls": docs})
        return
    cells: list[list[str]] = []
    for doc in docs:
        x = doc["wanted_frequency"]
        cells.append([
            doc["url"],
            f"{doc['importance']:.2f}",
            "-" if x is None else f"{x:.4f}",
            _rules.bound_text(doc),
            "yes" if doc["paused"] else "",
            _cap_text(doc["host_cap"]),
            (doc["last_polled_at"] or "never")[:19],
            str(doc["hits"]),
            str(doc["misses"] + doc["not_modified"]),
            str(doc["errors"]),
        ])  # fmt: skip
    headers = ("url", "importance", "wanted/slot", "bounds", "paused", "host cap", "last poll",
               "hits", "misses", "errors")  # fmt: skip
    title = f"{len(docs)} URLs (scheduler {settings.scheduler}, {settings.slot_seconds:g} s slots)"
    print_rows(title, headers, cells, whose)


@app.command()
def show(
    url: str = typer.Argument(..., help="A watched URL."),
    config: str | None = ConfigOption,
    database_url: str | None = DatabaseOption,
    as_json: bool = JsonOption,
) -> None:
    """One URL: its automaton state, recent polls and changes."""
    from crawler.fetch import validate_url

    settings = settings_from(config, database_url=database_url)
    try:
        url = validate_url(url)
    except ValueError as exc:
        fail(str(exc))

    with store_errors():
        store = open_store(settings, read_only=True)
        detail = store.url_detail(url)
        if detail is None:
            fail(f"not watched: {url} (crawler list shows the watched URLs)")
        settings, whose = service_view(store, settings)
        wanted = learned_frequencies(store, settings)
        rules = _rules.defaults(settings) | _rules.url_rules(store, settings).get(detail.row.id, {})
    doc = detail.as_dict()
    doc["wanted_frequency"] = wanted.get(detail.row.id)
    doc |= {k: rules[k] for k in ("min_interval_s", "max_interval_s", "paused", "tags")}
    doc["settings"] = whose
    if as_json:
        print_json(doc)
        return
    row = doc["row"]
    out_console.print(f"[bold]{escape(row['url'])}[/]  (id {row['id']}, host {row['host']})")
    wanted_text = "-" if doc["wanted_frequency"] is None else f"{doc['wanted_frequency']:.4g}"
    patterns = ", ".join(f"'{p}'" for p in doc["ignore_patterns"]) or "none"
    lines = [
        f"importance {row['importance']:.2f}  wanted {wanted_text} polls/slot  "
        f"bounds {_rules.bound_text(doc)}{'  paused' if doc['paused'] else ''}"
        f"  tags {', '.join(doc['tags']) or 'none'}",
        f"polls {row['polls']}: hits {row['hits']}, misses {row['misses']}, "
        f"not modified {row['not_modified']}, errors {row['errors']}",
        f"selector {doc['selector'] or 'none (the whole page)'}  ignore patterns {patterns}",
    ]
    for line in lines:
        out_console.print(escape(line), highlight=False)
    for name, fields in doc["state"].items():
        out_console.print(f"scheduler {name}: {fields}")
    polls = Table(title="recent polls")
    for col in ("time", "slot", "outcome", "status", "seconds", "bytes", "truncated", "error"):
        polls.add_column(col)
    for p in doc["polls"]:
        polls.add_row(
            p["polled_at"][:19],
            str(p["slot"]),
            p["outcome"],
            str(p["status"] or "-"),
            f"{p['duration_s']:.3f}",
            str(p["bytes"]),
            "yes" if p["truncated"] else "",
            p["error"] or "",
        )
    out_console.print(polls)
    changes = Table(title="recent changes")
    for col in ("time", "slot", "old hash", "new hash"):
        changes.add_column(col)
    for c in doc["changes"]:
        changes.add_row(
            c["detected_at"][:19],
            str(c["slot"]),
            (c["old_hash"] or "-")[:12],
            (c["new_hash"] or "-")[:12],
        )
    out_console.print(changes)


@app.command()
def stats(
    config: str | None = ConfigOption,
    database_url: str | None = DatabaseOption,
    as_json: bool = JsonOption,
    top: int = typer.Option(10, "--top", min=0, help="How many hosts to list by deferred polls."),
) -> None:
    """Totals: URLs, polls, hits, misses, errors, hit rate per poll and per slot, slots run;
    polls deferred (selected, not made by the slot's deadline) by reason, and the hosts with
    the most, per reason."""
    from crawler.workers import DEFERRED_REASONS

    settings = settings_from(config, database_url=database_url)
    with store_errors():
        totals = open_store(settings, read_only=True).stats(top_hosts=top).as_dict()
    if as_json:
        print_json(totals)
        return
    deferred: dict[str, int] = totals.pop("deferred")
    hosts: list[dict[str, Any]] = totals.pop("deferred_hosts")
    table = Table(title="crawler stats", show_header=False)
    for key, value in totals.items():
        shown = f"{value:.4f}" if isinstance(value, float) else str(value)
        table.add_row(key.replace("_", " "), shown)
    # politeness, backoff and timeout always; shutdown, lease and any other if seen
    reasons = [r for r in DEFERRED_REASONS if r not in ("shutdown", "lease") or r in deferred]
    reasons += sorted(deferred.keys() - set(reasons))
    table.add_row("deferred", str(sum(deferred.values())))
    for reason in reasons:
        table.add_row(f"  by {reason}", str(deferred.get(reason, 0)))
    out_console.print(table)
    if not hosts:
        return
    by_host = Table(title=f"hosts with the most deferred polls (top {len(hosts)})")
    for col in ("host", "deferred", *reasons):
        by_host.add_column(col, justify="left" if col == "host" else "right")
    for h in hosts:
        counts = [str(h["by_reason"].get(r, 0)) for r in reasons]
        by_host.add_row(escape(h["host"]), str(h["deferred"]), *counts)
    out_console.print(by_host)
