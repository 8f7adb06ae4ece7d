"""The worker process of the judging pool: read a batch, judge it, write the verdicts back.

Wire format, both ways: an 8-byte big-endian length, then the payload. A request's payload is
a 4-byte length, a pickle of the jobs without their bodies (plus the bodies' lengths), then the
bodies themselves, back to back: the caller hands the bodies to ``os.writev`` as they are,
without copying them into a pickle. An answer's payload is a pickle of the ``Answer`` tuples,
in the jobs' order (plain tuples pickle several times faster than the dataclasses). The worker
leaves when its input closes.
"""

from __future__ import annotations

import os
import pickle
from multiprocessing.connection import Connection
from typing import IO

from crawler.detect._judge import DetectItem, Verdict, judge
from crawler.detect._rules import WatchRules

#: (body, content_type, selector, ignore_patterns, previous_hash, previous_raw_hash, exact)
Job = tuple[bytes, str | None, str | None, tuple[str, ...], str | None, str | None, str]
#: (content_hash, raw_hash, changed, text, parsed, truncated, error, message)
Answer = tuple[str, str, bool | None, bytes | None, bool, bool, str | None, str | None]

HEADER = 8
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
    v = verdict
    return (
        v.content_hash, v.raw_hash, v.changed, v.text, v.parsed, v.truncated, v.error, v.message,
    )  # fmt: skip


def verdict(a: Answer) -> Verdict:
    return Verdict(*a)


def judge_jobs(jobs: list[Job]) -> list[Answer]:
    out: list[Answer] = []
    for body, ctype, selector, patterns, prev, prev_raw, exact in jobs:
        rules = WatchRules.of(selector, patterns)
        out.append(answer(judge(DetectItem(body, ctype, rules, prev, prev_raw), exact)))
    return out


def frame(payload: bytes) -> bytes:
    return len(payload).to_bytes(HEADER, "big")


def encode_jobs(jobs: list[Job]) -> list[bytes]:
    """A request frame as parts for ``os.writev``: header, meta, then every body uncopied."""
    meta = pickle.dumps([(len(j[0]), *j[1:]) for j in jobs], pickle.HIGHEST_PROTOCOL)
    total = _META + len(meta) + sum(len(j[0]) for j in jobs)
    head = total.to_bytes(HEADER, "big") + len(meta).to_bytes(_META, "big")
    return [head, meta, *(j[0] for j in jobs)]


def decode_jobs(payload: bytes) -> list[Job]:
    size = int.from_bytes(payload[:_META], "big")
    at = _META + size
    out: list[Job] = []
    for length, *rest in pickle.loads(payload[_META:at]):
        out.append((payload[at : at + length], *rest))
        at += length
    return out


def own_fd(conn: Connection) -> int:
    """A file descriptor of our own for ``conn``'s pipe end (``conn`` is closed)."""
    fd = os.dup(conn.fileno())
    conn.close()
    return fd


def _read_exactly(stream: IO[bytes], n: int) -> bytes | None:
    data = stream.read(n)
    return data if data is not None and len(data) == n else None


def serve(requests: Connection, answers: Connection) -> None:
    """Worker entry point (a spawned process): judge batches until the input closes."""
    source_fd, sink_fd = own_fd(requests), own_fd(answers)
    with open(source_fd, "rb", buffering=1 << 20) as source, open(sink_fd, "wb") as sink:
        while True:
            header = _read_exactly(source, HEADER)
            if header is None:
                return
            payload = _read_exactly(source, int.from_bytes(header, "big"))
            if payload is None:
                return
            out = pickle.dumps(judge_jobs(decode_jobs(payload)), pickle.HIGHEST_PROTOCOL)
            try:
                sink.write(frame(out))
                sink.write(out)
                sink.flush()
            except BrokenPipeError:
                return
