"""The read-only HTTP API of changes, on the service's metrics port (docs/api.md).

``ChangeApi(store, token=...).install(app)`` adds ``GET /feed/changes.atom``,
``GET /api/v1/changes``, ``GET /api/v1/changes/{id}`` and ``GET /api/v1/openapi.json`` to the
aiohttp application of ``crawler.health`` (which keeps ``/metrics`` and ``/healthz`` as they
are: no token). With a token set, these routes want ``Authorization: Bearer <token>``,
compared with ``hmac.compare_digest``; the token is never logged nor echoed.

Every database read runs in a worker thread (``asyncio.to_thread``) and is bounded (a page
of at most ``MAX_LIMIT`` rows, one query for the texts of the diffs not yet cached), so a
reader never blocks the crawl loop's event loop (the XML and JSON are written in that thread
too: written on the loop, feeds of 500 diffs stalled it up to 0.36 s) and never reads an
unbounded table. At most
``max_reads`` reads run at once (an ``asyncio.Semaphore``: more requests wait on the event
loop, holding no thread), on the API's own ``Store`` (the service gives it one with its own
connection pool), so readers never take a connection or a thread the slots need. Errors
are RFC 9457 problem documents (``application/problem+json``).
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from crawler.api._diffs import DiffCache
from crawler.api._feed import render_feed
from crawler.api._openapi import openapi_document
from crawler.api._params import (
    DEFAULT_LIMIT,
    MAX_LIMIT,
    BadParameterError,
    ChangeQuery,
    encode_cursor,
    parse_query,
)
from crawler.fetch import validate_url
from crawler.store import Store, StoreError

__all__ = ["FEED_DEFAULT_LIMIT", "FEED_MAX_LIMIT", "ChangeApi"]

log = logging.getLogger(__name__)

FEED_DEFAULT_LIMIT = 50
FEED_MAX_LIMIT = 500
_PROTECTED = ("/feed/", "/api/")
_FEED_NAMESPACE = uuid.UUID("0b6e5d8e-6a39-5a53-8d0c-4c2a1f7c9b10")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def problem(status: int, title: str, detail: str, **headers: str) -> web.Response:
    """An RFC 9457 problem response."""
    body = {"type": "about:blank", "title": title, "status": status, "detail": detail}
    return web.Response(
        status=status,
        text=json.dumps(body),
        content_type="application/problem+json",
        headers=headers,
    )


class ChangeApi:
    """The feed and JSON API of a store's changes; ``install`` adds its routes to an app."""

    def __init__(
        self,
        store: Store,
        *,
        token: str | None = None,
        diff_max_bytes: int = 64 * 1024,
        cache_entries: int = 1024,
        max_reads: int = 2,
    ) -> None:
        self.store = store
        self._reads = asyncio.Semaphore(max_reads)
        self._token = token.encode() if token else None
        self.diffs = DiffCache(store, max_entries=cache_entries, max_bytes=diff_max_bytes)

    def install(self, app: web.Application) -> None:
        app.middlewares.append(self._auth)
        app.router.add_get("/feed/changes.atom", self.feed)
        app.router.add_get("/api/v1/changes", self.list_changes)
        app.router.add_get("/api/v1/changes/{id}", self.get_change)
        app.router.add_get("/api/v1/openapi.json", self.openapi)

    @web.middleware
    async def _auth(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if self._token is None or not request.path.startswith(_PROTECTED):
            return await handler(request)
        scheme, _, given = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(
            given.strip().encode(), self._token
        ):
            return problem(
                401,
                "Unauthorized",
                "this route wants the header 'Authorization: Bearer <api_token>' "
                "(the service's CRAWLER_API_TOKEN)",
                **{"WWW-Authenticate": 'Bearer realm="crawler"'},
            )
        return await handler(request)

    async def _read(self, what: str, call: Callable[[], Any]) -> Any:
        try:
            async with self._reads:
                return await asyncio.to_thread(call)
        except StoreError as exc:
            log.warning("API: %s failed: %s", what, exc)
            raise web.HTTPServiceUnavailable(
                text=json.dumps(
                    {
                        "type": "about:blank",
                        "title": "Service Unavailable",
                        "status": 503,
                        "detail": f"{what}: the database did not answer; try again",
                    }
                ),
                content_type="application/problem+json",
            ) from None

    @staticmethod
    def _query(request: web.Request, default_limit: int, max_limit: int) -> ChangeQuery:
        query = parse_query(request.query, default_limit=default_limit, max_limit=max_limit)
        if query.url is None:
            return query
        try:
            url = validate_url(query.url)
        except ValueError as exc:
            raise BadParameterError(f"url: {exc}") from None
        return ChangeQuery(query.since, url, query.tag, query.after_id, query.limit)

    async def feed(self, request: web.Request) -> web.Response:
        try:
            query = self._query(request, FEED_DEFAULT_LIMIT, FEED_MAX_LIMIT)
        except BadParameterError as exc:
            return problem(400, "Bad Request", str(exc))

        scope = f" of {query.url}" if query.url else f" tagged {query.tag}" if query.tag else ""
        key = f"url={query.url or ''}\ntag={query.tag or ''}"
        self_url = str(request.url)

        def read() -> bytes:  # reading, diffing and writing the XML: all off the event loop
            found = self.store.list_changes(
                since=query.since,
                url=query.url,
                tag=query.tag,
                after_id=query.after_id,
                limit=query.limit,
                newest_first=True,
            )
            return render_feed(
                title=f"crawler: changes{scope}",
                self_url=self_url,
                feed_id=f"urn:uuid:{uuid.uuid5(_FEED_NAMESPACE, key)}",
                changes=found,
                diffs=self.diffs.many(c.id for c in found),
            )

        body: bytes = await self._read("reading the feed's changes", read)
        return web.Response(body=body, content_type="application/atom+xml", charset="utf-8")

    async def list_changes(self, request: web.Request) -> web.Response:
        try:
            query = self._query(request, DEFAULT_LIMIT, MAX_LIMIT)
        except BadParameterError as exc:
            return problem(400, "Bad Request", str(exc))

        def read() -> str:
            found = self.store.list_changes(
                since=query.since,
                url=query.url,
                tag=query.tag,
                after_id=query.after_id,
                limit=query.limit,
            )
            next_cursor = encode_cursor(found[-1].id) if len(found) == query.limit else None
            return json.dumps({"changes": [c.as_dict() for c in found], "next_cursor": next_cursor})

        body: str = await self._read("listing changes", read)
        return web.Response(text=body, content_type="application/json")

    async def get_change(self, request: web.Request) -> web.Response:
        raw = request.match_info["id"]
        if not raw.isdigit() or len(raw) > 18:
            return problem(400, "Bad Request", "id: must be a change id (a whole number)")
        change_id = int(raw)

        def read() -> str | None:
            text = self.store.change_text(change_id)
            if text is None:
                return None
            diff = self.diffs.from_text(text)
            return json.dumps(
                text.as_dict() | {"diff": diff.diff, "diff_truncated": diff.truncated}
            )

        body: str | None = await self._read("reading a change", read)
        if body is None:
            return problem(
                404,
                "Not Found",
                f"no change {change_id} (deleted by retention, or never committed); "
                "GET /api/v1/changes lists them",
            )
        return web.Response(text=body, content_type="application/json")

    async def openapi(self, request: web.Request) -> web.Response:
        return web.json_response(openapi_document())
