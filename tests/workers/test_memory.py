"""A crawl worker's memory comes back after polls aborted for size (bombs, endless bodies)."""

from __future__ import annotations

import psutil  # type: ignore[import-untyped]
import pytest

from crawler.fetch import FetchConfig
from crawler.testsite.hostile import HostileServer
from crawler.workers import CrawlWorkers, PollJob

CAP = 8 << 20
CONFIG = FetchConfig(
    user_agent="crawler-tests/1.0",
    timeout_s=20.0,
    per_host_concurrency=2,
    per_host_min_delay_s=0.0,
    allow_private_addresses=True,
    retries=0,
    max_body_bytes=CAP,
)
PATHS = ("/bomb", "/endless", "/oversized")


def jobs(server: HostileServer, first: int, n: int) -> list[PollJob]:
    site = f"{server.host}:{server.port}"
    return [
        PollJob(k, server.url(PATHS[k % 3]), site, None, None, None, (), None, None)
        for k in range(first, first + n)
    ]


@pytest.mark.slow  # ~20 s: 78 polls of 8 MB or more
async def test_rss_stays_bounded_after_many_polls_aborted_for_size() -> None:
    async with HostileServer(bomb_bytes=64 << 20, oversized_bytes=24 << 20) as server:
        pool = CrawlWorkers(1, CONFIG, text_bytes=None, chunk=4)
        try:
            warm = await pool.poll(jobs(server, 0, 6))
            assert [a.error_kind for a in warm] == ["too_large"] * 6
            worker = pool._workers[0]
            assert worker is not None
            process = psutil.Process(worker.process.pid)
            start = process.memory_info().rss
            peak = start
            for round_ in range(8):
                answers = await pool.poll(jobs(server, 6 + 9 * round_, 9))
                assert [a.error_kind for a in answers] == ["too_large"] * 9
                peak = max(peak, process.memory_info().rss)
            # 72 polls, each of which held 8 MB (the cap) when aborted: kept, that is 600 MB
            assert peak - start < 100 << 20, f"worker RSS grew by {(peak - start) >> 20} MB"
            assert pool.restarts == 0
        finally:
            pool.close()
        assert server.served["/bomb"] == server.served["/endless"] == 26
