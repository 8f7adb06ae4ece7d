"""The skeleton walk: the page with its junk cut out, each cut leaving a marker.

The skeleton of an HTML page is the page with its "junk" cut out: comments; script, style,
template and (in <body>) noscript elements; input, meta and link tags. Each cut leaves a marker
(its kind and where it was), so the skeleton fixes the page's tree up to the junk's content,
and that content never reaches normalize()'s text. Hence what the judge relies on: equal
skeleton hashes => equal normalize() output (for the same content type and rules).

Where junk is needs the tokenizer's context: "<!--" inside an attribute value, a <title> or a
<textarea> is text; "<script>" inside <svg> is markup. A tokenizer costs about as much as the
parse it is meant to avoid, so this walks over the few '<' that matter, found by an
Aho-Corasick automaton and read by one regex (SCAN: "<!" and the start tags, any case, that
are junk or change the tokenizer's state):

* ``pos`` is always in the tokenizer's data state: the page start, or the end of something the
  walk read exactly. A candidate at ``p`` is in the data state too if [pos, p) holds no '<', or
  reads as text and ordinary tags, or its last '<' is followed by a '>' with no quote after it
  and the last quotes before that '>' do not open attribute values (inside a tag, ``p`` would
  be in a quoted value or after a '>' that is in one). Anything else that could hide ``p``
  (comments, raw text, RCDATA, script data) starts at a candidate, handled before ``p``.
* Elements are matched whole, exactly as the tokenizer reads them, for the usual syntax.
  Runs of junk (from one junk element to the last one followed by at most ``_RUN_GAP``
  ordinary tags, see ``_skeleton_syntax``) are matched whole by the scan too, and cut by one
  regex split (``RUN_SPLIT``); the rest are cut one by one.
* Inside <svg>/<math> (foreign content: no raw text, CDATA sections) and <select> (parsed
  differently by different HTML versions) only comments are cut, and raw-text elements must
  hold no '<' (then every reading of them agrees).
* Anything unusual (an unparseable tag, a candidate that may sit inside a tag, <template> or
  <noscript> with markup inside, <frameset>, CDATA in foreign content, ...) gives up: the
  skeleton is then the exact hash, which is always sound (it only costs a parse).

normalize()'s other inputs are accounted for: the decoding (the charset of the header, a BOM
or a <meta> in the first KiB, which junk may carry, is hashed; codecs that are not
ASCII-transparent give up), the MAX_NORMALIZE_BYTES cut (bigger bodies give up), the
MAX_OPEN_ELEMENTS guard (it counts tag-like text inside junk too: if the page has enough '<'
for the guard to run, the tag-like text of cuts is hashed), a CSS selector (attribute
selectors see input/meta/link attributes: with a selector those tags are kept).

The model is of the HTML tokenizer and tree builder as lexbor implements them (scripting off);
tests/detect/test_hash_skeleton.py checks the invariant on generated pages.

The walk's state: ``pos`` (in the data state), ``last`` (what is hashed or cut), the
<svg>/<select> modes (``Restricted``), whether it is in <body>, and how often it was stuck.
The common cases are settled by the scan's table (``Fast``); the rest by ``element``, the slow
path (``_skeleton_element``). The questions the walk asks of the page from ``pos`` (is this '<'
in the data state, where does this tag or script end) are ``_skeleton_read``'s.

Bounded cost: the walk is linear in the page but for candidates it must look at without moving
on (a tag kept in place, a candidate that is not in the data state): after ``MAX_STUCK`` of
those it gives up, and it reads no runs while stuck (measured before: ``<a title="`` and then
8,000 ``<meta>`` took 18 s, 16,000 took 58 s, each candidate re-reading the run of junk after
it; now 27 and 47 ms). Pages with more than ``MAX_LT`` '<' or ``MAX_CANDIDATES`` candidates
give up before walking (1.5 MB of ``<svg>`` walked in 3.9 s). The page's time budget is looked
at every 64 candidates.
"""

from __future__ import annotations

from array import array
from typing import Final

import xxhash

from crawler.detect._guard import MAX_OPEN_ELEMENTS
from crawler.detect._rules import BudgetExceededError, clock
from crawler.detect._skeleton_element import NEXT, STOP, Restricted, element
from crawler.detect._skeleton_read import GiveUpError, data_state, kind_at
from crawler.detect._skeleton_syntax import (
    GUARD_TAG,
    INPUT_HIDDEN,
    INPUT_TYPE_WITH_REFERENCE,
    RUN_SPLIT,
    SCAN,
    SCAN_ONE,
    Fast,
    Kind,
    Marker,
    candidates,
    matches,
)

# Enum attribute lookups cost ~0.2 us each (Python 3.11): the walk compares with these.
_VOID, _BODY, _RUN = Kind.VOID, Kind.BODY, Kind.RUN
_FAST_CUT, _FAST_RUN, _FAST_BODY = Fast.CUT, Fast.RUN, Fast.BODY
_M_META_OR_LINK, _M_HIDDEN_INPUT = Marker.META_OR_LINK.value, Marker.HIDDEN_INPUT.value
_M_INPUT = Marker.INPUT.value

SKELETON_SEED: Final = 0x736B656C  # a seed of its own: a skeleton hash is never an exact hash
#: candidates looked at without moving on, before the walk gives up
MAX_STUCK: Final = 64
#: '<' in the page, and candidates found, beyond which the walk gives up before it starts (a
#: 30 KB page has ~500 '<' and ~60 candidates; the walk costs 5-15 us per candidate)
MAX_LT: Final = 200_000
MAX_CANDIDATES: Final = 30_000
_CLOCK_EVERY: Final = 63  # a mask: the clock is looked at every 64 candidates


def skeleton(body: bytes, cut_tags: bool, header: bytes, deadline: float) -> str:
    """The skeleton hash (see the notes); raises GiveUpError, or BudgetExceededError past
    ``deadline``. ``header``: the decoding and rules, hashed too."""
    n = len(body)
    view = memoryview(body)
    kept: list[bytes | memoryview] = []  # what is hashed, then:
    offsets = array("q")  # per cut (but in runs): its offset in what is hashed, and its marker
    markers = bytearray()
    tagged: list[tuple[int, int, int]] = []  # cuts with '<' inside: (offset, start, end)
    hashed = last = pos = 0  # hashed: bytes so far; body[:last]: hashed or cut
    # pos: in the data state, body[:pos] understood.
    restricted = Restricted()
    in_restricted = in_body = False
    find = body.find
    runs = cut_tags and find(b"\0") < 0  # runs' markers are NULs
    scan = SCAN if runs else SCAN_ONE
    if n > MAX_LT and body.count(b"<") > MAX_LT:  # (a count costs 70 us on 190 KB)
        raise GiveUpError
    found = candidates(body)
    if len(found) > MAX_CANDIDATES:
        raise GiveUpError
    upcoming = matches(scan.pattern, body, found, 0)
    groups = scan.groups
    actions = scan.actions if cut_tags else scan.actions_keep_tags
    p = matched = looked = stuck = 0
    stuck_at = -1  # pos when the walk last kept a candidate in place (then: no runs)
    while True:
        want = SCAN if runs and not in_restricted and stuck_at != pos else SCAN_ONE
        if pos != matched or want is not scan:
            # The last match was not read as matched: never resume inside what was read (a
            # match there could hide a real candidate), nor after what was not.
            scan = want
            upcoming = matches(scan.pattern, body, found, pos if pos > p else p + 1)
            groups = scan.groups  # (the runs' scan only runs when tags are cut)
            actions = scan.actions if cut_tags else scan.actions_keep_tags
        match = next(upcoming, None)
        if match is None:
            break
        looked += 1
        if not looked & _CLOCK_EVERY and clock() > deadline:
            raise BudgetExceededError("skeleton")
        p = match.start()
        matched = match.end()
        if in_restricted and not restricted.foreign:
            pos = restricted.leave(body, pos, p)
            in_restricted = restricted.active
            if p < pos:
                continue
        index = match.lastindex
        if p != pos and find(b"<", pos, p) >= 0 and not data_state(body, pos, p):
            kind = _RUN if index is None else groups[index][0]
            if kind == _RUN:  # what is the first element?
                kind = kind_at(body, p)
            if kind not in (_VOID, _BODY):
                raise GiveUpError
            stuck += 1  # keeping a tag is always sound (the scan resumes after its '<')
            if stuck > MAX_STUCK:
                raise GiveUpError
            stuck_at = pos  # a run read from here would be read again from the next '<'
            continue
        end = matched
        action = None if in_restricted or index is None else actions[index]
        if action is not None:  # the common cases first
            what, marker, own = action
            if what is _FAST_RUN:  # cut it here
                if p > last:
                    kept.append(view[last:p])
                    hashed += p - last
                offset = hashed
                parts = RUN_SPLIT.split(body[p:end])
                run = b"\0".join(parts)
                kept.append(run)
                hashed += len(run)
                last = pos = end
                # The markers (no marker starts a word with another's end): <body>, and the
                # cut tags, for the guard: '<' in cuts, but their own tags'?
                cuts = b"/".join(parts[1::2]).lower()
                in_body = in_body or b"bo" in cuts
                own = len(parts) // 2  # their start tags, and the end tags:
                own += cuts.count(b"sc") + cuts.count(b"st") + cuts.count(b"te")
                if body.count(b"<", p, end) > run.count(b"<") + own:
                    tagged.append((offset, p, end))
                continue
            if what is not _FAST_CUT:
                in_body = in_body or what is _FAST_BODY
                pos = end
                continue
        else:
            kind, whole = (kind_at(body, p), False) if index is None else groups[index]
            if kind == _VOID:
                if index is not None:
                    pos = end  # read exactly: keep it, or
                if not cut_tags or in_restricted or index is None:
                    if index is None:
                        stuck += 1
                        if stuck > MAX_STUCK:
                            raise GiveUpError
                    continue
                if body[p + 1] in b"mMlL":
                    marker = _M_META_OR_LINK
                elif INPUT_TYPE_WITH_REFERENCE.match(body, p + 6, end):
                    continue  # not modeled
                elif INPUT_HIDDEN.match(body, p + 6, end):
                    marker = _M_HIDDEN_INPUT  # the tree builder treats them apart
                else:
                    marker = _M_INPUT
                own = 1
            elif kind == _BODY:
                if index is not None:
                    in_body = True
                    pos = end
                continue
            else:
                if index is None:
                    content = -1  # the scan did not read its start tag
                elif whole:
                    content = match.end(index - 1)
                else:
                    content = end
                what_next, at, marker, own = element(
                    body, p, kind, whole, content, end, restricted, in_body
                )
                in_restricted = restricted.active
                if what_next == STOP:
                    break
                if what_next == NEXT:
                    pos = at
                    continue
                end = at
        # Cut body[p:end], leaving a marker.
        if p > last:
            kept.append(view[last:p])
            hashed += p - last
        offsets.append(hashed)
        markers += marker
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
        extra = repr([(at, GUARD_TAG.findall(body, a, b)) for at, a, b in tagged]).encode()
    offsets.extend((len(header), len(markers), len(extra)))
    kept.append(header + markers + extra + offsets.tobytes())
    return xxhash.xxh3_128_hexdigest(b"".join(kept), SKELETON_SEED)
