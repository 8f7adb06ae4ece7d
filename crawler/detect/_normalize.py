"""Normalized content: the visible text of HTML/XML, collapsed whitespace; raw bytes otherwise.

Every step is linear in the body (bodies are cut at ``MAX_NORMALIZE_BYTES`` first, HTML where
more than ``MAX_OPEN_ELEMENTS`` elements would be open), and the page's time budget is looked
at between steps (``BudgetExceededError``). The XML text is found by ``str.find`` scans: the
regexes they replace (``<!--.*?-->``, ``<[^>]*>``, ...) restarted at every unterminated '<' and
took 21 s on 80 KB of ``<!--`` and 80 s on 180 KB of ``<![CDATA[`` (now milliseconds; the text
of well-formed XML is the same, see tests/detect/test_hostile.py).
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from functools import lru_cache
from math import inf
from typing import Literal, NamedTuple

from selectolax.lexbor import LexborHTMLParser, LexborNode

from crawler.detect._charset import decode
from crawler.detect._guard import safe_length
from crawler.detect._lines import block_text, tag_names_in, tidy_lines
from crawler.detect._rules import (
    NO_RULES,
    BudgetExceededError,
    WatchRules,
    clock,
    compiled_patterns,
    remove_patterns,
)
from crawler.snapshots import collapse_whitespace

Kind = Literal["html", "xml", "text", "binary"]

#: Bodies are cut to this many bytes before parsing (bounds the DOM size and the CPU per page).
MAX_NORMALIZE_BYTES = 2 * 2**20
_DROP_TAGS = ["script", "style", "noscript", "template"]
_DEFAULT_RULES = NO_RULES


class Extract(NamedTuple):
    """``data``: the text (whitespace not yet collapsed) or the body; ``truncated``: the page
    was cut at a parse limit (``MAX_NORMALIZE_BYTES``, or ``MAX_OPEN_ELEMENTS`` for HTML), so
    changes past the cut go unseen. ``readable``: for text, makes the readable text (a line
    per block element, ``crawler.detect._lines``) when called, once; None for other bodies."""

    data: bytes
    is_text: bool
    truncated: bool
    readable: Callable[[], bytes] | None = None


def content_kind(content_type: str | None, body: bytes) -> Kind:
    """Classify by Content-Type; sniff the first bytes when it is missing."""
    mime = (content_type or "").split(";", 1)[0].strip().lower()
    if mime in ("text/html", "application/xhtml+xml"):
        return "html"
    if mime in ("text/xml", "application/xml") or mime.endswith("+xml"):
        return "xml"
    if mime.startswith("text/") or mime in ("application/json", "application/javascript"):
        return "text"
    if mime and mime not in ("application/octet-stream", "unknown/unknown"):
        return "binary"
    head = body[:512].lstrip().lower()
    if head.startswith((b"<!doctype html", b"<html")) or b"<html" in head or b"<body" in head:
        return "html"
    if head.startswith(b"<?xml"):
        return "xml"
    return "binary"


def html_text(text: str, selector: str | None, deadline: float = inf) -> tuple[str, bool]:
    """(concatenated text nodes, cut at the open-elements guard): lexbor's own, fast text
    extraction; whitespace as in the page."""
    _, nodes, truncated = html_nodes(text, selector, deadline)
    return _joined_text(nodes), truncated


def html_nodes(
    text: str, selector: str | None, deadline: float = inf
) -> tuple[LexborHTMLParser, list[LexborNode], bool]:
    """(the tree, the nodes whose text counts: the root, or those matching ``selector``; cut
    at the open-elements guard), scripts, styles, noscripts and templates stripped."""
    cut = safe_length(text)
    truncated = cut < len(text)
    tree = LexborHTMLParser(text[:cut] if truncated else text)
    if clock() > deadline:
        raise BudgetExceededError("parse")
    tree.strip_tags(_DROP_TAGS)
    if selector is not None:
        return tree, list(tree.css(selector)), truncated
    root = tree.root
    return tree, ([] if root is None else [root]), truncated


def _joined_text(nodes: list[LexborNode]) -> str:
    """The text that the hash reads: the nodes' text, a space between two selected nodes."""
    return " ".join(node.text_lexbor() for node in nodes)


def _cut_spans(text: str, spans: list[tuple[str, str, bool]], keep_inner: bool = False) -> str:
    """``text`` with each span from an opener of ``spans`` to the first closer after it replaced
    by a space (with ``keep_inner``: by its inside, tags stripped), leftmost first, as a regex
    alternation would (openers flagged True match in any case). Each opener's next occurrence
    is searched once per position it passes; an opener whose closer is missing from some point
    on is dropped (no closer after it means none after any later opener): linear time."""
    out: list[str] = []
    last = 0
    find = text.find
    n = len(text)
    nxt = [-1] * len(spans)  # the next occurrence of each opener at or after ``last``, or n

    def next_at(k: int, i: int) -> int:
        opener, _, any_case = spans[k]
        if any_case:  # a literal in any case: a regex without backtracking beyond its length
            match = _any_case(opener).search(text, i)
            return n if match is None else match.start()
        p = find(opener, i)
        return n if p < 0 else p

    while True:
        for k in range(len(spans)):
            if nxt[k] < last:
                nxt[k] = next_at(k, last)
        p = min(nxt)
        if p >= n:
            break
        k = nxt.index(p)
        opener, closer, _ = spans[k]
        start = p + len(opener)
        end = find(closer, start)
        if end < 0:
            nxt[k] = n  # no closer after this opener, so none after any later one
            continue
        out.append(text[last:p])
        out.append(" " + _strip_tags(text[start:end]) + " " if keep_inner else " ")
        last = end + len(closer)
    if not out:
        return text
    out.append(text[last:])
    return "".join(out)


@lru_cache(maxsize=8)
def _any_case(literal: str) -> re.Pattern[str]:
    return re.compile(re.escape(literal), re.I)


def _strip_tags(text: str) -> str:
    """Every '<' up to the next '>' becomes a space (an unclosed '<' and the rest are kept)."""
    out: list[str] = []
    i = 0
    find = text.find
    while True:
        p = find("<", i)
        if p < 0:
            break
        end = find(">", p + 1)
        if end < 0:
            break
        out.append(text[i:p])
        out.append(" ")
        i = end + 1
    if not out:
        return text
    out.append(text[i:])
    return "".join(out)


_XML_JUNK = [("<!--", "-->", False), ("<?", "?>", False), ("<!DOCTYPE", ">", True)]
_XML_CDATA = [("<![CDATA[", "]]>", False)]


def xml_text(text: str) -> str:
    """The text of XML: comments, processing instructions and doctypes cut, CDATA sections'
    insides kept (tags stripped), tags cut, entities decoded."""
    text = _cut_spans(text, _XML_JUNK)
    text = _cut_spans(text, _XML_CDATA, keep_inner=True)
    return html.unescape(_strip_tags(text))


def extract_page(
    body: bytes,
    content_type: str | None,
    rules: WatchRules = _DEFAULT_RULES,
    *,
    max_bytes: int = MAX_NORMALIZE_BYTES,
    deadline: float = inf,
) -> Extract:
    """The content of a page (see ``Extract``); raises ``BudgetExceededError`` once
    ``clock()`` passes ``deadline`` (looked at between steps)."""
    kind = content_kind(content_type, body)
    if kind == "binary":
        return Extract(body, False, False)
    truncated = len(body) > max_bytes
    if truncated:
        body = body[:max_bytes]
    text = decode(body, content_type, sniff_meta=kind == "html")
    if clock() > deadline:
        raise BudgetExceededError("decode")
    lines: Callable[[], bytes]
    if kind == "html" or (rules.has_selector and kind == "xml"):
        source = text
        tree, nodes, cut = html_nodes(text, rules.selector, deadline)
        text = _joined_text(nodes)
        truncated = truncated or cut

        hashed = text

        def lines() -> bytes:
            return block_text(tree, nodes, hashed, deadline, tag_names_in(source))

    else:
        if kind == "xml":
            text = xml_text(text)
        plain = text

        def lines() -> bytes:
            return tidy_lines(plain.encode("utf-8", errors="replace"))

    data = text.encode("utf-8", errors="replace")
    patterns = compiled_patterns(rules.ignore_patterns) if rules.ignore_patterns else ()
    if patterns:
        if clock() > deadline:
            raise BudgetExceededError("text")
        data = collapse_whitespace(remove_patterns(collapse_whitespace(data), patterns, deadline))

    def readable() -> bytes:
        """The readable text; the ignore patterns see its line breaks (see docs/history.md).
        Raises ``BudgetExceededError`` past ``deadline`` (the judge then keeps the text as
        hashed, by its own lines)."""
        out = lines()
        if patterns:
            out = tidy_lines(remove_patterns(out, patterns, deadline))
        return out

    return Extract(data, True, truncated, readable)


def extract(
    body: bytes,
    content_type: str | None,
    rules: WatchRules = _DEFAULT_RULES,
    *,
    max_bytes: int = MAX_NORMALIZE_BYTES,
) -> tuple[bytes, bool]:
    """(content, is_text): the text of HTML/XML/text with whitespace not yet collapsed (unless
    ignore patterns had to run), or the body itself for other types. ``content_hash`` of it
    equals ``content_hash(normalize(...))``; this skips the collapsing when only hashing."""
    page = extract_page(body, content_type, rules, max_bytes=max_bytes)
    return page.data, page.is_text


def normalize(
    body: bytes,
    content_type: str | None,
    rules: WatchRules = _DEFAULT_RULES,
    *,
    max_bytes: int = MAX_NORMALIZE_BYTES,
) -> bytes:
    """The content that decides "changed": UTF-8 text for HTML/XML/text, the bytes otherwise.

    HTML: parsed with selectolax (lexbor); script/style/noscript/template and comments dropped;
    only text nodes count (so attributes such as hidden inputs' CSRF tokens never do); text
    nodes are concatenated as lexbor does (no separator added between elements) and whitespace
    runs collapsed to one space; ``rules.selector`` restricts to matching elements;
    ``rules.ignore_patterns`` are removed from the collapsed text. Bodies beyond ``max_bytes``
    are truncated first, and HTML is cut where more than ``MAX_OPEN_ELEMENTS`` elements would
    be open (the parser is quadratic in nesting depth), so changes past either cut go unseen.
    Never raises on bad content.
    """
    data, is_text = extract(body, content_type, rules, max_bytes=max_bytes)
    return collapse_whitespace(data) if is_text else data


def readable_text(
    body: bytes,
    content_type: str | None,
    rules: WatchRules = _DEFAULT_RULES,
    *,
    max_bytes: int = MAX_NORMALIZE_BYTES,
) -> bytes | None:
    """The text a change keeps as its before and after: a line per block element, each line's
    whitespace collapsed (``crawler.detect._lines``); None for a body that is not text.
    ``content_hash`` of it equals ``content_hash(normalize(...))``."""
    page = extract_page(body, content_type, rules, max_bytes=max_bytes)
    return None if page.readable is None else page.readable()
