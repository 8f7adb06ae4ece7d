"""Turn a response body into text: BOM, then the declared charset, then <meta>, then UTF-8.

Never raises: unknown or wrong charsets fall back to UTF-8 / windows-1252 with replacement
characters, so the same bytes always give the same text.
"""

from __future__ import annotations

import codecs
import re
from functools import lru_cache

_BOMS: tuple[tuple[bytes, str], ...] = (
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)
_HEADER_CHARSET = re.compile(r"""charset\s*=\s*["']?([\w.:-]+)""", re.I)
_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([\w.:-]+)""", re.I)
_META_PRESCAN_BYTES = 1024


@lru_cache(maxsize=256)
def codec_name(label: str | None) -> str | None:
    """The Python codec for a charset label, or None when it is unknown."""
    if not label:
        return None
    label = label.strip().lower()
    # WHATWG: these labels all mean windows-1252.
    if label in ("iso-8859-1", "latin1", "latin-1", "us-ascii", "ascii", "iso8859-1"):
        return "cp1252"
    try:
        info = codecs.lookup(label)
    except LookupError:
        return None
    # Refuse bytes-to-bytes codecs (base64, zlib, ...) that a hostile page could name.
    return info.name if getattr(info, "_is_text_encoding", True) else None


@lru_cache(maxsize=256)  # a crawl sees few distinct Content-Type values: a regex search saved
def header_charset(content_type: str | None) -> str | None:
    """The charset parameter of a Content-Type header, if any."""
    if not content_type:
        return None
    match = _HEADER_CHARSET.search(content_type)
    return match.group(1) if match else None


def decode(body: bytes, content_type: str | None, *, sniff_meta: bool = True) -> str:
    """Decode a body to text following (roughly) the HTML encoding-sniffing order."""
    for bom, bom_codec in _BOMS:
        if body.startswith(bom):
            return body[len(bom) :].decode(bom_codec, errors="replace")
    name = codec_name(header_charset(content_type))
    if name is None and sniff_meta:
        match = _META_CHARSET.search(body, 0, _META_PRESCAN_BYTES)
        if match:
            name = codec_name(match.group(1).decode("ascii", errors="replace"))
            if name is not None and name.startswith("utf-16"):
                name = "utf-8"
    if name:
        return body.decode(name, errors="replace")
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        return body.decode("cp1252", errors="replace")
