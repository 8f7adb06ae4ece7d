"""The syntax the skeleton walk reads: regexes built by pure functions, the kinds of candidates.

The model is of the HTML tokenizer as lexbor implements it (scripting off); see
``crawler.detect._skeleton`` for how the walk uses these, and tests/detect/test_hash_skeleton.py
for the invariant they serve.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections.abc import Iterator
from dataclasses import dataclass
from enum import Enum, IntEnum
from itertools import product
from typing import Final

from ahocorasick_rs import BytesAhoCorasick, Implementation


class Kind(IntEnum):
    """What a candidate (a '<' the walk must look at) is."""

    NONE = 0  # group 0 of a scan: the whole match
    COMMENT = 1
    BANG = 2  # "<![": a bogus comment, or CDATA in foreign content
    SCRIPT = 3
    STYLE = 4
    RAWTEXT = 5  # raw text and RCDATA elements whose text counts: kept, their content skipped
    TEMPLATE = 6  # cut with text only inside
    NOSCRIPT = 7  # not raw text (lexbor parses with scripting off): cut if simple
    VOID = 8  # input, meta, link
    BODY = 9
    SVG = 10
    MATH = 11
    SELECT = 12
    PLAINTEXT = 13
    FRAMESET = 14
    RUN = 15  # a run of junk elements


_W = rb"[\t\n\f\r ]"  # the tokenizer's whitespace (CR is normalized to LF before tokenizing)
_DELIM = rb"(?=[\t\n\f\r />])"  # what ends a tag name


def _ci(word: bytes) -> bytes:
    """A case-insensitive regex for an ASCII word, with character classes (faster than re.I)."""
    return b"".join(
        b"[%c%c]" % (c, c - 32) if 0x61 <= c <= 0x7A else re.escape(bytes([c])) for c in word
    )


def _attr(excluded: bytes) -> bytes:
    """An attribute, exactly as the tokenizer reads it (without ``excluded`` in its value)."""
    return (
        rb"[^\t\n\f\r />=\"'<][^\t\n\f\r />=\"'<]*+(?:" + _W + rb"*+=" + _W + rb"*+(?:\"[^\""
        + excluded + rb"]*+\"|'[^'" + excluded + rb"]*+'|[^\t\n\f\r >\"'<=`]++|(?=>)))?+"
    )  # fmt: skip


def _rest(excluded: bytes = b"") -> bytes:
    """The rest of a start or end tag after its name, for the usual syntax (attributes separated
    by whitespace, values quoted or plain); anything else does not match (then: give up). The
    commonest syntax (a space, a name, '=', a value in double quotes) is tried first: faster."""
    common = rb"(?: [a-zA-Z][a-zA-Z0-9_:.-]*+=\"[^\"" + excluded + rb"]*+\")*+"
    return common + rb"(?:" + _W + rb"++" + _attr(excluded) + rb")*+" + _W + rb"*+/?>"


_ATTR = _attr(b"")
_REST = _rest()
_CLEAN_REST = _rest(b"<")  # no '<' inside
_PLAIN_REST = _rest(b"<>")  # no '<' inside, and it ends at the first '>'
TAG = re.compile(rb"</?[a-zA-Z][^\t\n\f\r />]*+" + _REST)
# Text, tags, doctypes and bogus comments, read exactly.
TEXT_AND_TAGS = re.compile(
    rb"(?:[^<]++|</?[a-zA-Z][^\t\n\f\r />]*+" + _REST
    + rb"|<(?:!(?!--|\[)|\?|/[^a-zA-Z>])[^>]*+>)*+"
)  # fmt: skip

KINDS: dict[bytes, Kind] = {
    b"script": Kind.SCRIPT,
    b"style": Kind.STYLE,
    b"template": Kind.TEMPLATE,
    b"noscript": Kind.NOSCRIPT,
    b"title": Kind.RAWTEXT,
    b"textarea": Kind.RAWTEXT,
    b"xmp": Kind.RAWTEXT,
    b"iframe": Kind.RAWTEXT,
    b"noembed": Kind.RAWTEXT,
    b"noframes": Kind.RAWTEXT,
    b"plaintext": Kind.PLAINTEXT,
    b"input": Kind.VOID,
    b"meta": Kind.VOID,
    b"link": Kind.VOID,
    b"body": Kind.BODY,
    b"svg": Kind.SVG,
    b"math": Kind.MATH,
    b"select": Kind.SELECT,
    b"frameset": Kind.FRAMESET,
}
assert len({name[:3] for name in KINDS}) == len(KINDS) and min(map(len, KINDS)) >= 3
# <noscript> content that stays inside the element wherever it stands in <body>: text, void
# elements and iframes without markup inside (the tracking-pixel idioms).
_NOSCRIPT_CONTENT = (
    rb"(?:[^<]++|<(?:"
    + b"|".join(map(_ci, (b"img", b"br", b"hr", b"wbr", b"input", b"meta", b"link")))
    + rb")" + _DELIM + _REST
    + rb"|<" + _ci(b"iframe") + _DELIM + _REST + rb"[^<]*+</" + _ci(b"iframe") + _W + rb"*+>)*+"
    + rb"</" + _ci(b"noscript") + _W + rb"*+>"
)  # fmt: skip
# An input's first "type" attribute (the tree builder treats hidden inputs apart): hidden, or
# with a character reference (not modeled: such inputs are kept). Matched after "<input".
_FIRST_TYPE = (
    rb"(?:" + _W + rb"++(?!" + _ci(b"type") + rb"[\t\n\f\r />=])" + _ATTR + rb")*+"
    + _W + rb"++" + _ci(b"type") + _W + rb"*+=" + _W + rb"*+"
)  # fmt: skip
_HIDDEN = (
    _FIRST_TYPE + rb"(?:\"" + _ci(b"hidden") + rb"\"|'" + _ci(b"hidden") + rb"'|"
    + _ci(b"hidden") + rb"(?=[\t\n\f\r >]))"
)  # fmt: skip
_TYPE_WITH_REFERENCE = _FIRST_TYPE + rb"(?:\"[^\"&]*+&|'[^'&]*+&|[^\t\n\f\r >\"'<=`&]*+&)"

#: Collects the scan's groups while its pattern is built: group -> (kind, whole element
#: matched, name). The groups are empty, set after a candidate's start tag and after its end tag
#: (then the element was matched whole): ``lastindex`` says how far the match got.
_Groups = list[tuple[Kind, bool, bytes]]


def _group(groups: _Groups, kind: Kind, whole: bool, name: bytes = b"") -> bytes:
    groups.append((kind, whole, name))
    return b"()"


def _branch(groups: _Groups, name: bytes) -> bytes:
    """The scan's branch for ``name``, once its first three letters are consumed."""
    kind = KINDS[name]
    # The rest of the name first (the regex engine skips a branch on its first character).
    start = _ci(name[3:]) + rb"(?<=<" + _ci(name) + rb")" + _DELIM
    start += rb"(?:" + _REST + _group(groups, kind, False, name)
    end_tag = rb"</" + _ci(name) + _REST
    if kind == Kind.SCRIPT:  # stops at "<!--" (escapes: see _script_end)
        content = rb"(?:[^<]++|<(?!!--|/" + _ci(name) + rb"[\t\n\f\r />]))*+" + end_tag
    elif kind in (Kind.STYLE, Kind.RAWTEXT):
        content = rb"(?:[^<]++|<(?!/" + _ci(name) + rb"[\t\n\f\r />]))*+" + end_tag
    elif kind == Kind.TEMPLATE:
        content = rb"[^<]*+" + end_tag
    elif kind == Kind.NOSCRIPT:
        content = _NOSCRIPT_CONTENT
    else:
        return start + rb")?+"
    return start + rb"(?:" + content + _group(groups, kind, True, name) + rb")?+)?+"


# Runs: from a junk element to the last junk element followed by at most _RUN_GAP ordinary tags
# (no candidates, no '<' in attributes) and text. Their elements are those of _RUN_CUTS (cut),
# and the raw-text ones without '<' inside (kept). RUN_SPLIT cuts them, capturing the start of
# each cut element's name (its marker); the pieces are joined with NULs (so pages with NULs
# have no runs).
_RUN_GAP = 8
_COMMENT_REST = rb"(?:>|->|(?:[^-]++|-(?!-!?>))*+--!?>)"  # after "<!--"
_FIRST_GT = rb"[^>]*+>"


def _content(name: bytes, rest: bytes) -> bytes:
    """The content and end tag of ``name``'s element in a run; ``rest`` ends tags."""
    if name == b"script":  # stops at "<!--" (escapes)
        return rb"(?:[^<]++|<(?!!--|/" + _ci(name) + rb"[\t\n\f\r />]))*+</" + _ci(name) + rest
    if name == b"style":
        return rb"(?:[^<]++|<(?!/" + _ci(name) + rb"[\t\n\f\r />]))*+</" + _ci(name) + rest
    return rb"[^<]*+</" + _ci(name) + rest


def _cut(rest: bytes, name: bytes | None = None) -> tuple[bytes, bytes]:
    """The rest of a cut element: read exactly, and once its run is read (its tags, without
    '<' and '>' inside, end at their first '>')."""
    exact = _DELIM + _PLAIN_REST
    split = _DELIM + _FIRST_GT
    if name is not None:
        exact += _content(name, _PLAIN_REST)
        split += _content(name, _FIRST_GT)
    return rest + exact, rest + split


_NO_REFERENCE = rb"(?=[\t\n\f\r />])(?!" + _TYPE_WITH_REFERENCE + rb")"
# Marker (after '<') -> (the rest of the name, of the element read exactly, of the element once
# its run is read).
_RUN_CUTS: dict[bytes, tuple[bytes, bytes, bytes]] = {
    b"!": (b"--", _COMMENT_REST, _COMMENT_REST),
    b"sc": (b"ript", *_cut(b"", b"script")),
    b"st": (b"yle", *_cut(b"", b"style")),
    b"te": (b"mplate", *_cut(b"", b"template")),
    b"me": (b"ta", *_cut(b"")),
    b"li": (b"nk", *_cut(b"")),
    b"inp": (b"ut", b"", _DELIM + rb"(?=" + _HIDDEN + rb")" + _FIRST_GT),  # hidden (split only)
    b"inpu": (b"t", *_cut(_NO_REFERENCE)),
    b"bo": (b"dy", *_cut(b"")),  # <body>: not junk, but it says "in <body>"
}
_RUN_KEPT = [name for name, kind in KINDS.items() if kind == Kind.RAWTEXT]


def _run_element(consumed: int) -> bytes:
    """An element of a run, without its first ``consumed`` characters: 1 ('<'), or 3 ('<' and
    two more, which the lookbehind checks)."""
    words = [(marker + name, rest) for marker, (name, rest, _) in _RUN_CUTS.items()]
    words += [(name, _DELIM + _CLEAN_REST + _content(name, _CLEAN_REST)) for name in _RUN_KEPT]
    branches = []
    for word, rest in words:
        if not rest:
            continue  # b"inp": in a run, any input without character references (b"inpu")
        if consumed == 1:
            branches.append(_ci(word) + rest)
        else:  # the rest of the word first (the regex engine skips on its first character)
            branches.append(_ci(word[2:]) + rb"(?<=<" + _ci(word) + rb")" + rest)
    return rb"(?:" + b"|".join(branches) + rb")"


_ORDINARY_TAG = (  # after '<': an end tag, or a start tag that is no candidate
    rb"(?:/|(?!(?:" + b"|".join(map(_ci, KINDS)) + rb")" + _DELIM + rb"))[a-zA-Z]"
    + rb"[^\t\n\f\r />]*+" + _CLEAN_REST
)  # fmt: skip
_RUN_PATTERN = (  # after the scan consumed '<' and two characters
    _run_element(3) + rb"(?:[^<]*+<(?:" + _run_element(1) + b"|" + _ORDINARY_TAG
    + rb"[^<]*+(?:<" + _ORDINARY_TAG + rb"[^<]*+){0," + str(_RUN_GAP - 1).encode() + rb"}+<"
    + _run_element(1) + rb"))*+"
)  # fmt: skip
RUN_SPLIT = re.compile(
    rb"<("
    + b"|".join(
        _ci(marker) + (rb"(?=" + _ci(name) + split + rb")" if marker == b"inp" else b"")
        for marker, (name, _, split) in _RUN_CUTS.items()
    )
    + rb")(?:"
    + b"|".join(  # the rest of the name first (the regex engine skips on its first character)
        _ci(name) + rb"(?<=<" + _ci(marker + name) + rb")" + split
        for marker, (name, _, split) in _RUN_CUTS.items()
    )
    + rb")"
)  # fmt: skip


def _letters(index: int) -> bytes:
    letters = {name[index] for name in KINDS if len(name) > index}
    return bytes(sorted(letters | {c - 32 for c in letters}))


class Fast(IntEnum):
    """What the walk does with a candidate matched by a group, in the common cases."""

    CUT = 0  # cut the match whole, leaving a marker
    KEEP = 1  # keep the match whole (a raw-text element without '<' inside)
    RUN = 2  # a run of junk: cut its junk elements (RUN_SPLIT)
    BODY = 3  # a <body> start tag: from here on, in <body>


class Marker(bytes, Enum):
    """The byte a cut leaves in the skeleton (hashed: their values never change)."""

    COMMENT = b"c"
    SCRIPT = b"s"
    STYLE = b"y"
    TEMPLATE = b"t"
    NOSCRIPT = b"n"
    META_OR_LINK = b"v"
    HIDDEN_INPUT = b"h"
    INPUT = b"i"
    SCRIPT_TO_END = b"S"  # unterminated: to the end of the page
    STYLE_TO_END = b"Y"


#: (what, marker, how many of the match's '<' are its own tags), or None: see the walk.
FastAction = tuple[Fast, bytes, int] | None


@dataclass(frozen=True, slots=True)
class Scan:
    """A scan regex and, by group number, what its groups mean."""

    pattern: re.Pattern[bytes]
    groups: tuple[tuple[Kind, bool], ...]  # (kind, whole element matched)
    #: the common cases by group, with input/meta/link cut, and with them kept
    actions: tuple[FastAction, ...]
    actions_keep_tags: tuple[FastAction, ...]


def build_scan(runs: bool) -> Scan:
    """'<', then two characters consumed (checking them costs the regex engine least), then: a
    run, or the "--" of a comment, or the third letter of a name and the branch of that name, or
    the "[" of a CDATA section (a bogus comment, or text in foreign content)."""
    groups: _Groups = [(Kind.NONE, False, b"")]  # group 0: the whole match (unused)
    pattern = rb"<[!" + _letters(0) + rb"][^>\t\n\f\r /](?:"
    if runs:
        pattern += _RUN_PATTERN + _group(groups, Kind.RUN, True) + b"|"
    pattern += rb"-(?<=<!--)(?:(?:>|->|(?:[^-]++|-(?!-!?>))*+--!?>)"
    pattern += _group(groups, Kind.COMMENT, True)
    pattern += rb"|[\s\S]*+)"  # no end: to the end of the page
    branches = b"|".join(_branch(groups, name) for name in KINDS)
    pattern += rb"|[" + _letters(2) + rb"](?:" + branches + rb")"
    pattern += rb"|(?<=<!\[)" + _group(groups, Kind.BANG, False) + rb")"
    return Scan(
        re.compile(pattern),
        tuple((kind, whole) for kind, whole, _ in groups),
        _fast_actions(groups, cut_tags=True),
        _fast_actions(groups, cut_tags=False),
    )


def _fast_actions(groups: _Groups, cut_tags: bool) -> tuple[FastAction, ...]:
    """The common cases, outside <svg>/<select>, by group (see ``FastAction``)."""
    actions: list[FastAction] = []
    for kind, whole, name in groups:
        action: FastAction = None
        if kind == Kind.COMMENT and whole:
            action = (Fast.CUT, Marker.COMMENT.value, 1)
        elif whole and kind == Kind.SCRIPT:
            action = (Fast.CUT, Marker.SCRIPT.value, 2)
        elif whole and kind == Kind.STYLE:
            action = (Fast.CUT, Marker.STYLE.value, 2)
        elif whole and kind == Kind.TEMPLATE:
            action = (Fast.CUT, Marker.TEMPLATE.value, 2)
        elif whole and kind == Kind.RAWTEXT:
            action = (Fast.KEEP, b"", 0)
        elif kind == Kind.BODY:
            action = (Fast.BODY, b"", 0)
        elif kind == Kind.RUN:
            action = (Fast.RUN, b"", 0)
        elif kind == Kind.VOID and cut_tags and name != b"input":
            action = (Fast.CUT, Marker.META_OR_LINK.value, 1)
        actions.append(action)
    return tuple(actions)


#: The scan; and the one without runs (in <svg>/<select>, with NULs in the page, or with a CSS
#: selector).
SCAN: Final = build_scan(runs=True)
SCAN_ONE: Final = build_scan(runs=False)

# Where the scans can match: "<!", or '<' and the first three letters of a name of KINDS in
# any case (every branch of _scan spells one of these out, runs included). `re` pays for every
# '<' of the page (a 30 KB page has ~500); an Aho-Corasick automaton (Rust, SIMD prefilter)
# finds just these in a fraction of that, and the scans are then tried only there (matches).
_CANDIDATE_PREFIXES = sorted(
    {b"<!"}
    | {
        b"<" + bytes(letters)
        for name in KINDS
        for letters in product(*((c, c - 32) if 0x61 <= c <= 0x7A else (c,) for c in name[:3]))
    }
)
_CANDIDATES = BytesAhoCorasick(_CANDIDATE_PREFIXES, implementation=Implementation.DFA)


def candidates(body: bytes) -> list[int]:
    """The offsets of the page's candidates, in order (no two overlap: each starts with '<')."""
    return [start for _, start, _ in _CANDIDATES.find_matches_as_indexes(body)]


def matches(
    scan: re.Pattern[bytes], body: bytes, candidates: list[int], start: int
) -> Iterator[re.Match[bytes]]:
    """``scan.finditer(body, start)``, trying ``scan`` only at the candidates."""
    resume = start
    match_at = scan.match
    for i in range(bisect_left(candidates, start), len(candidates)):
        p = candidates[i]
        if p >= resume:
            match = match_at(body, p)
            if match is not None:
                resume = match.end()
                yield match


END_TAGS = {name: re.compile(rb"</" + _ci(name) + rb"[\t\n\f\r />]") for name in KINDS}
# Script data: "<!--" escapes, "<script" inside an escape double-escapes (then "</script" does
# not end the element), "-->" ends either.
SCRIPT_DATA = re.compile(rb"<!--|</" + _ci(b"script") + rb"[\t\n\f\r />]")
SCRIPT_ESCAPED = re.compile(rb"-->|</?" + _ci(b"script") + rb"[\t\n\f\r />]")
SCRIPT_DOUBLE = re.compile(rb"-->|</" + _ci(b"script") + rb"[\t\n\f\r />]")
INPUT_HIDDEN = re.compile(_HIDDEN)
INPUT_TYPE_WITH_REFERENCE = re.compile(_TYPE_WITH_REFERENCE)
NAME = re.compile(rb"[a-zA-Z]+")
GUARD_TAG = re.compile(rb"<(/?)([a-zA-Z][a-zA-Z0-9-]*)")  # what the open-elements guard counts
HTML_IN_SVG = re.compile(rb"<(?:" + _ci(b"foreignobject") + b"|" + _ci(b"desc") + rb")")
