"""A hostile web server on loopback, for the tests and benchmarks that check the crawler holds up.

Written on raw asyncio streams, not a web framework: a hostile server must be able to do what
frameworks will not (trickle its status line and headers a byte at a time, send a body that
never ends, lie about its encoding). One server answers on one address and port; give it a
different loopback address (127.0.0.2, 127.0.0.3, ...) per host a test needs.

Paths:

* ``/page/N``        a small ordinary HTML page (it changes when ``versions[N]`` is raised);
* ``/bomb``          a gzip bomb: ``bomb_bytes`` of zeros, compressed (about 1000:1);
* ``/endless``       a chunked body that never ends;
* ``/oversized``     a chunked body of ``oversized_bytes``, then a proper end;
* ``/corrupt-gzip``  ``Content-Encoding: gzip`` over bytes that are not gzip;
* ``/limited``       429 Too Many Requests with ``Retry-After: retry_after_s``;
* ``/trickle``       the status line and headers, one byte per ``trickle_s``, never finished;
* ``/news-links``    a page linking ``/aaa.../`` (25 to 40 ``a``, then a slash) and
  ``/news/1..3``: ``(a+)+$`` takes a backtracking engine 2^n steps per link;
* ``/news/N``        an ordinary page, like ``/page/N``;
* ``/robots.txt``    per ``robots``: "none" (404), "slow" (answers after ``robots_delay_s``),
  "crawl-delay" (``Crawl-delay: crawl_delay_s``), "allow" (an empty allow-all file).

Every response closes its connection. ``served`` counts requests per path.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
from collections import Counter
from collections.abc import Awaitable, Callable
from types import TracebackType

_HEAD = "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nConnection: close\r\n"


class HostileServer:
    """``async with HostileServer(host="127.0.0.2") as s: s.url("/bomb")``."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        *,
        robots: str = "none",
        robots_delay_s: float = 30.0,
        crawl_delay_s: float = 30.0,
        trickle_s: float = 0.5,
        bomb_bytes: int = 200 << 20,
        oversized_bytes: int = 64 << 20,
        retry_after_s: int = 60,
    ) -> None:
        self.host = host
        self.robots = robots
        self.robots_delay_s = robots_delay_s
        self.crawl_delay_s = crawl_delay_s
        self.trickle_s = trickle_s
        self.bomb_bytes = bomb_bytes
        self.oversized_bytes = oversized_bytes
        self.retry_after_s = retry_after_s
        self.port = 0
        self.served: Counter[str] = Counter()
        self.versions: Counter[int] = Counter()
        self._bomb: bytes | None = None
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._routes: dict[str, Callable[[asyncio.StreamWriter], Awaitable[None]]] = {
            "/bomb": self._send_bomb,
            "/endless": self._send_endless,
            "/oversized": self._send_oversized,
            "/corrupt-gzip": self._send_corrupt_gzip,
            "/trickle": self._send_trickle,
            "/limited": self._send_limited,
            "/robots.txt": self._send_robots,
            "/news-links": self._send_redos,
        }

    def url(self, path: str) -> str:
        return f"http://{self.host}:{self.port}{path}"

    async def __aenter__(self) -> HostileServer:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    async def start(self, port: int = 0) -> None:
        self._server = await asyncio.start_server(self._handle, self.host, port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            for writer in list(self._writers):
                writer.transport.abort()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 5)
            self._server = None

    # -- the handlers ------------------------------------------------------------------------

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            path = head.split(b" ", 2)[1].decode("latin-1").split("?")[0]
            self.served[path] += 1
            if path.startswith(("/page/", "/news/")):
                await self._send_page(writer, path)
            else:
                route = self._routes.get(path)
                if route is None:
                    await _send(writer, "404 Not Found", "text/plain", b"not here\n")
                else:
                    await route(writer)
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, IndexError):
            pass
        except asyncio.CancelledError:  # the server stops: end quietly (asyncio's stream
            pass  # callback would log a cancelled handler as an error)
        finally:
            self._writers.discard(writer)
            writer.transport.abort()

    async def _send_page(self, writer: asyncio.StreamWriter, path: str) -> None:
        n = int(path.rsplit("/", 1)[1] or 0)
        body = (
            f"<html><head><title>Page {n}</title></head><body><h1>Page {n}</h1>"
            f"<p>Edition {self.versions[n]} of an ordinary page.</p></body></html>"
        ).encode()
        await _send(writer, "200 OK", "text/html; charset=utf-8", body)

    async def _send_bomb(self, writer: asyncio.StreamWriter) -> None:
        if self._bomb is None:
            self._bomb = await asyncio.to_thread(gzip.compress, b"\0" * self.bomb_bytes, 9)
        await _send(writer, "200 OK", "text/html", self._bomb, "Content-Encoding: gzip\r\n")

    async def _send_endless(self, writer: asyncio.StreamWriter) -> None:
        writer.write((_HEAD.format(status="200 OK", ctype="text/html")).encode())
        writer.write(b"Transfer-Encoding: chunked\r\n\r\n")
        block = b"<p>" + b"x" * 65_000 + b"</p>"
        chunk = f"{len(block):x}\r\n".encode() + block + b"\r\n"
        while True:
            writer.write(chunk)
            await writer.drain()

    async def _send_oversized(self, writer: asyncio.StreamWriter) -> None:
        writer.write((_HEAD.format(status="200 OK", ctype="text/html")).encode())
        writer.write(b"Transfer-Encoding: chunked\r\n\r\n")
        block = b"y" * 65_536
        chunk = f"{len(block):x}\r\n".encode() + block + b"\r\n"
        for _ in range(self.oversized_bytes // len(block)):
            writer.write(chunk)
            await writer.drain()
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    async def _send_corrupt_gzip(self, writer: asyncio.StreamWriter) -> None:
        body = b"\x1f\x8b\x08\x00" + bytes(range(256)) * 8  # a gzip magic, then garbage
        await _send(writer, "200 OK", "text/html", body, "Content-Encoding: gzip\r\n")

    async def _send_limited(self, writer: asyncio.StreamWriter) -> None:
        extra = f"Retry-After: {self.retry_after_s}\r\n"
        await _send(writer, "429 Too Many Requests", "text/plain", b"slow down\n", extra)

    async def _send_trickle(self, writer: asyncio.StreamWriter) -> None:
        head = _HEAD.format(status="200 OK", ctype="text/html") + "X-Pad: " + "z" * 10_000
        for byte in head.encode():
            writer.write(bytes([byte]))
            await writer.drain()
            await asyncio.sleep(self.trickle_s)

    async def _send_redos(self, writer: asyncio.StreamWriter) -> None:
        links = [f'<a href="/{"a" * n}/">{n}</a>' for n in range(25, 41)]
        links += [f'<a href="/news/{k}">news {k}</a>' for k in range(1, 4)]
        body = f"<html><body>{''.join(links)}</body></html>".encode()
        await _send(writer, "200 OK", "text/html; charset=utf-8", body)

    async def _send_robots(self, writer: asyncio.StreamWriter) -> None:
        if self.robots == "none":
            await _send(writer, "404 Not Found", "text/plain", b"no robots.txt\n")
        elif self.robots == "slow":
            await asyncio.sleep(self.robots_delay_s)
            await _send(writer, "200 OK", "text/plain", b"User-agent: *\nAllow: /\n")
        elif self.robots == "crawl-delay":
            text = f"User-agent: *\nCrawl-delay: {self.crawl_delay_s:g}\nAllow: /\n"
            await _send(writer, "200 OK", "text/plain", text.encode())
        else:
            await _send(writer, "200 OK", "text/plain", b"User-agent: *\nAllow: /\n")


async def _send(
    writer: asyncio.StreamWriter, status: str, ctype: str, body: bytes, extra: str = ""
) -> None:
    head = _HEAD.format(status=status, ctype=ctype) + extra
    writer.write(f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body)
    await writer.drain()
