"""One signed POST to a destination, under the crawl's address policy.

Decisions:

* httpx's ``AsyncClient``: long-lived clients per destination origin (scheme, host,
  port), so their connections stay open between sends (keep-alive) and a pool holds only
  that destination's connections. **Several small clients, not one large one**: at each
  request httpcore looks at every connection of its pool (``has_expired``: a
  ``getpeername`` and a ``poll`` system call per idle connection), so one pool of 32
  connections cost about 36 of each per event and a third of the deliverer's profiled
  time (cProfile of a drain, docs/results.md); an origin gets
  ``max_connections / CLIENT_CONNECTIONS`` clients of ``CLIENT_CONNECTIONS`` connections
  each, and a send goes to the one with the fewest sends in flight. Python calls per
  event in a drain: 6.7 thousand with one client of 32 connections, 3.3 thousand with
  clients of 4, 2.9 thousand with clients of 1. The clients share one TLS context (each
  made its own: 66 ms of CPU to load the certificate store, 2 s for 32 clients at each
  start). Redirects not followed (a webhook that moved answers 3xx, recorded as a
  failure: a redirect could lead past the address policy), no cookies kept, ``timeout_s``
  for the whole exchange (``asyncio.timeout`` around it, since httpx's timeouts are per
  phase).
* The address policy is the fetcher's own ``AddressPolicy`` (private addresses refused
  unless ``allow_private_addresses``; cloud metadata and link-local always): every address
  the destination's host resolves to is checked before each send, and one refused address
  refuses the send. A host that is an address literal is checked as it is, without a
  lookup (a lookup is a hop to a resolver thread per send). httpx then resolves a name
  again; a DNS answer that changes between the two lookups (rebinding) is the residual
  risk, noted in docs/delivery.md.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import ssl
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx

from crawler.fetch import AddressPolicy, parse_retry_after

#: connections in one httpx client's pool (see above: the pool is scanned per request)
CLIENT_CONNECTIONS = 2
#: how much of a receiver's answer is read and kept (``crawler events``, the test command);
#: the rest is never read, however much a receiver sends
ANSWER_BYTES = 300


@dataclass(frozen=True, slots=True)
class Answer:
    """What a destination answered (``status`` None: no HTTP answer, see ``error``)."""

    status: int | None
    error: str | None = None
    retry_after: float | None = None
    text: str = ""

    @property
    def ok(self) -> bool:
        return self.status is not None and 200 <= self.status < 300


class WebhookSender:
    """Signed POSTs; ``max_connections``: open connections kept per destination origin."""

    def __init__(
        self, policy: AddressPolicy, timeout_s: float, user_agent: str, max_connections: int = 8
    ) -> None:
        self.policy = policy
        self.timeout_s = timeout_s
        self.user_agent = user_agent
        self.max_connections = max(1, max_connections)
        #: per origin: its clients, and the sends in flight on each
        self._clients: dict[tuple[str, str, int | None], list[httpx.AsyncClient]] = {}
        self._in_flight: dict[int, int] = {}
        self._tls: ssl.SSLContext | None = None

    def client(self, url: str) -> httpx.AsyncClient:
        """The long-lived client of ``url``'s origin with the fewest sends in flight (the
        origin's clients are made at its first send)."""
        parts = urlsplit(url)
        key = (parts.scheme, parts.hostname or "", parts.port)
        found = self._clients.get(key)
        if found is None:
            size = min(CLIENT_CONNECTIONS, self.max_connections)
            count = -(-self.max_connections // size)
            found = self._clients[key] = [self._new_client(size) for _ in range(count)]
        return min(found, key=lambda c: self._in_flight.get(id(c), 0))

    def _new_client(self, connections: int) -> httpx.AsyncClient:
        if self._tls is None:  # made once: loading the certificate store costs ~66 ms
            self._tls = httpx.create_ssl_context(trust_env=False)
        return httpx.AsyncClient(
            verify=self._tls,
            timeout=httpx.Timeout(self.timeout_s),
            follow_redirects=False,
            headers={"user-agent": self.user_agent, "accept-encoding": "identity"},
            trust_env=False,
            limits=httpx.Limits(max_connections=connections, max_keepalive_connections=connections),
        )

    async def refusal(self, url: str) -> str | None:
        """Why the policy refuses ``url``'s host (None: it may be contacted)."""
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            return f"not an http(s) URL: {url}"
        port = parts.port or (443 if parts.scheme == "https" else 80)
        try:
            literal = ipaddress.ip_address(parts.hostname)
        except ValueError:
            pass
        else:  # an address, not a name: nothing to look up
            return self._checked(parts.hostname, str(literal))
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(
                parts.hostname, port, type=socket.SOCK_STREAM
            )
        except OSError as exc:
            return f"cannot resolve {parts.hostname}: {exc}"
        for *_, address in infos:
            refused = self._checked(parts.hostname, str(address[0]))
            if refused is not None:
                return refused
        return None

    def _checked(self, host: str, address: str) -> str | None:
        reason = self.policy.refusal(address)
        if reason is None:
            return None
        return (
            f"{host} resolves to {address} ({reason}): refused by the address policy (see "
            "allow_private_addresses)"
        )

    async def send(self, url: str, headers: dict[str, str], body: str) -> Answer:
        refused = await self.refusal(url)
        if refused is not None:
            return Answer(None, refused)
        client = self.client(url)
        self._in_flight[id(client)] = self._in_flight.get(id(client), 0) + 1
        try:
            async with (
                asyncio.timeout(self.timeout_s),
                client.stream("POST", url, content=body.encode(), headers=headers) as response,
            ):
                head = b""
                async for chunk in response.aiter_raw():  # the start only: memory stays bounded
                    head += chunk
                    if len(head) >= ANSWER_BYTES:
                        break
        except TimeoutError:
            return Answer(None, f"no answer within {self.timeout_s:g} s")
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            return Answer(None, f"{type(exc).__name__}: {exc}".strip(": "))
        finally:
            self._in_flight[id(client)] = self._in_flight.get(id(client), 1) - 1
        retry_after = None
        if response.status_code in (429, 503):
            retry_after = parse_retry_after(response.headers.get("retry-after"))
        text = head[:ANSWER_BYTES].decode("utf-8", "replace")
        return Answer(response.status_code, None, retry_after, text)

    async def aclose(self) -> None:
        clients, self._clients = [c for cs in self._clients.values() for c in cs], {}
        self._in_flight = {}
        for client in clients:
            await client.aclose()
