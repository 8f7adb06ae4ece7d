"""SSRF protection: which IP addresses may be contacted, enforced in the DNS resolver itself.

Decisions:

* An IPv6 address that carries an IPv4 address is judged by the IPv4 address it carries:
  IPv4-mapped ``::ffff:a.b.c.d``, IPv4-translated ``::ffff:0:a.b.c.d``, IPv4-compatible
  ``::a.b.c.d`` (deprecated, still routed by some stacks), NAT64 with the well-known prefix
  ``64:ff9b::/96`` and the local-use prefix ``64:ff9b:1::/48``, 6to4 ``2002::/16`` and
  Teredo ``2001::/32`` (its server and its client, stored inverted). A NAT64 gateway or
  a relay delivers the packet to that IPv4 address, so ``64:ff9b::a9fe:a9fe`` *is*
  169.254.169.254. The local-use prefix is a /48 inside which the operator picks the
  translation prefix length (RFC 6052 allows /48, /56, /64 and /96 there), so the IPv4
  address may sit at any of four places: every reading is judged and the worst one counts.
  Of the carried addresses the worst verdict counts (a Teredo server and client).
* Always refused, even with ``allow_private`` (only an explicit allow-list entry opens
  them): link-local space and the clouds' special addresses (``CLOUD_ADDRESSES``). Letting a
  crawler reach an instance-metadata service is the classic SSRF (credentials), and some of
  these are not link-local at all: Azure's wire server 168.63.129.16 is a public address,
  Alibaba's metadata 100.100.100.200 is shared (CGN) space, Oracle's legacy metadata is
  192.0.0.192.
* Everything not globally routable (Python's ``ipaddress`` registry view) is refused unless
  ``allow_private``; the reason names the category and, for a carried address, the form.
"""

from __future__ import annotations

import functools
import ipaddress
import socket
from collections.abc import Iterable

from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import DefaultResolver

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

#: The clouds' instance-metadata and platform endpoints, by the address they answer on.
CLOUD_ADDRESSES: dict[str, str] = {
    "169.254.169.254": "instance metadata of AWS, GCP, Azure, Oracle, OpenStack and others",
    "169.254.169.253": "AWS VPC DNS resolver",
    "169.254.169.123": "AWS time sync",
    "169.254.170.2": "AWS ECS task metadata and credentials",
    "169.254.170.23": "AWS EKS Pod Identity agent",
    "169.254.0.23": "Tencent Cloud metadata",
    "168.63.129.16": "Azure wire server: platform DNS, health probes, VM agent",
    "100.100.100.200": "Alibaba Cloud metadata",
    "192.0.0.192": "Oracle Cloud legacy metadata",
    "fd00:ec2::254": "AWS instance metadata over IPv6",
    "fd00:ec2::253": "AWS VPC DNS resolver over IPv6",
    "fd00:ec2::123": "AWS time sync over IPv6",
    "fd00:ec2::23": "AWS EKS Pod Identity agent over IPv6",
    "fd20:ce::254": "GCP metadata over IPv6",
}
METADATA_ADDRESSES: frozenset[IPAddress] = frozenset(
    ipaddress.ip_address(a) for a in CLOUD_ADDRESSES
)
METADATA_REASON = "cloud metadata address"
LINK_LOCAL_REASON = "link-local address"
#: refused even when private addresses are allowed (only an allow-list entry opens them)
ALWAYS_REFUSED = frozenset({METADATA_REASON, LINK_LOCAL_REASON})
_MAX_MEMO = 8192
#: of several carried addresses, the verdict reported is the most severe
_SEVERITY = {METADATA_REASON: 0, LINK_LOCAL_REASON: 1}

_V6 = ipaddress.IPv6Network
_MAPPED = _V6("::ffff:0:0/96")
_TRANSLATED = _V6("::ffff:0:0:0/96")
_COMPATIBLE = _V6("::/96")
_NAT64 = _V6("64:ff9b::/96")
_NAT64_LOCAL = _V6("64:ff9b:1::/48")
_SIX_TO_FOUR = _V6("2002::/16")
_TEREDO = _V6("2001::/32")
_U32 = 0xFFFFFFFF


class BlockedAddressError(OSError):
    """A host resolved only to addresses the policy refuses."""


def _rfc6052(value: int, prefix_len: int) -> int:
    """The IPv4 address (an int) in an IPv6 address of an RFC 6052 prefix of that length:
    32 bits after the prefix, skipping bits 64..71 (the "u" octet)."""
    if prefix_len == 96:
        return value & _U32
    bits = f"{value:0128b}"
    return int((bits[prefix_len:64] + bits[72:])[:32], 2)


def carried_ipv4(ip: IPAddress) -> list[tuple[ipaddress.IPv4Address, str]]:
    """The IPv4 addresses an IPv6 address carries, each with the name of its form (empty
    for an IPv4 address or an IPv6 address that carries none)."""
    if not isinstance(ip, ipaddress.IPv6Address):
        return []
    v4 = ipaddress.IPv4Address
    value = int(ip)
    if ip in _MAPPED:
        return [(v4(value & _U32), "IPv4-mapped")]
    if ip in _TRANSLATED:
        return [(v4(value & _U32), "IPv4-translated")]
    if ip in _COMPATIBLE and value > 1:  # :: and ::1 are themselves
        return [(v4(value & _U32), "IPv4-compatible")]
    if ip in _NAT64:
        return [(v4(value & _U32), "NAT64")]
    if ip in _NAT64_LOCAL:
        found = {v4(_rfc6052(value, n)) for n in (48, 56, 64, 96)}
        return [(a, "local-use NAT64") for a in sorted(found)]
    if ip in _SIX_TO_FOUR:
        return [(v4((value >> 80) & _U32), "6to4")]
    if ip in _TEREDO:
        server = v4((value >> 64) & _U32)
        client = v4(~value & _U32)
        return [(client, "Teredo client"), (server, "Teredo server")]
    return []


def _own_reason(ip: IPAddress) -> str | None:
    """Why an address itself is not publicly routable (carried addresses aside)."""
    if ip in METADATA_ADDRESSES:
        return METADATA_REASON
    for attr, reason in (
        ("is_loopback", "loopback address"),
        ("is_link_local", LINK_LOCAL_REASON),
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


def judge(ip: IPAddress) -> tuple[str, str] | None:
    """``(category, explanation)`` of a refused address, None for a public one. The category
    is what the policy acts on (``ALWAYS_REFUSED``); the explanation names a carried
    address and its form."""
    if ip in METADATA_ADDRESSES:
        return METADATA_REASON, f"{METADATA_REASON} ({CLOUD_ADDRESSES[str(ip)]})"
    carried = carried_ipv4(ip)
    if not carried:
        reason = _own_reason(ip)
        return None if reason is None else (reason, reason)
    verdicts = []
    for address, form in carried:
        reason = _own_reason(address)
        if reason is not None:
            note = CLOUD_ADDRESSES.get(str(address))
            what = f"{reason} {address}" + (f" ({note})" if note else "")
            verdicts.append((reason, f"{what}, carried as {form}"))
    if not verdicts:
        return None
    return min(verdicts, key=lambda v: _SEVERITY.get(v[0], len(_SEVERITY)))


def blocked_reason(ip: IPAddress) -> str | None:
    """Why an address may not be contacted by default (None for a normal global address)."""
    verdict = judge(ip)
    return None if verdict is None else verdict[1]


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
        verdict = judge(ip)
        if verdict is None:
            return None
        if self._allow_listed(ip):
            return None
        category, reason = verdict
        if self.allow_private and category not in ALWAYS_REFUSED:
            return None
        return reason

    def _allow_listed(self, ip: IPAddress) -> bool:
        """The address is in an allowed network, or every non-public IPv4 address it carries
        is (a Teredo server is public; each reading of a local-use NAT64 address counts)."""
        if not self.allowed:
            return False
        if any(ip in net for net in self.allowed if net.version == ip.version):
            return True
        carried = carried_ipv4(ip)
        return bool(carried) and all(
            _own_reason(a) is None or any(a in net for net in self.allowed if net.version == 4)
            for a, _ in carried
        )


def numeric_host_problem(host: str) -> str | None:
    """What is wrong with a host name that is a number in disguise (None if nothing).

    A host whose last label is a number (decimal digits, or ``0x`` and hex digits: the URL
    Standard's "ends in a number" rule) is an IPv4 address to browsers and to ``getaddrinfo``
    (``inet_aton`` reads ``1234`` as 0.0.4.210 and ``0x7f.1`` as 127.0.0.1), never a DNS
    name. Only the plain dotted-quad form is accepted: the others hide which address is
    meant, from an operator reading the watch list and from the literal-address check."""
    name = host.strip("[]")
    last = name[:-1].rpartition(".")[2] if name.endswith(".") else name.rpartition(".")[2]
    lowered = last.lower()
    numeric = last.isascii() and (
        last.isdigit() or (lowered.startswith("0x") and all(c in _HEX for c in lowered[2:]))
    )
    if not numeric or ":" in name:
        return None
    try:
        if str(ipaddress.IPv4Address(name)) == name:
            return None
    except ValueError:
        pass
    try:
        meant = str(ipaddress.IPv4Address(socket.inet_aton(name.rstrip("."))))
    except OSError:
        return f"host {host!r} ends in a number but is not an IPv4 address"
    return (
        f"host {host!r} is a number: resolvers read it as the IPv4 address {meant}; "
        "write the address in dotted form if that is what is meant"
    )


_HEX = frozenset("0123456789abcdef")


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
