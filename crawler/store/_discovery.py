"""Discovery in the database: the sources, the pages they found new, and their expiry.

>>> ds = store.discovery
>>> ds.add_source(SourceSpec("https://example.org/news/", auto_watch=True))
>>> ds.record_slot(SlotDiscovery(polls={source_id: 10}, found=[Found(...)]))

Decisions:

- One ``discovered`` row per URL, whoever found it first (``url`` is unique; a second
  finder's insert is ignored). It is what ``crawler discovered`` lists and what expiry reads.
- Adding what was found to the watch list goes through ``Store.add_urls`` (the one add path:
  it bumps the watch-list version, so the crawl loop picks the URL up at its next slot and the
  scheduler learns its change rate like any other URL's). Expiring an auto-added page goes
  through ``Store.remove_urls`` (history kept, as for any removal).
- **Expiry rule**: a page found by discovery expires when no page fetched by discovery has
  linked it for ``expire_days`` days (``last_linked_at`` is refreshed whenever a fetched page
  links it), or at once when a poll of it answers 404 or 410. Expired pages stay listed (with
  ``expired_at`` and the reason) and, if discovery added them to the watch list, leave it.
  A page the operator added by hand is never removed by expiry (``watched`` is only set for
  pages this module added).
- A source's counts (``polls``, ``found``) are running totals written with each slot; its
  ``state`` is an opaque JSON text owned by the service (the learned start lists).
- Removing a source marks it (``removed_at``); its discovered rows stay. Adding it again
  revives it with the new options.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Row, and_, bindparam, func, select, update

from crawler.sites import host_key
from crawler.store._engine import translate_errors
from crawler.store._outbox import write_discovered_events
from crawler.store._sql import among
from crawler.store._types import NewUrl
from crawler.store._upsert import upsert
from crawler.store.models import discovered, sites, sources, urls

if TYPE_CHECKING:
    from crawler.store._store import Store

#: the scopes a source may have: its own host only, or also ``allowed_domains``
SCOPES: tuple[str, ...] = ("host", "domain")
#: why a discovered page expired
EXPIRE_REASONS: dict[str, str] = {
    "unlinked": "no page fetched by discovery linked it for discovery_expire_days",
    "dead": "a poll of it answered 404 or 410",
}
_CHUNK = 5_000


@dataclass(frozen=True, slots=True)
class SourceSpec:
    """What an operator asks of a source (``url`` already validated and canonical)."""

    url: str
    scope: str = "host"
    allowed_domains: tuple[str, ...] = ()
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    topic: str | None = None
    max_depth: int = 5
    budget_per_slot: int = 10
    #: pages in all before the source stops (None: no limit)
    budget_per_run: int | None = None
    auto_watch: bool = False

    def __post_init__(self) -> None:
        if self.scope not in SCOPES:
            raise ValueError(f"scope must be one of {', '.join(SCOPES)}, not {self.scope!r}")
        if self.max_depth < 0:
            raise ValueError("max_depth must be >= 0")
        if self.budget_per_slot < 1:
            raise ValueError("the page budget per slot must be >= 1")
        if self.budget_per_run is not None and self.budget_per_run < 1:
            raise ValueError("the page budget per run must be >= 1")


@dataclass(frozen=True, slots=True)
class SourceRow:
    """A source as stored, with its running counts."""

    id: int
    spec: SourceSpec
    created_at: datetime
    removed_at: datetime | None
    polls: int
    found: int
    state: str | None

    @property
    def url(self) -> str:
        return self.spec.url


@dataclass(frozen=True, slots=True)
class Found:
    """A page a source found new in a slot."""

    url: str
    source_id: int
    found_at: datetime
    depth: int
    path_length: int
    #: the page's own date, when it had one (Last-Modified, a sitemap's lastmod)
    lastmod: datetime | None = None
    on_topic: float | None = None


@dataclass(slots=True)
class SlotDiscovery:
    """What the discovery side of one slot wrote: polls per source, pages found, the pages
    linked from what it fetched (refreshes ``last_linked_at``), the sources' learned states."""

    polls: dict[int, int] = field(default_factory=dict)
    found: list[Found] = field(default_factory=list)
    linked: set[str] = field(default_factory=set)
    states: dict[int, str] = field(default_factory=dict)
    at: datetime | None = None

    @property
    def empty(self) -> bool:
        """Nothing to write: no poll, no page found or linked, no state."""
        return not (self.polls or self.found or self.linked or self.states)


@dataclass(frozen=True, slots=True)
class DiscoveredRow:
    """A discovered page as ``crawler discovered`` lists it."""

    url: str
    source: str
    found_at: datetime
    depth: int
    path_length: int
    lastmod: datetime | None
    on_topic: float | None
    watched: bool
    last_linked_at: datetime
    expired_at: datetime | None
    expire_reason: str | None

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name in self.__slots__:
            value = getattr(self, name)
            out[name] = value.isoformat() if isinstance(value, datetime) else value
        return out


@dataclass(slots=True)
class SlotResult:
    """What ``record_slot`` did: pages newly recorded, and those added to the watch list."""

    recorded: list[str] = field(default_factory=list)
    watched: list[tuple[str, int]] = field(default_factory=list)
    #: new pages of auto-watch sources not watched: their source's watch cap was reached
    watch_capped: int = 0


class DiscoveryStore:
    """Discovery's reads and writes, on a ``Store``'s engine (sync; run it in a thread)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.engine = store.engine

    # ----- sources ---------------------------------------------------------------------

    def add_source(self, spec: SourceSpec) -> tuple[int, bool]:
        """Add (or revive, or update) a source: (its id, True if it was not active)."""
        values = _spec_values(spec)
        with translate_errors("adding a source"), self.engine.begin() as conn:
            row = conn.execute(
                select(sources.c.id, sources.c.removed_at).where(sources.c.url == spec.url)
            ).first()
            if row is None:
                new = conn.execute(
                    sources.insert()
                    .values(url=spec.url, created_at=_now(), polls=0, found=0, **values)
                    .returning(sources.c.id)
                ).scalar_one()
                return int(new), True
            conn.execute(
                update(sources).where(sources.c.id == row.id).values(removed_at=None, **values)
            )
            return int(row.id), row.removed_at is not None

    def remove_source(self, url: str) -> bool:
        """Stop discovering from ``url``; False if it was not an active source."""
        with translate_errors("removing a source"), self.engine.begin() as conn:
            result = conn.execute(
                update(sources)
                .where(sources.c.url == url, sources.c.removed_at.is_(None))
                .values(removed_at=_now())
                .returning(sources.c.id)
            )
            return result.first() is not None

    def sources(self, *, include_removed: bool = False) -> list[SourceRow]:
        """The sources, oldest first."""
        query = select(sources).order_by(sources.c.id)
        if not include_removed:
            query = query.where(sources.c.removed_at.is_(None))
        with translate_errors("listing sources"), self.engine.connect() as conn:
            return [_source_row(r) for r in conn.execute(query)]

    def save_states(self, states: Mapping[int, str]) -> None:
        """Save sources' learned states (opaque JSON texts)."""
        if not states:
            return
        with translate_errors("saving sources' states"), self.engine.begin() as conn:
            _write_states(conn, states)

    # ----- what was found --------------------------------------------------------------

    def known_urls(
        self, hosts: Collection[str] | None = None, domains: Collection[str] = ()
    ) -> set[str]:
        """Every URL discovery must not report new again: watched (now or once) or found.
        With ``hosts`` (host names, without port) only the watched URLs of the sites of those
        hosts, or of ``domains`` and their subdomains, are read: the only links a source's
        crawl asks about are in its scope, and a worker with a source on one site of a
        million-URL watch list then reads that site's URLs, not all of them. The pages found
        by discovery are read whole (they are bounded by the sources' budgets and expiry)."""
        with translate_errors("reading known URLs"), self.engine.connect() as conn:
            if hosts is None:
                known = {u for (u,) in conn.execute(select(urls.c.url))}
            else:
                wanted, suffixes = set(hosts), tuple("." + d for d in domains)
                site_ids = [
                    i
                    for i, site in conn.execute(select(sites.c.id, sites.c.host))
                    if (h := host_key(site)) in wanted or h in domains or h.endswith(suffixes)
                ]
                known = set()
                for start in range(0, len(site_ids), _CHUNK):
                    chunk = site_ids[start : start + _CHUNK]
                    query = select(urls.c.url).where(among(conn, urls.c.site_id, chunk))
                    known.update(u for (u,) in conn.execute(query))
            known.update(u for (u,) in conn.execute(select(discovered.c.url)))
        return known

    def record_slot(
        self,
        slot: SlotDiscovery,
        *,
        max_watched: int | None = None,
        max_watched_per_slot: int | None = None,
    ) -> SlotResult:
        """Write one slot's discovery: counts, new pages (first finder wins), links seen,
        states; then add the new pages of auto-watch sources to the watch list, at most
        ``max_watched_per_slot`` per source and never past ``max_watched`` live watched
        pages of one source (None: no cap; the rest stay recorded, not watched)."""
        result = SlotResult()
        if slot.empty:  # a slot of a service without sources: no transaction at all
            return result
        fresh: dict[str, int] = {}
        now = slot.at or _now()
        with translate_errors("recording discovery"), self.engine.begin() as conn:
            self.store.check_service_fence(conn)  # a service that lost its lock: nothing
            if slot.polls or slot.found:
                fresh = self._insert_found(conn, slot.found)  # url -> its finder
                found_by: dict[int, int] = {}
                for sid in fresh.values():
                    found_by[sid] = found_by.get(sid, 0) + 1
                result.recorded = list(fresh)
                for sid in slot.polls.keys() | found_by.keys():
                    conn.execute(
                        update(sources)
                        .where(sources.c.id == sid)
                        .values(
                            polls=sources.c.polls + slot.polls.get(sid, 0),
                            found=sources.c.found + found_by.get(sid, 0),
                        )
                    )
            linked = sorted(slot.linked)
            for start in range(0, len(linked), _CHUNK):
                conn.execute(
                    update(discovered)
                    .where(among(conn, discovered.c.url, linked[start : start + _CHUNK]))
                    .values(last_linked_at=now)
                )
            _write_states(conn, slot.states)
            auto = {
                int(i)
                for (i,) in conn.execute(select(sources.c.id).where(sources.c.auto_watch.is_(True)))
            }
            to_watch = [u for u in result.recorded if fresh[u] in auto]
            if to_watch and (max_watched is not None or max_watched_per_slot is not None):
                room = _watch_room(conn, {fresh[u] for u in to_watch}, max_watched)
                if max_watched_per_slot is not None:
                    room = {sid: min(n, max_watched_per_slot) for sid, n in room.items()}
                kept: list[str] = []
                for url in to_watch:
                    if room[fresh[url]] > 0:
                        kept.append(url)
                        room[fresh[url]] -= 1
                result.watch_capped = len(to_watch) - len(kept)
                to_watch = kept
        if to_watch:
            result.watched = self._watch(to_watch)
        return result

    def found_since(self, since: datetime) -> dict[int, int]:
        """Pages each source recorded new since ``since`` (source id -> count)."""
        query = (
            select(discovered.c.source_id, func.count())
            .where(discovered.c.found_at >= since)
            .group_by(discovered.c.source_id)
        )
        with translate_errors("counting discovered pages"), self.engine.connect() as conn:
            return {int(sid): int(n) for sid, n in conn.execute(query)}

    def auto_watched_ids(self) -> list[int]:
        """URL ids of the pages discovery put on the watch list and still has there."""
        query = select(discovered.c.url_id).where(
            discovered.c.watched.is_(True),
            discovered.c.expired_at.is_(None),
            discovered.c.url_id.is_not(None),
        )
        with translate_errors("listing auto-watched pages"), self.engine.connect() as conn:
            return [int(i) for (i,) in conn.execute(query)]

    def _insert_found(self, conn: Connection, found: Sequence[Found]) -> dict[str, int]:
        """Insert the pages not recorded yet: {url: source id} of those new here, in order."""
        if not found:
            return {}
        wanted = list(dict.fromkeys(f.url for f in found))
        have = {
            u
            for (u,) in conn.execute(
                select(discovered.c.url).where(among(conn, discovered.c.url, wanted))
            )
        }
        rows: dict[str, dict[str, Any]] = {}
        for f in found:
            if f.url in have or f.url in rows:
                continue
            rows[f.url] = {
                "url": f.url, "source_id": f.source_id, "found_at": f.found_at,
                "depth": f.depth, "path_length": f.path_length, "lastmod": f.lastmod,
                "on_topic": f.on_topic, "watched": False, "url_id": None,
                "last_linked_at": f.found_at, "expired_at": None, "expire_reason": None,
            }  # fmt: skip
        upsert(conn, discovered, list(rows.values()), ["url"])
        write_discovered_events(conn, rows.values())  # the outbox, in the same transaction
        return {url: row["source_id"] for url, row in rows.items()}

    def _watch(self, found_urls: list[str]) -> list[tuple[str, int]]:
        """Add pages to the watch list (only those not watched yet) and mark them."""
        report = self.store.add_urls([NewUrl(u) for u in found_urls])
        added = report.added + report.reactivated
        if added:
            with translate_errors("marking watched pages"), self.engine.begin() as conn:
                conn.execute(
                    update(discovered)
                    .where(discovered.c.url == bindparam("b_url"))
                    .values(watched=True, url_id=bindparam("b_id")),
                    [{"b_url": u, "b_id": i} for u, i in added],
                )
        return added

    def discovered(
        self,
        *,
        since: datetime | None = None,
        source: str | None = None,
        include_expired: bool = True,
        limit: int | None = None,
    ) -> list[DiscoveredRow]:
        """Discovered pages, newest first."""
        query = (
            select(discovered, sources.c.url.label("source_url"))
            .join(sources, sources.c.id == discovered.c.source_id)
            .order_by(discovered.c.found_at.desc(), discovered.c.id.desc())
        )
        if since is not None:
            query = query.where(discovered.c.found_at >= since)
        if source is not None:
            query = query.where(sources.c.url == source)
        if not include_expired:
            query = query.where(discovered.c.expired_at.is_(None))
        if limit is not None:
            query = query.limit(limit)
        with translate_errors("listing discovered pages"), self.engine.connect() as conn:
            return [_discovered_row(r) for r in conn.execute(query)]

    # ----- expiry ----------------------------------------------------------------------

    def expire(
        self, now: datetime, expire_days: float, dead: Iterable[str] = ()
    ) -> list[tuple[str, str]]:
        """Apply the expiry rule: pages not linked for ``expire_days`` (0: never by age), and
        the ``dead`` ones (404/410). Returns (url, reason) of those expired now; the ones
        discovery had added to the watch list leave it."""
        expired: list[tuple[str, str]] = []
        dead_urls = sorted(set(dead))
        if not dead_urls and expire_days <= 0:
            return expired  # nothing to apply: no transaction
        with translate_errors("expiring discovered pages"), self.engine.begin() as conn:
            live = discovered.c.expired_at.is_(None)
            for start in range(0, len(dead_urls), _CHUNK):
                part = dead_urls[start : start + _CHUNK]
                rows = conn.execute(
                    update(discovered)
                    .where(live, among(conn, discovered.c.url, part))
                    .values(expired_at=now, expire_reason="dead")
                    .returning(discovered.c.url)
                )
                expired.extend((u, "dead") for (u,) in rows)
            if expire_days > 0:
                cutoff = now - timedelta(days=expire_days)
                rows = conn.execute(
                    update(discovered)
                    .where(and_(live, discovered.c.last_linked_at < cutoff))
                    .values(expired_at=now, expire_reason="unlinked")
                    .returning(discovered.c.url)
                )
                expired.extend((u, "unlinked") for (u,) in rows)
            unwatch: list[str] = []
            gone = [u for u, _ in expired]
            for start in range(0, len(gone), _CHUNK):
                part = gone[start : start + _CHUNK]
                unwatch.extend(
                    u
                    for (u,) in conn.execute(
                        select(discovered.c.url).where(
                            discovered.c.watched.is_(True), among(conn, discovered.c.url, part)
                        )
                    )
                )
        if unwatch:
            self.store.remove_urls(unwatch)
        return expired


def _watch_room(conn: Connection, sids: set[int], cap: int | None) -> dict[int, int]:
    """How many more pages each source may have on the watch list (its live watched pages
    counted); a large number without a cap."""
    if cap is None:
        return dict.fromkeys(sids, 2**62)
    query = (
        select(discovered.c.source_id, func.count())
        .where(
            discovered.c.watched.is_(True),
            discovered.c.expired_at.is_(None),
            discovered.c.source_id.in_(sorted(sids)),
        )
        .group_by(discovered.c.source_id)
    )
    have = {int(sid): int(n) for sid, n in conn.execute(query)}
    return {sid: max(0, cap - have.get(sid, 0)) for sid in sids}


def _now() -> datetime:
    from crawler.store._store import utcnow

    return utcnow()


def _spec_values(spec: SourceSpec) -> dict[str, Any]:
    return {
        "scope": spec.scope,
        "allowed_domains": json.dumps(list(spec.allowed_domains)),
        "include": json.dumps(list(spec.include)),
        "exclude": json.dumps(list(spec.exclude)),
        "topic": spec.topic,
        "max_depth": spec.max_depth,
        "budget_per_slot": spec.budget_per_slot,
        "budget_per_run": spec.budget_per_run,
        "auto_watch": spec.auto_watch,
    }


def _write_states(conn: Connection, states: Mapping[int, str]) -> None:
    if states:
        conn.execute(
            update(sources)
            .where(sources.c.id == bindparam("b_id"))
            .values(state=bindparam("b_state")),
            [{"b_id": i, "b_state": s} for i, s in states.items()],
        )


def _source_row(r: Row[Any]) -> SourceRow:
    spec = SourceSpec(
        url=r.url,
        scope=r.scope,
        allowed_domains=tuple(json.loads(r.allowed_domains)),
        include=tuple(json.loads(r.include)),
        exclude=tuple(json.loads(r.exclude)),
        topic=r.topic,
        max_depth=r.max_depth,
        budget_per_slot=r.budget_per_slot,
        budget_per_run=r.budget_per_run,
        auto_watch=bool(r.auto_watch),
    )
    return SourceRow(
        int(r.id), spec, r.created_at, r.removed_at, int(r.polls), int(r.found), r.state
    )


def _discovered_row(r: Row[Any]) -> DiscoveredRow:
    return DiscoveredRow(
        url=r.url,
        source=r.source_url,
        found_at=r.found_at,
        depth=int(r.depth),
        path_length=int(r.path_length),
        lastmod=r.lastmod,
        on_topic=r.on_topic,
        watched=bool(r.watched),
        last_linked_at=r.last_linked_at,
        expired_at=r.expired_at,
        expire_reason=r.expire_reason,
    )
