"""Where a webhook's URL points: refused unless every address its host resolves to is public
(`DESK_WEBHOOKS_ALLOW_PRIVATE` lifts it), IPv6 forms that reach an IPv4 address inside
included; and a delivery sent to the address checked, never to a second lookup's answer."""

from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit

from django.conf import settings


def url_refusal(url: str) -> str | None:
    """Why this URL may not receive webhooks, or None. Resolves the host now."""
    return resolve_target(url)[0]


def resolve_target(url: str) -> tuple[str | None, str | None]:
    """(why this URL may not receive webhooks, or None; the address to send to).

    Every address the name resolves to must be global (not private, loopback, link-local,
    shared, reserved or multicast) unless DESK_WEBHOOKS_ALLOW_PRIVATE is set. A delivery is
    sent to the address checked here, never to a second lookup's answer, so a name that
    changes between the check and the request (DNS rebinding) cannot reach an inside host.
    """
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "the URL must be http or https with a host", None
    if parts.username or parts.password:
        return "the URL may not carry credentials", None
    try:
        infos = socket.getaddrinfo(parts.hostname, parts.port or 443, proto=socket.IPPROTO_TCP)
    except (socket.gaierror, UnicodeError, ValueError):
        return f"the host {parts.hostname!r} does not resolve", None
    addresses = [ipaddress.ip_address(info[4][0].split("%", 1)[0]) for info in infos]
    if not settings.DESK_WEBHOOKS_ALLOW_PRIVATE:
        for address in addresses:
            if not all(_public(inner) for inner in (address, *_embedded_ipv4(address))):
                return f"the host {parts.hostname!r} resolves to a non-public address ({address})", None
    return None, str(addresses[0]) if addresses else None


def _public(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """Global and unicast: Python counts some multicast groups (224.0.0.1, ff02::1, every
    host on the link) as global, and IPv6 site-local (fec0::/10, deprecated) too."""
    return address.is_global and not address.is_multicast and not getattr(address, "is_site_local", False)


# NAT64's well-known prefixes (RFC 6052, RFC 8215): a gateway there forwards to the IPv4 address
# in the last 32 bits. Python counts 64:ff9b::a00:1 as global although it reaches 10.0.0.1.
_NAT64 = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("64:ff9b:1::/48"))
# SIIT's IPv4-translated addresses (RFC 2765, ::ffff:0:a.b.c.d): a stateless translator takes
# them to the IPv4 address in the last 32 bits, and Python counts ::ffff:0:a00:1 as global too.
_IPV4_TRANSLATED = ipaddress.ip_network("::ffff:0:0:0/96")


def _embedded_ipv4(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses an IPv6 address reaches through a translator or a tunnel: mapped
    (::ffff:a.b.c.d), compatible (::a.b.c.d), 6to4 (2002::/16), Teredo (2001::/32), NAT64,
    IPv4-translated (::ffff:0:a.b.c.d)."""
    if not isinstance(address, ipaddress.IPv6Address):
        return []
    inner = [address.ipv4_mapped, address.sixtofour, *(address.teredo or ())]
    low = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    if int(address) >> 32 == 0 or any(address in network for network in (*_NAT64, _IPV4_TRANSLATED)):
        inner.append(low)
    return [a for a in inner if a is not None]


def pinned(url: str, address: str) -> tuple[str, dict[str, str], dict[str, str]]:
    """`url` with its host replaced by `address`; the Host header and, for https, the name
    TLS checks the certificate against (SNI) stay the original host's."""
    parts = urlsplit(url)
    host = f"[{address}]" if ":" in address else address
    netloc = f"{host}:{parts.port}" if parts.port else host
    original = parts.netloc.rsplit("@", 1)[-1]
    extensions = {"sni_hostname": parts.hostname} if parts.scheme == "https" and parts.hostname else {}
    return parts._replace(netloc=netloc).geturl(), {"Host": original}, extensions
