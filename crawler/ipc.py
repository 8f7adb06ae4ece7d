"""Talking to a worker process over two pipes: the framing, and the parent's end of it.

The judging pool (``crawler.detect``) and the crawl workers (``crawler.workers``) both run
worker processes that read request frames from one pipe and write one answer frame per request,
in order, to another. A frame is an 8-byte big-endian length, then the payload; an answer's
payload is a pickled list. Each kind of worker chooses its requests' encoding (the judging
worker sends page bodies uncopied after a small pickle; the crawl workers send a plain pickle).

A worker may also send frames of its own, unasked (a crawl worker's answers of polls that
outlived their batch's deadline): their payload is a pickled tuple, never a list, and they
go to the ``extra`` callback instead of a request's future.

``PipeWorker`` is the parent's end, driven by the event loop itself: no helper threads.
``concurrent.futures.ProcessPoolExecutor`` pickles and writes in a feeder thread and reads in a
manager thread; both compete with the crawl loop for the GIL (and every hand-over can cost the
loop a switch interval). Here the loop writes each batch to the worker's pipe without blocking
(``add_writer`` finishes big batches) and reads the answers with ``add_reader``. A worker that
dies fails its outstanding batches with ``WorkerLostError``.

Workers start from a fork server where the platform has one (Linux, macOS): a process
started once, on the first worker, that has imported that worker's module; each worker is
then a fork of it (``start_context``; the delivery process starts from it too). A spawned
worker is a new interpreter importing the crawler, aiohttp and the detection's parsers:
0.2-0.3 s of CPU and 0.5-1 s of wall time per worker on this 2-core machine (2026-11-27),
paid at every service start, every restart of a dead worker, and by every test that starts
a service; a fork of the server costs milliseconds. As with spawn, a worker inherits
nothing of the parent's memory (the server is a fresh interpreter), only its environment
and standard streams as they were when the server started.

Imports nothing of the project.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import multiprocessing
import os
import pickle
import sys
from collections import deque
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:  # ForkServerContext is not defined on Windows
    from multiprocessing.context import ForkServerContext, SpawnContext

#: bytes of a frame's length header
HEADER = 8


def frame_header(size: int) -> bytes:
    """The header of a frame whose payload is ``size`` bytes."""
    return size.to_bytes(HEADER, "big")


def encode_pickle(items: Any) -> list[bytes]:
    """A frame holding ``items`` pickled, as parts for ``os.writev``."""
    payload = pickle.dumps(items, pickle.HIGHEST_PROTOCOL)
    return [frame_header(len(payload)), payload]


def own_fd(conn: Connection) -> int:
    """A file descriptor of our own for ``conn``'s pipe end (``conn`` is closed)."""
    fd = os.dup(conn.fileno())
    conn.close()
    return fd


def read_frame(stream: IO[bytes]) -> bytes | None:
    """The next frame's payload from a blocking stream; None at its end (or a cut frame)."""
    header = _read_exactly(stream, HEADER)
    if header is None:
        return None
    return _read_exactly(stream, int.from_bytes(header, "big"))


def _read_exactly(stream: IO[bytes], n: int) -> bytes | None:
    data = stream.read(n)
    return data if data is not None and len(data) == n else None


async def read_frame_async(reader: asyncio.StreamReader) -> bytes | None:
    """The next frame's payload from a stream reader; None when the pipe closes."""
    try:
        size = int.from_bytes(await reader.readexactly(HEADER), "big")
        return await reader.readexactly(size)
    except (asyncio.IncompleteReadError, ConnectionError):
        return None


def write_frame(fd: int, payload: bytes) -> None:
    """Write one frame to a blocking file descriptor (``BrokenPipeError`` if its reader left)."""
    data = memoryview(frame_header(len(payload)) + payload)
    while data:
        data = data[os.write(fd, data) :]


#: Linux fcntl F_SETPIPE_SZ, and the pipe size asked for (a batch in one write)
_F_SETPIPE_SZ = 1031
_PIPE_BYTES = 1 << 20
_READ_BYTES = 1 << 20
#: buffers per writev (Linux allows 1024)
_IOV_MAX = 512


class WorkerLostError(RuntimeError):
    """A worker process exited (or its pipe broke) with batches outstanding."""


def widen_pipe(fd: int) -> None:
    """Best effort: where not possible (not Linux, a lower pipe-max-size) nothing changes."""
    try:
        import fcntl

        fcntl.fcntl(fd, _F_SETPIPE_SZ, _PIPE_BYTES)
    except (ImportError, OSError, ValueError):
        pass


#: the workers' modules, imported by the fork server when it starts (the first worker's)
_preload: list[str] = []


def preload(module: str) -> None:
    """Have the fork server import ``module`` (one of worker targets) when it starts, ahead
    of the first worker that runs it. The server imports only what it was given when it
    started: a worker whose module came later imports it itself at each start (the
    listing worker's discovery and feed parsers: 0.4 s of CPU, 1-2 s under load, at every
    restart after a read past its deadline; a crawl worker's aiohttp, after a judging pool
    had started the server: 7% of the fast lane's CPU), where a fork of a server that has
    it costs milliseconds. So each module that starts pools of workers names its target's
    module here when it is imported, before any worker can start. The delivery process
    does not: it starts once per service, and its notification libraries would cost every
    fork server 1.3 s of CPU to import where no delivery runs."""
    if module not in _preload:
        _preload.append(module)
        if "forkserver" in multiprocessing.get_all_start_methods():
            multiprocessing.get_context("forkserver").set_forkserver_preload(list(_preload))


def start_context(target: Callable[..., None]) -> ForkServerContext | SpawnContext:
    """The context a worker running ``target`` starts from: the fork server where there is
    one (not yet running, it imports ``target``'s module and those given to ``preload``
    before its first fork), else spawn."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    preload(target.__module__)
    return multiprocessing.get_context("forkserver")


@contextlib.contextmanager
def main_not_imported() -> Iterator[None]:
    """Start a worker without it importing the parent's ``__main__`` module.

    A spawned child (or a fork server's) imports the parent's main module first (by module
    name, or by path), so that pickled functions of it resolve. Our workers' targets live in
    this package, and the parent's main is often heavy (the ``crawler`` command imports the
    whole CLI, the store, the schedulers: seconds per worker on a busy start). While
    ``start()`` takes its preparation data, the main module shows neither a module spec nor
    a file."""
    main = sys.modules["__main__"]
    saved = {k: main.__dict__[k] for k in ("__spec__", "__file__") if k in main.__dict__}
    main.__dict__["__spec__"] = None
    main.__dict__.pop("__file__", None)
    try:
        yield
    finally:
        main.__dict__.pop("__spec__", None)
        main.__dict__.update(saved)


class PipeWorker:
    """One process, its two pipes, and the futures of its batches in order.

    The process runs ``target(requests, answers, *args)`` (two ``Connection`` ends); it reads
    request frames made by ``encode`` and writes one answer frame (a pickled list) per request,
    in order."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        target: Callable[..., None],
        encode: Callable[[Any], list[bytes]],
        args: tuple[Any, ...] = (),
        extra: Callable[[Any], None] | None = None,
    ) -> None:
        """``extra``: sees every frame whose payload is a tuple (not a request's answer: a
        message the worker sends by itself), and None when the worker is lost."""
        ctx = start_context(target)
        req_r, req_w = ctx.Pipe(duplex=False)
        ans_r, ans_w = ctx.Pipe(duplex=False)
        self.process = ctx.Process(target=target, args=(req_r, ans_w, *args), daemon=True)
        with main_not_imported():
            self.process.start()
        req_r.close()
        ans_w.close()
        self.loop = loop
        self.encode = encode
        self.extra = extra
        self.out_fd = own_fd(req_w)
        self.in_fd = own_fd(ans_r)
        widen_pipe(self.out_fd)
        widen_pipe(self.in_fd)
        os.set_blocking(self.out_fd, False)
        os.set_blocking(self.in_fd, False)
        self.waiting: deque[tuple[asyncio.Future[list[Any]], int]] = deque()
        self.load = 0  # jobs outstanding
        self._out: deque[memoryview] = deque()
        self._writing = False
        self._in = bytearray()
        self._need = 0
        self._header = True
        self.alive = True
        loop.add_reader(self.in_fd, self._readable)

    def submit(self, request: Any, size: int | None = None) -> asyncio.Future[list[Any]]:
        """Send ``request`` (encoded by ``encode``); its answer comes as the future's result.
        ``size``: the jobs it holds, for ``load`` (None: ``len(request)``)."""
        future: asyncio.Future[list[Any]] = self.loop.create_future()
        if not self.alive:
            future.set_exception(WorkerLostError("worker process is gone"))
            return future
        size = len(request) if size is None else size
        self.waiting.append((future, size))
        self.load += size
        self._out.extend(memoryview(part) for part in self.encode(request) if part)
        if not self._writing:
            self._flush()
        return future

    def send(self, request: Any) -> None:
        """Send ``request`` without waiting for an answer (the worker sends none)."""
        if self.alive:
            self._out.extend(memoryview(part) for part in self.encode(request) if part)
            if not self._writing:
                self._flush()

    def _flush(self) -> None:
        """Write what is queued, as far as the pipe takes it without blocking; the event loop
        calls again when it has room."""
        out = self._out
        while out:
            try:
                sent = os.writev(self.out_fd, list(itertools.islice(out, _IOV_MAX)))
            except BlockingIOError:
                break
            except OSError:
                self._lost()
                return
            while sent and sent >= len(out[0]):
                sent -= len(out.popleft())
            if sent:
                out[0] = out[0][sent:]
                break  # a partial write: the pipe is full
        if out and not self._writing:
            self._writing = True
            self.loop.add_writer(self.out_fd, self._flush)
        elif not out and self._writing:
            self._writing = False
            self.loop.remove_writer(self.out_fd)

    def _readable(self) -> None:
        try:
            data = os.read(self.in_fd, _READ_BYTES)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._lost()
            return
        self._in += data
        while True:
            if self._header:
                if len(self._in) < HEADER:
                    return
                self._need = int.from_bytes(self._in[:HEADER], "big")
                del self._in[:HEADER]
                self._header = False
            if len(self._in) < self._need:
                return
            chunk = self._in[: self._need]
            del self._in[: self._need]
            self._header = True
            result = pickle.loads(chunk)
            if self.extra is not None and type(result) is tuple:
                self.extra(result)
                continue
            future, size = self.waiting.popleft()
            self.load -= size
            if not future.done():
                future.set_result(result)

    def _lost(self) -> None:
        if not self.alive:
            return
        self.alive = False
        self._detach()
        while self.waiting:
            future, _ = self.waiting.popleft()
            if not future.done():
                future.set_exception(WorkerLostError("worker process exited"))
        self.load = 0
        if self.extra is not None:
            self.extra(None)

    def _detach(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.remove_reader(self.in_fd)
        self.loop.remove_writer(self.out_fd)

    def close(self, wait: bool) -> None:
        """Close the pipes (the worker then leaves by itself); reap or kill the process."""
        if self.alive:
            self.alive = False
            self._detach()
        for fd in (self.out_fd, self.in_fd):
            with contextlib.suppress(OSError):
                os.close(fd)
        self.out_fd = self.in_fd = -1
        for future, _ in self.waiting:
            if not future.done() and not future.get_loop().is_closed():
                future.cancel()
        self.waiting.clear()
        self.process.join(5.0 if wait else 0.0)
        if self.process.is_alive():
            self.process.terminate()
            self.process.join(1.0)
