"""Discovery commands: ``crawler sources add/list/remove`` and ``crawler discovered``.

A source's URL is checked with the crawl's own rules (``crawler add``'s ``check_url``); its
include/exclude patterns must compile with RE2 through ``crawler.discovery.compile_pattern``,
the function the service's scope rules run them with (linear time: a remote page's links are
matched against them); its numbers must fit their database columns (``INTEGER``: up to
2,147,483,647 on both databases), and an ``--allow-domain`` must not be a public suffix
(``com``, ``co.uk``, ``github.io``: the whole of it would be in scope), by the Public Suffix
List the ``publicsuffixlist`` package ships (offline; no fetch at run time). Nothing is
written when anything is refused (exit 2), and the message names the option.
"""

from __future__ import annotations

import functools
import textwrap
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import typer
from rich.markup import escape

from crawler.cli._app import app
from crawler.cli._common import (
    USAGE,
    ConfigOption,
    DatabaseOption,
    JsonOption,
    ascii_int,
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
from crawler.cli._rules import parse_since

if TYPE_CHECKING:
    from publicsuffixlist import PublicSuffixList

sources_app = typer.Typer(help="Sources that discovery follows links from.", no_args_is_help=True)
app.add_typer(sources_app, name="sources")

#: the largest value of the database's INTEGER columns (SQLite's are wider; PostgreSQL's not)
INTEGER_MAX = 2**31 - 1


def _check_patterns(patterns: list[str], flag: str) -> tuple[str, ...]:
    """The patterns, each compiled as the service will run it (RE2); exit 2 naming the first
    one that cannot be."""
    from crawler.discovery import compile_pattern

    for pattern in patterns:
        try:
            compile_pattern(pattern)
        except ValueError as exc:
            fail(f"{flag} {exc}", USAGE)
    return tuple(patterns)


def _check_range(value: int | None, flag: str, low: int, what: str) -> None:
    """Exit 2 unless ``value`` (None: not given) fits ``low..INTEGER_MAX``."""
    if value is not None and not low <= value <= INTEGER_MAX:
        fail(f"{flag} {value}: {what} must be from {low} to {INTEGER_MAX:,}", USAGE)


@functools.cache
def _public_suffixes() -> PublicSuffixList:
    """The Public Suffix List, parsed once per process (0.14 s of CPU a parse, 2026-11-27):
    it is only read."""
    from publicsuffixlist import PublicSuffixList

    return PublicSuffixList()


def _check_domains(domains: list[str]) -> tuple[str, ...]:
    """The allowed domains, lower-case; exit 2 on a public suffix or a name that is no
    domain."""
    out = []
    for raw in domains:
        domain = raw.strip().lower().strip(".")
        if not domain:
            continue
        try:
            ascii_form = domain.encode("idna").decode("ascii")
        except UnicodeError:
            fail(f"--allow-domain {raw!r}: not a domain name", USAGE)
        suffixes = _public_suffixes()
        if suffixes.is_public(ascii_form) or suffixes.is_public(domain):
            fail(
                f"--allow-domain {raw!r}: a public suffix (anyone can register under it); "
                "give a registered domain, e.g. example.com",
                USAGE,
            )
        out.append(domain)
    return tuple(out)


@sources_app.command("add")
def sources_add(
    url: str = typer.Argument(..., help="The source: a front page, a section index."),
    scope: str = typer.Option(
        "host", "--scope", help="host: the source's host only; domain: also its subdomains."
    ),
    allow_domain: list[str] = typer.Option(
        None, "--allow-domain", help="Also follow links to this domain and its subdomains."
    ),
    include: list[str] = typer.Option(
        None, "--include", help="Follow only URLs matching one of these regexes."
    ),
    exclude: list[str] = typer.Option(
        None, "--exclude", help="Never follow URLs matching this regex."
    ),
    topic: str | None = typer.Option(
        None, "--topic", help='Keywords ("kw kw"): record only new pages with half of them.'
    ),
    max_depth: int = typer.Option(
        5, "--max-depth", parser=ascii_int, help="Links followed from the source."
    ),
    budget: int = typer.Option(10, "--budget", parser=ascii_int, help="Pages per slot, at most."),
    run_budget: int | None = typer.Option(
        None,
        "--run-budget",
        parser=ascii_int,
        help="Pages in all before the source stops (default: no limit).",
    ),
    watch: bool = typer.Option(False, "--watch", help="Add the new pages to the watch list."),
    config: str | None = ConfigOption,
    database_url: str | None = DatabaseOption,
    as_json: bool = JsonOption,
) -> None:
    """Discover new pages from URL (added again: its options are replaced)."""
    from crawler.cli._validate import check_url
    from crawler.discovery import compile_pattern
    from crawler.fetch import AddressPolicy
    from crawler.store import SourceSpec

    settings = settings_from(config, database_url=database_url)
    try:
        canonical = check_url(url, AddressPolicy(settings.allow_private_addresses))
    except ValueError as exc:
        fail(str(exc), USAGE)
    _check_range(max_depth, "--max-depth", 0, "the depth")
    _check_range(budget, "--budget", 1, "the pages per slot")
    _check_range(run_budget, "--run-budget", 1, "the pages in all")
    domains = _check_domains(allow_domain or [])
    try:
        spec = SourceSpec(
            canonical,
            scope=scope,
            allowed_domains=domains,
            include=_check_patterns(include or [], "--include"),
            exclude=_check_patterns(exclude or [], "--exclude"),
            topic=(topic or "").strip() or None,
            max_depth=max_depth,
            budget_per_slot=budget,
            budget_per_run=run_budget,
            auto_watch=watch,
        )
    except ValueError as exc:
        fail(str(exc), USAGE)
    if spec.include and not any(compile_pattern(p).search(canonical) for p in spec.include):
        fail(f"{canonical} matches none of its own --include patterns", USAGE)
    if any(compile_pattern(p).search(canonical) for p in spec.exclude):
        fail(f"{canonical} matches its own --exclude pattern", USAGE)
    with store_errors():
        source_id, new = open_store(settings).discovery.add_source(spec)
    if as_json:
        print_json({"url": canonical, "id": source_id, "added": new})
        return
    err_console.print(f"{'added' if new else 'updated'} source {escape(canonical)}")


@sources_app.command("remove")
def sources_remove(
    url: str = typer.Argument(..., help="The source to stop discovering from."),
    config: str | None = ConfigOption,
    database_url: str | None = DatabaseOption,
) -> None:
    """Stop discovering from URL (what it found stays listed; exit 1 if not a source)."""
    from crawler.fetch import validate_url

    settings = settings_from(config, database_url=database_url)
    try:
        canonical = validate_url(url)
    except ValueError as exc:
        fail(str(exc), USAGE)
    with store_errors():
        removed = open_store(settings).discovery.remove_source(canonical)
    if not removed:
        fail(f"not a source: {canonical}")
    err_console.print(f"removed source {escape(canonical)}")


@sources_app.command("list")
def sources_list(
    config: str | None = ConfigOption,
    database_url: str | None = DatabaseOption,
    as_json: bool = JsonOption,
    starts: bool = typer.Option(
        False,
        "--starts",
        help="Also each source's start pages: new pages per slot found through each, and "
        "how often it is read (which sections pay).",
    ),
) -> None:
    """The sources with their options and counts: discovery polls, new pages found, each
    one's share of all discovery polls; and the expiry rule in force (the running service's
    settings, as it recorded them at its start)."""
    from crawler.discovery import start_report, starved_reason
    from crawler.service import source_problem

    settings = settings_from(config, database_url=database_url)
    with store_errors():
        store = open_store(settings, read_only=True)
        settings, whose = service_view(store, settings)
        rows = store.discovery.sources()
        watched = int(store.active_urls()[0].size) if settings.capacity is None else 0
    total = sum(r.polls for r in rows)
    rule = (
        f"a discovered page expires when no page fetched by discovery has linked it for "
        f"{settings.discovery_expire_days:g} days, or when it answers 404 or 410"
        if settings.discovery_expire_days > 0
        else "a discovered page expires when it answers 404 or 410 (never by age)"
    )
    share = settings.discovery_share
    starved = starved_reason(share, settings.effective_capacity(watched)) if rows else None
    documents: list[dict[str, Any]] = []
    for r in rows:
        s = r.spec
        documents.append(
            {
                "url": s.url, "scope": s.scope, "allowed_domains": list(s.allowed_domains),
                "include": list(s.include), "exclude": list(s.exclude), "topic": s.topic,
                "max_depth": s.max_depth, "budget_per_slot": s.budget_per_slot,
                "budget_per_run": s.budget_per_run, "watch": s.auto_watch,
                "created_at": r.created_at.isoformat(), "polls": r.polls, "found": r.found,
                "share_of_polls": r.polls / total if total else None,
                "problem": source_problem(r),
            }
        )  # fmt: skip
        if starts:
            documents[-1]["starts"] = [
                {
                    "url": f.url, "read_by": f.read_by, "yield_per_slot": f.yield_per_slot,
                    "share_of_polls": f.share_of_polls, "interval_slots": f.interval_slots,
                }
                for f in start_report(
                    r.state,
                    target_slots=settings.discovery_start_interval_slots,
                    min_yield=settings.discovery_start_min_yield,
                )
            ]  # fmt: skip
    if as_json:
        print_json(
            {
                "discovery_share": share, "no_polls_because": starved, "expiry": rule,
                "settings": whose, "sources": documents,
            }
        )  # fmt: skip
        return
    cells: list[list[str]] = []
    for d in documents:
        scope = d["scope"] + "".join(f" +{x}" for x in d["allowed_domains"])
        run = f"/{d['budget_per_run']}" if d["budget_per_run"] else ""
        part = "-" if d["share_of_polls"] is None else f"{d['share_of_polls']:.0%}"
        cells.append([
            d["url"], scope, str(d["max_depth"]), f"{d['budget_per_slot']}{run}",
            "yes" if d["watch"] else "no", str(d["polls"]), str(d["found"]), part,
        ])  # fmt: skip
    headers = ("source", "scope", "depth", "budget", "watch", "polls", "found", "share")
    print_rows(_count(len(cells), "source"), headers, cells, whose)
    _say(f"discovery share of each slot: {share:g}; expiry: {rule}")
    if starved:
        _say(f"discovery gets no polls: {starved}")
    for d in documents:
        if d["problem"]:
            out_console.print(
                f"[bold red]skipped by the service:[/] {escape(d['url'])}: {escape(d['problem'])}"
                " (add it again with a fix)",
                highlight=False,
                soft_wrap=True,
            )
    for d in documents if starts else []:
        if not d["starts"]:
            out_console.print(
                f"start pages of {escape(d['url'])}: none learned yet",
                highlight=False,
                soft_wrap=True,
            )
            continue
        pages: list[list[str]] = []
        for f in d["starts"]:
            part = "-" if f["share_of_polls"] is None else f"{f['share_of_polls']:.0%}"
            every = "-" if f["interval_slots"] is None else f"{f['interval_slots']:g} slots"
            pages.append([f["url"], f["read_by"], f"{f['yield_per_slot']:.3f}", part, every])
        print_rows(
            f"start pages of {d['url']}",
            ("start page", "read by", "new pages/slot", "share of polls", "read at least every"),
            pages,
        )


@app.command()
def discovered(
    since: str | None = typer.Option(None, "--since", help="1h, 2d or an ISO 8601 time."),
    source: str | None = typer.Option(None, "--source", help="Only what this source found."),
    limit: int = typer.Option(
        1000, "--limit", parser=ascii_int, help="At most this many, newest first."
    ),
    config: str | None = ConfigOption,
    database_url: str | None = DatabaseOption,
    as_json: bool = JsonOption,
) -> None:
    """Pages discovery found new, newest first (expired ones marked)."""
    from crawler.fetch import validate_url

    try:
        after = parse_since(since) if since is not None else None
        wanted = validate_url(source) if source is not None else None
    except ValueError as exc:
        fail(str(exc), USAGE)
    _check_range(limit, "--limit", 1, "the number of pages")
    settings = settings_from(config, database_url=database_url)
    with store_errors():
        rows = open_store(settings, read_only=True).discovery.discovered(
            since=after, source=wanted, limit=limit
        )
    if as_json:
        print_json([r.as_json() for r in rows])
        return
    cells: list[list[str]] = []
    for r in rows:
        age = "-" if r.lastmod is None else _age(r.found_at - r.lastmod)
        expired = "-" if r.expired_at is None else f"{r.expire_reason} {r.expired_at:%Y-%m-%d}"
        cells.append([
            r.url, f"{r.found_at:%Y-%m-%d %H:%M}", str(r.depth), age,
            "yes" if r.watched else "no", expired,
        ])  # fmt: skip
    headers = ("url", "found", "depth", "age when found", "watched", "expired")
    print_rows(f"{_count(len(cells), 'page')} found", headers, cells)


def _say(text: str) -> None:
    """A sentence on stdout, wrapped between words at the console's width (rich's own
    wrapping leaves a blank at each line's end)."""
    for line in textwrap.wrap(text, out_console.width, break_long_words=False):
        out_console.print(escape(line), highlight=False, soft_wrap=True)


def _count(n: int, thing: str) -> str:
    return f"{n} {thing}" if n == 1 else f"{n} {thing}s"


def _age(delta: timedelta) -> str:
    seconds = max(0.0, delta.total_seconds())
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    if seconds < 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"
