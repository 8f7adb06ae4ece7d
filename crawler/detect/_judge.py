"""Judging one body against the previous hashes: pure functions, inline or in workers."""

from __future__ import annotations

from dataclasses import dataclass, field

from crawler.detect._hash import content_hash, exact_hash, skeleton_hash, split_raw_hash
from crawler.detect._normalize import extract
from crawler.detect._rules import WatchRules


@dataclass(frozen=True)
class DetectItem:
    """One fetched body to judge, with what the store remembers of the URL's last version."""

    body: bytes
    content_type: str | None = None
    rules: WatchRules = field(default_factory=WatchRules)
    previous_hash: str | None = None
    previous_raw_hash: str | None = None


@dataclass(frozen=True)
class Verdict:
    """``changed`` is None for a baseline (no previous hash). ``text`` is the new content when
    the page changed: for text, as extracted, whitespace not yet collapsed
    (``collapse_whitespace(text)`` is ``normalize``'s output; collapsing a 25 KB text costs
    more than hashing it, so it is left to whoever reads the text); None for misses and
    baselines.
    ``raw_hash`` is opaque: store it and pass it back as ``previous_raw_hash``."""

    content_hash: str
    raw_hash: str
    changed: bool | None
    text: bytes | None = None
    parsed: bool = True


def precheck(item: DetectItem) -> tuple[str, Verdict | None]:
    """Exact raw-hash check (~3 µs): (exact hash, verdict if unchanged without any parsing)."""
    exact = exact_hash(item.body, item.rules.key)
    prev_exact, prev_skeleton = split_raw_hash(item.previous_raw_hash)
    if item.previous_hash is not None and exact == prev_exact:
        raw = exact + "." + (prev_skeleton or "")
        return exact, Verdict(item.previous_hash, raw, False, None, parsed=False)
    return exact, None


def judge(item: DetectItem, exact: str | None = None) -> Verdict:
    """Full judgement: exact check, then skeleton check, then normalize + hash."""
    if exact is None:
        exact, verdict = precheck(item)
        if verdict is not None:
            return verdict
    key = item.rules.key
    skeleton = skeleton_hash(item.body, item.content_type, key)
    raw = exact + "." + skeleton
    _, prev_skeleton = split_raw_hash(item.previous_raw_hash)
    if item.previous_hash is not None and skeleton == prev_skeleton:
        return Verdict(item.previous_hash, raw, False, None, parsed=False)
    data, _ = extract(item.body, item.content_type, item.rules)
    digest = content_hash(data)
    changed = None if item.previous_hash is None else digest != item.previous_hash
    if not changed:  # a miss, or a baseline: nobody needs the text
        return Verdict(digest, raw, changed, None)
    return Verdict(digest, raw, changed, data)  # the text as extracted, or the bytes


def judge_batch(batch: list[tuple[DetectItem, str]]) -> list[Verdict]:
    """Worker entry point: items that failed the exact pre-check, with their exact hashes."""
    return [judge(item, exact) for item, exact in batch]
