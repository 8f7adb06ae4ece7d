"""Hashes: the content hash of normalized text, and the cheap two-part raw hash of a body.

The raw hash is ``"<exact>.<skeleton>"``: xxh3-128 of the body's bytes (and the watch rules),
then of its skeleton, the page with its comments, scripts, styles, templates, noscripts and
input/meta/link tags cut out (``crawler.detect._skeleton``, reading the syntax of
``crawler.detect._skeleton_syntax``). Equal skeleton hashes imply equal ``normalize`` output
for the same content type and rules; where that cannot be established cheaply the skeleton is
the exact hash, which is always sound (it only costs a parse).
"""

from __future__ import annotations

from math import inf

import xxhash

from crawler.detect._charset import ASCII_TRANSPARENT, sniff, undeclared_encoding
from crawler.detect._normalize import MAX_NORMALIZE_BYTES, content_kind
from crawler.detect._rules import NO_RULES, WatchRules
from crawler.detect._skeleton import skeleton
from crawler.detect._skeleton_read import GiveUpError
from crawler.snapshots import NBSP

_WHITESPACE = b" \t\n\r\x0b\x0c"


def content_hash(normalized: bytes) -> str:
    """xxh3-128 of the normalized content without its ASCII whitespace and NBSPs, 32 hex digits.

    Whitespace-blind, so the text need not be collapsed first (that is what makes hashing cheap):
    ``content_hash(normalize(b, t)) == content_hash(extract(b, t)[0])``."""
    # NBSP is C2 A0 in UTF-8. Looking for the A0 byte is a memchr; looking for the pair walks
    # the text byte by byte (27 against 1 us for a 25 KB text). A0 also ends other characters
    # (U+00E0, U+0420, ...): then replace() looks for the pair.
    if b"\xa0" in normalized:
        normalized = normalized.replace(NBSP, b"")
    return xxhash.xxh3_128_hexdigest(normalized.translate(None, _WHITESPACE))


def exact_hash(body: bytes, rules_key: bytes = b"") -> str:
    """xxh3-128 of the raw body (and the watch rules), 32 hex digits."""
    if rules_key:
        return xxhash.xxh3_128_hexdigest(rules_key + b"\0" + body)
    return xxhash.xxh3_128_hexdigest(body)


def _decoding(body: bytes, content_type: str | None) -> str | None:
    """The encoding ``decode`` uses for ``body``, if ASCII bytes always decode to themselves in
    it (with a BOM: only UTF-8's, marked apart as it is cut before decoding)."""
    name, bom = sniff(body, content_type)
    if bom:
        return "BOM-UTF-8" if name == "UTF-8" else None
    if name is None:
        return undeclared_encoding(body)
    return name if name in ASCII_TRANSPARENT else None


def skeleton_hash(
    body: bytes, content_type: str | None, rules: WatchRules = NO_RULES, *, deadline: float = inf
) -> str:
    """xxh3-128 of an HTML body without its scripts, styles, comments, inputs, metas and links.

    Equal skeleton hashes imply equal ``normalize`` output (for the same content type and rules);
    when that cannot be established cheaply, this is the exact hash (see the module notes).
    Raises ``BudgetExceededError`` once ``clock()`` passes ``deadline``."""
    key = rules.key
    if content_kind(content_type, body) != "html" or len(body) > MAX_NORMALIZE_BYTES:
        return exact_hash(body, key)
    encoding = _decoding(body, content_type)
    if encoding is None:
        return exact_hash(body, key)
    # With a CSS selector, attribute selectors could see input/meta/link attributes: kept.
    try:
        return skeleton(body, not rules.has_selector, encoding.encode() + b"\0" + key, deadline)
    except GiveUpError:
        return exact_hash(body, key)


def raw_hash(body: bytes, content_type: str | None, rules: WatchRules = NO_RULES) -> str:
    """``"<exact>.<skeleton>"``: opaque; store it and hand it back as ``previous_raw_hash``."""
    return exact_hash(body, rules.key) + "." + skeleton_hash(body, content_type, rules)


def split_raw_hash(value: str | None) -> tuple[str | None, str | None]:
    """(exact, skeleton) parts of a stored raw hash; a bare hash counts as the exact part."""
    if not value:
        return None, None
    exact, _, skeleton_part = value.partition(".")
    return exact, skeleton_part or None
