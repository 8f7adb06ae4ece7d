"""Links of an HTML page (selectolax's lexbor parser, as the change detector uses)."""

from __future__ import annotations

from selectolax.lexbor import LexborHTMLParser


def extract_links(html: str) -> list[str]:
    """The ``href`` of every ``<a>`` and ``<link rel=alternate>`` in document order (raw,
    not yet resolved or canonicalized); duplicates are kept once."""
    tree = LexborHTMLParser(html)
    seen: dict[str, None] = {}
    for node in tree.css("a[href], link[rel=alternate][href]"):
        href = node.attributes.get("href")
        if href and not href.startswith(("javascript:", "mailto:", "tel:", "#")):
            seen.setdefault(href.strip(), None)
    return list(seen)
