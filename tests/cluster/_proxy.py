"""A TCP proxy on 127.0.0.1 that a test can cut, in both ways a database goes away.

``freeze()``: a partition. Nothing is forwarded any more in either direction, but every
socket stays open and new connections are accepted (and left waiting): the client's calls
hang, as they do when packets are dropped. ``refuse()``: a restart. Every connection is
closed and the listening socket too, so a new connection is refused. ``recover()``:
forwarding again, on the same port.

Hand-written on asyncio streams (about a hundred lines) because the test needs exactly
these three states switched at precise moments; the proxies on PyPI (toxiproxy needs its
own server binary) do not add anything here.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Coroutine
from typing import Any

CHUNK = 65_536


class TcpProxy:
    """Forwards 127.0.0.1:``port`` to ``target_host``:``target_port`` in a thread."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None
        self._flowing: asyncio.Event | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    def _run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(30)

    def start(self) -> int:
        """Start forwarding; returns the port to connect to."""
        self._thread.start()
        self._run(self._listen())
        return self.port

    async def _listen(self) -> None:
        if self._flowing is None:
            self._flowing = asyncio.Event()
        self._flowing.set()
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)
        self.port = int(self._server.sockets[0].getsockname()[1])

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        assert self._flowing is not None
        try:
            await self._flowing.wait()  # frozen: the connection waits, accepted
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            self._writers.discard(writer)
            writer.close()
            return
        self._writers.add(up_writer)
        await asyncio.gather(
            self._pump(reader, up_writer), self._pump(up_reader, writer), return_exceptions=True
        )
        for w in (writer, up_writer):
            self._writers.discard(w)
            w.close()

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        assert self._flowing is not None
        try:
            while data := await reader.read(CHUNK):
                await self._flowing.wait()  # frozen: held, neither sent nor dropped
                writer.write(data)
                await writer.drain()
        finally:
            writer.close()

    def freeze(self) -> None:
        """Stop forwarding; keep every socket open (a partition)."""
        self._run(self._freeze())

    async def _freeze(self) -> None:
        assert self._flowing is not None
        self._flowing.clear()

    def refuse(self) -> None:
        """Close every connection and stop listening (a restart: connections refused)."""
        self._run(self._refuse())

    async def _refuse(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for w in list(self._writers):
            w.transport.abort()
        self._writers.clear()

    def recover(self) -> None:
        """Listen again on the same port and forward."""
        self._run(self._listen())

    def close(self) -> None:
        self._run(self._refuse())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        with contextlib.suppress(RuntimeError):
            self._loop.close()
