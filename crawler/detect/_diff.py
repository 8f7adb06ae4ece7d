"""Diffs of a change's before and after (readable texts: a line per block element).

Pure functions on strings, for the CLI, the delivery of events and the feed alike. The
unified diff is the standard library's ``difflib.unified_diff`` (what ``diff -u`` and
``patch`` read: tests/detect/test_diff.py applies it with a small reader of its own and with
GNU patch, for random texts); the HTML diff is ``difflib.HtmlDiff``'s side-by-side table.

A text is its lines split at ``\\n`` (the empty text has none), so a text that ends with a
newline has an empty last line, and joining the lines with ``\\n`` gives the text back
exactly: applying the diff to the before gives the after byte for byte.
"""

from __future__ import annotations

import difflib
from typing import Final

#: lines of context around each change in a unified diff (``diff -u``'s default)
CONTEXT_LINES: Final = 3


def text_lines(text: str) -> list[str]:
    """The lines of ``text`` split at ``\\n``: ``"\\n".join(text_lines(t)) == t``."""
    return text.split("\n") if text else []


def unified_diff(
    before: str,
    after: str,
    *,
    before_label: str = "before",
    after_label: str = "after",
    context: int = CONTEXT_LINES,
) -> str:
    """The unified diff that turns ``before`` into ``after`` (every line ends with ``\\n``);
    the empty string when they are equal."""
    lines = difflib.unified_diff(
        text_lines(before),
        text_lines(after),
        before_label,
        after_label,
        n=context,
        lineterm="",
    )
    return "".join(line + "\n" for line in lines)


def cap_diff(diff: str, max_bytes: int) -> tuple[str, bool]:
    """(``diff`` cut to at most ``max_bytes`` UTF-8 bytes at a line's end, whether it was
    cut). A cut diff no longer applies: say so to whoever receives it."""
    if max_bytes < 0:
        raise ValueError("max_bytes must be at least 0")
    data = diff.encode("utf-8")
    if len(data) <= max_bytes:
        return diff, False
    end = data.rfind(b"\n", 0, max_bytes + 1)
    return (data[: end + 1].decode("utf-8") if end >= 0 else ""), True


def html_diff(
    before: str,
    after: str,
    *,
    before_label: str = "before",
    after_label: str = "after",
    context: int = CONTEXT_LINES,
) -> str:
    """A whole HTML page: ``difflib.HtmlDiff``'s side-by-side table of the changed lines with
    ``context`` lines around them (texts escaped, long lines wrapped at 100 columns)."""
    return difflib.HtmlDiff(wrapcolumn=100).make_file(
        text_lines(before),
        text_lines(after),
        before_label,
        after_label,
        context=True,
        numlines=context,
    )
