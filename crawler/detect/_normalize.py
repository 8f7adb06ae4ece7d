"""Normalized content: the visible text of HTML/XML, collapsed whitespace; raw bytes otherwise."""

from __future__ import annotations

import html
import re
from typing import Literal

from selectolax.lexbor import LexborHTMLParser

from crawler.detect._charset import decode
from crawler.detect._guard import safe_length
from crawler.detect._rules import WatchRules, compiled_patterns

Kind = Literal["html", "xml", "text", "binary"]

#: Bodies are cut to this many bytes before parsing (bounds the DOM size and the CPU per page).
MAX_NORMALIZE_BYTES = 2 * 2**20
_DROP_TAGS = ["script", "style", "noscript", "template"]
_XML_JUNK = re.compile(r"<!--.*?-->|<\?.*?\?>|<!DOCTYPE[^>]*>", re.S | re.I)
_XML_CDATA = re.compile(r"<!\[CDATA\[(.*?)\]\]>", re.S)
_XML_TAG = re.compile(r"<[^>]*>")
NBSP = "\u00a0".encode()
_DEFAULT_RULES = WatchRules()


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


def collapse_whitespace(data: bytes) -> bytes:
    """Runs of ASCII whitespace (and NBSP) become one space; no leading/trailing space.

    The same whitespace that ``content_hash`` ignores, so hashing before or after collapsing
    gives the same hash."""
    if b"\xa0" in data:  # a memchr: see content_hash
        data = data.replace(NBSP, b" ")
    return b" ".join(data.split())


def html_text(text: str, selector: str | None) -> str:
    """Concatenated text nodes (lexbor's own, fast text extraction; whitespace as in the page)."""
    cut = safe_length(text)
    tree = LexborHTMLParser(text if cut == len(text) else text[:cut])
    tree.strip_tags(_DROP_TAGS)
    if selector is not None:
        return " ".join(node.text_lexbor() for node in tree.css(selector))
    root = tree.root
    return root.text_lexbor() if root is not None else ""


def xml_text(text: str) -> str:
    text = _XML_JUNK.sub(" ", text)
    text = _XML_CDATA.sub(lambda m: " " + _XML_TAG.sub(" ", m.group(1)) + " ", text)
    return html.unescape(_XML_TAG.sub(" ", text))


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
    kind = content_kind(content_type, body)
    if kind == "binary":
        return body, False
    if len(body) > max_bytes:
        body = body[:max_bytes]
    text = decode(body, content_type, sniff_meta=kind == "html")
    if kind == "html" or (rules.selector is not None and kind == "xml"):
        text = html_text(text, rules.selector)
    elif kind == "xml":
        text = xml_text(text)
    data = text.encode("utf-8", errors="replace")
    if rules.ignore_patterns:
        collapsed = collapse_whitespace(data).decode("utf-8")
        for pattern in compiled_patterns(rules.ignore_patterns):
            collapsed = pattern.sub(" ", collapsed)
        data = collapse_whitespace(collapsed.encode("utf-8"))
    return data, True


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
