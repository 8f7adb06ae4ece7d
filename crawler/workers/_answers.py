"""Making ``PollAnswer``s: of a fetch result and its verdict, of a failure, of a deferral."""

from __future__ import annotations

from crawler.detect import DetectItem, Verdict, WatchRules
from crawler.fetch import FetchResult
from crawler.workers._types import PollAnswer, PollJob

_NO_RULES = WatchRules()


def detect_item(result: FetchResult, job: PollJob) -> DetectItem:
    """What the change detector needs to judge ``result``'s body against ``job``'s past."""
    selector, patterns = job.selector, job.ignore_patterns
    rules = _NO_RULES if selector is None and not patterns else WatchRules(selector, patterns)
    return DetectItem(
        result.body, result.content_type, rules, job.previous_hash, job.previous_raw_hash
    )


def answer_of(result: FetchResult, verdict: Verdict | None, text_bytes: int | None) -> PollAnswer:
    """The answer of a fetch result and the verdict of its body (None unless "ok"); ``text``
    of a changed page kept up to ``text_bytes`` (None: not kept). A verdict's ``truncated``
    and ``error`` (a page that could not be judged: a failed poll of that kind) are read when
    the detector sets them."""
    r = result
    if verdict is None:
        return PollAnswer(
            r.url_id, r.outcome, r.status, r.content_type, r.etag, r.last_modified, r.error_kind,
            r.error, r.duration_s, r.bytes_received, r.retry_after_s, r.final_url,
            None, None, None, None, None, "backoff" if r.outcome == "deferred" else None,
        )  # fmt: skip
    v = verdict
    failure = getattr(v, "error", None)  # a page the detector could not judge (its time budget)
    if failure is not None:
        return PollAnswer(
            r.url_id, "error", r.status, r.content_type, None, None, failure,
            getattr(v, "message", None) or failure, r.duration_s, r.bytes_received, None,
            r.final_url, None, None, None, None, None,
        )  # fmt: skip
    text = v.text[:text_bytes] if v.text is not None and text_bytes is not None else None
    return PollAnswer(
        r.url_id, r.outcome, r.status, r.content_type, r.etag, r.last_modified, r.error_kind,
        r.error, r.duration_s, r.bytes_received, r.retry_after_s, r.final_url,
        v.content_hash, v.raw_hash, v.changed, text, v.parsed, None,
        bool(getattr(v, "truncated", False)),
    )  # fmt: skip


def failed_answer(job: PollJob, message: str) -> PollAnswer:
    """An error answer (kind "other") for a poll that could not be done."""
    return PollAnswer(
        job.url_id, "error", None, None, None, None, "other", message, 0.0, 0, None, job.url,
        None, None, None, None, None,
    )  # fmt: skip


def deferred_answer(job: PollJob, reason: str) -> PollAnswer:
    """The answer of a poll not made (``reason``: a key of ``DEFERRED_REASONS``)."""
    return PollAnswer(
        job.url_id, "deferred", None, None, None, None, None, None, 0.0, 0, None, job.url,
        None, None, None, None, None, reason,
    )  # fmt: skip
