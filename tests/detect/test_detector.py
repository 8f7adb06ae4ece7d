"""ChangeDetector: baseline, hits, misses, the raw-hash pre-checks, the process pool."""

from __future__ import annotations

import pytest

from crawler.detect import (
    ChangeDetector,
    DetectItem,
    WatchRules,
    judge,
    raw_hash,
    readable_text,
)
from tests.detect.pages import page

HTML = "text/html"


def test_judge_baseline_then_miss_then_hit() -> None:
    base = judge(DetectItem(page(1), HTML))
    # a baseline keeps its readable text: the before of the URL's first change
    assert base.changed is None and base.parsed
    assert base.text == readable_text(page(1), HTML)
    same = judge(DetectItem(page(1), HTML, previous_hash=base.content_hash))
    assert same.changed is False and same.text is None
    hit = judge(DetectItem(page(1, extra_text="new!"), HTML, previous_hash=base.content_hash))
    assert hit.changed is True and hit.text is not None and b"new!" in hit.text


def test_exact_precheck_skips_parsing() -> None:
    body = page(3)
    base = judge(DetectItem(body, HTML))
    again = judge(DetectItem(body, HTML, previous_hash=base.content_hash,
                             previous_raw_hash=base.raw_hash))  # fmt: skip
    assert again.changed is False and not again.parsed
    assert again.content_hash == base.content_hash and again.raw_hash == base.raw_hash


def test_skeleton_precheck_skips_parsing_of_nonce_only_changes() -> None:
    base = judge(DetectItem(page(3, nonce=1), HTML))
    nonce = judge(DetectItem(page(3, nonce=2), HTML, previous_hash=base.content_hash,
                             previous_raw_hash=base.raw_hash))  # fmt: skip
    assert nonce.changed is False and not nonce.parsed
    assert nonce.raw_hash != base.raw_hash  # exact part differs, skeleton part equal


def test_skeleton_ignores_noscript_and_template_nonces() -> None:
    def body(nonce: int) -> bytes:
        extra = f"<noscript>enable scripts {nonce}</noscript><template>t {nonce}</template>"
        return page(6).replace(b"</body>", extra.encode() + b"</body>")

    base = judge(DetectItem(body(1), HTML))
    again = judge(DetectItem(body(2), HTML, previous_hash=base.content_hash,
                             previous_raw_hash=base.raw_hash))  # fmt: skip
    assert again.changed is False and not again.parsed


def test_stale_raw_hash_never_hides_a_change() -> None:
    base = judge(DetectItem(page(4), HTML))
    changed = page(4, extra_text="visible change")
    v = judge(DetectItem(changed, HTML, previous_hash=base.content_hash,
                         previous_raw_hash=base.raw_hash))  # fmt: skip
    assert v.changed is True and v.parsed


def test_rules_are_part_of_the_raw_hash() -> None:
    body = page(5)
    assert raw_hash(body, HTML) != raw_hash(body, HTML, WatchRules(selector="h2"))


def test_binary_content() -> None:
    blob = bytes(range(256)) * 100
    base = judge(DetectItem(blob, "application/octet-stream"))
    flipped = blob[:-1] + b"\x00"
    v = judge(DetectItem(flipped, "application/octet-stream", previous_hash=base.content_hash))
    assert v.changed is True


def _items(n: int, previous: dict[int, tuple[str, str]] | None = None) -> list[DetectItem]:
    out = []
    for i in range(n):
        prev_hash, prev_raw = (previous or {}).get(i, (None, None))
        body = page(i, nonce=1 if previous is None else 2, size=8000)
        if previous is not None and i % 3 == 0:
            body = page(i, nonce=2, size=8000, extra_text=f"update {i}")
        out.append(DetectItem(body, HTML, previous_hash=prev_hash, previous_raw_hash=prev_raw))
    return out


@pytest.mark.parametrize("workers", [0, 2])
async def test_judge_many_inline_and_pool_agree(workers: int) -> None:
    with ChangeDetector(workers=workers, min_pool_batch=1) as detector:
        first = await detector.judge_many(_items(24))
        assert all(v.changed is None for v in first)
        previous = {i: (v.content_hash, v.raw_hash) for i, v in enumerate(first)}
        second = await detector.judge_many(_items(24, previous))
        unchanged = [
            DetectItem(page(i, nonce=1, size=8000), HTML, previous_hash=h, previous_raw_hash=r)
            for i, (h, r) in previous.items()
        ]
        third = await detector.judge_many(unchanged)
    assert [v.changed for v in second] == [i % 3 == 0 for i in range(24)]
    assert all(v.changed is False and not v.parsed for v in third)
    inline = ChangeDetector(workers=0).judge_inline(_items(24))
    assert [v.content_hash for v in inline] == [v.content_hash for v in first]


async def test_judge_many_empty_and_close_idempotent() -> None:
    detector = ChangeDetector(workers=2)
    assert await detector.judge_many([]) == []
    detector.close()
    detector.close()
    with pytest.raises(ValueError):
        ChangeDetector(workers=-1)


async def test_start_warms_the_pool() -> None:
    with ChangeDetector(workers=1, min_pool_batch=1) as detector:
        await detector.start()
        verdicts = await detector.judge_many([DetectItem(page(9), HTML)])
    assert verdicts[0].changed is None
    await ChangeDetector(workers=0).start()  # inline: nothing to start


async def test_pool_streams_batches_larger_than_the_pipe_and_keeps_rules() -> None:
    """Several MB per batch (the writes finish from the event loop), answers in order, and
    watch rules reach the workers."""
    rules = WatchRules(selector="p", ignore_patterns=(r"\d+ views",))
    items = [
        DetectItem(page(i, size=40_000), HTML, rules if i % 2 else WatchRules()) for i in range(120)
    ]
    with ChangeDetector(workers=2, min_pool_batch=1) as detector:
        pooled = await detector.judge_many(items)
    inline = ChangeDetector(workers=0).judge_inline(items)
    assert [(v.content_hash, v.raw_hash) for v in pooled] == [
        (v.content_hash, v.raw_hash) for v in inline
    ]


async def test_a_dead_worker_costs_one_inline_batch_then_the_pool_is_restarted() -> None:
    items = _items(24)
    with ChangeDetector(workers=2, min_pool_batch=1) as detector:
        await detector.start()
        pool = detector._pool
        assert pool is not None
        for worker in pool.workers:
            worker.process.kill()
            worker.process.join(5)
        first = await detector.judge_many(items)  # the workers are gone: judged inline
        second = await detector.judge_many(items)  # a fresh pool
        assert detector._pool is not None and detector._pool is not pool
        assert all(w.process.is_alive() for w in detector._pool.workers)
    expected = [v.content_hash for v in ChangeDetector(workers=0).judge_inline(items)]
    assert [v.content_hash for v in first] == expected
    assert [v.content_hash for v in second] == expected
