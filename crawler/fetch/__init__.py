"""Fetching: a polite, SSRF-safe aiohttp client with robots.txt and conditional GET.

Takes a plain ``FetchConfig``; imports nothing else of the project.

Decisions:

* Errors: ``fetch`` returns ``outcome="error"`` with ``error_kind`` in ``ERROR_KINDS`` and a
  one-line message; it raises only for programming errors (e.g. a closed Fetcher).
* Timeouts: ``timeout_s`` is one budget per fetch for network time (all hops, retries and
  back-off sleeps); waiting for a per-host slot or a free connection is not counted, and a
  robots.txt fetch has its own budget.
* Retries: exponential back-off with jitter (``retry_backoff_s * 2**n``) for connect errors,
  resets, timeouts and 502/503/504 (503 only without Retry-After), while budget remains.
* Rate limiting: 429, or 503 with Retry-After, backs the host off for Retry-After seconds
  (``default_retry_after_s`` without one, capped by ``max_retry_after_s``). Later fetches to
  the host fail fast with ``rate_limited`` and ``retry_after_s`` = time left: no waiting, and
  no request: their outcome is "deferred" (not attempted), not "error".
* robots.txt: per origin, once per ``robots_ttl_s`` (single flight, redirects followed,
  first ``robots_max_bytes`` parsed). 4xx = allow all; 429/5xx = whole site disallowed for
  ``robots_error_ttl_s``; unreachable = the same, reported with the network error's kind.
  Crawl-delay (capped by ``max_crawl_delay_s``) becomes the host's minimum delay.
* SSRF: the connector's resolver drops refused addresses (so DNS rebinding cannot bypass it)
  and IP-literal hosts are checked before each hop; redirects are followed manually so every
  hop is checked. ``allowed_networks`` opens specific addresses (tests, a demo site).
* Bodies: read up to ``max_body_bytes`` of decoded bytes, then abort (``too_large``); a
  larger declared Content-Length is refused before reading. Cookies are never kept.
"""

from crawler.fetch._addresses import (
    AddressPolicy,
    blocked_reason,
    ip_literal,
    numeric_host_problem,
)
from crawler.fetch._client import Fetcher
from crawler.fetch._dispatch import HostDispatcher
from crawler.fetch._errors import parse_retry_after
from crawler.fetch._types import (
    ERROR_KINDS,
    ErrorKind,
    FetchConfig,
    FetchRequest,
    FetchResult,
    Outcome,
)
from crawler.fetch._urls import UnsupportedSchemeError, validate_url

__all__ = [
    "ERROR_KINDS",
    "AddressPolicy",
    "ErrorKind",
    "FetchConfig",
    "FetchRequest",
    "FetchResult",
    "Fetcher",
    "HostDispatcher",
    "Outcome",
    "UnsupportedSchemeError",
    "blocked_reason",
    "ip_literal",
    "numeric_host_problem",
    "parse_retry_after",
    "validate_url",
]
