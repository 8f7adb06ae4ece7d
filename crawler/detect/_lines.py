"""The readable text of a page: a line per block element, kept as a change's before and after.

The hash decides what a change is, and it is computed on the text as it always was: lexbor's
text nodes run together (``HomeHomeWelcome, version 2.``), whitespace ignored
(``content_hash``). A diff of that text is one long line, unreadable. The readable text is
the same text nodes, in the same order, with a line break added around each block element
(headings, paragraphs, list items, table rows, divs, sections, ...), a space before each
table cell and between links side by side, and each line's whitespace collapsed (empty lines
dropped). Only whitespace is
added or removed, so ``content_hash`` of the readable text equals the hash of the collapsed
text: what counts as a change does not move (tests/detect/test_lines.py checks it on the
test site's pages, against hashes recorded before the readable text existed).

Decision: the breaks are text nodes inserted into lexbor's tree (its CSS engine finds the
blocks, its own text serializer reads the result), not a walk over the nodes in Python, which
costs a Python call per node; and they are added only once the hash says the text is wanted
(a hit or a baseline), on the tree the hash was read from, so a miss pays nothing for them.
"""

from __future__ import annotations

from typing import Final

from selectolax.lexbor import LexborHTMLParser, LexborNode

#: Elements that start and end a line (HTML's block-level and table-row elements, and the
#: head's title, whose text the hash has always included).
BLOCK_TAGS: Final = (
    "address", "article", "aside", "blockquote", "caption", "dd", "details", "dialog", "div",
    "dl", "dt", "fieldset", "figcaption", "figure", "footer", "form", "h1", "h2", "h3", "h4",
    "h5", "h6", "header", "hgroup", "hr", "legend", "li", "main", "nav", "ol", "option", "p",
    "pre", "section", "summary", "table", "tbody", "tfoot", "thead", "title", "tr", "ul",
)  # fmt: skip
#: Elements after which a line ends.
BREAK_TAGS: Final = ("br",)
#: Elements that a space separates from what comes before them (the cells of a row).
CELL_TAGS: Final = ("td", "th")
#: Inline elements that a space separates from an element right before them (links and
#: buttons side by side in a menu: ``<a>Home</a><a>News</a>`` reads "Home News"; a link
#: that follows text, as in ``word<a>link</a>``, is left as the page joins it).
ADJACENT_TAGS: Final = ("a", "button")

_BLOCKS = ",".join(BLOCK_TAGS)
_BREAKS = ",".join(BREAK_TAGS)
_CELLS = ",".join(CELL_TAGS)
_ADJACENT = ",".join(ADJACENT_TAGS)
_NBSP = "\u00a0".encode()


def mark_blocks(root: LexborNode | LexborHTMLParser) -> None:
    """Insert the line breaks (and cell spaces) into the tree under ``root`` (see the notes)."""
    for node in root.css(_BLOCKS):
        node.insert_before("\n")
        node.insert_after("\n")
    for node in root.css(_BREAKS):
        node.insert_after("\n")
    for node in root.css(_CELLS):
        node.insert_before(" ")
    for node in root.css(_ADJACENT):
        before = node.prev
        if before is not None and before.tag != "-text":
            node.insert_before(" ")


def tidy_lines(data: bytes) -> bytes:
    """Each line's runs of ASCII whitespace and NBSPs made one space, the line stripped, empty
    lines dropped, lines joined by ``\\n`` (no trailing newline)."""
    if b"\xa0" in data:
        data = data.replace(_NBSP, b" ")
    if b"\r" in data:
        data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    out = []
    for line in data.split(b"\n"):
        words = line.split()
        if words:
            out.append(b" ".join(words))
    return b"\n".join(out)
