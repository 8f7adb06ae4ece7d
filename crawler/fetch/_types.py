"""Plain data: the fetcher's configuration, a request, a result, and the closed set of errors."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

#: "deferred": not attempted now, and not a failure (the host is backed off after a 429/503)
Outcome = Literal["ok", "not_modified", "error", "deferred"]

#: Every ``FetchResult.error_kind``, with its meaning.
ERROR_KINDS: dict[str, str] = {
    "invalid_url": "the URL (or a redirect's Location) is malformed",
    "unsupported_scheme": "the scheme is not http or https",
    "dns": "the host name does not resolve",
    "connect": "the TCP connection could not be established (refused, unreachable)",
    "tls": "TLS handshake or certificate failure",
    "reset": "the server closed or reset the connection before the response was complete",
    "timeout": "no complete response within timeout_s (slow or trickling server)",
    "too_large": "the body exceeds max_body_bytes (reading was aborted)",
    "too_many_redirects": "more than max_redirects redirects",
    "redirect_loop": "a redirect leads back to a URL already visited",
    "blocked_address": "the host is/resolves to a private, loopback, link-local or metadata IP",
    "robots": "disallowed by robots.txt, or robots.txt answered 429/5xx (site disallowed)",
    "rate_limited": "HTTP 429, or 503 with Retry-After, or the host is still backed off after one",
    "http_4xx": "a final 4xx status (other than 429)",
    "http_5xx": "a final 5xx status (after retries)",
    "bad_response": "a malformed HTTP response (bad headers, 3xx without Location, a body that "
    "does not decode as its Content-Encoding says, ...)",
    "other": "anything else (the message says what)",
}
ErrorKind = Literal[
    "invalid_url",
    "unsupported_scheme",
    "dns",
    "connect",
    "tls",
    "reset",
    "timeout",
    "too_large",
    "too_many_redirects",
    "redirect_loop",
    "blocked_address",
    "robots",
    "rate_limited",
    "http_4xx",
    "http_5xx",
    "bad_response",
    "other",
]


@dataclass(frozen=True)
class FetchConfig:
    """How the fetcher behaves. Times in seconds.

    ``timeout_s`` is the total network budget of one ``fetch`` (all redirect hops, retries and
    backoff sleeps; time spent queueing for the per-host politeness slot is not counted).
    ``per_host_concurrency`` 0 = unlimited. ``allowed_networks``: addresses/CIDRs allowed even
    when private (e.g. ``("127.0.0.1/32",)`` for a local test site) while the rest stay refused.
    """

    user_agent: str
    timeout_s: float = 20
    connect_timeout_s: float = 10
    max_body_bytes: int = 10 * 2**20
    max_redirects: int = 5
    total_concurrency: int = 100
    per_host_concurrency: int = 2
    per_host_min_delay_s: float = 1.0
    allow_private_addresses: bool = False
    respect_robots: bool = True
    robots_ttl_s: float = 3600
    retries: int = 2
    retry_backoff_s: float = 0.5
    max_retry_after_s: float = 3600
    # extensions
    allowed_networks: tuple[str, ...] = ()
    robots_error_ttl_s: float = 120
    robots_max_bytes: int = 512 * 1024
    max_crawl_delay_s: float = 60
    default_retry_after_s: float = 60
    dns_cache_ttl_s: float = 60
    accept: str = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"

    def __post_init__(self) -> None:
        if not self.user_agent.strip():
            raise ValueError("user_agent must not be empty")
        if self.timeout_s <= 0 or self.connect_timeout_s <= 0:
            raise ValueError("timeouts must be positive")
        if self.max_body_bytes <= 0 or self.total_concurrency <= 0:
            raise ValueError("max_body_bytes and total_concurrency must be positive")
        if self.max_redirects < 0 or self.retries < 0 or self.per_host_concurrency < 0:
            raise ValueError("max_redirects, retries and per_host_concurrency must be >= 0")


@dataclass(frozen=True)
class FetchRequest:
    url_id: int
    url: str
    etag: str | None = None
    last_modified: str | None = None


@dataclass
class FetchResult:
    """One poll. ``outcome="error"`` carries ``error_kind`` (a key of ``ERROR_KINDS``) and a
    one-line ``error``; ``status`` is the last HTTP status seen, if any. ``outcome="deferred"``
    (no request made: the host is backed off) carries ``error_kind="rate_limited"``, the
    reason in ``error`` and the time left in ``retry_after_s``."""

    url_id: int
    url: str
    final_url: str
    outcome: Outcome
    status: int | None
    body: bytes
    content_type: str | None
    etag: str | None
    last_modified: str | None
    error_kind: ErrorKind | None
    error: str | None
    duration_s: float
    bytes_received: int
    retry_after_s: float | None = None
    #: the minimum delay between requests the fetcher enforces on the request's host when
    #: robots.txt raised it (Crawl-delay); None when it is the configured one
    host_delay_s: float | None = None
    #: the response's ``Date`` header (the server's clock, against which its
    #: ``Last-Modified`` is read), None when it sent none
    date: str | None = None


class FetchError(Exception):
    """Internal: a failed poll on its way to becoming an error ``FetchResult``."""

    def __init__(
        self,
        kind: ErrorKind,
        message: str,
        *,
        status: int | None = None,
        retry_after_s: float | None = None,
        transient: bool = False,
        deferred: bool = False,
    ) -> None:
        super().__init__(message)
        self.deferred = deferred  # not attempted: the result is "deferred", not "error"
        self.kind: ErrorKind = kind
        self.message = message
        self.status = status
        self.retry_after_s = retry_after_s
        self.transient = transient
        self.final_url: str | None = None  # the redirect hop it happened on
