"""Turn a response body into text: the one charset sniffer of the detector.

The order is the HTML standard's encoding sniffing, simplified: a BOM, then the Content-Type
charset, then a ``<meta>`` charset in the first KiB (HTML only), then UTF-8 if the whole body
is valid UTF-8, else windows-1252. Never raises: the same bytes always give the same text.

Decisions:

* **Only the WHATWG Encoding Standard's labels are ever used to decode.** A label is looked up
  in ``LABELS`` (the standard's table, ASCII-lowercased and stripped as it says), never handed
  to ``codecs.lookup``: Python knows codecs that are not text encodings at all (``rot13``,
  ``hex``, ``base64``, ``zlib_codec``, ``uu``), that raise on any input (``undefined``, ``idna``
  with errors="replace"), or whose decoder is quadratic (``punycode``: 25 KB take 0.25 s, a
  250 KB page minutes). An unknown label is ignored (the next step of the order decides), as
  the standard says. ``latin1``, ``iso-8859-1``, ``ascii`` ... mean windows-1252; the
  ``replacement`` encoding (ISO-2022-KR, HZ, ISO-2022-CN labels) decodes any body to one
  U+FFFD; a ``<meta>`` that says UTF-16 means UTF-8, and x-user-defined from a ``<meta>``
  means windows-1252 (the standard's prescan rules).
* **Bounded cost.** Every decoder used is linear (measured on hostile 250 KB bodies: random
  bytes, runs of lead bytes, escape sequences; worst UTF-8 13 ms, the CJK decoders 5-20 ms,
  ISO-2022-JP 8 ms). Python's own single-byte codecs take a slow error path on each byte they
  do not define (cp1252 on 2 MB of 0x81: 660 ms); the single-byte encodings here decode
  through a complete 256-entry table instead (2 MB: 4 ms), the standard's windows-1252 mapping
  the five undefined bytes to the C1 controls of the same value, the others to U+FFFD.
* **w3lib.encoding** was measured against this as the replacement (``html_to_unicode``): it
  resolves labels through ``codecs.lookup`` after its own alias table, so ``charset=rot13``
  reaches a bytes-to-bytes codec and ``punycode`` its quadratic decoder (see
  tests/detect/test_charset.py); it also decodes twice to auto-detect. It does not replace
  this module; the dependency is dropped (nothing else used it).
"""

from __future__ import annotations

import codecs
import re
from functools import lru_cache
from typing import Final

#: The WHATWG Encoding Standard's encodings by name, with their labels.
_ENCODING_LABELS: Final[dict[str, tuple[str, ...]]] = {
    "UTF-8": (
        "unicode-1-1-utf-8", "unicode11utf8", "unicode20utf8", "utf-8", "utf8", "x-unicode20utf8",
    ),
    "IBM866": ("866", "cp866", "csibm866", "ibm866"),
    "ISO-8859-2": (
        "csisolatin2", "iso-8859-2", "iso-ir-101", "iso8859-2", "iso88592", "iso_8859-2",
        "iso_8859-2:1987", "l2", "latin2",
    ),
    "ISO-8859-3": (
        "csisolatin3", "iso-8859-3", "iso-ir-109", "iso8859-3", "iso88593", "iso_8859-3",
        "iso_8859-3:1988", "l3", "latin3",
    ),
    "ISO-8859-4": (
        "csisolatin4", "iso-8859-4", "iso-ir-110", "iso8859-4", "iso88594", "iso_8859-4",
        "iso_8859-4:1988", "l4", "latin4",
    ),
    "ISO-8859-5": (
        "csisolatincyrillic", "cyrillic", "iso-8859-5", "iso-ir-144", "iso8859-5", "iso88595",
        "iso_8859-5", "iso_8859-5:1988",
    ),
    "ISO-8859-6": (
        "arabic", "asmo-708", "csiso88596e", "csiso88596i", "csisolatinarabic", "ecma-114",
        "iso-8859-6", "iso-8859-6-e", "iso-8859-6-i", "iso-ir-127", "iso8859-6", "iso88596",
        "iso_8859-6", "iso_8859-6:1987",
    ),
    "ISO-8859-7": (
        "csisolatingreek", "ecma-118", "elot_928", "greek", "greek8", "iso-8859-7",
        "iso-ir-126", "iso8859-7", "iso88597", "iso_8859-7", "iso_8859-7:1987", "sun_eu_greek",
    ),
    "ISO-8859-8": (
        "csiso88598e", "csisolatinhebrew", "hebrew", "iso-8859-8", "iso-8859-8-e", "iso-ir-138",
        "iso8859-8", "iso88598", "iso_8859-8", "iso_8859-8:1988", "visual",
    ),
    "ISO-8859-8-I": ("csiso88598i", "iso-8859-8-i", "logical"),
    "ISO-8859-10": (
        "csisolatin6", "iso-8859-10", "iso-ir-157", "iso8859-10", "iso885910", "l6", "latin6",
    ),
    "ISO-8859-13": ("iso-8859-13", "iso8859-13", "iso885913"),
    "ISO-8859-14": ("iso-8859-14", "iso8859-14", "iso885914"),
    "ISO-8859-15": (
        "csisolatin9", "iso-8859-15", "iso8859-15", "iso885915", "iso_8859-15", "l9",
    ),
    "ISO-8859-16": ("iso-8859-16",),
    "KOI8-R": ("cskoi8r", "koi", "koi8", "koi8-r", "koi8_r"),
    "KOI8-U": ("koi8-ru", "koi8-u"),
    "macintosh": ("csmacintosh", "mac", "macintosh", "x-mac-roman"),
    "windows-874": (
        "dos-874", "iso-8859-11", "iso8859-11", "iso885911", "tis-620", "windows-874",
    ),
    "windows-1250": ("cp1250", "windows-1250", "x-cp1250"),
    "windows-1251": ("cp1251", "windows-1251", "x-cp1251"),
    "windows-1252": (
        "ansi_x3.4-1968", "ascii", "cp1252", "cp819", "csisolatin1", "ibm819", "iso-8859-1",
        "iso-ir-100", "iso8859-1", "iso88591", "iso_8859-1", "iso_8859-1:1987", "l1", "latin1",
        "us-ascii", "windows-1252", "x-cp1252",
    ),
    "windows-1253": ("cp1253", "windows-1253", "x-cp1253"),
    "windows-1254": (
        "cp1254", "csisolatin5", "iso-8859-9", "iso-ir-148", "iso8859-9", "iso88599",
        "iso_8859-9", "iso_8859-9:1989", "l5", "latin5", "windows-1254", "x-cp1254",
    ),
    "windows-1255": ("cp1255", "windows-1255", "x-cp1255"),
    "windows-1256": ("cp1256", "windows-1256", "x-cp1256"),
    "windows-1257": ("cp1257", "windows-1257", "x-cp1257"),
    "windows-1258": ("cp1258", "windows-1258", "x-cp1258"),
    "x-mac-cyrillic": ("x-mac-cyrillic", "x-mac-ukrainian"),
    "GBK": (
        "chinese", "csgb2312", "csiso58gb231280", "gb2312", "gb_2312", "gb_2312-80", "gbk",
        "iso-ir-58", "x-gbk",
    ),
    "gb18030": ("gb18030",),
    "Big5": ("big5", "big5-hkscs", "cn-big5", "csbig5", "x-x-big5"),
    "EUC-JP": ("cseucpkdfmtjapanese", "euc-jp", "x-euc-jp"),
    "ISO-2022-JP": ("csiso2022jp", "iso-2022-jp"),
    "Shift_JIS": (
        "csshiftjis", "ms932", "ms_kanji", "shift-jis", "shift_jis", "sjis", "windows-31j",
        "x-sjis",
    ),
    "EUC-KR": (
        "cseuckr", "csksc56011987", "euc-kr", "iso-ir-149", "korean", "ks_c_5601-1987",
        "ks_c_5601-1989", "ksc5601", "ksc_5601", "windows-949",
    ),
    "replacement": (
        "csiso2022kr", "hz-gb-2312", "iso-2022-cn", "iso-2022-cn-ext", "iso-2022-kr",
        "replacement",
    ),
    "UTF-16BE": ("unicodefffe", "utf-16be"),
    "UTF-16LE": (
        "csunicode", "iso-10646-ucs-2", "ucs-2", "unicode", "unicodefeff", "utf-16", "utf-16le",
    ),
    "x-user-defined": ("x-user-defined",),
}  # fmt: skip

#: label -> encoding name (the standard's "get an encoding")
LABELS: Final[dict[str, str]] = {
    label: name for name, labels in _ENCODING_LABELS.items() for label in labels
}

#: The single-byte encodings, by the Python codec their table is taken from.
_SINGLE_BYTE: Final[dict[str, str]] = {
    "IBM866": "cp866",
    **{f"ISO-8859-{i}": f"iso8859-{i}" for i in (2, 3, 4, 5, 6, 7, 8, 10, 13, 14, 15, 16)},
    "ISO-8859-8-I": "iso8859-8",
    "KOI8-R": "koi8-r",
    "KOI8-U": "koi8-u",
    "macintosh": "mac-roman",
    "windows-874": "cp874",
    **{f"windows-{i}": f"cp{i}" for i in range(1250, 1259)},
    "x-mac-cyrillic": "mac-cyrillic",
}
#: The multi-byte encodings: the Python codec that decodes them (the standard's GBK decoder is
#: its gb18030 decoder; its Big5 includes HKSCS, its Shift_JIS is windows-31j, its EUC-KR is
#: windows-949).
_MULTI_BYTE: Final[dict[str, str]] = {
    "UTF-8": "utf-8",
    "GBK": "gb18030",
    "gb18030": "gb18030",
    "Big5": "big5hkscs",
    "EUC-JP": "euc_jp",
    "ISO-2022-JP": "iso2022_jp",
    "Shift_JIS": "cp932",
    "EUC-KR": "cp949",
    "UTF-16BE": "utf-16-be",
    "UTF-16LE": "utf-16-le",
}
#: Encodings in which every ASCII byte decodes to itself whatever surrounds it.
ASCII_TRANSPARENT: Final[frozenset[str]] = frozenset([*_SINGLE_BYTE, "UTF-8", "x-user-defined"])
assert set(_SINGLE_BYTE) | set(_MULTI_BYTE) | {"replacement", "x-user-defined"} == set(
    _ENCODING_LABELS
)

_BOMS: Final[tuple[tuple[bytes, str], ...]] = (
    (codecs.BOM_UTF8, "UTF-8"),
    (codecs.BOM_UTF16_LE, "UTF-16LE"),
    (codecs.BOM_UTF16_BE, "UTF-16BE"),
)
_HEADER_CHARSET = re.compile(r"""charset\s*=\s*["']?([\w.:-]+)""", re.I)
_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([\w.:-]+)""", re.I)
#: How far into the body a <meta> charset is looked for.
META_PRESCAN_BYTES: Final = 1024
_ASCII_WHITESPACE = "\t\n\f\r "


def _table(python_codec: str, name: str) -> str:
    """The 256 characters of a single-byte encoding (no byte is left undefined)."""
    chars = bytes(range(256)).decode(python_codec, errors="replace")
    if name == "windows-1252":  # the standard maps 81 8D 8F 90 9D to the C1 controls
        chars = "".join(chr(b) if c == "\ufffd" else c for b, c in enumerate(chars))
    assert len(chars) == 256
    return chars


_TABLES: Final[dict[str, str]] = {name: _table(codec, name) for name, codec in _SINGLE_BYTE.items()}
_TABLES["x-user-defined"] = "".join(chr(b if b < 0x80 else 0xF780 + b - 0x80) for b in range(256))


def encoding_for_label(label: str | None) -> str | None:
    """The Encoding Standard's name for a charset label, or None when it is not one."""
    if not label:
        return None
    return LABELS.get(label.strip(_ASCII_WHITESPACE).lower())


@lru_cache(maxsize=256)  # a crawl sees few distinct Content-Type values: a regex search saved
def header_charset(content_type: str | None) -> str | None:
    """The charset parameter of a Content-Type header, if any (the label as written)."""
    if not content_type:
        return None
    match = _HEADER_CHARSET.search(content_type)
    return match.group(1) if match else None


@lru_cache(maxsize=256)
def _header_encoding(content_type: str | None) -> str | None:
    return encoding_for_label(header_charset(content_type))


def sniff(body: bytes, content_type: str | None, *, html: bool = True) -> tuple[str | None, int]:
    """(encoding, BOM length): the encoding the body declares (BOM, header, then for HTML a
    <meta> in the first KiB), or None when it declares none (then: UTF-8 if valid, else
    windows-1252, see ``decode``)."""
    for bom, bom_encoding in _BOMS:
        if body.startswith(bom):
            return bom_encoding, len(bom)
    name = _header_encoding(content_type)
    if name is None and html:
        match = _META_CHARSET.search(body, 0, META_PRESCAN_BYTES)
        if match:
            name = encoding_for_label(match.group(1).decode("ascii", errors="replace"))
            if name in ("UTF-16LE", "UTF-16BE"):
                name = "UTF-8"
            elif name == "x-user-defined":
                name = "windows-1252"
    return name, 0


def decode_as(body: bytes, name: str) -> str:
    """``body`` decoded with the encoding ``name`` (a key of the standard's table), errors
    replaced by U+FFFD."""
    table = _TABLES.get(name)
    if table is not None:
        # a str table is what the standard library's own single-byte codecs pass
        return codecs.charmap_decode(body, "strict", table)[0]  # type: ignore[arg-type]
    if name == "replacement":
        return "\ufffd" if body else ""
    return body.decode(_MULTI_BYTE[name], errors="replace")


def undeclared_encoding(body: bytes) -> str:
    """What a body without a declared encoding is read as: UTF-8 if valid, else windows-1252."""
    if body.isascii():
        return "UTF-8"
    try:
        body.decode("utf-8")
    except UnicodeDecodeError:
        return "windows-1252"
    return "UTF-8"


def decode(body: bytes, content_type: str | None, *, sniff_meta: bool = True) -> str:
    """Decode a body to text following (roughly) the HTML encoding-sniffing order."""
    name, bom = sniff(body, content_type, html=sniff_meta)
    if bom:
        body = body[bom:]
    if name is not None:
        return decode_as(body, name)
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        return decode_as(body, "windows-1252")
