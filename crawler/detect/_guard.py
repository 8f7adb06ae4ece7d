"""Cut HTML that would make the parser quadratic (very deep nesting, piles of open formatting
elements) before parsing it: lexbor takes seconds on ~10,000 nested elements."""

from __future__ import annotations

import re
from collections import Counter

#: Estimated simultaneously-open elements allowed before the rest of the page is dropped.
MAX_OPEN_ELEMENTS = 2000
_TAG = re.compile(r"<(/?)([a-zA-Z][a-zA-Z0-9-]*)")
# Void elements and elements that close themselves when repeated never pile up.
_NEUTRAL = frozenset(
    [
        "area",
        "base",
        "br",
        "col",
        "embed",
        "hr",
        "img",
        "input",
        "link",
        "meta",
        "source",
        "track",
        "wbr",
        "param",
        "keygen",
        "p",
        "li",
        "dt",
        "dd",
        "option",
        "optgroup",
        "tr",
        "td",
        "th",
        "tbody",
        "thead",
        "tfoot",
        "rp",
        "rt",
        "colgroup",
        "caption",
    ]
)


def safe_length(html: str, limit: int = MAX_OPEN_ELEMENTS) -> int:
    """The length of the prefix of ``html`` that is safe to parse (all of it, normally).

    Pages with fewer than ``limit`` '<' cannot nest deeper, so they cost one str.count."""
    if html.count("<") <= limit:
        return len(html)
    open_by_name: Counter[str] = Counter()
    total = 0
    for match in _TAG.finditer(html):
        name = match.group(2).lower()
        if name in _NEUTRAL:
            continue
        if match.group(1):
            if open_by_name[name] > 0:
                open_by_name[name] -= 1
                total -= 1
        else:
            open_by_name[name] += 1
            total += 1
            if total > limit:
                return match.start()
    return len(html)
