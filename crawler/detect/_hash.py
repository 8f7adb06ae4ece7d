"""Hashes: the content hash of normalized text, and the cheap two-part raw hash of a body."""

from __future__ import annotations

import re

import xxhash

from crawler.detect._normalize import NBSP, content_kind

# Parts of an HTML page that never reach the normalized text: removing them with a byte regex
# (~15x cheaper than parsing) lets a page whose only difference is a rotating nonce in a script,
# a comment, a <noscript>, a hidden input or a <meta> be judged unchanged without parsing it
# (script, style, noscript and template elements are dropped by the normalizer as well).
_SKELETON_JUNK = re.compile(
    rb"<(script|style|noscript|template)\b.*?</\1\s*>|<!--.*?-->|<(?:input|meta|link)\b[^>]*>",
    re.S | re.I,
)


_WHITESPACE = b" \t\n\r\x0b\x0c"


def content_hash(normalized: bytes) -> str:
    """xxh3-128 of the normalized content without its ASCII whitespace and NBSPs, 32 hex digits.

    Whitespace-blind, so the text need not be collapsed first (that is what makes hashing cheap):
    ``content_hash(normalize(b, t)) == content_hash(extract(b, t)[0])``."""
    if NBSP in normalized:
        normalized = normalized.replace(NBSP, b"")
    return xxhash.xxh3_128_hexdigest(normalized.translate(None, _WHITESPACE))


def exact_hash(body: bytes, rules_key: bytes = b"") -> str:
    """xxh3-128 of the raw body (and the watch rules), 32 hex digits."""
    if rules_key:
        return xxhash.xxh3_128_hexdigest(rules_key + b"\0" + body)
    return xxhash.xxh3_128_hexdigest(body)


def skeleton_hash(body: bytes, content_type: str | None, rules_key: bytes = b"") -> str:
    """xxh3-128 of an HTML body without its scripts, styles, comments, inputs, metas and links."""
    if content_kind(content_type, body) == "html":
        body = _SKELETON_JUNK.sub(b"", body)
    return exact_hash(body, rules_key)


def raw_hash(body: bytes, content_type: str | None, rules_key: bytes = b"") -> str:
    """``"<exact>.<skeleton>"``: opaque; store it and hand it back as ``previous_raw_hash``."""
    return exact_hash(body, rules_key) + "." + skeleton_hash(body, content_type, rules_key)


def split_raw_hash(value: str | None) -> tuple[str | None, str | None]:
    """(exact, skeleton) parts of a stored raw hash; a bare hash counts as the exact part."""
    if not value:
        return None, None
    exact, _, skeleton = value.partition(".")
    return exact, skeleton or None
