"""robots.txt: fetched once per origin per TTL (single flight), parsed with Protego.

Policy (after Google's robots.txt spec): 2xx = parse (first ``robots_max_bytes`` only);
4xx other than 429 = no robots.txt, allow all; 429/5xx = disallow the whole site for
``robots_error_ttl_s``; unreachable (DNS, connect, timeout, blocked address ...) = the same,
reported with the network error's own kind. Crawl-delay becomes the host's minimum delay.
"""

from __future__ import annotations

import asyncio
import enum
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from protego import Protego
from yarl import URL

from crawler.fetch._types import FetchError
from crawler.fetch._urls import origin

_MAX_MEMO = 50_000


class _Missing(enum.Enum):
    MISSING = "not cached"


#: ``RobotsCache.check_cached``'s answer when it would have to fetch robots.txt
MISSING = _Missing.MISSING


@dataclass(frozen=True)
class RobotsAnswer:
    """What fetching robots.txt gave: a status and a body, or a failure."""

    status: int | None
    body: bytes = b""
    failure: FetchError | None = None


@dataclass
class _Entry:
    expires: float
    parser: Protego | None = None
    failure: FetchError | None = None
    crawl_delay: float | None = None
    verdicts: dict[str, bool] = field(default_factory=dict)  # can_fetch per URL, memoized

    def allows(self, url: str, user_agent: str) -> bool:
        if self.parser is None:
            return True
        verdict = self.verdicts.get(url)
        if verdict is None:
            verdict = bool(self.parser.can_fetch(url, user_agent))
            if len(self.verdicts) < _MAX_MEMO:
                self.verdicts[url] = verdict
        return verdict


class RobotsCache:
    def __init__(
        self,
        fetch: Callable[[URL], Awaitable[RobotsAnswer]],
        user_agent: str,
        ttl_s: float,
        error_ttl_s: float,
        max_entries: int = 100_000,
    ) -> None:
        self._fetch = fetch
        self.user_agent = user_agent
        self.ttl_s = ttl_s
        self.error_ttl_s = error_ttl_s
        self.max_entries = max_entries
        self._entries: dict[str, _Entry] = {}
        self._inflight: dict[str, asyncio.Task[_Entry]] = {}

    async def check(self, url: URL) -> float | None:
        """Raise FetchError if ``url`` may not be fetched; else return the Crawl-delay."""
        entry = self._entries.get(origin(url))
        if entry is None or entry.expires <= time.monotonic():
            entry = await self._entry(url)
        return self._verdict(entry, url)

    def check_cached(
        self, url: URL, site: str | None = None, text: str | None = None
    ) -> float | _Missing | None:
        """``check`` without awaiting: ``MISSING`` when robots.txt of the URL's origin is not
        cached (or expired); then call ``check``. ``site`` and ``text``: ``origin(url)`` and
        ``str(url)`` when the caller knows them already."""
        entry = self._entries.get(site if site is not None else origin(url))
        if entry is None or entry.expires <= time.monotonic():
            return MISSING
        return self._verdict(entry, url, text)

    def _verdict(self, entry: _Entry, url: URL, text: str | None = None) -> float | None:
        if entry.failure is not None:
            f = entry.failure
            raise FetchError(f.kind, f.message, status=f.status)
        if not entry.allows(text if text is not None else str(url), self.user_agent):
            raise FetchError("robots", f"disallowed by {origin(url)}/robots.txt: {url}")
        return entry.crawl_delay

    async def _entry(self, url: URL) -> _Entry:
        """The cached entry of ``url``'s origin, loaded once (single flight) if missing.

        The load runs in a task of its own, shielded from its waiters: a poll cut short (a
        slot's deadline, a stop) leaves the load going, and its answer, an unreachable
        robots.txt included, is cached for the next polls. A load cut with the poll instead
        would start over at every slot, each slot waiting for it again."""
        key = origin(url)
        entry = self._entries.get(key)
        if entry is not None and entry.expires > time.monotonic():
            return entry
        task = self._inflight.get(key)
        if task is None:
            task = self._inflight[key] = asyncio.ensure_future(self._load_once(key, url))
            task.add_done_callback(_retrieve)
        return await asyncio.shield(task)

    async def _load_once(self, key: str, url: URL) -> _Entry:
        try:
            entry = await self._load(url)
        finally:
            del self._inflight[key]
        if len(self._entries) >= self.max_entries:
            self._prune()
        self._entries[key] = entry
        return entry

    def close(self) -> None:
        """Cancel the loads under way."""
        for task in list(self._inflight.values()):
            task.cancel()

    def _prune(self) -> None:
        now = time.monotonic()
        for key, entry in list(self._entries.items()):
            if entry.expires <= now:
                del self._entries[key]
        if len(self._entries) >= self.max_entries:
            self._entries.clear()

    async def _load(self, url: URL) -> _Entry:
        robots_url = url.with_path("/robots.txt").with_query(None).with_fragment(None)
        answer = await self._fetch(robots_url)
        now = time.monotonic()
        site = origin(url)
        if answer.failure is not None:
            f = answer.failure
            kind = f.kind if f.kind not in ("http_4xx", "http_5xx") else "robots"
            message = f"robots.txt of {site} unavailable ({f.message}); site skipped for now"
            return _Entry(now + self.error_ttl_s, failure=FetchError(kind, message))
        status = answer.status or 0
        if status == 429 or status >= 500:
            message = f"robots.txt of {site} answered HTTP {status}; site treated as disallowed"
            return _Entry(
                now + self.error_ttl_s, failure=FetchError("robots", message, status=status)
            )
        if not 200 <= status < 300:
            return _Entry(now + self.ttl_s)  # 3xx left over, 4xx: no robots.txt, allow all
        try:
            parser = Protego.parse(answer.body.decode("utf-8", errors="replace"))
            delay = parser.crawl_delay(self.user_agent)
        except Exception:  # an unparsable robots.txt is treated as absent
            return _Entry(now + self.ttl_s)
        return _Entry(now + self.ttl_s, parser=parser, crawl_delay=float(delay) if delay else None)


def _retrieve(task: asyncio.Task[_Entry]) -> None:
    """Mark a load's failure as seen (its waiters, if any are left, see it themselves)."""
    if not task.cancelled():
        task.exception()
