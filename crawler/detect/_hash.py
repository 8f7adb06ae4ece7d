"""Hashes: the content hash of normalized text, and the cheap two-part raw hash of a body."""

from __future__ import annotations

import re
from array import array
from bisect import bisect_left
from collections.abc import Iterator
from itertools import product

import xxhash
from ahocorasick_rs import BytesAhoCorasick, Implementation

from crawler.detect._charset import ASCII_TRANSPARENT, sniff, undeclared_encoding
from crawler.detect._guard import MAX_OPEN_ELEMENTS
from crawler.detect._normalize import MAX_NORMALIZE_BYTES, NBSP, content_kind

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


# --- The skeleton -------------------------------------------------------------------------------
#
# The skeleton of an HTML page is the page with its "junk" cut out: comments; script, style,
# template and (in <body>) noscript elements; input, meta and link tags. Each cut leaves a marker
# (its kind and where it was), so the skeleton fixes the page's tree up to the junk's content,
# and that content never reaches normalize()'s text. Hence what the judge relies on: equal
# skeleton hashes => equal normalize() output (for the same content type and rules).
#
# Where junk is needs the tokenizer's context: "<!--" inside an attribute value, a <title> or a
# <textarea> is text; "<script>" inside <svg> is markup. A tokenizer costs about as much as the
# parse it is meant to avoid, so this walks over the few '<' that matter, found by an
# Aho-Corasick automaton and read by one regex (_SCAN: "<!" and the start tags, any case, that
# are junk or change the tokenizer's state):
#
# * ``pos`` is always in the tokenizer's data state: the page start, or the end of something the
#   walk read exactly. A candidate at ``p`` is in the data state too if [pos, p) holds no '<', or
#   reads as text and ordinary tags, or its last '<' is followed by a '>' with no quote after it
#   and the last quotes before that '>' do not open attribute values (inside a tag, ``p`` would
#   be in a quoted value or after a '>' that is in one). Anything else that could hide ``p``
#   (comments, raw text, RCDATA, script data) starts at a candidate, handled before ``p``.
# * Elements are matched whole, exactly as the tokenizer reads them, for the usual syntax.
#   Runs of junk (from one junk element to the last one followed by at most _RUN_GAP ordinary
#   tags) are matched whole by the scan too, and cut by one regex split (_RUN_SPLIT); the rest
#   are cut one by one.
# * Inside <svg>/<math> (foreign content: no raw text, CDATA sections) and <select> (parsed
#   differently by different HTML versions) only comments are cut, and raw-text elements must
#   hold no '<' (then every reading of them agrees).
# * Anything unusual (an unparseable tag, a candidate that may sit inside a tag, <template> or
#   <noscript> with markup inside, <frameset>, CDATA in foreign content, ...) gives up: the
#   skeleton is then the exact hash, which is always sound (it only costs a parse).
#
# normalize()'s other inputs are accounted for: the decoding (the charset of the header, a BOM
# or a <meta> in the first KiB, which junk may carry, is hashed; codecs that are not
# ASCII-transparent give up), the MAX_NORMALIZE_BYTES cut (bigger bodies give up), the
# MAX_OPEN_ELEMENTS guard (it counts tag-like text inside junk too: if the page has enough '<'
# for the guard to run, the tag-like text of cuts is hashed), a CSS selector (attribute
# selectors see input/meta/link attributes: with a selector those tags are kept).
#
# The model is of the HTML tokenizer and tree builder as lexbor implements them (scripting off);
# tests/detect/test_hash_skeleton.py checks the invariant on generated pages.

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
_TAG = re.compile(rb"</?[a-zA-Z][^\t\n\f\r />]*+" + _REST)
# Text, tags, doctypes and bogus comments, read exactly.
_TEXT_AND_TAGS = re.compile(
    rb"(?:[^<]++|</?[a-zA-Z][^\t\n\f\r />]*+" + _REST
    + rb"|<(?:!(?!--|\[)|\?|/[^a-zA-Z>])[^>]*+>)*+"
)  # fmt: skip

# Kinds of candidates.
_COMMENT, _BANG, _SCRIPT, _STYLE, _RAWTEXT, _TEMPLATE, _NOSCRIPT = 1, 2, 3, 4, 5, 6, 7
_VOID, _BODY, _SVG, _MATH, _SELECT, _PLAINTEXT, _FRAMESET, _RUN = 8, 9, 10, 11, 12, 13, 14, 15
_KINDS: dict[bytes, int] = {
    b"script": _SCRIPT,
    b"style": _STYLE,
    b"template": _TEMPLATE,  # cut with text only inside
    b"noscript": _NOSCRIPT,  # not raw text (lexbor parses with scripting off): cut if simple
    # raw text and RCDATA elements whose text counts: kept, their content skipped
    b"title": _RAWTEXT,
    b"textarea": _RAWTEXT,
    b"xmp": _RAWTEXT,
    b"iframe": _RAWTEXT,
    b"noembed": _RAWTEXT,
    b"noframes": _RAWTEXT,
    b"plaintext": _PLAINTEXT,
    b"input": _VOID,
    b"meta": _VOID,
    b"link": _VOID,
    b"body": _BODY,
    b"svg": _SVG,
    b"math": _MATH,
    b"select": _SELECT,
    b"frameset": _FRAMESET,
}
assert len({name[:3] for name in _KINDS}) == len(_KINDS) and min(map(len, _KINDS)) >= 3
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

# The scan's groups are empty, set after a candidate's start tag and after its end tag (then the
# element was matched whole): ``lastindex`` says how far the match got.
_GROUPS: list[tuple[int, bool]] = []  # group -> (kind, whole element matched): being built
_GROUP_NAMES: list[bytes] = []


def _group(kind: int, whole: bool, name: bytes = b"") -> bytes:
    _GROUPS.append((kind, whole))
    _GROUP_NAMES.append(name)
    return b"()"


def _branch(name: bytes) -> bytes:
    """The scan's branch for ``name``, once its first three letters are consumed."""
    kind = _KINDS[name]
    # The rest of the name first (the regex engine skips a branch on its first character).
    start = _ci(name[3:]) + rb"(?<=<" + _ci(name) + rb")" + _DELIM
    start += rb"(?:" + _REST + _group(kind, False, name)
    end_tag = rb"</" + _ci(name) + _REST
    if kind == _SCRIPT:  # stops at "<!--" (escapes: see _script_end)
        content = rb"(?:[^<]++|<(?!!--|/" + _ci(name) + rb"[\t\n\f\r />]))*+" + end_tag
    elif kind in (_STYLE, _RAWTEXT):
        content = rb"(?:[^<]++|<(?!/" + _ci(name) + rb"[\t\n\f\r />]))*+" + end_tag
    elif kind == _TEMPLATE:
        content = rb"[^<]*+" + end_tag
    elif kind == _NOSCRIPT:
        content = _NOSCRIPT_CONTENT
    else:
        return start + rb")?+"
    return start + rb"(?:" + content + _group(kind, True, name) + rb")?+)?+"


# Runs: from a junk element to the last junk element followed by at most _RUN_GAP ordinary tags
# (no candidates, no '<' in attributes) and text. Their elements are those of _RUN_CUTS (cut),
# and the raw-text ones without '<' inside (kept). _RUN_SPLIT cuts them, capturing the start of
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
_RUN_KEPT = [name for name, kind in _KINDS.items() if kind == _RAWTEXT]


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
    rb"(?:/|(?!(?:" + b"|".join(map(_ci, _KINDS)) + rb")" + _DELIM + rb"))[a-zA-Z]"
    + rb"[^\t\n\f\r />]*+" + _CLEAN_REST
)  # fmt: skip
_RUN_PATTERN = (  # after the scan consumed '<' and two characters
    _run_element(3) + rb"(?:[^<]*+<(?:" + _run_element(1) + b"|" + _ORDINARY_TAG
    + rb"[^<]*+(?:<" + _ORDINARY_TAG + rb"[^<]*+){0," + str(_RUN_GAP - 1).encode() + rb"}+<"
    + _run_element(1) + rb"))*+"
)  # fmt: skip
_RUN_SPLIT = re.compile(
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
    letters = {name[index] for name in _KINDS if len(name) > index}
    return bytes(sorted(letters | {c - 32 for c in letters}))


def _scan(runs: bool) -> tuple[re.Pattern[bytes], list[tuple[int, bool]], list[bytes]]:
    """'<', then two characters consumed (checking them costs the regex engine least), then: a
    run, or the "--" of a comment, or the third letter of a name and the branch of that name, or
    the "[" of a CDATA section (a bogus comment, or text in foreign content)."""
    _GROUPS[:] = [(0, False)]
    _GROUP_NAMES[:] = [b""]
    pattern = rb"<[!" + _letters(0) + rb"][^>\t\n\f\r /](?:"
    if runs:
        pattern += _RUN_PATTERN + _group(_RUN, True) + b"|"
    pattern += rb"-(?<=<!--)(?:(?:>|->|(?:[^-]++|-(?!-!?>))*+--!?>)" + _group(_COMMENT, True)
    pattern += rb"|[\s\S]*+)"  # no end: to the end of the page
    pattern += rb"|[" + _letters(2) + rb"](?:" + b"|".join(map(_branch, _KINDS)) + rb")"
    pattern += rb"|(?<=<!\[)" + _group(_BANG, False) + rb")"
    return re.compile(pattern), list(_GROUPS), list(_GROUP_NAMES)


_SCAN, _SCAN_GROUPS, _SCAN_NAMES = _scan(runs=True)
# In <svg>/<select>, with NULs in the page, or with a CSS selector: no runs.
_SCAN_ONE, _SCAN_ONE_GROUPS, _SCAN_ONE_NAMES = _scan(runs=False)

# Where the scans can match: "<!", or '<' and the first three letters of a name of _KINDS in
# any case (every branch of _scan spells one of these out, runs included). `re` pays for every
# '<' of the page (a 30 KB page has ~500); an Aho-Corasick automaton (Rust, SIMD prefilter)
# finds just these in a fraction of that, and the scans are then tried only there (_matches).
_CANDIDATE_PREFIXES = sorted(
    {b"<!"}
    | {
        b"<" + bytes(letters)
        for name in _KINDS
        for letters in product(*((c, c - 32) if 0x61 <= c <= 0x7A else (c,) for c in name[:3]))
    }
)
_CANDIDATES = BytesAhoCorasick(_CANDIDATE_PREFIXES, implementation=Implementation.DFA)


def _candidates(body: bytes) -> list[int]:
    """The offsets of the page's candidates, in order (no two overlap: each starts with '<')."""
    return [start for _, start, _ in _CANDIDATES.find_matches_as_indexes(body)]


def _matches(
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


def _fast_actions(
    groups: list[tuple[int, bool]], names: list[bytes], cut_tags: bool
) -> list[tuple[bytes, int] | None]:
    """The common cases, outside <svg>/<select>, by group: cut the match whole (marker, and how
    many of its '<' are its own tags), keep it whole (b"", 0), a run (b"r", 0), a <body> start
    tag (b"b", 0); None: see the loop."""
    actions: list[tuple[bytes, int] | None] = []
    for (kind, whole), name in zip(groups, names, strict=True):
        action: tuple[bytes, int] | None = None
        if kind == _COMMENT:
            action = (b"c", 1)
        elif whole and kind in (_SCRIPT, _STYLE, _TEMPLATE):
            action = (b"s" if kind == _SCRIPT else b"y" if kind == _STYLE else b"t", 2)
        elif whole and kind == _RAWTEXT:
            action = (b"", 0)
        elif kind == _BODY:
            action = (b"b", 0)
        elif kind == _RUN:
            action = (b"r", 0)
        elif kind == _VOID and cut_tags and name != b"input":
            action = (b"v", 1)
        actions.append(action)
    return actions


_SCAN_ACTIONS = _fast_actions(_SCAN_GROUPS, _SCAN_NAMES, True)
_SCAN_ONE_ACTIONS = _fast_actions(_SCAN_ONE_GROUPS, _SCAN_ONE_NAMES, True)
_SCAN_ONE_ACTIONS_KEEP_TAGS = _fast_actions(_SCAN_ONE_GROUPS, _SCAN_ONE_NAMES, False)

_END_TAGS = {name: re.compile(rb"</" + _ci(name) + rb"[\t\n\f\r />]") for name in _KINDS}
# Script data: "<!--" escapes, "<script" inside an escape double-escapes (then "</script" does
# not end the element), "-->" ends either.
_SCRIPT_DATA = re.compile(rb"<!--|</" + _ci(b"script") + rb"[\t\n\f\r />]")
_SCRIPT_ESCAPED = re.compile(rb"-->|</?" + _ci(b"script") + rb"[\t\n\f\r />]")
_SCRIPT_DOUBLE = re.compile(rb"-->|</" + _ci(b"script") + rb"[\t\n\f\r />]")
_INPUT_HIDDEN = re.compile(_HIDDEN)
_INPUT_TYPE_WITH_REFERENCE = re.compile(_TYPE_WITH_REFERENCE)
_NAME = re.compile(rb"[a-zA-Z]+")
_GUARD_TAG = re.compile(rb"<(/?)([a-zA-Z][a-zA-Z0-9-]*)")  # what the open-elements guard counts
_HTML_IN_SVG = re.compile(rb"<(?:" + _ci(b"foreignobject") + b"|" + _ci(b"desc") + rb")")
_SKELETON_SEED = 0x736B656C  # a seed of its own: a skeleton hash is never an exact hash


class _GiveUpError(Exception):
    """The walk met something it does not model exactly: use the exact hash."""


def _decoding(body: bytes, content_type: str | None) -> str | None:
    """The encoding ``decode`` uses for ``body``, if ASCII bytes always decode to themselves in
    it (with a BOM: only UTF-8's, marked apart as it is cut before decoding)."""
    name, bom = sniff(body, content_type)
    if bom:
        return "BOM-UTF-8" if name == "UTF-8" else None
    if name is None:
        return undeclared_encoding(body)
    return name if name in ASCII_TRANSPARENT else None


def _data_state(body: bytes, pos: int, p: int) -> bool:
    """Whether the '<' at ``p`` is in the data state, given that ``pos`` is (see above)."""
    lt = body.rfind(b"<", pos, p)
    if lt < 0:
        return True
    if p - pos <= 512 and _TEXT_AND_TAGS.fullmatch(body, pos, p) is not None:
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


def _tag_end(body: bytes, p: int) -> int:
    match = _TAG.match(body, p)
    if match is None:
        raise _GiveUpError
    return match.end()


def _script_end(body: bytes, i: int) -> int:
    """Where the script element whose content starts at ``i`` ends ('</script'), or -1."""
    state = 0  # 0: script data, 1: escaped, 2: double escaped
    while True:
        if state == 0:
            match = _SCRIPT_DATA.search(body, i)
            if match is None:
                return -1
            if body[match.start() + 1] != 0x21:  # not "<!--"
                return match.start()
            state, i = 1, match.start() + 2  # its dashes count: "<!-->" escapes and unescapes
        else:
            match = (_SCRIPT_ESCAPED if state == 1 else _SCRIPT_DOUBLE).search(body, i)
            if match is None:
                return -1
            start = match.start()
            if body[start] == 0x2D:  # "-->"
                state = 0
            elif state == 2:  # "</script" ends the double escape
                state = 1
            elif body[start + 1] == 0x2F:  # "</script" ends the element
                return start
            else:  # "<script" double-escapes
                state = 2
            i = match.end()


def _kind_at(body: bytes, p: int) -> int:
    """The kind of the candidate at ``p`` (for those the scan did not match beyond the name)."""
    if body[p + 1] == 0x21:  # "<!"
        return _COMMENT if body[p + 2 : p + 4] == b"--" else _BANG
    return _KINDS[_NAME.match(body, p + 1).group().lower()]  # type: ignore[union-attr]


def _skeleton(body: bytes, cut_tags: bool, header: bytes) -> str:
    """The skeleton hash (see above); raises _GiveUpError."""
    n = len(body)
    view = memoryview(body)
    kept: list[bytes | memoryview] = []  # what is hashed, then:
    offsets = array("q")  # per cut (but in runs): its offset in what is hashed, and its marker
    markers = bytearray()
    tagged: list[tuple[int, int, int]] = []  # cuts with '<' inside: (offset, start, end)
    hashed = last = pos = 0  # hashed: bytes so far; body[:last]: hashed or cut
    # pos: in the data state, body[:pos] understood. Restricted modes: the '</svg' or
    # '</select' that ends them (n: none), or for good (foreign).
    svg_end = select_end = -1
    svg_start = 0
    foreign = restricted = in_body = False
    find = body.find
    runs = cut_tags and find(b"\0") < 0  # runs' markers are NULs
    scan = _SCAN if runs else _SCAN_ONE
    candidates = _candidates(body)
    matches = _matches(scan, body, candidates, 0)
    p = matched = 0
    while True:
        want = _SCAN if runs and not restricted else _SCAN_ONE
        if pos != matched or want is not scan:
            # The last match was not read as matched: never resume inside what was read (a
            # match there could hide a real candidate), nor after what was not.
            scan = want
            matches = _matches(scan, body, candidates, pos if pos > p else p + 1)
        match = next(matches, None)
        if match is None:
            break
        p = match.start()
        matched = match.end()
        if restricted and not foreign:
            # Leave the <svg>/<select> modes whose end tag comes before this candidate.
            while 0 <= svg_end < p or 0 <= select_end < p:
                close = min(c for c in (svg_end, select_end) if 0 <= c < p)
                is_svg = close == svg_end
                if close < pos:  # it was inside something skipped: look again
                    found = _END_TAGS[b"svg" if is_svg else b"select"].search(body, pos)
                    close = n if found is None else found.start()
                elif not _data_state(body, pos, close):
                    raise _GiveUpError
                else:
                    pos = _tag_end(body, close)
                    if is_svg and _HTML_IN_SVG.search(body, svg_start, close):
                        foreign = True  # <foreignObject>/<desc> content may be HTML
                    close = -1
                if is_svg:
                    svg_end = close
                else:
                    select_end = close
            restricted = foreign or svg_end >= 0 or select_end >= 0
            if p < pos:
                continue
        groups = _SCAN_GROUPS if scan is _SCAN else _SCAN_ONE_GROUPS
        index = match.lastindex
        if p != pos and find(b"<", pos, p) >= 0 and not _data_state(body, pos, p):
            kind = _RUN if index is None else groups[index][0]
            if kind == _RUN:  # what is the first element?
                kind = _kind_at(body, p)
            if kind in (_VOID, _BODY):
                continue  # keeping a tag is always sound (the scan resumes after its '<')
            raise _GiveUpError
        end = matched
        if scan is _SCAN:
            action = None if index is None else _SCAN_ACTIONS[index]
        elif restricted or index is None:
            action = None
        else:
            action = (_SCAN_ONE_ACTIONS if cut_tags else _SCAN_ONE_ACTIONS_KEEP_TAGS)[index]
        if action is not None:  # the common cases first
            cut, own = action
            if not own:
                if cut == b"r":  # a run: cut it here
                    if p > last:
                        kept.append(view[last:p])
                        hashed += p - last
                    offset = hashed
                    parts = _RUN_SPLIT.split(body[p:end])
                    run = b"\0".join(parts)
                    kept.append(run)
                    hashed += len(run)
                    last = end
                    # The markers (no marker starts a word with another's end): <body>, and
                    # the cut tags, for the guard: '<' in cuts, but their own tags'?
                    cuts = b"/".join(parts[1::2]).lower()
                    in_body = in_body or b"bo" in cuts
                    own = len(parts) // 2  # their start tags, and the end tags:
                    own += cuts.count(b"sc") + cuts.count(b"st") + cuts.count(b"te")
                    if body.count(b"<", p, end) > run.count(b"<") + own:
                        tagged.append((offset, p, end))
                elif cut:  # <body>
                    in_body = True
                pos = end
                continue
        else:
            if index is None:
                kind, whole = _kind_at(body, p), False
            else:
                kind, whole = groups[index]
            own = 1
            if kind == _COMMENT:  # unterminated: to the end of the page
                cut = b"c"
            elif kind == _BANG:  # "<![": a bogus comment up to '>', or CDATA in foreign content
                if restricted:
                    raise _GiveUpError
                gt = find(b">", p)
                if gt < 0:
                    break  # to the end of the page
                pos = gt + 1
                continue
            elif kind == _VOID:
                if index is not None:
                    pos = end  # read exactly: keep it, or
                if not cut_tags or restricted or index is None:
                    continue
                if body[p + 1] in b"mMlL":
                    cut = b"v"
                elif _INPUT_TYPE_WITH_REFERENCE.match(body, p + 6, end):
                    continue  # not modeled
                else:  # the tree builder treats hidden inputs apart
                    cut = b"h" if _INPUT_HIDDEN.match(body, p + 6, end) else b"i"
            elif kind == _BODY:
                if index is not None:
                    in_body = True
                    pos = end
                continue
            elif kind == _NOSCRIPT and whole and not restricted and in_body:
                cut, own = b"n", 2
            else:  # read the element piece by piece
                if index is None:
                    content = _tag_end(body, p)
                else:
                    content = match.end(index - 1) if whole else end
                if kind in (_SVG, _MATH, _SELECT):
                    if kind == _MATH or (kind == _SVG and svg_end >= 0):
                        foreign = True
                    elif kind == _SVG:
                        found = _END_TAGS[b"svg"].search(body, content)
                        svg_end = n if found is None else found.start()
                        svg_start = content
                    elif select_end < 0:
                        found = _END_TAGS[b"select"].search(body, content)
                        select_end = n if found is None else found.start()
                    restricted = True
                    pos = content
                    continue
                if kind == _FRAMESET:
                    raise _GiveUpError
                if kind == _PLAINTEXT:
                    break  # the rest is text (or, in foreign content, markup): keep it all
                if kind == _NOSCRIPT:  # an ordinary element (maybe in <head>): walk into it
                    pos = content
                    continue
                name = _NAME.match(body, p + 1).group().lower()  # type: ignore[union-attr]
                if kind == _SCRIPT and not restricted:
                    close = _script_end(body, content)
                else:
                    found = _END_TAGS[name].search(body, content)
                    close = -1 if found is None else found.start()
                if restricted or kind == _TEMPLATE:
                    # Kept (a template: cut) only if its content cannot be markup.
                    if close < 0 or find(b"<", content, close) >= 0:
                        raise _GiveUpError
                    end = _tag_end(body, close)
                    if restricted:
                        pos = end
                        continue
                    cut, own = b"t", 2
                elif close < 0:  # no end tag: to the end of the page
                    if kind == _RAWTEXT:
                        break
                    end = n
                    cut = b"S" if kind == _SCRIPT else b"Y"
                else:
                    end = _tag_end(body, close)
                    if kind == _RAWTEXT:
                        pos = end
                        continue
                    cut, own = (b"s" if kind == _SCRIPT else b"y"), 2
        # Cut body[p:end], leaving a marker.
        if p > last:
            kept.append(view[last:p])
            hashed += p - last
        offsets.append(hashed)
        markers += cut
        if find(b"<", p + 1, end) >= 0 and body.count(b"<", p, end) > own:
            tagged.append((hashed, p, end))  # '<' in the cut, but its own tags'
        last = pos = end
        if end >= n:
            break
    if last < n:
        kept.append(view[last:])
    extra = b""
    if tagged and body.count(b"<") > MAX_OPEN_ELEMENTS:
        # The open-elements guard may cut the page, counting tags inside cuts: hash those.
        extra = repr([(at, _GUARD_TAG.findall(body, a, b)) for at, a, b in tagged]).encode()
    offsets.extend((len(header), len(markers), len(extra)))
    kept.append(header + markers + extra + offsets.tobytes())
    return xxhash.xxh3_128_hexdigest(b"".join(kept), _SKELETON_SEED)


def skeleton_hash(body: bytes, content_type: str | None, rules_key: bytes = b"") -> str:
    """xxh3-128 of an HTML body without its scripts, styles, comments, inputs, metas and links.

    Equal skeleton hashes imply equal ``normalize`` output (for the same content type and rules);
    when that cannot be established cheaply, this is the exact hash (see the notes above)."""
    if content_kind(content_type, body) != "html" or len(body) > MAX_NORMALIZE_BYTES:
        return exact_hash(body, rules_key)
    codec = _decoding(body, content_type)
    if codec is None:
        return exact_hash(body, rules_key)
    # With a CSS selector, attribute selectors could see input/meta/link attributes.
    cut_tags = not rules_key or rules_key.startswith(b"(None,")
    try:
        return _skeleton(body, cut_tags, codec.encode() + b"\0" + rules_key)
    except _GiveUpError:
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
