"""The skeleton walk's slow path: candidates the scan's table does not settle.

The walk (``crawler.detect._skeleton``) settles the common candidates from the scan's table
(``Fast``) without a call. What is left comes here, one candidate at a time: a comment inside
<svg>/<select> or without an end, a "<![", a <noscript> outside <body>, a script or style read
piece by piece, a <template>, <plaintext>, <frameset>, and the starts of <svg>, <math> and
<select>, which put the walk in a mode where only comments are cut (``Restricted``). Each
answer is a ``Decision``: move on, stop (the rest of the page is kept as it is), or cut a
range leaving a marker. Anything not modeled exactly raises ``GiveUpError`` (the exact hash).
Kept apart from the walk so that its module holds the loop alone; the cost is one call per
rare candidate, as before (this was a function of the walk's module).
"""

from __future__ import annotations

from dataclasses import dataclass

from crawler.detect._skeleton_read import GiveUpError, data_state, script_end, tag_end
from crawler.detect._skeleton_syntax import END_TAGS, HTML_IN_SVG, NAME, Kind, Marker

# Enum attribute lookups cost ~0.2 us each (Python 3.11): compare with these.
(_COMMENT, _BANG, _SCRIPT, _RAWTEXT, _TEMPLATE, _NOSCRIPT, _SVG, _MATH, _SELECT, _PLAINTEXT,
 _FRAMESET) = (
    Kind.COMMENT, Kind.BANG, Kind.SCRIPT, Kind.RAWTEXT, Kind.TEMPLATE, Kind.NOSCRIPT, Kind.SVG,
    Kind.MATH, Kind.SELECT, Kind.PLAINTEXT, Kind.FRAMESET,
)  # fmt: skip
_M_COMMENT, _M_SCRIPT, _M_STYLE = Marker.COMMENT.value, Marker.SCRIPT.value, Marker.STYLE.value
_M_TEMPLATE, _M_NOSCRIPT = Marker.TEMPLATE.value, Marker.NOSCRIPT.value
_M_SCRIPT_TO_END, _M_STYLE_TO_END = Marker.SCRIPT_TO_END.value, Marker.STYLE_TO_END.value


@dataclass(slots=True)
class Restricted:
    """Where only comments are cut: inside <svg> and <select> until their end tags (the offsets
    of their '</svg' and '</select', n: none, -1: not inside), or in foreign content for good
    (<math>, a nested <svg>, HTML inside <svg>)."""

    svg_end: int = -1
    select_end: int = -1
    svg_start: int = 0
    foreign: bool = False

    @property
    def active(self) -> bool:
        return self.foreign or self.svg_end >= 0 or self.select_end >= 0

    def leave(self, body: bytes, pos: int, p: int) -> int:
        """Leave the <svg>/<select> modes whose end tag comes before the candidate at ``p``:
        the new ``pos``."""
        while 0 <= self.svg_end < p or 0 <= self.select_end < p:
            close = min(c for c in (self.svg_end, self.select_end) if 0 <= c < p)
            is_svg = close == self.svg_end
            if close < pos:  # it was inside something skipped: look again
                found = END_TAGS[b"svg" if is_svg else b"select"].search(body, pos)
                close = len(body) if found is None else found.start()
            elif not data_state(body, pos, close):
                raise GiveUpError
            else:
                pos = tag_end(body, close)
                if is_svg and HTML_IN_SVG.search(body, self.svg_start, close):
                    self.foreign = True  # <foreignObject>/<desc> content may be HTML
                close = -1
            if is_svg:
                self.svg_end = close
            else:
                self.select_end = close
        return pos

    def enter(self, body: bytes, kind: Kind, content: int) -> None:
        """An <svg>, <math> or <select> start tag whose content starts at ``content``."""
        if kind == _MATH or (kind == _SVG and self.svg_end >= 0):
            self.foreign = True
        elif kind == _SVG:
            found = END_TAGS[b"svg"].search(body, content)
            self.svg_end = len(body) if found is None else found.start()
            self.svg_start = content
        elif self.select_end < 0:
            found = END_TAGS[b"select"].search(body, content)
            self.select_end = len(body) if found is None else found.start()


# What the slow path decides for a candidate: move on to ``pos``, stop (the rest of the page is
# kept as it is), or cut [p, end) leaving ``marker``.
NEXT, STOP, CUT = 0, 1, 2
Decision = tuple[int, int, bytes, int]  # (what, pos or end, marker, own '<' of the cut)


def element(
    body: bytes,
    p: int,
    kind: Kind,
    whole: bool,
    content: int,
    end: int,
    restricted: Restricted,
    in_body: bool,
) -> Decision:
    """The slow path: a candidate the scan did not settle (``content``: where its content
    starts, if the scan read its start tag, else -1; ``end``: where the scan's match ends)."""
    active = restricted.active
    if kind == _COMMENT:  # in <svg>/<select>, or unterminated: to the end of the page
        return CUT, end, _M_COMMENT, 1
    if kind == _BANG:  # "<![": a bogus comment up to '>', or CDATA in foreign content
        if active:
            raise GiveUpError
        gt = body.find(b">", p)
        return (STOP, 0, b"", 0) if gt < 0 else (NEXT, gt + 1, b"", 0)
    if kind == _NOSCRIPT and whole and not active and in_body:
        return CUT, end, _M_NOSCRIPT, 2
    # read the element piece by piece
    if content < 0:
        content = tag_end(body, p)
    if kind in (_SVG, _MATH, _SELECT):
        restricted.enter(body, kind, content)
        return NEXT, content, b"", 0
    if kind == _FRAMESET:
        raise GiveUpError
    if kind == _PLAINTEXT:
        return STOP, 0, b"", 0  # the rest is text (or, in foreign content, markup): keep it
    if kind == _NOSCRIPT:  # an ordinary element (maybe in <head>): walk into it
        return NEXT, content, b"", 0
    name = NAME.match(body, p + 1).group().lower()  # type: ignore[union-attr]
    if kind == _SCRIPT and not active:
        close = script_end(body, content)
    else:
        found = END_TAGS[name].search(body, content)
        close = -1 if found is None else found.start()
    if active or kind == _TEMPLATE:
        # Kept (a template: cut) only if its content cannot be markup.
        if close < 0 or body.find(b"<", content, close) >= 0:
            raise GiveUpError
        end = tag_end(body, close)
        if active:
            return NEXT, end, b"", 0
        return CUT, end, _M_TEMPLATE, 2
    if close < 0:  # no end tag: to the end of the page
        if kind == _RAWTEXT:
            return STOP, 0, b"", 0
        return CUT, len(body), _M_SCRIPT_TO_END if kind == _SCRIPT else _M_STYLE_TO_END, 1
    end = tag_end(body, close)
    if kind == _RAWTEXT:
        return NEXT, end, b"", 0
    return CUT, end, _M_SCRIPT if kind == _SCRIPT else _M_STYLE, 2
