"""SSRF protection: which IP addresses may be contacted, enforced in the DNS resolver itself."""

from __future__ import annotations

import functools
import ipaddress
import socket
from collections.abc import Iterable

from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import DefaultResolver

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

#: Cloud instance-metadata endpoints (AWS/GCP/Azure/OpenStack, AWS IPv6, ECS, Alibaba).
METADATA_ADDRESSES: frozenset[IPAddress] = frozenset(
    ipaddress.ip_address(a)
    for a in ("169.254.169.254", "fd00:ec2::254", "169.254.170.2", "100.100.100.200")
)
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
METADATA_REASON = "cloud metadata address"
#: refused even when private addresses are allowed (only an allow-list entry opens them)
ALWAYS_REFUSED = frozenset({METADATA_REASON, "link-local address"})
_MAX_MEMO = 8192


class BlockedAddressError(OSError):
    """A host resolved only to addresses the policy refuses."""


def _embedded_ipv4(ip: IPAddress) -> IPAddress:
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return ip.ipv4_mapped
        if ip in _NAT64:
            return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return ip


def blocked_reason(ip: IPAddress) -> str | None:
    """Why an address is not publicly routable (None when it is a normal global address)."""
    ip = _embedded_ipv4(ip)
    if ip in METADATA_ADDRESSES:
        return METADATA_REASON
    for attr, reason in (
        ("is_loopback", "loopback address"),
        ("is_link_local", "link-local address"),
        ("is_multicast", "multicast address"),
        ("is_unspecified", "unspecified address"),
        ("is_reserved", "reserved address"),
        ("is_private", "private address"),
    ):
        if getattr(ip, attr):
            return reason
    if isinstance(ip, ipaddress.IPv6Address) and ip.is_site_local:
        return "site-local address"
    if not ip.is_global:
        return "non-global address"
    return None


class AddressPolicy:
    """Refuses non-global addresses unless ``allow_private`` or the address is allow-listed.

    Cloud metadata endpoints and link-local addresses are refused even with
    ``allow_private`` (only an explicit allow-list entry opens them): letting a crawler reach
    them is the classic SSRF, and no monitoring job needs it."""

    def __init__(self, allow_private: bool = False, allowed: Iterable[str] = ()) -> None:
        self.allow_private = allow_private
        self.allowed: tuple[IPNetwork, ...] = tuple(
            ipaddress.ip_network(n, strict=False) for n in allowed
        )
        self._memo: dict[tuple[str, bool, tuple[IPNetwork, ...]], str | None] = {}

    def refusal(self, address: str) -> str | None:
        """None if the address may be contacted, else the reason (memoized per address and
        policy settings: it runs on every hop of every fetch, and parsing is ~40 us)."""
        key = (address, self.allow_private, self.allowed)
        try:
            return self._memo[key]
        except KeyError:
            pass
        reason = self._refusal(address)
        if len(self._memo) >= _MAX_MEMO:
            self._memo.clear()
        self._memo[key] = reason
        return reason

    def _refusal(self, address: str) -> str | None:
        try:
            ip = ipaddress.ip_address(address.strip("[]").split("%", 1)[0])
        except ValueError:
            return None if self.allow_private else "not an IP address"
        reason = blocked_reason(ip)
        if reason is None:
            return None
        if any(ip in net for net in self.allowed if net.version == ip.version):
            return None
        if self.allow_private and reason not in ALWAYS_REFUSED:
            return None
        return reason


@functools.lru_cache(maxsize=8192)
def ip_literal(host: str) -> str | None:
    """The host itself if it is an IP literal (aiohttp does not resolve those); cached: it
    runs on every hop of every fetch."""
    bare = host.strip("[]")
    try:
        ipaddress.ip_address(bare.split("%", 1)[0])
    except ValueError:
        return None
    return bare


class GuardedResolver(AbstractResolver):
    """Wraps aiohttp's resolver and drops refused addresses, so every connection (including each
    redirect hop, and after DNS rebinding) only goes to addresses the policy accepts."""

    def __init__(self, policy: AddressPolicy, inner: AbstractResolver | None = None) -> None:
        self.policy = policy
        self._inner = inner  # created lazily: aiohttp's resolvers need a running loop

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        if self._inner is None:
            self._inner = DefaultResolver()
        results = await self._inner.resolve(host, port, family)
        kept = [r for r in results if self.policy.refusal(r["host"]) is None]
        if not kept and results:
            first = results[0]["host"]
            reason = self.policy.refusal(first)
            raise BlockedAddressError(f"{host.rstrip('.')} resolves to {first} ({reason})")
        return kept

    async def close(self) -> None:
        if self._inner is not None:
            await self._inner.close()
