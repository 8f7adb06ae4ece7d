"""Per-URL watch rules: an optional CSS selector and regexes removed from the normalized text."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from selectolax.lexbor import LexborHTMLParser


@dataclass(frozen=True)
class WatchRules:
    """What part of a page to watch.

    ``selector``: a CSS selector; only the text of the matching elements counts (no match = empty
    text). ``ignore_patterns``: Python regexes removed from the whitespace-collapsed text (one
    line, words separated by single spaces) before hashing, e.g. ``r"\\d+ views"``.
    Invalid selectors or regexes raise ``ValueError`` here, not during polling.
    """

    selector: str | None = None
    ignore_patterns: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.selector is not None:
            if not self.selector.strip():
                raise ValueError("empty CSS selector")
            check_selector(self.selector)
        compiled_patterns(self.ignore_patterns)

    @property
    def key(self) -> bytes:
        """A stable fingerprint, mixed into the raw hash so changed rules force a re-parse."""
        if self.selector is None and not self.ignore_patterns:
            return b""
        return repr((self.selector, self.ignore_patterns)).encode()


@lru_cache(maxsize=1024)
def check_selector(selector: str) -> None:
    try:
        LexborHTMLParser("<p></p>").css(selector)
    except Exception as exc:  # selectolax raises its own error type
        raise ValueError(f"invalid CSS selector {selector!r}: {exc}") from None


@lru_cache(maxsize=1024)
def compiled_patterns(patterns: tuple[str, ...]) -> tuple[re.Pattern[str], ...]:
    out = []
    for pattern in patterns:
        try:
            out.append(re.compile(pattern))
        except re.error as exc:
            raise ValueError(f"invalid ignore pattern {pattern!r}: {exc}") from None
    return tuple(out)
