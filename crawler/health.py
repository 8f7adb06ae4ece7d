"""The service's HTTP side door: ``GET /metrics`` and ``GET /healthz``, on its own event loop.

``start_http_server`` binds an aiohttp server on the running loop (no thread) and returns
an :class:`AsyncServer` whose ``close()`` stops it::

    server = await start_http_server("127.0.0.1", 9410, metrics.registry, loop_is_alive)
    ...
    await server.close()

``/metrics`` serves the Prometheus text exposition (or OpenMetrics when the scraper asks
for it), gzip-compressed when the client accepts gzip. ``/healthz`` answers ``200 ok``
while ``is_healthy()`` is true, else ``503`` with a one-line reason. ``is_healthy`` may
return a bool or a ``(bool, reason)`` pair; an exception it raises is a 503 too.

``install`` (optional) adds more routes to the same application: the service passes the
change feed and API's (``crawler.api.ChangeApi.install``), so that this module knows nothing
of the store.
"""

from __future__ import annotations

import gzip
from collections.abc import Callable
from dataclasses import dataclass

from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

__all__ = ["AsyncServer", "HealthCheck", "Installer", "make_app", "start_http_server"]

#: ``() -> bool`` or ``() -> (bool, reason)``.
HealthCheck = Callable[[], "bool | tuple[bool, str]"]
#: adds routes (and middlewares) to the application before it starts
Installer = Callable[[web.Application], None]

_GZIP_MIN_BYTES = 1024


def make_app(
    registry: CollectorRegistry, is_healthy: HealthCheck, install: Installer | None = None
) -> web.Application:
    """The aiohttp application serving ``/metrics`` and ``/healthz`` (and what ``install``
    adds)."""

    async def metrics(request: web.Request) -> web.Response:
        encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
        body = encoder(registry)
        headers = {"Content-Type": content_type}
        accept_encoding = request.headers.get("Accept-Encoding", "")
        if len(body) >= _GZIP_MIN_BYTES and "gzip" in accept_encoding.lower():
            body = gzip.compress(body, compresslevel=1)
            headers["Content-Encoding"] = "gzip"
        return web.Response(body=body, headers=headers)

    async def healthz(request: web.Request) -> web.Response:
        try:
            verdict = is_healthy()
        except Exception as exc:  # a broken probe means "not healthy", never a 500
            return web.Response(status=503, text=f"unhealthy: health check raised {exc!r}\n")
        if isinstance(verdict, tuple):
            ok, reason = verdict
        else:
            ok, reason = bool(verdict), "the crawl loop is not running"
        if ok:
            return web.Response(text="ok\n")
        return web.Response(status=503, text=f"unhealthy: {reason}\n")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    if install is not None:
        install(app)
    return app


@dataclass
class AsyncServer:
    """A running metrics/health server; ``port`` is the bound port (useful with port 0)."""

    runner: web.AppRunner
    host: str
    port: int

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    async def close(self) -> None:
        """Stop listening and close open connections (idempotent)."""
        await self.runner.cleanup()


async def start_http_server(
    host: str,
    port: int,
    registry: CollectorRegistry,
    is_healthy: HealthCheck,
    install: Installer | None = None,
) -> AsyncServer:
    """Serve ``/metrics`` and ``/healthz`` (and what ``install`` adds) on ``host:port``
    (0 = any free port)."""
    runner = web.AppRunner(make_app(registry, is_healthy, install), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    try:
        await site.start()
    except BaseException:
        await runner.cleanup()
        raise
    bound_port = port
    for address in runner.addresses:
        if isinstance(address, tuple) and len(address) >= 2:
            bound_port = int(address[1])
            break
    return AsyncServer(runner=runner, host=host, port=bound_port)
