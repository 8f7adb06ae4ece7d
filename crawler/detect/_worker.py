"""The worker process of the judging pool: read a batch, judge it, write the verdicts back.

Wire format, both ways: ``crawler.ipc``'s frames (an 8-byte length, then the payload). A
request's payload is a 4-byte length, a pickle of the jobs without their bodies (plus the
bodies' lengths), then the bodies themselves, back to back: the caller hands the bodies to
``os.writev`` as they are, without copying them into a pickle. An answer's payload is a
pickle of the ``Answer`` tuples, in the jobs' order (plain tuples pickle several times faster
than the dataclasses). The worker leaves when its input closes.
"""

from __future__ import annotations

import dataclasses
import operator
import pickle
from multiprocessing.connection import Connection
from typing import Any

from crawler.detect._judge import DetectItem, Verdict, judge
from crawler.detect._rules import WatchRules
from crawler.ipc import frame_header, own_fd, read_frame

#: (body, content_type, selector, ignore_patterns, previous_hash, previous_raw_hash, exact)
Job = tuple[bytes, str | None, str | None, tuple[str, ...], str | None, str | None, str]
#: the ``Verdict``'s fields in order (content_hash, raw_hash, changed, text, parsed, ...):
#: every field the verdict has, so one added to it crosses the pipe without a change here
Answer = tuple[Any, ...]
_VERDICT_FIELDS = tuple(f.name for f in dataclasses.fields(Verdict))
_answer_of = operator.attrgetter(*_VERDICT_FIELDS)

_META = 4


def job(item: DetectItem, exact: str) -> Job:
    rules = item.rules
    return (
        item.body,
        item.content_type,
        rules.selector,
        rules.ignore_patterns,
        item.previous_hash,
        item.previous_raw_hash,
        exact,
    )


def answer(verdict: Verdict) -> Answer:
    result: Answer = _answer_of(verdict)
    return result


def verdict(a: Answer) -> Verdict:
    return Verdict(*a)


def judge_jobs(jobs: list[Job]) -> list[Answer]:
    out: list[Answer] = []
    for body, ctype, selector, patterns, prev, prev_raw, exact in jobs:
        rules = WatchRules.of(selector, patterns)
        out.append(answer(judge(DetectItem(body, ctype, rules, prev, prev_raw), exact)))
    return out


def encode_jobs(jobs: list[Job]) -> list[bytes]:
    """A request frame as parts for ``os.writev``: header, meta, then every body uncopied."""
    meta = pickle.dumps([(len(j[0]), *j[1:]) for j in jobs], pickle.HIGHEST_PROTOCOL)
    total = _META + len(meta) + sum(len(j[0]) for j in jobs)
    head = frame_header(total) + len(meta).to_bytes(_META, "big")
    return [head, meta, *(j[0] for j in jobs)]


def decode_jobs(payload: bytes) -> list[Job]:
    size = int.from_bytes(payload[:_META], "big")
    at = _META + size
    out: list[Job] = []
    for length, *rest in pickle.loads(payload[_META:at]):
        out.append((payload[at : at + length], *rest))
        at += length
    return out


def serve(requests: Connection, answers: Connection) -> None:
    """Worker entry point (a spawned process): judge batches until the input closes."""
    source_fd, sink_fd = own_fd(requests), own_fd(answers)
    with open(source_fd, "rb", buffering=1 << 20) as source, open(sink_fd, "wb") as sink:
        while (payload := read_frame(source)) is not None:
            out = pickle.dumps(judge_jobs(decode_jobs(payload)), pickle.HIGHEST_PROTOCOL)
            try:
                sink.write(frame_header(len(out)))
                sink.write(out)
                sink.flush()
            except BrokenPipeError:
                return
