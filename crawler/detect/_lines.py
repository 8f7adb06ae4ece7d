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

The page's own newlines are spaces in HTML (outside ``pre``), as a browser shows them; those
of plain text and XML end lines.

Decision: the breaks are text nodes inserted into lexbor's tree (its walk by tag name finds
the blocks, its own text serializer reads the result), not a walk over the nodes in Python, which
costs a Python call per node; and they are added only once the hash says the text is wanted
(a hit or a baseline), on the tree the hash was read from, so a miss pays nothing for them.
"""

from __future__ import annotations

from collections.abc import Collection
from math import inf
from typing import Final

from selectolax.lexbor import LexborHTMLParser, LexborNode

from crawler.detect._rules import BudgetExceededError, clock
from crawler.snapshots import NBSP

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


#: Elements the HTML parser creates from another tag than their own (a cell outside a row
#: gets a row and a table body, ``</p>`` an empty paragraph, ``</br>`` a break): a source
#: without ``<name`` may still hold these names when it holds one of these tags.
_IMPLIED_BY: Final = {
    "tbody": ("tr", "td", "th"),
    "tr": ("td", "th"),
    "p": ("/p",),
    "br": ("/br",),
}
#: From this many characters of source on, ``tag_names_in`` skips the walks of the names the
#: source cannot hold; on smaller pages the walks cost less than the search for the names.
LARGE_SOURCE: Final = 100_000
_WALKED: Final = (*BLOCK_TAGS, *BREAK_TAGS, *CELL_TAGS, *ADJACENT_TAGS)

_CHECK_EVERY = 4096
#: The line break inserted into the tree: a Unicode noncharacter, which pages do not carry,
#: so that the page's own newlines (source formatting, outside ``pre``) read as spaces. A page
#: that does carry it gets ``\n`` as its break instead (its own newlines then break lines).
BREAK: Final = "\ufdd0"
_BREAK_BYTES = BREAK.encode()


def tag_names_in(source: str) -> frozenset[str] | None:
    """The names of the elements ``mark_blocks`` walks that a tree parsed from ``source``
    may hold (a superset: a name is left out only when neither ``<name`` nor a tag that
    implies it occurs in the source, in any case); None (walk them all) for a source
    shorter than ``LARGE_SOURCE``.

    Why: each name is one walk of the whole tree in lexbor. On a 30 KB page the 47 walks
    take about 140 us, but on a hostile page of 200,000 elements they took 0.6-0.7 s of CPU,
    for names it never held; a substring search per name costs a pass over the source's
    characters instead (about 90 ms for all of them on 2 MB; a regex collecting the tag
    names in one pass took 240-380 ms, measured 2026-11-27)."""
    if len(source) < LARGE_SOURCE:
        return None
    lower = source.lower()
    return frozenset(
        name
        for name in _WALKED
        if f"<{name}" in lower or any(f"<{t}" in lower for t in _IMPLIED_BY.get(name, ()))
    )


def block_text(
    tree: LexborHTMLParser,
    nodes: list[LexborNode],
    text: str,
    deadline: float = inf,
    names: Collection[str] | None = None,
) -> bytes:
    """The readable text of ``nodes`` of ``tree`` (adds text nodes to the tree): their text
    with a line per block element, each line's whitespace collapsed; ``text`` is their text
    as the hash read it (to see whether the page carries ``BREAK``); ``names``: the tag
    names the tree may hold (``tag_names_in``; None: any). Raises ``BudgetExceededError``
    once ``clock()`` passes ``deadline``."""
    own = BREAK in text
    mark = "\n" if own else BREAK
    mark_blocks(tree, mark, deadline, names)
    data = "\n".join(node.text_lexbor() for node in nodes).encode("utf-8", errors="replace")
    if not own:
        data = data.replace(b"\n", b" ").replace(_BREAK_BYTES, b"\n")
    return tidy_lines(data)


def mark_blocks(
    tree: LexborHTMLParser,
    mark: str,
    deadline: float = inf,
    names: Collection[str] | None = None,
) -> None:
    """Insert the line breaks ``mark`` (and the spaces between cells and between adjacent
    links) into ``tree``; the newlines of ``pre`` elements become ``mark``. Elements are found
    by lexbor's walk per tag name (``tags``): 140 µs for the 42 names on a 30 KB page, against
    480 µs for one CSS selector list of them. The clock is read between names and every
    ``_CHECK_EVERY`` elements (a 2 MB page of 250,000 paragraphs takes about a second).
    ``names``: the tag names the tree may hold (``tag_names_in``); the others are not walked.
    """
    walked = tree.tags

    def tags(name: str) -> list[LexborNode]:
        return walked(name) if names is None or name in names else []

    for name in BLOCK_TAGS:
        for n, node in enumerate(tags(name), 1):
            node.insert_before(mark)
            node.insert_after(mark)
            if not n % _CHECK_EVERY:
                _check(deadline)
        _check(deadline)
    for name in BREAK_TAGS:
        for node in tags(name):
            node.insert_after(mark)
    _check(deadline)
    for name in CELL_TAGS:
        for node in tags(name):
            node.insert_before(" ")
    _check(deadline)
    for name in ADJACENT_TAGS:
        for node in tags(name):
            before = node.prev
            if before is not None and before.tag != "-text":
                node.insert_before(" ")
    _check(deadline)
    if mark == "\n":
        return
    for pre in tags("pre"):
        for node in list(pre.traverse(include_text=True)):
            if node.tag == "-text":
                content = node.text_content
                if content is not None and "\n" in content:
                    node.replace_with(content.replace("\n", mark))
        _check(deadline)


def _check(deadline: float) -> None:
    if clock() > deadline:
        raise BudgetExceededError("readable text")


def tidy_lines(data: bytes) -> bytes:
    """Each line's runs of ASCII whitespace and NBSPs made one space, the line stripped, empty
    lines dropped, lines joined by ``\\n`` (no trailing newline)."""
    if b"\xa0" in data:
        data = data.replace(NBSP, b" ")
    out = []
    for line in data.split(b"\n"):
        words = line.split()
        if words:
            out.append(b" ".join(words))
    return b"\n".join(out)
