"""Link canonicalization, scope rules and the per-source budget that keep traps from eating it.

Decisions:

- Canonical form is w3lib's ``canonicalize_url`` (query arguments sorted, percent-encoding
  normalized, fragment dropped, dot segments resolved) after yarl has resolved the link against
  its page and dropped the default port (w3lib keeps ``:80``). Both are well-kept libraries;
  the hand-written part is ``crawler.discovery._sessions``: session and tracking parameters,
  ``;jsessionid=...`` path parameters and ``/s/<token>/``-style session segments, which
  neither library knows about (its docstring says what counts as a session id).
- A **trap** is a part of a site that produces unboundedly many URLs (an infinite calendar,
  session ids, faceted navigation). Canonicalization folds the session-id variants into one
  URL; the rest is held by limits that do not need to recognise the trap: a maximum depth
  from the source (a calendar or a pager is a chain, each page one link deeper), a maximum
  number of query arguments (facet combinations grow with it), optionally a budget per URL
  *template* (the URL with every run of digits replaced by ``N``: a calendar's
  ``/cal?d=2031-05-03`` and all its neighbours share one template; off by default, because
  ordinary sites number their articles too: ``/article/123`` would share a template with every
  other article) and, over everything, the per-source page budget, which is never exceeded.
- The include/exclude patterns run on RE2 (``compile_pattern``, ``_patterns.py``): they are
  matched against every link a remote page offers, so their time must be linear in the URL.
"""

from __future__ import annotations

import re
from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from enum import StrEnum

from w3lib.url import canonicalize_url
from yarl import URL

from crawler.discovery._patterns import UrlPattern, compile_pattern
from crawler.discovery._sessions import strip_sessions

_DIGITS = re.compile(r"\d+")
#: links a source's budget remembers as admitted (with their depth; the least recently seen
#: forgotten first: one heard again is simply admitted again) and URL templates it counts
MAX_ADMITTED = 100_000
MAX_TEMPLATES = 10_000


def canonical_url(link: str, base: str | None = None) -> str | None:
    """The canonical absolute form of ``link`` (resolved against ``base``), or None when it is
    not an http(s) URL or cannot be parsed."""
    try:
        url = URL(link.strip())
        if url.scheme and not url.raw_host:
            return None  # "mailto:...", or "http://" with no host
        if base is not None and not url.is_absolute():
            url = URL(base).join(url)
        if url.scheme not in ("http", "https") or not url.raw_host:
            return None
        if url.user is not None or url.password is not None:
            return None
        text = str(url.with_fragment(None))
        if url.explicit_port and url.port == {"http": 80, "https": 443}[url.scheme]:
            text = str(url.with_port(None).with_fragment(None))
    except (ValueError, TypeError, UnicodeError, KeyError):
        return None
    try:
        return str(canonicalize_url(strip_sessions(text)))
    except (ValueError, UnicodeError):
        return None


def url_template(url: str) -> str:
    """The URL with every run of digits replaced by ``N``: the pages a calendar or a pager
    generates share one template."""
    return _DIGITS.sub("N", url)


@dataclass(frozen=True)
class Scope:
    """Which links a source may follow.

    ``hosts``: allowed host names (empty = only the source's own host). ``allowed_domains``:
    a host is also allowed when it is one of these or a subdomain of one. ``include``: if
    given, a URL must match at least one pattern; ``exclude``: a URL matching any is refused.
    Patterns are RE2 regular expressions searched anywhere in the canonical URL (a pattern
    RE2 cannot run raises ``ValueError`` here, naming it).
    """

    hosts: frozenset[str] = frozenset()
    allowed_domains: tuple[str, ...] = ()
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    max_depth: int = 5
    page_budget: int = 1_000
    max_query_arguments: int = 3
    template_budget: int | None = None
    _include: tuple[UrlPattern, ...] = field(default=(), init=False, repr=False)
    _exclude: tuple[UrlPattern, ...] = field(default=(), init=False, repr=False)

    def __post_init__(self) -> None:
        if self.max_depth < 0 or self.page_budget < 0 or (self.template_budget or 1) < 1:
            raise ValueError("max_depth and page_budget must be >= 0, template_budget >= 1")
        for name, patterns in (("include", self.include), ("exclude", self.exclude)):
            try:
                compiled = tuple(compile_pattern(p) for p in patterns)
            except ValueError as exc:
                raise ValueError(f"{name} pattern {exc}") from None
            object.__setattr__(self, f"_{name}", compiled)

    @classmethod
    def same_host(cls, source_url: str, **options: object) -> Scope:
        host = URL(source_url).host or ""
        return cls(hosts=frozenset({host.lower()}), **options)  # type: ignore[arg-type]

    def host_allowed(self, host: str) -> bool:
        host = host.lower()
        if host in self.hosts:
            return True
        return any(host == d or host.endswith("." + d) for d in self.allowed_domains)

    def in_scope(self, url: str) -> bool:
        host = URL(url).host or ""
        if not self.host_allowed(host):
            return False
        if self._include and not any(p.search(url) for p in self._include):
            return False
        return not any(p.search(url) for p in self._exclude)


class Refusal(StrEnum):
    """Why a link was not admitted."""

    INVALID = "invalid"
    OUT_OF_SCOPE = "out_of_scope"
    TOO_DEEP = "too_deep"
    TOO_MANY_ARGUMENTS = "too_many_arguments"
    TEMPLATE_BUDGET = "template_budget"
    PAGE_BUDGET = "page_budget"


class SourceBudget:
    """The state of one source's crawl: admits links, counts pages, refuses past its limits.

    ``admit`` decides on a link found at ``depth`` (the source itself is depth 0);
    ``charge`` is called once per page actually fetched for this source, and refuses (returns
    False) once the page budget is spent, so the budget is never exceeded whatever the caller
    admitted earlier.
    """

    def __init__(self, scope: Scope) -> None:
        self.scope = scope
        self.pages = 0
        self.templates: Counter[str] = Counter()
        self.refused: Counter[Refusal] = Counter()
        self.depth: OrderedDict[str, int] = OrderedDict()

    def admit(self, link: str, base: str | None, depth: int) -> str | Refusal:
        """The canonical URL if the link may be followed, else the reason it may not."""
        # A link heard again exactly as it was admitted (a sitemap or a start page read
        # again lists the same URLs) is its own canonical form: the canonical form of a
        # canonical URL is itself, and it is absolute, so ``base`` does not matter. A
        # dictionary lookup instead of 15-40 us of parsing a link.
        url = link if link in self.depth else canonical_url(link, base)
        if url is None:
            return self._refuse(Refusal.INVALID)
        if url in self.depth:
            self.depth[url] = min(self.depth[url], depth)
            self.depth.move_to_end(url)
            return url
        if not self.scope.in_scope(url):
            return self._refuse(Refusal.OUT_OF_SCOPE)
        if depth > self.scope.max_depth:
            return self._refuse(Refusal.TOO_DEEP)
        query = URL(url).query
        if len(query) > self.scope.max_query_arguments:
            return self._refuse(Refusal.TOO_MANY_ARGUMENTS)
        limit = self.scope.template_budget
        if limit is not None:  # counted only with a budget (bounded: new ones refused past it)
            template = url_template(url)
            seen = self.templates.get(template)
            if (seen or 0) >= limit or (seen is None and len(self.templates) >= MAX_TEMPLATES):
                return self._refuse(Refusal.TEMPLATE_BUDGET)
            self.templates[template] += 1
        if len(self.depth) >= self.scope.page_budget * 4:
            return self._refuse(Refusal.PAGE_BUDGET)
        self.depth[url] = depth
        while len(self.depth) > MAX_ADMITTED:
            self.depth.popitem(last=False)
        return url

    def charge(self) -> bool:
        """Account for one fetch; False (and nothing counted) once the budget is spent."""
        if self.pages >= self.scope.page_budget:
            self.refused[Refusal.PAGE_BUDGET] += 1
            return False
        self.pages += 1
        return True

    def refund(self) -> None:
        """Give back one :meth:`charge` whose fetch was not made (deferred by the caller)."""
        self.pages = max(0, self.pages - 1)

    @property
    def exhausted(self) -> bool:
        return self.pages >= self.scope.page_budget

    def _refuse(self, why: Refusal) -> Refusal:
        self.refused[why] += 1
        return why
