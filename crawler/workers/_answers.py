"""Making ``PollAnswer``s: of a fetch result and its verdict, of a failure, of a deferral."""

from __future__ import annotations

from crawler.detect import DetectItem, Verdict, WatchRules, cut_snapshot
from crawler.fetch import FetchResult
from crawler.workers._types import PollAnswer, PollJob


def detect_item(result: FetchResult, job: PollJob) -> DetectItem:
    """What the change detector needs to judge ``result``'s body against ``job``'s past."""
    rules = WatchRules.of(job.selector, job.ignore_patterns)
    return DetectItem(
        result.body, result.content_type, rules, job.previous_hash, job.previous_raw_hash
    )


def answer_of(result: FetchResult, verdict: Verdict | None, text_bytes: int | None) -> PollAnswer:
    """The answer of a fetch result and the verdict of its body (None unless "ok"); ``text``
    of a changed page cut to ``text_bytes`` (``crawler.detect.cut_snapshot``: None keeps it
    whole, 0 keeps none). A verdict's ``error`` (a page that could not be judged) makes a
    failed poll of that kind; its ``truncated`` (cut at a parse limit) is carried along."""
    r = result
    if verdict is None:
        return PollAnswer(
            r.url_id, r.outcome, r.status, r.content_type, r.etag, r.last_modified, r.error_kind,
            r.error, r.duration_s, r.bytes_received, r.retry_after_s, r.final_url,
            None, None, None, None, None, "backoff" if r.outcome == "deferred" else None,
            host_delay_s=r.host_delay_s, date=r.date,
        )  # fmt: skip
    v = verdict
    failure = v.error  # a page the detector could not judge (its rules, its time budget)
    if failure is not None:
        return PollAnswer(
            r.url_id, "error", r.status, r.content_type, None, None, failure,
            v.message or failure, r.duration_s, r.bytes_received, None,
            r.final_url, None, None, None, None, None, host_delay_s=r.host_delay_s,
        )  # fmt: skip
    text = cut_snapshot(v.text, text_bytes)
    return PollAnswer(
        r.url_id, r.outcome, r.status, r.content_type, r.etag, r.last_modified, r.error_kind,
        r.error, r.duration_s, r.bytes_received, r.retry_after_s, r.final_url,
        v.content_hash, v.raw_hash, v.changed, text, v.parsed, None,
        v.truncated, r.host_delay_s, date=r.date,
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


def running_answer(job: PollJob) -> PollAnswer:
    """The placeholder of a poll still in flight at its batch's deadline that goes on (outcome
    "running": its real answer follows later in the same stream; not a poll yet)."""
    return PollAnswer(
        job.url_id, "running", None, None, None, None, None, None, 0.0, 0, None, job.url,
        None, None, None, None, None,
    )  # fmt: skip


def body_answer(result: FetchResult) -> PollAnswer:
    """The answer of a discovery poll (``PollJob.want_body``): not judged; the body of an "ok"
    fetch comes back with it."""
    answer = answer_of(result, None, None)
    return answer._replace(body=result.body) if result.outcome == "ok" else answer


def kept_body(answer: PollAnswer, result: FetchResult, job: PollJob) -> PollAnswer:
    """``answer`` with the body of a ``keep_body`` job that was fetched and found changed (or
    polled for the first time); any other answer as it is."""
    if job.keep_body and answer.outcome == "ok" and answer.changed is not False:
        return answer._replace(body=result.body)
    return answer
