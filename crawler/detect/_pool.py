"""A pool of judging processes driven by the event loop itself: no helper threads.

``concurrent.futures.ProcessPoolExecutor`` pickles and writes in a feeder thread and reads in
a manager thread; both compete with the crawl loop for the GIL (and every hand-over can cost
the loop a switch interval). Here the loop writes each batch to a worker's pipe without
blocking (``add_writer`` finishes big batches) and reads the answers with ``add_reader``.
A worker that dies fails its outstanding batches with ``WorkerLostError``; the pool is then
discarded and the caller judges inline.
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
from typing import Any

from crawler.detect._worker import HEADER, encode_jobs, own_fd, serve

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


@contextlib.contextmanager
def _main_not_imported() -> Iterator[None]:
    """Start a spawned worker without it importing the parent's ``__main__`` module.

    A spawned child imports the parent's main module first (by module name, or by path), so
    that pickled functions of it resolve. Our workers' targets live in this package, and the
    parent's main is often heavy (the ``crawler`` command imports the whole CLI, the store, the
    schedulers: seconds per worker on a busy start). While ``start()`` takes its preparation
    data, the main module shows neither a module spec nor a file."""
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
    in order. The defaults are the judging worker's."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        target: Callable[..., None] = serve,
        args: tuple[Any, ...] = (),
        encode: Callable[[list[Any]], list[bytes]] = encode_jobs,
    ) -> None:
        ctx = multiprocessing.get_context("spawn")
        req_r, req_w = ctx.Pipe(duplex=False)
        ans_r, ans_w = ctx.Pipe(duplex=False)
        self.process = ctx.Process(target=target, args=(req_r, ans_w, *args), daemon=True)
        with _main_not_imported():
            self.process.start()
        req_r.close()
        ans_w.close()
        self.loop = loop
        self.encode = encode
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

    def submit(self, jobs: list[Any]) -> asyncio.Future[list[Any]]:
        future: asyncio.Future[list[Any]] = self.loop.create_future()
        if not self.alive:
            future.set_exception(WorkerLostError("worker process is gone"))
            return future
        self.waiting.append((future, len(jobs)))
        self.load += len(jobs)
        self._out.extend(memoryview(part) for part in self.encode(jobs) if part)
        if not self._writing:
            self._flush()
        return future

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
            future, size = self.waiting.popleft()
            self.load -= size
            if not future.done():
                future.set_result(pickle.loads(chunk))

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


class WorkerPool:
    """``size`` judging processes bound to the running event loop."""

    def __init__(self, size: int) -> None:
        self.loop = asyncio.get_running_loop()
        self.workers = [PipeWorker(self.loop) for _ in range(size)]

    @property
    def usable(self) -> bool:
        return all(w.alive for w in self.workers) and asyncio.get_running_loop() is self.loop

    async def ready(self) -> None:
        """Wait until every worker answers (spawning takes a second or two)."""
        await asyncio.gather(*(w.submit([]) for w in self.workers))

    async def judge(self, jobs: list[Any], parts: int) -> list[Any]:
        """The answers of ``jobs``, in order, split in up to ``parts`` batches over the
        least-loaded workers. Raises ``WorkerLostError`` if a worker died meanwhile."""
        parts = max(1, min(parts, len(jobs)))
        size = -(-len(jobs) // parts)
        futures = []
        for k in range(0, len(jobs), size):
            worker = min(self.workers, key=_load)
            futures.append(worker.submit(jobs[k : k + size]))
        done: list[Any] = await asyncio.gather(*futures)
        return [a for part in done for a in part]

    def close(self, wait: bool = True) -> None:
        for worker in self.workers:
            worker.close(wait)


def _load(worker: PipeWorker) -> int:
    return worker.load if worker.alive else 1 << 62
