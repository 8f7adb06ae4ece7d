"""Links of an HTML page, with their anchor text (selectolax's lexbor parser, as the change
detector uses)."""

from __future__ import annotations

from selectolax.lexbor import LexborHTMLParser


def extract_links(html: str) -> list[tuple[str, str]]:
    """``(href, anchor text)`` of every ``<a href>`` in document order (raw, not yet resolved
    or canonicalized); a repeated href is kept once, with its first anchor text."""
    tree = LexborHTMLParser(html)
    seen: dict[str, str] = {}
    for node in tree.css("a[href]"):
        href = (node.attributes.get("href") or "").strip()
        if href and not href.lower().startswith(("javascript:", "mailto:", "tel:", "#")):
            seen.setdefault(href, node.text(strip=True))
    return list(seen.items())


def page_text(html: str) -> str:
    """The visible text of a page (title and body)."""
    tree = LexborHTMLParser(html)
    for node in tree.css("script, style"):
        node.decompose()
    title = tree.css_first("title")
    body = tree.body
    return " ".join(
        part for part in (title.text() if title else "", body.text() if body else "") if part
    )
