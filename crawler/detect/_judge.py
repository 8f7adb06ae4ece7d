"""Judging one body against the previous hashes: pure functions, inline or in workers.

``judge`` never raises. A page it cannot judge is a failed verdict (``error`` set, one of
``JUDGE_ERROR_KINDS``) that the caller records as a failed poll: rules stored before today's
checks that can no longer be used, a page whose judging passed ``JUDGE_BUDGET_S`` (looked at
between steps, and inside the loops that could run long: the skeleton walk, the removal of
ignore patterns), or a bug (any other exception, with its message). Every step is linear in
the body, which is cut at ``MAX_NORMALIZE_BYTES``: the budget is a second line, for what
the measurements did not find (see docs/detect.md for the worst cases measured).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from crawler.detect._hash import content_hash, exact_hash, skeleton_hash, split_raw_hash
from crawler.detect._lines import tidy_lines
from crawler.detect._normalize import Extract, extract_page
from crawler.detect._rules import NO_RULES, BudgetExceededError, WatchRules, clock

#: Seconds of CPU a page may take to judge before it is abandoned (a failed poll).
JUDGE_BUDGET_S: Final = 2.0
#: The error kinds of a failed verdict, with their meaning.
JUDGE_ERROR_KINDS: Final[dict[str, str]] = {
    "invalid_rules": "the URL's watch rules cannot be used (selector or ignore pattern)",
    "judge_timeout": f"judging the page took longer than its budget ({JUDGE_BUDGET_S:g} s)",
    "judge_error": "the change detector failed on the page (a bug: the message says what)",
}


@dataclass(frozen=True)
class DetectItem:
    """One fetched body to judge, with what the store remembers of the URL's last version."""

    body: bytes
    content_type: str | None = None
    rules: WatchRules = field(default=NO_RULES)
    previous_hash: str | None = None
    previous_raw_hash: str | None = None


@dataclass(frozen=True)
class Verdict:
    """``changed`` is None for a baseline (no previous hash). ``text`` is the content of a hit
    or a baseline: for text, the readable text (a line per block element, each line's
    whitespace collapsed: ``readable_text``), the body's bytes otherwise; None for misses
    (and for pages found unchanged by a pre-check).
    ``raw_hash`` is opaque: store it and pass it back as ``previous_raw_hash``.
    ``truncated``: the page was parsed cut at a parse limit (bytes, or open elements), so a
    change past the cut goes unseen. ``error``: the page could not be judged (a key of
    ``JUDGE_ERROR_KINDS``, ``message`` says more); then the hashes are empty and ``changed``
    is None: record a failed poll, keep the previous hashes."""

    content_hash: str
    raw_hash: str
    changed: bool | None
    text: bytes | None = None
    parsed: bool = True
    truncated: bool = False
    error: str | None = None
    message: str | None = None


def failed(error: str, message: str) -> Verdict:
    """The verdict of a page that could not be judged."""
    return Verdict("", "", None, None, False, False, error, message)


def precheck(item: DetectItem) -> tuple[str, Verdict | None]:
    """Exact raw-hash check (~3 µs): (exact hash, verdict if unchanged without any parsing)."""
    exact = exact_hash(item.body, item.rules.key)
    prev_exact, prev_skeleton = split_raw_hash(item.previous_raw_hash)
    if item.previous_hash is not None and exact == prev_exact:
        raw = exact + "." + (prev_skeleton or "")
        return exact, Verdict(item.previous_hash, raw, False, None, parsed=False)
    return exact, None


def judge(
    item: DetectItem, exact: str | None = None, *, budget_s: float = JUDGE_BUDGET_S
) -> Verdict:
    """Full judgement: exact check, then skeleton check, then normalize + hash. Never raises."""
    if item.rules.invalid is not None:
        return failed("invalid_rules", item.rules.invalid)
    deadline = clock() + budget_s
    try:
        return _judge(item, exact, deadline)
    except BudgetExceededError as exc:
        return failed("judge_timeout", f"judging took more than {budget_s:g} s (at: {exc})")
    except Exception as exc:  # a bug: one failed poll, not a crashed crawl
        return failed("judge_error", f"{type(exc).__name__}: {exc}")


def _judge(item: DetectItem, exact: str | None, deadline: float) -> Verdict:
    if exact is None:
        exact, verdict = precheck(item)
        if verdict is not None:
            return verdict
    skeleton = skeleton_hash(item.body, item.content_type, item.rules, deadline=deadline)
    raw = exact + "." + skeleton
    _, prev_skeleton = split_raw_hash(item.previous_raw_hash)
    if item.previous_hash is not None and skeleton == prev_skeleton:
        return Verdict(item.previous_hash, raw, False, None, parsed=False)
    page = extract_page(item.body, item.content_type, item.rules, deadline=deadline)
    digest = content_hash(page.data)
    changed = None if item.previous_hash is None else digest != item.previous_hash
    if changed is False:  # a miss: nobody needs the text
        return Verdict(digest, raw, changed, None, truncated=page.truncated)
    # a hit or a baseline: its readable text (the bytes of a body that is not text) is kept,
    # as the after of the change, or as the before of the URL's first change
    return Verdict(digest, raw, changed, _kept_text(page), truncated=page.truncated)


def _kept_text(page: Extract) -> bytes:
    """The readable text of a page, or, when making it passes the page's budget, the text as
    hashed, split at its own newlines (linear and cheap): the verdict stands either way, as the
    hash is already known; only the text reads less well (docs/history.md)."""
    if page.readable is None:
        return page.data  # not text: the bytes
    try:
        return page.readable()
    except BudgetExceededError:
        return tidy_lines(page.data)


def judge_batch(batch: list[tuple[DetectItem, str]]) -> list[Verdict]:
    """Worker entry point: items that failed the exact pre-check, with their exact hashes."""
    return [judge(item, exact) for item, exact in batch]
