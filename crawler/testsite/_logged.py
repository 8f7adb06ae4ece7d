"""A changing site on many loopback hosts that keeps its own request log (the cluster tests).

:class:`LoggedSite` is a :class:`~crawler.testsite.ChangingSite` served on the loopback
addresses 127.0.0.1 .. 127.0.0.H (one server, bound to each address, so each address is a
separate host for the crawler: its own robots.txt, politeness and owner in a cluster). Page k
lives on host ``(k - 1) % H + 1``. Every page request is appended to the site's log as
``(wall-clock time (Unix seconds), k, version served, client)``; ``client`` is the request's
``User-Agent``. With ``answer_delay_s`` every page is answered that long after its request
arrived (a slow host: the crawler's polls outlive their slot); the request is logged on
arrival, so a request the crawler gave up on is in the log too. The cluster tests give
each worker its own user agent (the ``user_agent`` setting), so the log says which worker
asked for which page when, without trusting the crawler's own tables. (A source-port ->
process map was the alternative: it needs ``/proc`` reads racing short-lived connections;
a header set by the process itself is exact.)

``GET /_log?since=i`` returns the entries from index i on as JSON (clients are numbered;
the names come alongside), so a test running the site in another process reads the log
incrementally. :func:`site_process` starts the site in a child process (``spawn``) so the
crawl processes, the site and the test do not share an event loop.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from multiprocessing.connection import Connection

import numpy as np
from aiohttp import web
from numpy.typing import NDArray

from crawler.testsite._site import ChangingSite


@dataclass
class RequestLog:
    """The site's record of page requests: parallel lists, clients numbered."""

    t: list[float] = field(default_factory=list)
    page: list[int] = field(default_factory=list)
    version: list[int] = field(default_factory=list)
    client: list[int] = field(default_factory=list)
    clients: list[str] = field(default_factory=list)
    _index: dict[str, int] = field(default_factory=dict)

    def append(self, t: float, page: int, version: int, client: str) -> None:
        number = self._index.get(client)
        if number is None:
            number = self._index[client] = len(self.clients)
            self.clients.append(client)
        self.t.append(t)
        self.page.append(page)
        self.version.append(version)
        self.client.append(number)

    def __len__(self) -> int:
        return len(self.t)


class LoggedSite(ChangingSite):
    """A ChangingSite on ``hosts`` loopback addresses that logs every page request."""

    def __init__(
        self,
        rates: NDArray[np.float64],
        *,
        hosts: int = 1,
        answer_delay_s: float = 0.0,
        **options: object,
    ) -> None:
        if not 1 <= hosts <= 254:
            raise ValueError("hosts must be in 1..254 (127.0.0.1 .. 127.0.0.254)")
        if answer_delay_s < 0:
            raise ValueError("answer_delay_s must not be negative")
        super().__init__(rates, **options)  # type: ignore[arg-type]
        self.hosts = hosts
        self.answer_delay_s = answer_delay_s
        self.log = RequestLog()

    def host_of(self, k: int) -> int:
        """The host number (the last octet) page ``k`` lives on."""
        return (k - 1) % self.hosts + 1

    def url(self, k: int) -> str:
        return f"http://127.0.0.{self.host_of(k)}:{self.port}/page/{k}"

    async def _page(self, request: web.Request) -> web.StreamResponse:
        k = int(request.match_info["k"])
        if 1 <= k <= self.n:  # on arrival: a request given up on while it waits is logged
            self.log.append(
                time.time(),  # wall clock: comparable with the crawler's polled_at
                k,
                int(self.versions[k - 1]),
                request.headers.get("User-Agent", ""),
            )
        if self.answer_delay_s:
            await asyncio.sleep(self.answer_delay_s)
        return await super()._page(request)

    async def _log(self, request: web.Request) -> web.Response:
        try:
            since = max(0, int(request.query.get("since", "0")))
        except ValueError:
            raise web.HTTPBadRequest(text="since must be an integer") from None
        log = self.log
        return web.json_response(
            {
                "since": since,
                "t": log.t[since:],
                "page": log.page[since:],
                "version": log.version[since:],
                "client": log.client[since:],
                "clients": log.clients,
                "ticks": self.ticks,
                "tick_seconds": self.tick_seconds,
            }
        )

    def app(self) -> web.Application:
        app = super().app()
        app.router.add_get("/_log", self._log)
        return app

    async def start(self, port: int = 0) -> None:
        await super().start(port)
        assert self._runner is not None
        for h in range(2, self.hosts + 1):  # the same server on more loopback addresses
            await web.TCPSite(self._runner, f"127.0.0.{h}", self.port).start()


def _serve(
    rates: NDArray[np.float64],
    hosts: int,
    tick_seconds: float,
    page_size: int,
    seed: int,
    crawl_delay: float | None,
    answer_delay_s: float,
    conn: Connection,
) -> None:
    async def main() -> None:
        site = LoggedSite(
            rates,
            hosts=hosts,
            tick_seconds=tick_seconds,
            page_size=page_size,
            seed=seed,
            crawl_delay=crawl_delay,
            answer_delay_s=answer_delay_s,
        )
        await site.start()
        conn.send(site.port)
        await asyncio.get_running_loop().run_in_executor(None, conn.recv)
        await site.stop()

    asyncio.run(main())


@contextmanager
def site_process(
    rates: NDArray[np.float64],
    *,
    hosts: int,
    tick_seconds: float,
    page_size: int = 2_000,
    seed: int = 0,
    crawl_delay: float | None = None,
    answer_delay_s: float = 0.0,
) -> Iterator[int]:
    """Run a :class:`LoggedSite` in a child process; yields its port (on every host).
    ``crawl_delay``: every host's robots.txt Crawl-delay (None: none); ``answer_delay_s``:
    every page answered that long after its request."""
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(
        target=_serve,
        args=(
            np.asarray(rates, dtype=np.float64),
            hosts,
            tick_seconds,
            page_size,
            seed,
            crawl_delay,
            answer_delay_s,
            child,
        ),
        daemon=True,
    )
    proc.start()
    try:
        if not parent.poll(120):
            raise RuntimeError("the logged site did not start within 120 s")
        yield int(parent.recv())
    finally:
        with suppress(OSError):
            parent.send("stop")
        proc.join(10)
        if proc.is_alive():
            proc.terminate()
            proc.join(5)
