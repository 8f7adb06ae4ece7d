"""Private, loopback, link-local and metadata addresses are refused, on every hop."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable

import pytest
from aiohttp import web
from aiohttp.abc import AbstractResolver, ResolveResult

from crawler.fetch import AddressPolicy, Fetcher, FetchRequest, blocked_reason
from crawler.fetch._addresses import BlockedAddressError, GuardedResolver
from tests.fetch.conftest import Site, start


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1", "10.1.2.3", "172.16.0.1", "192.168.1.1", "169.254.169.254", "169.254.1.1",
        "0.0.0.0", "224.0.0.1", "100.64.0.1", "::1", "fe80::1", "fc00::1", "fd00:ec2::254",
        "::ffff:127.0.0.1", "::ffff:169.254.169.254", "64:ff9b::a00:1", "240.0.0.1", "::",
    ],
)  # fmt: skip
def test_blocked_addresses(address: str) -> None:
    assert blocked_reason(ipaddress.ip_address(address)) is not None
    assert AddressPolicy().refusal(address) is not None
    reason = blocked_reason(ipaddress.ip_address(address))
    opened = AddressPolicy(allow_private=True).refusal(address)
    # allow_private opens private/loopback space, never metadata endpoints or link-local
    assert opened == (
        reason if reason in ("cloud metadata address", "link-local address") else None
    )


@pytest.mark.parametrize("address", ["93.184.216.34", "8.8.8.8", "2606:4700::1111"])
def test_public_addresses_allowed(address: str) -> None:
    assert AddressPolicy().refusal(address) is None


def test_allowlist_is_narrow() -> None:
    policy = AddressPolicy(allowed=("127.0.0.1/32",))
    assert policy.refusal("127.0.0.1") is None
    assert policy.refusal("127.0.0.2") is not None
    assert policy.refusal("::1") is not None
    assert policy.refusal("169.254.169.254") == "cloud metadata address"


class FakeResolver(AbstractResolver):
    """Answers every name with fixed addresses (a DNS-rebinding attacker's zone)."""

    def __init__(self, addresses: list[str]) -> None:
        self.addresses = addresses

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        return [
            ResolveResult(hostname=host, host=a, port=port, family=family, proto=0, flags=0)
            for a in self.addresses
        ]

    async def close(self) -> None:
        pass


async def test_resolver_refuses_private_answers() -> None:
    resolver = GuardedResolver(AddressPolicy(), FakeResolver(["10.0.0.5", "169.254.169.254"]))
    with pytest.raises(BlockedAddressError, match=r"evil\.example resolves to 10\.0\.0\.5"):
        await resolver.resolve("evil.example", 80)


async def test_resolver_keeps_only_public_answers() -> None:
    resolver = GuardedResolver(AddressPolicy(), FakeResolver(["127.0.0.1", "93.184.216.34"]))
    kept = await resolver.resolve("mixed.example", 80)
    assert [r["host"] for r in kept] == ["93.184.216.34"]


async def test_hostname_resolving_to_loopback_refused(
    site: Site, make_fetcher: Callable[..., Fetcher]
) -> None:
    async def page(request: web.Request) -> web.Response:
        return web.Response(text="secret")

    site.route("/", page)
    await start(site)
    assert site.server is not None
    async with make_fetcher(allowed_networks=()) as f:
        r = await f.fetch(FetchRequest(1, f"http://localhost:{site.server.port}/"))
        literal = await f.fetch(FetchRequest(2, site.url("/")))
    assert r.outcome == "error" and r.error_kind == "blocked_address", r.error
    assert literal.error_kind == "blocked_address", literal.error
    assert site.hits["/"] == 0


async def test_allow_private_addresses_setting(
    site: Site, make_fetcher: Callable[..., Fetcher]
) -> None:
    async def page(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    site.route("/", page)
    await start(site)
    assert site.server is not None
    async with make_fetcher(allowed_networks=(), allow_private_addresses=True) as f:
        r = await f.fetch(FetchRequest(1, f"http://localhost:{site.server.port}/"))
    assert r.outcome == "ok", r.error


@pytest.mark.parametrize(
    "target",
    ["http://169.254.169.254/latest/meta-data/", "http://[::1]:{port}/", "http://10.0.0.1/"],
)
async def test_redirect_to_private_address_refused(
    site: Site, make_fetcher: Callable[..., Fetcher], target: str
) -> None:
    async def hop(request: web.Request) -> web.Response:
        assert site.server is not None
        raise web.HTTPFound(target.format(port=site.server.port))

    site.route("/hop", hop)
    await start(site)
    async with make_fetcher() as f:  # 127.0.0.1 allow-listed, nothing else
        r = await f.fetch(FetchRequest(1, site.url("/hop")))
    assert r.outcome == "error" and r.error_kind == "blocked_address", r.error
    assert site.hits["/hop"] == 1
    assert r.url == site.url("/hop") and r.final_url != r.url  # the refused hop


async def test_redirect_to_hostname_resolving_private_refused(
    site: Site, make_fetcher: Callable[..., Fetcher]
) -> None:
    async def hop(request: web.Request) -> web.Response:
        assert site.server is not None
        raise web.HTTPFound(f"http://localhost:{site.server.port}/secret")

    site.route("/hop", hop)
    await start(site)
    # The first hop (literal 127.0.0.1) is allow-listed; names go through the resolver, whose
    # policy here allows nothing private: "localhost" stands for a name resolving to private space.
    async with make_fetcher() as f:
        f.resolver.policy = AddressPolicy()
        r = await f.fetch(FetchRequest(1, site.url("/hop")))
    assert r.error_kind == "blocked_address", r.error
    assert site.hits["/hop"] == 1
    assert site.hits["/secret"] == 0
