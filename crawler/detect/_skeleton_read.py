"""Reading the page as the HTML tokenizer would, from a point the skeleton walk is sure of.

The walk (``crawler.detect._skeleton``) only ever stands in the tokenizer's data state; these
are the questions it asks from there: is a later '<' in the data state too, where does the tag
at a '<' end, where does a script element end (script data has its own escapes), and what kind
of candidate sits at a '<'. Kept apart from the walk so that the walk's module reads as the
walk, and so that each of these can be tested and read against the tokenizer on its own.
Whatever they cannot answer exactly raises ``GiveUpError``: the page then gets the exact hash.
"""

from __future__ import annotations

from crawler.detect._skeleton_syntax import (
    KINDS,
    NAME,
    SCRIPT_DATA,
    SCRIPT_DOUBLE,
    SCRIPT_ESCAPED,
    TAG,
    TEXT_AND_TAGS,
    Kind,
)

# Enum attribute lookups cost ~0.2 us each (Python 3.11): compare with these.
_COMMENT, _BANG = Kind.COMMENT, Kind.BANG


class GiveUpError(Exception):
    """The walk met something it does not model exactly: use the exact hash."""


def data_state(body: bytes, pos: int, p: int) -> bool:
    """Whether the '<' at ``p`` is in the data state, given that ``pos`` is (see the notes of
    ``crawler.detect._skeleton``)."""
    lt = body.rfind(b"<", pos, p)
    if lt < 0:
        return True
    if p - pos <= 512 and TEXT_AND_TAGS.fullmatch(body, pos, p) is not None:
        return True
    gt = body.rfind(b">", lt, p)
    if gt < 0:
        return False
    for quote in b'"', b"'":
        q = body.rfind(quote, pos, p)
        if q > gt:
            return False
        if q >= 0:  # does it open an attribute value (after "=" and whitespace)?
            j = q - 1
            while j >= pos and body[j] in b"\t\n\f\r ":
                j -= 1
            if j >= pos and body[j] == 0x3D:
                return False
    return True


def tag_end(body: bytes, p: int) -> int:
    """Where the tag at ``p`` ends (after its '>'); gives up on an unparseable tag."""
    match = TAG.match(body, p)
    if match is None:
        raise GiveUpError
    return match.end()


def script_end(body: bytes, i: int) -> int:
    """Where the script element whose content starts at ``i`` ends ('</script'), or -1."""
    escaped = double = False  # script data; escaped ("<!--"); double escaped ("<script" in one)
    while True:
        if not escaped:
            match = SCRIPT_DATA.search(body, i)
            if match is None:
                return -1
            if body[match.start() + 1] != 0x21:  # not "<!--"
                return match.start()
            escaped, i = True, match.start() + 2  # its dashes count: "<!-->" escapes, unescapes
        else:
            match = (SCRIPT_DOUBLE if double else SCRIPT_ESCAPED).search(body, i)
            if match is None:
                return -1
            start = match.start()
            if body[start] == 0x2D:  # "-->"
                escaped = double = False
            elif double:  # "</script" ends the double escape
                double = False
            elif body[start + 1] == 0x2F:  # "</script" ends the element
                return start
            else:  # "<script" double-escapes
                double = True
            i = match.end()


def kind_at(body: bytes, p: int) -> Kind:
    """The kind of the candidate at ``p`` (for those the scan did not match beyond the name)."""
    if body[p + 1] == 0x21:  # "<!"
        return _COMMENT if body[p + 2 : p + 4] == b"--" else _BANG
    return KINDS[NAME.match(body, p + 1).group().lower()]  # type: ignore[union-attr]
