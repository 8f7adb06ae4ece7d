"""Private, loopback, link-local and metadata addresses are refused, on every hop."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable

import pytest
from aiohttp import web
from aiohttp.abc import AbstractResolver, ResolveResult

from crawler.fetch import AddressPolicy, Fetcher, FetchRequest, blocked_reason
from crawler.fetch._addresses import (
    ALWAYS_REFUSED,
    CLOUD_ADDRESSES,
    BlockedAddressError,
    GuardedResolver,
    carried_ipv4,
    judge,
)
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
    verdict = judge(ipaddress.ip_address(address))
    assert verdict is not None
    assert blocked_reason(ipaddress.ip_address(address)) == verdict[1]
    assert AddressPolicy().refusal(address) == verdict[1]
    opened = AddressPolicy(allow_private=True).refusal(address)
    # allow_private opens private/loopback space, never metadata endpoints or link-local
    assert opened == (verdict[1] if verdict[0] in ALWAYS_REFUSED else None)


# ----- every IPv6 form that carries an IPv4 address, judged by the address it carries -----

V4 = ipaddress.IPv4Address
TEREDO_SERVER = V4("65.54.227.120")  # a public Teredo server
PUBLIC = V4("93.184.216.34")


def _v6(value: int) -> str:
    return str(ipaddress.IPv6Address(value))


def _rfc6052(prefix: int, prefix_len: int, v4: V4) -> str:
    """``v4`` inside an IPv6 prefix of that length, placed as RFC 6052 says."""
    bits = f"{int(v4):032b}"
    if prefix_len == 96:
        return _v6(prefix | int(v4))
    before = 64 - prefix_len  # bits of the address before the "u" octet (bits 64..71)
    value = prefix >> (128 - prefix_len) << (128 - prefix_len)
    value |= int(bits[:before], 2) << 64 if before else 0
    rest = bits[before:]
    value |= int(rest, 2) << (56 - len(rest))
    return _v6(value)


LOCAL_NAT64 = int(ipaddress.IPv6Address("64:ff9b:1::"))
FORMS: dict[str, Callable[[V4], str]] = {
    "IPv4-mapped": lambda a: f"::ffff:{a}",
    "IPv4-translated": lambda a: f"::ffff:0:{a}",
    "IPv4-compatible": lambda a: f"::{a}",
    "NAT64": lambda a: f"64:ff9b::{a}",
    "local-use NAT64 /48": lambda a: _rfc6052(LOCAL_NAT64, 48, a),
    "local-use NAT64 /56": lambda a: _rfc6052(LOCAL_NAT64, 56, a),
    "local-use NAT64 /64": lambda a: _rfc6052(LOCAL_NAT64, 64, a),
    "local-use NAT64 /96": lambda a: _rfc6052(LOCAL_NAT64, 96, a),
    "6to4": lambda a: _v6((0x2002 << 112) | (int(a) << 80) | 1),
    # Teredo: 2001:0:<server>:<flags>:<port obfuscated>:<client obfuscated (inverted)>
    "Teredo client": lambda a: _v6(
        (0x20010000 << 96) | (int(TEREDO_SERVER) << 64) | (0x8000 << 48) | (0x63BF << 32)
        | (~int(a) & 0xFFFFFFFF)
    ),
    "Teredo server": lambda a: _v6(
        (0x20010000 << 96) | (int(a) << 64) | (0x8000 << 48) | (0x63BF << 32)
        | (~int(PUBLIC) & 0xFFFFFFFF)
    ),
}  # fmt: skip

#: (IPv4 address, the category it is refused for, None = public)
CARRIED = [
    ("169.254.169.254", "cloud metadata address"),  # AWS/GCP/Azure/Oracle/OpenStack IMDS
    ("169.254.170.2", "cloud metadata address"),  # AWS ECS task credentials
    ("168.63.129.16", "cloud metadata address"),  # Azure wire server (a public address!)
    ("100.100.100.200", "cloud metadata address"),  # Alibaba metadata
    ("192.0.0.192", "cloud metadata address"),  # Oracle legacy metadata
    ("169.254.1.1", "link-local address"),
    ("127.0.0.1", "loopback address"),
    ("10.1.2.3", "private address"),
    ("192.168.0.1", "private address"),
    ("8.8.8.8", None),
    (str(PUBLIC), None),
]


@pytest.mark.parametrize("form", sorted(FORMS))
@pytest.mark.parametrize(("v4", "category"), CARRIED)
def test_ipv6_forms_are_judged_by_the_ipv4_they_carry(
    form: str, v4: str, category: str | None
) -> None:
    address = FORMS[form](V4(v4))
    assert (V4(v4), form.split(" /")[0]) in carried_ipv4(ipaddress.ip_address(address)), address
    verdict = judge(ipaddress.ip_address(address))
    strict, lenient = AddressPolicy(), AddressPolicy(allow_private=True)
    if form.startswith("local-use NAT64") and category not in ALWAYS_REFUSED:
        # the translation prefix length is the operator's choice: the other readings of a
        # local-use address (zeros here) are not public either, so it is refused (which
        # reading is reported is not specified), but not always
        assert verdict is not None and verdict[0] not in ALWAYS_REFUSED, (address, verdict)
        assert strict.refusal(address) is not None and lenient.refusal(address) is None
        return
    if category is None:
        assert verdict is None, (address, verdict)
        assert strict.refusal(address) is None
        return
    assert verdict is not None and verdict[0] == category, (address, verdict)
    assert v4 in verdict[1] and form.split(" /")[0] in verdict[1]  # says what and how
    assert strict.refusal(address) == verdict[1]
    expected = verdict[1] if category in ALWAYS_REFUSED else None
    assert lenient.refusal(address) == expected, address
    # an allow-list entry is the one way in, for the carried address as for the plain one
    # (a local-use NAT64 address has other, non-public readings: those are not opened)
    opened = AddressPolicy(allowed=(f"{v4}/32",)).refusal(address)
    assert (opened is None) == (not form.startswith("local-use NAT64")), (address, opened)


@pytest.mark.parametrize("address", sorted(CLOUD_ADDRESSES))
def test_cloud_addresses_are_always_refused(address: str) -> None:
    verdict = judge(ipaddress.ip_address(address))
    assert verdict is not None and verdict[0] == "cloud metadata address"
    assert CLOUD_ADDRESSES[address] in verdict[1]
    assert AddressPolicy(allow_private=True).refusal(address) == verdict[1]
    assert AddressPolicy(allowed=("10.0.0.0/8",)).refusal(address) is not None


@pytest.mark.parametrize("address", ["::1", "::"])
def test_loopback_and_unspecified_ipv6_are_not_read_as_ipv4(address: str) -> None:
    assert carried_ipv4(ipaddress.ip_address(address)) == []
    assert judge(ipaddress.ip_address(address)) in (
        ("loopback address", "loopback address"),
        ("unspecified address", "unspecified address"),
    )


@pytest.mark.parametrize("address", ["93.184.216.34", "8.8.8.8", "2606:4700::1111"])
def test_public_addresses_allowed(address: str) -> None:
    assert AddressPolicy().refusal(address) is None


def test_allowlist_is_narrow() -> None:
    policy = AddressPolicy(allowed=("127.0.0.1/32",))
    assert policy.refusal("127.0.0.1") is None
    assert policy.refusal("127.0.0.2") is not None
    assert policy.refusal("::1") is not None
    assert (policy.refusal("169.254.169.254") or "").startswith("cloud metadata address")


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
