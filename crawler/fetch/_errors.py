"""Mapping exceptions and HTTP statuses onto the closed set of error kinds."""

from __future__ import annotations

import asyncio
import email.utils
import time
import zlib

import aiohttp
from aiohttp.http_exceptions import ContentEncodingError

from crawler.fetch._addresses import BlockedAddressError
from crawler.fetch._types import FetchError

#: Statuses retried with back-off (503 only when it carries no Retry-After).
RETRY_STATUSES = frozenset({502, 503, 504})


def _cause_chain(exc: BaseException) -> list[BaseException]:
    out: list[BaseException] = []
    cur: BaseException | None = exc
    while cur is not None and cur not in out:
        out.append(cur)
        cur = cur.__cause__ or cur.__context__
        if isinstance(cur, aiohttp.ClientConnectorError):
            out.append(cur.os_error)
    return out


def classify(exc: BaseException, url: str) -> FetchError:
    """A FetchError (kind, clear message, transient?) for an exception raised while fetching."""
    if isinstance(exc, FetchError):
        return exc
    chain = _cause_chain(exc)
    for e in chain:
        if isinstance(e, BlockedAddressError):
            return FetchError("blocked_address", f"refused {url}: {e}")
    if isinstance(exc, aiohttp.ClientConnectorDNSError):
        return FetchError("dns", f"DNS lookup failed for {url}: {exc.os_error}")
    if isinstance(exc, aiohttp.ClientConnectorCertificateError | aiohttp.ClientSSLError):
        return FetchError("tls", f"TLS failure for {url}: {exc}")
    if isinstance(exc, asyncio.TimeoutError | aiohttp.ServerTimeoutError):
        return FetchError("timeout", f"timed out fetching {url}", transient=True)
    if isinstance(exc, aiohttp.ClientConnectorError):
        return FetchError("connect", f"cannot connect to {url}: {exc.os_error}", transient=True)
    if any(isinstance(e, ContentEncodingError | zlib.error) for e in chain):
        # a body that does not decode as its Content-Encoding says: the server's fault, and
        # it will say the same again (not a reset: no retry)
        return FetchError(
            "bad_response", f"undecodable body from {url} (Content-Encoding): {exc!s:.200}"
        )
    if isinstance(exc, aiohttp.InvalidURL):
        return FetchError("invalid_url", f"invalid URL {url}: {exc}")
    if isinstance(
        exc,
        aiohttp.ServerDisconnectedError
        | aiohttp.ClientPayloadError
        | aiohttp.ClientOSError
        | ConnectionError,
    ):
        return FetchError(
            "reset", f"connection closed or reset by {url}: {exc!s:.200}", transient=True
        )
    if isinstance(exc, aiohttp.ClientResponseError):
        return FetchError("bad_response", f"malformed response from {url}: {exc.message:.200}")
    return FetchError("other", f"{type(exc).__name__} fetching {url}: {exc!s:.200}")


def release(exc: BaseException) -> None:
    """Drop what ``exc`` and the exceptions chained to it hold: their tracebacks (whose frames
    keep every local of the failed read alive, e.g. the body chunks read before a size limit
    tripped) and their links. An exception raised through a frame that keeps it in a local
    (``failure = classify(exc)``; ``raise failure``) is a reference cycle: without this it waits
    for a full garbage collection, which a tuned collector runs rarely."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        nxt = cur.__cause__ or cur.__context__
        cur.__traceback__ = None
        cur.__cause__ = cur.__context__ = None
        cur = nxt


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds from a Retry-After header (delta-seconds or an HTTP date), None if absent/bad."""
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def status_failure(status: int, reason: str | None, url: str) -> FetchError:
    text = f"HTTP {status}{' ' + reason if reason else ''} from {url}"
    if status >= 500:
        return FetchError("http_5xx", text, status=status, transient=status in RETRY_STATUSES)
    return FetchError("http_4xx", text, status=status)
