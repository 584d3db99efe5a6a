"""``http_get``: fetch a web page for a model, bounded in bytes and in wall time.

The body is streamed and reading stops at ``max_bytes``, so a huge or endless response
costs no more than the limit; only http and https URLs are fetched. A model must not reach
what only the worker can: every host (the first and each redirect's) is resolved here and
refused if any of its addresses is loopback, private, link-local (cloud metadata),
multicast or otherwise not global, or an IPv6 address carrying such an IPv4 address (NAT64,
6to4, Teredo, IPv4-mapped or -compatible ...: a translator or tunnel delivers to that),
unless the team file allows it (``http_allow``); the request then goes to the address that
was checked, so a second DNS answer cannot differ.
"""

from __future__ import annotations

import codecs
import ipaddress
import socket
from collections.abc import Sequence
from typing import Annotated

import anyio
import httpx2
import msgspec

from ._base import StructTool
from .errors import ToolError

ALLOWED_SCHEMES = frozenset({"http", "https"})


class HttpGetArgs(msgspec.Struct, forbid_unknown_fields=True):
    url: Annotated[str, msgspec.Meta(description="An http:// or https:// URL to GET.")]


class HttpGetTool(StructTool[HttpGetArgs]):
    """GETs a URL and returns the status line and the body as text (4xx/5xx included)."""

    name = "http_get"
    args_type = HttpGetArgs

    def __init__(
        self, *, timeout: float = 15.0, max_bytes: int = 200_000, max_redirects: int = 5,
        allow: Sequence[str] = (),
    ) -> None:
        self.timeout = timeout
        """Seconds for the whole request, connect to last byte read."""
        self.max_bytes = max_bytes
        """Body bytes kept; the rest is not read."""
        self.max_redirects = max_redirects
        self.allow_hosts = {a.lower() for a in allow if not _network(a)}
        """Host names fetched whatever their addresses."""
        self.allow_networks = [n for a in allow if (n := _network(a))]
        """Non-global networks that may be fetched nonetheless (``10.0.0.0/8`` ...)."""
        self.description = (
            "Fetch a URL with HTTP GET and return the status and the body as text "
            f"(the first {max_bytes} bytes). Only http and https URLs."
        )

    async def call(self, args: HttpGetArgs) -> str:
        url = _checked_url(args.url)
        with anyio.move_on_after(self.timeout) as scope:
            return await self._fetch(url)
        assert scope.cancelled_caught
        raise ToolError(f"GET {args.url} timed out after {self.timeout:g} s")

    async def _fetch(self, url: httpx2.URL) -> str:
        try:
            async with httpx2.AsyncClient(
                timeout=self.timeout, follow_redirects=False, trust_env=False,
                headers={"Accept-Encoding": "identity"},
            ) as client:
                for _ in range(self.max_redirects + 1):
                    address = await self._checked_address(url)
                    async with client.stream(
                        "GET", url.copy_with(host=address),
                        headers={"Host": url.netloc.decode("ascii")},
                        extensions={"sni_hostname": url.host},
                    ) as response:
                        location = response.headers.get("location")
                        if response.is_redirect and location:
                            url = _checked_url(str(url.join(location)))
                            continue
                        body, truncated = await self._read_body(response)
                        status = f"HTTP {response.status_code} {response.reason_phrase}"
                        encoding = _encoding(response.charset_encoding)
                        break
                else:
                    raise ToolError(f"GET {url}: more than {self.max_redirects} redirects")
        except httpx2.TimeoutException:
            raise ToolError(f"GET {url} timed out after {self.timeout:g} s") from None
        except httpx2.HTTPError as exc:
            raise ToolError(f"GET {url} failed: {type(exc).__name__}: {exc}") from None
        text = body.decode(encoding, errors="replace")
        note = f"\n[truncated: only the first {self.max_bytes} bytes shown]" if truncated else ""
        return f"{status.rstrip()}\n\n{text}{note}"

    async def _checked_address(self, url: httpx2.URL) -> str:
        """The address to connect to for ``url``'s host, once every address it resolves
        to is one a model may reach."""
        port = url.port or (443 if url.scheme == "https" else 80)
        try:
            found = await anyio.getaddrinfo(url.host, port, type=socket.SOCK_STREAM)
        except OSError as exc:
            raise ToolError(f"GET {url}: cannot resolve {url.host} ({exc})") from None
        addresses = [ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in found]
        if url.host.lower() not in self.allow_hosts:
            for ip in addresses:
                if not self._reachable(ip):
                    carried = carried_ipv4(ip) if isinstance(ip, ipaddress.IPv6Address) else []
                    carrying = f" (carrying {', '.join(map(str, carried))})" if carried else ""
                    raise ToolError(
                        f"GET {url} refused: {url.host} is {ip}{carrying}, a loopback, "
                        "private, link-local or reserved address; add it to http_allow in the "
                        "team file if the model may reach it")
        return str(addresses[0])

    def _reachable(self, ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
        """Allowed by the team file, or global and not multicast, and so is every IPv4
        address it carries (a translator or tunnel on the way would deliver to that)."""
        if any(ip in network for network in self.allow_networks):
            return True
        if isinstance(ip, ipaddress.IPv6Address):
            if ip.ipv4_mapped is not None:  # the socket speaks IPv4 to it
                return self._reachable(ip.ipv4_mapped)
            if ip in NAT64_LOCAL or not all(map(self._reachable, carried_ipv4(ip))):
                return False
        return ip.is_global and not ip.is_multicast

    async def _read_body(self, response: httpx2.Response) -> tuple[bytes, bool]:
        body = bytearray()
        async for chunk in response.aiter_bytes():
            body += chunk
            if len(body) > self.max_bytes:
                return bytes(body[: self.max_bytes]), True
        return bytes(body), False


NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
"""The well-known NAT64 prefix (RFC 6052): the last 32 bits are the IPv4 address reached."""
NAT64_LOCAL = ipaddress.IPv6Network("64:ff9b:1::/48")
"""Local-use NAT64 (RFC 8215), refused whole: where the IPv4 address sits in it is each
network's choice."""


def carried_ipv4(ip: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses ``ip`` embeds: IPv4-mapped (``::ffff:a.b.c.d``), -compatible
    (``::a.b.c.d``), -translated (``::ffff:0:a.b.c.d``), NAT64 (``64:ff9b::a.b.c.d``), 6to4
    (``2002:AABB:CCDD::``), Teredo (server and client, the client's bits inverted) and
    ISATAP (an interface id of ``[02]00:5efe:a.b.c.d``)."""
    value = int(ip)
    low = ipaddress.IPv4Address(value & 0xFFFF_FFFF)
    first_96 = value >> 32
    isatap = first_96 & 0xFCFF_FFFF == 0x0000_5EFE  # the u/g bits of the id may be set
    found = []
    if ip.ipv4_mapped is not None:
        found.append(ip.ipv4_mapped)
    if first_96 in (0, 0xFFFF_0000) or ip in NAT64 or isatap:
        found.append(low)
    if ip.sixtofour is not None:
        found.append(ip.sixtofour)
    if ip.teredo is not None:
        found.extend(ip.teredo)
    return found


def _checked_url(url: str) -> httpx2.URL:
    try:
        parsed = httpx2.URL(url)
    except httpx2.InvalidURL as exc:
        raise ToolError(f"not a valid URL: {url!r} ({exc})") from None
    if parsed.scheme not in ALLOWED_SCHEMES:
        raise ToolError(f"only http:// and https:// URLs can be fetched, not {url!r}")
    if not parsed.host:
        raise ToolError(f"URL has no host: {url!r}")
    return parsed


def _network(text: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
    """``text`` as an address or network (``127.0.0.1``, ``10.0.0.0/8``), or None for a
    host name."""
    try:
        return ipaddress.ip_network(text, strict=False)
    except ValueError:
        return None


def _encoding(charset: str | None) -> str:
    """The response's declared charset if Python knows it, else UTF-8."""
    if charset:
        try:
            return codecs.lookup(charset).name
        except LookupError:
            pass
    return "utf-8"
