"""What ``crawler add`` accepts: only input the crawl can ever use.

A URL, selector or pattern that is refused later fails forever (or, with the detector in
process, silently never detects a change), so ``add`` applies the crawl's own rules first:

* the URL: the fetcher's ``validate_url`` (canonical form), then the fetcher's address
  policy (``AddressPolicy`` from the same settings) for an IP-literal host, then
  ``fetch.numeric_host_problem`` (a host such as ``1234`` or ``0x7f.1`` that resolvers
  read as an IPv4 address in another notation);
* the length: at most ``MAX_URL_LENGTH`` characters, before and after canonicalization
  (percent-encoding can grow a URL ninefold). 2,048: the sitemaps protocol's own limit on a
  ``<loc>``, far above real pages' URLs, and safely below what PostgreSQL can keep in the
  unique index on ``urls.url`` (a B-tree entry must fit in a third of a page, about 2,700
  bytes: a longer URL made the whole ``add`` fail there). Many servers and CDNs answer 414
  well before 8 KB anyway;
* the host: at most 253 characters (DNS), so that ``host:port`` fits the sites table;
* a refused address's message names what opens it (``CRAWLER_ALLOW_PRIVATE_ADDRESSES``), or
  says that nothing does (cloud metadata and link-local addresses, refused whatever the
  settings);
* the selector and the ignore patterns: the detector's own ``validate_rules`` (the selector
  parsed by lexbor within its complexity limit, every pattern compiled by RE2, the
  linear-time engine the detector runs them on).
"""

from __future__ import annotations

from urllib.parse import urlsplit

from crawler.detect import validate_rules
from crawler.fetch import AddressPolicy, ip_literal, numeric_host_problem, validate_url

__all__ = ["MAX_HOST_LENGTH", "MAX_URL_LENGTH", "check_url", "validate_rules"]

MAX_URL_LENGTH = 2048
#: the environment variable of the setting that opens private addresses
ALLOW_PRIVATE_ENV = "CRAWLER_ALLOW_PRIVATE_ADDRESSES"
MAX_HOST_LENGTH = 253


def check_url(raw: str, policy: AddressPolicy) -> str:
    """The canonical form of ``raw`` if the crawl can poll it, else ValueError."""
    if len(raw) > MAX_URL_LENGTH:
        raise ValueError(
            f"URL of {len(raw):,} characters (starting {raw[:60]!r}): longer than the "
            f"{MAX_URL_LENGTH:,} accepted"
        )
    url = validate_url(raw)
    if len(url) > MAX_URL_LENGTH:
        raise ValueError(
            f"URL {raw[:60]!r}... is {len(url):,} characters once percent-encoded: longer "
            f"than the {MAX_URL_LENGTH:,} accepted"
        )
    host = urlsplit(url).hostname or ""
    if len(host) > MAX_HOST_LENGTH:
        raise ValueError(f"host of {len(host)} characters in {url[:60]!r}...: DNS allows 253")
    problem = numeric_host_problem(host)
    if problem is not None:
        raise ValueError(f"{url}: {problem}")
    literal = ip_literal(host)
    if literal is not None:
        reason = policy.refusal(literal)
        if reason is not None:
            raise ValueError(f"{url}: the crawler refuses {literal} ({reason}); {_hint(literal)}")
    return url


def _hint(literal: str) -> str:
    """What the operator can do about a refused address: the setting that opens it, or that
    none does (cloud metadata and link-local addresses stay refused with it)."""
    if AddressPolicy(allow_private=True).refusal(literal) is not None:
        return "no setting allows it: the crawler never contacts such an address"
    return (
        f"to watch private addresses set {ALLOW_PRIVATE_ENV}=true (or allow_private_addresses "
        "= true in the config file) for this command and for crawler run"
    )
