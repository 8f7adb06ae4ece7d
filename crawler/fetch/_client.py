"""The Fetcher: one aiohttp session, politeness, robots.txt, SSRF checks, manual redirects."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from types import TracebackType
from typing import NamedTuple, TypeVar

import aiohttp
from multidict import CIMultiDictProxy
from yarl import URL

from crawler.fetch._addresses import AddressPolicy, GuardedResolver, ip_literal
from crawler.fetch._body import read_capped
from crawler.fetch._deadlines import Deadlines
from crawler.fetch._dispatch import HostDispatcher
from crawler.fetch._errors import classify, parse_retry_after, release, status_failure
from crawler.fetch._hosts import HostGates, HostSlot
from crawler.fetch._robots import MISSING, RobotsAnswer, RobotsCache
from crawler.fetch._types import FetchConfig, FetchError, FetchRequest, FetchResult
from crawler.fetch._urls import UnsupportedSchemeError, origin, validate_url
from crawler.sites import url_host_key

T = TypeVar("T")

_REDIRECTS = frozenset({301, 302, 303, 307, 308})


class _Target(NamedTuple):
    """A polled URL parsed, with what every poll of it reads: its text (the final URL of a
    poll that was not redirected, the key of its robots.txt verdict), its origin (the key
    of its robots.txt) and its host (its gate's key). A yarl URL rebuilds its text at every
    ``str()``, and ``url_host_key`` splits the string: kept here, that is 2.5 us less per
    poll (2026-11-27)."""

    url: URL
    text: str
    site: str
    host: str


@lru_cache(maxsize=1 << 16)
def _canonical_url(url: str) -> _Target:
    """validate_url + parse, cached: the same URLs are polled again and again."""
    parsed = URL(validate_url(url), encoded=True)
    return _Target(parsed, str(parsed), origin(parsed), parsed.raw_host or "")


class _Budget:
    """The network time left for one fetch (all hops, attempts and back-off sleeps)."""

    __slots__ = ("remaining",)

    def __init__(self, seconds: float) -> None:
        self.remaining = seconds


@dataclass
class _Response:
    url: URL
    status: int
    reason: str | None
    headers: CIMultiDictProxy[str] | None
    body: bytes


class Fetcher:
    """Polls URLs politely and safely. Use as ``async with Fetcher(config) as f: ...``.

    ``fetch`` never raises for network/HTTP problems: it returns ``outcome="error"`` with an
    ``error_kind`` from ``ERROR_KINDS``. Rate limiting: a 429, or a 503 with Retry-After, backs
    the host off for Retry-After seconds (``default_retry_after_s`` without one, at most
    ``max_retry_after_s``); fetches to that host during the back-off fail fast with
    ``rate_limited`` and ``retry_after_s`` = the time left (no waiting, so a slot never stalls).
    """

    def __init__(self, config: FetchConfig) -> None:
        self.config = config
        self.policy = AddressPolicy(config.allow_private_addresses, config.allowed_networks)
        self.gates = HostGates(config.per_host_concurrency, config.per_host_min_delay_s)
        self.robots = RobotsCache(
            self._fetch_robots, config.user_agent, config.robots_ttl_s, config.robots_error_ttl_s
        )
        self.resolver = GuardedResolver(self.policy)
        self._session: aiohttp.ClientSession | None = None
        self._slots: asyncio.Semaphore | None = None
        self._at_gate: set[asyncio.Task[object] | None] = set()
        self._deadlines = Deadlines()  # the requests' network timeouts, on one timer

    async def __aenter__(self) -> Fetcher:
        await self.open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def open(self) -> None:
        if self._session is not None:
            return
        cfg = self.config
        # Requests queue here, before their timeout starts, rather than inside aiohttp's pool.
        self._slots = asyncio.Semaphore(cfg.total_concurrency)
        connector = aiohttp.TCPConnector(
            limit=cfg.total_concurrency,
            limit_per_host=0,
            resolver=self.resolver,
            ttl_dns_cache=int(cfg.dns_cache_ttl_s),
        )
        self._session = aiohttp.ClientSession(
            connector=connector,
            headers={"User-Agent": cfg.user_agent, "Accept": cfg.accept},
            cookie_jar=aiohttp.DummyCookieJar(),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=cfg.connect_timeout_s),
            trust_env=False,
            raise_for_status=False,
        )

    async def close(self) -> None:
        self.robots.close()
        self._deadlines.close()
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise RuntimeError("Fetcher is not open: use 'async with Fetcher(config)'")
        return self._session

    # -- public -------------------------------------------------------------------------------

    def gate_key(self, url: str) -> str:
        """The host whose gate a fetch of (canonical) ``url`` passes first: its host key
        (its parsed host: the same for a canonical URL, and cached with the parse)."""
        try:
            return _canonical_url(url).host
        except Exception:  # not a URL the fetcher polls: its fetch fails at once anyway
            return url_host_key(url)

    def waits_at_gate(self, task: asyncio.Task[object] | None) -> bool:
        """Whether ``task`` is waiting for its host's concurrency or delay (no request made
        yet): a poll cut there was held back by politeness, not by a slow host."""
        return task in self._at_gate

    def dispatcher(self, work: Callable[[T], Awaitable[None]]) -> HostDispatcher[T]:
        """A dispatcher for ``work`` that fetches with this fetcher (items submitted by
        ``gate_key``): as many runners as connection slots, at most ``per_host_concurrency``
        per host, each host's delay waited out on a timer rather than by a runner."""
        cfg = self.config
        total = cfg.total_concurrency
        width = min(cfg.per_host_concurrency or total, total)
        return HostDispatcher(work, width=width, runners=total, next_start=self.gates.next_start)

    async def fetch_many(self, requests: Sequence[FetchRequest]) -> list[FetchResult]:
        """All requests concurrently (bounded by the connection pool); results in order."""
        return list(await asyncio.gather(*(self.fetch(r) for r in requests)))

    async def fetch(self, request: FetchRequest) -> FetchResult:
        """Poll one URL (redirects followed). Raises only if the Fetcher is not open. The
        result carries the host's Crawl-delay (``host_delay_s``) once robots.txt set one."""
        result = await self._fetch(request)
        if self.gates.robots_delays:  # a host's delay differs from the configured one
            result.host_delay_s = self.gates.delay_of(self.gate_key(request.url))
        return result

    async def _fetch(self, request: FetchRequest) -> FetchResult:
        if self._session is None:
            raise RuntimeError("Fetcher is not open: use 'async with Fetcher(config)'")
        started = time.monotonic()
        try:
            target = _canonical_url(request.url)
        except UnsupportedSchemeError as exc:
            return self._error(
                request, request.url, FetchError("unsupported_scheme", str(exc)), started
            )
        except ValueError as exc:
            return self._error(request, request.url, FetchError("invalid_url", str(exc)), started)
        except Exception as exc:
            return self._error(request, request.url, classify(exc, request.url), started)
        headers: dict[str, str] = {}
        if request.etag:
            headers["If-None-Match"] = request.etag
        if request.last_modified:
            headers["If-Modified-Since"] = request.last_modified
        cfg = self.config
        try:
            resp = await self._follow(
                target.url,
                headers,
                _Budget(cfg.timeout_s),
                cap=cfg.max_body_bytes,
                truncate=False,
                retries=cfg.retries,
                robots=cfg.respect_robots,
                known=target,
            )
        except FetchError as failure:
            return self._error(request, failure.final_url or target.text, failure, started)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            classified = classify(exc, request.url)
            release(exc)
            return self._error(request, request.url, classified, started)
        final_url = target.text if resp.url is target.url else str(resp.url)
        return self._result(request, resp, final_url, started)

    # -- internals ----------------------------------------------------------------------------

    def _error(
        self, request: FetchRequest, final_url: str, failure: FetchError, started: float
    ) -> FetchResult:
        release(failure)  # nothing of the failed read outlives the poll (see release)
        return FetchResult(
            url_id=request.url_id,
            url=request.url,
            final_url=final_url,
            outcome="deferred" if failure.deferred else "error",
            status=failure.status,
            body=b"",
            content_type=None,
            etag=None,
            last_modified=None,
            error_kind=failure.kind,
            error=failure.message,
            duration_s=time.monotonic() - started,
            bytes_received=0,
            retry_after_s=failure.retry_after_s,
        )

    def _result(
        self, request: FetchRequest, resp: _Response, final_url: str, started: float
    ) -> FetchResult:
        h = resp.headers
        etag = h.get("ETag") if h is not None else None
        last_modified = h.get("Last-Modified") if h is not None else None
        if resp.status == 304:
            return FetchResult(
                request.url_id, request.url, final_url, "not_modified", 304, b"",
                h.get("Content-Type") if h is not None else None,
                etag or request.etag, last_modified or request.last_modified,
                None, None, time.monotonic() - started, 0, date=h.get("Date") if h else None,
            )  # fmt: skip
        return FetchResult(
            request.url_id, request.url, final_url, "ok", resp.status, resp.body,
            h.get("Content-Type") if h is not None else None, etag, last_modified,
            None, None, time.monotonic() - started, len(resp.body),
            date=h.get("Date") if h is not None else None,
        )  # fmt: skip

    async def _fetch_robots(self, url: URL) -> RobotsAnswer:
        try:
            resp = await self._follow(
                url,
                {},
                _Budget(self.config.timeout_s),
                cap=self.config.robots_max_bytes,
                truncate=True,
                retries=self.config.retries,
                robots=False,
            )
        except FetchError as failure:
            release(failure)
            if failure.kind in ("http_4xx", "http_5xx", "rate_limited") and failure.status:
                return RobotsAnswer(failure.status)
            return RobotsAnswer(None, failure=failure)
        except Exception as exc:
            classified = classify(exc, str(url))
            release(exc)
            release(classified)
            return RobotsAnswer(None, failure=classified)
        return RobotsAnswer(resp.status, resp.body)

    async def _follow(
        self,
        url: URL,
        headers: dict[str, str],
        budget: _Budget,
        *,
        cap: int,
        truncate: bool,
        retries: int,
        robots: bool,
        known: _Target | None = None,
    ) -> _Response:
        """GET with manual redirects; every hop is address-checked, robots-checked and gated.
        (The hops, their checks and their attempts are in this one coroutine: every layer of
        coroutines costs on each of a request's suspensions.) ``known``: ``url`` with its
        text and origin."""
        visited: set[str] | None = None  # made at the first redirect (most polls have none)
        for _hop in range(self.config.max_redirects + 1):
            try:
                if self._hop_checks(url, robots, known if _hop == 0 else None):
                    self._crawl_delay(url, await self.robots.check(url))
                resp = await self._attempts(url, headers, budget, cap, truncate, retries)
            except FetchError as failure:
                failure.final_url = str(url)
                raise
            if resp.status not in _REDIRECTS:
                return resp
            if visited is None:
                visited = {str(url)}
            url = self._redirect_target(resp, url, visited)
        raise FetchError(
            "too_many_redirects", f"more than {self.config.max_redirects} redirects from {url}"
        )

    def _hop_checks(self, url: URL, robots: bool, known: _Target | None = None) -> bool:
        """Address check, back-off check, cached robots.txt check of one hop (FetchError if
        refused); True if robots.txt must be fetched first (then ``robots.check``)."""
        host = url.raw_host or ""
        literal = ip_literal(host)
        if literal is not None:
            reason = self.policy.refusal(literal)
            if reason is not None:
                raise FetchError("blocked_address", f"refused {url}: {literal} is a {reason}")
        waiting = self.gates.backoff_remaining(host)
        if waiting > 0:
            raise FetchError(
                "rate_limited",
                f"{host} is backed off for {waiting:.0f} s more after a 429/503",
                retry_after_s=waiting,
                deferred=True,
            )
        if robots:
            if known is not None:
                delay = self.robots.check_cached(url, known.site, known.text)
            else:
                delay = self.robots.check_cached(url)
            if delay is MISSING:
                return True
            self._crawl_delay(url, delay)
        return False

    def _crawl_delay(self, url: URL, delay: float | None) -> None:
        if delay:
            self.gates.set_min_delay(url.raw_host or "", min(delay, self.config.max_crawl_delay_s))

    @staticmethod
    def _redirect_target(resp: _Response, url: URL, visited: set[str]) -> URL:
        """The validated next hop of a redirect (loops and bad Locations are errors)."""
        location = resp.headers.get("Location") if resp.headers is not None else None
        if not location:
            raise FetchError(
                "bad_response", f"HTTP {resp.status} without Location from {url}",
                status=resp.status,
            )  # fmt: skip
        try:
            target = URL(validate_url(str(url.join(URL(location)))), encoded=True)
        except UnsupportedSchemeError as exc:
            raise FetchError("unsupported_scheme", f"redirect from {url}: {exc}") from None
        except ValueError as exc:
            raise FetchError("invalid_url", f"bad redirect from {url}: {exc}") from None
        if str(target) in visited:
            raise FetchError(
                "redirect_loop", f"redirect loop: {url} -> {target} (already visited)",
                status=resp.status,
            )  # fmt: skip
        visited.add(str(target))
        return target

    async def _attempts(
        self,
        url: URL,
        headers: dict[str, str],
        budget: _Budget,
        cap: int,
        truncate: bool,
        retries: int,
    ) -> _Response:
        """One hop: a GET within the budget, holding a host gate (unless none can limit) and
        one of the fetcher's connection slots, retried with exponential back-off on transient
        failures while the budget lasts."""
        host = url.raw_host or ""
        slots = self._slots
        assert slots is not None, "Fetcher is not open"
        loop = asyncio.get_running_loop()
        attempt = 0
        while True:
            try:
                if budget.remaining <= 0:
                    raise TimeoutError()
                gates = self.gates
                held = None  # the host's gate, held (None: no gate can limit)
                if not gates.trivial:
                    held = gates.enter_now(host)  # (most requests pass at once)
                    if held is None:  # it waits for its host's slot or delay
                        task = asyncio.current_task()
                        self._at_gate.add(task)
                        held = gates.state(host)
                        try:
                            await HostSlot(held).__aenter__()
                        finally:
                            self._at_gate.discard(task)
                try:
                    async with slots:
                        t0 = time.monotonic()
                        try:
                            async with (
                                self._deadlines.at(loop.time() + budget.remaining),
                                self.session.get(
                                    url, headers=headers, allow_redirects=False
                                ) as resp,
                            ):
                                return await self._read(resp, url, host, cap, truncate)
                        finally:
                            budget.remaining -= time.monotonic() - t0
                finally:
                    if held is not None:
                        gates.leave(held)
            except Exception as exc:
                failure = classify(exc, str(url))
                if isinstance(exc, asyncio.TimeoutError | TimeoutError) and budget.remaining <= 0:
                    failure = FetchError(
                        "timeout",
                        f"no complete response from {url} within {self.config.timeout_s:g} s",
                    )
                sleep = self.config.retry_backoff_s * (2**attempt) * (0.5 + random.random())
                if not failure.transient or attempt >= retries or sleep >= budget.remaining:
                    raise failure from None
            attempt += 1
            budget.remaining -= sleep
            await asyncio.sleep(sleep)

    async def _read(
        self, resp: aiohttp.ClientResponse, url: URL, host: str, cap: int, truncate: bool
    ) -> _Response:
        status = resp.status
        if status < 300 and status != 204:
            body = await read_capped(resp, cap, truncate=truncate)
            return _Response(url, status, resp.reason, resp.headers, body)
        if status < 400:  # 304 and redirects: no body wanted
            return _Response(url, status, resp.reason, resp.headers, b"")
        retry_after = parse_retry_after(resp.headers.get("Retry-After"))
        if status == 429 or (status == 503 and retry_after is not None):
            wait = retry_after if retry_after is not None else self.config.default_retry_after_s
            wait = min(wait, self.config.max_retry_after_s)
            self.gates.back_off(host, wait)
            raise FetchError(
                "rate_limited", f"HTTP {status} from {url}; host backed off for {wait:g} s",
                status=status, retry_after_s=wait,
            )  # fmt: skip
        raise status_failure(status, resp.reason, str(url))
