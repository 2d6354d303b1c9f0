"""Which addresses an outbound call may reach without the operator's say-so: public ones.

An IPv6 address that carries an IPv4 address inside it reaches that IPv4 host (through a
NAT64 gateway, a 6to4 relay, or the host's own dual stack), so it is judged by the
address it embeds: `64:ff9b::7f00:1` is 127.0.0.1, and is refused as loopback.
"""

from __future__ import annotations

import ipaddress
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network

__all__ = ["Address", "Network", "embedded_ipv4", "parse", "refusal", "within"]

Address = IPv4Address | IPv6Address
Network = IPv4Network | IPv6Network

NAT64 = IPv6Network("64:ff9b::/96")  # RFC 6052's well-known prefix: the IPv4 is the last 32 bits
IPV4_COMPATIBLE = IPv6Network("::/96")  # RFC 4291's deprecated ::a.b.c.d form, same layout
# Where the IPv4 sits under a local-use NAT64 prefix (RFC 8215) depends on the operator's
# prefix length, so the whole block is private by definition: refused outright.
LOCAL_NAT64 = IPv6Network("64:ff9b:1::/48")
WHAT = "a private, loopback, link-local or reserved address"


def embedded_ipv4(address: IPv6Address) -> IPv4Address | None:
    """The IPv4 address that `address` reaches, when it embeds one."""
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address in NAT64 or address in IPV4_COMPATIBLE:
        return IPv4Address(int(address) & 0xFFFF_FFFF)
    return None


def refusal(address: Address) -> str | None:
    """None when `address` is public; otherwise what it is, for the error message."""
    if isinstance(address, IPv6Address):
        inner = embedded_ipv4(address)
        if inner is not None:
            why = refusal(inner)
            return None if why is None else f"which embeds {inner}, {why}"
        if address in LOCAL_NAT64:
            return f"a local-use NAT64 address ({LOCAL_NAT64})"
    if address.is_multicast or not address.is_global:
        return WHAT
    return None


def within(address: Address, networks: tuple[Network, ...]) -> bool:
    """True when `address`, or the IPv4 address it embeds, is in one of `networks`."""
    candidates: list[Address] = [address]
    if isinstance(address, IPv6Address) and (inner := embedded_ipv4(address)) is not None:
        candidates.append(inner)
    return any(candidate in network for candidate in candidates for network in networks
               if candidate.version == network.version)


def parse(text: str) -> Address:
    """An address as getaddrinfo gives it (an IPv6 one may carry a %scope)."""
    return ipaddress.ip_address(text)
