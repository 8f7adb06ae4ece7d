"""Session ids and one-off values in links: what canonicalization drops so a session trap
folds into the pages it really has.

A *session trap* is a page whose links carry a fresh session id on every fetch
(``/s/3f9a.../item/1``, ``/item/1?token=3f9a...``): every fetch lists "new" URLs for the same
pages. Two rules, both pure:

- **Static rules** (:func:`strip_sessions`, applied by ``canonical_url`` to every link):
  query arguments named like a session or a campaign (:data:`SESSION_PARAMETERS`, and any
  ``utm_*``) are dropped; ``;jsessionid=...``-style path parameters are dropped; a path
  segment named like a session (:data:`SESSION_MARKERS`: ``s``, ``sid``, ``session``,
  ``token``...) followed by a segment that :func:`looks_like_token` is dropped with it; an
  ASP.NET cookieless segment ``(S(...))`` is dropped.
- **Learned rule** (:class:`OneOffLearner`): a query argument, or a token-like path segment
  (keyed by the segment before it), whose value is the *same in every link of one fetch*
  of a page and *differs on every fetch* (``LEARN_AFTER`` fetches in a row) is one-off: it
  is dropped from that host's links from then on. A value shared by all links of a fetch
  cannot tell two documents apart, and one that changes on every fetch cannot name one.

**What a token looks like** (:func:`looks_like_token`), chosen so genuinely different
articles are never merged: at least ``TOKEN_MIN_LENGTH`` (16) characters; never all digits
(``/article/12345``, however long, is a document number); either hexadecimal with digits and
letters (``3f9a0c...``, a UUID with its hyphens) or base64url-like with digits, letters of
both cases and at least ``TOKEN_MIN_BITS`` bits of entropy per character (a slug such as
``how-to-bake-bread-2024`` or ``my_article_2024`` stays: a hyphen is not token material here,
and a name in one case is a name). A static path rule needs the marker *and* the token look;
a learned rule needs the token look (for path segments) *and* the fetch-by-fetch evidence.
So a page of commits ``/commit/<40 hex>`` keeps them all: each link has its own value and
the values are stable across fetches.

Dropping a session segment changes the URL that is fetched, as dropping ``;jsessionid=``
always did: a site that serves its pages without the session id (the common case: the id
is also in a cookie) is read once per page; one that does not answers 404 and the page
expires. Either way the trap is bounded. The learner's memory is bounded
(``MAX_PAGES`` pages, ``MAX_POSITIONS`` positions per page, ``MAX_HOSTS`` hosts with rules,
``MAX_RULES`` rules per host; least recently used dropped first), and so is its time: it
reads the first ``MAX_LINKS`` links of a fetch.

Hand-written because neither w3lib nor yarl knows session ids beyond a parameter list
(w3lib's ``url_query_cleaner`` is used to drop the query arguments).
"""

from __future__ import annotations

import itertools
import math
import re
from collections import Counter, OrderedDict
from collections.abc import Iterable

from w3lib.url import url_query_cleaner
from yarl import URL

#: Query arguments that identify a session or a campaign, never a document (and ``utm_*``).
SESSION_PARAMETERS: tuple[str, ...] = (
    "jsessionid",
    "phpsessid",
    "sessionid",
    "session_id",
    "session",
    "sessid",
    "sid",
    "token",
    "aspsessionid",
    "cfid",
    "cftoken",
    "utm_source",
    "utm_medium",
    "utm_campaign",
    "utm_term",
    "utm_content",
    "fbclid",
    "gclid",
    "dclid",
    "msclkid",
    "yclid",
    "mc_eid",
    "_hsenc",
    "igshid",
)
#: Path segments that announce a session id in the next segment (``/s/<token>/``).
SESSION_MARKERS: frozenset[str] = frozenset(
    {"s", "sid", "sess", "session", "sessionid", "sessid", "token", "jsessionid", "phpsessid"}
)
TOKEN_MIN_LENGTH = 16
TOKEN_MIN_BITS = 3.0
#: fetches in a row with a fresh shared value before a position is learned one-off
LEARN_AFTER = 3
MAX_PAGES = 1_000
MAX_POSITIONS = 32
MAX_HOSTS = 1_000
MAX_RULES = 16
#: links of one fetch the learner reads (a page listing more is judged on its first ones)
MAX_LINKS = 1_000

_SESSION_NAMES = frozenset(SESSION_PARAMETERS)
_PATH_PARAMETER = re.compile(
    r";(?:jsessionid|phpsessid|sid|sessionid|session|token)=[^/?#]*", re.IGNORECASE
)
_HEX = re.compile(r"[0-9a-fA-F]+(?:-[0-9a-fA-F]+)*")
_BASE64URL = re.compile(r"[A-Za-z0-9_]+={0,2}")
_ASPNET_COOKIELESS = re.compile(r"\((?:[A-Za-z]\([A-Za-z0-9]+\))+\)")

#: a learned position: ("q", query name) or ("p", the path segment before the value)
Position = tuple[str, str]


def looks_like_token(value: str) -> bool:
    """True for a session-id-like value: long, not all digits, hex or high-entropy base64url
    with digits and letters (see the module docstring)."""
    if len(value) < TOKEN_MIN_LENGTH or len(value) > 512:
        return False
    letters = sum(c.isalpha() for c in value)
    digits = sum(c.isdigit() for c in value)
    if not letters or not digits:
        return False  # a number or a word: a document's name, not a session
    if _HEX.fullmatch(value):
        return True
    if not _BASE64URL.fullmatch(value) or value.islower() or value.isupper():
        return False  # random base64 mixes cases; a lower-case name_with_words does not
    return _entropy(value.rstrip("=")) >= TOKEN_MIN_BITS


def _entropy(value: str) -> float:
    counts = Counter(value)
    n = len(value)
    return -sum(c / n * math.log2(c / n) for c in counts.values())


def _is_session_name(name: str) -> bool:
    lowered = name.lower()
    return lowered in _SESSION_NAMES or lowered.startswith("utm_")


def strip_sessions(url: str) -> str:
    """``url`` (absolute, already resolved) without its session ids by the static rules."""
    text = _PATH_PARAMETER.sub("", url)
    head, mark, query = text.partition("?")
    scheme, sep, rest = head.partition("://")
    host, slash, path = rest.partition("/")
    if slash and path:
        segments = path.split("/")
        kept: list[str] = []
        skip = False
        for i, segment in enumerate(segments):
            if skip:
                skip = False
                continue
            if _ASPNET_COOKIELESS.fullmatch(segment):
                continue
            following = segments[i + 1] if i + 1 < len(segments) else ""
            if segment.lower() in SESSION_MARKERS and looks_like_token(following):
                skip = True  # the marker and its token
                continue
            kept.append(segment)
        head = f"{scheme}{sep}{host}/{'/'.join(kept)}"
    if not mark:
        return head
    names = [part.split("=", 1)[0] for part in query.split("&")]
    drop = [name for name in names if _is_session_name(name)]
    text = f"{head}?{query}"
    return url_query_cleaner(text, drop, remove=True) if drop else text


def _positions(url: str) -> dict[Position, str]:
    """The candidate positions of one link and their values."""
    parsed = URL(url)
    out: dict[Position, str] = {}
    for name, value in parsed.query.items():
        out[("q", name)] = value
    parts = [p for p in parsed.raw_path.split("/") if p]
    for before, segment in itertools.pairwise(parts):
        if looks_like_token(segment):
            out[("p", before)] = segment
    return out


class OneOffLearner:
    """Learns which query names and path positions carry one-off values on each host.

    ``observe(page, links)`` after each fetch of ``page`` (its links, canonical); ``clean(url)``
    drops the learned positions from a link of a host. Bounded whatever the sites return.
    """

    def __init__(self, learn_after: int = LEARN_AFTER) -> None:
        if learn_after < 2:
            raise ValueError("learn_after must be >= 2 (one fetch proves nothing)")
        self.learn_after = learn_after
        # page -> position -> (its shared value at the last fetch, fetches in a row it was fresh)
        self._pages: OrderedDict[str, dict[Position, tuple[str, int]]] = OrderedDict()
        self.rules: OrderedDict[str, set[Position]] = OrderedDict()  # host -> positions

    def observe(self, page: str, links: Iterable[str]) -> set[Position]:
        """Learn from one fetch of ``page``; the positions learned one-off by it."""
        host = URL(page).raw_host or ""
        values: dict[Position, set[str]] = {}
        carriers: Counter[Position] = Counter()
        for link in itertools.islice(links, MAX_LINKS):
            if (URL(link).raw_host or "") != host:
                continue
            for position, value in _positions(link).items():
                if position not in values and len(values) >= MAX_POSITIONS:
                    continue
                values.setdefault(position, set()).add(value)
                carriers[position] += 1
        shared = {p: next(iter(v)) for p, v in values.items() if len(v) == 1 and carriers[p] >= 2}
        before = self._pages.pop(page, {})
        now: dict[Position, tuple[str, int]] = {}
        learned: set[Position] = set()
        for position, value in shared.items():
            last, streak = before.get(position, ("", 0))
            streak = streak + 1 if value != last else 1  # fetches in a row, each fresh
            now[position] = (value, streak)
            if streak >= self.learn_after:
                learned.add(position)
        self._pages[page] = now
        while len(self._pages) > MAX_PAGES:
            self._pages.popitem(last=False)
        if learned:
            rules = self.rules.pop(host, set())
            for position in learned:
                if len(rules) < MAX_RULES:
                    rules.add(position)
            self.rules[host] = rules
            while len(self.rules) > MAX_HOSTS:
                self.rules.popitem(last=False)
        return learned

    def clean(self, url: str) -> str:
        """``url`` without the positions learned one-off on its host."""
        if not self.rules:
            return url
        host = URL(url).raw_host or ""
        rules = self.rules.get(host)
        if not rules:
            return url
        head, mark, query = url.partition("?")
        path_rules = {before for kind, before in rules if kind == "p"}
        if path_rules:
            scheme, sep, rest = head.partition("://")
            netloc, slash, path = rest.partition("/")
            segments = path.split("/")
            kept = [
                s
                for i, s in enumerate(segments)
                if not (i > 0 and segments[i - 1] in path_rules and looks_like_token(s))
            ]
            head = f"{scheme}{sep}{netloc}{slash}{'/'.join(kept)}"
        if not mark:
            return head
        drop = [name for kind, name in rules if kind == "q"]
        text = f"{head}?{query}"
        return url_query_cleaner(text, drop, remove=True) if drop else text
