"""Which site a URL belongs to, and which host its politeness is kept for: one place for both.

* ``site_of(url)``: the lower-case ``host[:port]`` of a URL (the store's ``urls.host``);
* ``host_key(site)``: the host whose politeness gates a fetch passes (per-host concurrency,
  delays, Crawl-delay, back-off), and the unit the crawl workers share out: the site without
  its port, an IPv6 address without its brackets. For a canonical URL (as the store keeps them)
  ``host_key(site_of(url))`` equals yarl's ``URL(url).raw_host``, which the fetcher's gates use
  for each redirect hop.

Plain string work (no parsing: these run for every poll). Imports nothing.
"""

from __future__ import annotations

from urllib.parse import urlsplit


def site_of(url: str) -> str:
    """The site of a (canonical) URL: lower-case ``host[:port]`` without user info."""
    _, sep, rest = url.partition("://")
    if not sep:
        return (urlsplit(url).hostname or "").lower()
    end = len(rest)
    for ch in "/?#":
        pos = rest.find(ch)
        if 0 <= pos < end:
            end = pos
    return rest[:end].rpartition("@")[2].lower()


def host_key(site: str) -> str:
    """The politeness key of a site (``host[:port]``): the host without port or brackets."""
    if site.startswith("["):
        end = site.find("]")
        return site[1:end] if end > 0 else site
    name, sep, port = site.rpartition(":")
    return name if sep and port.isdigit() else site


def url_host_key(url: str) -> str:
    """``host_key(site_of(url))``."""
    return host_key(site_of(url))
