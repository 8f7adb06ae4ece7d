"""Change detection: normalize a page to the content that matters, hash it, judge batches.

Only selectolax, xxhash and the standard library; nothing of the rest of the project.

* HTML (selectolax lexbor: faster than modest here): the text nodes only, without
  script/style/noscript/template, comments and every attribute (hidden inputs, CSRF metas,
  nonces); ``WatchRules`` can narrow it to a CSS selector and remove regexes.
* ``content_hash`` is xxh3-128 of that text without whitespace, so formatting never counts.
* Charset: BOM, then the Content-Type charset, then <meta charset>, then UTF-8, then
  windows-1252; only the WHATWG Encoding Standard's labels are used; bad bytes are replaced.
* Cost bounds: bodies cut at ``MAX_NORMALIZE_BYTES``; HTML cut where more than
  ``MAX_OPEN_ELEMENTS`` elements would be open (lexbor is quadratic in nesting depth): the
  verdict says ``truncated``. Operator rules are checked by ``validate_rules`` (ignore
  patterns run on RE2, selectors have a bounded number of descendant combinators), and a page
  whose judging passes ``JUDGE_BUDGET_S`` is a failed verdict (``error``), as are pages whose
  stored rules are invalid: ``judge`` never raises. See docs/detect.md.
* ``raw_hash`` is ``"<exact>.<skeleton>"``: the exact-bytes hash is checked in the caller
  (~3 µs); the skeleton (the page with its comments, scripts, styles and input/meta/link
  tags cut out, each leaving a marker, found by a walk that knows the tokenizer's context and
  falls back to the exact hash where it does not model the page) is checked next, before
  parsing. Equal skeletons imply equal normalized text, so either match = unchanged.
* The text kept of a hit or a baseline is the readable text (``readable_text``: a line per
  block element); only whitespace sets it apart from the hashed text, so the hash is the
  same. ``unified_diff``/``html_diff`` compare two such texts (docs/history.md).
"""

from crawler.detect._charset import decode
from crawler.detect._detector import ChangeDetector
from crawler.detect._diff import cap_diff, html_diff, text_lines, unified_diff
from crawler.detect._guard import MAX_OPEN_ELEMENTS
from crawler.detect._hash import content_hash, raw_hash
from crawler.detect._judge import JUDGE_BUDGET_S, JUDGE_ERROR_KINDS, DetectItem, Verdict, judge
from crawler.detect._normalize import (
    MAX_NORMALIZE_BYTES,
    content_kind,
    extract,
    normalize,
    readable_text,
)
from crawler.detect._rules import InvalidRuleError, WatchRules, validate_rules
from crawler.snapshots import collapse_whitespace, cut_snapshot, snapshot_limit

__all__ = [
    "JUDGE_BUDGET_S",
    "JUDGE_ERROR_KINDS",
    "MAX_NORMALIZE_BYTES",
    "MAX_OPEN_ELEMENTS",
    "ChangeDetector",
    "DetectItem",
    "InvalidRuleError",
    "Verdict",
    "WatchRules",
    "cap_diff",
    "collapse_whitespace",
    "content_hash",
    "content_kind",
    "cut_snapshot",
    "decode",
    "extract",
    "html_diff",
    "judge",
    "normalize",
    "raw_hash",
    "readable_text",
    "snapshot_limit",
    "text_lines",
    "unified_diff",
    "validate_rules",
]
